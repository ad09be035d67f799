/* test_spec_decode.c - n-gram speculative decoding's pure parts: the config as vLLM
 * parses it, the proposer against vLLM's own examples and a brute-force twin,
 * the acceptance rule, the counters and vLLM's log line. (Its invariants in the
 * engine, tokens identical with and without it, are test_engine.c's.) */
#include "servelab/spec_decode.h"
#include "test.h"

static void test_config_defaults_and_vllm_resolution(void) {
    spec_config_t c;
    sl_err_t err;
    CHECK_EQ_INT(spec_config_parse(&c, "{\"method\": \"ngram\", \"num_speculative_tokens\": 3}", &err), 0);
    CHECK(c.on);
    CHECK_EQ_INT(c.num_speculative_tokens, 3);
    CHECK_EQ_INT(c.prompt_lookup_min, 5); /* both absent: 5 and 5 */
    CHECK_EQ_INT(c.prompt_lookup_max, 5);
    CHECK_EQ_INT(spec_config_parse(&c, "{\"method\":\"[ngram]\",\"num_speculative_tokens\":2,\"prompt_lookup_max\":4}",
                                   &err), 0);
    CHECK_EQ_INT(c.prompt_lookup_min, 4); /* min absent: max's value */
    CHECK_EQ_INT(c.prompt_lookup_max, 4);
    CHECK_EQ_INT(spec_config_parse(&c, "{\"model\":\"ngram\",\"num_speculative_tokens\":2,\"prompt_lookup_min\":2}",
                                   &err), 0);
    CHECK_EQ_INT(c.prompt_lookup_min, 2); /* max absent: min's value; the older "model" spelling */
    CHECK_EQ_INT(c.prompt_lookup_max, 2);
    CHECK_EQ_INT(spec_config_parse(&c, "{\"method\":\"ngram\",\"num_speculative_tokens\":5,\"prompt_lookup_min\":1,"
                                       "\"prompt_lookup_max\":3}", &err), 0);
    CHECK_EQ_INT(c.prompt_lookup_min, 1);
    CHECK_EQ_INT(c.prompt_lookup_max, 3);
}

static void test_config_refusals_name_the_problem(void) {
    struct { const char *json, *says; } bad[] = {
        {"not json", "not valid JSON"},
        {"[1]", "expected a JSON object"},
        {"{\"method\":\"ngram\"}", "num_speculative_tokens must be provided"},
        {"{\"method\":\"ngram\",\"num_speculative_tokens\":0}", "greater than zero (0)"},
        {"{\"method\":\"ngram\",\"num_speculative_tokens\":2.5}", "num_speculative_tokens must be an integer"},
        {"{\"method\":\"ngram\",\"num_speculative_tokens\":33}", "limit of 32"},
        {"{\"method\":\"ngram\",\"num_speculative_tokens\":2,\"prompt_lookup_min\":0,\"prompt_lookup_max\":3}",
         "prompt_lookup_min=0 must be > 0"},
        {"{\"method\":\"ngram\",\"num_speculative_tokens\":2,\"prompt_lookup_min\":4,\"prompt_lookup_max\":3}",
         "prompt_lookup_min=4 must be <= prompt_lookup_max=3"},
        {"{\"method\":\"eagle\",\"num_speculative_tokens\":2}", "method \"eagle\" is not supported"},
        {"{\"model\":\"meta-llama/Llama-3.2-1B\",\"num_speculative_tokens\":2}", "a draft model is not supported"},
        {"{\"num_speculative_tokens\":2}", "give the method"},
        {"{\"method\":\"ngram\",\"num_speculative_tokens\":2,\"disable_by_batch_size\":4}",
         "unsupported key \"disable_by_batch_size\""},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        spec_config_t c;
        sl_err_t err;
        CHECK_EQ_INT(spec_config_parse(&c, bad[i].json, &err), -1);
        CHECK(!c.on);
        CHECK_STR_CONTAINS(err.msg, bad[i].says);
    }
}

/* vLLM's docstring example (NgramProposer.propose), then the rules one by one. */
static void test_proposer_matches_vllm_examples(void) {
    int32_t out[8];
    /* [1,2,3,4,2,3], n in [2,3], k = 4: [2,3] matches at 1, three tokens follow. */
    int32_t a[] = {1, 2, 3, 4, 2, 3};
    CHECK_EQ_INT(spec_ngram_propose(a, 6, 2, 3, 4, 1024, out), 3);
    CHECK(out[0] == 4 && out[1] == 2 && out[2] == 3);
    /* No repeated n-gram: nothing. */
    int32_t b[] = {1, 2, 3, 4, 5};
    CHECK_EQ_INT(spec_ngram_propose(b, 5, 2, 2, 2, 1024, out), 0);
    /* The longest n-gram wins over a shorter, earlier one. */
    int32_t c[] = {1, 2, 3, 4, 1, 2, 3, 5, 6, 1, 2, 3};
    CHECK_EQ_INT(spec_ngram_propose(c, 12, 2, 3, 2, 1024, out), 2);
    CHECK(out[0] == 4 && out[1] == 1); /* [1,2,3] first occurs at 0; 4 follows */
    /* Ties: the earliest occurrence. */
    int32_t d[] = {7, 8, 9, 7, 8, 5, 7, 8};
    CHECK_EQ_INT(spec_ngram_propose(d, 8, 2, 2, 1, 1024, out), 1);
    CHECK_EQ_INT(out[0], 9);
    /* Shorter than min_n, and max_model_len reached: nothing; near it: fewer. */
    CHECK_EQ_INT(spec_ngram_propose(a, 1, 2, 3, 4, 1024, out), 0);
    CHECK_EQ_INT(spec_ngram_propose(a, 6, 2, 3, 4, 6, out), 0);
    CHECK_EQ_INT(spec_ngram_propose(a, 6, 2, 3, 4, 7, out), 1);
    /* The match may overlap the suffix: in [5,5,5,5] the 3-gram at 0 wins,
     * and one token follows it. */
    int32_t e[] = {5, 5, 5, 5};
    CHECK_EQ_INT(spec_ngram_propose(e, 4, 1, 3, 3, 1024, out), 1);
    CHECK_EQ_INT(out[0], 5);
}

