/* sampling_json.c - vLLM SamplingParams fields from cJSON, with precise type errors.
 *
 * Numbers must be JSON numbers (no strings), integers must be integral and
 * in int32 range, booleans must be true/false: the OpenAI server's pydantic
 * models are as strict, and a silent coercion would hide a client bug.
 */
#include "servelab/sampling_json.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *known_keys[] = {
    "n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
    "frequency_penalty", "logit_bias", "seed", "max_tokens", "min_tokens", "ignore_eos",
    "stop_token_ids", "stop", "include_stop_str_in_output", "logprobs", "skip_special_tokens",
};

bool sampling_json_is_known_key(const char *key) {
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
        if (!strcmp(key, known_keys[i])) return true;
    return false;
}

/* A real-valued field, kept as the double JSON gave (Python's float): no
 * narrowing before the range checks. A number too large for a double (1e400)
 * is inf, as in Python, and the range checks name it. */
static int get_double(const cJSON *obj, const char *key, double *out, sl_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsNumber(v) || isnan(v->valuedouble)) return sl_fail(err, "%s: expected a number", key);
    *out = v->valuedouble;
    return 0;
}

static int as_int(const cJSON *v, const char *key, int64_t lo, int64_t hi, int64_t *out, sl_err_t *err) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
        return sl_fail(err, "%s: expected an integer in [%lld, %lld]", key, (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int get_int(const cJSON *obj, const char *key, int32_t *out, sl_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return 0;
    int64_t x = 0;
    if (as_int(v, key, INT32_MIN, INT32_MAX, &x, err)) return -1;
    *out = (int32_t)x;
    return 0;
}

static int get_bool(const cJSON *obj, const char *key, bool *out, sl_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return 0;
    if (!cJSON_IsBool(v)) return sl_fail(err, "%s: expected true or false", key);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* logprobs: -1 is the struct's "none" (vLLM's None), so a negative value sent by a
 * client cannot be stored; it is refused here with SamplingParams' words. */
static int get_logprobs(const cJSON *obj, int32_t *out, sl_err_t *err) {
    int32_t lp = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "logprobs");
    if (!v || cJSON_IsNull(v)) return 0;
    if (get_int(obj, "logprobs", &lp, err)) return -1;
    if (lp < 0) return sl_fail(err, "logprobs must be non-negative, got %d.", lp);
    *out = lp;
    return 0;
}

/* seed: -1 means no seed, as SamplingParams.__post_init__ has it (a seed set
 * before, e.g. a CLI default, is dropped); any other integer is the seed. */
static int get_seed(const cJSON *obj, sampling_params_t *p, sl_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "seed");
    if (!v || cJSON_IsNull(v)) return 0;
    int64_t seed = 0;
    if (as_int(v, "seed", INT64_MIN / 2, INT64_MAX / 2, &seed, err)) return -1;
    p->has_seed = seed != -1;
    p->seed = seed != -1 ? (uint64_t)seed : 0;
    return 0;
}

#define MAX_LIST 1024

int sampling_params_from_json(const cJSON *obj, sampling_params_t *p, sl_err_t *err) {
    if (!cJSON_IsObject(obj)) return sl_fail(err, "expected a JSON object");
    if (get_int(obj, "n", &p->n, err) || get_double(obj, "temperature", &p->temperature, err) ||
        get_double(obj, "top_p", &p->top_p, err) || get_int(obj, "top_k", &p->top_k, err) ||
        get_double(obj, "min_p", &p->min_p, err) ||
        get_double(obj, "repetition_penalty", &p->repetition_penalty, err) ||
        get_double(obj, "presence_penalty", &p->presence_penalty, err) ||
        get_double(obj, "frequency_penalty", &p->frequency_penalty, err) ||
        get_int(obj, "max_tokens", &p->max_tokens, err) || get_int(obj, "min_tokens", &p->min_tokens, err) ||
        get_bool(obj, "ignore_eos", &p->ignore_eos, err) ||
        get_bool(obj, "include_stop_str_in_output", &p->include_stop_str_in_output, err) ||
        get_bool(obj, "skip_special_tokens", &p->skip_special_tokens, err) ||
        get_logprobs(obj, &p->logprobs, err) || get_seed(obj, p, err))
        return -1;

    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, "logit_bias");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsObject(v)) return sl_fail(err, "logit_bias: expected an object of token id -> bias");
        int n = cJSON_GetArraySize(v);
        if (n > MAX_LIST) return sl_fail(err, "logit_bias: more than %d entries", MAX_LIST);
        p->logit_bias_ids = sl_realloc(p->logit_bias_ids, (size_t)n * sizeof(int32_t));
        p->logit_bias_values = sl_realloc(p->logit_bias_values, (size_t)n * sizeof(float));
        p->n_logit_bias = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            char *end;
            long id = strtol(it->string, &end, 10);
            if (end == it->string || *end || id < 0 || id > INT32_MAX)
                return sl_fail(err, "logit_bias: key \"%.40s\" is not a token id", it->string);
            if (!cJSON_IsNumber(it) || !isfinite(it->valuedouble))
                return sl_fail(err, "logit_bias: value for %ld is not a number", id);
            double b = it->valuedouble < -100 ? -100 : it->valuedouble > 100 ? 100 : it->valuedouble;
            int32_t k = 0; /* a repeated key keeps its last value, as a Python dict does */
            while (k < p->n_logit_bias && p->logit_bias_ids[k] != (int32_t)id) k++;
            if (k == p->n_logit_bias) p->n_logit_bias++;
            p->logit_bias_ids[k] = (int32_t)id;
            p->logit_bias_values[k] = (float)b;
        }
    }

    v = cJSON_GetObjectItemCaseSensitive(obj, "stop_token_ids");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v)) return sl_fail(err, "stop_token_ids: expected a list of integers");
        int n = cJSON_GetArraySize(v);
        if (n > MAX_LIST) return sl_fail(err, "stop_token_ids: more than %d entries", MAX_LIST);
        p->stop_token_ids = sl_realloc(p->stop_token_ids, (size_t)n * sizeof(int32_t));
        p->n_stop_token_ids = 0;
        const cJSON *it;
        cJSON_ArrayForEach(it, v) {
            int64_t id = 0;
            if (as_int(it, "stop_token_ids", 0, INT32_MAX, &id, err)) return -1;
            p->stop_token_ids[p->n_stop_token_ids++] = (int32_t)id;
        }
    }

    v = cJSON_GetObjectItemCaseSensitive(obj, "stop");
    if (v && !cJSON_IsNull(v)) {
        int n = cJSON_IsString(v) ? 1 : cJSON_IsArray(v) ? cJSON_GetArraySize(v) : -1;
        if (n < 0) return sl_fail(err, "stop: expected a string or a list of strings");
        if (n > MAX_LIST) return sl_fail(err, "stop: more than %d entries", MAX_LIST);
        for (int32_t i = 0; i < p->n_stop; i++) free(p->stop[i]);
        p->stop = sl_realloc(p->stop, (size_t)(n ? n : 1) * sizeof(char *));
        p->n_stop = 0;
        if (cJSON_IsString(v)) {
            p->stop[p->n_stop++] = sl_strdup(v->valuestring);
        } else {
            const cJSON *it;
            cJSON_ArrayForEach(it, v) {
                if (!cJSON_IsString(it)) return sl_fail(err, "stop: expected a string or a list of strings");
                p->stop[p->n_stop++] = sl_strdup(it->valuestring);
            }
        }
    }
    return 0;
}
