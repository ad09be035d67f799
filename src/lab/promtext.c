/* promtext.c - the Prometheus text exposition format (0.0.4) to samples, for
 * `servelab diagnose`. A scrape is outside bytes (any server's /metrics), so
 * every malformed line is an error naming the line, never a crash
 * (tests/fuzz/fuzz_promtext.c).
 *
 * Grammar, per line: blank | `#` comment (HELP, TYPE, OpenMetrics' EOF) |
 *   name [ `{` label `="` value `"` { `,` ... } [`,`] `}` ] value [ timestamp ]
 * name [a-zA-Z_:][a-zA-Z0-9_:]*, label [a-zA-Z_][a-zA-Z0-9_]*, label values
 * with \\, \" and \n escapes, values as Go's ParseFloat (+Inf, -Inf, NaN).
 */
#define _GNU_SOURCE
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "servelab/core.h"
#include "servelab/diagnose.h"

static char *strndup_or_die(const char *s, size_t n) {
    char *d = strndup(s, n);
    if (!d) sl_die("out of memory");
    return d;
}

static bool name_start(int c, bool colon) { return isalpha(c) || c == '_' || (colon && c == ':'); }
static bool name_char(int c, bool colon) { return isalnum(c) || c == '_' || (colon && c == ':'); }

static const char *skip_blanks(const char *p, const char *end) {
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    return p;
}

/* A float as Prometheus writes one; 0 and the end, or -1. */
static int parse_value(const char *p, const char *end, double *out, const char **next) {
    const char *q = p;
    while (q < end && *q != ' ' && *q != '\t') q++;
    size_t n = (size_t)(q - p);
    char buf[64];
    if (n == 0 || n >= sizeof buf) return -1;
    memcpy(buf, p, n);
    buf[n] = '\0';
    if (!strcasecmp(buf, "+Inf") || !strcasecmp(buf, "Inf")) *out = INFINITY;
    else if (!strcasecmp(buf, "-Inf")) *out = -INFINITY;
    else if (!strcasecmp(buf, "NaN")) *out = NAN;
    else {
        /* strtod also reads hex floats and "infinity"; Prometheus' values are decimal. */
        for (size_t i = 0; i < n; i++)
            if (!strchr("0123456789+-.eE", buf[i])) return -1;
        char *e;
        errno = 0;
        *out = strtod(buf, &e);
        if (*e || e == buf) return -1;
    }
    *next = q;
    return 0;
}

void prom_add(prom_snapshot_t *s, const char *name, const char *const *kv, int n_labels, double value) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->samples = sl_realloc(s->samples, (size_t)s->cap * sizeof *s->samples);
    }
    prom_sample_t *x = &s->samples[s->n++];
    x->name = sl_strdup(name);
    x->n_labels = n_labels;
    x->labels = n_labels ? sl_calloc((size_t)n_labels, sizeof *x->labels) : NULL;
    for (int i = 0; i < n_labels; i++) {
        x->labels[i].key = sl_strdup(kv[2 * i]);
        x->labels[i].value = sl_strdup(kv[2 * i + 1]);
    }
    x->value = value;
}

/* One sample line [p, end). 0, or -1 with what was wrong in why. */
static int parse_sample(prom_snapshot_t *s, const char *p, const char *end, const char **why) {
    const char *name = p;
    if (p == end || !name_start((unsigned char)*p, true)) return *why = "a metric name", -1;
    while (p < end && name_char((unsigned char)*p, true)) p++;
    char *nm = strndup_or_die(name, (size_t)(p - name));
    char **kv = NULL;
    int n_labels = 0, rc = -1;
    char *val = NULL;
    p = skip_blanks(p, end);
    if (p < end && *p == '{') {
        p++;
        for (;;) {
            p = skip_blanks(p, end);
            if (p < end && *p == '}') {
                p++;
                break;
            }
            const char *k = p;
            if (p == end || !name_start((unsigned char)*p, false)) {
                *why = "a label name or '}'";
                goto out;
            }
            while (p < end && name_char((unsigned char)*p, false)) p++;
            size_t klen = (size_t)(p - k);
            p = skip_blanks(p, end);
            if (p + 1 >= end || p[0] != '=' || p[1] != '"') {
                *why = "=\"value\" after a label name";
                goto out;
            }
            p += 2;
            val = sl_malloc((size_t)(end - p) + 1);
            size_t vn = 0;
            while (p < end && *p != '"') {
                if (*p == '\\') {
                    if (p + 1 == end || !strchr("\\\"n", p[1])) {
                        *why = "an escape of \\\\, \\\" or \\n";
                        goto out;
                    }
                    val[vn++] = p[1] == 'n' ? '\n' : p[1];
                    p += 2;
                } else val[vn++] = *p++;
            }
            if (p == end) {
                *why = "a closing '\"'";
                goto out;
            }
            p++;
            val[vn] = '\0';
            kv = sl_realloc(kv, (size_t)(2 * n_labels + 2) * sizeof *kv);
            kv[2 * n_labels] = strndup_or_die(k, klen);
            kv[2 * n_labels + 1] = val;
            val = NULL;
            n_labels++;
            p = skip_blanks(p, end);
            if (p < end && *p == ',') p++;
            else if (p < end && *p == '}') {
                p++;
                break;
            } else {
                *why = "',' or '}' after a label";
                goto out;
            }
        }
    }
    p = skip_blanks(p, end);
    double v;
    if (parse_value(p, end, &v, &p)) {
        *why = "a value (a float, +Inf, -Inf or NaN)";
        goto out;
    }
    p = skip_blanks(p, end);
    if (p < end) { /* a timestamp, in integer milliseconds */
        const char *t = p;
        if (*p == '-') p++;
        while (p < end && isdigit((unsigned char)*p)) p++;
        if (p == t || (p == t + 1 && *t == '-') || skip_blanks(p, end) != end) {
            *why = "end of line or a timestamp after the value";
            goto out;
        }
    }
    prom_add(s, nm, (const char *const *)kv, n_labels, v);
    rc = 0;
out:
    for (int i = 0; i < 2 * n_labels; i++) free(kv[i]);
    free(kv);
    free(val);
    free(nm);
    return rc;
}

int prom_parse(const char *text, size_t len, prom_snapshot_t *out, char *err, size_t err_len) {
    const char *p = text, *end = text + len;
    int line = 0;
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *e = nl ? nl : end;
        line++;
        const char *q = skip_blanks(p, e);
        if (e > q && e[-1] == '\r') e--;
        const char *why = NULL;
        if (q < e && *q != '#' && parse_sample(out, q, e, &why)) {
            snprintf(err, err_len, "line %d: expected %s", line, why);
            return -1;
        }
        p = nl ? nl + 1 : end;
    }
    return 0;
}

const char *prom_label(const prom_sample_t *x, const char *key) {
    for (int i = 0; i < x->n_labels; i++)
        if (!strcmp(x->labels[i].key, key)) return x->labels[i].value;
    return NULL;
}

void prom_snapshot_free(prom_snapshot_t *s) {
    for (int i = 0; i < s->n; i++) {
        prom_sample_t *x = &s->samples[i];
        for (int k = 0; k < x->n_labels; k++) {
            free(x->labels[k].key);
            free(x->labels[k].value);
        }
        free(x->labels);
        free(x->name);
    }
    free(s->samples);
    memset(s, 0, sizeof *s);
}
