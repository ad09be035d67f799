/* test_bench_serve.c - the pure parts of the load generator (src/bench): numpy's
 * percentile, Gamma arrivals, vLLM's flag defaults and errors, the JSON writer's Python
 * spelling, SSE framing split at every byte, the metric definitions, the printed table,
 * result file names, and the compare gates. Expected numbers come from numpy / Python
 * (the values in comments were printed by them).
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "test.h"

static int parse(bench_args_t *a, sl_err_t *err, const char *line) {
    char buf[2048], *argv[64];
    int argc = 0;
    snprintf(buf, sizeof buf, "serve %s", line);
    for (char *save = NULL, *t = strtok_r(buf, " ", &save); t && argc < 63; t = strtok_r(NULL, " ", &save))
        argv[argc++] = t;
    argv[argc] = NULL;
    static char keep[8][2048]; /* the args borrow argv's strings: keep them alive */
    static int k;
    k = (k + 1) % 8;
    memcpy(keep[k], buf, sizeof buf);
    for (int i = 0; i < argc; i++) argv[i] = keep[k] + (argv[i] - buf);
    return bench_args_parse(argc, argv, a, err);
}

static void test_percentile_matches_numpy_bit_for_bit(void) {
    double x[] = {0.5, 0.1, 0.3, 0.2, 0.9, 0.7, 0.25};
    bench_sort(x, 7);
    /* np.percentile(x, p) for p in 0, 25, 50, 90, 99, 99.9, 100 */
    double p[] = {0, 25, 50, 90, 99, 99.9, 100};
    double want[] = {0.1, 0.225, 0.3, 0.78, 0.8879999999999999, 0.8988000000000002, 0.9};
    for (int i = 0; i < 7; i++) CHECK(bench_percentile(x, 7, p[i]) == want[i]);
    CHECK(bench_median(x, 7) == 0.3);
    double y[] = {0.1, 0.2, 0.3, 0.5, 0.7, 0.9};
    CHECK(fabs(bench_median(y, 6) - 0.4) < 1e-15);
    CHECK(fabs(bench_mean(x, 7) - 0.42142857142857143) < 1e-15);
    CHECK(fabs(bench_std(x, 7) - 0.26973153697856006) < 1e-15);
    double z[] = {0.011, 0.013, 0.0172}; /* 0.017116, 0.013, 0.012332 */
    CHECK(fabs(bench_percentile(z, 3, 99) - 0.017116) < 1e-15);
    CHECK(bench_percentile(z, 3, 50) == 0.013);
    CHECK(fabs(bench_percentile(z, 3, 33.3) - 0.012332) < 1e-15);
    /* np.percentile(0, p) = 0: vLLM's `x or 0` for an empty list */
    CHECK(bench_percentile(NULL, 0, 99) == 0.0 && bench_mean(NULL, 0) == 0.0 && bench_std(NULL, 0) == 0.0);
    double one = 4.25;
    CHECK(bench_percentile(&one, 1, 99) == 4.25 && bench_median(&one, 1) == 4.25);
}

static void test_gamma_mean_and_variance_match_shape_and_scale(void) {
    bench_rng_t r;
    rng_seed(&r, 7);
    double shapes[] = {0.5, 1.0, 4.0};
    for (int s = 0; s < 3; s++) {
        double k = shapes[s], theta = 0.02, sum = 0, sq = 0;
        int n = 200000;
        for (int i = 0; i < n; i++) {
            double g = bench_rng_gamma(&r, k, theta);
            CHECK(g >= 0);
            sum += g, sq += g * g;
        }
        double mean = sum / n, var = sq / n - mean * mean;
        printf("  shape %.1f: mean %.5f (want %.5f), var %.3g (want %.3g)\n", k, mean, k * theta, var, k * theta * theta);
        CHECK(fabs(mean - k * theta) < 0.01 * k * theta);
        CHECK(fabs(var - k * theta * theta) < 0.04 * k * theta * theta);
    }
    for (int i = 0; i < 1000; i++) {
        int64_t v = bench_rng_range(&r, 3, 5);
        CHECK(v >= 3 && v <= 5);
    }
}

