/* compare.c - `servelab bench compare BASE.json NEW.json [--gate NAME=+P% ...]`.
 *
 * Prints every numeric figure the two result files share (in BASE's key order) with the
 * relative change, then checks the gates: NAME=+P% fails when NEW exceeds BASE by more
 * than P percent (for latencies), NAME=-P% when NEW falls below BASE by more than P
 * percent (for throughputs). NAME is a result key (p99_ttft_ms, output_throughput,
 * ...) or a short form: METRIC_STAT or STAT_METRIC with METRIC in ttft, tpot, itl, e2el
 * and STAT in mean, median, std, pNN (ttft_p99 -> p99_ttft_ms, itl_mean ->
 * mean_itl_ms); throughput -> output_throughput, total_throughput ->
 * total_token_throughput, goodput -> request_goodput, peak_throughput ->
 * max_output_tokens_per_s, peak_concurrency -> max_concurrent_requests.
 * Exit status: 0 all gates hold, 1 a gate failed or a file is unreadable or lacks a gated
 * key, 2 bad usage. A file written with --append-result holds one result per line; the
 * last one is compared.
 */
#define _GNU_SOURCE
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static const char compare_usage[] =
    "usage: servelab bench compare BASE.json NEW.json [--gate NAME=+P%|NAME=-P% ...]\n"
    "  NAME: a result key (p99_ttft_ms, output_throughput, ...) or ttft_p99, p99_ttft, itl_mean, ...\n"
    "  +P%: NEW may exceed BASE by at most P percent; -P%: NEW may fall below BASE by at most P percent\n";

static bool is_stat(const char *s, size_t n) {
    if ((n == 4 && !memcmp(s, "mean", 4)) || (n == 6 && !memcmp(s, "median", 6)) || (n == 3 && !memcmp(s, "std", 3)))
        return true;
    if (n < 2 || s[0] != 'p') return false;
    bool dot = false;
    for (size_t i = 1; i < n; i++) {
        if (s[i] == '.' && !dot && i > 1 && i + 1 < n) dot = true;
        else if (s[i] < '0' || s[i] > '9') return false;
    }
    return true;
}

static bool is_metric(const char *s, size_t n) {
    static const char *const m[] = {"ttft", "tpot", "itl", "e2el"};
    for (int i = 0; i < 4; i++)
        if (strlen(m[i]) == n && !memcmp(s, m[i], n)) return true;
    return false;
}

static void key_for(const char *name, char *key, size_t cap) {
    static const char *const alias[][2] = {{"throughput", "output_throughput"},
                                           {"total_throughput", "total_token_throughput"},
                                           {"goodput", "request_goodput"},
                                           {"peak_throughput", "max_output_tokens_per_s"},
                                           {"peak_concurrency", "max_concurrent_requests"}};
    for (size_t i = 0; i < sizeof alias / sizeof *alias; i++)
        if (!strcmp(name, alias[i][0])) {
            snprintf(key, cap, "%s", alias[i][1]);
            return;
        }
    const char *us = strchr(name, '_');
    if (us && !strchr(us + 1, '_')) {
        size_t a = (size_t)(us - name), b = strlen(us + 1);
        /* (a name too long for the key buffer is cut, and then matches no key) */
        if (is_metric(name, a) && is_stat(us + 1, b)) { /* ttft_p99 */
            if (snprintf(key, cap, "%s_%.*s_ms", us + 1, (int)a, name) >= (int)cap) key[0] = 0;
            return;
        }
        if (is_stat(name, a) && is_metric(us + 1, b)) { /* p99_ttft */
            if (snprintf(key, cap, "%s_ms", name) >= (int)cap) key[0] = 0;
            return;
        }
    }
    snprintf(key, cap, "%s", name);
}

int bench_gate_parse(const char *spec, bench_gate_t *g, sl_err_t *err) {
    memset(g, 0, sizeof *g);
    const char *eq = strrchr(spec, '=');
    if (!eq || eq == spec || (size_t)(eq - spec) >= sizeof g->name)
        return sl_fail(err, "argument --gate: expected NAME=+P%% or NAME=-P%%, got '%s'", spec);
    snprintf(g->name, sizeof g->name, "%.*s", (int)(eq - spec), spec);
    const char *v = eq + 1;
    char *end;
    double p = (*v == '+' || *v == '-') ? strtod(v + 1, &end) : 0;
    if ((*v != '+' && *v != '-') || end == v + 1 || strcmp(end, "%") || !(p >= 0) || isinf(p))
        return sl_fail(err, "argument --gate: '%s': the bound must be a sign and a percentage, like +10%% or -5%%", spec);
    g->increase = *v == '+';
    g->limit_pct = p;
    key_for(g->name, g->key, sizeof g->key);
    return 0;
}

bool bench_gate_ok(const bench_gate_t *g, double base, double now) {
    double slack = fabs(base) * g->limit_pct / 100.0, tol = 1e-12 * fmax(fabs(base), fabs(now));
    return g->increase ? now <= base + slack + tol : now >= base - slack - tol;
}

