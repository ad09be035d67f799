/* model.h - Llama weights and the forward pass, written once against the ops table.
 *
 * weights_*: turns a checkpoint (or, with --load-format dummy, a config alone)
 * into backend-resident weights with every tensor's presence and shape checked.
 * llama_*: runs one step whose inputs are in backend memory through the model,
 * writing K/V into the paged cache and fp32 logits for the rows in
 * logits_index. Batches, KV memory, CUDA graphs and sampling are the model
 * runner's (model_runner.h).
 */
#ifndef SERVELAB_MODEL_H
#define SERVELAB_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/config.h"
#include "servelab/core.h"
#include "servelab/ops.h"
#include "servelab/safetensors.h"
#include "servelab/comm.h"
#include "servelab/tp.h"

typedef enum { LOAD_FORMAT_AUTO, LOAD_FORMAT_SAFETENSORS, LOAD_FORMAT_DUMMY } load_format_t;

/* Parses vLLM's --load-format value ("auto", "safetensors", "dummy"); -1 if unknown. */
int load_format_parse(const char *s);
/* Parses vLLM's --dtype value ("auto", "half", "float16", "bfloat16", "float",
 * "float32"); returns 0 with *auto_out set for "auto", -1 if unknown. */
int dtype_parse(const char *s, sl_dtype_t *dt, bool *auto_out);

typedef struct {
    load_format_t load_format;
    bool dtype_auto;        /* keep each tensor's stored dtype (CPU) */
    sl_dtype_t dtype;       /* otherwise convert every weight to this */
    uint64_t seed;          /* dummy weights */
    bool progress;          /* progress bar on stderr if loading takes > 1 s */
    int tensor_parallel_size; /* ranks (<= 1: one); tp.h */
    const char *quantization; /* --quantization: "awq" or "awq_marlin" (NULL: the checkpoint's) */
    /* Several ranks: rank r's backend (NULL: every rank on llama_init's ops,
     * which must then be host memory), and the communicator they reduce
     * through (NULL: a local one over host memory). llama_free frees it. */
    const sl_ops_t *const *rank_ops;
    sl_comm_t *comm;
} model_load_opts_t;

typedef struct {
    sl_weight_t input_norm, q, k, v, o, post_norm, gate, up, down;
} llama_layer_t;

typedef struct {
    sl_weight_t embed;      /* (V, hidden) */
    sl_weight_t norm;       /* (1, hidden) */
    sl_weight_t lm_head;    /* (V, hidden); the embedding when tied */
    llama_layer_t *layers;  /* (L) */
    st_archive_t archive;   /* the mapped checkpoint (empty for dummy weights) */
    void **owned;           /* backend buffers this struct frees */
    int n_owned;
    size_t n_bytes;         /* bytes of weights read per forward */
    size_t n_packed_bytes;  /* the backend's packed copies (ops->pack_linear) */
    int64_t n_params;
} llama_weights_t;

/* Loads and checks all weights named by `cfg` from `model_dir`, the part of
 * each that `shard` holds (tp.h; every tensor is checked whole). On error,
 * `err` names the file, the tensor and what is wrong; nothing is leaked. */
int weights_load(const char *model_dir, const model_config_t *cfg, const tp_shard_t *shard, const sl_ops_t *ops,
                 const model_load_opts_t *opts, llama_weights_t *w, sl_err_t *err);
void weights_free(llama_weights_t *w, const sl_ops_t *ops);

/* The paged KV cache: per rank and layer, K and V of (n_blocks *
 * block_size, the rank's KV heads, D) in the backend's KV dtype. Every rank
 * has the same blocks (one block table serves them all), each holding its
 * own heads. Block 0 is the reserved null block. The model runner
 * (model_runner.h) allocates it. */
typedef struct {
    int64_t n_blocks;
    int64_t block_size;
    int64_t n_layers;
    int n_ranks;
    void **k;               /* (n_ranks * L): rank r's layer l at [r * L + l] */
    void **v;
} kv_cache_t;

/* One step's inputs, already in backend memory (the model runner uploads the
 * flat batch, batch.h). The attention metadata carries positions,
 * query_start, seq_lens and block_tables. */
