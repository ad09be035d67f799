/* report.c - what `bench serve` prints and saves, in vLLM's words and order.
 *
 * The table is vLLM's: "{:<40} {:<10}" for counts and "{:<40} {:<10.2f}" for the rest
 * (trailing spaces included), a 50-wide title line centred in '=' (Python's '^' puts
 * the odd pad character on the right), one '-' section per selected metric with Mean,
 * Median and each percentile, a closing line of 50 '='. Lines follow the newest vLLM:
 * "Peak concurrent requests" as a float, "Total token throughput (tok/s)" (0.10 and
 * older print "Total Token").
 * The JSON has vLLM's keys in vLLM's order. With --save-detailed it adds the per-request
 * lists (input_lens, output_lens, ttfts, itls, latencies, start_times, queue_times,
 * generated_texts, errors); vLLM's newest keeps latencies and queue_times even without
 * it, which makes every file grow with the run, so here they come only with it.
 * start_times are CLOCK_MONOTONIC seconds, as perf_counter() values are in vLLM's.
 * One key vLLM lacks: failed_by_status, the failures counted by HTTP status (0: no
 * response).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char *const names[BM_N] = {"ttft", "tpot", "itl", "e2el", "client_queue_time",
                                        "e2el_including_client_queue"};
static const char *const labels[BM_N] = {"TTFT", "TPOT", "ITL", "E2EL", "Client Queue Time", "E2EL incl. Client Queue"};
static const char *const headers[BM_N] = {"Time to First Token", "Time per Output Token (excl. 1st token)",
                                          "Inter-token Latency", "End-to-end Latency", "Client-side Queueing",
                                          "Queue-inclusive End-to-end Latency"};

/* Python's "{s:{c}^{n}}".format(s=title, n=50, c=fill). */
static void centered(FILE *f, const char *title, char fill) {
    int len = (int)strlen(title), pad = len < 50 ? 50 - len : 0, left = pad / 2;
    for (int i = 0; i < left; i++) fputc(fill, f);
    fputs(title, f);
    for (int i = 0; i < pad - left; i++) fputc(fill, f);
    fputc('\n', f);
}

static void row_int(FILE *f, const char *label, int64_t v) { fprintf(f, "%-40s %-10lld\n", label, (long long)v); }
static void row_f(FILE *f, const char *label, double v) { fprintf(f, "%-40s %-10.2f\n", label, v); }

/* vLLM's p_word: str(int(p)) when integral, else str(p). */
static void pct_word(double p, char *out, size_t cap) {
    if (p == floor(p)) snprintf(out, cap, "%lld", (long long)p);
    else sl_format_py_float(p, 0, out, cap);
}

void bench_print_table(FILE *f, const bench_args_t *a, const bench_metrics_t *m, double duration_s) {
    centered(f, " Serving Benchmark Result ", '=');
    row_int(f, "Successful requests:", m->completed);
    row_int(f, "Failed requests:", m->failed);
    if (a->max_concurrency > 0) row_int(f, "Maximum request concurrency:", a->max_concurrency);
    if (!isinf(a->request_rate)) row_f(f, "Request rate configured (RPS):", a->request_rate);
    row_f(f, "Benchmark duration (s):", duration_s);
    row_int(f, "Total input tokens:", m->total_input);
    row_int(f, "Total generated tokens:", m->total_output);
    row_f(f, "Request throughput (req/s):", m->request_throughput);
    if (a->goodput_on) row_f(f, "Request goodput (req/s):", m->request_goodput);
    row_f(f, "Output token throughput (tok/s):", m->output_throughput);
    row_f(f, "Peak output token throughput (tok/s):", m->max_output_tokens_per_s);
    row_f(f, "Peak concurrent requests:", (double)m->max_concurrent_requests);
    row_f(f, "Total token throughput (tok/s):", m->total_token_throughput);
    for (int k = 0; k < BM_N; k++) {
        const bench_dist_t *d = &m->dist[k];
        if (!d->present) continue;
        centered(f, headers[k], '-');
        char label[96], pw[32];
        snprintf(label, sizeof label, "Mean %s (ms):", labels[k]);
        row_f(f, label, d->mean);
        snprintf(label, sizeof label, "Median %s (ms):", labels[k]);
        row_f(f, label, d->median);
        for (int p = 0; p < a->n_pcts; p++) {
            pct_word(a->pcts[p], pw, sizeof pw);
            snprintf(label, sizeof label, "P%s %s (ms):", pw, labels[k]);
            row_f(f, label, d->pct[p]);
        }
    }
    for (int i = 0; i < 50; i++) fputc('=', f);
    fputc('\n', f);
}

