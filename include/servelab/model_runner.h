/* model_runner.h - vLLM's model runner: from a scheduled step to its sampled tokens.
 *
 * The runner owns everything that lives in backend memory besides the
 * weights: the step's flat batch (host staging and its backend copy), the
 * paged KV cache, the logits, CUDA graphs of decode steps, and the sampler's
 * buffers (sampling runs on the host, or on the device when the backend has
 * a sampler and logits never cross PCIe). The engine hands it a scheduler
 * output and the sequences to sample, and gets one token each. Startup's
 * dummy steps (profiling forwards and warm-up, at the largest shapes the
 * scheduler can produce) run here too; engine_boot.c sizes the KV cache from
 * what they used. See docs/architecture.md, "The model runner".
 */
#ifndef SERVELAB_MODEL_RUNNER_H
#define SERVELAB_MODEL_RUNNER_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/batch.h"
#include "servelab/model.h"
#include "servelab/request.h"
#include "servelab/sampler.h"
#include "servelab/sampling.h"
#include "servelab/scheduler.h"

/* CUDA graphs of decode steps. A decode step (one new token per sequence,
 * every sequence sampled) of S sequences is padded to the smallest captured
 * size >= S and replayed from that size's graph, when its longest context is
 * at most max_seq_len (vLLM's max_seq_len_to_capture: longer contexts run
 * eagerly, as in vLLM) and its cache is the one the graphs were captured
 * against. A padding row is token 0 at position 0 with a context of one
 * token in the null block 0 and no KV write (slot -1); its logits are
 * computed and never read. Replays read every per-step value from the
 * runner's batch buffers, never from the host values the capture saw: the
 * attention's partition count is fixed by max_seq_len, and a sequence uses
 * the partitions its own length needs. */
typedef struct {
    int32_t n;                  /* 0: no graphs */
    int32_t *sizes;             /* (n) ascending padded batch sizes */
    void **graphs;              /* (n) NULL: not captured (yet) */
    bool *failed;               /* (n) its capture failed: that size runs eagerly */
    bool lazy;                  /* capture a size at its first use, not at startup */
    int32_t max_seq_len;        /* longer contexts run eagerly */
    const kv_cache_t *kv;       /* the cache the graphs read and write */
    sl_batch_t padded;          /* host staging of the padded batch */
} runner_graphs_t;

/* One rank's copy of the step's flat batch, in that rank's backend memory. */
typedef struct {
    int32_t *token_ids, *positions, *query_start, *seq_lens, *block_tables, *logits_index;
    int64_t *slot_mapping;
} runner_rank_batch_t;

typedef struct {
    llama_model_t *model;       /* borrowed: weights, activations, the forward */
    const sl_ops_t *ops;
    int32_t max_tokens, max_seqs, max_blocks;
    kv_cache_t kv;              /* the engine's paged cache (runner_alloc_kv) */
    sl_batch_t batch;           /* the step's flat batch (host) */
    /* The batch in backend memory: what llama_forward and the graphs read. */
    int32_t *d_token_ids, *d_positions, *d_query_start, *d_seq_lens, *d_block_tables, *d_logits_index;
    int64_t *d_slot_mapping;
    /* Logits: (max_seqs, V) fp32. With ops->logits_device they stay in
     * backend memory (d_logits), where the backend's sampler reads them;
     * otherwise they come to `logits` on the host (the CPU backend, whose
     * memory is the host's). */
    float *d_logits;            /* NULL without logits_device */
    float *logits;
    /* The step's rows, resolved for ops->sample. */
    sampling_row_t *rows;       /* (max_seqs) */
    int32_t *row_ids;           /* (row_cap) their flat ids and bias */
    float *row_bias;
    int64_t row_cap;
    runner_graphs_t graphs;
    int64_t n_graph_steps, n_eager_steps; /* decode steps replayed / steps run op by op */
    /* Tensor parallelism on a device backend (model.h): ranks 1..N-1's
     * copies of the batch (rank 0's are the d_* above), uploaded with it, and
     * every rank's inputs as llama_forward takes them. NULL otherwise: host
     * ranks all read the one batch. */
    runner_rank_batch_t *rank_batch; /* (N) [0] unused */
    llama_inputs_t *rank_in;         /* (N) */
} model_runner_t;

/* Allocates the batch, logits and sampling buffers for steps of up to
 * m->max_tokens tokens, m->max_seqs sequences and `max_blocks` blocks per
 * sequence. The KV cache comes later (runner_alloc_kv). -1 with err when the
 * backend is out of memory. */
int runner_init(model_runner_t *r, llama_model_t *m, int32_t max_blocks, sl_err_t *err);
void runner_free(model_runner_t *r);

/* The paged KV cache (model.h kv_cache_t) of n_blocks blocks; block 0, the
 * null block, is zeroed so that whatever reads it reads finite values. */
int kv_cache_init(kv_cache_t *kv, const llama_model_t *m, int64_t n_blocks, int64_t block_size, sl_err_t *err);
void kv_cache_free(kv_cache_t *kv, const llama_model_t *m);
int runner_alloc_kv(model_runner_t *r, int64_t n_blocks, int32_t block_size, sl_err_t *err);

