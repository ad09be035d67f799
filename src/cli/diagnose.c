/* diagnose.c - `servelab diagnose`: watch a vLLM-compatible server for a window,
 * compute what the serving playbooks split on and name the most likely cause.
 *
 *   servelab diagnose (--url URL | --prometheus URL [--url URL]) [--window 30s]
 *       [--interval 1s] [--log FILE] [--expected-inflight N] [--baseline FILE]
 *       [--golden FILE [--golden-request JSON]] [--record-golden FILE] [--collect DIR] [--json]
 *
 * Sources. With --url it scrapes URL/metrics every --interval for --window
 * (so a window of 30 s is 31 snapshots). With --prometheus it asks that
 * Prometheus for the same series over the last --window, at --interval steps
 * (query_range), restricted to the target URL's host:port when --url is also
 * given; the snapshots are the same either way, so are the rules. Only vLLM's
 * metric names (and the process and HTTP series of vLLM's API server) are
 * read: pointed at a real vLLM the same checks run (docs/lab.md says which
 * need servelab's finished_reason="error").
 *
 * Extras. --log FILE reads the last 16 MiB of the server's log for CUDA OOM,
 * ERROR and preemption lines. --golden FILE replays its prompts at
 * temperature 0 through /v1/completions and counts answers that differ from
 * the recorded ones (seed 002's golden prompts), asking a differing one again
 * to tell a changed model (the same new answer) from sampling (another one);
 * --golden-request '{"temperature": null}' sends what a client sends instead
 * (fields replaced, null ones left out: seed 001's "same prompt, different
 * answer"), and a replay the server counted fewer prompt tokens of than its
 * /tokenize says the prompt has was truncated (seed 000's "silently drops the
 * start"); --record-golden FILE writes the answers of FILE's prompts into it
 * instead. --baseline FILE is an earlier
 * --json report of the same server when healthy: the rules that compare
 * (slowdowns, CPU per token, prefix reuse) need it. --collect DIR writes seed
 * 003's one-shot bundle: the last scrape, vllm:cache_config_info, /version,
 * /v1/models, the log tail and the verdict.
 *
 * Exit status: 0 when the server looks healthy, 3 when a cause was found
 * (scripts can gate on it), 1 when the server could not be read, 2 on usage.
 * An API key for the golden replay comes from $OPENAI_API_KEY, as for
 * `servelab bench serve`.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "cli.h"
#include "servelab/core.h"
#include "servelab/diagnose.h"

static const char *diag_usage =
    "usage: servelab diagnose (--url URL | --prometheus URL [--url URL]) [--window 30s] [--interval 1s]\n"
    "                         [--log FILE] [--expected-inflight N] [--baseline FILE] [--golden FILE]\n"
    "                         [--golden-request JSON] [--record-golden FILE] [--collect DIR] [--json]\n";

static const char *diag_help =
    "\nWatches a vLLM-compatible server and names the playbook cause of what it shows (docs/lab.md).\n\n"
    "options:\n"
    "  --url URL                 the server (its /metrics, /version, /v1/models, /v1/completions)\n"
    "  --prometheus URL          read the window from this Prometheus instead of scraping\n"
    "  --window DUR              how long to watch: 500ms, 30s, 2m (30s)\n"
    "  --interval DUR            time between snapshots (1s)\n"
    "  --log FILE                the server's log: CUDA OOM, ERROR and preemption lines in its last 16 MiB\n"
    "  --expected-inflight N     requests the clients keep in flight (seed 004's sanity check)\n"
    "  --baseline FILE           an earlier --json report of the healthy server, for the comparing rules\n"
    "  --golden FILE             replay FILE's prompts at temperature 0 and compare with its outputs\n"
    "  --golden-request JSON     request fields for the replay instead of temperature 0 and seed 0, as a\n"
    "                            client sends them ({\"temperature\": 0.7}; null: not sent)\n"
    "  --record-golden FILE      record the outputs of FILE's prompts into FILE, then exit\n"
    "  --collect DIR             write the one-shot report bundle into DIR\n"
    "  --json                    print one JSON object: cause, evidence, remedies, ranked, metrics\n"
    "exit status: 0 healthy, 3 a cause was found, 1 the server could not be read, 2 bad usage\n";

typedef struct {
    const char *url, *prometheus, *log, *baseline, *golden, *record_golden, *collect;
    cJSON *golden_request; /* --golden-request: an object, or NULL */
    double window, interval, expected_inflight;
    bool json;
} diag_args_t;

