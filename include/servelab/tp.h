/* tp.h - tensor parallelism: how the model splits over ranks, and the rank threads.
 *
 * vLLM's Llama sharding over `size` ranks: q/k/v split by heads and gate/up
 * by features (column-parallel), o_proj and down_proj by their inputs
 * (row-parallel, each followed by an all-reduce), the embedding and lm_head
 * by vocabulary rows (a masked lookup and an all-reduce; logits gathered to
 * rank 0, which samples). With more ranks than KV heads each KV head is
 * replicated on size / n_kv_heads ranks (vLLM's num_kv_head_replicas).
 * Ranks are threads of the one process (tp_group_t), each with its own
 * worker pool, stepping in lockstep; docs/architecture.md, "Tensor
 * parallelism", says why threads rather than processes.
 */
#ifndef SERVELAB_TP_H
#define SERVELAB_TP_H

#include <stdint.h>

#include "servelab/config.h"
#include "servelab/core.h"

/* The part of the model one rank holds. With one rank: everything. */
typedef struct {
    int rank, size;
    int64_t n_heads, q_head0;       /* query heads [q_head0, q_head0 + n_heads) */
    int64_t n_kv_heads, kv_head0;   /* KV heads [kv_head0, kv_head0 + n_kv_heads) */
    int64_t kv_head_replicas;       /* ranks holding each KV head (1 unless size > KV heads) */
    int64_t inter, inter0;          /* MLP features [inter0, inter0 + inter) */
    int64_t vocab0, n_vocab;        /* vocabulary rows [vocab0, vocab0 + n_vocab) */
    int64_t vocab_per_rank;         /* every rank's share, the last one's padded to it */
} tp_shard_t;

/* Rank `rank` of `size`'s shard of the model `cfg`, or -1 with one line in
 * err when `size` cannot split it (vLLM's texts where vLLM has one). */
int tp_shard_plan(const model_config_t *cfg, int rank, int size, tp_shard_t *s, sl_err_t *err);

/* Threads for ranks 1 .. size-1 (rank 0 is whichever thread calls tp_run),
 * each running its loops on a worker pool of its own with
 * threads_per_rank threads. */
typedef struct tp_group tp_group_t;
typedef void (*tp_fn_t)(void *arg, int rank);
tp_group_t *tp_group_new(int size, int threads_per_rank);
/* fn(arg, r) on every rank at once, rank 0 on the calling thread; returns
 * when every rank has returned. */
void tp_run(tp_group_t *g, tp_fn_t fn, void *arg);
/* Stops and joins the rank threads. */
void tp_group_free(tp_group_t *g);

#endif
