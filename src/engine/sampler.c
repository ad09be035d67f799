/* sampler.c - a request's sampling parameters and history, resolved into the row the samplers take.
 *
 * What: sampling_row_resolve turns vLLM's parameters (sampling.h) into a
 * sampling_row_t (sample_row.h): the clamped temperature (0 when greedy),
 * the min_tokens mask ids, the clamped logit_bias, the history the
 * penalties read, and the draw u. The model runner resolves every row of a
 * step, each draw taken from the request's own generator (one per step
 * exactly when sampling_draws), and the backend's `sample` op runs vLLM's
 * pipeline on the rows: kernels/cpu/sampling_cpu.c on the host,
 * kernels/cuda/sampling.cu on the device. Not here: allowed_token_ids,
 * bad_words, structured output, beam search. Why this way: everything
 * request-specific is decided here, once, so the two samplers share one
 * definition of the rules and a request draws the same tokens on either.
 */
#include "servelab/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* vLLM's _SAMPLING_EPS: a temperature below it means greedy. */
#define SAMPLING_GREEDY_EPS 1e-5
/* vLLM's _MAX_TEMP: smaller positive temperatures are raised to it (vLLM
 * warns that they overflow its float32 softmax; it changes which tokens can
 * be drawn, so we do the same to draw the same distribution). */
#define SAMPLING_MIN_TEMPERATURE 1e-2
/* OpenAI's (and vLLM's) clamp on logit_bias values. */
#define SAMPLING_MAX_BIAS 100.0f

/* ---- resolution into a row -------------------------------------------------- */

/* The temperature vLLM samples at: (0, 0.01) raised to 0.01 first, so only 0
 * falls below the greedy threshold afterwards. In double, as vLLM decides it on
 * the Python float: 1e-300 is raised, not taken for 0 as float32 would. */
static double effective_temperature(const sampling_params_t *p) {
    double T = p->temperature;
    return T > 0.0 && T < SAMPLING_MIN_TEMPERATURE ? SAMPLING_MIN_TEMPERATURE : T;
}

bool sampling_draws(const sampling_params_t *p) { return !(effective_temperature(p) < SAMPLING_GREEDY_EPS); }

/* Which history the penalties read: the prompt only for repetition,
 * the output for any of the three (frequency and presence count it only). */
static void penalty_history(const sampling_params_t *p, int32_t *n_prompt, int32_t *n_output) {
    bool rep = p->repetition_penalty != 1.0;
    bool any = rep || p->frequency_penalty != 0.0 || p->presence_penalty != 0.0;
    if (!rep) *n_prompt = 0;
    if (!any) *n_output = 0;
}

static bool masks_stop_ids(const sampling_params_t *p, int32_t n_output) { return n_output < p->min_tokens; }

int64_t sampling_row_n_ids(const sampling_params_t *p, int32_t n_prompt, int32_t n_output, int n_eos) {
    int32_t np = n_prompt, no = n_output;
    penalty_history(p, &np, &no);
    int64_t n_mask = masks_stop_ids(p, n_output) ? (int64_t)n_eos + p->n_stop_token_ids : 0;
    return n_mask + p->n_logit_bias + np + no;
}

int64_t sampling_row_resolve(sampling_row_t *row, const sampling_params_t *p, const int32_t *prompt,
                             int32_t n_prompt, const int32_t *output, int32_t n_output, const int32_t *eos_ids,
                             int n_eos, double u, int32_t *ids, float *bias, int64_t off) {
    SL_ASSERT(off >= 0 && off + sampling_row_n_ids(p, n_prompt, n_output, n_eos) <= INT32_MAX);
    memset(row, 0, sizeof *row);
    /* The row is float32, as vLLM's sampling tensors: the parameters narrow here. */
    row->temperature = sampling_draws(p) ? (float)effective_temperature(p) : 0.0f;
    row->top_p = (float)p->top_p;
    row->min_p = (float)p->min_p;
    row->top_k = p->top_k;
    row->repetition_penalty = (float)p->repetition_penalty;
    row->presence_penalty = (float)p->presence_penalty;
    row->frequency_penalty = (float)p->frequency_penalty;
    row->n_logprobs = p->logprobs < SAMPLING_MAX_LOGPROBS ? p->logprobs : SAMPLING_MAX_LOGPROBS;
    row->u = u;

    int64_t at = off;
    row->mask_off = (int32_t)at;
    if (masks_stop_ids(p, n_output)) { /* EOS too with ignore_eos, as vLLM's _all_stop_token_ids */
        for (int i = 0; i < n_eos; i++) ids[at] = eos_ids[i], bias[at++] = 0.0f;
        for (int32_t i = 0; i < p->n_stop_token_ids; i++) ids[at] = p->stop_token_ids[i], bias[at++] = 0.0f;
    }
    row->n_mask = (int32_t)(at - off);
    row->bias_off = (int32_t)at;
    row->n_bias = p->n_logit_bias;
    for (int32_t i = 0; i < p->n_logit_bias; i++, at++) {
        ids[at] = p->logit_bias_ids[i];
        bias[at] = fminf(SAMPLING_MAX_BIAS, fmaxf(-SAMPLING_MAX_BIAS, p->logit_bias_values[i]));
    }
    row->hist_off = (int32_t)at;
    row->n_prompt = n_prompt, row->n_output = n_output;
    penalty_history(p, &row->n_prompt, &row->n_output);
    for (int32_t i = 0; i < row->n_prompt; i++) ids[at] = prompt[i], bias[at++] = 0.0f;
    for (int32_t i = 0; i < row->n_output; i++) ids[at] = output[i], bias[at++] = 0.0f;
    return at;
}
