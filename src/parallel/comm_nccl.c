/* comm_nccl.c - the NCCL communicator (see comm.h): CUDA ranks, one device each, in one process.
 *
 * One NCCL communicator per rank from ncclCommInitAll over the ranks'
 * devices (one process drives every device, as each rank is a thread of
 * it). Each rank calls every collective from its own thread on its own
 * stream, so no ncclGroupStart/End is needed around a single collective
 * (NCCL asks for a group only when one thread drives several devices).
 * - all-reduce: ncclAllReduce in place, ncclSum, in the buffer's dtype
 *   (fp32, bf16 or fp16, as vLLM's all-reduce of the activations);
 * - gather: NCCL has none; rank 0 receives every other rank's buffer
 *   (ncclRecv) inside one group, each other rank sends (ncclSend); rank 0's
 *   own part is a device copy;
 * - barrier: the rank's stream drained, then a host barrier.
 * The step timing's all-reduce share comes from CUDA events around each of
 * rank 0's all-reduces, read (and the events reset) by comm_take_reduce_s
 * after the step. A failed call is recorded (the first message kept) and
 * the collectives after it do nothing; last_error reports it, as the CUDA
 * backend's own op failures are reported (ops.h).
 * The lab's allreduce_delay: after each all-reduce, a host function on the
 * rank's stream (cudaLaunchHostFunc) sleeps for the delay, so the stream,
 * and everything the rank enqueues after the collective, really waits; the
 * events around the all-reduce take the wait in, as a slow link's would.
 */
#define _POSIX_C_SOURCE 200809L
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "servelab/comm.h"
#include "servelab/core.h"

#define MAX_TIMED 512 /* rank 0's all-reduces timed per step (a Llama step makes 2 x layers + 1) */

/* The delay of one slowed all-reduce, slept on the stream by a host function.
 * The host function may not call CUDA; it only sleeps. */
static void CUDART_CB sleep_on_stream(void *arg) {
    double s = *(const double *)arg;
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0) {}
}

typedef struct {
    int *devices;
    cudaStream_t *streams;
    ncclComm_t *comms;
    sl_barrier_t *bar;
    /* Rank 0's timing: an event pair per all-reduce since the last take. */
    cudaEvent_t ev[MAX_TIMED][2];
    int n_timed;
    /* allreduce_delay: each rank's delays of the step, read by its stream's host functions. */
    double (*delays)[MAX_TIMED];
    int *n_delays;
    /* The first failure (any rank), under mu. */
    pthread_mutex_t mu;
    int failed;
    char msg[SL_ERR_LEN];
} nccl_t;

