/* diagnose.c - the measures the serving playbooks split on, computed from
 * snapshots of vLLM's metrics, and the rules that name a cause (docs/lab.md has
 * the table).
 *
 * Measures. Counters and histograms are read as deltas between the first and
 * the last snapshot, summed over every series of a name (one server may label
 * several engines); quantiles interpolate inside buckets as Prometheus'
 * histogram_quantile does. Gauges are averaged over every snapshot. Two
 * measures read consecutive snapshots: stalls (an interval with requests
 * running or waiting at both ends and no token processed) and the first requests' TTFT
 * against the rest's (a cold start; TTFT less queue time, so that a burst
 * queueing at the start is not taken for one). Where vLLM renamed a series, the newer
 * name is read first.
 *
 * Rules. Each rule is the playbooks' logic on shares and ratios, never on
 * absolute timings: what the run shows about itself (queue time as a share of
 * TTFT, blocks held with nothing running, intervals without progress), and,
 * given a baseline (an earlier report of the same server when it was healthy,
 * seed 003's "baseline methodology"), how far a number moved from it. A rule
 * that needs a baseline is skipped without one, and the report says so. A
 * rule's score is its evidence over its threshold (>= 1 when it fires); causes
 * are ranked most specific first (a stalled engine also queues requests; a
 * leak also causes KV pressure), then by score.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"
#include "servelab/diagnose.h"

const char *const diag_measure_names[DIAG_N_MEASURES] = {
#define DIAG_NAME(n) #n,
    DIAG_MEASURES(DIAG_NAME)
#undef DIAG_NAME
};

/* ---- reading series ---------------------------------------------------------------- */

/* Sum of every sample called `name` (with label key=value when key is not
 * NULL; a value ending in '*' matches as a prefix); NAN when there is none. */
static double series_sum(const prom_snapshot_t *s, const char *name, const char *key, const char *value) {
    double sum = 0;
    bool found = false;
    size_t vlen = value ? strlen(value) : 0;
    bool prefix = vlen && value[vlen - 1] == '*';
    for (int i = 0; i < s->n; i++) {
        const prom_sample_t *x = &s->samples[i];
        if (strcmp(x->name, name)) continue;
        if (key) {
            const char *v = prom_label(x, key);
            if (!v || (prefix ? strncmp(v, value, vlen - 1) : strcmp(v, value))) continue;
        }
        sum += x->value;
        found = true;
    }
    return found ? sum : NAN;
}

/* The first of `names` (NULL-terminated) that the snapshot has. */
static const char *first_present(const prom_snapshot_t *s, const char *const *names) {
    for (; *names; names++)
        if (!isnan(series_sum(s, *names, NULL, NULL))) return *names;
    return NULL;
}

/* last - first of a counter; NAN if either lacks it. A counter that went down
 * (the server restarted) counts from zero, as Prometheus' increase() does. */
static double counter_delta(const prom_snapshot_t *a, const prom_snapshot_t *b, const char *name, const char *key,
                            const char *value) {
    double x = series_sum(a, name, key, value), y = series_sum(b, name, key, value);
    if (isnan(y)) return NAN;
    if (isnan(x)) x = 0;
    return y >= x ? y - x : y;
}

typedef struct {
    double le[64], count[64];
    int n;
} buckets_t;

/* A histogram's cumulative buckets (summed over series) in the delta b - a. */
static void histogram_delta(const prom_snapshot_t *a, const prom_snapshot_t *b, const char *base, buckets_t *h) {
    char name[160];
    snprintf(name, sizeof name, "%s_bucket", base);
    h->n = 0;
    for (int i = 0; i < b->n && h->n < 64; i++) {
        const prom_sample_t *x = &b->samples[i];
        const char *le = prom_label(x, "le");
        if (!le || strcmp(x->name, name)) continue;
        double bound = !strcmp(le, "+Inf") ? INFINITY : strtod(le, NULL);
        bool seen = false;
        for (int k = 0; k < h->n; k++) seen |= h->le[k] == bound;
        if (seen) continue;
        int k = h->n++;
        h->le[k] = bound;
        h->count[k] = counter_delta(a, b, name, "le", le);
    }
    /* Sort by bound (a handful of buckets: insertion sort). */
    for (int i = 1; i < h->n; i++)
        for (int k = i; k > 0 && h->le[k - 1] > h->le[k]; k--) {
            double t = h->le[k];
            h->le[k] = h->le[k - 1], h->le[k - 1] = t;
            t = h->count[k];
            h->count[k] = h->count[k - 1], h->count[k - 1] = t;
        }
}

/* Prometheus' histogram_quantile: linear inside the bucket holding rank
 * q * total; the lowest bucket starts at 0; in the +Inf bucket, the highest
 * finite bound. NAN without observations. */
static double bucket_quantile(const buckets_t *h, double q) {
    if (h->n < 2 || !isinf(h->le[h->n - 1])) return NAN;
    double total = h->count[h->n - 1];
    if (!(total > 0)) return NAN;
    double rank = q * total;
    for (int i = 0; i < h->n; i++) {
        if (h->count[i] < rank) continue;
        if (isinf(h->le[i])) return h->le[h->n - 2];
        double lo = i ? h->le[i - 1] : 0, below = i ? h->count[i - 1] : 0;
        if (i == 0 && h->le[0] <= 0) return h->le[0];
        double in = h->count[i] - below;
        return in > 0 ? lo + (h->le[i] - lo) * (rank - below) / in : h->le[i];
    }
    return h->le[h->n - 2];
}

static double ratio(double a, double b) { return b > 0 ? a / b : NAN; }

/* ---- measures ---------------------------------------------------------------------- */

static const char *const KV_NAMES[] = {"vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc", NULL};
static const char *const ITL_NAMES[] = {"vllm:inter_token_latency_seconds_count",
                                        "vllm:time_per_output_token_seconds_count", NULL};
static const char *const PREEMPT_NAMES[] = {"vllm:num_preemptions_total", "vllm:num_preemptions", NULL};
/* KV cache usage that counts as full (seed 004 writes `> 90`; the series is a fraction). */
#define KV_FULL 0.9
static const char *const PREFIX_Q_NAMES[] = {"vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total", NULL};
static const char *const PREFIX_H_NAMES[] = {"vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total", NULL};

