/* metrics.c - a Prometheus registry that prints what prometheus_client prints.
 *
 * Every number of every series lives in one growable double array owned by the
 * registry (a child records its offset), so a scrape copies all values with one
 * memcpy under the lock and formats from the copy. Metadata (families, children,
 * label strings) is allocated once and never moves or changes, except the
 * append-only child lists, whose lengths a scrape records under the lock.
 * Matched from prometheus_client 0.22: floatToGoString (Python repr, Go-style
 * "1.234567e+06" / "1e+015" above 1e6, written "e+0" + exponent as it does),
 * labels sorted by name with "le" among them, a counter's "_total" stripped at
 * registration and added back, text format's _created samples moved into a
 * trailing "<base>_created" gauge family, a histogram's _sum dropped when its
 * first bound is negative, and ProcessCollector's reads of /proc.
 */
#define _POSIX_C_SOURCE 200809L
#include "servelab/metrics.h"

#include <dirent.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "servelab/core.h"

struct metric {
    metric_family_t *f;
    size_t off;           /* first of f->n_slots values in the registry's array */
    char **label_values;  /* (n_labels) */
    metric_t *next;       /* written once, under the lock, when the next child is appended */
};

/* Value slots per child, from `off`:
 *   counter [value, created]     gauge [value]
 *   histogram [bucket_0 .. bucket_nb (non-cumulative, last = +Inf), sum, created]
 *   summary [count, sum, created] */
struct metric_family {
    metrics_t *m;
    char *name; /* base name: a counter's without "_total" */
    char *help;
    metric_type_t type;
    unsigned flags;
    int n_labels;
    char **label_names; /* (n_labels) */
    int n_buckets;      /* without +Inf */
    double *buckets;    /* (n_buckets) */
    char **le;          /* (n_buckets + 1) bounds as floatToGoString, last "+Inf" */
    int n_sorted;       /* n_labels, + 1 ("le") for a histogram */
    int *label_order;   /* (n_sorted) label indices sorted by name; n_labels = "le" */
    int n_slots;
    int created_slot;   /* -1 for a gauge */
    metric_t *head, *tail;
    int64_t n_children; /* under the lock */
    metric_family_t *next;
};

enum { PROC_VMEM, PROC_RSS, PROC_START, PROC_CPU, PROC_OPEN_FDS, PROC_MAX_FDS, PROC_N };

struct metrics {
    pthread_mutex_t lock;
    double *values; /* (n_values) every slot of every child */
    size_t n_values, cap_values;
    metric_family_t *head, *tail;
    int64_t n_families;
    double test_clock_s;       /* > 0: _created for new children (tests) */
    metric_t *proc[PROC_N];    /* the process collector's children, or NULL */
    double proc_btime_s, proc_ticks, proc_pagesize;
};

/* ---- registry and children --------------------------------------------------- */

metrics_t *metrics_new(void) {
    metrics_t *m = sl_calloc(1, sizeof *m);
    SL_ASSERT(pthread_mutex_init(&m->lock, NULL) == 0);
    return m;
}

static void free_strings(char **s, int n) {
    if (!s) return;
    for (int i = 0; i < n; i++) free(s[i]);
    free(s);
}

void metrics_free(metrics_t *m) {
    if (!m) return;
    for (metric_family_t *f = m->head, *fn; f; f = fn) {
        fn = f->next;
        for (metric_t *c = f->head, *cn; c; c = cn) {
            cn = c->next;
            free_strings(c->label_values, f->n_labels);
            free(c);
        }
        free(f->name);
        free(f->help);
        free_strings(f->label_names, f->n_labels);
        free(f->buckets);
        free_strings(f->le, f->n_buckets + 1);
        free(f->label_order);
        free(f);
    }
    pthread_mutex_destroy(&m->lock);
    free(m->values);
    free(m);
}

void metrics_lock(metrics_t *m) { SL_ASSERT(pthread_mutex_lock(&m->lock) == 0); }
void metrics_unlock(metrics_t *m) { SL_ASSERT(pthread_mutex_unlock(&m->lock) == 0); }

void metrics_set_clock_for_tests(metrics_t *m, double unix_seconds) {
    metrics_lock(m);
    m->test_clock_s = unix_seconds;
    metrics_unlock(m);
}

static double wall_clock_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* prometheus_client's legacy name rules: metric [a-zA-Z_:][a-zA-Z0-9_:]*,
 * label [a-zA-Z_][a-zA-Z0-9_]* and not starting with "__". */
