/* sample_row.h - one row's sampling as the samplers take it, and what they give back.
 *
 * sampling_row_t is one request's sampling parameters resolved for one row of
 * logits; sample_result_t is the chosen token with its logprobs. The CPU
 * sampler (kernels/cpu/sampling_cpu.c), the ops table's `sample` and the device sampler
 * (kernels/cuda) all take and give these, so they are plain C with no engine
 * types: ops.h and the kernels include this header, never the engine's.
 */
#ifndef SERVELAB_SAMPLE_ROW_H
#define SERVELAB_SAMPLE_ROW_H

#include <stdint.h>

#define SAMPLING_MAX_LOGPROBS 20

typedef struct {
    int32_t token;
    /* The rest only with logprobs >= 0 (else zero). */
    float logprob;                  /* raw logprob of `token` */
    int32_t rank;                   /* 1 + number of raw logits > token's (vLLM counts ties too) */
    int32_t n_top;                  /* min(logprobs, 20); best first, lower id first on ties */
    int32_t top_ids[SAMPLING_MAX_LOGPROBS];
    float top_logprobs[SAMPLING_MAX_LOGPROBS];
} sample_result_t;

/* One request's sampling resolved for one row of logits: what cpu_sample
 * and the device sampler take (kernels/cuda/kernels.h's slk_sample_row_t is
 * this type, so the fields are shared C; do not reorder them). Every
 * request-specific rule is applied here already: the clamped temperature,
 * min_tokens (whether to mask), the bias clamp, which history the penalties
 * need. The ids live in a flat array `ids` beside it, at the offsets below;
 * `bias` is parallel to `ids` (a bias value at the offset of its id). Ids
 * outside [0, V) are ignored wherever they appear. */
typedef struct {
    float temperature;          /* effective: 0 greedy; else >= 0.01 (vLLM's clamp) */
    float top_p;                /* (0, 1]; 1 = off */
    float min_p;                /* [0, 1]; 0 = off */
    int32_t top_k;              /* <= 0 or >= V: off */
    float repetition_penalty;   /* 1 = off */
    float presence_penalty;     /* 0 = off */
    float frequency_penalty;    /* 0 = off */
    int32_t n_logprobs;         /* -1: none; else 0..SAMPLING_MAX_LOGPROBS top entries */
    double u;                   /* uniform in [0, 1): the draw (unused when greedy) */
    int32_t mask_off, n_mask;   /* ids[mask_off ..]: set to -inf (min_tokens: EOS and stop ids) */
    int32_t bias_off, n_bias;   /* ids[bias_off ..] += bias[bias_off ..] (clamped to [-100, 100]) */
    int32_t hist_off;           /* ids[hist_off ..]: n_prompt prompt tokens, then n_output output tokens */
    int32_t n_prompt, n_output; /* the penalties' input: 0 when no penalty needs them */
} sampling_row_t;

#endif
