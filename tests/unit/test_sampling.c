/* test_sampling.c - every sampling parameter against its definition.
 *
 * Distributions are checked by drawing many tokens and comparing frequencies
 * with a brute-force reference (sorting, no partial selection) within 5
 * standard deviations; a token the reference gives probability 0 must never
 * be drawn. Validation messages are compared with vLLM's word for word.
 */
#include <math.h>
#include <stdbool.h>

#include "ops_cpu.h"
#include "servelab/rng.h"
#include "servelab/sampler.h"
#include "servelab/sampling.h"
#include "test.h"

static cpu_sample_scratch_t scratch;
static const int32_t EOS[1] = {2};

static sampling_params_t params(float temperature) {
    sampling_params_t p;
    sampling_params_default(&p);
    p.temperature = temperature;
    return p;
}

typedef struct {
    const int32_t *prompt, *output;
    int32_t n_prompt, n_output;
} history_t;

static const history_t NO_HISTORY = {NULL, NULL, 0, 0};

/* One request's step as the model runner takes it: the draw from the
 * request's generator when it samples at random, the row resolved (at
 * offset `off` of shared ids / bias arrays, as a later row of a batch),
 * then the CPU sampler (the CPU backend's `sample` op). */
static sample_result_t run_at(const sampling_params_t *p, const float *l, int V, history_t h, sl_rng_t *rng,
                              int64_t off) {
    static int32_t ids[4096];
    static float bias[4096];
    double u = sampling_draws(p) ? rng_uniform(rng) : 0.0;
    SL_ASSERT(off + sampling_row_n_ids(p, h.n_prompt, h.n_output, 1) <= 4096);
    sampling_row_t row;
    CHECK_EQ_INT(sampling_row_resolve(&row, p, h.prompt, h.n_prompt, h.output, h.n_output, EOS, 1, u, ids, bias, off),
                 off + sampling_row_n_ids(p, h.n_prompt, h.n_output, 1));
    sample_result_t r;
    cpu_sample(&row, ids, bias, l, V, &scratch, &r);
    return r;
}

static sample_result_t run(const sampling_params_t *p, const float *l, int V, history_t h, sl_rng_t *rng) {
    return run_at(p, l, V, h, rng, 0);
}

static int32_t greedy(const sampling_params_t *p, const float *l, int V, history_t h) {
    sl_rng_t rng;
    rng_seed(&rng, 0);
    return run(p, l, V, h, &rng).token;
}

/* ---- the reference --------------------------------------------------------- */

/* log_softmax(logits)[token], computed in double: the raw logprob by its definition. */
static double log_softmax_at(const float *l, int64_t V, int32_t token) {
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (l[i] > l[best]) best = i;
    double mx = l[best], total = 0.0;
    for (int64_t i = 0; i < V; i++) total += exp((double)l[i] - mx);
    return (double)l[token] - mx - log(total);
}

static const double *sort_key;
static int by_key_desc(const void *a, const void *b) {
    int i = *(const int *)a, j = *(const int *)b;
    if (sort_key[i] != sort_key[j]) return sort_key[i] > sort_key[j] ? -1 : 1;
    return i - j;
}

/* The distribution the sampler draws from, for logits already through
 * min_tokens / bias / penalties (`z`), by the definitions: z / T, then min_p
 * (p >= min_p * p_max), top_k (keep >= the k-th value), top_p (smallest
 * prefix, best first and lower id first on ties, whose mass reaches top_p). */
static void reference(const float *l, int V, const sampling_params_t *p, double *q) {
    double z[4096];
    int order[4096];
    SL_ASSERT(V <= 4096);
    float T = p->temperature < 0.01f ? 0.01f : p->temperature;
    double mx = -INFINITY;
    for (int i = 0; i < V; i++) {
        z[i] = (double)(l[i] / T);
        if (z[i] > mx) mx = z[i];
    }
    for (int i = 0; i < V; i++)
        if (exp(z[i] - mx) < p->min_p) z[i] = -INFINITY;
    for (int i = 0; i < V; i++) order[i] = i;
    sort_key = z;
    qsort(order, (size_t)V, sizeof *order, by_key_desc);
    if (p->top_k > 0 && p->top_k < V) {
        double kth = z[order[p->top_k - 1]];
        for (int i = 0; i < V; i++)
            if (z[i] < kth) z[i] = -INFINITY;
    }
    double total = 0;
    for (int i = 0; i < V; i++) total += q[i] = exp(z[i] - mx);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int j = 0;
        while (j < V && cum < p->top_p * total) cum += q[order[j++]];
        for (; j < V; j++) total -= q[order[j]], q[order[j]] = 0;
    }
    for (int i = 0; i < V; i++) q[i] /= total;
}

/* Draws n tokens and checks their frequencies against q. */
static void check_frequencies(const sampling_params_t *p, const float *l, int V, history_t h,
                              const double *q, int n, uint64_t seed) {
    static int counts[4096];
    memset(counts, 0, sizeof counts);
    sl_rng_t rng;
    rng_seed(&rng, seed);
    for (int k = 0; k < n; k++) counts[run(p, l, V, h, &rng).token]++;
    double worst = 0;
    int worst_i = 0;
    for (int i = 0; i < V; i++) {
        /* Binomial deviation in counts; the +1 keeps one draw of a very
         * unlikely token from counting as many standard deviations. */
        double sd = sqrt(n * q[i] * (1 - q[i]) + 1.0);
        if (q[i] == 0) {
            if (counts[i]) fprintf(stderr, "  token %d has probability 0 but was drawn %d times\n", i, counts[i]);
            CHECK(counts[i] == 0);
            continue;
        }
        double dev = fabs(counts[i] - n * q[i]) / sd;
        if (dev > worst) worst = dev, worst_i = i;
    }
    printf("  %d draws over V=%d: worst token %d at %.2f sd\n", n, V, worst_i, worst);
    CHECK(worst < 5.0);
}