/* "500ms", "30s", "2m", "1h", or a bare number of seconds. */
static double parse_duration(const char *flag, const char *v, double min) {
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    double scale = !strcmp(end, "ms") ? 1e-3 : !strcmp(end, "s") || !*end ? 1 : !strcmp(end, "m") ? 60
                 : !strcmp(end, "h") ? 3600 : NAN;
    if (end == v || errno || isnan(scale) || !(x * scale >= min) || x * scale > 86400)
        cli_usage_error(diag_usage, "argument %s: invalid duration '%s' (e.g. 500ms, 30s, 2m; at least %gs)", flag, v,
                        min);
    return x * scale;
}

/* ---- HTTP -------------------------------------------------------------------------- */

/* GET (body NULL), or POST JSON with $OPENAI_API_KEY as the bearer, as `bench serve` does. */
static long http(const char *base, const char *path, const char *body, cli_buf_t *out, char *err, size_t err_len) {
    return cli_http(base, path, body, body ? getenv("OPENAI_API_KEY") : NULL, 300000L, out, err, err_len);
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_until(double t) {
    double d = t - wall_now();
    if (d <= 0) return;
    struct timespec ts = {.tv_sec = (time_t)d, .tv_nsec = (long)((d - (double)(time_t)d) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}

/* ---- sources ----------------------------------------------------------------------- */

/* Scrapes url/metrics every interval for window: the snapshots, or NULL with err. */
static prom_snapshot_t *scrape(const diag_args_t *a, int *n_out, char **last_text, char *err, size_t err_len) {
    int n = (int)llround(a->window / a->interval) + 1;
    prom_snapshot_t *snaps = sl_calloc((size_t)n, sizeof *snaps);
    double t0 = wall_now();
    for (int i = 0; i < n; i++) {
        sleep_until(t0 + i * a->interval);
        cli_buf_t b;
        char perr[256];
        double t = wall_now();
        long st = http(a->url, "/metrics", NULL, &b, err, err_len);
        if (st != 200 || prom_parse(b.data, b.len, &snaps[i], perr, sizeof perr)) {
            if (st > 0 && st != 200) snprintf(err, err_len, "%s/metrics: HTTP %ld", a->url, st);
            else if (st == 200) snprintf(err, err_len, "%s/metrics: not the Prometheus text format: %s", a->url, perr);
            free(b.data);
            for (int k = 0; k <= i; k++) prom_snapshot_free(&snaps[k]);
            free(snaps);
            return NULL;
        }
        snaps[i].t = t;
        if (i == n - 1) *last_text = b.data;
        else free(b.data);
    }
    *n_out = n;
    return snaps;
}

/* "host:port" of a URL (Prometheus' instance label for a scraped target). */
static void url_instance(const char *url, char *out, size_t len) {
    const char *p = strstr(url, "://");
    p = p ? p + 3 : url;
    size_t n = strcspn(p, "/");
    snprintf(out, len, "%.*s", (int)n, p);
}

/* The same series from a Prometheus' query_range over the last window. */
static prom_snapshot_t *query_prometheus(const diag_args_t *a, int *n_out, char *err, size_t err_len) {
    char inst[256] = "", sel[512], path[2048];
    if (a->url) url_instance(a->url, inst, sizeof inst);
    snprintf(sel, sizeof sel,
             "{__name__=~\"vllm:.*|process_cpu_seconds_total|process_start_time_seconds|http_requests_total\"%s%s%s}",
             inst[0] ? ",instance=\"" : "", inst, inst[0] ? "\"" : "");
    CURL *c = curl_easy_init();
    char *q = curl_easy_escape(c, sel, 0);
    double end = wall_now(), start = end - a->window;
    snprintf(path, sizeof path, "/api/v1/query_range?query=%s&start=%.3f&end=%.3f&step=%g", q, start, end,
             a->interval);
    curl_free(q);
    curl_easy_cleanup(c);
    cli_buf_t b;
    long st = http(a->prometheus, path, NULL, &b, err, err_len);
    cJSON *root = st == 200 ? cJSON_Parse(b.data) : NULL;
    const cJSON *result = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "data"), "result");
    if (st > 0 && !cJSON_IsArray(result))
        snprintf(err, err_len, "%s: HTTP %ld, not a query_range result: %.200s", a->prometheus, st, b.data);
    prom_snapshot_t *snaps = NULL;
    int n = (int)llround(a->window / a->interval) + 1;
    if (cJSON_IsArray(result)) {
        snaps = sl_calloc((size_t)n, sizeof *snaps);
        for (int i = 0; i < n; i++) snaps[i].t = start + i * a->interval;
        const cJSON *series;
        cJSON_ArrayForEach(series, result) {
            const cJSON *metric = cJSON_GetObjectItem(series, "metric"), *values = cJSON_GetObjectItem(series, "values");
            const cJSON *name = cJSON_GetObjectItem(metric, "__name__"), *l;
            if (!cJSON_IsString(name) || !cJSON_IsArray(values)) continue;
            const char *kv[64];
            int n_labels = 0;
            cJSON_ArrayForEach(l, metric) {
                if (n_labels < 32 && cJSON_IsString(l) && strcmp(l->string, "__name__")) {
                    kv[2 * n_labels] = l->string;
                    kv[2 * n_labels + 1] = l->valuestring;
                    n_labels++;
                }
            }
            const cJSON *pt;
            cJSON_ArrayForEach(pt, values) {
                const cJSON *ts = cJSON_GetArrayItem(pt, 0), *v = cJSON_GetArrayItem(pt, 1);
                if (!cJSON_IsNumber(ts) || !cJSON_IsString(v)) continue;
                int i = (int)llround((ts->valuedouble - start) / a->interval);
                if (i >= 0 && i < n) prom_add(&snaps[i], name->valuestring, kv, n_labels, strtod(v->valuestring, NULL));
            }
        }
        if (snaps[0].n == 0 && snaps[n - 1].n == 0) {
            snprintf(err, err_len, "%s has no vLLM series%s%s over the last %gs", a->prometheus,
                     inst[0] ? " for instance " : "", inst, a->window);
            for (int i = 0; i < n; i++) prom_snapshot_free(&snaps[i]);
            free(snaps);
            snaps = NULL;
        }
    }
    cJSON_Delete(root);
    free(b.data);
    *n_out = n;
    return snaps;
}

/* ---- extras: log, golden ----------------------------------------------------------- */

/* How much of --log is read: a busy server logging every request (vLLM's
 * --enable-log-requests) writes megabytes a minute, and the lines that
 * matter must not scroll out of it. The bundle keeps the last MiB. */
#define LOG_SCAN_BYTES ((size_t)16 << 20)
#define LOG_BUNDLE_BYTES ((size_t)1 << 20)

static char *read_tail(const char *path, size_t max, char *err, size_t err_len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(err, err_len, "%s: %s", path, strerror(errno));
        return NULL;
    }
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    long from = size > (long)max ? size - (long)max : 0;
    fseek(f, from, SEEK_SET);
    char *t = sl_malloc((size_t)(size - from) + 1);
    size_t n = fread(t, 1, (size_t)(size - from), f);
    t[n] = '\0';
    fclose(f);
    return t;
}

