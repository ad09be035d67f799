/* sampling.c - a request's sampling parameters: vLLM's defaults, validation, copy.
 *
 * Validation runs vLLM's SamplingParams checks in vLLM's order with vLLM's
 * words (numbers written as Python writes them), so a 400 reads exactly as
 * vLLM's; on top, stop strings must be valid UTF-8. Not here: what the
 * parameters do to a row of logits (sampler.c) and reading them from JSON
 * (sampling_json.c).
 */
#include "servelab/sampling.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/utf8.h"

void sampling_params_default(sampling_params_t *p) {
    memset(p, 0, sizeof *p);
    p->n = 1;
    p->temperature = 1.0;
    p->top_p = 1.0;
    p->top_k = 0;
    p->min_p = 0.0;
    p->repetition_penalty = 1.0;
    p->max_tokens = 16;
    p->logprobs = -1;
    p->skip_special_tokens = true;
}

/* Writes `x` as Python's repr(float) writes the number the request held
 * ("-1.0", "0.1", "2.5", "1e-05", "3e+20", "1.0000000000000002", "inf"), so
 * that our messages read exactly like vLLM's f-strings. */
static void py_float_repr(char *out, size_t cap, double x) {
    if (isnan(x)) snprintf(out, cap, "nan");
    else if (isinf(x)) snprintf(out, cap, "%s", x > 0 ? "inf" : "-inf");
    else sl_format_py_float(x, 0, out, cap);
}

/* vLLM's message for ids outside the vocabulary ("token_id(s) [5000, 7000] in
 * logit_bias contain out-of-vocab token ids. Vocabulary size: 1024"). */
static int check_ids(const int32_t *ids, int32_t n, int64_t V, const char *what, sl_err_t *err) {
    char list[256];
    size_t len = 0;
    int bad = 0;
    bool more = false;
    list[0] = '\0';
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] >= 0 && ids[i] < V) continue;
        /* Python lists them all; we list what fits in the message, then "...". */
        if (len < sizeof list - 32)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", bad ? ", " : "", ids[i]);
        else
            more = true;
        bad++;
    }
    if (!bad) return 0;
    return sl_fail(err, "token_id(s) [%s%s] in %s contain out-of-vocab token ids. Vocabulary size: %lld",
                   list, more ? ", ..." : "", what, (long long)V);
}


int sampling_params_validate(const sampling_params_t *p, int64_t V, sl_err_t *err) {
    char v[48];
#define FLOAT_FAIL(fmt, x) (py_float_repr(v, sizeof v, (x)), sl_fail(err, fmt, v))
    /* Same checks, same order, same words as vLLM's SamplingParams._verify_args,
     * on doubles as Python compares them (the boundaries are exact in both). */
    if (p->n < 1) return sl_fail(err, "n must be at least 1, got %d.", p->n);
    if (!(p->presence_penalty >= -2.0 && p->presence_penalty <= 2.0))
        return FLOAT_FAIL("presence_penalty must be in [-2, 2], got %s.", p->presence_penalty);
    if (!(p->frequency_penalty >= -2.0 && p->frequency_penalty <= 2.0))
        return FLOAT_FAIL("frequency_penalty must be in [-2, 2], got %s.", p->frequency_penalty);
    if (!isfinite(p->repetition_penalty))
        return FLOAT_FAIL("repetition_penalty must be a finite number, got %s.", p->repetition_penalty);
    if (p->repetition_penalty <= 0.0)
        return FLOAT_FAIL("repetition_penalty must be greater than zero, got %s.", p->repetition_penalty);
    if (!isfinite(p->temperature))
        return FLOAT_FAIL("temperature must be a finite number, got %s.", p->temperature);
    if (p->temperature < 0.0)
        return FLOAT_FAIL("temperature must be non-negative, got %s.", p->temperature);
    if (!(p->top_p > 0.0 && p->top_p <= 1.0))
        return FLOAT_FAIL("top_p must be in (0, 1], got %s.", p->top_p);
    if (p->top_k < -1) /* -1 is accepted quietly as "off", like 0 */
        return sl_fail(err, "top_k must be 0 (disable), or at least 1, got %d.", p->top_k);
    if (!(p->min_p >= 0.0 && p->min_p <= 1.0))
        return FLOAT_FAIL("min_p must be in [0, 1], got %s.", p->min_p);
    if (p->max_tokens < 1) return sl_fail(err, "max_tokens must be at least 1, got %d.", p->max_tokens);
    if (p->min_tokens < 0)
        return sl_fail(err, "min_tokens must be greater than or equal to 0, got %d.", p->min_tokens);
    if (p->min_tokens > p->max_tokens)
        return sl_fail(err, "min_tokens must be less than or equal to max_tokens=%d, got %d.",
                       p->max_tokens, p->min_tokens);
    /* -1 is "no logprobs" here (vLLM's None); vLLM's -1 = whole vocabulary is not offered. */
    if (p->logprobs < -1) return sl_fail(err, "logprobs must be non-negative, got %d.", p->logprobs);
    for (int32_t i = 0; i < p->n_stop; i++) {
        if (!p->stop[i] || !p->stop[i][0]) return sl_fail(err, "stop cannot contain an empty string.");
        /* Ours: matching works on bytes, which is matching on characters only for valid UTF-8. */
        if (!utf8_valid(p->stop[i], strlen(p->stop[i]))) return sl_fail(err, "stop strings must be valid UTF-8.");
    }
    /* What vLLM's engine front end checks against the model. */
    if (p->logprobs > SAMPLING_MAX_LOGPROBS)
        return sl_fail(err, "Requested sample logprobs of %d, which is greater than max allowed: %d",
                       p->logprobs, SAMPLING_MAX_LOGPROBS);
    if (check_ids(p->logit_bias_ids, p->n_logit_bias, V, "logit_bias", err) < 0) return -1;
    if (check_ids(p->stop_token_ids, p->n_stop_token_ids, V, "stop_token_ids", err) < 0) return -1;
#undef FLOAT_FAIL
    return 0;
}

static void *dup_bytes(const void *src, size_t n) {
    if (!n) return NULL;
    void *dst = sl_malloc(n);
    memcpy(dst, src, n);
    return dst;
}

void sampling_params_copy(sampling_params_t *dst, const sampling_params_t *src) {
    *dst = *src;
    dst->logit_bias_ids = dup_bytes(src->logit_bias_ids, (size_t)src->n_logit_bias * sizeof(int32_t));
    dst->logit_bias_values = dup_bytes(src->logit_bias_values, (size_t)src->n_logit_bias * sizeof(float));
    dst->stop_token_ids = dup_bytes(src->stop_token_ids, (size_t)src->n_stop_token_ids * sizeof(int32_t));
    dst->stop = NULL;
    if (src->n_stop > 0) {
        dst->stop = sl_malloc((size_t)src->n_stop * sizeof(char *));
        for (int32_t i = 0; i < src->n_stop; i++) dst->stop[i] = sl_strdup(src->stop[i]);
    }
}

void sampling_params_free(sampling_params_t *p) {
    free(p->logit_bias_ids);
    free(p->logit_bias_values);
    free(p->stop_token_ids);
    for (int32_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
    free(p->stop);
    p->logit_bias_ids = p->stop_token_ids = NULL;
    p->logit_bias_values = NULL;
    p->stop = NULL;
    p->n_logit_bias = p->n_stop_token_ids = p->n_stop = 0;
}