static bool is_valid_name(const char *s, bool colon) {
    if (!s || !*s) return false;
    for (const char *p = s; *p; p++) {
        char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' ||
                  (colon && ch == ':') || (p > s && ch >= '0' && ch <= '9');
        if (!ok) return false;
    }
    return colon || strncmp(s, "__", 2) != 0;
}

static void go_float(double d, char *out, size_t cap);

/* Caller holds the lock. Appends a child with these (already copied) labels. */
static metric_t *append_child_locked(metric_family_t *f, char **label_values) {
    metrics_t *m = f->m;
    if (m->n_values + (size_t)f->n_slots > m->cap_values) {
        size_t cap = m->cap_values ? m->cap_values * 2 : 256;
        while (cap < m->n_values + (size_t)f->n_slots) cap *= 2;
        m->values = sl_realloc(m->values, cap * sizeof *m->values);
        m->cap_values = cap;
    }
    metric_t *c = sl_calloc(1, sizeof *c);
    c->f = f;
    c->off = m->n_values;
    c->label_values = label_values;
    memset(m->values + c->off, 0, (size_t)f->n_slots * sizeof *m->values);
    if (f->created_slot >= 0)
        m->values[c->off + (size_t)f->created_slot] = m->test_clock_s > 0 ? m->test_clock_s : wall_clock_s();
    m->n_values += (size_t)f->n_slots;
    if (f->tail) f->tail->next = c;
    else f->head = c;
    f->tail = c;
    f->n_children++;
    return c;
}

static const char *label_name_at(const metric_family_t *f, int i) {
    return i == f->n_labels ? "le" : f->label_names[i];
}

metric_family_t *metrics_add(metrics_t *m, const char *name, const char *help, metric_type_t type,
                             int n_labels, const char *const *label_names,
                             const double *buckets, int n_buckets, unsigned flags) {
    SL_ASSERT(m && is_valid_name(name, true) && help && n_labels >= 0);
    SL_ASSERT(n_labels == 0 || label_names);
    metric_family_t *f = sl_calloc(1, sizeof *f);
    f->m = m;
    f->type = type;
    f->flags = flags;
    size_t n = strlen(name);
    if (type == METRIC_COUNTER && n > 6 && strcmp(name + n - 6, "_total") == 0) n -= 6;
    f->name = sl_malloc(n + 1);
    memcpy(f->name, name, n);
    f->name[n] = '\0';
    f->help = sl_strdup(help);
    f->n_labels = n_labels;
    if (n_labels) f->label_names = sl_calloc((size_t)n_labels, sizeof *f->label_names);
    for (int i = 0; i < n_labels; i++) {
        SL_ASSERT(is_valid_name(label_names[i], false));
        SL_ASSERT(type != METRIC_HISTOGRAM || strcmp(label_names[i], "le") != 0);
        for (int j = 0; j < i; j++) SL_ASSERT(strcmp(label_names[i], label_names[j]) != 0);
        f->label_names[i] = sl_strdup(label_names[i]);
    }
    if (type == METRIC_HISTOGRAM) {
        /* As prometheus_client: a trailing +Inf may be given; it is added if not. */
        if (n_buckets > 0 && buckets[n_buckets - 1] == INFINITY) n_buckets--;
        SL_ASSERT(n_buckets >= 1 && buckets);
        f->n_buckets = n_buckets;
        f->buckets = sl_malloc((size_t)n_buckets * sizeof *f->buckets);
        f->le = sl_calloc((size_t)n_buckets + 1, sizeof *f->le);
        for (int i = 0; i < n_buckets; i++) {
            SL_ASSERT(!isnan(buckets[i]) && (i == 0 || buckets[i - 1] <= buckets[i]));
            f->buckets[i] = buckets[i];
            char s[64];
            go_float(buckets[i], s, sizeof s);
            f->le[i] = sl_strdup(s);
        }
        f->le[n_buckets] = sl_strdup("+Inf");
    }
    f->n_sorted = n_labels + (type == METRIC_HISTOGRAM);
    f->label_order = sl_malloc(((size_t)f->n_sorted + 1) * sizeof *f->label_order);
    for (int i = 0; i < f->n_sorted; i++) { /* insertion sort: a handful of labels */
        int j = i;
        for (; j > 0 && strcmp(label_name_at(f, f->label_order[j - 1]), label_name_at(f, i)) > 0; j--)
            f->label_order[j] = f->label_order[j - 1];
        f->label_order[j] = i;
    }
    switch (type) {
    case METRIC_COUNTER: f->n_slots = 2; f->created_slot = 1; break;
    case METRIC_GAUGE: f->n_slots = 1; f->created_slot = -1; break;
    case METRIC_HISTOGRAM: f->n_slots = n_buckets + 3; f->created_slot = n_buckets + 2; break;
    case METRIC_SUMMARY: f->n_slots = 3; f->created_slot = 2; break;
    default: SL_ASSERT(!"unknown metric type");
    }
    metrics_lock(m);
    for (metric_family_t *g = m->head; g; g = g->next) SL_ASSERT(strcmp(g->name, f->name) != 0);
    if (m->tail) m->tail->next = f;
    else m->head = f;
    m->tail = f;
    m->n_families++;
    /* A prometheus_client metric without labels is its own child, from construction. */
    if (n_labels == 0) append_child_locked(f, NULL);
    metrics_unlock(m);
    return f;
}