static void latency(const prom_snapshot_t *a, const prom_snapshot_t *b, const char *base, double *p50, double *p95,
                    double *mean) {
    buckets_t h;
    histogram_delta(a, b, base, &h);
    if (p50) *p50 = bucket_quantile(&h, 0.5);
    if (p95) *p95 = bucket_quantile(&h, 0.95);
    char sum[160], count[160];
    snprintf(sum, sizeof sum, "%s_sum", base);
    snprintf(count, sizeof count, "%s_count", base);
    if (mean) *mean = ratio(counter_delta(a, b, sum, NULL, NULL), counter_delta(a, b, count, NULL, NULL));
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* The KV pool's size in blocks: vllm:cache_config_info's num_gpu_blocks label
 * in the last snapshot; NAN without it. */
static double pool_blocks(const prom_snapshot_t *s) {
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->samples[i].name, "vllm:cache_config_info")) continue;
        const char *v = prom_label(&s->samples[i], "num_gpu_blocks");
        char *end;
        double blocks = v ? strtod(v, &end) : NAN;
        return v && end != v && !*end && blocks > 0 ? blocks : NAN;
    }
    return NAN;
}

/* Gauges over every snapshot: running, waiting, KV usage, the KV usage with
 * nothing scheduled (what a leak leaves), per running request. */
static void gauges(const prom_snapshot_t *snaps, int n, diag_measures_t *m) {
    const char *kv = first_present(&snaps[n - 1], KV_NAMES);
    m->v[DM_kv_pool_blocks] = pool_blocks(&snaps[n - 1]);
    double run_sum = 0, wait_sum = 0, kv_sum = 0, per_run = 0;
    int n_kv = 0, n_per_run = 0;
    m->v[DM_running_max] = m->v[DM_waiting_max] = m->v[DM_kv_usage_max] = NAN;
    for (int i = 0; i < n; i++) {
        double run = series_sum(&snaps[i], "vllm:num_requests_running", NULL, NULL);
        double wait = series_sum(&snaps[i], "vllm:num_requests_waiting", NULL, NULL);
        double u = kv ? series_sum(&snaps[i], kv, NULL, NULL) : NAN;
        run_sum += run, wait_sum += wait;
        m->v[DM_running_max] = fmax(run, m->v[DM_running_max]);
        m->v[DM_waiting_max] = fmax(wait, m->v[DM_waiting_max]);
        if (isnan(u)) continue;
        kv_sum += u, n_kv++;
        m->v[DM_kv_usage_max] = fmax(u, m->v[DM_kv_usage_max]);
        if (run == 0 && wait == 0) m->v[DM_kv_usage_idle] = isnan(m->v[DM_kv_usage_idle]) ? u : fmax(u, m->v[DM_kv_usage_idle]);
        if (run > 0) per_run += u / run, n_per_run++;
    }
    m->v[DM_running_mean] = run_sum / n;
    m->v[DM_waiting_mean] = wait_sum / n;
    m->v[DM_inflight_mean] = (run_sum + wait_sum) / n;
    m->v[DM_kv_usage_mean] = n_kv ? kv_sum / n_kv : NAN;
    m->v[DM_kv_usage_per_running] = n_per_run ? per_run / n_per_run : NAN;
}

/* Consecutive snapshots: the stalled intervals; the intervals that end with
 * requests waiting while the KV cache is full (r_kv_pressure's condition, one
 * interval at a time: usage at KV_FULL or more, or a preemption in the interval),
 * which unlike waiting_mean leaves out the requests that only wait for the
 * next step; and the first requests' TTFT against the median of the later
 * intervals'. */
static void intervals(const prom_snapshot_t *snaps, int n, diag_measures_t *m) {
    const char *kv = first_present(&snaps[n - 1], KV_NAMES), *pre = first_present(&snaps[n - 1], PREEMPT_NAMES);
    int busy = 0, stalled = 0, n_ttft = 0, kv_bound = 0;
    double stalled_s = 0, *ttft = sl_calloc((size_t)n, sizeof *ttft);
    for (int i = 1; i < n; i++) {
        const prom_snapshot_t *a = &snaps[i - 1], *b = &snaps[i];
        double run_a = series_sum(a, "vllm:num_requests_running", NULL, NULL) +
                       series_sum(a, "vllm:num_requests_waiting", NULL, NULL);
        double run_b = series_sum(b, "vllm:num_requests_running", NULL, NULL) +
                       series_sum(b, "vllm:num_requests_waiting", NULL, NULL);
        double tokens = counter_delta(a, b, "vllm:generation_tokens_total", NULL, NULL) +
                        counter_delta(a, b, "vllm:prompt_tokens_total", NULL, NULL);
        if (run_a >= 1 && run_b >= 1) {
            busy++;
            if (tokens == 0) stalled++, stalled_s += b->t - a->t;
        }
        const bool full = (kv && series_sum(b, kv, NULL, NULL) >= KV_FULL) || (pre && counter_delta(a, b, pre, NULL, NULL) >= 1);
        kv_bound += full && series_sum(b, "vllm:num_requests_waiting", NULL, NULL) > 0;
        /* TTFT less queue time: a burst that queues is not a cold start. */
        double c = counter_delta(a, b, "vllm:time_to_first_token_seconds_count", NULL, NULL);
        double q = counter_delta(a, b, "vllm:request_queue_time_seconds_sum", NULL, NULL);
        if (c > 0)
            ttft[n_ttft++] = (counter_delta(a, b, "vllm:time_to_first_token_seconds_sum", NULL, NULL) - (isnan(q) ? 0 : q)) / c;
    }
    m->v[DM_stalled_share] = busy >= 3 ? (double)stalled / busy : NAN;
    m->v[DM_kv_bound_share] = kv ? (double)kv_bound / (n - 1) : NAN;
    m->v[DM_stalled_s] = stalled_s;
    if (n_ttft >= 4) {
        double first = ttft[0];
        qsort(ttft + 1, (size_t)(n_ttft - 1), sizeof *ttft, cmp_double);
        int k = n_ttft - 1;
        double med = k % 2 ? ttft[1 + k / 2] : 0.5 * (ttft[k / 2] + ttft[1 + k / 2]);
        m->v[DM_first_ttft_ratio] = ratio(first, med);
        m->v[DM_first_ttft] = first;
    }
    free(ttft);
}