static void key_str(bench_json_t *j, const char *k, const char *v) {
    bj_key(j, k);
    if (v) bj_str(j, v, strlen(v));
    else bj_null(j);
}
static void key_int(bench_json_t *j, const char *k, int64_t v) {
    bj_key(j, k);
    bj_int(j, v);
}
static void key_f(bench_json_t *j, const char *k, double v) {
    bj_key(j, k);
    bj_float(j, v);
}

static void detailed(bench_json_t *j, const bench_metrics_t *m, const bench_output_t *o, int64_t n) {
    bj_key(j, "input_lens");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_int(j, o[i].prompt_len);
    bj_arr_end(j);
    bj_key(j, "output_lens");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_int(j, m->output_lens[i]);
    bj_arr_end(j);
    bj_key(j, "ttfts");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_float(j, o[i].ttft);
    bj_arr_end(j);
    bj_key(j, "itls");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) {
        bj_arr(j);
        for (int64_t k = 0; k < o[i].n_itl; k++) bj_float(j, o[i].itl[k]);
        bj_arr_end(j);
    }
    bj_arr_end(j);
    bj_key(j, "latencies");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_float(j, o[i].latency);
    bj_arr_end(j);
    bj_key(j, "start_times");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_float(j, o[i].start_time);
    bj_arr_end(j);
    bj_key(j, "queue_times");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_float(j, o[i].queue_time);
    bj_arr_end(j);
    bj_key(j, "generated_texts");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_str(j, o[i].text ? o[i].text : "", o[i].text ? o[i].text_len : 0);
    bj_arr_end(j);
    bj_key(j, "errors");
    bj_arr(j);
    for (int64_t i = 0; i < n; i++) bj_str(j, o[i].error ? o[i].error : "", o[i].error ? strlen(o[i].error) : 0);
    bj_arr_end(j);
}

static void by_status(bench_json_t *j, const bench_output_t *o, int64_t n) {
    bj_key(j, "failed_by_status");
    bj_obj(j);
    long seen[64];
    int n_seen = 0;
    for (int64_t i = 0; i < n; i++) {
        if (o[i].success) continue;
        bool dup = false;
        for (int s = 0; s < n_seen; s++) dup = dup || seen[s] == o[i].status;
        if (dup || n_seen == 64) continue;
        seen[n_seen++] = o[i].status;
        int64_t count = 0;
        for (int64_t k = i; k < n; k++) count += !o[k].success && o[k].status == o[i].status;
        char key[32];
        snprintf(key, sizeof key, "%ld", o[i].status);
        key_int(j, key, count);
    }
    bj_obj_end(j);
}

