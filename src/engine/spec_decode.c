/* spec_decode.c - n-gram speculative decoding's pure parts (see spec_decode.h).
 *
 * The config follows vLLM's SpeculativeConfig for method "ngram" (its
 * defaults and checks); the proposer is vLLM V1's NgramProposer
 * (_find_longest_matched_ngram_and_propose_tokens), written as one backward
 * scan per earlier position instead of KMP over the reversed tokens: O(n *
 * max_n), a few microseconds per request at the contexts served here. The
 * stats and the log line are vLLM's SpecDecodingStats and
 * SpecDecodingLogging (v1/spec_decode/metrics.py).
 */
#include "servelab/spec_decode.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- the config ---------------------------------------------------------------- */

/* s for an error message: control characters as '?', at most 80 bytes. */
static const char *shown(const char *s, char *buf, size_t cap) {
    size_t n = 0;
    for (; s[n] && n + 1 < cap && n < 80; n++) buf[n] = (unsigned char)s[n] < 0x20 || s[n] == 0x7f ? '?' : s[n];
    buf[n] = '\0';
    return buf;
}

static bool is_ngram_name(const cJSON *v) {
    return cJSON_IsString(v) && (!strcmp(v->valuestring, "ngram") || !strcmp(v->valuestring, "[ngram]"));
}

/* A JSON integer (a number with no fraction) into *out. */
static int get_int(const cJSON *root, const char *key, bool *present, int32_t *out, sl_err_t *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    *present = v && !cJSON_IsNull(v);
    if (!*present) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || fabs(v->valuedouble) > 1e9)
        return sl_fail(err, "--speculative-config: %s must be an integer", key);
    *out = (int32_t)v->valuedouble;
    return 0;
}

static int parse_object(spec_config_t *c, const cJSON *root, sl_err_t *err) {
    static const char *const known[] = {"method", "model", "num_speculative_tokens", "prompt_lookup_max",
                                        "prompt_lookup_min"};
    for (const cJSON *it = root->child; it; it = it->next) {
        bool ok = false;
        for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) ok |= !strcmp(it->string, known[i]);
        if (!ok)
            return sl_fail(err, "--speculative-config: unknown or unsupported key \"%s\" (servelab runs the ngram "
                                "method, whose keys are method, num_speculative_tokens, prompt_lookup_max and "
                                "prompt_lookup_min)", shown(it->string, (char[96]){0}, 96));
    }
    const cJSON *method = cJSON_GetObjectItemCaseSensitive(root, "method");
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    bool method_given = method && !cJSON_IsNull(method), model_given = model && !cJSON_IsNull(model);
    if (method_given && !is_ngram_name(method))
        return sl_fail(err, "--speculative-config: method %s%s%s is not supported: servelab runs only the ngram "
                            "(prompt lookup) method, which needs no draft model",
                       cJSON_IsString(method) ? "\"" : "",
                       cJSON_IsString(method) ? shown(method->valuestring, (char[96]){0}, 96) : "(not a string)",
                       cJSON_IsString(method) ? "\"" : "");
    if (model_given && !is_ngram_name(model))
        return sl_fail(err, "--speculative-config: a draft model is not supported: servelab runs only the ngram "
                            "(prompt lookup) method; pass {\"method\": \"ngram\", \"num_speculative_tokens\": K}");
    if (!method_given && !model_given)
        return sl_fail(err, "--speculative-config: give the method (\"ngram\"), as vLLM requires one of method and "
                            "model");

    bool has_k, has_min, has_max;
    int32_t k = 0, lo = 0, hi = 0;
    if (get_int(root, "num_speculative_tokens", &has_k, &k, err) ||
        get_int(root, "prompt_lookup_min", &has_min, &lo, err) ||
        get_int(root, "prompt_lookup_max", &has_max, &hi, err))
        return -1;
    if (!has_k) return sl_fail(err, "--speculative-config: num_speculative_tokens must be provided for the ngram method");
    if (k <= 0)
        return sl_fail(err, "--speculative-config: Expected num_speculative_tokens to be greater than zero (%d).", k);
    if (k > SPEC_MAX_TOKENS)
        return sl_fail(err, "--speculative-config: num_speculative_tokens=%d is above servelab's limit of %d", k,
                       SPEC_MAX_TOKENS);
    if (!has_min && !has_max) lo = hi = 5; /* vLLM's defaults */
    else if (!has_min) lo = hi;
    else if (!has_max) hi = lo;
    if (lo < 1) return sl_fail(err, "--speculative-config: prompt_lookup_min=%d must be > 0", lo);
    if (hi < 1) return sl_fail(err, "--speculative-config: prompt_lookup_max=%d must be > 0", hi);
    if (lo > hi)
        return sl_fail(err, "--speculative-config: prompt_lookup_min=%d must be <= prompt_lookup_max=%d", lo, hi);
    *c = (spec_config_t){.on = true, .num_speculative_tokens = k, .prompt_lookup_min = lo, .prompt_lookup_max = hi};
    return 0;
}

