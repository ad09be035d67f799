/* comm_local.c - the local communicator (see comm.h): tensor-parallel ranks as threads of one
 * process, collectives through shared host memory.
 *
 * All-reduce is a reduce-scatter and an all-gather over shared memory, as
 * vLLM's CPU backend does it (its shared-memory all-reduce) but with threads:
 * each rank publishes its buffer; after a barrier, rank r sums the r-th slice
 * of every rank's buffer, in rank order, into one shared result; after a
 * second barrier each rank copies the result into its own buffer. Every rank
 * then holds the same bits, and which thread sums a slice never changes the
 * order of the additions. The next collective's first barrier is what keeps
 * a rank from reusing the result (or its buffer) before the others are done
 * with it: no third barrier.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "servelab/comm.h"
#include "servelab/core.h"
#include "servelab/ops.h"
#include "servelab/parallel.h"

/* ---- the barrier --------------------------------------------------------------- */

/* How long a waiting rank spins before it sleeps: its peers run the same ops
 * on shards of the same size, so they usually arrive within microseconds;
 * beyond that the machine is oversubscribed and spinning takes a core from
 * the rank being waited for. */
#define BARRIER_SPIN_S 20e-6

struct sl_barrier {
    int n;
    _Alignas(64) atomic_int count;
    _Alignas(64) atomic_uint gen;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

sl_barrier_t *barrier_new(int n) {
    sl_barrier_t *b = sl_calloc(1, sizeof *b);
    b->n = n;
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->cv, NULL);
    return b;
}

void barrier_free(sl_barrier_t *b) {
    if (!b) return;
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->cv);
    free(b);
}

void barrier_wait(sl_barrier_t *b) {
    unsigned g = atomic_load(&b->gen);
    if (atomic_fetch_add(&b->count, 1) == b->n - 1) {
        /* The last to arrive: reset the count before releasing anyone, so
         * a rank that runs ahead into the next round counts in that one. */
        atomic_store(&b->count, 0);
        pthread_mutex_lock(&b->mu);
        atomic_fetch_add(&b->gen, 1);
        pthread_cond_broadcast(&b->cv);
        pthread_mutex_unlock(&b->mu);
        return;
    }
    double deadline = 0.0;
    for (unsigned i = 1; atomic_load_explicit(&b->gen, memory_order_acquire) == g; i++) {
        if (i % 64 == 0) {
            double now = sl_now_s();
            if (deadline == 0.0) deadline = now + BARRIER_SPIN_S;
            else if (now > deadline) break;
        }
        parallel_relax();
    }
    pthread_mutex_lock(&b->mu);
    while (atomic_load(&b->gen) == g) pthread_cond_wait(&b->cv, &b->mu);
    pthread_mutex_unlock(&b->mu);
}

/* ---- the communicator ------------------------------------------------------------ */

typedef struct {
    int64_t max_elems;
    sl_barrier_t *bar;
    void **bufs;        /* (size) each rank's buffer of the collective under way */
    float *sum;         /* (max_elems) the all-reduce's result */
    void *recv;         /* rank 0's gather destination */
} local_t;

/* The lab's slow interconnect: sleeps to within 100 us of `t`, then spins
 * (a sleep overshoots by tens of microseconds, an all-reduce's whole
 * length on a fast link). */
static void wait_until(double t) {
    for (double left; (left = t - sl_now_s()) > 0;) {
        if (left > 150e-6) {
            struct timespec ts = {.tv_sec = (time_t)(left - 100e-6), .tv_nsec = 0};
            ts.tv_nsec = (long)((left - 100e-6 - (double)ts.tv_sec) * 1e9);
            nanosleep(&ts, NULL);
        } else {
            parallel_relax();
        }
    }
}

static void local_all_reduce(sl_comm_t *c, int rank, void *buf, int64_t n, sl_dtype_t dt) {
    local_t *L = c->impl;
    SL_ASSERT(dt == DTYPE_F32 && n <= L->max_elems);
    double t0 = sl_now_s();
    L->bufs[rank] = buf;
    barrier_wait(L->bar);
    int64_t i0 = n * rank / c->size, i1 = n * (rank + 1) / c->size;
    const float *b0 = L->bufs[0];
    for (int64_t i = i0; i < i1; i++) L->sum[i] = b0[i];
    for (int r = 1; r < c->size; r++) {
        const float *br = L->bufs[r];
        for (int64_t i = i0; i < i1; i++) L->sum[i] += br[i];
    }
    barrier_wait(L->bar);
    memcpy(buf, L->sum, (size_t)n * sizeof(float));
    if (c->delay_s > 0 || c->delay_gbps > 0)
        wait_until(sl_now_s() + c->delay_s +
                   (c->delay_gbps > 0 ? (double)n * sizeof(float) / (c->delay_gbps * 1e9) : 0.0));
    c->reduce_s[rank] += sl_now_s() - t0;
}

static void local_gather(sl_comm_t *c, int rank, const void *send, void *recv, int64_t n, sl_dtype_t dt) {
    local_t *L = c->impl;
    if (rank == 0) L->recv = recv;
    barrier_wait(L->bar);
    size_t bytes = (size_t)n * dtype_size(dt);
    memcpy((uint8_t *)L->recv + (size_t)rank * bytes, send, bytes);
    barrier_wait(L->bar);
}

static void local_barrier(sl_comm_t *c, int rank) {
    (void)rank;
    barrier_wait(((local_t *)c->impl)->bar);
}