static void check_against_reference(const sampling_params_t *p, const float *l, int V, int n, uint64_t seed) {
    static double q[4096];
    reference(l, V, p, q);
    check_frequencies(p, l, V, NO_HISTORY, q, n, seed);
}

/* Softmax of processed logits at temperature 1, to state expected results by hand. */
static void softmax(const double *z, int V, double *q) {
    double mx = -INFINITY, t = 0;
    for (int i = 0; i < V; i++) mx = z[i] > mx ? z[i] : mx;
    for (int i = 0; i < V; i++) t += q[i] = exp(z[i] - mx);
    for (int i = 0; i < V; i++) q[i] /= t;
}

static void random_logits(float *l, int V, float scale) {
    for (int i = 0; i < V; i++) l[i] = scale * test_uniform();
}

/* ---- parameters ------------------------------------------------------------- */

static void test_defaults_are_vllms(void) {
    sampling_params_t p;
    sampling_params_default(&p);
    CHECK_EQ_INT(p.n, 1);
    CHECK(p.temperature == 1.0f && p.top_p == 1.0f && p.top_k == 0 && p.min_p == 0.0f);
    CHECK(p.repetition_penalty == 1.0f && p.presence_penalty == 0 && p.frequency_penalty == 0);
    CHECK_EQ_INT(p.max_tokens, 16);
    CHECK_EQ_INT(p.min_tokens, 0);
    CHECK_EQ_INT(p.logprobs, -1);
    CHECK(p.skip_special_tokens && !p.ignore_eos && !p.include_stop_str_in_output && !p.has_seed);
    CHECK(p.n_stop == 0 && p.n_stop_token_ids == 0 && p.n_logit_bias == 0);
    sl_err_t err;
    CHECK_EQ_INT(sampling_params_validate(&p, 1024, &err), 0);
}

/* Validates p and expects exactly `msg` (NULL: valid). */
static void expect_message(const sampling_params_t *p, const char *msg) {
    sl_err_t err = {{0}};
    int rc = sampling_params_validate(p, 1024, &err);
    if (!msg) {
        if (rc) fprintf(stderr, "  unexpected error: %s\n", err.msg);
        CHECK_EQ_INT(rc, 0);
        return;
    }
    CHECK_EQ_INT(rc, -1);
    if (strcmp(err.msg, msg) != 0) {
        fprintf(stderr, "  got      \"%s\"\n  expected \"%s\"\n", err.msg, msg);
        CHECK(!"message differs from vLLM's");
    }
}

static void test_validation_messages_are_vllms(void) {
    sampling_params_t p;
#define CASE(stmt, msg) (sampling_params_default(&p), stmt, expect_message(&p, msg))
    CASE(p.n = 0, "n must be at least 1, got 0.");
    CASE(p.presence_penalty = 2.5f, "presence_penalty must be in [-2, 2], got 2.5.");
    CASE(p.frequency_penalty = -3.0f, "frequency_penalty must be in [-2, 2], got -3.0.");
    CASE(p.repetition_penalty = 0.0f, "repetition_penalty must be greater than zero, got 0.0.");
    CASE(p.temperature = -1.0f, "temperature must be non-negative, got -1.0.");
    CASE(p.temperature = -0.1, "temperature must be non-negative, got -0.1.");
    CASE(p.temperature = NAN, "temperature must be a finite number, got nan.");
    CASE(p.top_p = 0.0f, "top_p must be in (0, 1], got 0.0.");
    CASE(p.top_p = 1.5f, "top_p must be in (0, 1], got 1.5.");
    CASE(p.top_p = 100.0f, "top_p must be in (0, 1], got 100.0.");
    CASE(p.top_p = 1e20, "top_p must be in (0, 1], got 1e+20.");
    CASE(p.top_p = -2.0000002, "top_p must be in (0, 1], got -2.0000002.");
    CASE(p.top_k = -2, "top_k must be 0 (disable), or at least 1, got -2.");
    CASE(p.min_p = 1.5f, "min_p must be in [0, 1], got 1.5.");
    CASE(p.min_p = -1e-05, "min_p must be in [0, 1], got -1e-05.");
    CASE(p.min_p = -0.0001, "min_p must be in [0, 1], got -0.0001.");
    CASE(p.max_tokens = 0, "max_tokens must be at least 1, got 0.");
    CASE(p.min_tokens = -1, "min_tokens must be greater than or equal to 0, got -1.");
    CASE(p.min_tokens = 20, "min_tokens must be less than or equal to max_tokens=16, got 20.");
    CASE(p.logprobs = 21, "Requested sample logprobs of 21, which is greater than max allowed: 20");
    CASE(p.logprobs = -2, "logprobs must be non-negative, got -2.");
    int32_t bias_ids[3] = {5, 5000, -1};
    float bias_vals[3] = {1, 1, 1};
    CASE((p.n_logit_bias = 3, p.logit_bias_ids = bias_ids, p.logit_bias_values = bias_vals),
         "token_id(s) [5000, -1] in logit_bias contain out-of-vocab token ids. Vocabulary size: 1024");
    int32_t stop_ids[2] = {2, 1024};
    CASE((p.n_stop_token_ids = 2, p.stop_token_ids = stop_ids),
         "token_id(s) [1024] in stop_token_ids contain out-of-vocab token ids. Vocabulary size: 1024");
    char empty[] = "", ok[] = "###", bad_utf8[] = "a\xC3";
    char *stops[2] = {ok, empty};
    CASE((p.n_stop = 2, p.stop = stops), "stop cannot contain an empty string.");
    stops[1] = bad_utf8;
    CASE((p.n_stop = 2, p.stop = stops), "stop strings must be valid UTF-8.");
    /* Accepted: the edges of each range, and -1 as "off" for top_k. */
    CASE((p.top_k = -1, p.top_p = 1.0f, p.min_p = 1.0f, p.temperature = 0.0f), NULL);
    CASE((p.presence_penalty = -2.0f, p.frequency_penalty = 2.0f, p.logprobs = 20), NULL);
    CASE((p.min_tokens = 16, p.top_k = 5000), NULL);
    CASE((p.n_stop = 1, p.stop = stops, p.n_logit_bias = 1, p.logit_bias_ids = bias_ids,
          p.logit_bias_values = bias_vals),
         NULL);
#undef CASE
}

