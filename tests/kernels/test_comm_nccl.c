/* test_comm_nccl.c - the NCCL communicator (src/parallel/comm_nccl.c) on the devices there are.
 *
 * One rank per visible device (one thread each, as the engine's ranks):
 * the all-reduce leaves every rank the sum of every rank's buffer (fp32
 * exactly for small integers; bf16 and fp16 too), the gather puts every
 * rank's buffer on rank 0 in rank order, the barrier returns, and the
 * step timing's all-reduce seconds are positive and then reset. With one
 * device that is world size 1 (NCCL with N=1: the all-reduce is the
 * identity). Two ranks on one device are refused with the hint. Exits 77
 * (skipped) without a CUDA device or without NCCL in the build.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernel_test.h"
#include "servelab/comm.h"
#include "servelab/dtype.h"
#include "test.h"

#ifdef SERVELAB_HAVE_NCCL

#define N_ELEMS 4099 /* not a multiple of anything NCCL chunks by */
#define MAX_RANKS 8

typedef struct {
    sl_comm_t *comm;
    int rank, device;
    cudaStream_t stream;
    int bad;
} rank_t;

static const sl_dtype_t DTS[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};

static void *rank_main(void *p) {
    rank_t *r = p;
    KT_CUDA(cudaSetDevice(r->device));
    int size = r->comm->size;
    for (size_t d = 0; d < sizeof DTS / sizeof DTS[0]; d++) {
        sl_dtype_t dt = DTS[d];
        size_t es = dtype_size(dt);
        /* Small integers: exact in every dtype, so the sum has one right answer. */
        float *host = malloc(N_ELEMS * sizeof(float)), *back = malloc(N_ELEMS * sizeof(float));
        uint8_t *raw = malloc(N_ELEMS * es);
        for (int i = 0; i < N_ELEMS; i++) host[i] = (float)((i + 3 * r->rank) % 17);
        dtype_from_f32(raw, host, dt, N_ELEMS);
        void *buf, *recv = NULL;
        KT_CUDA(cudaMalloc(&buf, N_ELEMS * es));
        if (r->rank == 0) KT_CUDA(cudaMalloc(&recv, (size_t)size * 64 * es));
        KT_CUDA(cudaMemcpy(buf, raw, N_ELEMS * es, cudaMemcpyHostToDevice));
        r->comm->all_reduce_sum(r->comm, r->rank, buf, N_ELEMS, dt);
        r->comm->gather(r->comm, r->rank, buf, recv, 64, dt);
        r->comm->barrier(r->comm, r->rank);
        KT_CUDA(cudaMemcpy(raw, buf, N_ELEMS * es, cudaMemcpyDeviceToHost));
        dtype_to_f32(back, raw, dt, N_ELEMS);
        for (int i = 0; i < N_ELEMS; i++) {
            float want = 0.0f;
            for (int q = 0; q < size; q++) want += (float)((i + 3 * q) % 17);
            r->bad += back[i] != want;
        }
        if (r->rank == 0) {
            /* Every rank's first 64 elements after the all-reduce: the same sums. */
            uint8_t *g = malloc((size_t)size * 64 * es);
            float *gf = malloc((size_t)size * 64 * sizeof(float));
            KT_CUDA(cudaMemcpy(g, recv, (size_t)size * 64 * es, cudaMemcpyDeviceToHost));
            dtype_to_f32(gf, g, dt, size * 64);
            for (int q = 0; q < size; q++)
                for (int i = 0; i < 64; i++) r->bad += gf[q * 64 + i] != back[i];
            free(g);
            free(gf);
            KT_CUDA(cudaFree(recv));
        }
        KT_CUDA(cudaFree(buf));
        free(host), free(back), free(raw);
    }
    return NULL;
}

static void test_collectives_on_every_device(void) {
    int n = 0;
    KT_CUDA(cudaGetDeviceCount(&n));
    if (n > MAX_RANKS) n = MAX_RANKS;
    int devices[MAX_RANKS];
    void *streams[MAX_RANKS];
    rank_t ranks[MAX_RANKS];
    for (int d = 0; d < n; d++) {
        devices[d] = d;
        KT_CUDA(cudaSetDevice(d));
        cudaStream_t st;
        KT_CUDA(cudaStreamCreate(&st));
        streams[d] = st;
    }
    sl_err_t err;
    sl_comm_t *c = comm_nccl_new(n, devices, streams, &err);
    if (!c) fprintf(stderr, "  comm_nccl_new: %s\n", err.msg);
    SL_ASSERT(c);
    pthread_t th[MAX_RANKS];
    for (int r = 0; r < n; r++) {
        ranks[r] = (rank_t){.comm = c, .rank = r, .device = r, .stream = streams[r]};
        SL_ASSERT(pthread_create(&th[r], NULL, rank_main, &ranks[r]) == 0);
    }
    int bad = 0;
    for (int r = 0; r < n; r++) {
        pthread_join(th[r], NULL);
        bad += ranks[r].bad;
    }
    char msg[SL_ERR_LEN];
    int failed = c->last_error(c, msg, sizeof msg);
    if (failed) fprintf(stderr, "  %s\n", msg);
    printf("  %d ranks on %d devices: %d wrong elements\n", n, n, bad);
    CHECK(!failed);
    CHECK_EQ_INT(bad, 0);
    double s = comm_take_reduce_s(c);
    CHECK(s > 0.0 && comm_take_reduce_s(c) == 0.0);
    c->free(c);
    for (int d = 0; d < n; d++) {
        KT_CUDA(cudaSetDevice(d));
        KT_CUDA(cudaStreamDestroy((cudaStream_t)streams[d]));
    }
}

static void test_two_ranks_on_one_device_are_refused(void) {
    int devices[2] = {0, 0};
    void *streams[2] = {NULL, NULL};
    sl_err_t err;
    sl_comm_t *c = comm_nccl_new(2, devices, streams, &err);
    if (c) c->free(c);
    CHECK(c == NULL);
    if (!c) printf("  %s\n", err.msg);
}

int main(void) {
    kt_require_gpu();
    char v[32];
    printf("NCCL %s\n", comm_nccl_version(v, sizeof v) ? v : "(version unknown)");
    RUN(test_collectives_on_every_device);
    RUN(test_two_ranks_on_one_device_are_refused);
    return test_summary();
}

#else

int main(void) {
    printf("this build has no NCCL: skipped\n");
    return 77;
}

#endif