static void test_arrivals_span_num_prompts_over_rate(void) {
    bench_rng_t r;
    rng_seed(&r, 0);
    double d[100];
    bench_arrival_cfg_t c = {.rate = 10, .burstiness = 1.0};
    bench_arrivals(&c, 100, &r, d, NULL);
    for (int i = 1; i < 100; i++) CHECK(d[i] >= d[i - 1]);
    CHECK(d[0] > 0 && fabs(d[99] - 10.0) < 1e-9); /* vLLM rescales to num_prompts / rate */
    c.rate = INFINITY;
    bench_arrivals(&c, 100, &r, d, NULL);
    for (int i = 0; i < 100; i++) CHECK(d[i] == 0.0);
    c = (bench_arrival_cfg_t){.rate = 4, .burstiness = INFINITY};
    bench_arrivals(&c, 8, &r, d, NULL);
    for (int i = 0; i < 8; i++) CHECK(fabs(d[i] - 0.25 * (i + 1)) < 1e-12);
    c = (bench_arrival_cfg_t){.rate = INFINITY, .burstiness = 1, .ramp = BENCH_RAMP_LINEAR, .ramp_start_rps = 1,
                              .ramp_end_rps = 3};
    double rates[5];
    bench_arrivals(&c, 5, &r, d, rates);
    CHECK(rates[0] == 1 && rates[2] == 2 && rates[4] == 3);
}

static void test_args_defaults_are_vllms(void) {
    bench_args_t a;
    sl_err_t err;
    CHECK(parse(&a, &err, "") == 0);
    CHECK(!strcmp(a.backend, "openai") && !strcmp(a.endpoint, "/v1/completions") && !strcmp(a.host, "127.0.0.1"));
    CHECK(a.port == 8000 && a.num_prompts == 1000 && a.seed == 0 && !strcmp(a.dataset_name, "random"));
    CHECK(a.random_input_len == 1024 && a.random_output_len == 128 && a.random_range_ratio == 0 && a.random_prefix_len == 0);
    CHECK(isinf(a.request_rate) && a.burstiness == 1.0 && a.max_concurrency == 0 && a.num_warmups == 0);
    CHECK(a.metric_on[BM_TTFT] && a.metric_on[BM_TPOT] && a.metric_on[BM_ITL] && !a.metric_on[BM_E2EL]);
    CHECK(a.n_pcts == 1 && a.pcts[0] == 99 && !a.goodput_on && isnan(a.temperature) && a.top_k == INT64_MIN);
    CHECK(a.prefix_rep_prefix_len == 256 && a.prefix_rep_suffix_len == 256 && a.prefix_rep_num_prefixes == 10);
    CHECK(a.custom_output_len == 256);
    bench_args_free(&a);
}

static void test_args_values_lists_and_overrides(void) {
    bench_args_t a;
    sl_err_t err;
    CHECK(parse(&a, &err, "--backend openai-chat --request-rate=2.5 --burstiness 0.5 --max-concurrency 8 "
                          "--goodput ttft:100 e2el:2000 --metadata a=1 b=x --percentile-metrics ttft,e2el "
                          "--metric-percentiles 50,99.9 --top-k -1 --temperature 0 --output-len 7 "
                          "--extra-body {\"min_tokens\":2} --dataset-name prefix-repetition") == 0);
    CHECK(!strcmp(a.endpoint, "/v1/chat/completions") && a.request_rate == 2.5 && a.burstiness == 0.5);
    CHECK(a.max_concurrency == 8 && a.goodput_on && a.goodput_ms[0] == 100 && isnan(a.goodput_ms[1]) &&
          a.goodput_ms[2] == 2000);
    CHECK(a.metadata.n == 2 && !strcmp(a.metadata.v[1], "b=x"));
    CHECK(a.metric_on[BM_TTFT] && !a.metric_on[BM_TPOT] && a.metric_on[BM_E2EL]);
    CHECK(a.n_pcts == 2 && a.pcts[1] == 99.9 && a.top_k == -1 && a.temperature == 0.0);
    CHECK(a.random_output_len == 7 && a.prefix_rep_output_len == 7 && a.custom_output_len == 7);
    CHECK(!strcmp(a.dataset_name, "prefix_repetition") && cJSON_IsObject(a.extra));
    bench_args_free(&a);
}