void diag_measure(const prom_snapshot_t *snaps, int n, double expected_inflight, const diag_extra_t *extra,
                  diag_measures_t *m) {
    for (int i = 0; i < DIAG_N_MEASURES; i++) m->v[i] = NAN;
    SL_ASSERT(n >= 2);
    const prom_snapshot_t *a = &snaps[0], *b = &snaps[n - 1];
    double win = b->t - a->t;
    m->v[DM_window_s] = win;
    m->v[DM_samples] = n;
    m->v[DM_uptime_s] = b->t - series_sum(b, "process_start_time_seconds", NULL, NULL);

    double fin = counter_delta(a, b, "vllm:request_success_total", NULL, NULL);
    m->v[DM_requests_finished] = fin;
    m->v[DM_finished_length_share] = ratio(counter_delta(a, b, "vllm:request_success_total", "finished_reason", "length"), fin);
    m->v[DM_finished_abort_share] = ratio(counter_delta(a, b, "vllm:request_success_total", "finished_reason", "abort"), fin);
    m->v[DM_finished_error_share] = ratio(counter_delta(a, b, "vllm:request_success_total", "finished_reason", "error"), fin);

    latency(a, b, "vllm:time_to_first_token_seconds", &m->v[DM_ttft_p50], &m->v[DM_ttft_p95], &m->v[DM_ttft_mean]);
    const char *itl = first_present(b, ITL_NAMES);
    if (itl) {
        char base[160];
        snprintf(base, sizeof base, "%.*s", (int)(strlen(itl) - strlen("_count")), itl);
        latency(a, b, base, &m->v[DM_itl_p50], &m->v[DM_itl_p95], &m->v[DM_itl_mean]);
    }
    latency(a, b, "vllm:e2e_request_latency_seconds", &m->v[DM_e2e_p50], &m->v[DM_e2e_p95], &m->v[DM_e2e_mean]);
    /* Per request, decode time over its tokens after the first (vLLM 0.11's series): unlike ITL,
     * which is one gap per step, it falls when a step emits several tokens (speculation). */
    latency(a, b, "vllm:request_time_per_output_token_seconds", &m->v[DM_tpot_p50], NULL, &m->v[DM_tpot_mean]);
    latency(a, b, "vllm:request_queue_time_seconds", NULL, NULL, &m->v[DM_queue_time_mean]);
    latency(a, b, "vllm:request_prefill_time_seconds", NULL, NULL, &m->v[DM_prefill_time_mean]);
    m->v[DM_queue_share_of_ttft] = ratio(counter_delta(a, b, "vllm:request_queue_time_seconds_sum", NULL, NULL),
                                         counter_delta(a, b, "vllm:time_to_first_token_seconds_sum", NULL, NULL));

    gauges(snaps, n, m);
    if (expected_inflight > 0) {
        m->v[DM_expected_inflight] = expected_inflight;
        m->v[DM_inflight_vs_expected] = m->v[DM_inflight_mean] / expected_inflight;
    }

    const char *pre = first_present(b, PREEMPT_NAMES);
    if (pre) {
        m->v[DM_preemptions] = counter_delta(a, b, pre, NULL, NULL);
        m->v[DM_preemptions_per_request] = ratio(m->v[DM_preemptions], fin);
    }
    /* Prompt tokens found in the prefix cache over those looked up. With caching off the counters
     * stay (vLLM exports them) and nothing is looked up: none of the prompt tokens was found. */
    const char *pq = first_present(b, PREFIX_Q_NAMES), *ph = first_present(b, PREFIX_H_NAMES);
    if (pq && ph) {
        double queries = counter_delta(a, b, pq, NULL, NULL);
        m->v[DM_prefix_hit_rate] = queries == 0 && counter_delta(a, b, "vllm:prompt_tokens_total", NULL, NULL) > 0
                                       ? 0
                                       : ratio(counter_delta(a, b, ph, NULL, NULL), queries);
    }

    /* Speculative decoding (only with --speculative-config): the drafts' tokens, and the share
     * the model kept, vLLM's "Avg Draft acceptance rate". */
    double drafted = counter_delta(a, b, "vllm:spec_decode_num_draft_tokens_total", NULL, NULL);
    m->v[DM_spec_draft_tokens] = drafted;
    m->v[DM_spec_acceptance_rate] =
        ratio(counter_delta(a, b, "vllm:spec_decode_num_accepted_tokens_total", NULL, NULL), drafted);

    double prompt = counter_delta(a, b, "vllm:prompt_tokens_total", NULL, NULL);
    double gen = counter_delta(a, b, "vllm:generation_tokens_total", NULL, NULL);
    m->v[DM_prompt_tokens_per_s] = ratio(prompt, win);
    m->v[DM_generation_tokens_per_s] = ratio(gen, win);
    m->v[DM_prompt_tokens_per_request] = ratio(counter_delta(a, b, "vllm:request_prompt_tokens_sum", NULL, NULL),
                                               counter_delta(a, b, "vllm:request_prompt_tokens_count", NULL, NULL));
    m->v[DM_generation_tokens_per_request] =
        ratio(counter_delta(a, b, "vllm:request_generation_tokens_sum", NULL, NULL),
              counter_delta(a, b, "vllm:request_generation_tokens_count", NULL, NULL));

    /* The API's requests (prometheus-fastapi-instrumentator's status groups), /v1 only. */
    double http = counter_delta(a, b, "http_requests_total", "handler", "/v1/*");
    if (!isnan(http)) {
        double h4 = 0, h5 = 0;
        for (int i = 0; i < b->n; i++) {
            const prom_sample_t *x = &b->samples[i];
            const char *h = prom_label(x, "handler"), *st = prom_label(x, "status");
            if (strcmp(x->name, "http_requests_total") || !h || !st || strncmp(h, "/v1/", 4)) continue;
            double before = 0;
            for (int k = 0; k < a->n; k++) { /* the same series in the first snapshot */
                const prom_sample_t *y = &a->samples[k];
                const char *hy = prom_label(y, "handler"), *sy = prom_label(y, "status"), *my = prom_label(y, "method");
                const char *mx = prom_label(x, "method");
                if (!strcmp(y->name, x->name) && hy && sy && !strcmp(hy, h) && !strcmp(sy, st) &&
                    (!mx || (my && !strcmp(mx, my))))
                    before = y->value;
            }
            double d = x->value >= before ? x->value - before : x->value;
            if (st[0] == '4') h4 += d;
            if (st[0] == '5') h5 += d;
        }
        m->v[DM_http_requests] = http;
        m->v[DM_http_4xx_share] = ratio(h4, http);
        m->v[DM_http_5xx_share] = ratio(h5, http);
        m->v[DM_http_error_share] = ratio(h4 + h5, http);
    }

    intervals(snaps, n, m);
    double cpu = counter_delta(a, b, "process_cpu_seconds_total", NULL, NULL);
    m->v[DM_cpu_seconds_per_s] = ratio(cpu, win);
    m->v[DM_cpu_ms_per_prompt_token] = ratio(1000 * cpu, prompt);

    if (extra && extra->oom_lines >= 0) {
        m->v[DM_log_oom_lines] = extra->oom_lines;
        m->v[DM_log_error_lines] = extra->error_lines;
        m->v[DM_log_preemption_lines] = extra->preemption_lines;
    }
    if (extra && extra->golden_prompts > 0) {
        m->v[DM_golden_prompts] = extra->golden_prompts;
        m->v[DM_golden_mismatches] = extra->golden_mismatches;
        m->v[DM_golden_unstable] = extra->golden_unstable;
        m->v[DM_golden_truncated] = extra->golden_truncated;
    }
}