static void scan_log(const char *text, diag_extra_t *x) {
    x->oom_lines = x->error_lines = x->preemption_lines = 0;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        char *line = strndup(p, n);
        if (strstr(line, "CUDA out of memory") || strstr(line, "OutOfMemoryError")) x->oom_lines++;
        if (!strncmp(line, "ERROR", 5) || strstr(line, " ERROR ")) x->error_lines++;
        if (strstr(line, "preempted") || strstr(line, "Preempted")) x->preemption_lines++;
        free(line);
        p = nl ? nl + 1 : p + n;
    }
}

/* The served model's id (the first of /v1/models), malloc'd, or NULL. */
static char *served_model(const char *url) {
    cli_buf_t b;
    char err[256];
    char *id = NULL;
    if (http(url, "/v1/models", NULL, &b, err, sizeof err) == 200) {
        cJSON *r = cJSON_Parse(b.data);
        const cJSON *m = cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "data"), 0), "id");
        if (cJSON_IsString(m)) id = sl_strdup(m->valuestring);
        cJSON_Delete(r);
    }
    free(b.data);
    return id;
}

/* {"model", "messages"} or {"model", "prompt"}: golden prompt p as a request
 * body's start, for the completions endpoints and for /tokenize alike. */
static cJSON *golden_prompt_body(const char *model, const cJSON *p, bool *chat) {
    const cJSON *msgs = cJSON_GetObjectItem(p, "messages");
    *chat = cJSON_IsArray(msgs) && cJSON_GetArraySize(msgs) > 0;
    cJSON *req = cJSON_CreateObject();
    cJSON_AddStringToObject(req, "model", model ? model : "");
    if (*chat) cJSON_AddItemToObject(req, "messages", cJSON_Duplicate(msgs, 1));
    else cJSON_AddItemToObject(req, "prompt", cJSON_Duplicate(cJSON_GetObjectItem(p, "prompt"), 1));
    return req;
}