/* The definition, literally: for n from max_n down to min_n, the first start
 * s (< len - n) whose n tokens equal the last n. */
static int32_t propose_brute(const int32_t *t, int32_t len, int32_t lo, int32_t hi, int32_t k, int32_t *out) {
    for (int32_t n = hi; n >= lo; n--) {
        if (n > len) continue;
        for (int32_t s = 0; s + n < len; s++) {
            if (memcmp(t + s, t + len - n, (size_t)n * sizeof *t)) continue;
            int32_t m = len - (s + n) < k ? len - (s + n) : k;
            memcpy(out, t + s + n, (size_t)m * sizeof *t);
            return m;
        }
    }
    return 0;
}

static void test_proposer_equals_brute_force_on_random_contexts(void) {
    int32_t t[200], got[8], want[8];
    int mismatches = 0, proposals = 0;
    for (int it = 0; it < 3000; it++) {
        int32_t len = 1 + (int32_t)(test_rng() % 200), vocab = 2 + (int32_t)(test_rng() % 6);
        int32_t lo = 1 + (int32_t)(test_rng() % 4), hi = lo + (int32_t)(test_rng() % 4);
        int32_t k = 1 + (int32_t)(test_rng() % 8);
        for (int32_t i = 0; i < len; i++) t[i] = (int32_t)(test_rng() % (uint64_t)vocab);
        int32_t ng = spec_ngram_propose(t, len, lo, hi, k, 1 << 20, got);
        int32_t nw = propose_brute(t, len, lo, hi, k, want);
        proposals += ng > 0;
        if (ng != nw || memcmp(got, want, (size_t)ng * sizeof *got)) mismatches++;
    }
    printf("  3000 random contexts: %d proposals, %d mismatches\n", proposals, mismatches);
    CHECK_EQ_INT(mismatches, 0);
    CHECK(proposals > 1000);
}

static void test_acceptance_stops_at_the_first_disagreement(void) {
    int32_t drafts[] = {10, 11, 12, 13};
    int32_t all[] = {10, 11, 12, 13, 99}, second[] = {10, 42, 12, 13, 99}, none[] = {3, 11, 12, 13, 99};
    CHECK_EQ_INT(spec_n_accepted(drafts, 4, all), 4);
    CHECK_EQ_INT(spec_n_accepted(drafts, 4, second), 1); /* the later agreements do not count */
    CHECK_EQ_INT(spec_n_accepted(drafts, 4, none), 0);
    CHECK_EQ_INT(spec_n_accepted(drafts, 0, none), 0);
}

static void test_counters_and_log_line_as_vllm(void) {
    spec_stats_t s = {0}, zero = {0}, d;
    spec_stats_observe(&s, 3, 3);
    spec_stats_observe(&s, 3, 1);
    spec_stats_observe(&s, 2, 0);
    CHECK_EQ_INT(s.n_drafts, 3);
    CHECK_EQ_INT(s.n_draft_tokens, 8);
    CHECK_EQ_INT(s.n_accepted, 4);
    CHECK(s.per_pos[0] == 2 && s.per_pos[1] == 1 && s.per_pos[2] == 1 && s.per_pos[3] == 0);
    spec_stats_diff(&d, &s, &zero);
    char line[512];
    CHECK(spec_stats_format(&d, 3, 2.0, line, sizeof line));
    CHECK(!strcmp(line, "SpecDecoding metrics: Mean acceptance length: 2.33, Accepted throughput: 2.00 tokens/s, "
                        "Drafted throughput: 4.00 tokens/s, Accepted: 4 tokens, Drafted: 8 tokens, Per-position "
                        "acceptance rate: 0.667, 0.333, 0.333, Avg Draft acceptance rate: 50.0%"));
    spec_stats_diff(&d, &s, &s);
    CHECK(!spec_stats_format(&d, 3, 2.0, line, sizeof line)); /* no draft in the interval: no line */
}

int main(void) {
    test_seed();
    RUN(test_config_defaults_and_vllm_resolution);
    RUN(test_config_refusals_name_the_problem);
    RUN(test_proposer_matches_vllm_examples);
    RUN(test_proposer_equals_brute_force_on_random_contexts);
    RUN(test_acceptance_stops_at_the_first_disagreement);
    RUN(test_counters_and_log_line_as_vllm);
    return test_summary();
}