int spec_config_parse(spec_config_t *c, const char *json, sl_err_t *err) {
    memset(c, 0, sizeof *c);
    cJSON *root = cJSON_Parse(json);
    if (!root) return sl_fail(err, "--speculative-config: not valid JSON: %s", shown(json, (char[96]){0}, 96));
    int rc = cJSON_IsObject(root) ? parse_object(c, root, err)
                                  : sl_fail(err, "--speculative-config: expected a JSON object, got %s",
                                            shown(json, (char[96]){0}, 96));
    cJSON_Delete(root);
    if (rc) memset(c, 0, sizeof *c);
    return rc;
}

/* ---- the proposer -------------------------------------------------------------- */

int32_t spec_ngram_propose(const int32_t *tokens, int32_t n, int32_t min_n, int32_t max_n, int32_t k,
                           int32_t max_model_len, int32_t *out) {
    if (n < min_n || min_n < 1) return 0;
    if (k > max_model_len - n) k = max_model_len - n;
    if (k <= 0) return 0;
    /* For each earlier end e (the match must end before the last token), the
     * number of tokens, up to max_n, that agree backwards with the suffix; the
     * longest wins, the earliest on ties (vLLM proposes from the earliest). */
    int32_t best = 0, best_end = -1;
    for (int32_t e = 0; e + 1 < n; e++) {
        int32_t m = 0;
        while (m < max_n && m <= e && tokens[e - m] == tokens[n - 1 - m]) m++;
        if (m > best) best = m, best_end = e;
        if (best == max_n) break;
    }
    if (best < min_n) return 0;
    int32_t start = best_end + 1;
    if (k > n - start) k = n - start;
    memcpy(out, tokens + start, (size_t)k * sizeof *out);
    return k;
}

int32_t spec_n_accepted(const int32_t *drafts, int32_t k, const int32_t *sampled) {
    int32_t a = 0;
    while (a < k && drafts[a] == sampled[a]) a++;
    return a;
}

/* ---- counters and the log line ----------------------------------------------- */

void spec_stats_observe(spec_stats_t *s, int32_t n_draft_tokens, int32_t n_accepted) {
    SL_ASSERT(n_accepted >= 0 && n_accepted <= n_draft_tokens && n_draft_tokens <= SPEC_MAX_TOKENS);
    s->n_drafts++;
    s->n_draft_tokens += n_draft_tokens;
    s->n_accepted += n_accepted;
    for (int32_t i = 0; i < n_accepted; i++) s->per_pos[i]++;
}

void spec_stats_diff(spec_stats_t *d, const spec_stats_t *a, const spec_stats_t *b) {
    d->n_drafts = a->n_drafts - b->n_drafts;
    d->n_draft_tokens = a->n_draft_tokens - b->n_draft_tokens;
    d->n_accepted = a->n_accepted - b->n_accepted;
    for (int i = 0; i < SPEC_MAX_TOKENS; i++) d->per_pos[i] = a->per_pos[i] - b->per_pos[i];
}

bool spec_stats_format(const spec_stats_t *d, int32_t K, double elapsed_s, char *buf, size_t cap) {
    if (d->n_drafts <= 0 || cap == 0) return false;
    double drafted_tps = elapsed_s > 0 ? (double)d->n_draft_tokens / elapsed_s : 0.0;
    double accepted_tps = elapsed_s > 0 ? (double)d->n_accepted / elapsed_s : 0.0;
    double rate = d->n_draft_tokens > 0 ? 100.0 * (double)d->n_accepted / (double)d->n_draft_tokens : NAN;
    char rates[SPEC_MAX_TOKENS * 8] = "";
    size_t at = 0;
    for (int32_t i = 0; i < K && i < SPEC_MAX_TOKENS; i++)
        at += (size_t)snprintf(rates + at, sizeof rates - at, "%s%.3f", i ? ", " : "",
                               (double)d->per_pos[i] / (double)d->n_drafts);
    /* Mean acceptance length counts the bonus token, as vLLM's. */
    snprintf(buf, cap,
             "SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, Drafted "
             "throughput: %.2f tokens/s, Accepted: %lld tokens, Drafted: %lld tokens, Per-position acceptance rate: "
             "%s, Avg Draft acceptance rate: %.1f%%",
             1.0 + (double)d->n_accepted / (double)d->n_drafts, accepted_tps, drafted_tps, (long long)d->n_accepted,
             (long long)d->n_draft_tokens, rates, rate);
    return true;
}
