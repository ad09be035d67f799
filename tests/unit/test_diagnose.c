/* test_diagnose.c - servelab diagnose's pure layers (src/lab/promtext.c,
 * src/lab/diagnose.c): the exposition parser, the measures (deltas, quantiles
 * interpolated as Prometheus' histogram_quantile, renamed series, counter
 * resets, stalls, the first requests' TTFT) and each rule on both sides of its
 * threshold, with and without a baseline.
 */
#include <cjson/cJSON.h>

#include "servelab/diagnose.h"
#include "test.h"

static void parse(prom_snapshot_t *s, const char *text, double t) {
    char err[256];
    memset(s, 0, sizeof *s);
    if (prom_parse(text, strlen(text), s, err, sizeof err)) fprintf(stderr, "parse: %s\n", err);
    s->t = t;
}

static void test_parse_labels_escapes_and_special_values(void) {
    prom_snapshot_t s;
    parse(&s,
          "# HELP x a help line\n# TYPE x counter\n"
          "vllm:a_total{model_name=\"m\",q=\"say \\\"hi\\\"\\\\ \\n\",} 3.5\n"
          "b +Inf\nc{} -Inf 1700000000000\nd NaN\r\n\n   e 1e-3\n# EOF\n",
          0);
    CHECK_EQ_INT(s.n, 5);
    CHECK(!strcmp(s.samples[0].name, "vllm:a_total"));
    CHECK(!strcmp(prom_label(&s.samples[0], "q"), "say \"hi\"\\ \n"));
    CHECK(!strcmp(prom_label(&s.samples[0], "model_name"), "m"));
    CHECK(s.samples[0].value == 3.5);
    CHECK(isinf(s.samples[1].value) && s.samples[1].value > 0);
    CHECK(isinf(s.samples[2].value) && s.samples[2].value < 0);
    CHECK(isnan(s.samples[3].value));
    CHECK(s.samples[4].value == 1e-3);
    prom_snapshot_free(&s);
}