/* vLLM compares Python floats (doubles): the value as sent, before any narrowing to
 * float32, decides, at every boundary. */
static void test_ranges_compare_the_value_as_sent(void) {
    sampling_params_t p;
#define CASE(stmt, msg) (sampling_params_default(&p), stmt, expect_message(&p, msg))
    CASE(p.top_p = 1.0000000000000002, "top_p must be in (0, 1], got 1.0000000000000002.");
    CASE(p.top_p = 5e-324, NULL); /* > 0, though 0 as a float32 */
    CASE(p.top_p = -5e-324, "top_p must be in (0, 1], got -5e-324.");
    CASE(p.min_p = 1.0000000000000002, "min_p must be in [0, 1], got 1.0000000000000002.");
    CASE(p.min_p = -5e-324, "min_p must be in [0, 1], got -5e-324.");
    CASE(p.presence_penalty = 2.0000000000000004, "presence_penalty must be in [-2, 2], got 2.0000000000000004.");
    CASE(p.frequency_penalty = -2.0000000000000004, "frequency_penalty must be in [-2, 2], got -2.0000000000000004.");
    CASE(p.temperature = -5e-324, "temperature must be non-negative, got -5e-324.");
    CASE(p.temperature = 1e300, NULL); /* finite: vLLM's era has no upper bound */
    CASE(p.temperature = INFINITY, "temperature must be a finite number, got inf.");
    CASE(p.repetition_penalty = 5e-324, NULL);
    CASE(p.repetition_penalty = -5e-324, "repetition_penalty must be greater than zero, got -5e-324.");
    CASE(p.repetition_penalty = INFINITY, "repetition_penalty must be a finite number, got inf.");
    CASE(p.top_p = INFINITY, "top_p must be in (0, 1], got inf.");
    CASE(p.presence_penalty = -INFINITY, "presence_penalty must be in [-2, 2], got -inf.");
    /* the edges themselves */
    CASE((p.top_p = 1.0, p.min_p = 0.0, p.presence_penalty = -2.0, p.frequency_penalty = 2.0), NULL);
#undef CASE
    /* a temperature that is 0 as a float32 is still above 0: raised to 0.01 and drawn, as in vLLM */
    sampling_params_default(&p);
    p.temperature = 1e-300;
    CHECK(sampling_draws(&p));
    p.temperature = 0.0;
    CHECK(!sampling_draws(&p));
}

static void test_copy_is_deep(void) {
    sampling_params_t a, b;
    sampling_params_default(&a);
    a.n_logit_bias = 2;
    a.logit_bias_ids = sl_malloc(2 * sizeof(int32_t));
    a.logit_bias_values = sl_malloc(2 * sizeof(float));
    a.logit_bias_ids[0] = 7, a.logit_bias_ids[1] = 9;
    a.logit_bias_values[0] = 1.5f, a.logit_bias_values[1] = -2.0f;
    a.n_stop_token_ids = 1;
    a.stop_token_ids = sl_malloc(sizeof(int32_t));
    a.stop_token_ids[0] = 13;
    a.n_stop = 2;
    a.stop = sl_malloc(2 * sizeof(char *));
    a.stop[0] = sl_strdup("END");
    a.stop[1] = sl_strdup("\n\n");
    a.temperature = 0.3f;
    sampling_params_copy(&b, &a);
    sampling_params_free(&a); /* b must not share anything with a (ASan checks) */
    CHECK(a.stop == NULL && a.n_stop == 0 && a.logit_bias_ids == NULL);
    CHECK(b.temperature == 0.3f);
    CHECK(b.n_logit_bias == 2 && b.logit_bias_ids[1] == 9 && b.logit_bias_values[1] == -2.0f);
    CHECK(b.n_stop_token_ids == 1 && b.stop_token_ids[0] == 13);
    CHECK(b.n_stop == 2 && strcmp(b.stop[0], "END") == 0 && strcmp(b.stop[1], "\n\n") == 0);
    sampling_params_free(&b);
    sampling_params_free(&b); /* freeing twice is harmless */
}

/* ---- greedy ------------------------------------------------------------------ */

static void test_greedy_is_first_argmax_of_processed_logits(void) {
    float l[5] = {1.0f, 3.0f, 3.0f, 2.0f, -INFINITY};
    sampling_params_t p = params(0.0f);
    CHECK_EQ_INT(greedy(&p, l, 5, NO_HISTORY), 1);
    /* top_k / top_p / min_p do not change an argmax. */
    p.top_k = 1, p.top_p = 0.1f, p.min_p = 0.9f;
    CHECK_EQ_INT(greedy(&p, l, 5, NO_HISTORY), 1);
    /* Processing does: a bias moves the argmax. */
    int32_t id = 3;
    float b = 1.5f;
    p.n_logit_bias = 1, p.logit_bias_ids = &id, p.logit_bias_values = &b;
    CHECK_EQ_INT(greedy(&p, l, 5, NO_HISTORY), 3);
}

static void test_greedy_draws_no_random_numbers(void) {
    float l[3] = {0.0f, 1.0f, 0.5f};
    sampling_params_t p = params(0.0f);
    sl_rng_t rng, before;
    rng_seed(&rng, 5);
    before = rng;
    run(&p, l, 3, NO_HISTORY, &rng);
    CHECK(memcmp(&rng, &before, sizeof rng) == 0);
}

/* ---- temperature, top_k, top_p, min_p --------------------------------------- */