/* One golden prompt's answer: p's "prompt" through /v1/completions or its
 * "messages" (OpenAI chat messages) through /v1/chat/completions, so the
 * server's chat template is part of what is checked; temperature 0 and seed 0
 * unless `fields` (--golden-request) says otherwise: its members replace the
 * request's, a null one removes it (a client that does not send it gets the
 * server's default). The answer (to free), or NULL with err; *prompt_tokens
 * is the response's usage.prompt_tokens (-1: none). */
static char *golden_answer(const char *url, const char *model, const cJSON *p, const cJSON *fields,
                           int *prompt_tokens, char *err, size_t err_len) {
    const cJSON *mt = cJSON_GetObjectItem(p, "max_tokens");
    bool chat;
    cJSON *req = golden_prompt_body(model, p, &chat);
    cJSON_AddNumberToObject(req, "max_tokens", cJSON_IsNumber(mt) ? mt->valuedouble : 32);
    cJSON_AddNumberToObject(req, "temperature", 0);
    cJSON_AddNumberToObject(req, "seed", 0);
    const cJSON *f;
    cJSON_ArrayForEach(f, fields) {
        cJSON_DeleteItemFromObjectCaseSensitive(req, f->string);
        if (!cJSON_IsNull(f)) cJSON_AddItemToObject(req, f->string, cJSON_Duplicate(f, 1));
    }
    char *body = cJSON_PrintUnformatted(req);
    cJSON_Delete(req);
    cli_buf_t b;
    const char *endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    long st = http(url, endpoint, body, &b, err, err_len);
    free(body);
    cJSON *resp = st == 200 ? cJSON_Parse(b.data) : NULL;
    const cJSON *choice = cJSON_GetArrayItem(cJSON_GetObjectItem(resp, "choices"), 0);
    const cJSON *out = chat ? cJSON_GetObjectItem(cJSON_GetObjectItem(choice, "message"), "content")
                            : cJSON_GetObjectItem(choice, "text");
    char *answer = cJSON_IsString(out) ? sl_strdup(out->valuestring) : NULL;
    const cJSON *used = cJSON_GetObjectItem(cJSON_GetObjectItem(resp, "usage"), "prompt_tokens");
    *prompt_tokens = cJSON_IsNumber(used) ? used->valueint : -1;
    if (!answer && st > 0) snprintf(err, err_len, "%s%s: HTTP %ld: %.200s", url, endpoint, st, b.data);
    cJSON_Delete(resp);
    free(b.data);
    return answer;
}

