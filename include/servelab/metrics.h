/* metrics.h - a thread-safe Prometheus registry whose /metrics output is byte
 * for byte what Python's prometheus_client (<= 0.22, the library vLLM uses)
 * prints for the same metrics: text format 0.0.4 and OpenMetrics 1.0.0,
 * `_total` / `_created` munging, sorted labels, Go-style float strings.
 *
 * Writers (metric_inc/set/observe) take one registry mutex for a few adds;
 * a scrape holds it only to copy the values (metrics_render). Families and
 * children are never removed before metrics_free, so the pointers returned
 * here stay valid for the registry's lifetime: look a child up once and keep it.
 */
#ifndef SERVELAB_METRICS_H
#define SERVELAB_METRICS_H

#include <stdbool.h>
#include <stddef.h>

typedef enum { METRIC_COUNTER, METRIC_GAUGE, METRIC_HISTOGRAM, METRIC_SUMMARY } metric_type_t;
enum { METRIC_NO_CREATED = 1 }; /* family flag: no _created samples (process_cpu_seconds_total) */
typedef struct metrics metrics_t;             /* a registry */
typedef struct metric_family metric_family_t; /* one name, help, type, label names */
typedef struct metric metric_t;               /* one labelled child (series) */

/* A new, empty registry. Free with metrics_free, after every writer has stopped. */
metrics_t *metrics_new(void);
void metrics_free(metrics_t *m);

/* Registers a family. name: as given to prometheus_client (a counter's trailing
 * "_total" is stripped to form the base name, as prometheus_client does;
 * exposition adds it back). label_names may be NULL when n_labels == 0.
 * buckets: histogram upper bounds, ascending, without +Inf (added); ignored for
 * other types. Strings and arrays are copied. Families are exposed in
 * registration order; children in creation order. A family without labels gets
 * its one child at once (value 0, _created = now), as a prometheus_client metric
 * without labels does. Invalid names, a label "le" on a histogram, unsorted
 * buckets, or a base name already registered are bugs (SL_ASSERT). */
metric_family_t *metrics_add(metrics_t *m, const char *name, const char *help, metric_type_t type,
                             int n_labels, const char *const *label_names,
                             const double *buckets, int n_buckets, unsigned flags);

/* The child with these label values (same order as label_names), created on
 * first use with _created = now (wall clock, unix seconds) and value 0; later
 * calls return the same pointer. label_values is NULL when n_labels == 0.
 * Takes the registry lock; a linear search, so keep the pointer on hot paths. */
metric_t *metric_child(metric_family_t *f, const char *const *label_values);

void metric_inc(metric_t *c, double v);     /* counter (v >= 0, asserted) or gauge */
void metric_set(metric_t *c, double v);     /* gauge; also a counter, for collectors */
void metric_observe(metric_t *c, double v); /* histogram (bucket: first bound with v <= bound) or summary */

/* The same three under a lock the caller already holds (metrics_lock), for a
 * batch of updates in one acquisition. Every child must belong to that registry. */
void metrics_lock(metrics_t *m);
void metrics_unlock(metrics_t *m);
void metric_inc_locked(metric_t *c, double v);
void metric_set_locked(metric_t *c, double v);
void metric_observe_locked(metric_t *c, double v);

/* Readers (tests, the stats logger); each takes the lock. metric_value: a
 * counter's or gauge's value. metric_hist: count and sum of a histogram or
 * summary (either pointer may be NULL), and for a histogram the cumulative
 * bucket counts (n_buckets + 1 entries, the last is +Inf) when `cum` is not
 * NULL (cum must be NULL for a summary). */
double metric_value(metric_t *c);
void metric_hist(metric_t *c, double *count, double *sum, double *cum);

/* Exposition: refreshes the collectors, takes the lock only to copy the values
 * (one memcpy plus each family's child count), then formats without it, so a
 * scrape never blocks writers for longer than a copy. openmetrics: OpenMetrics
 * 1.0.0 (with "# EOF"), else text 0.0.4. Returns a malloc'd, NUL-terminated
 * buffer (caller frees); *len (may be NULL) gets its length. */
char *metrics_render(metrics_t *m, bool openmetrics, size_t *len);

/* prometheus_client.exposition.choose_encoder (<= 0.22): true when any
 * comma-separated entry of the Accept header has media type
 * application/openmetrics-text (parameters such as version and q ignored).
 * NULL -> false. */
bool metrics_accept_openmetrics(const char *accept);
#define METRICS_CONTENT_TYPE_TEXT "text/plain; version=0.0.4; charset=utf-8"
#define METRICS_CONTENT_TYPE_OPENMETRICS "application/openmetrics-text; version=1.0.0; charset=utf-8"

/* Registers prometheus_client's ProcessCollector families, in its order:
 * process_virtual_memory_bytes, process_resident_memory_bytes,
 * process_start_time_seconds, process_cpu_seconds_total (counter, no _created),
 * process_open_fds, process_max_fds, with its HELP strings; their values are
 * read from /proc/self at each metrics_render (a failed read keeps the last
 * values). Call at most once per registry, before the first metrics_render. */
void metrics_add_process_collector(metrics_t *m);

/* Tests only: children created after this call (including a labelless
 * family's child, made by metrics_add) get _created = unix_seconds instead of
 * the wall clock, so output is reproducible. unix_seconds <= 0 goes back to
 * the wall clock. */
void metrics_set_clock_for_tests(metrics_t *m, double unix_seconds);

#endif