static void test_args_errors_are_one_precise_line(void) {
    struct {
        const char *line, *want;
    } cases[] = {
        {"--num-prompts abc", "argument --num-prompts: invalid int value: 'abc'"},
        {"--num-prompts 0", "argument --num-prompts: 0 is out of range"},
        {"--frobnicate 3", "unrecognized arguments: --frobnicate"},
        {"--backend tgi", "argument --backend: invalid choice: 'tgi' (choose from 'openai', 'openai-chat')"},
        {"--port", "argument --port: expected one argument"},
        {"--request-rate 0", "argument --request-rate: 0 is out of range"},
        {"--random-range-ratio 1.0", "argument --random-range-ratio"},
        {"--goodput ttft=5", "Invalid format found for service level objectives"},
        {"--goodput itl:5", "Invalid metric name found, itl: 5"},
        {"--goodput", "argument --goodput: expected at least one argument"},
        {"--dataset-name custom", "--dataset-name custom needs --dataset-path"},
        {"--dataset-path x.jsonl", "Cannot use 'random' dataset with --dataset-path"},
        {"--dataset-name sharegpt", "'sharegpt' is not supported here"},
        {"--backend openai-chat --endpoint /v1/completions", "needs a URL ending in 'chat/completions'"},
        {"--percentile-metrics ttft,bogus", "unknown metric 'bogus'"},
        {"--metric-percentiles 99,101", "'101' is not a percentile"},
        {"--extra-body [1]", "argument --extra-body: invalid JSON object"},
        {"--metadata novalue", "Invalid metadata format"},
        {"--ramp-up-strategy linear --ramp-up-start-rps 1", "both --ramp-up-start-rps and --ramp-up-end-rps"},
        {"--ignore-eos=1", "ignored explicit argument '1'"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        bench_args_t a;
        sl_err_t err = {{0}};
        int rc = parse(&a, &err, cases[i].line);
        CHECK(rc == -1);
        CHECK_STR_CONTAINS(err.msg, cases[i].want);
        bench_args_free(&a);
    }
}

static void test_json_writer_spells_like_python_json_dump(void) {
    bench_json_t j = {0};
    bj_obj(&j);
    const char *keys[] = {"a", "b", "c", "d", "e"};
    double vals[] = {1.0, 0.1, 1e-05, 1e20, INFINITY};
    for (int i = 0; i < 5; i++) {
        bj_key(&j, keys[i]);
        bj_float(&j, vals[i]);
    }
    bj_key(&j, "f");
    bj_arr(&j);
    bj_int(&j, 1);
    bj_arr(&j);
    bj_float(&j, 2.5);
    bj_float(&j, -0.0);
    bj_arr_end(&j);
    bj_arr(&j);
    bj_arr_end(&j);
    bj_arr_end(&j);
    const char g[] = "\xc3\xa9\xf0\x9f\x98\x80\x01\n\"\\\x7f\xff";
    bj_key(&j, "g");
    bj_str(&j, g, sizeof g - 1);
    bj_key(&j, "h");
    bj_null(&j);
    bj_key(&j, "i");
    bj_bool(&j, true);
    bj_key(&j, "l");
    bj_float(&j, 12345678901234567.0);
    bj_key(&j, "o");
    bj_obj(&j);
    bj_obj_end(&j);
    bj_obj_end(&j);
    char *s = bj_take(&j, NULL);
    /* json.dumps of the same values (the invalid byte 0xff read as U+FFFD) */
    const char *want = "{\"a\": 1.0, \"b\": 0.1, \"c\": 1e-05, \"d\": 1e+20, \"e\": Infinity, \"f\": [1, [2.5, -0.0], "
                       "[]], \"g\": \"\\u00e9\\ud83d\\ude00\\u0001\\n\\\"\\\\\\u007f\\ufffd\", \"h\": null, \"i\": true, "
                       "\"l\": 1.2345678901234568e+16, \"o\": {}}";
    if (strcmp(s, want)) printf("  got  %s\n  want %s\n", s, want);
    CHECK(!strcmp(s, want));
    free(s);
}

typedef struct {
    char ev[16][64];
    int n;
} events_t;

static bool collect(void *user, const char *data, size_t len) {
    events_t *e = user;
    if (e->n < 16) snprintf(e->ev[e->n++], 64, "%.*s", (int)len, data);
    return true;
}

static void test_sse_events_survive_any_split(void) {
    const char stream[] = ": keep-alive\r\n\r\ndata: {\"a\":1}\r\n\r\ndata:{\"b\":2}\n\nevent: x\nid: 3\ndata: l1\n"
                          "data: l2\n\n\n\ndata: [DONE]\r\rdata: tail";
    size_t n = sizeof stream - 1;
    for (size_t step = 1; step <= n; step++) {
        bench_sse_t s = {0};
        events_t e = {0};
        for (size_t i = 0; i < n; i += step) CHECK(bench_sse_feed(&s, stream + i, i + step > n ? n - i : step, collect, &e) >= 0);
        CHECK(bench_sse_end(&s, collect, &e) == 1);
        CHECK(e.n == 5);
        CHECK(!strcmp(e.ev[0], "{\"a\":1}") && !strcmp(e.ev[1], "{\"b\":2}") && !strcmp(e.ev[2], "l1\nl2"));
        CHECK(!strcmp(e.ev[3], "[DONE]") && !strcmp(e.ev[4], "tail"));
        bench_sse_free(&s);
    }
}

static bench_output_t out_ok(double start, double ttft, const double *itl, int n_itl, int64_t prompt, int64_t out) {
    bench_output_t o = {.success = true, .status = 200, .start_time = start, .ttft = ttft, .prompt_len = prompt,
                        .output_tokens = out};
    o.itl = sl_malloc(sizeof(double) * (size_t)(n_itl + 1));
    o.n_itl = n_itl;
    o.latency = ttft;
    for (int i = 0; i < n_itl; i++) o.itl[i] = itl[i], o.latency += itl[i];
    return o;
}

static void test_metrics_follow_vllm_definitions(void) {
    bench_args_t a;
    sl_err_t err;
    CHECK(parse(&a, &err, "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,99 --goodput ttft:150 "
                          "tpot:60") == 0);
    double i0[] = {0.05, 0.05, 0.05}, i1[] = {0.2};
    bench_output_t o[4];
    o[0] = out_ok(100.0, 0.1, i0, 3, 10, 4); /* tokens at 100.1 .15 .2 .25; ends 100.25 */
    o[0].latency = 0.25;                     /* exactly, for the tie below */
    o[1] = out_ok(100.5, 0.6, i1, 1, 20, 0); /* no usage: 1 + 1 ITL = 2 tokens; 101.1, 101.3 */
    o[2] = out_ok(100.25, 0.01, NULL, 0, 5, 1); /* starts exactly when o[0] ends; one token */
    o[3] = (bench_output_t){.status = 503, .start_time = 100.0, .prompt_len = 7, .error = sl_strdup("busy")};
    bench_metrics_t m;
    bench_metrics_compute(o, 4, 2.0, &a, &m);
    CHECK(m.completed == 3 && m.failed == 1 && m.total_input == 35 && m.total_output == 7);
    CHECK(m.output_lens[0] == 4 && m.output_lens[1] == 2 && m.output_lens[2] == 1 && m.output_lens[3] == 0);
    CHECK(fabs(m.request_throughput - 1.5) < 1e-12 && fabs(m.output_throughput - 3.5) < 1e-12);
    CHECK(fabs(m.total_token_throughput - 21.0) < 1e-12);
    /* TTFT: 0.1, 0.6, 0.01 -> mean 236.67 ms, median 100 */
    CHECK(fabs(m.dist[BM_TTFT].mean - 236.66666666666669) < 1e-9 && fabs(m.dist[BM_TTFT].median - 100.0) < 1e-9);
    /* TPOT: (0.25-0.1)/3 = 0.05, (0.8-0.6)/1 = 0.2; the one-token request has none */
    CHECK(fabs(m.dist[BM_TPOT].mean - 125.0) < 1e-9);
    /* ITL pooled: 0.05 x3, 0.2 -> p99 = np.percentile([.05,.05,.05,.2], 99) = 0.1955 */
    CHECK(fabs(m.dist[BM_ITL].pct[1] - 195.5) < 1e-9);
    CHECK(m.dist[BM_E2EL].present && !m.dist[BM_QUEUE].present);
    /* goodput: ttft <= 150 ms and tpot <= 60 ms: requests 0 and 2 (tpot 0) -> 2 / 2 s */
    CHECK(fabs(m.request_goodput - 1.0) < 1e-12);
    /* buckets from t0 = 100.0: [100,101): 4 + 1 = 5 tokens; [101,102): 2 */
    CHECK(m.max_output_tokens_per_s == 5.0);
    /* [100,100.25) [100.25,100.26) [100.5,101.3): an end and a start at 100.25 do not overlap */
    CHECK(m.max_concurrent_requests == 1);

    FILE *f = tmpfile();
    bench_print_table(f, &a, &m, 2.0);
    rewind(f);
    char text[4096] = "";
    size_t len = fread(text, 1, sizeof text - 1, f);
    text[len] = 0;
    fclose(f);
    const char *want =
        "============ Serving Benchmark Result ============\n"
        "Successful requests:                     3         \n"
        "Failed requests:                         1         \n"
        "Benchmark duration (s):                  2.00      \n"
        "Total input tokens:                      35        \n"
        "Total generated tokens:                  7         \n"
        "Request throughput (req/s):              1.50      \n"
        "Request goodput (req/s):                 1.00      \n"
        "Output token throughput (tok/s):         3.50      \n"
        "Peak output token throughput (tok/s):    5.00      \n"
        "Peak concurrent requests:                1.00      \n"
        "Total token throughput (tok/s):          21.00     \n"
        "---------------Time to First Token----------------\n"
        "Mean TTFT (ms):                          236.67    \n"
        "Median TTFT (ms):                        100.00    \n"
        "P50 TTFT (ms):                           100.00    \n"
        "P99 TTFT (ms):                           590.00    \n"
        "-----Time per Output Token (excl. 1st token)------\n";
    if (strncmp(text, want, strlen(want))) printf("  got:\n%s", text);
    CHECK(!strncmp(text, want, strlen(want)));
    CHECK_STR_CONTAINS(text, "---------------Inter-token Latency----------------\n");
    CHECK_STR_CONTAINS(text, "----------------End-to-end Latency----------------\nMean E2EL (ms):");
    CHECK(len > 51 && !strcmp(text + len - 51, "==================================================\n"));

    a.save_detailed = true;
    bench_report_t r = {.date = "20250101-000000", .model_id = "/m/tiny", .tokenizer_id = "/m/tiny", .duration_s = 2.0};
    char *json = bench_result_json(&a, &r, &m, o, 4, NULL);
    cJSON *j = cJSON_Parse(json);
    CHECK(j != NULL);
    const char *head = "{\"date\": \"20250101-000000\", \"endpoint_type\": \"openai\", \"backend\": \"openai\", "
                       "\"label\": null, \"model_id\": \"/m/tiny\", \"tokenizer_id\": \"/m/tiny\", \"num_prompts\": 1000, ";
    CHECK(!strncmp(json, head, strlen(head)));
    CHECK_STR_CONTAINS(json, "\"request_rate\": \"inf\", \"burstiness\": 1.0, \"max_concurrency\": null");
    CHECK_STR_CONTAINS(json, "\"failed_by_status\": {\"503\": 1}");
    CHECK_STR_CONTAINS(json, "\"output_lens\": [4, 2, 1, 0]");
    CHECK_STR_CONTAINS(json, "\"errors\": [\"\", \"\", \"\", \"busy\"]");
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "p50_ttft_ms")) == 100.0);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "p99_e2el_ms")) > 0);
    CHECK(cJSON_GetNumberValue(cJSON_GetObjectItem(j, "max_concurrent_requests")) == 1);
    cJSON_Delete(j);
    free(json);
    bench_metrics_free(&m);
    for (int i = 0; i < 4; i++) bench_output_free(&o[i]);
    bench_args_free(&a);
}