typedef struct llama_inputs {
    const int32_t *token_ids;       /* (T) */
    const int64_t *slot_mapping;    /* (T) */
    const int32_t *logits_index;    /* (n_logits) */
    int32_t n_logits;
    sl_attn_meta_t meta;
    /* Several ranks on a device backend: each rank's copy of these inputs in
     * its own memory ([0] is this one); NULL when every rank reads these. */
    const struct llama_inputs *rank_in;
} llama_inputs_t;

typedef struct llama_tp llama_tp_t;

/* The model as its callers see it, and rank 0 of a tensor-parallel group:
 * with several ranks, `tp` holds the others (each a llama_model_t of its own
 * shard, scratch and comm rank) and their threads, and llama_forward runs
 * them all. */
typedef struct llama_model {
    model_config_t cfg;
    const sl_ops_t *ops;
    llama_weights_t w;      /* this rank's shard */
    int32_t max_tokens, max_seqs;
    tp_shard_t shard;
    sl_comm_t *comm;        /* NULL with one rank */
    llama_tp_t *tp;         /* rank 0 of several: the other ranks; NULL otherwise */
    /* Scratch activations sized for max_tokens (backend memory). */
    void *x, *h, *q, *k, *v, *attn, *gate, *up, *rows;
    /* Several ranks: this rank's logits (max_seqs, vocab_per_rank), host
     * memory; on rank 0 of a device backend, the assembled (max_seqs, V) on
     * the host before they go to the device. */
    float *logits_part, *logits_all;
} llama_model_t;

/* Loads config + weights and allocates scratch activations for steps of up
 * to `max_tokens` tokens and `max_seqs` sequences; with
 * opts->tensor_parallel_size > 1, every rank's (CPU backend only). */
int llama_init(llama_model_t *m, const char *model_dir, const model_load_opts_t *opts,
               const sl_ops_t *ops, int32_t max_tokens, int32_t max_seqs, sl_err_t *err);
void llama_free(llama_model_t *m);

/* Rank r's backend (m's own for rank 0, or with one rank). */
const sl_ops_t *llama_rank_ops(const llama_model_t *m, int rank);
/* Makes rank r's backend current on the calling thread (ops->thread_init:
 * CUDA selects the rank's device), before allocating or copying for it. */
void llama_rank_select(const llama_model_t *m, int rank);

/* ops.h's last_error over every rank's backend and the communicator: the
 * largest code (0 none, 1 recoverable, 2 a device lost for good), with the
 * first failing one's message. */
int llama_last_error(const llama_model_t *m, char *msg, size_t cap);

/* Bytes of weights every rank reads per forward, summed over the ranks. */
size_t llama_weight_bytes(const llama_model_t *m);

/* The lab's allreduce_delay (comm.h): every all-reduce of the next steps
 * lasts ms longer, plus its bytes at gbps (0: none). False when m has one
 * rank (no all-reduce to slow). Between steps only. */
bool llama_set_allreduce_delay(llama_model_t *m, double ms, double gbps);
/* All-reduces per step: 2 per layer and the embedding's (0 with one rank). */
int64_t llama_allreduces_per_step(const llama_model_t *m);
/* Seconds rank 0 spent in all-reduces since the last call (0 with one rank). */
double llama_take_allreduce_s(llama_model_t *m);

/* Bytes of KV cache one block takes over all layers (K and V) on one rank
 * of m (its KV heads, in its KV dtype): what a rank's memory budget is
 * divided by. */
size_t llama_kv_block_bytes(const llama_model_t *m, int64_t block_size);

/* Runs one step: writes the new tokens' K/V into kv and the fp32 logits of
 * the in->n_logits rows to `logits` (n_logits, V): host memory through
 * ops->logits, or backend memory through ops->logits_device when
 * `logits_on_device`. Everything it passes to an op is fixed by (T, n_logits,
 * meta) and the buffers `in` points to, so a CUDA graph recorded from one
 * call replays any batch of that shape whose arrays were written to the same
 * buffers (model_runner.c). */
void llama_forward(llama_model_t *m, const llama_inputs_t *in, const kv_cache_t *kv, float *logits,
                   bool logits_on_device);

#endif
