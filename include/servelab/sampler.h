/* sampler.h - choosing a request's next token from its row of logits (vLLM V1's sampler).
 *
 * Semantics follow vLLM V1's sampler, in this order on a request's row of
 * logits: min_tokens (EOS and stop_token_ids masked until min_tokens have
 * been generated), logit_bias, then the penalties (repetition over prompt +
 * output as in HF/vLLM: positive logits divided, negative multiplied;
 * frequency and presence over output tokens only), then greedy (temperature
 * 0) or: temperature, min_p, top_k, top_p, and a draw with the request's own
 * generator. Logprobs are vLLM V1's default "raw" logprobs: log_softmax of the
 * model's logits before any processing. Everything here is batch-independent:
 * a request's tokens depend only on its own logits, history and generator.
 */
#ifndef SERVELAB_SAMPLER_H
#define SERVELAB_SAMPLER_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/rng.h"
#include "servelab/sample_row.h"
#include "servelab/sampling.h"

/* Scratch reused across calls so the hot path does not allocate (row_ids and
 * row_bias grow to the longest history seen, then stay). One per thread that
 * samples; `counts` and `in_prompt` are all zero between calls. */
typedef struct {
    int64_t V;
    float *work;                    /* (V) */
    int32_t *idx;                   /* (V) */
    uint32_t *counts;               /* (V) output-token counts */
    uint8_t *in_prompt;             /* (V) history marks */
    int64_t row_cap;
    int32_t *row_ids;               /* (row_cap) sampler_run's resolved row */
    float *row_bias;                /* (row_cap) */
} sampler_scratch_t;

void sampler_scratch_init(sampler_scratch_t *s, int64_t V);
void sampler_scratch_free(sampler_scratch_t *s);

/* Whether a request with p draws: sampler_run takes exactly one rng_uniform
 * per call when this is true (every call, even one whose tokens are all
 * masked) and none when false (greedy: temperature 0). */
bool sampling_draws(const sampling_params_t *p);

/* How many slots of `ids` (and `bias`) sampling_row_resolve takes for p and
 * a history of n_prompt + n_output tokens. */
int64_t sampling_row_n_ids(const sampling_params_t *p, int32_t n_prompt, int32_t n_output, int n_eos);

/* Fills *row for p, the sequence's history and the checkpoint's EOS ids
 * (as sampler_run takes them), with the draw `u` (the caller's
 * `sampling_draws(p) ? rng_uniform(rng) : 0`). Writes the row's ids at
 * ids[off ..] and parallel bias values at bias[off ..] (the clamped logit_bias
 * values at their ids' slots, 0 at every other slot), exactly
 * sampling_row_n_ids(...) of each, and returns the offset after them (the
 * next row's `off`). Rows of a batch share one ids / bias array this way.
 * Offsets are int32: the total must stay below 2^31. */
int64_t sampling_row_resolve(sampling_row_t *row, const sampling_params_t *p, const int32_t *prompt,
                             int32_t n_prompt, const int32_t *output, int32_t n_output, const int32_t *eos_ids,
                             int n_eos, double u, int32_t *ids, float *bias, int64_t off);

/* Chooses the next token of one row given its draw: min_tokens mask,
 * logit_bias, penalties, then greedy (argmax, first index on ties) or
 * temperature, min_p, top_k (ties at the k-th value stay), top_p (the
 * smallest set, best first and lower id first on ties, whose probability
 * reaches top_p), and the inverse CDF of row->u in id order; then the raw
 * logprobs. `logits` (V) is not modified; ids and bias as described at
 * sampling_row_t. Cost is O(V) plus O(n_mask + n_bias + history); top_k and
 * top_p add an expected O(V) selection, never a sort of the vocabulary.
 * scratch->V >= V. The device sampler (slk_sample) gives the same results. */
void sampler_run_u(const sampling_row_t *row, const int32_t *ids, const float *bias, const float *logits,
                   int64_t V, sampler_scratch_t *scratch, sample_result_t *out);

/* Chooses the next token of one sequence: sampling_row_resolve with
 * u = rng_uniform(rng) when sampling_draws(p) (else no draw), then
 * sampler_run_u. `prompt`/`output` are the sequence's token history;
 * `eos_ids` the checkpoint's EOS ids (masked while output has fewer than
 * min_tokens, even with ignore_eos, as in vLLM). As in vLLM, a temperature
 * in (0, 0.01) counts as 0.01 before the greedy test (below 1e-5), so only
 * 0 is greedy. p must have passed sampling_params_validate; scratch->V >= V. */
void sampler_run(const sampling_params_t *p, const float *logits, int64_t V,
                 const int32_t *prompt, int32_t n_prompt, const int32_t *output, int32_t n_output,
                 const int32_t *eos_ids, int n_eos, sl_rng_t *rng, sampler_scratch_t *scratch,
                 sample_result_t *out);

#endif