/* ---- rules ------------------------------------------------------------------------- */

/* A rule's view: the run, the baseline (NULL without), and where it writes
 * the evidence it used. */
typedef struct {
    const diag_measures_t *m, *b;
    cJSON *ev;
} rule_ctx_t;

static double M(const rule_ctx_t *c, diag_measure_t k) { return c->m->v[k]; }
static double B(const rule_ctx_t *c, diag_measure_t k) { return c->b ? c->b->v[k] : NAN; }

/* Records measure k (and its baseline value) as evidence; returns it. */
static double ev(rule_ctx_t *c, diag_measure_t k) {
    double v = M(c, k);
    cJSON_AddItemToObject(c->ev, diag_measure_names[k], isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
    if (c->b) {
        char name[96];
        snprintf(name, sizeof name, "baseline_%s", diag_measure_names[k]);
        double bv = B(c, k);
        cJSON_AddItemToObject(c->ev, name, isfinite(bv) ? cJSON_CreateNumber(bv) : cJSON_CreateNull());
    }
    return v;
}

/* How many times its baseline measure k is now (recorded as "k_vs_baseline"). */
static double vs_base(rule_ctx_t *c, diag_measure_t k) {
    ev(c, k);
    double r = ratio(M(c, k), B(c, k));
    char name[96];
    snprintf(name, sizeof name, "%s_vs_baseline", diag_measure_names[k]);
    cJSON_AddItemToObject(c->ev, name, isfinite(r) ? cJSON_CreateNumber(r) : cJSON_CreateNull());
    return r;
}

/* Each rule returns its score: evidence over threshold, >= 1 when it fires,
 * 0 (or NAN) when it does not. */
typedef double (*rule_fn)(rule_ctx_t *c);

/* Requests are running or waiting but no token moves, interval after
 * interval: the API answers (vLLM's /health does while the engine process
 * lives), the engine does not (seed 004: "are workers healthy and admitting
 * requests?"). */
static double r_engine_stalled(rule_ctx_t *c) {
    ev(c, DM_running_max);
    ev(c, DM_waiting_max);
    ev(c, DM_stalled_s);
    double share = ev(c, DM_stalled_share);
    return share >= 0.8 ? share / 0.8 : 0;
}

/* The engine logged CUDA out-of-memory errors (needs --log; seed 000: OOM
 * during serving). */
static double r_oom(rule_ctx_t *c) {
    double lines = ev(c, DM_log_oom_lines);
    ev(c, DM_finished_error_share);
    return lines >= 1 ? 1 + lines / 10 : 0;
}

/* More than 5% of finished requests end with an engine error (servelab
 * counts finished_reason="error"; the log, when given, says which). */
static double r_engine_errors(rule_ctx_t *c) {
    ev(c, DM_requests_finished);
    ev(c, DM_log_error_lines);
    double share = ev(c, DM_finished_error_share);
    return share >= 0.05 ? share / 0.05 : 0;
}

/* Deterministic prompts no longer give the recorded answers (seed 002's
 * release-regression check: "compare golden prompts"). An answer that changes
 * from one replay to the next is nondeterministic_output's, not a change of
 * the model: only the stable mismatches count. */
static double r_output_regression(rule_ctx_t *c) {
    ev(c, DM_golden_prompts);
    double bad = ev(c, DM_golden_mismatches) - fmax(0, M(c, DM_golden_unstable));
    return bad >= 1 ? 1 + bad / fmax(1, M(c, DM_golden_prompts)) : 0;
}

/* The server saw fewer tokens of a golden prompt than the prompt has: it was
 * truncated, its start dropped (seed 000: "Truncation → prompt + max_tokens
 * exceeds context window; it silently drops the start"; vLLM does it to a
 * request with truncate_prompt_tokens, with no error and no log line). */
static double r_truncated(rule_ctx_t *c) {
    ev(c, DM_golden_prompts);
    ev(c, DM_golden_mismatches);
    double cut = ev(c, DM_golden_truncated);
    return cut >= 1 ? 1 + cut / fmax(1, M(c, DM_golden_prompts)) : 0;
}

/* The same prompt gives a different answer from one replay to the next (seed
 * 001: "Same prompt, different answer": sampling is stochastic). The replay
 * sends what the clients send (diagnose --golden-request); at temperature 0
 * servelab's CPU kernels answer alike alone or batched, so on the CPU this is
 * sampling. */
static double r_nondeterministic(rule_ctx_t *c) {
    ev(c, DM_golden_prompts);
    ev(c, DM_golden_mismatches);
    double unstable = ev(c, DM_golden_unstable);
    return unstable >= 1 ? 1 + unstable / fmax(1, M(c, DM_golden_prompts)) : 0;
}

/* More than 5% of the API's requests fail, and more than the baseline's
 * share by half again (seed 002's canary gate on error rate). */
static double r_http_errors(rule_ctx_t *c) {
    ev(c, DM_http_requests);
    ev(c, DM_http_4xx_share);
    ev(c, DM_http_5xx_share);
    double share = ev(c, DM_http_error_share), base = B(c, DM_http_error_share);
    if (!(M(c, DM_http_requests) >= 5) || !(share >= 0.05)) return 0;
    if (isfinite(base) && share < 1.5 * base) return 0;
    return share / 0.05;
}

/* How many times the baseline's tokens (prompt and output) a finished
 * request has now; 1 when either is unknown (a request's length did not
 * visibly change). */
static double tokens_per_request_vs_base(rule_ctx_t *c) {
    double now = ev(c, DM_prompt_tokens_per_request) + ev(c, DM_generation_tokens_per_request);
    double base = B(c, DM_prompt_tokens_per_request) + B(c, DM_generation_tokens_per_request);
    return isfinite(now) && isfinite(base) && now > 0 && base > 0 ? now / base : 1;
}

/* How many times the baseline's KV pool (in blocks) this one is; 1 when
 * either size is unknown. */
static double pool_vs_base(rule_ctx_t *c) {
    double now = ev(c, DM_kv_pool_blocks), base = B(c, DM_kv_pool_blocks);
    return isfinite(now) && isfinite(base) && now > 0 && base > 0 ? now / base : 1;
}

/* KV blocks stay allocated with nothing running or waiting (vLLM counts
 * cached-but-free blocks as free), or, against a baseline, each running
 * request holds twice the KV blocks it did for as many tokens (seed 003 case
 * 2: slow degradation). */
static double r_kv_leak(rule_ctx_t *c) {
    double idle = ev(c, DM_kv_usage_idle);
    if (idle >= 0.01) return idle / 0.01;
    if (!c->b) return 0;
    /* Blocks, not the usage fraction: a pool of another size (a wider --dtype or KV dtype,
     * another memory budget) moves the fraction a request holds without a leak. Per token:
     * longer prompts or outputs hold more KV without one either. */
    double r = vs_base(c, DM_kv_usage_per_running) * pool_vs_base(c) / tokens_per_request_vs_base(c);
    return r >= 2 ? r / 2 : 0;
}

/* The share of requests ending at max_tokens rose by 0.3, with outputs half
 * as long again (seed 000: "a missing stop token = never-ending output").
 * Against a baseline only: a benchmark with fixed output lengths ends every
 * request at max_tokens by design. */
static double r_runaway(rule_ctx_t *c) {
    double fin = ev(c, DM_requests_finished), share = ev(c, DM_finished_length_share);
    if (!(fin >= 3)) return 0;
    double rise = share - B(c, DM_finished_length_share);
    double longer = vs_base(c, DM_generation_tokens_per_request);
    return rise >= 0.3 && longer >= 1.5 ? rise / 0.3 : 0;
}

/* CPU time per prompt token tripled, and TTFT grew or the engine gets a
 * third fewer prompt tokens: the API process, not the engine, is the bottleneck (seed 003's CPU layer; seed 002's "CPU
 * bottleneck: tokenization"). The process must still be busy (at least half
 * its baseline CPU a second): when the engine slows for another reason the
 * process idles, and its fixed CPU spread over far fewer tokens would look
 * like costlier tokens (unknown counts as busy). And the engine's own prefill
 * must not account for it: where the engine computes in the API's process (a
 * CPU backend), prompt tokens the prefix cache no longer serves cost CPU too,
 * but they lengthen vllm:request_prefill_time_seconds, which work before the
 * engine does not. Nor its decoding: slower decode steps (float32 weights
 * where the baseline read 4-bit ones) cost CPU per prompt token too, and
 * lengthen the inter-token latency as much. */
static double r_tokenizer_bound(rule_ctx_t *c) {
    if (!c->b) return 0;
    double cpu = vs_base(c, DM_cpu_ms_per_prompt_token), ttft = vs_base(c, DM_ttft_mean);
    double fed = vs_base(c, DM_prompt_tokens_per_s), busy = vs_base(c, DM_cpu_seconds_per_s);
    double prefill = vs_base(c, DM_prefill_time_mean), itl = vs_base(c, DM_itl_mean);
    if (prefill >= 2 && prefill >= ttft / 1.5) return 0;
    if (itl >= 2 && itl >= cpu / 1.5) return 0;
    return cpu >= 3 && (ttft >= 1.5 || fed <= 2.0 / 3) && !(busy < 0.5) ? cpu / 3 : 0;
}

/* The first requests' TTFT (less queue time) is ten times the later ones'
 * median, and its excess is more than a whole typical request takes (median
 * end-to-end latency): a wait users notice, not the noise of a first scrape
 * (seed 000: "first request after load compiles/warms kernels"). */
static double r_cold_start(rule_ctx_t *c) {
    ev(c, DM_uptime_s);
    double r = ev(c, DM_first_ttft_ratio), first = ev(c, DM_first_ttft), e2e = ev(c, DM_e2e_p50);
    double excess = first - first / r;
    return r >= 10 && excess >= e2e ? r / 10 : 0;
}

/* Running requests are preempted more often than requests finish: at least 3
 * preemptions and one per finished request, so the engine recomputes more
 * sequences than it completes (seed 002: "cache preemptions: are prompt/
 * output/concurrency limits too high?"; seed 003: "mis-configurations cause
 * either OOM or excessive preemption"; seed 004: "total preemptions should be
 * 0"). Fewer say a full cache, which kv_pressure reads. */
static double r_preemption_storm(rule_ctx_t *c) {
    double n = ev(c, DM_preemptions), per = ev(c, DM_preemptions_per_request);
    ev(c, DM_log_preemption_lines);
    if (!(n >= 3)) return 0;
    return !(M(c, DM_requests_finished) > 0) ? n / 3 : per >= 1 ? per : 0;
}

/* The KV cache is over 90% full and requests wait (seed 004's queueing
 * check, on the fraction vLLM exports: 0.9, not 90). A preemption also says
 * the cache was full: the scheduler preempts only when no block is free, and
 * the blocks it frees are free at the next scrape, so preemptions keep the
 * sampled gauge just under a full cache. */
static double r_kv_pressure(rule_ctx_t *c) {
    double kv = ev(c, DM_kv_usage_max), wait = ev(c, DM_waiting_mean), pre = ev(c, DM_preemptions);
    return (kv >= KV_FULL || pre >= 1) && wait > 0 ? fmax(kv, KV_FULL) / KV_FULL : 0;
}

/* Requests wait and queue time is most of TTFT (seed 004: "system is full,
 * new requests wait for a slot"; seed 002: "is the delay queueing or
 * prefill?"). */
static double r_queueing(rule_ctx_t *c) {
    double wait = ev(c, DM_waiting_mean), share = ev(c, DM_queue_share_of_ttft);
    ev(c, DM_ttft_p50);
    return wait >= 1 && share >= 0.5 ? share / 0.5 : 0;
}

/* Fewer requests are in the engine than the clients have in flight (seed
 * 004's sanity check: the bottleneck is upstream). */
static double r_upstream(rule_ctx_t *c) {
    ev(c, DM_expected_inflight);
    double r = ev(c, DM_inflight_vs_expected);
    return r <= 0.5 ? 0.5 / fmax(r, 0.05) : 0; /* false for NAN: not given */
}

/* The prefix cache stopped hitting and TTFT grew (seed 000/002: "low prefix
 * hit rate: prefix caching not helping"). */
static double r_low_prefix_reuse(rule_ctx_t *c) {
    if (!c->b) return 0;
    double hit = ev(c, DM_prefix_hit_rate), base = B(c, DM_prefix_hit_rate), ttft = vs_base(c, DM_ttft_mean);
    return base >= 0.2 && hit <= base / 2 && ttft >= 1.2 ? base / fmax(hit, 0.01) / 2 : 0;
}

/* A latency grew by `factor` against the baseline in both its median and
 * its mean: the median is read from buckets (two values inside one bucket
 * interpolate alike), the mean is exact but moved by outliers; together they
 * say the bulk moved. Returns the smaller ratio. */
static double both_grew(rule_ctx_t *c, diag_measure_t p50, diag_measure_t mean) {
    double a = vs_base(c, p50), b = vs_base(c, mean);
    return fmin(a, b); /* NAN when either is unknown: no rule fires on it */
}

/* The inter-token latency's tail tripled while its median did not grow by
 * half: most steps are as fast as before and a few take far longer, as when
 * a long prompt's whole prefill runs in one step and every running request
 * waits for it (seed 000: "head-of-line blocking from a few huge requests";
 * seed 003: "missing chunked-prefill"). A slower engine moves the median too
 * (decode_bound), a larger batch moves it too (batch_knee). */
static double r_hol_blocking(rule_ctx_t *c) {
    if (!c->b) return 0;
    double p95 = vs_base(c, DM_itl_p95), p50 = vs_base(c, DM_itl_p50);
    ev(c, DM_prompt_tokens_per_request);
    ev(c, DM_ttft_p95);
    return p95 >= 3 && !(p50 >= 1.5) ? p95 / 3 : 0;
}

/* TTFT doubled without queueing, by at least a tenth of a request's whole
 * latency (a change users see), and not with decoding as slow: prefill got
 * heavier (seed 004: "waiting ~ 0 but TTFT high: compute-bound prefill").
 * Decoding may slow by half again, or more when TTFT grew four times as much:
 * long prompts also make each decode step attend over more context, while a
 * slower engine (decode_bound) slows both alike. */
static double r_prefill_bound(rule_ctx_t *c) {
    if (!c->b) return 0;
    double ttft = both_grew(c, DM_ttft_p50, DM_ttft_mean), itl = vs_base(c, DM_itl_mean);
    double q = ev(c, DM_queue_share_of_ttft);
    double grew = M(c, DM_ttft_mean) - B(c, DM_ttft_mean), e2e = B(c, DM_e2e_mean);
    ev(c, DM_e2e_mean);
    vs_base(c, DM_prompt_tokens_per_request);
    return ttft >= 2 && grew >= 0.1 * e2e && !(q >= 0.5) && !(itl >= 1.5 && itl > ttft / 4) ? ttft / 2 : 0;
}

/* ITL grew with a batch twice as large while the engine produces at least
 * as many tokens per second: more load bought throughput with latency, the
 * throughput/latency knee (seed 000, seed 004: "slow under load"). */
static double r_batch_knee(rule_ctx_t *c) {
    if (!c->b) return 0;
    double itl = both_grew(c, DM_itl_p50, DM_itl_mean), run = vs_base(c, DM_running_mean);
    double tps = vs_base(c, DM_generation_tokens_per_s);
    return itl >= 1.5 && run >= 2 && tps >= 1 ? itl / 1.5 : 0;
}

/* Speculation that does not pay: at least 50 draft tokens and under a quarter
 * of them kept, so each verification step computes K + 1 positions to keep
 * about one, and (against a baseline) the time per output token is no lower
 * than without it (seed 002: "speculative acceptance rate", "ineffective
 * speculation"). Per output token, not ITL: ITL is one gap per step, and a
 * step that emits several tokens takes longer while the request finishes
 * sooner. */
static double r_spec_waste(rule_ctx_t *c) {
    double drafted = ev(c, DM_spec_draft_tokens), rate = ev(c, DM_spec_acceptance_rate);
    ev(c, DM_itl_mean);
    if (!(drafted >= 50) || !(rate < 0.25)) return 0;
    if (c->b && vs_base(c, DM_tpot_mean) < 1) return 0;
    return 0.25 / fmax(rate, 0.01);
}

/* ITL doubled and the engine produces fewer tokens per second: every decode
 * step got slower, as on a throttled GPU or a downgraded PCIe link (seed 003
 * case 1; seed 000's "decode is bandwidth-bound"). Under a closed-loop load a
 * slower engine also holds more requests at once (Little's law), so the batch
 * size alone cannot tell this from the knee; the throughput can. */
static double r_decode_bound(rule_ctx_t *c) {
    if (!c->b) return 0;
    double itl = both_grew(c, DM_itl_p50, DM_itl_mean), tps = vs_base(c, DM_generation_tokens_per_s);
    vs_base(c, DM_running_mean);
    vs_base(c, DM_ttft_p50);
    return itl >= 2 && tps < 1 ? itl / 2 : 0;
}

typedef struct {
    const char *id, *summary;
    rule_fn fn;
    bool needs_baseline;
    const char *remedies[4];
} rule_t;

/* Most specific first: the order ranks causes that fire together. */
static const rule_t rules[] = {
    {"engine_stalled", "requests are running but the engine makes no progress", r_engine_stalled, false,
     {"The API answers /health while the engine is stuck: restart the engine process or worker (seed 004: are "
      "workers healthy and admitting requests?)",
      "Read the engine log around the stall for hangs: a dead worker, a stuck NCCL collective, GPU Xid errors"}},
    {"oom", "requests fail with CUDA out of memory", r_oom, false,
     {"It is the KV cache, not the weights: lower --max-model-len or --max-num-seqs, or quantize the KV cache "
      "(seed 000)",
      "Back --gpu-memory-utilization off to 0.85-0.90 to leave room for activation spikes (seed 000)",
      "Set a hard max output tokens so a runaway generation cannot grow KV unbounded (seed 000)"}},
    {"prompt_truncated", "prompts reach the model cut short: their start is dropped", r_truncated, false,
     {"Budget tokens: prompt + max_tokens must fit the context window, or the start goes silently (seed 000); "
      "compare usage.prompt_tokens with what the client sent",
      "Drop truncate_prompt_tokens (or raise it), or trim a long history from its middle, keeping the system "
      "prompt and the question",
      "If the prompts are meant to be that long, serve a longer --max-model-len"}},
    {"nondeterministic_output", "the same prompt gives a different answer each time: sampling", r_nondeterministic,
     false,
     {"Sampling is stochastic: send temperature 0 (greedy) in reproducibility tests, or a seed with the sampled "
      "settings (seed 001: \"Same prompt, different answer\")",
      "A request without temperature gets the server's default (1.0, or the generation config's): check what the "
      "client sends, not what it means to send",
      "At temperature 0 a GPU engine can still move a token with the batch's composition (float reduction order): "
      "small differences are expected, not a bug; servelab's CPU kernels answer alike alone or batched"}},
    {"output_regression", "deterministic prompts no longer give the recorded outputs", r_output_regression, false,
     {"Compare what changed: model revision, tokenizer, chat template, generation config, quantization (seed 002)",
      "Render the prompt text and token ids and test the same input in a reference runtime (seed 002)",
      "Roll back the changed artifact bundle and flags (seed 002)"}},
    {"http_errors", "a large share of API requests fail", r_http_errors, false,
     {"Split the errors by status: 429 rate limits, 401 keys, 400 request shape or context length, 404 model "
      "name, 5xx overload or crashes (seed 002: separate API from engine)",
      "If the errors started with a release, stop the canary and roll back (seed 002)"}},
    {"kv_leak", "KV-cache blocks stay allocated without requests to hold them", r_kv_leak, false,
     {"Restart the engine to get the blocks back; until the leak is fixed, schedule restarts (seed 003 case 2)",
      "Watch KV usage against running requests over days and report the leak with the engine version"}},
    {"runaway_generation", "requests run to max_tokens instead of stopping", r_runaway, true,
     {"Check EOS and stop tokens against the model card and generation_config.json (seed 000: a missing stop "
      "token means never-ending output)",
      "Set a hard max output tokens per request (seed 000)"}},
    {"tokenizer_bound", "CPU work on the request path (tokenization) limits the server", r_tokenizer_bound, true,
     {"Profile the API process (perf top -p PID) for tokenization, JSON or logging hot spots (seed 003)",
      "Check per-core CPU (mpstat -P ALL 1) and NUMA binding (seed 003)",
      "Move tokenization off the request path or add tokenizer workers"}},
    {"cold_start", "the first requests are far slower than the rest", r_cold_start, false,
     {"Warm up on boot: send warm-up requests before taking traffic (seed 000)",
      "Keep CUDA graphs and compiled kernels: do not serve with --enforce-eager for latency, and let startup "
      "warm-up run"}},
    {"preemption_storm", "running requests are preempted and recomputed more often than requests finish",
     r_preemption_storm, false,
     {"Lower --max-num-seqs or --max-model-len so running sequences fit the KV cache (seed 002)",
      "Give the KV cache more memory (--gpu-memory-utilization) (seed 003)"}},
    {"kv_pressure", "the KV cache is full and requests wait for it", r_kv_pressure, false,
     {"Give the KV cache more room: raise --gpu-memory-utilization or shrink --max-model-len (seed 000)",
      "Lower --max-num-seqs or cap output tokens so sequences fit (seed 002)",
      "Add VRAM, replicas or KV-cache quantization (seed 004)"}},
    {"engine_errors", "requests end with engine errors", r_engine_errors, false,
     {"Read the engine's ERROR lines for the failing requests (pass --log to see them here)",
      "If the errors follow long prompts or high concurrency, treat them as memory pressure (see oom)"}},
    {"queueing", "requests wait for a slot: queue time is most of TTFT", r_queueing, false,
     {"Add capacity: more replicas or GPUs (seed 004)",
      "Cap concurrency per replica or rate-limit at the gateway (seed 000)",
      "Use a smaller or quantized model to fit more sequences (seed 004)"}},
    {"upstream_bottleneck", "fewer requests reach the engine than clients have in flight", r_upstream, false,
     {"The bottleneck is before the engine: check the load balancer, gateway, RAG retrieval and network "
      "(seed 004 sanity check)",
      "Compare client-side and server-side latency for the same requests"}},
    {"low_prefix_reuse", "the prefix cache stopped helping", r_low_prefix_reuse, true,
     {"Enable prefix caching and keep shared system prompts byte-identical at the start (seed 000)",
      "Check routing: cache-aware routing must send a conversation to the replica holding its prefix (seed 004)"}},
    {"spec_decode_waste", "speculative drafts are mostly rejected: verification costs more than it saves",
     r_spec_waste, false,
     {"Turn speculation off for this traffic, or raise prompt_lookup_min so n-gram drafts need a longer match "
      "(seed 002: check the speculative acceptance rate)",
      "Speculate where outputs repeat their context (code edits, extraction, summaries) at low temperature; "
      "sampled creative text rejects most drafts"}},
    {"hol_blocking", "head-of-line blocking: a few long steps stall every running request", r_hol_blocking, true,
     {"Enable chunked prefill with a step budget (--max-num-batched-tokens) that bounds the prefill a step "
      "carries (seed 003: \"missing chunked-prefill\")",
      "Isolate long jobs on their own replicas and enforce max output tokens (seed 000)"}},
    {"prefill_bound", "prefill is slow: TTFT high without queueing", r_prefill_bound, true,
     {"Long prompts: enable chunked prefill and prefix caching (seed 000)",
      "Reduce prompt tokens or route long prompts to their own pool (seed 002)",
      "Add GPUs or replicas; consider prefill/decode disaggregation (seed 004)"}},
    {"batch_knee", "more load: a larger batch buys throughput with inter-token latency", r_batch_knee, true,
     {"Lower --max-num-seqs to meet the ITL objective (seed 000: the throughput/latency knee)",
      "Run more replicas to spread the load (seed 004)"}},
    {"decode_bound", "every decode step is slower: inter-token latency up, throughput down", r_decode_bound, true,
     {"Check the GPU: clocks and throttling (nvidia-smi -q -d PERFORMANCE), PCIe generation and width, ECC "
      "(seed 003 case 1)",
      "Cut per-token reads: 4-bit weights (AWQ/GPTQ), tensor parallelism over NVLink, speculative decoding "
      "(seed 000)"}},
};

static cJSON *string_array(const char *const *v, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n && v[i]; i++) cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
    return a;
}