static void test_parse_errors_name_the_line(void) {
    const char *bad[] = {"x{a=\"1\" 2\n", "x{a=1} 2\n", "x{=\"1\"} 2\n", "x 0x10\n", "x\n", "1x 2\n",
                         "x{a=\"\\q\"} 1\n", "x 1 2 3\n", "x{a=\"1\"", "x 1 12a\n", "x infinity\n"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        prom_snapshot_t s = {0};
        char err[256] = "";
        CHECK(prom_parse(bad[i], strlen(bad[i]), &s, err, sizeof err) == -1);
        CHECK_STR_CONTAINS(err, "line 1: expected");
        prom_snapshot_free(&s);
    }
    prom_snapshot_t s = {0};
    char err[256];
    CHECK(prom_parse("ok 1\nok 2\nbad{\n", 14, &s, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "line 3");
    prom_snapshot_free(&s);
}

/* A scrape with the given counters and a TTFT histogram (buckets 0.1, 1, +Inf). */
static void scrape(prom_snapshot_t *s, double t, double running, double waiting, double kv, double gen, double prompt,
                   double b01, double b1, double binf, double ttft_sum, double queue_sum) {
    char text[4096];
    snprintf(text, sizeof text,
             "vllm:num_requests_running{model_name=\"m\"} %g\n"
             "vllm:num_requests_waiting{model_name=\"m\"} %g\n"
             "vllm:kv_cache_usage_perc{model_name=\"m\"} %g\n"
             "vllm:generation_tokens_total{model_name=\"m\"} %g\n"
             "vllm:prompt_tokens_total{model_name=\"m\"} %g\n"
             "vllm:time_to_first_token_seconds_bucket{le=\"0.1\",model_name=\"m\"} %g\n"
             "vllm:time_to_first_token_seconds_bucket{le=\"1.0\",model_name=\"m\"} %g\n"
             "vllm:time_to_first_token_seconds_bucket{le=\"+Inf\",model_name=\"m\"} %g\n"
             "vllm:time_to_first_token_seconds_sum{model_name=\"m\"} %g\n"
             "vllm:time_to_first_token_seconds_count{model_name=\"m\"} %g\n"
             "vllm:request_queue_time_seconds_sum{model_name=\"m\"} %g\n"
             "vllm:request_queue_time_seconds_count{model_name=\"m\"} %g\n",
             running, waiting, kv, gen, prompt, b01, b1, binf, ttft_sum, binf, queue_sum, binf);
    parse(s, text, t);
}

static void test_quantiles_interpolate_like_histogram_quantile(void) {
    prom_snapshot_t s[2];
    scrape(&s[0], 0, 1, 0, 0.1, 0, 0, 5, 5, 5, 0.1, 0); /* earlier observations cancel out */
    scrape(&s[1], 10, 1, 0, 0.1, 100, 50, 5 + 4, 5 + 8, 5 + 10, 0.1 + 4.0, 1.0);
    diag_measures_t m;
    diag_measure(s, 2, 0, NULL, &m);
    /* 10 new: 4 in (0, 0.1], 4 in (0.1, 1], 2 above. p50: rank 5, bucket (0.1, 1] holds ranks 4..8:
     * 0.1 + 0.9 * (5 - 4) / 4. p95: rank 9.5 is in +Inf: the highest finite bound. */
    CHECK(fabs(m.v[DM_ttft_p50] - (0.1 + 0.9 * 0.25)) < 1e-12);
    CHECK(m.v[DM_ttft_p95] == 1.0);
    CHECK(fabs(m.v[DM_ttft_mean] - 0.4) < 1e-12);
    CHECK(fabs(m.v[DM_queue_share_of_ttft] - 0.25) < 1e-12);
    CHECK(m.v[DM_generation_tokens_per_s] == 10);
    CHECK(m.v[DM_window_s] == 10);
    CHECK(isnan(m.v[DM_itl_p50])); /* no ITL series at all: unknown, not zero */
    prom_snapshot_free(&s[0]);
    prom_snapshot_free(&s[1]);
}

static void test_renamed_series_and_counter_resets(void) {
    prom_snapshot_t s[2];
    parse(&s[0], "vllm:gpu_cache_usage_perc 0.5\nvllm:num_preemptions_total 10\n"
                 "vllm:num_requests_running 2\nvllm:num_requests_waiting 0\n", 0);
    /* The server restarted: the counter starts again from zero, as increase() reads it. */
    parse(&s[1], "vllm:gpu_cache_usage_perc 0.7\nvllm:num_preemptions_total 4\n"
                 "vllm:num_requests_running 2\nvllm:num_requests_waiting 0\n", 1);
    diag_measures_t m;
    diag_measure(s, 2, 8, NULL, &m);
    CHECK(fabs(m.v[DM_kv_usage_mean] - 0.6) < 1e-12);
    CHECK(m.v[DM_kv_usage_max] == 0.7);
    CHECK(m.v[DM_preemptions] == 4);
    CHECK(m.v[DM_inflight_vs_expected] == 0.25);
    CHECK(isnan(m.v[DM_kv_pool_blocks])); /* no vllm:cache_config_info */
    prom_snapshot_free(&s[0]);
    prom_snapshot_free(&s[1]);
    /* The pool's size in blocks: vllm:cache_config_info's num_gpu_blocks label, as vLLM has it. */
    parse(&s[0], "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"80\"} 1\n"
                 "vllm:num_requests_running 1\n", 0);
    parse(&s[1], "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\",num_gpu_blocks=\"80\"} 1\n"
                 "vllm:num_requests_running 1\n", 1);
    diag_measure(s, 2, 0, NULL, &m);
    CHECK(m.v[DM_kv_pool_blocks] == 80);
    prom_snapshot_free(&s[0]);
    prom_snapshot_free(&s[1]);
    parse(&s[0], "vllm:cache_config_info{num_gpu_blocks=\"None\"} 1\n", 0);
    parse(&s[1], "vllm:cache_config_info{num_gpu_blocks=\"None\"} 1\n", 1);
    diag_measure(s, 2, 0, NULL, &m);
    CHECK(isnan(m.v[DM_kv_pool_blocks]));
    prom_snapshot_free(&s[0]);
    prom_snapshot_free(&s[1]);
}

/* The prefix hit rate, and the speculative acceptance rate, from their counters. */
static void test_prefix_and_speculation_rates(void) {
    prom_snapshot_t s[2];
    const char *fmt = "vllm:prompt_tokens_total %g\nvllm:prefix_cache_queries_total %g\n"
                      "vllm:prefix_cache_hits_total %g\nvllm:spec_decode_num_draft_tokens_total %g\n"
                      "vllm:spec_decode_num_accepted_tokens_total %g\n";
    char a[512], b[512];
    snprintf(a, sizeof a, fmt, 100.0, 100.0, 20.0, 10.0, 5.0);
    snprintf(b, sizeof b, fmt, 300.0, 300.0, 170.0, 410.0, 105.0);
    parse(&s[0], a, 0), parse(&s[1], b, 1);
    diag_measures_t m;
    diag_measure(s, 2, 0, NULL, &m);
    CHECK(fabs(m.v[DM_prefix_hit_rate] - 0.75) < 1e-12);
    CHECK(m.v[DM_spec_draft_tokens] == 400 && fabs(m.v[DM_spec_acceptance_rate] - 0.25) < 1e-12);
    prom_snapshot_free(&s[0]), prom_snapshot_free(&s[1]);
    /* Prefix caching off: the counters stand still while prompts are computed: nothing found. */
    snprintf(b, sizeof b, fmt, 300.0, 100.0, 20.0, 10.0, 5.0);
    parse(&s[0], a, 0), parse(&s[1], b, 1);
    diag_measure(s, 2, 0, NULL, &m);
    CHECK(m.v[DM_prefix_hit_rate] == 0);
    CHECK(m.v[DM_spec_draft_tokens] == 0 && isnan(m.v[DM_spec_acceptance_rate]));
    prom_snapshot_free(&s[0]), prom_snapshot_free(&s[1]);
    /* No prompts at all: unknown, not zero. */
    parse(&s[0], a, 0), parse(&s[1], a, 1);
    diag_measure(s, 2, 0, NULL, &m);
    CHECK(isnan(m.v[DM_prefix_hit_rate]));
    prom_snapshot_free(&s[0]), prom_snapshot_free(&s[1]);
}

static void test_stalls_and_the_first_requests_ttft(void) {
    prom_snapshot_t s[6];
    /* Running requests, tokens move in the first interval only. */
    double gen[6] = {0, 50, 50, 50, 50, 50};
    for (int i = 0; i < 6; i++) scrape(&s[i], i, 3, 2, 0.2, gen[i], 10, 0, 0, 0, 0, 0);
    diag_measures_t m;
    diag_measure(s, 6, 0, NULL, &m);
    CHECK(m.v[DM_stalled_share] == 0.8);
    CHECK(m.v[DM_stalled_s] == 4);
    for (int i = 0; i < 6; i++) prom_snapshot_free(&s[i]);
    /* Nothing admitted at all: requests only waiting, no token, is a stall too. */
    for (int i = 0; i < 6; i++) scrape(&s[i], i, 0, 3, 0.2, gen[i], 10, 0, 0, 0, 0, 0);
    diag_measure(s, 6, 0, NULL, &m);
    CHECK(m.v[DM_stalled_share] == 0.8);
    for (int i = 0; i < 6; i++) prom_snapshot_free(&s[i]);
    /* An idle server is not stalled: no interval has requests. */
    for (int i = 0; i < 6; i++) scrape(&s[i], i, 0, 0, 0, 50, 10, 0, 0, 0, 0, 0);
    diag_measure(s, 6, 0, NULL, &m);
    CHECK(isnan(m.v[DM_stalled_share]));
    for (int i = 0; i < 6; i++) prom_snapshot_free(&s[i]);
    /* One request per interval: 2 s first, then 0.1 s; no queueing. */
    double sum = 0;
    for (int i = 0; i < 6; i++) {
        scrape(&s[i], i, 1, 0, 0.1, 10.0 * i, 10.0 * i, 0, 0, i, sum, 0);
        sum += i == 0 ? 2.0 : 0.1;
    }
    diag_measure(s, 6, 0, NULL, &m);
    CHECK(fabs(m.v[DM_first_ttft_ratio] - 20) < 1e-9);
    CHECK(fabs(m.v[DM_first_ttft] - 2) < 1e-9);
    CHECK(m.v[DM_stalled_share] == 0);
    for (int i = 0; i < 6; i++) prom_snapshot_free(&s[i]);
    /* The same TTFTs, but the first 1.9 s were queueing: a burst, not a cold start. */
    sum = 0;
    for (int i = 0; i < 6; i++) {
        scrape(&s[i], i, 1, 0, 0.1, 10.0 * i, 10.0 * i, 0, 0, i, sum, i ? 1.9 : 0);
        sum += i == 0 ? 2.0 : 0.1;
    }
    diag_measure(s, 6, 0, NULL, &m);
    CHECK(fabs(m.v[DM_first_ttft_ratio] - 1) < 1e-9);
    for (int i = 0; i < 6; i++) prom_snapshot_free(&s[i]);
}

/* The intervals that end with requests waiting for KV blocks: waiting with the cache full, or
 * with a preemption in the interval; not the requests that only wait for the next step. */
static void test_kv_bound_share(void) {
    static const double waiting[5] = {0, 2, 2, 0, 3}, kv[5] = {0.2, 0.95, 0.5, 0.95, 0.85}, pre[5] = {0, 0, 0, 0, 1};
    prom_snapshot_t s[5];
    char text[256];
    for (int i = 0; i < 5; i++) {
        snprintf(text, sizeof text,
                 "vllm:num_requests_waiting %g\nvllm:kv_cache_usage_perc %g\nvllm:num_preemptions_total %g\n",
                 waiting[i], kv[i], pre[i]);
        parse(&s[i], text, i);
    }
    diag_measures_t m;
    diag_measure(s, 5, 0, NULL, &m);
    CHECK(m.v[DM_kv_bound_share] == 0.5); /* intervals 1 (full) and 4 (a preemption) of 4 */
    for (int i = 0; i < 5; i++) prom_snapshot_free(&s[i]);
    /* No KV series: unknown, not zero. */
    parse(&s[0], "vllm:num_requests_waiting 2\n", 0), parse(&s[1], "vllm:num_requests_waiting 2\n", 1);
    diag_measure(s, 2, 0, NULL, &m);
    CHECK(isnan(m.v[DM_kv_bound_share]));
    prom_snapshot_free(&s[0]), prom_snapshot_free(&s[1]);
}

/* ---- rules ---------------------------------------------------------------------------- */

static diag_measures_t blank(void) {
    diag_measures_t m;
    for (int i = 0; i < DIAG_N_MEASURES; i++) m.v[i] = NAN;
    return m;
}

/* The top cause of m (against b), and whether `cause` is among the fired ones. */
static const char *top(const diag_measures_t *m, const diag_measures_t *b, const char *cause, bool *fired) {
    static char id[64];
    cJSON *r = diag_report(m, b);
    snprintf(id, sizeof id, "%s", cJSON_GetObjectItem(r, "cause")->valuestring);
    *fired = false;
    const cJSON *x;
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(r, "ranked")) *fired |= !strcmp(cJSON_GetObjectItem(x, "cause")->valuestring, cause);
    cJSON_Delete(r);
    return id;
}

