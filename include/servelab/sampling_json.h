/* sampling_json.h - sampling parameters from a JSON object (outside bytes).
 *
 * Reads vLLM's SamplingParams field names: n, temperature, top_p, top_k,
 * min_p, repetition_penalty, presence_penalty, frequency_penalty, logit_bias
 * ({"token id": bias}), seed, max_tokens, min_tokens, ignore_eos,
 * stop_token_ids, stop (a string or a list of strings), include_stop_str_in_output,
 * logprobs, skip_special_tokens. JSON null means "default". A wrong type is
 * an error naming the field; the values' ranges are checked later by
 * sampling_params_validate, except where a value a client can send would read
 * as the struct's "unset": a negative logprobs is refused here (-1 is "none"),
 * and seed -1 means no seed, as in vLLM. Keys not listed are left to the caller.
 */
#ifndef SERVELAB_SAMPLING_JSON_H
#define SERVELAB_SAMPLING_JSON_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "servelab/sampling.h"

/* Fills `p` (already holding defaults) from the known keys of `obj`.
 * Returns 0, or -1 with "FIELD: what is wrong" in `err` (p then holds
 * whatever was parsed; free it with sampling_params_free either way). */
int sampling_params_from_json(const cJSON *obj, sampling_params_t *p, sl_err_t *err);

/* True when `key` is one of the fields above. */
bool sampling_json_is_known_key(const char *key);

#endif