cJSON *diag_rules(const diag_measures_t *m, const diag_measures_t *base, cJSON *skipped) {
    cJSON *out = cJSON_CreateArray();
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++) {
        const rule_t *r = &rules[i];
        if (r->needs_baseline && !base) {
            if (skipped) cJSON_AddItemToArray(skipped, cJSON_CreateString(r->id));
            continue;
        }
        rule_ctx_t c = {m, base, cJSON_CreateObject()};
        double score = r->fn(&c);
        if (!(score >= 1)) {
            cJSON_Delete(c.ev);
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "cause", r->id);
        cJSON_AddNumberToObject(o, "score", round(score * 100) / 100);
        cJSON_AddStringToObject(o, "summary", r->summary);
        cJSON_AddItemToObject(o, "evidence", c.ev);
        cJSON_AddItemToObject(o, "remedies", string_array(r->remedies, 4));
        cJSON_AddItemToArray(out, o);
    }
    return out;
}

bool diag_is_cause(const char *id) {
    if (!strcmp(id, "healthy")) return true;
    for (size_t i = 0; i < sizeof rules / sizeof rules[0]; i++)
        if (!strcmp(rules[i].id, id)) return true;
    return false;
}

int diag_measure_index(const char *name) {
    for (int i = 0; i < DIAG_N_MEASURES; i++)
        if (!strcmp(diag_measure_names[i], name)) return i;
    return -1;
}