metric_t *metric_child(metric_family_t *f, const char *const *label_values) {
    SL_ASSERT(f && (f->n_labels == 0 || label_values));
    metrics_lock(f->m);
    metric_t *c = f->head;
    for (; c; c = c->next) {
        int i = 0;
        while (i < f->n_labels && strcmp(c->label_values[i], label_values[i]) == 0) i++;
        if (i == f->n_labels) break;
    }
    if (!c) {
        char **values = NULL;
        if (f->n_labels) values = sl_calloc((size_t)f->n_labels, sizeof *values);
        for (int i = 0; i < f->n_labels; i++) values[i] = sl_strdup(label_values[i]);
        c = append_child_locked(f, values);
    }
    metrics_unlock(f->m);
    return c;
}

/* ---- updates and readers ------------------------------------------------------ */

static double *slots(metric_t *c) { return c->f->m->values + c->off; }

void metric_inc_locked(metric_t *c, double v) {
    SL_ASSERT(c->f->type == METRIC_COUNTER || c->f->type == METRIC_GAUGE);
    SL_ASSERT(c->f->type != METRIC_COUNTER || !(v < 0)); /* prometheus_client raises ValueError */
    slots(c)[0] += v;
}

void metric_set_locked(metric_t *c, double v) {
    SL_ASSERT(c->f->type == METRIC_COUNTER || c->f->type == METRIC_GAUGE);
    slots(c)[0] = v;
}

void metric_observe_locked(metric_t *c, double v) {
    const metric_family_t *f = c->f;
    double *x = slots(c);
    if (f->type == METRIC_SUMMARY) {
        x[0] += 1;
        x[1] += v;
        return;
    }
    SL_ASSERT(f->type == METRIC_HISTOGRAM);
    int nb = f->n_buckets;
    x[nb + 1] += v;
    /* The first bound with v <= bound, as prometheus_client; NaN lands nowhere. */
    for (int i = 0; i < nb; i++)
        if (v <= f->buckets[i]) {
            x[i] += 1;
            return;
        }
    if (v <= INFINITY) x[nb] += 1;
}

void metric_inc(metric_t *c, double v) {
    metrics_lock(c->f->m);
    metric_inc_locked(c, v);
    metrics_unlock(c->f->m);
}

void metric_set(metric_t *c, double v) {
    metrics_lock(c->f->m);
    metric_set_locked(c, v);
    metrics_unlock(c->f->m);
}

void metric_observe(metric_t *c, double v) {
    metrics_lock(c->f->m);
    metric_observe_locked(c, v);
    metrics_unlock(c->f->m);
}

double metric_value(metric_t *c) {
    SL_ASSERT(c->f->type == METRIC_COUNTER || c->f->type == METRIC_GAUGE);
    metrics_lock(c->f->m);
    double v = slots(c)[0];
    metrics_unlock(c->f->m);
    return v;
}

void metric_hist(metric_t *c, double *count, double *sum, double *cum) {
    const metric_family_t *f = c->f;
    SL_ASSERT(f->type == METRIC_HISTOGRAM || (f->type == METRIC_SUMMARY && !cum));
    metrics_lock(f->m);
    const double *x = slots(c);
    if (f->type == METRIC_SUMMARY) {
        if (count) *count = x[0];
        if (sum) *sum = x[1];
    } else {
        double acc = 0;
        for (int i = 0; i <= f->n_buckets; i++) {
            acc += x[i];
            if (cum) cum[i] = acc;
        }
        if (count) *count = acc;
        if (sum) *sum = x[f->n_buckets + 1];
    }
    metrics_unlock(f->m);
}