static void test_rules_without_baseline_fire_on_their_thresholds(void) {
    struct {
        const char *cause;
        int k1, k2;
        double fire1, fire2, quiet1, quiet2;
    } cases[] = {
        {"engine_stalled", DM_stalled_share, DM_running_max, 0.8, 2, 0.75, 2},
        {"http_errors", DM_http_error_share, DM_http_requests, 0.05, 100, 0.04, 100},
        {"http_errors", DM_http_error_share, DM_http_requests, 1.0, 5, 1.0, 4},
        {"kv_leak", DM_kv_usage_idle, DM_samples, 0.01, 5, 0.009, 5},
        {"kv_pressure", DM_kv_usage_max, DM_waiting_mean, 0.9, 0.5, 0.89, 0.5},
        {"kv_pressure", DM_kv_usage_max, DM_waiting_mean, 1.0, 0.5, 1.0, 0},
        {"queueing", DM_waiting_mean, DM_queue_share_of_ttft, 1, 0.5, 1, 0.49},
        {"upstream_bottleneck", DM_inflight_vs_expected, DM_samples, 0.5, 5, 0.51, 5},
        {"cold_start", DM_first_ttft_ratio, DM_first_ttft, 10, 2.0, 9.9, 2.0},
        {"cold_start", DM_first_ttft_ratio, DM_first_ttft, 50, 2.0, 50, 0.5},
        {"oom", DM_log_oom_lines, DM_samples, 1, 5, 0, 5},
        {"engine_errors", DM_finished_error_share, DM_requests_finished, 0.05, 100, 0.04, 100},
        {"output_regression", DM_golden_mismatches, DM_golden_prompts, 1, 4, 0, 4},
        {"nondeterministic_output", DM_golden_unstable, DM_golden_mismatches, 1, 1, 0, 1},
        {"prompt_truncated", DM_golden_truncated, DM_golden_prompts, 1, 4, 0, 4},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        diag_measures_t m = blank();
        bool fired;
        m.v[DM_e2e_p50] = 1.0; /* a typical request: what a cold start's wait is weighed against */
        m.v[cases[i].k1] = cases[i].fire1;
        m.v[cases[i].k2] = cases[i].fire2;
        const char *t = top(&m, NULL, cases[i].cause, &fired);
        if (!fired || strcmp(t, cases[i].cause)) fprintf(stderr, "  case %zu: %s, top %s\n", i, cases[i].cause, t);
        CHECK(fired && !strcmp(t, cases[i].cause));
        m.v[cases[i].k1] = cases[i].quiet1;
        m.v[cases[i].k2] = cases[i].quiet2;
        top(&m, NULL, cases[i].cause, &fired);
        if (fired) fprintf(stderr, "  case %zu: %s fired below its threshold\n", i, cases[i].cause);
        CHECK(!fired);
    }
    diag_measures_t m = blank();
    bool fired;
    CHECK(!strcmp(top(&m, NULL, "", &fired), "healthy"));
    /* Golden answers that change from one replay to the next are sampling, not a changed model:
     * output_regression counts only the mismatches a second replay repeated. */
    m.v[DM_golden_prompts] = 4, m.v[DM_golden_mismatches] = 3, m.v[DM_golden_unstable] = 3;
    CHECK(!strcmp(top(&m, NULL, "output_regression", &fired), "nondeterministic_output"));
    CHECK(!fired);
    m.v[DM_golden_unstable] = 2; /* one answer changed the same way twice */
    CHECK(!strcmp(top(&m, NULL, "output_regression", &fired), "nondeterministic_output"));
    CHECK(fired);
    m.v[DM_golden_unstable] = 0;
    CHECK(!strcmp(top(&m, NULL, "nondeterministic_output", &fired), "output_regression"));
    CHECK(!fired);
    /* Answers changed because the prompts were cut: the cut ranks first. */
    m.v[DM_golden_truncated] = 4;
    CHECK(!strcmp(top(&m, NULL, "output_regression", &fired), "prompt_truncated"));
    CHECK(fired);
}