static void test_result_file_name_is_vllms(void) {
    bench_args_t a;
    sl_err_t err;
    char path[512];
    CHECK(parse(&a, &err, "--request-rate 10 --max-concurrency 4") == 0);
    bench_result_path(&a, "/models/org/tiny", "20250102-030405", path, sizeof path);
    CHECK(!strcmp(path, "openai-10.0qps-concurrency4-tiny-20250102-030405.json"));
    bench_args_free(&a);
    CHECK(parse(&a, &err, "--label run --result-dir out/x") == 0);
    bench_result_path(&a, "tiny", "D", path, sizeof path);
    CHECK(!strcmp(path, "out/x/run-infqps-tiny-D.json"));
    bench_args_free(&a);
}

static void test_gates_name_keys_and_bound_changes(void) {
    bench_gate_t g;
    sl_err_t err;
    CHECK(bench_gate_parse("ttft_p99=+10%", &g, &err) == 0 && !strcmp(g.key, "p99_ttft_ms") && g.increase &&
          g.limit_pct == 10);
    CHECK(bench_gate_ok(&g, 100, 110) && !bench_gate_ok(&g, 100, 110.01) && bench_gate_ok(&g, 100, 50));
    CHECK(bench_gate_parse("output_throughput=-5%", &g, &err) == 0 && !strcmp(g.key, "output_throughput") && !g.increase);
    CHECK(bench_gate_ok(&g, 200, 190) && !bench_gate_ok(&g, 200, 189.9) && bench_gate_ok(&g, 200, 500));
    CHECK(bench_gate_parse("p99.9_itl=+0%", &g, &err) == 0 && !strcmp(g.key, "p99.9_itl_ms"));
    CHECK(bench_gate_ok(&g, 5, 5) && !bench_gate_ok(&g, 5, 5.001));
    CHECK(bench_gate_parse("e2el_median=+1%", &g, &err) == 0 && !strcmp(g.key, "median_e2el_ms"));
    CHECK(bench_gate_parse("throughput=-1%", &g, &err) == 0 && !strcmp(g.key, "output_throughput"));
    CHECK(bench_gate_parse("mean_tpot_ms=+3%", &g, &err) == 0 && !strcmp(g.key, "mean_tpot_ms"));
    const char *bad[] = {"ttft_p99", "ttft_p99=10%", "ttft_p99=+10", "=+1%", "x=+abc%", "x=-5%%"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        CHECK(bench_gate_parse(bad[i], &g, &err) == -1);
        CHECK_STR_CONTAINS(err.msg, "argument --gate");
    }
}

int main(void) {
    test_seed();
    RUN(test_percentile_matches_numpy_bit_for_bit);
    RUN(test_gamma_mean_and_variance_match_shape_and_scale);
    RUN(test_arrivals_span_num_prompts_over_rate);
    RUN(test_args_defaults_are_vllms);
    RUN(test_args_values_lists_and_overrides);
    RUN(test_args_errors_are_one_precise_line);
    RUN(test_json_writer_spells_like_python_json_dump);
    RUN(test_sse_events_survive_any_split);
    RUN(test_metrics_follow_vllm_definitions);
    RUN(test_result_file_name_is_vllms);
    RUN(test_gates_name_keys_and_bound_changes);
    return test_summary();
}