/* ---- formatting ------------------------------------------------------------------ */

/* prometheus_client.utils.floatToGoString (0.22). `out` holds 64 bytes. */
static void go_float(double d, char *out, size_t cap) {
    if (isnan(d)) {
        snprintf(out, cap, "NaN");
        return;
    }
    if (isinf(d)) {
        snprintf(out, cap, d > 0 ? "+Inf" : "-Inf");
        return;
    }
    char s[40];
    sl_format_py_float(d, 0, s, sizeof s);
    const char *dot = strchr(s, '.');
    int idot = dot ? (int)(dot - s) : -1;
    if (!(d > 0 && idot > 6)) {
        snprintf(out, cap, "%s", s);
        return;
    }
    /* Go switches to exponents sooner: s[0] "." s[1:dot] s[dot+1:], then
     * .rstrip('0.'), then "e+0" + str(dot - 1) (sic: 1e15 -> "1e+015"). */
    char mant[44]; /* s has < 40 chars */
    size_t n = 0;
    mant[n++] = s[0];
    mant[n++] = '.';
    for (int i = 1; i < idot; i++) mant[n++] = s[i];
    for (const char *p = dot + 1; *p; p++) mant[n++] = *p;
    while (n > 0 && (mant[n - 1] == '0' || mant[n - 1] == '.')) n--;
    mant[n] = '\0';
    snprintf(out, cap, "%se+0%d", mant, idot - 1);
}

typedef struct {
    char *p;
    size_t len, cap;
} sbuf_t;

static void sb_put(sbuf_t *b, const char *s, size_t n) {
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->len + n + 1) cap *= 2;
        b->p = sl_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void sb_puts(sbuf_t *b, const char *s) { sb_put(b, s, strlen(s)); }

/* Backslash and newline always; the double quote in label values and in
 * OpenMetrics HELP text (text-format HELP leaves it as is). */
static void sb_escaped(sbuf_t *b, const char *s, bool quote) {
    for (const char *run = s;; s++) {
        const char *rep = *s == '\\' ? "\\\\" : *s == '\n' ? "\\n" : (quote && *s == '"') ? "\\\"" : NULL;
        if (!rep && *s) continue;
        sb_put(b, run, (size_t)(s - run));
        if (!*s) return;
        sb_puts(b, rep);
        run = s + 1;
    }
}

static void put_header(sbuf_t *b, const metric_family_t *f, const char *suffix, const char *type, bool om) {
    sb_puts(b, "# HELP ");
    sb_puts(b, f->name);
    sb_puts(b, suffix);
    sb_puts(b, " ");
    sb_escaped(b, f->help, om);
    sb_puts(b, "\n# TYPE ");
    sb_puts(b, f->name);
    sb_puts(b, suffix);
    sb_puts(b, " ");
    sb_puts(b, type);
    sb_puts(b, "\n");
}

/* `name+suffix{labels sorted, le among them when given} value\n` */
static void put_sample(sbuf_t *b, const metric_family_t *f, const metric_t *c, const char *suffix,
                       const char *le, double v) {
    sb_puts(b, f->name);
    sb_puts(b, suffix);
    bool first = true;
    for (int k = 0; k < f->n_sorted; k++) {
        int i = f->label_order[k];
        if (i == f->n_labels && !le) continue;
        sb_puts(b, first ? "{" : ",");
        first = false;
        sb_puts(b, label_name_at(f, i));
        sb_puts(b, "=\"");
        sb_escaped(b, i == f->n_labels ? le : c->label_values[i], true);
        sb_puts(b, "\"");
    }
    if (!first) sb_puts(b, "}");
    char num[64];
    go_float(v, num, sizeof num);
    sb_puts(b, " ");
    sb_puts(b, num);
    sb_puts(b, "\n");
}