static void test_rules_against_a_baseline(void) {
    diag_measures_t b = blank();
    b.v[DM_itl_p50] = 0.01, b.v[DM_itl_mean] = 0.01, b.v[DM_ttft_p50] = 0.05, b.v[DM_ttft_mean] = 0.05;
    b.v[DM_running_mean] = 4, b.v[DM_e2e_mean] = 0.4, b.v[DM_generation_tokens_per_s] = 400;
    b.v[DM_cpu_ms_per_prompt_token] = 0.5, b.v[DM_prefix_hit_rate] = 0.6, b.v[DM_finished_length_share] = 0.1;
    b.v[DM_generation_tokens_per_request] = 40, b.v[DM_kv_usage_per_running] = 0.01, b.v[DM_http_error_share] = 0;
    bool fired;
    /* The same numbers: nothing moved. */
    diag_measures_t m = b;
    m.v[DM_requests_finished] = 50;
    CHECK(!strcmp(top(&m, &b, "", &fired), "healthy"));
    /* ITL doubled, fewer tokens per second: decode_bound, whatever the batch (a slower engine
     * holds more requests under a closed loop); more tokens per second with 2x the batch: the knee. */
    m = b, m.v[DM_itl_p50] = 0.02, m.v[DM_itl_mean] = 0.03, m.v[DM_generation_tokens_per_s] = 300;
    CHECK(!strcmp(top(&m, &b, "decode_bound", &fired), "decode_bound"));
    m.v[DM_running_mean] = 9;
    CHECK(!strcmp(top(&m, &b, "decode_bound", &fired), "decode_bound"));
    m.v[DM_running_mean] = 4;
    m.v[DM_itl_p50] = 0.019;
    CHECK(!strcmp(top(&m, &b, "decode_bound", &fired), "healthy"));
    m.v[DM_itl_p50] = 0.02, m.v[DM_itl_mean] = 0.019; /* the median alone: one bucket's interpolation */
    CHECK(!strcmp(top(&m, &b, "decode_bound", &fired), "healthy"));
    m = b, m.v[DM_itl_p50] = 0.015, m.v[DM_itl_mean] = 0.015, m.v[DM_running_mean] = 8;
    m.v[DM_generation_tokens_per_s] = 600;
    CHECK(!strcmp(top(&m, &b, "batch_knee", &fired), "batch_knee"));
    m.v[DM_generation_tokens_per_s] = 399;
    top(&m, &b, "batch_knee", &fired);
    CHECK(!fired);
    /* TTFT doubled without queueing or slower decode: prefill_bound. */
    m = b, m.v[DM_ttft_p50] = 0.1, m.v[DM_ttft_mean] = 0.1, m.v[DM_queue_share_of_ttft] = 0.1;
    CHECK(!strcmp(top(&m, &b, "prefill_bound", &fired), "prefill_bound"));
    m.v[DM_queue_share_of_ttft] = 0.6;
    top(&m, &b, "prefill_bound", &fired);
    CHECK(!fired);
    /* Doubled, but by less than a tenth of a request's latency: not a change users see. */
    m = b, m.v[DM_e2e_mean] = 1.0, b.v[DM_e2e_mean] = 1.0, m.v[DM_ttft_p50] = 0.1, m.v[DM_ttft_mean] = 0.1;
    top(&m, &b, "prefill_bound", &fired);
    CHECK(!fired);
    b.v[DM_e2e_mean] = 0.4;
    /* CPU per prompt token x3 and TTFT x1.5: tokenizer_bound. */
    m = b, m.v[DM_cpu_ms_per_prompt_token] = 1.5, m.v[DM_ttft_mean] = 0.08;
    CHECK(!strcmp(top(&m, &b, "tokenizer_bound", &fired), "tokenizer_bound"));
    m.v[DM_cpu_ms_per_prompt_token] = 1.4;
    top(&m, &b, "tokenizer_bound", &fired);
    CHECK(!fired);
    /* The same per-token rise from an idle process (a slowed engine, fixed CPU over few tokens): no. */
    b.v[DM_cpu_seconds_per_s] = 1.5;
    m = b, m.v[DM_cpu_ms_per_prompt_token] = 1.5, m.v[DM_ttft_mean] = 0.08, m.v[DM_cpu_seconds_per_s] = 0.05;
    top(&m, &b, "tokenizer_bound", &fired);
    CHECK(!fired);
    m.v[DM_cpu_seconds_per_s] = 0.8;
    CHECK(!strcmp(top(&m, &b, "tokenizer_bound", &fired), "tokenizer_bound"));
    b.v[DM_cpu_seconds_per_s] = NAN;
    /* The prefix cache stopped hitting and TTFT grew. */
    m = b, m.v[DM_prefix_hit_rate] = 0.2, m.v[DM_ttft_mean] = 0.07;
    CHECK(!strcmp(top(&m, &b, "low_prefix_reuse", &fired), "low_prefix_reuse"));
    /* Length share +0.3 with outputs 1.5x longer: runaway; needs both. */
    m = b, m.v[DM_requests_finished] = 20, m.v[DM_finished_length_share] = 0.4, m.v[DM_generation_tokens_per_request] = 60;
    CHECK(!strcmp(top(&m, &b, "runaway_generation", &fired), "runaway_generation"));
    m.v[DM_generation_tokens_per_request] = 59;
    top(&m, &b, "runaway_generation", &fired);
    CHECK(!fired);
    /* Each running request holds twice its KV: a leak; not when its requests are twice as long. */
    m = b, m.v[DM_kv_usage_per_running] = 0.02;
    CHECK(!strcmp(top(&m, &b, "kv_leak", &fired), "kv_leak"));
    b.v[DM_prompt_tokens_per_request] = 60;
    m = b, m.v[DM_kv_usage_per_running] = 0.02, m.v[DM_prompt_tokens_per_request] = 160;
    top(&m, &b, "kv_leak", &fired);
    CHECK(!fired);
    m.v[DM_prompt_tokens_per_request] = 60;
    CHECK(!strcmp(top(&m, &b, "kv_leak", &fired), "kv_leak"));
    /* Nor when the pool holds half the blocks (float32 KV in the same memory): as many blocks
     * a request; a leak still when the pool is as large. */
    b.v[DM_kv_pool_blocks] = 400, m.v[DM_kv_pool_blocks] = 200;
    top(&m, &b, "kv_leak", &fired);
    CHECK(!fired);
    m.v[DM_kv_pool_blocks] = 400;
    CHECK(!strcmp(top(&m, &b, "kv_leak", &fired), "kv_leak"));
    b.v[DM_prompt_tokens_per_request] = NAN, b.v[DM_kv_pool_blocks] = NAN;
    /* Long prompts: TTFT x100 with decoding 4x slower (attention over a longer context) is still
     * prefill; a slower engine slows both alike (TTFT x3, ITL x3): not prefill. */
    m = b, m.v[DM_ttft_p50] = 5, m.v[DM_ttft_mean] = 5, m.v[DM_e2e_mean] = 5.5, m.v[DM_queue_share_of_ttft] = 0;
    m.v[DM_itl_p50] = 0.04, m.v[DM_itl_mean] = 0.04;
    CHECK(!strcmp(top(&m, &b, "prefill_bound", &fired), "prefill_bound"));
    m.v[DM_ttft_p50] = 0.15, m.v[DM_ttft_mean] = 0.15, m.v[DM_itl_p50] = 0.03, m.v[DM_itl_mean] = 0.03;
    top(&m, &b, "prefill_bound", &fired);
    CHECK(!fired);
    /* ITL p95 x3 with the median unmoved: a few long steps (head-of-line blocking); with the
     * median up by half, not. */
    b.v[DM_itl_p95] = 0.02;
    m = b, m.v[DM_itl_p95] = 0.3, m.v[DM_itl_p50] = 0.012, m.v[DM_itl_mean] = 0.014;
    CHECK(!strcmp(top(&m, &b, "hol_blocking", &fired), "hol_blocking"));
    m.v[DM_itl_p95] = 0.059;
    top(&m, &b, "hol_blocking", &fired);
    CHECK(!fired);
    m.v[DM_itl_p95] = 0.3, m.v[DM_itl_p50] = 0.015;
    top(&m, &b, "hol_blocking", &fired);
    CHECK(!fired);
    b.v[DM_itl_p95] = NAN;
    /* CPU per prompt token x10 because the engine now computes what the prefix cache served (its
     * own prefill time grew with TTFT): not the tokenizer. */
    b.v[DM_prefill_time_mean] = 0.04;
    m = b, m.v[DM_cpu_ms_per_prompt_token] = 5, m.v[DM_ttft_mean] = 0.5, m.v[DM_prefill_time_mean] = 0.49;
    top(&m, &b, "tokenizer_bound", &fired);
    CHECK(!fired);
    m.v[DM_prefill_time_mean] = 0.04; /* the engine's part unchanged: TTFT grew before it */
    CHECK(!strcmp(top(&m, &b, "tokenizer_bound", &fired), "tokenizer_bound"));
    b.v[DM_prefill_time_mean] = NAN;
    /* CPU per prompt token x4 because each decode step costs 3.5 times as much (float32 weights
     * where the baseline read 4-bit ones): the inter-token latency grew with it, not the
     * tokenizer. A decode only twice as slow does not account for the x4. */
    const double itl_base = b.v[DM_itl_mean];
    b.v[DM_itl_mean] = 0.012, b.v[DM_prompt_tokens_per_s] = 300;
    m = b, m.v[DM_cpu_ms_per_prompt_token] = 2, m.v[DM_prompt_tokens_per_s] = 100, m.v[DM_itl_mean] = 0.042;
    top(&m, &b, "tokenizer_bound", &fired);
    CHECK(!fired);
    m.v[DM_itl_mean] = 0.024;
    top(&m, &b, "tokenizer_bound", &fired);
    CHECK(fired);
    b.v[DM_itl_mean] = itl_base, b.v[DM_prompt_tokens_per_s] = NAN;
    /* Speculation: under a quarter of 50+ drafted tokens kept and no faster per output token;
     * a low rate that still pays, or too few drafts, is not a cause. */
    b.v[DM_tpot_mean] = 0.01;
    m = b, m.v[DM_spec_draft_tokens] = 400, m.v[DM_spec_acceptance_rate] = 0.05, m.v[DM_tpot_mean] = 0.015;
    m.v[DM_itl_p50] = 0.015, m.v[DM_itl_mean] = 0.015;
    CHECK(!strcmp(top(&m, &b, "spec_decode_waste", &fired), "spec_decode_waste"));
    m.v[DM_tpot_mean] = 0.009;
    top(&m, &b, "spec_decode_waste", &fired);
    CHECK(!fired);
    m.v[DM_tpot_mean] = 0.015, m.v[DM_spec_acceptance_rate] = 0.25;
    top(&m, &b, "spec_decode_waste", &fired);
    CHECK(!fired);
    m.v[DM_spec_acceptance_rate] = 0.05, m.v[DM_spec_draft_tokens] = 49;
    top(&m, &b, "spec_decode_waste", &fired);
    CHECK(!fired);
    /* ... and it outranks the slower steps it causes. */
    m.v[DM_spec_draft_tokens] = 400, m.v[DM_itl_p50] = 0.03, m.v[DM_itl_mean] = 0.03;
    m.v[DM_generation_tokens_per_s] = 200;
    CHECK(!strcmp(top(&m, &b, "spec_decode_waste", &fired), "spec_decode_waste"));
    b.v[DM_tpot_mean] = NAN;
    /* Without the baseline, its rules are skipped and listed. */
    cJSON *r = diag_report(&m, NULL);
    char *s = cJSON_PrintUnformatted(cJSON_GetObjectItem(r, "skipped"));
    CHECK_STR_CONTAINS(s, "decode_bound");
    CHECK_STR_CONTAINS(s, "runaway_generation");
    free(s);
    cJSON_Delete(r);
}