char *bench_result_json(const bench_args_t *a, const bench_report_t *r, const bench_metrics_t *m,
                        const bench_output_t *o, int64_t n, size_t *len) {
    bench_json_t j = {0};
    bj_obj(&j);
    key_str(&j, "date", r->date);
    key_str(&j, "endpoint_type", a->backend);
    key_str(&j, "backend", a->backend);
    key_str(&j, "label", a->label);
    key_str(&j, "model_id", r->model_id);
    key_str(&j, "tokenizer_id", r->tokenizer_id);
    key_int(&j, "num_prompts", a->num_prompts);
    for (int i = 0; i < a->metadata.n; i++) { /* KEY=VALUE, both stripped, as strings */
        const char *kv = a->metadata.v[i], *eq = strchr(kv, '=');
        char key[256], val[1024];
        const char *ks = kv, *ke = eq, *vs = eq + 1, *ve = kv + strlen(kv);
        while (ks < ke && (*ks == ' ' || *ks == '\t')) ks++;
        while (ke > ks && (ke[-1] == ' ' || ke[-1] == '\t')) ke--;
        while (vs < ve && (*vs == ' ' || *vs == '\t')) vs++;
        while (ve > vs && (ve[-1] == ' ' || ve[-1] == '\t')) ve--;
        snprintf(key, sizeof key, "%.*s", (int)(ke - ks), ks);
        snprintf(val, sizeof val, "%.*s", (int)(ve - vs), vs);
        key_str(&j, key, val);
    }
    if (isinf(a->request_rate)) key_str(&j, "request_rate", "inf");
    else key_f(&j, "request_rate", a->request_rate);
    key_f(&j, "burstiness", a->burstiness);
    if (a->max_concurrency > 0) key_int(&j, "max_concurrency", a->max_concurrency);
    else key_str(&j, "max_concurrency", NULL);
    if (a->ramp_up_strategy) {
        key_str(&j, "ramp_up_strategy", a->ramp_up_strategy);
        key_int(&j, "ramp_up_start_rps", a->ramp_up_start_rps);
        key_int(&j, "ramp_up_end_rps", a->ramp_up_end_rps);
    }
    key_f(&j, "duration", r->duration_s);
    key_int(&j, "completed", m->completed);
    key_int(&j, "failed", m->failed);
    key_int(&j, "total_input_tokens", m->total_input);
    key_int(&j, "total_output_tokens", m->total_output);
    key_f(&j, "request_throughput", m->request_throughput);
    if (a->goodput_on) key_f(&j, "request_goodput", m->request_goodput);
    else key_str(&j, "request_goodput", NULL);
    key_f(&j, "output_throughput", m->output_throughput);
    key_f(&j, "total_token_throughput", m->total_token_throughput);
    if (a->save_detailed) detailed(&j, m, o, n);
    key_f(&j, "max_output_tokens_per_s", m->max_output_tokens_per_s);
    key_int(&j, "max_concurrent_requests", m->max_concurrent_requests);
    key_f(&j, "rtfx", 0.0);
    by_status(&j, o, n);
    for (int k = 0; k < BM_N; k++) {
        const bench_dist_t *d = &m->dist[k];
        if (!d->present) continue;
        char key[96], pw[32];
        snprintf(key, sizeof key, "mean_%s_ms", names[k]);
        key_f(&j, key, d->mean);
        snprintf(key, sizeof key, "median_%s_ms", names[k]);
        key_f(&j, key, d->median);
        snprintf(key, sizeof key, "std_%s_ms", names[k]);
        key_f(&j, key, d->std);
        for (int p = 0; p < a->n_pcts; p++) {
            pct_word(a->pcts[p], pw, sizeof pw);
            snprintf(key, sizeof key, "p%s_%s_ms", pw, names[k]);
            key_f(&j, key, d->pct[p]);
        }
    }
    bj_obj_end(&j);
    return bj_take(&j, len);
}

void bench_result_path(const bench_args_t *a, const char *model_id, const char *date, char *out, size_t cap) {
    char name[1024], rate[64] = "inf", conc[48] = "";
    if (a->result_filename) {
        snprintf(name, sizeof name, "%s", a->result_filename);
    } else {
        const char *base = strrchr(model_id, '/');
        base = base ? base + 1 : model_id;
        if (!isinf(a->request_rate)) sl_format_py_float(a->request_rate, 0, rate, sizeof rate);
        if (a->max_concurrency > 0) snprintf(conc, sizeof conc, "-concurrency%lld", (long long)a->max_concurrency);
        const char *label = a->label ? a->label : a->backend;
        if (a->ramp_up_strategy)
            snprintf(name, sizeof name, "%s-ramp-up-%s-%lldqps-%lldqps%s-%s-%s.json", label, a->ramp_up_strategy,
                     (long long)a->ramp_up_start_rps, (long long)a->ramp_up_end_rps, conc, base, date);
        else
            snprintf(name, sizeof name, "%s-%sqps%s-%s-%s.json", label, rate, conc, base, date);
    }
    if (a->result_dir) {
        if (sl_path_join(out, cap, a->result_dir, name)) snprintf(out, cap, "%s", name);
    } else {
        snprintf(out, cap, "%s", name);
    }
}