/* The tokens of p's whole prompt as the server counts them (vLLM's /tokenize,
 * with the messages rendered as chat completions render them), or -1 when the
 * server cannot say. Only the prompt goes: a --golden-request that changes the
 * rendering itself (add_special_tokens, chat_template_kwargs) would move the
 * count too, and read as a cut. */
static int golden_prompt_count(const char *url, const char *model, const cJSON *p) {
    bool chat;
    cJSON *req = golden_prompt_body(model, p, &chat);
    char *body = cJSON_PrintUnformatted(req), err[256];
    cJSON_Delete(req);
    cli_buf_t b;
    long st = http(url, "/tokenize", body, &b, err, sizeof err);
    free(body);
    cJSON *resp = st == 200 ? cJSON_Parse(b.data) : NULL;
    const cJSON *count = cJSON_GetObjectItem(resp, "count");
    int n = cJSON_IsNumber(count) ? count->valueint : -1;
    cJSON_Delete(resp);
    free(b.data);
    return n;
}

/* Replays a golden file's prompts ({"prompts": [{"prompt" or "messages",
 * "max_tokens", "output"}]}) with golden_answer. record: writes the answers
 * into it. Else a prompt whose answer differs from its "output" is asked
 * again: a second answer unlike the first makes it unstable (sampling, not a
 * changed model). A prompt the server counted fewer tokens of than /tokenize
 * says it has was truncated (truncate_prompt_tokens: its start is gone).
 * Returns the number of prompts (mismatches in *bad, unstable ones in
 * *unstable, truncated ones in *truncated), or -1 with err. */
static int golden(const char *url, const char *path, const cJSON *fields, bool record, int *bad, int *unstable,
                  int *truncated, char *err, size_t err_len) {
    char *text = read_tail(path, (size_t)16 << 20, err, err_len);
    if (!text) return -1;
    cJSON *root = cJSON_Parse(text);
    free(text);
    cJSON *prompts = cJSON_GetObjectItem(root, "prompts");
    if (!cJSON_IsArray(prompts) || cJSON_GetArraySize(prompts) == 0) {
        snprintf(err, err_len, "%s: expected {\"prompts\": [{\"prompt\": ..., \"max_tokens\": ...}, ...]}", path);
        cJSON_Delete(root);
        return -1;
    }
    char *model = served_model(url);
    int n = 0, rc = 0;
    *bad = *unstable = *truncated = 0;
    cJSON *p;
    cJSON_ArrayForEach(p, prompts) {
        const cJSON *prompt = cJSON_GetObjectItem(p, "prompt"), *msgs = cJSON_GetObjectItem(p, "messages");
        const cJSON *want = cJSON_GetObjectItem(p, "output");
        bool chat = cJSON_IsArray(msgs) && cJSON_GetArraySize(msgs) > 0;
        if (cJSON_IsString(prompt) == chat || (!record && !cJSON_IsString(want))) {
            snprintf(err, err_len, "%s: prompt %d needs a string \"prompt\" or a \"messages\" array (one of the two)%s",
                     path, n, record ? "" : " and a recorded \"output\" (make one with --record-golden)");
            rc = -1;
            break;
        }
        int used, used2;
        char *got = golden_answer(url, model, p, fields, &used, err, err_len);
        if (!got) {
            rc = -1;
        } else if (record) {
            cJSON_DeleteItemFromObject(p, "output");
            cJSON_AddStringToObject(p, "output", got);
        } else if (strcmp(got, want->valuestring)) {
            (*bad)++;
            char *again = golden_answer(url, model, p, fields, &used2, err, err_len);
            if (!again) rc = -1;
            else if (strcmp(again, got)) (*unstable)++;
            free(again);
        }
        if (got && !record && used >= 0) {
            int whole = golden_prompt_count(url, model, p);
            *truncated += whole >= 0 && used < whole;
        }
        free(got);
        if (rc) break;
        n++;
    }
    if (rc == 0 && record) {
        char *s = cJSON_Print(root);
        FILE *f = fopen(path, "w");
        if (!f || fputs(s, f) < 0 || fputc('\n', f) < 0) {
            snprintf(err, err_len, "%s: %s", path, strerror(errno));
            rc = -1;
        }
        if (f) fclose(f);
        free(s);
    }
    free(model);
    cJSON_Delete(root);
    return rc ? -1 : n;
}