static cJSON *measures_json(const diag_measures_t *m) {
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; i < DIAG_N_MEASURES; i++)
        cJSON_AddItemToObject(o, diag_measure_names[i], isfinite(m->v[i]) ? cJSON_CreateNumber(m->v[i]) : cJSON_CreateNull());
    return o;
}

cJSON *diag_report(const diag_measures_t *m, const diag_measures_t *base) {
    cJSON *skipped = cJSON_CreateArray();
    cJSON *ranked = diag_rules(m, base, skipped);
    cJSON *top = cJSON_GetArrayItem(ranked, 0);
    cJSON *r = cJSON_CreateObject();
    if (top) {
        cJSON_AddItemToObject(r, "cause", cJSON_Duplicate(cJSON_GetObjectItem(top, "cause"), 1));
        cJSON_AddItemToObject(r, "summary", cJSON_Duplicate(cJSON_GetObjectItem(top, "summary"), 1));
        cJSON_AddItemToObject(r, "evidence", cJSON_Duplicate(cJSON_GetObjectItem(top, "evidence"), 1));
        cJSON_AddItemToObject(r, "remedies", cJSON_Duplicate(cJSON_GetObjectItem(top, "remedies"), 1));
    } else {
        cJSON_AddStringToObject(r, "cause", "healthy");
        cJSON_AddStringToObject(r, "summary", "no playbook symptom in this window");
        cJSON_AddItemToObject(r, "evidence", cJSON_CreateObject());
        cJSON_AddItemToObject(r, "remedies", cJSON_CreateArray());
    }
    cJSON_AddItemToObject(r, "ranked", ranked);
    cJSON_AddItemToObject(r, "metrics", measures_json(m));
    cJSON_AddItemToObject(r, "baseline", base ? measures_json(base) : cJSON_CreateNull());
    cJSON_AddItemToObject(r, "skipped", skipped);
    return r;
}

int diag_measures_from_json(const cJSON *report, diag_measures_t *m, char *err, size_t err_len) {
    for (int i = 0; i < DIAG_N_MEASURES; i++) m->v[i] = NAN;
    const cJSON *mj = cJSON_GetObjectItemCaseSensitive(report, "metrics");
    if (!cJSON_IsObject(mj)) {
        snprintf(err, err_len, "no \"metrics\" object (expected a report of servelab diagnose --json)");
        return -1;
    }
    for (int i = 0; i < DIAG_N_MEASURES; i++) {
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(mj, diag_measure_names[i]);
        if (cJSON_IsNumber(x)) m->v[i] = x->valuedouble;
        else if (x && !cJSON_IsNull(x)) {
            snprintf(err, err_len, "metrics.%s: expected a number or null", diag_measure_names[i]);
            return -1;
        }
    }
    return 0;
}