static void test_specific_causes_rank_first(void) {
    /* A stalled engine also queues; a leak also fills the KV cache. */
    diag_measures_t m = blank();
    bool fired;
    m.v[DM_stalled_share] = 1, m.v[DM_waiting_mean] = 5, m.v[DM_queue_share_of_ttft] = 0.9;
    CHECK(!strcmp(top(&m, NULL, "queueing", &fired), "engine_stalled") && fired);
    m = blank();
    m.v[DM_kv_usage_idle] = 0.3, m.v[DM_kv_usage_max] = 0.95, m.v[DM_waiting_mean] = 2;
    CHECK(!strcmp(top(&m, NULL, "kv_pressure", &fired), "kv_leak") && fired);
    /* Preempted sequences free their blocks before the next scrape: with requests waiting, a
     * preemption is the full cache the gauge missed, and the KV pressure ranks first. */
    m = blank();
    m.v[DM_kv_usage_max] = 0.85, m.v[DM_waiting_mean] = 3, m.v[DM_preemptions] = 0;
    top(&m, NULL, "kv_pressure", &fired);
    CHECK(!fired);
    m.v[DM_preemptions] = 30, m.v[DM_preemptions_per_request] = 0.2, m.v[DM_requests_finished] = 150;
    CHECK(!strcmp(top(&m, NULL, "preemption_storm", &fired), "kv_pressure") && !fired);
    /* More preemptions than finished requests: a storm, which is KV pressure too and ranks
     * above it; requests finish no more (all evicted): a storm from 3 preemptions. */
    m.v[DM_preemptions] = 300, m.v[DM_preemptions_per_request] = 2;
    CHECK(!strcmp(top(&m, NULL, "kv_pressure", &fired), "preemption_storm") && fired);
    m.v[DM_preemptions] = 3, m.v[DM_preemptions_per_request] = NAN, m.v[DM_requests_finished] = 0;
    CHECK(!strcmp(top(&m, NULL, "kv_pressure", &fired), "preemption_storm") && fired);
    m.v[DM_preemptions] = 2;
    CHECK(!strcmp(top(&m, NULL, "preemption_storm", &fired), "kv_pressure") && !fired);
    m.v[DM_preemptions] = 300, m.v[DM_preemptions_per_request] = 2, m.v[DM_requests_finished] = 150;
    m.v[DM_waiting_mean] = 0; /* the storm alone: no request waits (kv_pressure needs one) */
    CHECK(!strcmp(top(&m, NULL, "kv_pressure", &fired), "preemption_storm") && !fired);
}