/* ---- output ------------------------------------------------------------------------ */

static void print_number(FILE *f, const char *name, double v) {
    if (!isfinite(v)) fprintf(f, "%s -", name);
    else if (fabs(v) >= 100 || v == floor(v)) fprintf(f, "%s %.0f", name, v);
    else fprintf(f, "%s %.3g", name, v);
}

static void print_evidence(FILE *f, const cJSON *ev) {
    const cJSON *x;
    int k = 0;
    cJSON_ArrayForEach(x, ev) {
        fputs(k++ % 3 ? ", " : "\n    ", f);
        print_number(f, x->string, cJSON_IsNumber(x) ? x->valuedouble : NAN);
    }
    fputc('\n', f);
}

static void print_text(FILE *f, const char *source, const cJSON *r) {
    const cJSON *m = cJSON_GetObjectItem(r, "metrics");
    fprintf(f, "servelab diagnose: %s, %.0f s window, %.0f snapshots\n", source,
            cJSON_GetObjectItem(m, "window_s")->valuedouble, cJSON_GetObjectItem(m, "samples")->valuedouble);
    fprintf(f, "\ncause: %s: %s\n", cJSON_GetObjectItem(r, "cause")->valuestring,
            cJSON_GetObjectItem(r, "summary")->valuestring);
    const cJSON *ev = cJSON_GetObjectItem(r, "evidence");
    if (cJSON_GetArraySize(ev)) {
        fprintf(f, "  evidence:");
        print_evidence(f, ev);
    }
    const cJSON *x;
    if (cJSON_GetArraySize(cJSON_GetObjectItem(r, "remedies"))) fprintf(f, "  remedies:\n");
    cJSON_ArrayForEach(x, cJSON_GetObjectItem(r, "remedies")) fprintf(f, "    - %s\n", x->valuestring);
    const cJSON *ranked = cJSON_GetObjectItem(r, "ranked");
    if (cJSON_GetArraySize(ranked) > 1) {
        fprintf(f, "\nalso seen (ranked):\n");
        for (int i = 1; i < cJSON_GetArraySize(ranked); i++) {
            const cJSON *o = cJSON_GetArrayItem(ranked, i);
            fprintf(f, "  %s (score %.2f): %s\n", cJSON_GetObjectItem(o, "cause")->valuestring,
                    cJSON_GetObjectItem(o, "score")->valuedouble, cJSON_GetObjectItem(o, "summary")->valuestring);
        }
    }
    fprintf(f, "\nnumbers:");
    print_evidence(f, m);
    const cJSON *skipped = cJSON_GetObjectItem(r, "skipped");
    if (cJSON_GetArraySize(skipped)) {
        fprintf(f, "\nwithout --baseline, not checked:");
        cJSON_ArrayForEach(x, skipped) fprintf(f, " %s", x->valuestring);
        fputc('\n', f);
    }
}

/* ---- --collect --------------------------------------------------------------------- */

static int write_file(const char *dir, const char *name, const char *data, size_t len) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    int rc = fwrite(data, 1, len, f) == len ? 0 : -1;
    return fclose(f) || rc ? -1 : 0;
}

