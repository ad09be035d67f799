/* model.h - Llama weights and the forward pass, written once against the ops table.
 *
 * weights_*: turns a checkpoint (or, with --load-format dummy, a config alone)
 * into backend-resident weights with every tensor's presence and shape checked.
 * llama_*: runs one flat batch (batch.h) through the model, writing K/V into
 * the paged cache and returning fp32 logits for the rows in logits_index.
 */
#ifndef SERVELAB_MODEL_H
#define SERVELAB_MODEL_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/batch.h"
#include "servelab/config.h"
#include "servelab/core.h"
#include "servelab/ops.h"
#include "servelab/safetensors.h"

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
    int64_t n_params;
} llama_weights_t;

/* Loads and checks all weights named by `cfg` from `model_dir`. On error,
 * `err` names the file, the tensor and what is wrong; nothing is leaked. */
int weights_load(const char *model_dir, const model_config_t *cfg, const sl_ops_t *ops,
                 const model_load_opts_t *opts, llama_weights_t *w, sl_err_t *err);
void weights_free(llama_weights_t *w, const sl_ops_t *ops);

/* The paged KV cache: per layer, K and V of (n_blocks * block_size, Hkv, D)
 * in the backend's activation dtype. Block 0 is the reserved null block. */
typedef struct {
    int64_t n_blocks;
    int64_t block_size;
    int64_t n_layers;
    void **k;               /* (L) */
    void **v;               /* (L) */
} kv_cache_t;

typedef struct {
    model_config_t cfg;
    const sl_ops_t *ops;
    llama_weights_t w;
    int32_t max_tokens, max_seqs, max_blocks;
    /* Scratch activations sized for max_tokens (backend memory). */
    void *x, *h, *q, *k, *v, *attn, *gate, *up, *rows;
    /* The batch in backend memory. */
    int32_t *d_token_ids, *d_positions, *d_query_start, *d_seq_lens, *d_block_tables,
        *d_logits_index;
    int64_t *d_slot_mapping;
    /* Device backends (ops->logits_device): the step's fp32 logits (max_seqs, V)
     * stay here, for the device sampler or one download. NULL on CPU. */
    float *d_logits;
    /* CUDA graphs of decode steps (llama_capture_graphs); n_graphs 0: none. */
    int32_t n_graphs;
    int32_t *graph_sizes;       /* (n_graphs) ascending padded batch sizes */
    void **graphs;              /* (n_graphs) NULL: not captured (yet) */
    bool *graph_failed;         /* (n_graphs) its capture failed: that size runs eagerly */
    bool graph_lazy;            /* capture a size at its first use, not at startup */
    int32_t graph_max_seq_len;  /* longer contexts run eagerly */
    const kv_cache_t *graph_kv; /* the cache the graphs read and write */
    sl_batch_t graph_batch;     /* host staging of the padded batch */
    int64_t n_graph_steps, n_eager_steps; /* decode steps replayed / steps run op by op */
} llama_model_t;

/* Loads config + weights and allocates scratch for batches of up to
 * `max_tokens` tokens, `max_seqs` sequences and `max_blocks` blocks each. */
int llama_init(llama_model_t *m, const char *model_dir, const model_load_opts_t *opts,
               const sl_ops_t *ops, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks,
               sl_err_t *err);
void llama_free(llama_model_t *m);

int kv_cache_init(kv_cache_t *kv, const llama_model_t *m, int64_t n_blocks, int64_t block_size,
                  sl_err_t *err);
void kv_cache_free(kv_cache_t *kv, const llama_model_t *m);
/* Bytes of KV cache one block takes over all layers (K and V). */
size_t kv_cache_block_bytes(const model_config_t *cfg, int64_t block_size, sl_dtype_t dt);

/* Runs one step. `logits` (b->n_logits, V) fp32 host memory receives the
 * logits of the rows in b->logits_index; NULL leaves them in m->d_logits
 * (device backends only). A decode step runs from a CUDA graph when one fits
 * (below), otherwise op by op. */
void llama_forward(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv, float *logits);

/* ---- CUDA graphs of decode steps -------------------------------------------
 * A decode step (one new token per sequence, every sequence sampled) of S
 * sequences is padded to the smallest captured size >= S and replayed from
 * that size's graph, when its longest context is at most graph_max_seq_len
 * (vLLM's max_seq_len_to_capture: longer contexts run eagerly, as in vLLM)
 * and kv is the cache the graphs were captured against. A padding row is
 * token 0 at position 0 with a context of one token in the null block 0 and
 * no KV write (slot -1); its logits are computed and never read. Replays
 * read every per-step value from device memory (the batch arrays, seq_lens),
 * never from the host values the capture saw: the attention's partition
 * count is fixed by graph_max_seq_len, and a sequence uses the partitions its
 * own length needs. */

/* vLLM's capture sizes for --cuda-graph-sizes `max_size`: 1, 2, 4, then the
 * multiples of 8 up to max_size, none above max_num_batched_tokens; ours stop
 * at the first size >= max_num_seqs (no decode step has more sequences).
 * Writes them ascending to out (at most cap) and returns how many. */
int llama_graph_sizes(int32_t max_size, int32_t max_num_seqs, int32_t max_num_batched_tokens, int32_t *out,
                      int cap);
/* Index of the smallest of sizes[0, n) (ascending) that is >= S, or -1. */
int llama_graph_bucket(const int32_t *sizes, int n, int32_t S);
/* dst = src (a decode step of S <= S_pad sequences) followed by S_pad - S
 * padding rows. dst has room for S_pad sequences, and block-table rows at
 * least as wide as src's (the rest of a row is left as it was). */
void batch_pad_decode(sl_batch_t *dst, const sl_batch_t *src, int32_t S_pad);
/* Captures a graph per size (sizes need not be sorted; one above max_seqs
 * or max_tokens counts as that limit; duplicates go), largest first, each after one
 * eager warm-up run of its shape; `lazy` defers each capture to the size's
 * first use instead. 0, or -1 with err (the backend has no graphs, or a
 * capture failed: the backend's message). */
int llama_capture_graphs(llama_model_t *m, const kv_cache_t *kv, const int32_t *sizes, int n,
                         int32_t max_seq_len, bool lazy, sl_err_t *err);
void llama_free_graphs(llama_model_t *m);

#endif