static void test_frequencies_follow_softmax_over_temperature(void) {
    float l[5] = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f};
    float temps[3] = {0.5f, 1.0f, 1.7f};
    for (int t = 0; t < 3; t++) {
        sampling_params_t p = params(temps[t]);
        double z[5], q[5];
        for (int i = 0; i < 5; i++) z[i] = l[i] / temps[t];
        softmax(z, 5, q);
        check_frequencies(&p, l, 5, NO_HISTORY, q, 25000, 11 + (uint64_t)t);
    }
}

static void test_tiny_temperature_is_raised_to_vllms_floor(void) {
    /* vLLM raises 0 < T < 0.01 to 0.01: token 1 keeps 1 / (1 + e^2) ~ 12%. */
    float l[2] = {0.0f, -0.02f};
    sampling_params_t p = params(0.001f);
    double z[2] = {0.0, -2.0}, q[2];
    softmax(z, 2, q);
    check_frequencies(&p, l, 2, NO_HISTORY, q, 20000, 3);
}

static void test_top_k_keeps_the_k_best(void) {
    float l[6] = {0.3f, 1.2f, -0.4f, 0.9f, 0.1f, 1.0f};
    sampling_params_t p = params(1.0f);
    p.top_k = 3; /* ids 1, 5, 3 */
    double z[6] = {-INFINITY, 1.2, -INFINITY, 0.9, -INFINITY, 1.0}, q[6];
    softmax(z, 6, q);
    check_frequencies(&p, l, 6, NO_HISTORY, q, 25000, 21);
    p.top_k = 6; /* == V: off */
    check_against_reference(&p, l, 6, 25000, 22);
}

static void test_top_k_keeps_all_ties_at_the_kth_value(void) {
    float l[6] = {3.0f, 2.0f, 2.0f, 2.0f, 1.0f, 0.0f};
    sampling_params_t p = params(1.0f);
    p.top_k = 2; /* the 2nd value is 2.0: ids 1, 2, 3 all stay, as in vLLM */
    double z[6] = {3, 2, 2, 2, -INFINITY, -INFINITY}, q[6];
    softmax(z, 6, q);
    check_frequencies(&p, l, 6, NO_HISTORY, q, 25000, 23);
}

static void test_top_p_keeps_smallest_set_reaching_p(void) {
    /* Probabilities 0.5, 0.125, 0.125, 0.25: best first 0, 3, 1, 2. */
    float l[4] = {logf(0.5f), logf(0.125f), logf(0.125f), logf(0.25f)};
    sampling_params_t p = params(1.0f);
    struct {
        float top_p;
        double q[4];
    } cases[] = {
        {0.3f, {1, 0, 0, 0}},                      /* the best token alone reaches 0.3 */
        {0.5f - 1e-4f, {1, 0, 0, 0}},
        {0.5f + 1e-4f, {2.0 / 3, 0, 0, 1.0 / 3}},  /* 0.5 is short: the next one joins */
        {0.75f - 1e-4f, {2.0 / 3, 0, 0, 1.0 / 3}},
        {0.75f + 1e-4f, {4.0 / 7, 1.0 / 7, 0, 2.0 / 7}}, /* tie at 0.125: lower id first */
        {0.875f + 1e-4f, {0.5, 0.125, 0.125, 0.25}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        p.top_p = cases[c].top_p;
        printf("  top_p %.5f\n", (double)p.top_p);
        check_frequencies(&p, l, 4, NO_HISTORY, cases[c].q, 20000, 31 + c);
    }
}

static void test_top_p_mass_is_after_top_k_and_temperature(void) {
    float l[5] = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f};
    sampling_params_t p = params(0.8f);
    p.top_k = 3, p.top_p = 0.8f;
    check_against_reference(&p, l, 5, 25000, 41);
    /* By hand: top-3 at T 0.8 is 0.549, 0.294, 0.157 and 0.549 + 0.294 >= 0.8;
     * over all five (0.486, 0.260, 0.139, ...) two would not reach 0.8. */
    double z[5] = {2.0 / 0.8, 1.5 / 0.8, -INFINITY, -INFINITY, -INFINITY}, q[5];
    softmax(z, 5, q);
    check_frequencies(&p, l, 5, NO_HISTORY, q, 25000, 42);
}

static void test_min_p_keeps_tokens_above_fraction_of_best(void) {
    /* Relative to the best: 1, 0.3, 0.1, 0.05. */
    float l[4] = {0.0f, logf(0.3f), logf(0.1f), logf(0.05f)};
    sampling_params_t p = params(1.0f);
    p.min_p = 0.2f;
    double q1[4] = {1 / 1.3, 0.3 / 1.3, 0, 0};
    check_frequencies(&p, l, 4, NO_HISTORY, q1, 20000, 51);
    p.min_p = 0.09f;
    double q2[4] = {1 / 1.4, 0.3 / 1.4, 0.1 / 1.4, 0};
    check_frequencies(&p, l, 4, NO_HISTORY, q2, 20000, 52);
    p.min_p = 1.0f; /* only the best */
    double q3[4] = {1, 0, 0, 0};
    check_frequencies(&p, l, 4, NO_HISTORY, q3, 10000, 53);
}

static void test_min_p_applies_after_temperature(void) {
    /* At T 2 the ratios become 1, 0.548, 0.316, 0.224: min_p 0.3 keeps three. */
    float l[4] = {0.0f, logf(0.3f), logf(0.1f), logf(0.05f)};
    sampling_params_t p = params(2.0f);
    p.min_p = 0.3f;
    check_against_reference(&p, l, 4, 20000, 54);
    double z[4] = {0, logf(0.3f) / 2.0, logf(0.1f) / 2.0, -INFINITY}, q[4];
    softmax(z, 4, q);
    check_frequencies(&p, l, 4, NO_HISTORY, q, 20000, 55);
}