static void local_free(sl_comm_t *c) {
    if (!c) return;
    local_t *L = c->impl;
    barrier_free(L->bar);
    free(L->bufs);
    free(L->sum);
    free(L);
    free(c->reduce_s);
    free(c);
}

sl_comm_t *comm_local_new(int size, int64_t max_elems) {
    local_t *L = sl_calloc(1, sizeof *L);
    L->max_elems = max_elems;
    L->bar = barrier_new(size);
    L->bufs = sl_calloc((size_t)size, sizeof *L->bufs);
    L->sum = sl_malloc((size_t)(max_elems > 0 ? max_elems : 1) * sizeof(float));
    sl_comm_t *c = sl_calloc(1, sizeof *c);
    *c = (sl_comm_t){.name = "local", .size = size, .impl = L, .all_reduce_sum = local_all_reduce,
                     .gather = local_gather, .barrier = local_barrier, .free = local_free,
                     .reduce_s = sl_calloc((size_t)size, sizeof(double))};
    return c;
}

/* ---- the shared-device communicator (comm.h) ------------------------------------ */

typedef struct {
    sl_comm_t *inner;               /* the local communicator over the staging */
    const sl_ops_t **rank_ops;      /* (size) a copy: the caller's array may be gone */
    uint8_t **raw;                  /* (size) a rank's buffer as downloaded */
    float **f32;                    /* (size) the same widened */
    int64_t max_elems;
} staged_t;

static void staged_all_reduce(sl_comm_t *c, int rank, void *buf, int64_t n, sl_dtype_t dt) {
    staged_t *S = c->impl;
    const sl_ops_t *o = S->rank_ops[rank];
    SL_ASSERT(n <= S->max_elems);
    size_t bytes = (size_t)n * dtype_size(dt);
    S->inner->delay_s = c->delay_s, S->inner->delay_gbps = c->delay_gbps;
    o->download(o->ctx, S->raw[rank], buf, bytes);
    dtype_to_f32(S->f32[rank], S->raw[rank], dt, n);
    S->inner->all_reduce_sum(S->inner, rank, S->f32[rank], n, DTYPE_F32);
    dtype_from_f32(S->raw[rank], S->f32[rank], dt, n);
    o->upload(o->ctx, buf, S->raw[rank], bytes);
}

static void staged_gather(sl_comm_t *c, int rank, const void *send, void *recv, int64_t n, sl_dtype_t dt) {
    staged_t *S = c->impl;
    const sl_ops_t *o = S->rank_ops[rank];
    size_t bytes = (size_t)n * dtype_size(dt);
    SL_ASSERT((int64_t)bytes * c->size <= S->max_elems * (int64_t)sizeof(float));
    o->download(o->ctx, S->raw[rank], send, bytes);
    /* Rank 0 gathers into its f32 staging (as bytes), then uploads it. */
    S->inner->gather(S->inner, rank, S->raw[rank], rank == 0 ? (void *)S->f32[0] : NULL, (int64_t)bytes, DTYPE_U8);
    if (rank == 0) o->upload(o->ctx, recv, S->f32[0], bytes * (size_t)c->size);
}

static void staged_barrier(sl_comm_t *c, int rank) {
    staged_t *S = c->impl;
    S->inner->barrier(S->inner, rank);
}

static double staged_take_reduce_s(sl_comm_t *c) { return comm_take_reduce_s(((staged_t *)c->impl)->inner); }

static void staged_free(sl_comm_t *c) {
    if (!c) return;
    staged_t *S = c->impl;
    for (int r = 0; r < c->size; r++) {
        free(S->raw[r]);
        free(S->f32[r]);
    }
    free(S->raw);
    free(S->f32);
    free(S->rank_ops);
    S->inner->free(S->inner);
    free(S);
    free(c->reduce_s);
    free(c);
}

sl_comm_t *comm_staged_new(int size, int64_t max_elems, const sl_ops_t *const *rank_ops) {
    staged_t *S = sl_calloc(1, sizeof *S);
    S->inner = comm_local_new(size, max_elems);
    S->rank_ops = sl_malloc((size_t)size * sizeof *S->rank_ops);
    memcpy(S->rank_ops, rank_ops, (size_t)size * sizeof *S->rank_ops);
    S->max_elems = max_elems;
    S->raw = sl_calloc((size_t)size, sizeof *S->raw);
    S->f32 = sl_calloc((size_t)size, sizeof *S->f32);
    for (int r = 0; r < size; r++) {
        S->raw[r] = sl_malloc((size_t)(max_elems > 0 ? max_elems : 1) * sizeof(float));
        S->f32[r] = sl_malloc((size_t)(max_elems > 0 ? max_elems : 1) * sizeof(float));
    }
    sl_comm_t *c = sl_calloc(1, sizeof *c);
    *c = (sl_comm_t){.name = "shared-device (test-only)", .size = size, .impl = S,
                     .all_reduce_sum = staged_all_reduce, .gather = staged_gather, .barrier = staged_barrier,
                     .free = staged_free, .take_reduce_s = staged_take_reduce_s,
                     .reduce_s = sl_calloc((size_t)size, sizeof(double))};
    return c;
}

double comm_take_reduce_s(sl_comm_t *c) {
    if (c->take_reduce_s) return c->take_reduce_s(c);
    double s = c->reduce_s[0];
    c->reduce_s[0] = 0.0;
    return s;
}
