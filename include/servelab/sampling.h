/* sampling.h - a request's sampling parameters (vLLM's SamplingParams).
 *
 * The fields with vLLM's defaults and ranges, validation with vLLM's messages,
 * deep copy and free. The real-valued fields are doubles, as vLLM's Python
 * floats are: ranges are checked on the value a client sent (top_p
 * 1.0000000000000002 is outside (0, 1] though it is 1.0 as a float32), and the
 * sampler narrows them to float32 when it builds a row, as vLLM's tensors do.
 * What the parameters do to a row of logits is sampler.h's; reading them from a
 * request's JSON is sampling_json.h's.
 */
#ifndef SERVELAB_SAMPLING_H
#define SERVELAB_SAMPLING_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/core.h"
#include "servelab/sample_row.h"

typedef struct {
    int32_t n;                      /* completions per prompt (1) */
    double temperature;             /* >= 0, finite; 0 = greedy (1.0) */
    double top_p;                   /* (0, 1] (1.0 = off) */
    int32_t top_k;                  /* 0 or -1 = off */
    double min_p;                   /* [0, 1] (0 = off) */
    double repetition_penalty;      /* > 0, finite (1.0 = off) */
    double presence_penalty;        /* [-2, 2] (0) */
    double frequency_penalty;       /* [-2, 2] (0) */
    int32_t n_logit_bias;
    int32_t *logit_bias_ids;        /* (n_logit_bias) owned */
    float *logit_bias_values;       /* (n_logit_bias) owned, clamped to [-100, 100] */
    bool has_seed;
    uint64_t seed;
    int32_t max_tokens;             /* >= 1 */
    int32_t min_tokens;             /* >= 0 */
    bool ignore_eos;
    int32_t n_stop_token_ids;
    int32_t *stop_token_ids;        /* owned */
    int32_t n_stop;
    char **stop;                    /* (n_stop) owned NUL-terminated stop strings */
    bool include_stop_str_in_output;
    int32_t logprobs;               /* -1 = none; 0 = chosen token only; k = chosen + top k */
    bool skip_special_tokens;       /* (true) */
} sampling_params_t;

/* vLLM's defaults: n 1, temperature 1, top_p 1, top_k 0, min_p 0, penalties
 * off, max_tokens 16, logprobs -1, skip_special_tokens true. */
void sampling_params_default(sampling_params_t *p);
/* Checks ranges as vLLM does; -1 with vLLM's message in `err` (a 400). `V`
 * is the vocabulary size (for logit_bias / stop_token_ids ids). Ours on top:
 * stop strings must be valid UTF-8 (they are matched byte by byte). */
int sampling_params_validate(const sampling_params_t *p, int64_t V, sl_err_t *err);
/* Deep copy / free of the owned arrays. */
void sampling_params_copy(sampling_params_t *dst, const sampling_params_t *src);
void sampling_params_free(sampling_params_t *p);

#endif