static void test_filters_on_random_logits_match_reference(void) {
    float l[12];
    for (int trial = 0; trial < 6; trial++) {
        random_logits(l, 12, 3.0f);
        sampling_params_t p = params(0.5f + 0.3f * (float)trial);
        p.top_k = trial % 3 == 0 ? 0 : 2 + trial;
        p.top_p = trial % 2 ? 0.7f : 1.0f;
        p.min_p = trial >= 3 ? 0.05f : 0.0f;
        printf("  T %.1f top_k %d top_p %.1f min_p %.2f\n", (double)p.temperature, p.top_k,
               (double)p.top_p, (double)p.min_p);
        check_against_reference(&p, l, 12, 20000, 60 + (uint64_t)trial);
    }
}

static void test_large_vocab_top_k_top_p_match_reference(void) {
    /* The partial-selection paths on a vocabulary worth selecting in. */
    enum { V = 2048 };
    static float l[V];
    random_logits(l, V, 8.0f);
    sampling_params_t p = params(1.0f);
    p.top_k = 20;
    check_against_reference(&p, l, V, 3000, 71);
    p.top_k = 0, p.top_p = 0.3f;
    check_against_reference(&p, l, V, 3000, 72);
    p.top_k = 40, p.top_p = 0.9f, p.min_p = 0.01f;
    check_against_reference(&p, l, V, 3000, 73);
    p.top_k = V - 1, p.top_p = 1.0f, p.min_p = 0.0f, p.temperature = 4.0f; /* a heap of almost V */
    check_against_reference(&p, l, V, 3000, 74);
}

static void test_top_k_beyond_what_min_p_left_keeps_the_rest(void) {
    float l[5] = {0.0f, -0.1f, -5.0f, -6.0f, -7.0f};
    sampling_params_t p = params(1.0f);
    p.min_p = 0.5f, p.top_k = 3; /* min_p leaves ids 0 and 1; the 3rd value is -inf */
    double z[5] = {0.0, -0.1, -INFINITY, -INFINITY, -INFINITY}, q[5];
    softmax(z, 5, q);
    check_frequencies(&p, l, 5, NO_HISTORY, q, 20000, 75);
}

/* ---- processing: min_tokens, logit_bias, penalties ------------------------------- */

static void test_min_tokens_masks_eos_and_stop_token_ids(void) {
    float l[5] = {0.1f, 0.2f, 5.0f, 4.0f, 0.3f}; /* EOS (2) best, then stop token 3 */
    int32_t stop_id = 3, out[2] = {4, 4};
    sampling_params_t p = params(0.0f);
    p.min_tokens = 2, p.n_stop_token_ids = 1, p.stop_token_ids = &stop_id;
    history_t h = {NULL, out, 0, 1};
    CHECK_EQ_INT(greedy(&p, l, 5, h), 4); /* 1 output token < 2: both masked */
    p.ignore_eos = true;                  /* still masked, as in vLLM */
    CHECK_EQ_INT(greedy(&p, l, 5, h), 4);
    h.n_output = 2;
    CHECK_EQ_INT(greedy(&p, l, 5, h), 2);
    /* Sampling never draws a masked token. */
    p = params(1.0f);
    p.min_tokens = 2, p.n_stop_token_ids = 1, p.stop_token_ids = &stop_id;
    double z[5] = {0.1, 0.2, -INFINITY, -INFINITY, 0.3}, q[5];
    softmax(z, 5, q);
    h.n_output = 1;
    check_frequencies(&p, l, 5, h, q, 20000, 81);
}

static void test_logit_bias_adds_clamped_to_100(void) {
    float l[3] = {0.0f, 0.0f, 0.0f};
    int32_t ids[2] = {1, 2};
    float vals[2] = {1.0f, -0.5f};
    sampling_params_t p = params(1.0f);
    p.n_logit_bias = 2, p.logit_bias_ids = ids, p.logit_bias_values = vals;
    double z[3] = {0, 1, -0.5}, q[3];
    softmax(z, 3, q);
    check_frequencies(&p, l, 3, NO_HISTORY, q, 20000, 91);
    /* +250 is +100: token 0 at 150 still beats token 1 at 100 + 45. */
    float l2[3] = {150.0f, 45.0f, 0.0f}, big[2] = {250.0f, 0.0f};
    p = params(0.0f);
    p.n_logit_bias = 2, p.logit_bias_ids = ids, p.logit_bias_values = big;
    CHECK_EQ_INT(greedy(&p, l2, 3, NO_HISTORY), 0);
    big[0] = 106.0f; /* 151 > 150 */
    l2[1] = 51.0f;
    CHECK_EQ_INT(greedy(&p, l2, 3, NO_HISTORY), 1);
    big[0] = -500.0f; /* -100 at most: 51 - 100 < 0 */
    CHECK_EQ_INT(greedy(&p, l2, 3, NO_HISTORY), 0);
}

static void test_repetition_penalty_divides_positive_multiplies_negative_once(void) {
    /* Token 0 (positive) in the prompt, token 1 (negative) twice in the output,
     * token 2 (positive) in both: each penalized once; token 3 untouched. */
    float l[4] = {1.0f, -1.0f, 0.5f, 0.25f};
    int32_t prompt[3] = {0, 2, 0}, out[3] = {1, 2, 1};
    history_t h = {prompt, out, 3, 3};
    sampling_params_t p = params(1.0f);
    p.repetition_penalty = 2.0f;
    double z[4] = {0.5, -2.0, 0.25, 0.25}, q[4];
    softmax(z, 4, q);
    check_frequencies(&p, l, 4, h, q, 25000, 101);
    /* Below 1 it rewards instead: 1.0 / 0.5 = 2. */
    p.repetition_penalty = 0.5f;
    double z2[4] = {2.0, -0.5, 1.0, 0.25};
    softmax(z2, 4, q);
    check_frequencies(&p, l, 4, h, q, 25000, 102);
    /* Greedy sees it: 1.0 / 1.2 < 0.9. */
    float g[2] = {1.0f, 0.9f};
    int32_t gp[1] = {0};
    p = params(0.0f);
    p.repetition_penalty = 1.2f;
    CHECK_EQ_INT(greedy(&p, g, 2, (history_t){gp, NULL, 1, 0}), 1);
}