static int collect(const diag_args_t *a, const char *metrics_text, const cJSON *report, const char *log_tail,
                   char *err, size_t err_len) {
    if (mkdir(a->collect, 0755) && errno != EEXIST) {
        snprintf(err, err_len, "%s: %s", a->collect, strerror(errno));
        return -1;
    }
    int rc = 0;
    if (metrics_text) {
        rc |= write_file(a->collect, "metrics.txt", metrics_text, strlen(metrics_text));
        /* vllm:cache_config_info: the KV cache's configuration, as its labels. */
        const char *p = strstr(metrics_text, "\nvllm:cache_config_info");
        if (p) rc |= write_file(a->collect, "cache_config_info.txt", p + 1, strcspn(p + 1, "\n") + 1);
    }
    if (a->url) {
        const char *paths[][2] = {{"/version", "version.json"}, {"/v1/models", "models.json"}};
        for (int i = 0; i < 2; i++) {
            cli_buf_t b;
            char herr[256];
            if (http(a->url, paths[i][0], NULL, &b, herr, sizeof herr) > 0) rc |= write_file(a->collect, paths[i][1], b.data, b.len);
            free(b.data);
        }
    }
    if (log_tail) {
        size_t n = strlen(log_tail), from = n > LOG_BUNDLE_BYTES ? n - LOG_BUNDLE_BYTES : 0;
        rc |= write_file(a->collect, "log_tail.txt", log_tail + from, n - from);
    }
    char *s = cJSON_Print(report);
    rc |= write_file(a->collect, "verdict.json", s, strlen(s));
    free(s);
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    print_text(mem, a->url ? a->url : a->prometheus, report);
    fclose(mem);
    rc |= write_file(a->collect, "verdict.txt", text, len);
    free(text);
    if (rc) snprintf(err, err_len, "%s: could not write the bundle: %s", a->collect, strerror(errno));
    return rc;
}

/* ---- the command ------------------------------------------------------------------- */

static void parse_args(int argc, char **argv, diag_args_t *a) {
    enum {
        O_URL = 256, O_PROM, O_WINDOW, O_INTERVAL, O_LOG, O_INFLIGHT, O_BASE, O_GOLDEN, O_GOLDEN_REQ, O_RECORD,
        O_COLLECT, O_JSON
    };
    static const struct option opts[] = {
        {"url", required_argument, 0, O_URL},           {"prometheus", required_argument, 0, O_PROM},
        {"window", required_argument, 0, O_WINDOW},     {"interval", required_argument, 0, O_INTERVAL},
        {"log", required_argument, 0, O_LOG},           {"expected-inflight", required_argument, 0, O_INFLIGHT},
        {"baseline", required_argument, 0, O_BASE},     {"golden", required_argument, 0, O_GOLDEN},
        {"record-golden", required_argument, 0, O_RECORD}, {"collect", required_argument, 0, O_COLLECT},
        {"golden-request", required_argument, 0, O_GOLDEN_REQ},
        {"json", no_argument, 0, O_JSON},               {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0}};
    *a = (diag_args_t){.window = 30, .interval = 1};
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_URL: a->url = optarg; break;
        case O_PROM: a->prometheus = optarg; break;
        case O_WINDOW: a->window = parse_duration("--window", optarg, 0.1); break;
        case O_INTERVAL: a->interval = parse_duration("--interval", optarg, 0.05); break;
        case O_LOG: a->log = optarg; break;
        case O_INFLIGHT: a->expected_inflight = (double)cli_parse_int("--expected-inflight", optarg, 1, 1000000000); break;
        case O_BASE: a->baseline = optarg; break;
        case O_GOLDEN: a->golden = optarg; break;
        case O_RECORD: a->record_golden = optarg; break;
        case O_GOLDEN_REQ: {
            cJSON_Delete(a->golden_request);
            a->golden_request = cJSON_Parse(optarg);
            if (!cJSON_IsObject(a->golden_request))
                cli_usage_error(diag_usage, "--golden-request must be a JSON object of request fields");
            static const char *const owned[] = {"model", "prompt", "messages", "stream"};
            for (size_t i = 0; i < sizeof owned / sizeof owned[0]; i++)
                if (cJSON_GetObjectItemCaseSensitive(a->golden_request, owned[i]))
                    cli_usage_error(diag_usage, "--golden-request: \"%s\" is the golden file's or the replay's",
                                    owned[i]);
            break;
        }
        case O_COLLECT: a->collect = optarg; break;
        case O_JSON: a->json = true; break;
        case 'h': printf("%s%s", diag_usage, diag_help); exit(0);
        default: cli_usage_error(diag_usage, "unrecognized arguments: %s", argv[optind - 1]);
        }
    }
    if (optind < argc) cli_usage_error(diag_usage, "unrecognized arguments: %s", argv[optind]);
    if (!a->url && !a->prometheus) cli_usage_error(diag_usage, "one of the arguments --url --prometheus is required");
    if ((a->golden || a->record_golden) && !a->url) cli_usage_error(diag_usage, "--golden needs --url");
    if (a->golden_request && !a->golden && !a->record_golden)
        cli_usage_error(diag_usage, "--golden-request needs --golden or --record-golden");
    if (a->interval > a->window) cli_usage_error(diag_usage, "argument --interval: longer than --window");
    if (a->window / a->interval > 100000) cli_usage_error(diag_usage, "argument --interval: too many snapshots");
    for (char *p = (char *)a->url; p && *p; p++) /* "http://h:8000/" -> "http://h:8000" */
        if (p[0] == '/' && p[1] == '\0' && p > a->url && p[-1] != '/') *p = '\0';
}

