/* sampler.h - a request's sampling, resolved into the row the samplers take (vLLM V1's sampler).
 *
 * The samplers (the backends' `sample` op: kernels/cpu/sampling_cpu.c, kernels/cuda/sampling.cu)
 * follow vLLM V1's sampler, in this order on a request's row of
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

#include "servelab/sample_row.h"
#include "servelab/sampling.h"

/* Whether a request with p draws: the model runner takes exactly one
 * rng_uniform per sampled row when this is true (even when every token is
 * masked) and none when false (greedy: temperature 0). */
bool sampling_draws(const sampling_params_t *p);

/* How many slots of `ids` (and `bias`) sampling_row_resolve takes for p and
 * a history of n_prompt + n_output tokens. */
int64_t sampling_row_n_ids(const sampling_params_t *p, int32_t n_prompt, int32_t n_output, int n_eos);

/* Fills *row for p, the sequence's history and the checkpoint's EOS ids, with the draw `u` (the caller's
 * `sampling_draws(p) ? rng_uniform(rng) : 0`). Writes the row's ids at
 * ids[off ..] and parallel bias values at bias[off ..] (the clamped logit_bias
 * values at their ids' slots, 0 at every other slot), exactly
 * sampling_row_n_ids(...) of each, and returns the offset after them (the
 * next row's `off`). Rows of a batch share one ids / bias array this way.
 * Offsets are int32: the total must stay below 2^31. */
int64_t sampling_row_resolve(sampling_row_t *row, const sampling_params_t *p, const int32_t *prompt,
                             int32_t n_prompt, const int32_t *output, int32_t n_output, const int32_t *eos_ids,
                             int n_eos, double u, int32_t *ids, float *bias, int64_t off);

#endif