static void test_report_round_trips_as_a_baseline(void) {
    diag_measures_t m = blank(), back;
    m.v[DM_itl_p50] = 0.0125, m.v[DM_requests_finished] = 7;
    cJSON *r = diag_report(&m, NULL);
    char *s = cJSON_PrintUnformatted(r);
    cJSON *again = cJSON_Parse(s);
    char err[256];
    CHECK(diag_measures_from_json(again, &back, err, sizeof err) == 0);
    CHECK(back.v[DM_itl_p50] == 0.0125 && back.v[DM_requests_finished] == 7 && isnan(back.v[DM_ttft_p50]));
    CHECK(!strcmp(cJSON_GetObjectItem(again, "cause")->valuestring, "healthy"));
    cJSON *bad = cJSON_Parse("{\"metrics\": {\"itl_p50\": \"fast\"}}");
    CHECK(diag_measures_from_json(bad, &back, err, sizeof err) == -1);
    CHECK_STR_CONTAINS(err, "metrics.itl_p50");
    cJSON_Delete(bad);
    cJSON_Delete(again);
    cJSON_Delete(r);
    free(s);
}

int main(void) {
    RUN(test_parse_labels_escapes_and_special_values);
    RUN(test_parse_errors_name_the_line);
    RUN(test_quantiles_interpolate_like_histogram_quantile);
    RUN(test_renamed_series_and_counter_resets);
    RUN(test_prefix_and_speculation_rates);
    RUN(test_stalls_and_the_first_requests_ttft);
    RUN(test_kv_bound_share);
    RUN(test_rules_without_baseline_fire_on_their_thresholds);
    RUN(test_rules_against_a_baseline);
    RUN(test_specific_causes_rank_first);
    RUN(test_report_round_trips_as_a_baseline);
    return test_summary();
}