/* One child's samples except _created, in prometheus_client's order. */
static void put_child(sbuf_t *b, const metric_family_t *f, const metric_t *c, const double *x) {
    switch (f->type) {
    case METRIC_COUNTER: put_sample(b, f, c, "_total", NULL, x[0]); break;
    case METRIC_GAUGE: put_sample(b, f, c, "", NULL, x[0]); break;
    case METRIC_SUMMARY:
        put_sample(b, f, c, "_count", NULL, x[0]);
        put_sample(b, f, c, "_sum", NULL, x[1]);
        break;
    case METRIC_HISTOGRAM: {
        double acc = 0;
        for (int i = 0; i <= f->n_buckets; i++) {
            acc += x[i];
            put_sample(b, f, c, "_bucket", f->le[i], acc);
        }
        put_sample(b, f, c, "_count", NULL, acc);
        if (f->buckets[0] >= 0) put_sample(b, f, c, "_sum", NULL, x[f->n_buckets + 1]);
        break;
    }
    }
}

static const char *type_name(metric_type_t t) {
    return t == METRIC_COUNTER ? "counter"
           : t == METRIC_GAUGE ? "gauge"
           : t == METRIC_HISTOGRAM ? "histogram"
                                   : "summary";
}

/* `vals` is the copied value array; `n_children` what the family had then. */
static void put_family(sbuf_t *b, const metric_family_t *f, int64_t n_children, const double *vals, bool om) {
    bool created = f->created_slot >= 0 && !(f->flags & METRIC_NO_CREATED);
    put_header(b, f, !om && f->type == METRIC_COUNTER ? "_total" : "", type_name(f->type), om);
    /* Children [0, n_children) were linked before the copy; a writer may be
     * setting f->head (when 0) or the last one's `next` now, so neither is read. */
    const metric_t *c = NULL;
    for (int64_t i = 0; i < n_children; i++) {
        c = i > 0 ? c->next : f->head;
        const double *x = vals + c->off;
        put_child(b, f, c, x);
        if (om && created) put_sample(b, f, c, "_created", NULL, x[f->created_slot]);
    }
    if (om || !created || n_children == 0) return;
    /* Text format: prometheus_client moves OpenMetrics-only samples into a gauge family. */
    put_header(b, f, "_created", "gauge", false);
    for (int64_t i = 0; i < n_children; i++) {
        c = i > 0 ? c->next : f->head;
        put_sample(b, f, c, "_created", NULL, vals[c->off + (size_t)f->created_slot]);
    }
}

typedef struct {
    bool ok_stat, ok_fds;
    double v[PROC_N];
} proc_sample_t;

static void proc_read(const metrics_t *m, proc_sample_t *s);

char *metrics_render(metrics_t *m, bool openmetrics, size_t *len) {
    proc_sample_t ps = {0};
    if (m->proc[0]) proc_read(m, &ps); /* proc[] is set once, before any render */

    metrics_lock(m);
    if (ps.ok_stat)
        for (int i = PROC_VMEM; i <= PROC_CPU; i++) metric_set_locked(m->proc[i], ps.v[i]);
    if (ps.ok_fds)
        for (int i = PROC_OPEN_FDS; i <= PROC_MAX_FDS; i++) metric_set_locked(m->proc[i], ps.v[i]);
    size_t n_values = m->n_values;
    double *vals = sl_malloc((n_values ? n_values : 1) * sizeof *vals);
    if (n_values) memcpy(vals, m->values, n_values * sizeof *vals);
    int64_t n_families = m->n_families;
    int64_t *n_children = sl_malloc(((size_t)n_families + 1) * sizeof *n_children);
    const metric_family_t *f = m->head;
    for (int64_t i = 0; i < n_families; i++, f = f->next) n_children[i] = f->n_children;  /* under the lock */
    const metric_family_t *first = m->head;
    metrics_unlock(m);

    sbuf_t b = {0};
    sb_put(&b, "", 0);
    f = first;
    for (int64_t i = 0; i < n_families; i++) {
        if (i > 0) f = f->next;
        put_family(&b, f, n_children[i], vals, openmetrics);
    }
    if (openmetrics) sb_puts(&b, "# EOF\n");
    free(vals);
    free(n_children);
    if (len) *len = b.len;
    return b.p;
}

/* ---- content negotiation ----------------------------------------------------- */

static bool is_py_space(char ch) { /* Python str.strip() on ASCII */
    return ch == ' ' || (ch >= '\t' && ch <= '\r') || (ch >= 0x1c && ch <= 0x1f);
}