/* The last JSON object in the file (one per line with --append-result). */
static cJSON *load(const char *path) {
    sl_err_t err;
    size_t len;
    char *text = sl_read_file(path, (size_t)1 << 30, &len, &err);
    if (!text) sl_die("%s", err.msg);
    cJSON *last = NULL;
    const char *p = text, *end = text + len;
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
        if (p >= end) break;
        const char *stop = NULL;
        cJSON *j = cJSON_ParseWithLengthOpts(p, (size_t)(end - p), &stop, 0);
        if (!j) {
            size_t at = (size_t)((stop ? stop : p) - text);
            cJSON_Delete(last);
            free(text);
            sl_die("%s: not a JSON result file (invalid JSON at byte %zu)", path, at);
        }
        cJSON_Delete(last);
        last = j;
        p = stop;
    }
    free(text);
    if (!cJSON_IsObject(last)) sl_die("%s: not a JSON result file (expected an object)", path);
    return last;
}

static void fmt_num(double v, char *out, size_t cap) {
    if (v == floor(v) && fabs(v) < 1e15) snprintf(out, cap, "%lld", (long long)v);
    else snprintf(out, cap, "%.2f", v);
}

static void fmt_change(double base, double now, char *out, size_t cap) {
    if (base == now) snprintf(out, cap, "+0.00%%");
    else if (base == 0) snprintf(out, cap, "n/a");
    else snprintf(out, cap, "%+.2f%%", (now - base) / fabs(base) * 100.0);
}

static int usage_fail(bench_gate_t *gates, const char *msg) {
    free(gates);
    fprintf(stderr, "%sservelab: error: %s\n", compare_usage, msg);
    return 2;
}

int bench_compare_main(int argc, char **argv) {
    const char *files[2] = {0};
    int n_files = 0, n_gates = 0;
    bench_gate_t *gates = sl_calloc((size_t)argc, sizeof *gates);
    sl_err_t err;
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) {
            fputs(compare_usage, stdout);
            free(gates);
            return 0;
        }
        if (!strncmp(arg, "--gate=", 7) || !strcmp(arg, "--gate")) {
            int taken = 0;
            if (arg[6] == '=' && (++taken, bench_gate_parse(arg + 7, &gates[n_gates++], &err)))
                return usage_fail(gates, err.msg);
            for (; i + 1 < argc && strncmp(argv[i + 1], "--", 2); taken++)
                if (bench_gate_parse(argv[++i], &gates[n_gates++], &err)) return usage_fail(gates, err.msg);
            if (!taken) return usage_fail(gates, "argument --gate: expected at least one argument");
            continue;
        }
        if (arg[0] == '-' && arg[1]) {
            snprintf(err.msg, sizeof err.msg, "unrecognized arguments: %s", arg);
            return usage_fail(gates, err.msg);
        }
        if (n_files == 2) {
            snprintf(err.msg, sizeof err.msg, "unexpected argument: %s", arg);
            return usage_fail(gates, err.msg);
        }
        files[n_files++] = arg;
    }
    if (n_files != 2) return usage_fail(gates, "expected two result files, BASE.json and NEW.json");
    cJSON *base = load(files[0]), *now = load(files[1]);
    for (int g = 0; g < n_gates; g++)
        for (int f = 0; f < 2; f++) {
            const cJSON *v = cJSON_GetObjectItemCaseSensitive(f ? now : base, gates[g].key);
            if (!cJSON_IsNumber(v))
                sl_die("--gate %s: %s has no number under \"%s\"", gates[g].name, files[f], gates[g].key);
        }

    printf("base: %s\nnew:  %s\n", files[0], files[1]);
    printf("%-40s %-14s %-14s %s\n", "metric", "base", "new", "change");
    for (const cJSON *b = base->child; b; b = b->next) {
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(now, b->string);
        if (!cJSON_IsNumber(b) || !cJSON_IsNumber(n)) continue;
        char sb[48], sn[48], sc[48];
        fmt_num(b->valuedouble, sb, sizeof sb);
        fmt_num(n->valuedouble, sn, sizeof sn);
        fmt_change(b->valuedouble, n->valuedouble, sc, sizeof sc);
        printf("%-40s %-14s %-14s %s\n", b->string, sb, sn, sc);
    }
    int failed = 0;
    for (int g = 0; g < n_gates; g++) {
        double b = cJSON_GetObjectItemCaseSensitive(base, gates[g].key)->valuedouble;
        double n = cJSON_GetObjectItemCaseSensitive(now, gates[g].key)->valuedouble;
        bool ok = bench_gate_ok(&gates[g], b, n);
        failed += !ok;
        char sb[48], sn[48], sc[48];
        fmt_num(b, sb, sizeof sb);
        fmt_num(n, sn, sizeof sn);
        fmt_change(b, n, sc, sizeof sc);
        printf("gate %s=%c%g%% (%s): %s -> %s (%s): %s\n", gates[g].name, gates[g].increase ? '+' : '-',
               gates[g].limit_pct, gates[g].key, sb, sn, sc, ok ? "pass" : "FAIL");
    }
    if (n_gates) printf("%d of %d gates failed\n", failed, n_gates);
    cJSON_Delete(base);
    cJSON_Delete(now);
    free(gates);
    return failed ? 1 : 0;
}