static void test_presence_and_frequency_penalties_count_output_only(void) {
    float l[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    int32_t prompt[2] = {0, 0}, out[4] = {1, 1, 2, 1};
    history_t h = {prompt, out, 2, 4};
    sampling_params_t p = params(1.0f);
    p.frequency_penalty = 0.5f, p.presence_penalty = 0.25f;
    double z[4] = {0.0, -(3 * 0.5 + 0.25), -(0.5 + 0.25), 0.0}, q[4];
    softmax(z, 4, q);
    check_frequencies(&p, l, 4, h, q, 25000, 111);
    /* Negative penalties encourage repetition. */
    p.frequency_penalty = -1.0f, p.presence_penalty = 0.0f;
    double z2[4] = {0.0, 3.0, 1.0, 0.0};
    softmax(z2, 4, q);
    check_frequencies(&p, l, 4, h, q, 25000, 112);
}

static void test_penalties_leave_scratch_clean(void) {
    enum { V = 64 };
    float l[V];
    random_logits(l, V, 2.0f);
    int32_t prompt[40], out[30];
    for (int i = 0; i < 40; i++) prompt[i] = (int32_t)(test_rng() % V);
    for (int i = 0; i < 30; i++) out[i] = (int32_t)(test_rng() % V);
    sampling_params_t p = params(1.0f);
    p.repetition_penalty = 1.3f, p.frequency_penalty = 0.4f, p.presence_penalty = -0.2f;
    sl_rng_t rng;
    rng_seed(&rng, 1);
    run(&p, l, V, (history_t){prompt, out, 40, 30}, &rng);
    bool clean = true;
    for (int i = 0; i < scratch.V; i++) clean &= scratch.counts[i] == 0 && scratch.in_prompt[i] == 0;
    CHECK(clean);
}

/* ---- logprobs ------------------------------------------------------------------ */

static void test_logprobs_are_raw_log_softmax_with_rank_and_sorted_top(void) {
    float l[6] = {1.0f, 2.0f, 2.0f, 0.0f, 2.0f, -1.0f};
    double lse = 0;
    for (int i = 0; i < 6; i++) lse += exp(l[i]);
    lse = log(lse);
    /* Processing changes the choice, not the logprobs: bias picks token 3. */
    int32_t id = 3;
    float b = 10.0f;
    sampling_params_t p = params(0.0f);
    p.n_logit_bias = 1, p.logit_bias_ids = &id, p.logit_bias_values = &b;
    p.repetition_penalty = 1.5f, p.logprobs = 4;
    int32_t prompt[1] = {1};
    sl_rng_t rng;
    rng_seed(&rng, 1);
    sample_result_t r = run(&p, l, 6, (history_t){prompt, NULL, 1, 0}, &rng);
    CHECK_EQ_INT(r.token, 3);
    CHECK(fabs(r.logprob - (0.0 - lse)) < 1e-6);
    CHECK_EQ_INT(r.rank, 5); /* 1 + four raw logits above 0.0 */
    CHECK_EQ_INT(r.n_top, 4);
    int32_t want[4] = {1, 2, 4, 0}; /* ties at 2.0: lower id first */
    for (int j = 0; j < 4; j++) {
        CHECK_EQ_INT(r.top_ids[j], want[j]);
        CHECK(fabs(r.top_logprobs[j] - (l[want[j]] - lse)) < 1e-6);
    }
    /* A token tied with others ranks 1 + those strictly above. */
    b = 0.0f, p.repetition_penalty = 1.0f, id = 4;
    r = run(&p, l, 6, NO_HISTORY, &rng);
    CHECK_EQ_INT(r.token, 1);
    CHECK_EQ_INT(r.rank, 1);
    /* logprobs 0: the chosen token only; -1: nothing. */
    p.logprobs = 0;
    r = run(&p, l, 6, NO_HISTORY, &rng);
    CHECK_EQ_INT(r.n_top, 0);
    CHECK(fabs(r.logprob - (2.0 - lse)) < 1e-6);
    p.logprobs = -1;
    r = run(&p, l, 6, NO_HISTORY, &rng);
    CHECK_EQ_INT(r.n_top, 0);
    CHECK_EQ_INT(r.rank, 0);
}

static void test_top_logprobs_on_random_logits_are_the_best_sorted(void) {
    enum { V = 1000 };
    static float l[V];
    random_logits(l, V, 5.0f);
    for (int i = 0; i < V; i += 97) l[i] = l[V / 2]; /* some ties */
    sampling_params_t p = params(0.7f);
    p.logprobs = SAMPLING_MAX_LOGPROBS, p.top_k = 50;
    sl_rng_t rng;
    rng_seed(&rng, 9);
    sample_result_t r = run(&p, l, V, NO_HISTORY, &rng);
    CHECK_EQ_INT(r.n_top, SAMPLING_MAX_LOGPROBS);
    static double key[V];
    static int order[V];
    for (int i = 0; i < V; i++) key[i] = l[i], order[i] = i;
    sort_key = key;
    qsort(order, V, sizeof *order, by_key_desc);
    for (int j = 0; j < r.n_top; j++) CHECK_EQ_INT(r.top_ids[j], order[j]);
    int rank = 1;
    for (int i = 0; i < V; i++) rank += l[i] > l[r.token];
    CHECK_EQ_INT(r.rank, rank);
    CHECK(fabs(r.logprob - log_softmax_at(l, V, r.token)) < 1e-5);
}

/* ---- generators ---------------------------------------------------------------- */

static void test_same_seed_same_tokens_other_seed_differs(void) {
    enum { V = 300 };
    static float l[V];
    random_logits(l, V, 2.0f);
    sampling_params_t p = params(0.9f);
    p.top_k = 100, p.top_p = 0.95f, p.min_p = 0.02f;
    sl_rng_t a, b, c;
    rng_seed(&a, 1234);
    rng_seed(&b, 1234);
    rng_seed(&c, 1235);
    bool same = true, differs = false;
    for (int k = 0; k < 64; k++) {
        int32_t x = run(&p, l, V, NO_HISTORY, &a).token, y = run(&p, l, V, NO_HISTORY, &b).token;
        same &= x == y;
        differs |= x != run(&p, l, V, NO_HISTORY, &c).token;
    }
    CHECK(same);
    CHECK(differs);
}

static void test_draws_do_not_depend_on_other_requests(void) {
    /* Two requests sharing one scratch, interleaved, draw what each draws alone. */
    enum { V = 200, N = 50 };
    static float la[V], lb[V];
    random_logits(la, V, 3.0f);
    random_logits(lb, V, 1.0f);
    sampling_params_t pa = params(1.0f), pb = params(0.6f);
    pa.top_p = 0.8f, pb.top_k = 7, pb.repetition_penalty = 1.4f;
    int32_t hist[3] = {1, 2, 3}, alone_a[N], alone_b[N];
    history_t hb = {hist, hist, 3, 3};
    sl_rng_t ra, rb;
    rng_seed(&ra, 77);
    for (int k = 0; k < N; k++) alone_a[k] = run(&pa, la, V, NO_HISTORY, &ra).token;
    rng_seed(&rb, 78);
    for (int k = 0; k < N; k++) alone_b[k] = run(&pb, lb, V, hb, &rb).token;
    rng_seed(&ra, 77);
    rng_seed(&rb, 78);
    bool same = true;
    for (int k = 0; k < N; k++) {
        same &= run(&pa, la, V, NO_HISTORY, &ra).token == alone_a[k];
        same &= run(&pb, lb, V, hb, &rb).token == alone_b[k];
    }
    CHECK(same);
}

static void test_all_masked_but_one_draws_it(void) {
    float l[4] = {-INFINITY, -INFINITY, 0.5f, -INFINITY};
    sampling_params_t p = params(1.0f);
    p.top_p = 0.5f, p.top_k = 2;
    sl_rng_t rng;
    rng_seed(&rng, 4);
    for (int k = 0; k < 100; k++) CHECK_EQ_INT(run(&p, l, 4, NO_HISTORY, &rng).token, 2);
}

/* top_k ranks a NaN logit as -inf: with fewer numbers than top_k, the draw is
 * among the numbers, by their softmax. (A NaN k-th value once kept no token,
 * and the device sampler then answered -1.) */
static void test_top_k_ranks_nan_as_minus_inf(void) {
    enum { V = 200 };
    static float l[V];
    for (int i = 0; i < V; i++) l[i] = NAN;
    l[0] = 1.0f, l[97] = 2.0f, l[194] = 0.5f;
    sampling_params_t p = params(1.0f);
    p.top_k = 40;
    static double q[V];
    double z = exp(1.0) + exp(2.0) + exp(0.5);
    q[0] = exp(1.0) / z, q[97] = exp(2.0) / z, q[194] = exp(0.5) / z;
    check_frequencies(&p, l, V, NO_HISTORY, q, 20000, 77);
}

/* ---- rows of a batch: a row resolved at an offset ------------------------------------ */

/* The result at offset 0 and at offset 5 of the shared arrays (the second row
 * of a batch), from two copies of one generator: every offset the row
 * records must point into its own slots. */
static void check_offset_changes_nothing(const sampling_params_t *p, const float *l, int V, history_t h,
                                         uint64_t seed) {
    sl_rng_t a, b;
    rng_seed(&a, seed);
    b = a;
    sample_result_t want = run_at(p, l, V, h, &a, 0), got = run_at(p, l, V, h, &b, 5);
    CHECK(memcmp(&got, &want, sizeof got) == 0);
}

static void test_a_row_samples_the_same_at_any_offset(void) {
    enum { V = 300 };
    static float l[V];
    int32_t prompt[12], out[9], stop_id = 7, bias_ids[3] = {4, 9, 4};
    float bias_vals[3] = {2.5f, -300.0f, 0.75f}; /* -300 is clamped; 4 biased twice */
    for (int i = 0; i < 12; i++) prompt[i] = (int32_t)(test_rng() % 20);
    for (int i = 0; i < 9; i++) out[i] = (int32_t)(test_rng() % 20);
    history_t h = {prompt, out, 12, 9};
    for (int c = 0; c < 40; c++) {
        random_logits(l, V, 1.0f + (float)(c % 5));
        sampling_params_t p = params(c % 4 == 0 ? 0.0f : c % 4 == 1 ? 0.7f : c % 4 == 2 ? 1.0f : 0.004f);
        if (c & 4) p.top_k = 1 + c % 30;
        if (c & 8) p.top_p = 0.3f + 0.1f * (float)(c % 6);
        if (c & 16) p.min_p = 0.05f;
        if (c % 3 == 0) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.2f;
        if (c % 3 == 1) p.presence_penalty = -0.5f;
        if (c % 5 == 0) p.min_tokens = 10, p.n_stop_token_ids = 1, p.stop_token_ids = &stop_id;
        if (c % 7 < 3) p.n_logit_bias = 3, p.logit_bias_ids = bias_ids, p.logit_bias_values = bias_vals;
        p.logprobs = c % 6 == 0 ? -1 : c % 6 == 1 ? 0 : 5;
        check_offset_changes_nothing(&p, l, V, c & 1 ? h : NO_HISTORY, 1000 + (uint64_t)c);
    }
}

/* Whether a request draws (the runner takes one draw per step exactly then),
 * and a row whose every token is masked still gives a token (the first),
 * greedy or not, instead of reading past the vocabulary. */
static void test_draws_only_when_random_and_an_all_masked_row_gives_token_0(void) {
    float l[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    sl_rng_t rng;
    rng_seed(&rng, 3);
    sampling_params_t p = params(1.0f);
    CHECK(sampling_draws(&p));
    CHECK_EQ_INT(run(&p, l, 4, NO_HISTORY, &rng).token, 0);
    p = params(0.004f); /* raised to 0.01: random */
    CHECK(sampling_draws(&p));
    p = params(0.0f);
    CHECK(!sampling_draws(&p));
    CHECK_EQ_INT(run(&p, l, 4, NO_HISTORY, &rng).token, 0);
    /* All masked by min_tokens: the only finite logit is EOS's. */
    float m[3] = {-INFINITY, -INFINITY, 1.0f};
    p = params(0.8f);
    p.min_tokens = 1, p.top_p = 0.5f;
    CHECK_EQ_INT(run(&p, m, 3, NO_HISTORY, &rng).token, 0);
}

static void test_row_resolve_lays_out_masks_bias_and_needed_history(void) {
    int32_t prompt[3] = {10, 11, 12}, out[2] = {20, 21}, stop_ids[2] = {30, 31}, bias_ids[2] = {40, 41};
    float bias_vals[2] = {150.0f, -0.5f};
    sampling_params_t p = params(0.005f); /* raised to 0.01, so not greedy */
    p.min_tokens = 3, p.n_stop_token_ids = 2, p.stop_token_ids = stop_ids;
    p.n_logit_bias = 2, p.logit_bias_ids = bias_ids, p.logit_bias_values = bias_vals;
    p.logprobs = 50; /* more than the 20 served */
    p.top_k = 7;
    int32_t ids[16];
    float bias[16];
    sampling_row_t row;
    /* No penalty: no history; 2 outputs < min_tokens 3: EOS and stop ids masked. */
    CHECK_EQ_INT(sampling_row_n_ids(&p, 3, 2, 1), 5);
    CHECK_EQ_INT(sampling_row_resolve(&row, &p, prompt, 3, out, 2, EOS, 1, 0.25, ids, bias, 2), 7);
    CHECK(row.temperature == 0.01f && row.u == 0.25 && row.top_k == 7 && row.n_logprobs == SAMPLING_MAX_LOGPROBS);
    CHECK(row.mask_off == 2 && row.n_mask == 3 && ids[2] == EOS[0] && ids[3] == 30 && ids[4] == 31);
    CHECK(row.bias_off == 5 && row.n_bias == 2 && ids[5] == 40 && bias[5] == 100.0f && bias[6] == -0.5f);
    CHECK(bias[2] == 0.0f && row.hist_off == 7 && row.n_prompt == 0 && row.n_output == 0);
    /* Presence only: the output (no EOS ids: only the stop ids masked). */
    p.presence_penalty = 0.5f;
    CHECK_EQ_INT(sampling_row_resolve(&row, &p, prompt, 3, out, 2, EOS, 0, 0.0, ids, bias, 0), 6);
    CHECK(row.n_mask == 2 && row.n_prompt == 0 && row.n_output == 2 && ids[2] == 40 && row.hist_off == 4);
    CHECK(ids[4] == 20 && ids[5] == 21);
    /* Repetition: the prompt too. Greedy; enough outputs: no mask. */
    p.repetition_penalty = 1.1f, p.min_tokens = 2, p.temperature = 0.0f;
    CHECK_EQ_INT(sampling_row_resolve(&row, &p, prompt, 3, out, 2, EOS, 1, 0.5, ids, bias, 0), 7);
    CHECK(row.temperature == 0.0f && row.n_mask == 0 && row.bias_off == 0 && row.hist_off == 2);
    CHECK(row.n_prompt == 3 && row.n_output == 2 && ids[2] == 10 && ids[4] == 12 && ids[5] == 20 && bias[6] == 0.0f);
}

int main(void) {
    test_seed();
    cpu_sample_scratch_init(&scratch, 4096);
    RUN(test_defaults_are_vllms);
    RUN(test_validation_messages_are_vllms);
    RUN(test_ranges_compare_the_value_as_sent);
    RUN(test_copy_is_deep);
    RUN(test_greedy_is_first_argmax_of_processed_logits);
    RUN(test_greedy_draws_no_random_numbers);
    RUN(test_frequencies_follow_softmax_over_temperature);
    RUN(test_tiny_temperature_is_raised_to_vllms_floor);
    RUN(test_top_k_keeps_the_k_best);
    RUN(test_top_k_keeps_all_ties_at_the_kth_value);
    RUN(test_top_p_keeps_smallest_set_reaching_p);
    RUN(test_top_p_mass_is_after_top_k_and_temperature);
    RUN(test_min_p_keeps_tokens_above_fraction_of_best);
    RUN(test_min_p_applies_after_temperature);
    RUN(test_filters_on_random_logits_match_reference);
    RUN(test_large_vocab_top_k_top_p_match_reference);
    RUN(test_top_k_beyond_what_min_p_left_keeps_the_rest);
    RUN(test_min_tokens_masks_eos_and_stop_token_ids);
    RUN(test_logit_bias_adds_clamped_to_100);
    RUN(test_repetition_penalty_divides_positive_multiplies_negative_once);
    RUN(test_presence_and_frequency_penalties_count_output_only);
    RUN(test_penalties_leave_scratch_clean);
    RUN(test_logprobs_are_raw_log_softmax_with_rank_and_sorted_top);
    RUN(test_top_logprobs_on_random_logits_are_the_best_sorted);
    RUN(test_same_seed_same_tokens_other_seed_differs);
    RUN(test_draws_do_not_depend_on_other_requests);
    RUN(test_all_masked_but_one_draws_it);
    RUN(test_top_k_ranks_nan_as_minus_inf);
    RUN(test_a_row_samples_the_same_at_any_offset);
    RUN(test_draws_only_when_random_and_an_all_masked_row_gives_token_0);
    RUN(test_row_resolve_lays_out_masks_bias_and_needed_history);
    cpu_sample_scratch_free(&scratch);
    return test_summary();
}