bool metrics_accept_openmetrics(const char *accept) {
    static const char want[] = "application/openmetrics-text";
    if (!accept) return false;
    for (const char *p = accept;;) {
        const char *end = strchr(p, ',');
        if (!end) end = p + strlen(p);
        const char *semi = memchr(p, ';', (size_t)(end - p));
        const char *a = p, *z = semi ? semi : end;
        while (a < z && is_py_space(*a)) a++;
        while (z > a && is_py_space(z[-1])) z--;
        if ((size_t)(z - a) == sizeof want - 1 && memcmp(a, want, sizeof want - 1) == 0) return true;
        if (!*end) return false;
        p = end + 1;
    }
}

/* ---- process collector (prometheus_client/process_collector.py) ----------------- */

/* /proc/stat's btime, as ProcessCollector._boot_time; 0 when unreadable. */
static double proc_boot_time(void) {
    FILE *fp = fopen("/proc/stat", "r");
    if (!fp) return 0;
    char line[512];
    double btime = 0;
    while (fgets(line, sizeof line, fp))
        if (strncmp(line, "btime ", 6) == 0) {
            btime = strtod(line + 6, NULL);
            break;
        }
    fclose(fp);
    return btime;
}

/* Reads /proc/self outside the lock, with prometheus_client's arithmetic
 * (same operations in the same order, so the same doubles). */
static void proc_read(const metrics_t *m, proc_sample_t *s) {
    char buf[4096];
    FILE *fp = fopen("/proc/self/stat", "r");
    if (fp) {
        size_t n = fread(buf, 1, sizeof buf - 1, fp);
        fclose(fp);
        buf[n] = '\0';
        /* Fields after the last ')' (the command name may hold anything):
         * parts[0] is the state, so parts[i] is stat field i + 3. */
        char *p = strrchr(buf, ')');
        double parts[22];
        int n_parts = 0;
        if (p) {
            p++;
            char *tok, *save = NULL;
            for (tok = strtok_r(p, " \n", &save); tok && n_parts < 22; tok = strtok_r(NULL, " \n", &save))
                parts[n_parts++] = strtod(tok, NULL); /* parts[0], the state letter, reads as 0 */
        }
        if (n_parts == 22) {
            s->ok_stat = true;
            s->v[PROC_VMEM] = parts[20];
            s->v[PROC_RSS] = parts[21] * m->proc_pagesize;
            s->v[PROC_START] = parts[19] / m->proc_ticks + m->proc_btime_s;
            s->v[PROC_CPU] = parts[11] / m->proc_ticks + parts[12] / m->proc_ticks;
        }
    }
    struct rlimit rl;
    DIR *d = opendir("/proc/self/fd");
    if (d && getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        /* os.listdir counts its own descriptor; so does this one. */
        int64_t n_fds = 0;
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) n_fds++;
        s->ok_fds = true;
        s->v[PROC_OPEN_FDS] = (double)n_fds;
        s->v[PROC_MAX_FDS] = (double)rl.rlim_cur;
    }
    if (d) closedir(d);
}

void metrics_add_process_collector(metrics_t *m) {
    SL_ASSERT(!m->proc[0]);
    static const struct {
        const char *name, *help;
        metric_type_t type;
        unsigned flags;
    } fams[PROC_N] = {
        {"process_virtual_memory_bytes", "Virtual memory size in bytes.", METRIC_GAUGE, 0},
        {"process_resident_memory_bytes", "Resident memory size in bytes.", METRIC_GAUGE, 0},
        {"process_start_time_seconds", "Start time of the process since unix epoch in seconds.", METRIC_GAUGE, 0},
        {"process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", METRIC_COUNTER,
         METRIC_NO_CREATED},
        {"process_open_fds", "Number of open file descriptors.", METRIC_GAUGE, 0},
        {"process_max_fds", "Maximum number of open file descriptors.", METRIC_GAUGE, 0},
    };
    long ticks = sysconf(_SC_CLK_TCK);
    long page = sysconf(_SC_PAGESIZE);
    m->proc_ticks = ticks > 0 ? (double)ticks : 100.0;
    m->proc_pagesize = page > 0 ? (double)page : 4096.0;
    m->proc_btime_s = proc_boot_time();
    for (int i = 0; i < PROC_N; i++)
        m->proc[i] = metric_child(metrics_add(m, fams[i].name, fams[i].help, fams[i].type, 0, NULL, NULL, 0,
                                              fams[i].flags), NULL);
}
