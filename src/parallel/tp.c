/* tp.c - the shard plan and the rank threads of tensor parallelism (see tp.h).
 *
 * The vocabulary splits into `size` shares of ceil(V / size) rows, the last
 * one shorter (vLLM pads each share to a multiple of 64 rows; an unpadded
 * split computes the same logits and needs no padding rows in the weights).
 * Rank threads wait for a step on a barrier, run it, and meet again on a
 * second one, so tp_run returns only when every rank is done with the
 * caller's arguments.
 */
#define _GNU_SOURCE
#include "servelab/tp.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>

#include "servelab/comm.h"
#include "servelab/parallel.h"

int tp_shard_plan(const model_config_t *cfg, int rank, int size, tp_shard_t *s, sl_err_t *err) {
    int64_t H = cfg->n_heads, Hkv = cfg->n_kv_heads, I = cfg->intermediate_size, V = cfg->vocab_size;
    if (size < 1) return sl_fail(err, "tensor_parallel_size must be at least 1, got %d", size);
    if (H % size)
        return sl_fail(err, "Total number of attention heads (%lld) must be divisible by tensor parallel size (%d).",
                       (long long)H, size);
    if (Hkv >= size ? Hkv % size : size % Hkv)
        return sl_fail(err, "Total number of key/value heads (%lld) must be divisible by tensor parallel size (%d), "
                       "or the size by the heads (KV heads are then replicated).", (long long)Hkv, size);
    if (I % size)
        return sl_fail(err, "intermediate_size (%lld) must be divisible by tensor parallel size (%d).", (long long)I,
                       size);
    *s = (tp_shard_t){.rank = rank, .size = size};
    s->n_heads = H / size;
    s->q_head0 = rank * s->n_heads;
    if (Hkv >= size) {
        s->n_kv_heads = Hkv / size;
        s->kv_head0 = rank * s->n_kv_heads;
        s->kv_head_replicas = 1;
    } else {
        s->n_kv_heads = 1;
        s->kv_head_replicas = size / Hkv;
        s->kv_head0 = rank / s->kv_head_replicas;
    }
    s->inter = I / size;
    s->inter0 = rank * s->inter;
    s->vocab_per_rank = (V + size - 1) / size;
    s->vocab0 = rank * s->vocab_per_rank < V ? rank * s->vocab_per_rank : V;
    s->n_vocab = V - s->vocab0 < s->vocab_per_rank ? V - s->vocab0 : s->vocab_per_rank;
    return 0;
}

/* ---- rank threads ---------------------------------------------------------------- */

typedef struct rank_thread {
    tp_group_t *g;
    int rank;
    pthread_t thread;
} rank_thread_t;

struct tp_group {
    int size, threads_per_rank;
    sl_barrier_t *start, *done;
    tp_fn_t fn;          /* the step, written before `start` */
    void *arg;
    atomic_bool stop;
    rank_thread_t *ranks; /* (size) [0] unused */
};

static void *rank_main(void *p) {
    rank_thread_t *rt = p;
    tp_group_t *g = rt->g;
    char name[16];
    snprintf(name, sizeof name, "sl-rank-%d", rt->rank);
    pthread_setname_np(pthread_self(), name);
    char pool_name[8];
    snprintf(pool_name, sizeof pool_name, "r%d", rt->rank);
    parallel_pool_t *pool = parallel_pool_new(g->threads_per_rank, pool_name);
    parallel_use_pool(pool);
    for (;;) {
        barrier_wait(g->start);
        if (atomic_load(&g->stop)) break;
        g->fn(g->arg, rt->rank);
        barrier_wait(g->done);
    }
    parallel_use_pool(NULL);
    parallel_pool_free(pool);
    return NULL;
}

tp_group_t *tp_group_new(int size, int threads_per_rank) {
    tp_group_t *g = sl_calloc(1, sizeof *g);
    g->size = size;
    g->threads_per_rank = threads_per_rank > 0 ? threads_per_rank : 1;
    g->start = barrier_new(size);
    g->done = barrier_new(size);
    g->ranks = sl_calloc((size_t)size, sizeof *g->ranks);
    for (int r = 1; r < size; r++) {
        g->ranks[r] = (rank_thread_t){.g = g, .rank = r};
        if (pthread_create(&g->ranks[r].thread, NULL, rank_main, &g->ranks[r]) != 0)
            sl_die("cannot start the thread of tensor-parallel rank %d", r);
    }
    return g;
}

void tp_run(tp_group_t *g, tp_fn_t fn, void *arg) {
    g->fn = fn;
    g->arg = arg;
    barrier_wait(g->start);
    fn(arg, 0);
    barrier_wait(g->done);
}

void tp_group_free(tp_group_t *g) {
    if (!g) return;
    atomic_store(&g->stop, true);
    barrier_wait(g->start);
    for (int r = 1; r < g->size; r++) pthread_join(g->ranks[r].thread, NULL);
    barrier_free(g->start);
    barrier_free(g->done);
    free(g->ranks);
    free(g);
}
