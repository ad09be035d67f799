/* spec_decode.h - n-gram (prompt lookup) speculative decoding, vLLM V1's "ngram" method.
 *
 * After a request samples a token, the proposer looks for the longest n-gram
 * (prompt_lookup_min <= n <= prompt_lookup_max) that ends the request's
 * tokens and occurred earlier in them, and drafts the (up to K) tokens that
 * followed its earliest occurrence. The next step computes the last sampled
 * token and the drafts in one forward (K + 1 positions, in the flat batch's
 * ragged query lengths), samples a token at every position, and keeps the
 * drafts up to the first one the model did not sample there, plus the
 * model's token at that position (or the bonus token after the last draft).
 * The pieces here are pure: the config, the proposer, the acceptance count,
 * the counters and vLLM's log line; the scheduler, the model runner and
 * step.c do the rest (docs/architecture.md, "Speculative decoding").
 */
#ifndef SERVELAB_SPEC_DECODE_H
#define SERVELAB_SPEC_DECODE_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/core.h"

#define SPEC_MAX_TOKENS 32 /* largest num_speculative_tokens accepted */

typedef struct {
    bool on;
    int32_t num_speculative_tokens;          /* K, drafts per step */
    int32_t prompt_lookup_min, prompt_lookup_max;
} spec_config_t;

/* Parses --speculative-config's JSON as vLLM's SpeculativeConfig does for
 * the ngram method: {"method": "ngram" (or "[ngram]", or the older
 * {"model": "ngram"}), "num_speculative_tokens": K (required, 1..32),
 * "prompt_lookup_max", "prompt_lookup_min"} (both absent: 5 and 5; one
 * absent: the other's value; 1 <= min <= max). Other methods (draft models,
 * eagle, medusa, mtp) and unknown keys are refused. 0, or -1 with one line
 * in err; *c is all zero (off) on failure. */
int spec_config_parse(spec_config_t *c, const char *json, sl_err_t *err);

/* vLLM's NgramProposer on tokens[0 .. n): the longest n-gram of length in
 * [min_n, max_n] that is a suffix of the tokens and also occurs earlier
 * (ending before the last token), its earliest occurrence on ties, and the
 * up to k tokens that follow it, fewer where the tokens end or where n + k
 * would pass max_model_len. Writes them to out and returns how many (0: no
 * match). */
int32_t spec_ngram_propose(const int32_t *tokens, int32_t n, int32_t min_n, int32_t max_n, int32_t k,
                           int32_t max_model_len, int32_t *out);

/* The verification rule: drafts[0 .. k) against the tokens the model sampled
 * at the k + 1 verified positions. Returns a, the drafts kept (the first a
 * equal their position's sampled token; the next one does not, or a = k).
 * The request then emits drafts[0 .. a) and sampled[a]. Exact for greedy;
 * for sampling it is rejection sampling with a one-hot draft distribution
 * (vLLM's ngram case): a draft d survives with probability p(d), and a
 * rejected position's token is distributed as p without d, renormalized. */
int32_t spec_n_accepted(const int32_t *drafts, int32_t k, const int32_t *sampled);

/* vLLM's SpecDecodingStats: per verified request-step, one draft of
 * n_draft_tokens with n_accepted kept; per_pos[i] counts drafts whose
 * position i was accepted. */
typedef struct {
    int64_t n_drafts, n_draft_tokens, n_accepted;
    int64_t per_pos[SPEC_MAX_TOKENS];
} spec_stats_t;
void spec_stats_observe(spec_stats_t *s, int32_t n_draft_tokens, int32_t n_accepted);
/* d = a - b, field by field. */
void spec_stats_diff(spec_stats_t *d, const spec_stats_t *a, const spec_stats_t *b);

/* vLLM's "SpecDecoding metrics: ..." line over an interval of elapsed_s
 * seconds with the interval's counts d (K per-position rates), into buf.
 * Returns false (nothing written) when d has no draft, as vLLM logs
 * nothing then. */
bool spec_stats_format(const spec_stats_t *d, int32_t K, double elapsed_s, char *buf, size_t cap);

#endif