static void record(nccl_t *N, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void record(nccl_t *N, const char *fmt, ...) {
    pthread_mutex_lock(&N->mu);
    if (!N->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(N->msg, sizeof N->msg, fmt, ap);
        va_end(ap);
        N->failed = 1;
    }
    pthread_mutex_unlock(&N->mu);
}

static int nccl_ok(nccl_t *N, ncclResult_t r, const char *what) {
    if (r == ncclSuccess) return 1;
    record(N, "NCCL error: %s (%s)", ncclGetErrorString(r), what);
    return 0;
}

static int cuda_ok(nccl_t *N, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    record(N, "CUDA error: %s (%s)", cudaGetErrorString(e), what);
    return 0;
}

static int nccl_type(sl_dtype_t dt, ncclDataType_t *t) {
    switch (dt) {
    case DTYPE_F32: *t = ncclFloat32; return 1;
    case DTYPE_BF16: *t = ncclBfloat16; return 1;
    case DTYPE_F16: *t = ncclFloat16; return 1;
    default: return 0;
    }
}

static void nccl_all_reduce(sl_comm_t *c, int rank, void *buf, int64_t n, sl_dtype_t dt) {
    nccl_t *N = c->impl;
    ncclDataType_t t;
    SL_ASSERT(nccl_type(dt, &t));
    if (N->failed) return;
    cudaStream_t st = N->streams[rank];
    int timed = rank == 0 && N->n_timed < MAX_TIMED;
    if (timed) cuda_ok(N, cudaEventRecord(N->ev[N->n_timed][0], st), "cudaEventRecord");
    nccl_ok(N, ncclAllReduce(buf, buf, (size_t)n, t, ncclSum, N->comms[rank], st), "ncclAllReduce");
    if (c->delay_s > 0 || c->delay_gbps > 0) {
        /* A slot per all-reduce of the step (a slot is read when its host
         * function runs, before the step's end, so the ring wraps safely). */
        double *d = &N->delays[rank][N->n_delays[rank]++ % MAX_TIMED];
        *d = c->delay_s + (c->delay_gbps > 0 ? (double)n * (double)dtype_size(dt) / (c->delay_gbps * 1e9) : 0.0);
        cuda_ok(N, cudaLaunchHostFunc(st, sleep_on_stream, d), "cudaLaunchHostFunc");
    }
    if (timed) {
        cuda_ok(N, cudaEventRecord(N->ev[N->n_timed][1], st), "cudaEventRecord");
        N->n_timed++;
    }
}

static void nccl_gather(sl_comm_t *c, int rank, const void *send, void *recv, int64_t n, sl_dtype_t dt) {
    nccl_t *N = c->impl;
    ncclDataType_t t;
    SL_ASSERT(nccl_type(dt, &t));
    if (N->failed) return;
    cudaStream_t st = N->streams[rank];
    size_t bytes = (size_t)n * dtype_size(dt);
    if (rank != 0) {
        nccl_ok(N, ncclSend(send, (size_t)n, t, 0, N->comms[rank], st), "ncclSend");
        return;
    }
    cuda_ok(N, cudaMemcpyAsync(recv, send, bytes, cudaMemcpyDeviceToDevice, st), "cudaMemcpyAsync");
    if (!nccl_ok(N, ncclGroupStart(), "ncclGroupStart")) return;
    for (int r = 1; r < c->size; r++)
        nccl_ok(N, ncclRecv((uint8_t *)recv + (size_t)r * bytes, (size_t)n, t, r, N->comms[0], st), "ncclRecv");
    nccl_ok(N, ncclGroupEnd(), "ncclGroupEnd");
}

static void nccl_barrier(sl_comm_t *c, int rank) {
    nccl_t *N = c->impl;
    cuda_ok(N, cudaStreamSynchronize(N->streams[rank]), "cudaStreamSynchronize");
    barrier_wait(N->bar);
}

static double nccl_take_reduce_s(sl_comm_t *c) {
    nccl_t *N = c->impl;
    double s = 0.0;
    for (int i = 0; i < N->n_timed; i++) {
        float ms = 0.0f;
        if (cuda_ok(N, cudaEventSynchronize(N->ev[i][1]), "cudaEventSynchronize") &&
            cuda_ok(N, cudaEventElapsedTime(&ms, N->ev[i][0], N->ev[i][1]), "cudaEventElapsedTime"))
            s += ms / 1000.0;
    }
    N->n_timed = 0;
    return s;
}

static int nccl_last_error(sl_comm_t *c, char *msg, size_t cap) {
    nccl_t *N = c->impl;
    pthread_mutex_lock(&N->mu);
    int failed = N->failed;
    if (failed) snprintf(msg, cap, "%s", N->msg);
    pthread_mutex_unlock(&N->mu);
    return failed;
}

static void nccl_free(sl_comm_t *c) {
    if (!c) return;
    nccl_t *N = c->impl;
    for (int r = 0; r < c->size; r++)
        if (N->comms[r]) ncclCommDestroy(N->comms[r]);
    if (N->ev[0][0]) { /* created after the communicators, on rank 0's device */
        cudaSetDevice(N->devices[0]);
        for (int i = 0; i < MAX_TIMED; i++) {
            if (N->ev[i][0]) cudaEventDestroy(N->ev[i][0]);
            if (N->ev[i][1]) cudaEventDestroy(N->ev[i][1]);
        }
    }
    barrier_free(N->bar);
    free(N->delays);
    free(N->n_delays);
    pthread_mutex_destroy(&N->mu);
    free(N->devices);
    free(N->streams);
    free(N->comms);
    free(N);
    free(c->reduce_s);
    free(c);
}

sl_comm_t *comm_nccl_new(int size, const int *devices, void *const *streams, sl_err_t *err) {
    nccl_t *N = sl_calloc(1, sizeof *N);
    pthread_mutex_init(&N->mu, NULL);
    N->devices = sl_malloc((size_t)size * sizeof *N->devices);
    N->streams = sl_malloc((size_t)size * sizeof *N->streams);
    N->comms = sl_calloc((size_t)size, sizeof *N->comms);
    N->bar = barrier_new(size);
    N->delays = sl_calloc((size_t)size, sizeof *N->delays);
    N->n_delays = sl_calloc((size_t)size, sizeof *N->n_delays);
    memcpy(N->devices, devices, (size_t)size * sizeof *devices);
    for (int r = 0; r < size; r++) N->streams[r] = (cudaStream_t)streams[r];
    sl_comm_t *c = sl_calloc(1, sizeof *c);
    *c = (sl_comm_t){.name = "nccl", .size = size, .impl = N, .all_reduce_sum = nccl_all_reduce,
                     .gather = nccl_gather, .barrier = nccl_barrier, .free = nccl_free,
                     .take_reduce_s = nccl_take_reduce_s, .last_error = nccl_last_error,
                     .reduce_s = sl_calloc((size_t)size, sizeof(double))};
    ncclResult_t r = ncclCommInitAll(N->comms, size, devices);
    if (r != ncclSuccess) {
        sl_fail(err, "NCCL error: %s (ncclCommInitAll over %d devices)%s", ncclGetErrorString(r), size,
                r == ncclInvalidUsage ? ". Hint: NCCL refuses two ranks on one device (Duplicate GPU detected)" : "");
        memset(N->comms, 0, (size_t)size * sizeof *N->comms);
        nccl_free(c);
        return NULL;
    }
    cudaError_t e = cudaSetDevice(devices[0]);
    for (int i = 0; i < MAX_TIMED && e == cudaSuccess; i++) {
        e = cudaEventCreate(&N->ev[i][0]);
        if (e == cudaSuccess) e = cudaEventCreate(&N->ev[i][1]);
    }
    if (e != cudaSuccess) {
        sl_fail(err, "CUDA error: %s (cudaEventCreate for the all-reduce timing)", cudaGetErrorString(e));
        nccl_free(c);
        return NULL;
    }
    return c;
}

const char *comm_nccl_version(char *buf, size_t cap) {
    int v = 0;
    if (ncclGetVersion(&v) != ncclSuccess) return NULL;
    /* NCCL_VERSION(X, Y, Z) = X * 10000 + Y * 100 + Z since 2.9. */
    snprintf(buf, cap, "%d.%d.%d", v / 10000, v / 100 % 100, v % 100);
    return buf;
}
