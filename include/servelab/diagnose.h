/* diagnose.h - `servelab diagnose`: what the serving playbooks split on, read
 * from vLLM's metrics, and the cause they point to (docs/lab.md).
 *
 * Three pure layers, unit-tested without a server:
 *   promtext   the Prometheus text exposition format -> samples (a parser of
 *              outside bytes: fuzz_promtext)
 *   measures   a series of snapshots of one server -> the numbers the
 *              playbooks read (histogram quantiles from deltas, gauge means,
 *              rates, shares), each by name in diag_measure_names
 *   rules      the measures (and a baseline's, when given) -> every cause whose
 *              evidence is present, ranked, with the playbooks' remedies
 * src/cli/diagnose.c does the I/O: scraping /metrics or querying a
 * Prometheus, the log tail, golden replays, the report and the collector.
 * Only vLLM's metric names are read, so the same checks run against vLLM.
 */
#ifndef SERVELAB_DIAGNOSE_H
#define SERVELAB_DIAGNOSE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>

/* ---- promtext ---------------------------------------------------------------------- */

typedef struct {
    char *key, *value;
} prom_label_t;

typedef struct {
    char *name;
    prom_label_t *labels;
    int n_labels;
    double value;
} prom_sample_t;

/* One scrape: its samples and when it was taken (seconds, any epoch shared by
 * the snapshots of one run). */
typedef struct {
    prom_sample_t *samples;
    int n, cap;
    double t;
} prom_snapshot_t;

/* Parses an exposition (text format 0.0.4; OpenMetrics' `# EOF` is accepted).
 * Comments and TYPE/HELP lines are skipped; values may be floats, +Inf, -Inf
 * or NaN; label values are unescaped. 0, or -1 with err naming the line. Samples
 * are appended to out (t is left alone). */
int prom_parse(const char *text, size_t len, prom_snapshot_t *out, char *err, size_t err_len);

/* Appends one sample (copies name and labels; labels given as key, value pairs). */
void prom_add(prom_snapshot_t *s, const char *name, const char *const *kv, int n_labels, double value);
void prom_snapshot_free(prom_snapshot_t *s);

/* The value of `name`'s label `key` in sample x, or NULL. */
const char *prom_label(const prom_sample_t *x, const char *key);

/* ---- measures ---------------------------------------------------------------------- */

/* The measures, in report order: one double each, NAN where the run has no
 * data for it. Times in seconds, shares in 0..1, rates per second. */
#define DIAG_MEASURES(X)                                                                              \
    X(window_s) X(samples) X(uptime_s)                                                                \
    X(requests_finished) X(finished_length_share) X(finished_abort_share) X(finished_error_share)     \
    X(ttft_p50) X(ttft_p95) X(ttft_mean) X(itl_p50) X(itl_p95) X(itl_mean) X(e2e_p50) X(e2e_p95) X(e2e_mean)      \
    X(tpot_p50) X(tpot_mean)                                                                          \
    X(queue_time_mean) X(queue_share_of_ttft) X(prefill_time_mean) X(first_ttft) X(first_ttft_ratio)                \
    X(waiting_mean) X(waiting_max) X(running_mean) X(running_max)                                     \
    X(inflight_mean) X(expected_inflight) X(inflight_vs_expected)                                     \
    X(kv_usage_mean) X(kv_usage_max) X(kv_usage_idle) X(kv_usage_per_running) X(kv_pool_blocks)     \
    X(kv_bound_share)                                                                                 \
    X(preemptions) X(preemptions_per_request) X(prefix_hit_rate)                                      \
    X(spec_draft_tokens) X(spec_acceptance_rate)                                                      \
    X(prompt_tokens_per_s) X(generation_tokens_per_s) X(prompt_tokens_per_request)                    \
    X(generation_tokens_per_request)                                                                  \
    X(http_requests) X(http_4xx_share) X(http_5xx_share) X(http_error_share)                          \
    X(stalled_share) X(stalled_s) X(cpu_seconds_per_s) X(cpu_ms_per_prompt_token)                    \
    X(log_oom_lines) X(log_error_lines) X(log_preemption_lines) X(golden_prompts) X(golden_mismatches)   \
    X(golden_unstable) X(golden_truncated)

typedef enum {
#define DIAG_ENUM(n) DM_##n,
    DIAG_MEASURES(DIAG_ENUM)
#undef DIAG_ENUM
    DIAG_N_MEASURES
} diag_measure_t;

extern const char *const diag_measure_names[DIAG_N_MEASURES];

typedef struct {
    double v[DIAG_N_MEASURES];
} diag_measures_t;

/* What the log tail said (--log) and the golden replay found (--golden);
 * negative counts: not read. Folded into the measures. */
typedef struct {
    int oom_lines, error_lines, preemption_lines;
    int golden_prompts, golden_mismatches;
    int golden_unstable;  /* of the mismatched prompts, those a second replay answered otherwise */
    int golden_truncated; /* prompts the server counted fewer tokens of than /tokenize */
} diag_extra_t;

/* Computes the measures from snaps[0..n) (n >= 2, in time order): counters
 * and histograms from the first and last snapshots' deltas, gauges from every
 * snapshot, per-interval series (stalls, the first requests' TTFT) from
 * consecutive ones. expected_inflight <= 0: not given. */
void diag_measure(const prom_snapshot_t *snaps, int n, double expected_inflight, const diag_extra_t *extra,
                  diag_measures_t *out);

/* ---- rules ------------------------------------------------------------------------- */

/* Every cause whose evidence is present, most specific first: a JSON array of
 * {"cause", "score", "summary", "evidence": {...}, "remedies": [...]}. base may
 * be NULL (no baseline: the rules that compare with one are skipped, and say
 * so in skipped, a JSON array of cause ids, when skipped is not NULL). */
cJSON *diag_rules(const diag_measures_t *m, const diag_measures_t *base, cJSON *skipped);

/* The report --json prints: {"cause", "summary", "evidence", "remedies",
 * "ranked", "metrics", "baseline", "skipped"}; cause "healthy" when nothing fired.
 * Takes ownership of nothing. */
cJSON *diag_report(const diag_measures_t *m, const diag_measures_t *base);

/* Whether id is a cause the rules can name, or "healthy". */
bool diag_is_cause(const char *id);
/* The index of measure `name` (diag_measure_names), or -1. */
int diag_measure_index(const char *name);

/* Reads the "metrics" object of an earlier report into *m (missing or null
 * names stay NAN). 0, or -1 with err. */
int diag_measures_from_json(const cJSON *report, diag_measures_t *m, char *err, size_t err_len);

#endif