/* The flat batch of a scheduler step: for each scheduled request, its next
 * n_new tokens (from n_computed; drafts included), their positions and KV
 * slots through the request's blocks, its block-table row, and, when the
 * step completes everything the request knows (its prompt, or the one
 * sampled token of a decode), a logits row for its last known token and
 * one for each draft the step computes. Pure host code. */
void runner_prepare(sl_batch_t *b, const sched_output_t *so, int32_t block_size);

/* One forward of batch b against kv. `logits` (b->n_logits, V) fp32 host
 * memory receives the logits; NULL leaves them in r->d_logits (device
 * backends only). A batch may ask for more rows than it has sequences, up to
 * max_seqs (every position of a prefill: `eval perplexity`). A decode step runs from a CUDA graph when one fits (see
 * runner_graphs_t), otherwise op by op. */
void runner_forward(model_runner_t *r, const sl_batch_t *b, const kv_cache_t *kv, float *logits);

/* The lab's logit_noise (NULL to runner_execute when off): Gaussian noise of
 * standard deviation `scale` on every logit of every sampled row, before
 * sampling (greedy included). A row's noise is drawn from a generator seeded
 * by logit_noise_seed(seed, the sequence's tokens so far), so the same
 * request gets the same noise whatever its batch, in this server or another
 * started with the same --seed. With device logits (ops->logits_device) the
 * rows go to the host and back (download, noise, upload): no kernel of its
 * own, a cost only while the fault is on. */
typedef struct {
    double scale;
    uint64_t seed; /* the engine's --seed */
} runner_noise_t;
uint64_t logit_noise_seed(uint64_t seed, const int32_t *tokens, int32_t n_tokens);
/* Adds N(0, scale^2) to each of row[0 .. V), drawn from rng_seed(row_seed). */
void logit_noise_row(float *row, int64_t V, double scale, uint64_t row_seed);

/* The engine's step: prepares so's batch, runs it against the runner's KV
 * cache and samples the n_sampled sequences of `sampled` (the scheduled
 * requests whose known tokens are all computed after this step, in batch
 * order): each gets 1 + n_spec rows in out, in that order (its last known
 * token, then each draft it verifies; r->n_spec must be the drafts the
 * step computes, as sched_step leaves it). Row j of a request is sampled
 * with the j-th draw ahead in its generator, which is not advanced: the
 * engine advances it by one draw per token it keeps. Returns 0, or the
 * backend's failure (ops.h last_error: 1 recoverable, 2 the device is lost)
 * with its message in msg; `out` is then meaningless. `noise`: the lab's
 * logit_noise (above), NULL when it is off. */
int runner_execute(model_runner_t *r, const sched_output_t *so, request_t *const *sampled, int32_t n_sampled,
                   const runner_noise_t *noise, sample_result_t *out, char *msg, size_t msg_cap);

/* Startup's dummy steps, against a scratch cache of one block: S sequences
 * share T tokens; with `context`, each has max_model_len tokens in the cache
 * after the step. Every block-table entry is the scratch block and every
 * slot -1 (nothing is written), so one block of KV memory serves any shape.
 * Each sequence produces logits (each token, with all_rows), and with `sample` they go through the
 * backend's sampler with every stage on (its workspace is then counted in a
 * profile, and its first-use costs paid by a warm-up). -1 with err naming
 * `what` when the backend fails. */
typedef struct {
    int32_t S, T;
    bool context;
    bool all_rows;              /* every token gets logits (speculative verification), not one per sequence */
} runner_shape_t;
int runner_dummy_steps(model_runner_t *r, int32_t block_size, int32_t max_model_len, const runner_shape_t *shapes,
                       int n, bool sample, const char *what, sl_err_t *err);

/* vLLM's capture sizes for --cuda-graph-sizes `max_size`: 1, 2, 4, then the
 * multiples of 8 up to max_size, none above max_num_batched_tokens; ours stop
 * at the first size >= max_num_seqs (no decode step has more sequences).
 * Writes them ascending to out (at most cap) and returns how many. */
int runner_graph_sizes(int32_t max_size, int32_t max_num_seqs, int32_t max_num_batched_tokens, int32_t *out,
                       int cap);
/* Index of the smallest of sizes[0, n) (ascending) that is >= S, or -1. */
int runner_graph_bucket(const int32_t *sizes, int n, int32_t S);
/* dst = src (a decode step of S <= S_pad sequences) followed by S_pad - S
 * padding rows. dst has room for S_pad sequences, and block-table rows at
 * least as wide as src's (the rest of a row is left as it was). */
void batch_pad_decode(sl_batch_t *dst, const sl_batch_t *src, int32_t S_pad);
/* Captures a graph per size against kv (sizes need not be sorted; one above
 * max_seqs or max_tokens counts as that limit; duplicates go), largest
 * first, each after one eager warm-up run of its shape; `lazy` defers each
 * capture to the size's first use instead. 0, or -1 with err (the backend
 * has no graphs, or a capture failed: the backend's message). */
int runner_capture_graphs(model_runner_t *r, const kv_cache_t *kv, const int32_t *sizes, int n,
                          int32_t max_seq_len, bool lazy, sl_err_t *err);
void runner_free_graphs(model_runner_t *r);

#endif
