/* test_metrics.c - the registry's exposition against prometheus_client's, byte for byte.
 *
 * The REF_* strings were printed by prometheus_client 0.22.1 for the same
 * metrics, label values, observations and _created times
 * (tests/metrics/make_reference.py; regenerate and paste when changing either
 * side). Also: float formatting, child identity, the exact count under
 * concurrent writers and scrapes, bucket bounds, Accept negotiation, and the
 * process collector's families.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <time.h>

#include "servelab/core.h"
#include "servelab/metrics.h"
#include "test.h"

/* ---- printed by tests/metrics/make_reference.py (prometheus_client 0.22.1) ---- */
static const char REF_TEXT[] =
    "# HELP vllm:request_success_total Count of successfully processed requests.\n"
    "# TYPE vllm:request_success_total counter\n"
    "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 3.0\n"
    "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 1.234567e+06\n"
    "# HELP vllm:request_success_created Count of successfully processed requests.\n"
    "# TYPE vllm:request_success_created gauge\n"
    "vllm:request_success_created{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 1.763748828123e+09\n"
    "vllm:request_success_created{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 1.763748829e+09\n"
    "# HELP plain_total Help with \\\\ backslash,\\nnewline and \"quotes\".\n"
    "# TYPE plain_total counter\n"
    "plain_total 0.5\n"
    "# HELP plain_created Help with \\\\ backslash,\\nnewline and \"quotes\".\n"
    "# TYPE plain_created gauge\n"
    "plain_created 1.7637488285e+09\n"
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 773.0\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"a\\\"b\\\\c\\nd\"} -2.5\n"
    "# HELP float_formats Float formatting.\n"
    "# TYPE float_formats gauge\n"
    "float_formats{case=\"zero\"} 0.0\n"
    "float_formats{case=\"negzero\"} -0.0\n"
    "float_formats{case=\"one\"} 1.0\n"
    "float_formats{case=\"tenth\"} 0.1\n"
    "float_formats{case=\"small\"} 1e-05\n"
    "float_formats{case=\"six\"} 123456.0\n"
    "float_formats{case=\"seven\"} 1.234567e+06\n"
    "float_formats{case=\"eight\"} 1e+07\n"
    "float_formats{case=\"neg7\"} -1234567.0\n"
    "float_formats{case=\"e15\"} 1e+015\n"
    "float_formats{case=\"e16\"} 1e+16\n"
    "float_formats{case=\"e22\"} 1e+22\n"
    "float_formats{case=\"frac\"} 1.234567891e+06\n"
    "float_formats{case=\"inf\"} +Inf\n"
    "float_formats{case=\"ninf\"} -Inf\n"
    "float_formats{case=\"nan\"} NaN\n"
    "# HELP empty_gauge No children yet.\n"
    "# TYPE empty_gauge gauge\n"
    "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n"
    "# TYPE vllm:e2e_request_latency_seconds histogram\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"m\"} 2.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 4.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 4.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"2560.0\",model_name=\"m\"} 6.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 7.0\n"
    "vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"m\"} 7.0\n"
    "vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"m\"} 1.0000025678015e+09\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"0.001\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"0.5\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"1.0\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"2560.0\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"+Inf\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_count{engine=\"1\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_sum{engine=\"1\",model_name=\"m\"} 0.0\n"
    "# HELP vllm:e2e_request_latency_seconds_created Histogram of e2e request latency in seconds.\n"
    "# TYPE vllm:e2e_request_latency_seconds_created gauge\n"
    "vllm:e2e_request_latency_seconds_created{engine=\"0\",model_name=\"m\"} 1.763748828123e+09\n"
    "vllm:e2e_request_latency_seconds_created{engine=\"1\",model_name=\"m\"} 1.763748829e+09\n"
    "# HELP request_size_bytes A summary without labels.\n"
    "# TYPE request_size_bytes summary\n"
    "request_size_bytes_count 2.0\n"
    "request_size_bytes_sum 1.00000000025e+09\n"
    "# HELP request_size_bytes_created A summary without labels.\n"
    "# TYPE request_size_bytes_created gauge\n"
    "request_size_bytes_created 1.7637488285e+09\n";

static const char REF_OPENMETRICS[] =
    "# HELP vllm:request_success Count of successfully processed requests.\n"
    "# TYPE vllm:request_success counter\n"
    "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 3.0\n"
    "vllm:request_success_created{engine=\"0\",finished_reason=\"stop\",model_name=\"m\"} 1.763748828123e+09\n"
    "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 1.234567e+06\n"
    "vllm:request_success_created{engine=\"0\",finished_reason=\"length\",model_name=\"m\"} 1.763748829e+09\n"
    "# HELP plain Help with \\\\ backslash,\\nnewline and \\\"quotes\\\".\n"
    "# TYPE plain counter\n"
    "plain_total 0.5\n"
    "plain_created 1.7637488285e+09\n"
    "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
    "# TYPE vllm:num_requests_running gauge\n"
    "vllm:num_requests_running{engine=\"0\",model_name=\"m\"} 773.0\n"
    "vllm:num_requests_running{engine=\"1\",model_name=\"a\\\"b\\\\c\\nd\"} -2.5\n"
    "# HELP float_formats Float formatting.\n"
    "# TYPE float_formats gauge\n"
    "float_formats{case=\"zero\"} 0.0\n"
    "float_formats{case=\"negzero\"} -0.0\n"
    "float_formats{case=\"one\"} 1.0\n"
    "float_formats{case=\"tenth\"} 0.1\n"
    "float_formats{case=\"small\"} 1e-05\n"
    "float_formats{case=\"six\"} 123456.0\n"
    "float_formats{case=\"seven\"} 1.234567e+06\n"
    "float_formats{case=\"eight\"} 1e+07\n"
    "float_formats{case=\"neg7\"} -1234567.0\n"
    "float_formats{case=\"e15\"} 1e+015\n"
    "float_formats{case=\"e16\"} 1e+16\n"
    "float_formats{case=\"e22\"} 1e+22\n"
    "float_formats{case=\"frac\"} 1.234567891e+06\n"
    "float_formats{case=\"inf\"} +Inf\n"
    "float_formats{case=\"ninf\"} -Inf\n"
    "float_formats{case=\"nan\"} NaN\n"
    "# HELP empty_gauge No children yet.\n"
    "# TYPE empty_gauge gauge\n"
    "# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.\n"
    "# TYPE vllm:e2e_request_latency_seconds histogram\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.001\",model_name=\"m\"} 2.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"0.5\",model_name=\"m\"} 4.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"m\"} 4.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"2560.0\",model_name=\"m\"} 6.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"m\"} 7.0\n"
    "vllm:e2e_request_latency_seconds_count{engine=\"0\",model_name=\"m\"} 7.0\n"
    "vllm:e2e_request_latency_seconds_sum{engine=\"0\",model_name=\"m\"} 1.0000025678015e+09\n"
    "vllm:e2e_request_latency_seconds_created{engine=\"0\",model_name=\"m\"} 1.763748828123e+09\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"0.001\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"0.5\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"1.0\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"2560.0\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_bucket{engine=\"1\",le=\"+Inf\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_count{engine=\"1\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_sum{engine=\"1\",model_name=\"m\"} 0.0\n"
    "vllm:e2e_request_latency_seconds_created{engine=\"1\",model_name=\"m\"} 1.763748829e+09\n"
    "# HELP request_size_bytes A summary without labels.\n"
    "# TYPE request_size_bytes summary\n"
    "request_size_bytes_count 2.0\n"
    "request_size_bytes_sum 1.00000000025e+09\n"
    "request_size_bytes_created 1.7637488285e+09\n"
    "# EOF\n";

static const char REF_SMALL_TEXT[] =
    "# HELP neg n\n"
    "# TYPE neg histogram\n"
    "neg_bucket{le=\"-1.0\"} 1.0\n"
    "neg_bucket{le=\"0.0\"} 1.0\n"
    "neg_bucket{le=\"+Inf\"} 1.0\n"
    "neg_count 1.0\n"
    "# HELP neg_created n\n"
    "# TYPE neg_created gauge\n"
    "neg_created 5.0\n"
    "# HELP bar_total b\n"
    "# TYPE bar_total gauge\n"
    "bar_total 0.0\n"
    "# HELP foo_total f\n"
    "# TYPE foo_total counter\n"
    "foo_total 0.0\n"
    "# HELP foo_created f\n"
    "# TYPE foo_created gauge\n"
    "foo_created 1.0\n";

static const char REF_SMALL_OPENMETRICS[] =
    "# HELP neg n\n"
    "# TYPE neg histogram\n"
    "neg_bucket{le=\"-1.0\"} 1.0\n"
    "neg_bucket{le=\"0.0\"} 1.0\n"
    "neg_bucket{le=\"+Inf\"} 1.0\n"
    "neg_count 1.0\n"
    "neg_created 5.0\n"
    "# HELP bar_total b\n"
    "# TYPE bar_total gauge\n"
    "bar_total 0.0\n"
    "# HELP foo f\n"
    "# TYPE foo counter\n"
    "foo_total 0.0\n"
    "foo_created 1.0\n"
    "# EOF\n";

/* ---- end of generated references ------------------------------------------------ */

static const double T0 = 1763748828.123, T1 = 1763748829.0, T2 = 1763748828.5;

/* Prints the first differing line of two expositions (the strings are long). */
static bool same_exposition(const char *what, const char *got, size_t got_len, const char *want) {
    if (got_len == strlen(want) && memcmp(got, want, got_len) == 0) return true;
    size_t i = 0;
    while (got[i] && got[i] == want[i]) i++;
    size_t start = i;
    while (start > 0 && want[start - 1] != '\n') start--;
    int nw = (int)strcspn(want + start, "\n"), ng = (int)strcspn(got + start, "\n");
    fprintf(stderr, "  %s differs at byte %zu:\n    want: %.*s\n    got:  %.*s\n", what, i, nw, want + start, ng,
            got + start);
    return false;
}

/* Mirrors make_reference.py build(). */
static metrics_t *build_reference_registry(void) {
    metrics_t *m = metrics_new();
    const char *succ_labels[] = {"model_name", "engine", "finished_reason"};
    metric_family_t *succ = metrics_add(m, "vllm:request_success_total", "Count of successfully processed requests.",
                                        METRIC_COUNTER, 3, succ_labels, NULL, 0, 0);
    metrics_set_clock_for_tests(m, T0);
    metric_t *stop = metric_child(succ, (const char *const[]){"m", "0", "stop"});
    metrics_set_clock_for_tests(m, T1);
    metric_t *length = metric_child(succ, (const char *const[]){"m", "0", "length"});
    metric_inc(stop, 3);
    metric_inc(length, 1234567);

    metrics_set_clock_for_tests(m, T2);
    metric_family_t *plain = metrics_add(m, "plain", "Help with \\ backslash,\nnewline and \"quotes\".",
                                         METRIC_COUNTER, 0, NULL, NULL, 0, 0);
    metric_inc(metric_child(plain, NULL), 0.5);

    const char *g_labels[] = {"model_name", "engine"};
    metric_family_t *g = metrics_add(m, "vllm:num_requests_running", "Number of requests in model execution batches.",
                                     METRIC_GAUGE, 2, g_labels, NULL, 0, 0);
    metric_set(metric_child(g, (const char *const[]){"m", "0"}), 773);
    metric_set(metric_child(g, (const char *const[]){"a\"b\\c\nd", "1"}), -2.5);

    const char *case_label[] = {"case"};
    metric_family_t *ff = metrics_add(m, "float_formats", "Float formatting.", METRIC_GAUGE, 1, case_label, NULL, 0, 0);
    static const struct {
        const char *name;
        double v;
    } cases[] = {{"zero", 0.0},          {"negzero", -0.0},     {"one", 1.0},         {"tenth", 0.1},
                 {"small", 1e-05},       {"six", 123456.0},     {"seven", 1234567.0}, {"eight", 10000000.0},
                 {"neg7", -1234567.0},   {"e15", 1e15},         {"e16", 1e16},        {"e22", 1e22},
                 {"frac", 1234567.891},  {"inf", INFINITY},     {"ninf", -INFINITY},  {"nan", NAN}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
        metric_set(metric_child(ff, (const char *const[]){cases[i].name}), cases[i].v);

    const char *a_label[] = {"a"};
    metrics_add(m, "empty_gauge", "No children yet.", METRIC_GAUGE, 1, a_label, NULL, 0, 0);

    static const double buckets[] = {0.001, 0.5, 1, 2560};
    metric_family_t *h = metrics_add(m, "vllm:e2e_request_latency_seconds",
                                     "Histogram of e2e request latency in seconds.", METRIC_HISTOGRAM, 2, g_labels,
                                     buckets, 4, 0);
    metrics_set_clock_for_tests(m, T0);
    metric_t *h0 = metric_child(h, (const char *const[]){"m", "0"});
    static const double obs[] = {0.0005, 0.001, 0.3, 0.5, 7, 2560, 1e9};
    for (size_t i = 0; i < sizeof obs / sizeof obs[0]; i++) metric_observe(h0, obs[i]);
    metrics_set_clock_for_tests(m, T1);
    metric_child(h, (const char *const[]){"m", "1"});

    metrics_set_clock_for_tests(m, T2);
    metric_family_t *s = metrics_add(m, "request_size_bytes", "A summary without labels.", METRIC_SUMMARY, 0, NULL,
                                     NULL, 0, 0);
    metric_observe(metric_child(s, NULL), 0.25);
    metric_observe(metric_child(s, NULL), 1e9);
    return m;
}

static void test_exposition_matches_prometheus_client(void) {
    metrics_t *m = build_reference_registry();
    size_t len = 0;
    char *text = metrics_render(m, false, &len);
    CHECK(same_exposition("text 0.0.4", text, len, REF_TEXT));
    CHECK_EQ_INT(strlen(text), len);
    free(text);
    char *om = metrics_render(m, true, &len);
    CHECK(same_exposition("OpenMetrics", om, len, REF_OPENMETRICS));
    free(om);
    metrics_free(m);
}

static void test_suffixes_and_negative_buckets_match_prometheus_client(void) {
    metrics_t *m = metrics_new();
    static const double neg_buckets[] = {-1, 0};
    metrics_set_clock_for_tests(m, 5.0);
    metric_observe(metric_child(metrics_add(m, "neg", "n", METRIC_HISTOGRAM, 0, NULL, neg_buckets, 2, 0), NULL), -3);
    metrics_add(m, "bar_total", "b", METRIC_GAUGE, 0, NULL, NULL, 0, 0);
    metrics_set_clock_for_tests(m, 1.0);
    metrics_add(m, "foo", "f", METRIC_COUNTER, 0, NULL, NULL, 0, 0);
    size_t len;
    char *text = metrics_render(m, false, &len);
    CHECK(same_exposition("text 0.0.4", text, len, REF_SMALL_TEXT));
    free(text);
    char *om = metrics_render(m, true, &len);
    CHECK(same_exposition("OpenMetrics", om, len, REF_SMALL_OPENMETRICS));
    free(om);
    metrics_free(m);
}

/* One labelless gauge set to v: its sample line is "g <formatted>\n". */
static void check_float_format(double v, const char *want) {
    metrics_t *m = metrics_new();
    metric_set(metric_child(metrics_add(m, "g", "h", METRIC_GAUGE, 0, NULL, NULL, 0, 0), NULL), v);
    char *text = metrics_render(m, false, NULL);
    char line[96];
    snprintf(line, sizeof line, "\ng %s\n", want);
    CHECK_STR_CONTAINS(text, line);
    free(text);
    metrics_free(m);
}

static void test_values_print_as_float_to_go_string(void) {
    check_float_format(0.0, "0.0");
    check_float_format(1.0, "1.0");
    check_float_format(773.0, "773.0");
    check_float_format(0.1, "0.1");
    check_float_format(1e-05, "1e-05");
    check_float_format(123456.0, "123456.0");  /* dot at index 6: stays Python repr */
    check_float_format(1234567.0, "1.234567e+06");
    check_float_format(1e7, "1e+07");
    check_float_format(12345678.9, "1.23456789e+07");
    check_float_format(1e15, "1e+015"); /* prometheus_client writes "e+0" + exponent */
    check_float_format(1.5e16, "1.5e+16"); /* repr already has an exponent */
    check_float_format(-1234567.0, "-1234567.0"); /* only positive values switch */
    check_float_format(1763748828.123, "1.763748828123e+09");
    check_float_format(INFINITY, "+Inf");
    check_float_format(-INFINITY, "-Inf");
    check_float_format(NAN, "NaN");
}

static void test_counter_total_suffix_is_stripped_once(void) {
    metrics_t *m = metrics_new();
    metrics_set_clock_for_tests(m, 2.0);
    metrics_add(m, "vllm:prompt_tokens_total", "p", METRIC_COUNTER, 0, NULL, NULL, 0, 0);
    char *text = metrics_render(m, false, NULL);
    CHECK_STR_CONTAINS(text, "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 0.0\n");
    CHECK_STR_CONTAINS(text, "# TYPE vllm:prompt_tokens_created gauge\nvllm:prompt_tokens_created 2.0\n");
    CHECK(!strstr(text, "_total_total"));
    free(text);
    char *om = metrics_render(m, true, NULL);
    CHECK_STR_CONTAINS(om, "# TYPE vllm:prompt_tokens counter\nvllm:prompt_tokens_total 0.0\n");
    free(om);
    metrics_free(m);
}

static void test_no_created_flag_drops_created_samples(void) {
    metrics_t *m = metrics_new();
    metric_t *c = metric_child(
        metrics_add(m, "cpu_seconds_total", "c", METRIC_COUNTER, 0, NULL, NULL, 0, METRIC_NO_CREATED), NULL);
    metric_set(c, 1.5);
    char *text = metrics_render(m, false, NULL);
    CHECK(strcmp(text, "# HELP cpu_seconds_total c\n# TYPE cpu_seconds_total counter\ncpu_seconds_total 1.5\n") == 0);
    free(text);
    char *om = metrics_render(m, true, NULL);
    CHECK(strcmp(om, "# HELP cpu_seconds c\n# TYPE cpu_seconds counter\ncpu_seconds_total 1.5\n# EOF\n") == 0);
    free(om);
    metrics_free(m);
}

static void test_child_lookup_returns_same_pointer(void) {
    metrics_t *m = metrics_new();
    const char *labels[] = {"model_name", "engine"};
    metric_family_t *f = metrics_add(m, "x", "h", METRIC_GAUGE, 2, labels, NULL, 0, 0);
    metric_t *a = metric_child(f, (const char *const[]){"m", "0"});
    metric_t *b = metric_child(f, (const char *const[]){"m", "1"});
    char v0[] = {'0', '\0'}; /* a different buffer with the same text */
    CHECK(a != b);
    CHECK(metric_child(f, (const char *const[]){"m", v0}) == a);
    CHECK(metric_child(f, (const char *const[]){"m", "1"}) == b);
    metric_family_t *g = metrics_add(m, "y", "h", METRIC_GAUGE, 0, NULL, NULL, 0, 0);
    CHECK(metric_child(g, NULL) == metric_child(g, NULL));
    /* Growing the value array (many children) must not disturb earlier values. */
    metric_set(a, 42);
    char name[16];
    for (int i = 0; i < 1000; i++) {
        snprintf(name, sizeof name, "m%d", i);
        metric_set(metric_child(f, (const char *const[]){name, "9"}), i);
    }
    CHECK(metric_value(a) == 42);
    CHECK(metric_value(metric_child(f, (const char *const[]){"m999", "9"})) == 999);
    metrics_free(m);
}

static void test_histogram_value_on_bound_goes_in_that_bucket(void) {
    metrics_t *m = metrics_new();
    static const double buckets[] = {0.001, 0.5, 1, 2560};
    metric_t *h = metric_child(metrics_add(m, "h", "h", METRIC_HISTOGRAM, 0, NULL, buckets, 4, 0), NULL);
    metric_observe(h, 0.5);     /* == bound: le="0.5" */
    metric_observe(h, 0.5001);  /* le="1.0" */
    metric_observe(h, 2560);    /* le="2560.0" */
    metric_observe(h, 2560.5);  /* +Inf only */
    metric_observe(h, 0.0);     /* le="0.001" */
    metric_observe(h, NAN);     /* in the sum, in no bucket, as prometheus_client */
    double count, sum, cum[5];
    metric_hist(h, &count, &sum, cum);
    CHECK(cum[0] == 1 && cum[1] == 2 && cum[2] == 3 && cum[3] == 4 && cum[4] == 5);
    CHECK(count == 5);
    CHECK(isnan(sum));
    metric_t *s = metric_child(metrics_add(m, "s", "s", METRIC_SUMMARY, 0, NULL, NULL, 0, 0), NULL);
    metric_observe(s, 2);
    metric_observe(s, 3);
    metric_hist(s, &count, &sum, NULL);
    CHECK(count == 2 && sum == 5);
    metrics_free(m);
}

static void test_locked_updates_batch_in_one_acquisition(void) {
    metrics_t *m = metrics_new();
    static const double buckets[] = {1, 2};
    metric_t *c = metric_child(metrics_add(m, "c", "c", METRIC_COUNTER, 0, NULL, NULL, 0, 0), NULL);
    metric_t *g = metric_child(metrics_add(m, "g", "g", METRIC_GAUGE, 0, NULL, NULL, 0, 0), NULL);
    metric_t *h = metric_child(metrics_add(m, "h", "h", METRIC_HISTOGRAM, 0, NULL, buckets, 2, 0), NULL);
    metrics_lock(m);
    metric_inc_locked(c, 2);
    metric_set_locked(g, 7);
    metric_inc_locked(g, -1);
    metric_observe_locked(h, 1.5);
    metrics_unlock(m);
    double count, sum;
    metric_hist(h, &count, &sum, NULL);
    CHECK(metric_value(c) == 2 && metric_value(g) == 6 && count == 1 && sum == 1.5);
    metrics_free(m);
}

typedef struct {
    metric_t *c, *h;
    int n;
} writer_arg_t;

static void *writer(void *p) {
    writer_arg_t *a = p;
    for (int i = 0; i < a->n; i++) {
        metric_inc(a->c, 1);
        metric_observe(a->h, (double)(i % 3));
    }
    return NULL;
}

typedef struct {
    metrics_t *m;
    metric_family_t *f;
    atomic_int *stop;
    int n_renders;
} reader_arg_t;

static void *reader(void *p) {
    reader_arg_t *a = p;
    char name[16];
    while (!atomic_load(a->stop)) {
        /* Scrapes race with writers and with children being created (the
         * value array grows under them). */
        snprintf(name, sizeof name, "r%d", a->n_renders);
        metric_child(a->f, (const char *const[]){name});
        size_t len;
        char *text = metrics_render(a->m, a->n_renders % 2, &len);
        SL_ASSERT(text && len == strlen(text));
        free(text);
        a->n_renders++;
    }
    return NULL;
}

static void test_concurrent_increments_are_exact(void) {
    enum { N_THREADS = 4, N_INC = 100000 };
    metrics_t *m = metrics_new();
    static const double buckets[] = {0.5, 1.5};
    metric_t *c = metric_child(metrics_add(m, "c_total", "c", METRIC_COUNTER, 0, NULL, NULL, 0, 0), NULL);
    metric_t *h = metric_child(metrics_add(m, "h", "h", METRIC_HISTOGRAM, 0, NULL, buckets, 2, 0), NULL);
    const char *lbl[] = {"r"};
    metric_family_t *f = metrics_add(m, "g", "g", METRIC_GAUGE, 1, lbl, NULL, 0, 0);
    atomic_int stop = 0;
    reader_arg_t ra = {m, f, &stop, 0};
    writer_arg_t wa = {c, h, N_INC};
    pthread_t rt, wt[N_THREADS];
    SL_ASSERT(pthread_create(&rt, NULL, reader, &ra) == 0);
    for (int i = 0; i < N_THREADS; i++) SL_ASSERT(pthread_create(&wt[i], NULL, writer, &wa) == 0);
    for (int i = 0; i < N_THREADS; i++) pthread_join(wt[i], NULL);
    atomic_store(&stop, 1);
    pthread_join(rt, NULL);
    double count, cum[3];
    metric_hist(h, &count, NULL, cum);
    CHECK(metric_value(c) == N_THREADS * N_INC);
    CHECK(count == N_THREADS * N_INC);
    CHECK(cum[0] == N_THREADS * 33334.0); /* i % 3 == 0 for 33334 of 100000 */
    char *text = metrics_render(m, false, NULL);
    CHECK_STR_CONTAINS(text, "\nc_total 400000.0\n");
    free(text);
    printf("  %d renders during %d increments\n", ra.n_renders, N_THREADS * N_INC);
    CHECK(ra.n_renders > 0);
    metrics_free(m);
}

static void test_accept_header_selects_openmetrics(void) {
    CHECK(metrics_accept_openmetrics("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
                                     "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1"));
    CHECK(metrics_accept_openmetrics("text/plain;version=0.0.4;q=0.3, application/openmetrics-text ;q=0.5"));
    CHECK(metrics_accept_openmetrics("application/openmetrics-text"));
    CHECK(!metrics_accept_openmetrics("text/plain"));
    CHECK(!metrics_accept_openmetrics("*/*"));
    CHECK(!metrics_accept_openmetrics(""));
    CHECK(!metrics_accept_openmetrics(NULL));
    CHECK(!metrics_accept_openmetrics("Application/OpenMetrics-Text")); /* exact, as choose_encoder */
    CHECK(!metrics_accept_openmetrics("application/openmetrics-textx"));
}

/* The value of the labelless sample `name` in a text exposition, or NAN. */
static double sample_value(const char *text, const char *name) {
    char key[96];
    snprintf(key, sizeof key, "\n%s ", name);
    const char *p = strstr(text, key);
    return p ? strtod(p + strlen(key), NULL) : NAN;
}

static void test_process_collector_reports_this_process(void) {
    metrics_t *m = metrics_new();
    metrics_add_process_collector(m);
    char *text = metrics_render(m, false, NULL);
    static const char *const expect[] = {
        "# HELP process_virtual_memory_bytes Virtual memory size in bytes.\n"
        "# TYPE process_virtual_memory_bytes gauge\nprocess_virtual_memory_bytes ",
        "\n# HELP process_resident_memory_bytes Resident memory size in bytes.\n"
        "# TYPE process_resident_memory_bytes gauge\nprocess_resident_memory_bytes ",
        "\n# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"
        "# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds ",
        "\n# HELP process_cpu_seconds_total Total user and system CPU time spent in seconds.\n"
        "# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
        "\n# HELP process_open_fds Number of open file descriptors.\n"
        "# TYPE process_open_fds gauge\nprocess_open_fds ",
        "\n# HELP process_max_fds Maximum number of open file descriptors.\n"
        "# TYPE process_max_fds gauge\nprocess_max_fds ",
    };
    const char *prev = text;
    for (size_t i = 0; i < sizeof expect / sizeof expect[0]; i++) {
        const char *p = strstr(text, expect[i]);
        CHECK_STR_CONTAINS(text, expect[i]);
        CHECK(p && p >= prev); /* in prometheus_client's order */
        if (p) prev = p;
    }
    CHECK(!strstr(text, "_created")); /* gauges, and the counter has none */
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double start = sample_value(text, "process_start_time_seconds");
    CHECK(start <= (double)ts.tv_sec + 1 && start > (double)ts.tv_sec - 86400);
    CHECK(sample_value(text, "process_resident_memory_bytes") > 0);
    CHECK(sample_value(text, "process_virtual_memory_bytes") >= sample_value(text, "process_resident_memory_bytes"));
    CHECK(sample_value(text, "process_cpu_seconds_total") >= 0);
    CHECK(sample_value(text, "process_open_fds") >= 3);
    CHECK(sample_value(text, "process_max_fds") >= sample_value(text, "process_open_fds"));
    free(text);
    char *om = metrics_render(m, true, NULL);
    CHECK_STR_CONTAINS(om, "# TYPE process_cpu_seconds counter\nprocess_cpu_seconds_total ");
    free(om);
    metrics_free(m);
}

int main(void) {
    test_seed();
    RUN(test_exposition_matches_prometheus_client);
    RUN(test_suffixes_and_negative_buckets_match_prometheus_client);
    RUN(test_values_print_as_float_to_go_string);
    RUN(test_counter_total_suffix_is_stripped_once);
    RUN(test_no_created_flag_drops_created_samples);
    RUN(test_child_lookup_returns_same_pointer);
    RUN(test_histogram_value_on_bound_goes_in_that_bucket);
    RUN(test_locked_updates_batch_in_one_acquisition);
    RUN(test_concurrent_increments_are_exact);
    RUN(test_accept_header_selects_openmetrics);
    RUN(test_process_collector_reports_this_process);
    return test_summary();
}