int cli_diagnose(int argc, char **argv) {
    diag_args_t a;
    parse_args(argc, argv, &a);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    char err[1024] = "";
    int status = 1;
    prom_snapshot_t *snaps = NULL;
    int n = 0;
    char *last_text = NULL, *log_tail = NULL;
    cJSON *base_json = NULL, *report = NULL;
    diag_measures_t base;
    diag_extra_t extra = {-1, -1, -1, 0, 0, 0, 0};

    if (a.record_golden) {
        int bad, unstable, truncated;
        int k = golden(a.url, a.record_golden, a.golden_request, true, &bad, &unstable, &truncated, err, sizeof err);
        if (k >= 0) fprintf(stderr, "servelab diagnose: recorded %d outputs into %s\n", k, a.record_golden);
        status = k >= 0 ? 0 : 1;
        goto out;
    }
    if (a.baseline) {
        char *text = read_tail(a.baseline, (size_t)16 << 20, err, sizeof err);
        base_json = text ? cJSON_Parse(text) : NULL;
        free(text);
        char berr[256];
        if (!base_json || diag_measures_from_json(base_json, &base, berr, sizeof berr)) {
            if (text || !err[0]) snprintf(err, sizeof err, "--baseline %s: %s", a.baseline, base_json ? berr : "not JSON");
            goto out;
        }
    }
    if (a.log) {
        log_tail = read_tail(a.log, LOG_SCAN_BYTES, err, sizeof err);
        if (!log_tail) goto out;
        scan_log(log_tail, &extra);
    }
    snaps = a.prometheus ? query_prometheus(&a, &n, err, sizeof err) : scrape(&a, &n, &last_text, err, sizeof err);
    if (!snaps) goto out;
    if (a.golden) {
        int bad = 0, unstable = 0, truncated = 0;
        int k = golden(a.url, a.golden, a.golden_request, false, &bad, &unstable, &truncated, err, sizeof err);
        if (k < 0) goto out;
        extra.golden_truncated = truncated;
        extra.golden_prompts = k;
        extra.golden_mismatches = bad;
        extra.golden_unstable = unstable;
    }
    diag_measures_t m;
    diag_measure(snaps, n, a.expected_inflight, &extra, &m);
    report = diag_report(&m, a.baseline ? &base : NULL);
    if (a.json) {
        char *s = cJSON_PrintUnformatted(report);
        printf("%s\n", s);
        free(s);
    } else {
        print_text(stdout, a.prometheus ? a.prometheus : a.url, report);
    }
    if (a.collect && collect(&a, last_text, report, log_tail, err, sizeof err)) goto out;
    status = strcmp(cJSON_GetObjectItem(report, "cause")->valuestring, "healthy") ? 3 : 0;
out:
    if (status == 1) fprintf(stderr, "servelab: error: %s\n", err);
    for (int i = 0; i < n && snaps; i++) prom_snapshot_free(&snaps[i]);
    free(snaps);
    free(last_text);
    free(log_tail);
    cJSON_Delete(base_json);
    cJSON_Delete(report);
    cJSON_Delete(a.golden_request);
    curl_global_cleanup();
    return status;
}
