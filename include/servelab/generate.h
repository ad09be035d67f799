/* generate.h - run one request at a time through the model (prefill, then decode).
 *
 * The request goes through the same flat batch and paged KV cache that the
 * engine's scheduler fills: the prompt is prefilled in chunks of at most
 * max_num_batched_tokens tokens (chunked prefill), then one token per step.
 * Its blocks are simply 1..n (block 0 is the null block). The continuous
 * batching engine (scheduler, block pool, prefix cache) replaces this loop
 * for concurrent requests; this one stays as the simplest correct driver.
 */
#ifndef SERVELAB_GENERATE_H
#define SERVELAB_GENERATE_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/model.h"
#include "servelab/tokenizer.h"

typedef struct {
    llama_model_t *model;
    const tokenizer_t *tok;
    kv_cache_t kv;
    sl_batch_t batch;
    float *logits;                 /* (V) */
    int32_t max_model_len;
    int32_t max_num_batched_tokens;
    int32_t block_size;
} gen_ctx_t;

typedef struct {
    int32_t max_tokens;
    float temperature;             /* 0 = greedy */
    uint64_t seed;
    bool ignore_eos;
} gen_params_t;

typedef struct {
    int32_t *token_ids;            /* (n) generated ids */
    double *logprobs;              /* (n) log_softmax(raw logits)[chosen] */
    int32_t n;
    const char *finish_reason;     /* "stop" or "length" */
    char *text;                    /* incremental detokenization of token_ids */
    double prefill_s, decode_s;    /* wall time of the two phases */
} gen_output_t;

/* Called with each new piece of complete UTF-8 text as it is generated. */
typedef void (*gen_stream_fn)(void *user, const char *text, int len);

/* Allocates a KV cache for one sequence of max_model_len tokens, the batch
 * and logits. `model` must have been initialised with max_tokens >=
 * max_num_batched_tokens and max_blocks >= ceil(max_model_len / block_size). */
int gen_init(gen_ctx_t *g, llama_model_t *model, const tokenizer_t *tok, int32_t max_model_len,
             int32_t max_num_batched_tokens, int32_t block_size, sl_err_t *err);
void gen_free(gen_ctx_t *g);

/* Generates a continuation of `prompt_ids`. Fails (-1, `err`) only for a
 * prompt that does not fit: empty, or not shorter than max_model_len. */
int gen_run(gen_ctx_t *g, const int32_t *prompt_ids, int32_t n_prompt, const gen_params_t *p,
            gen_stream_fn stream, void *user, gen_output_t *out, sl_err_t *err);
void gen_output_free(gen_output_t *out);

#endif
