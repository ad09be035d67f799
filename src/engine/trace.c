/* trace.c - the engine's trace: Chrome / Perfetto trace-event JSON, openable
 * in ui.perfetto.dev or chrome://tracing. Two ways to record one:
 * - --trace FILE: from the engine's start to its stop, written to FILE when
 *   the engine is freed (a server's shutdown);
 * - POST /lab/trace/start, then POST /lab/trace/stop (serve --enable-lab-ui):
 *   recorded in memory between the two, and the stop's response body is the
 *   document (nothing is written on the server's disk). One trace at a time:
 *   a start while one records (a --trace FILE one included) is refused, as
 *   is a stop with none.
 *
 * What it holds (timestamps in microseconds since the trace started; its JSON
 * Schema: docs/schemas/trace.schema.json):
 * - pid 1 "engine", tid 1 "steps": one complete event ("X") per engine step,
 *   from the step's start (before scheduling) to the end of its forward and
 *   sampling, with the batch composition as args: prefill and decode tokens,
 *   sequences, sampled rows, preemptions, the forward's milliseconds;
 * - pid 2 "requests", one track per sequence (named "<request id>[<index>]"):
 *   its lifecycle as three phases that partition arrival to finish, so they
 *   sum to its e2e latency: "queued" (arrival to first scheduled), "prefill"
 *   (to the first token), "decode" (to the finish); inside them a "prefill
 *   chunk" event for every step that computed prompt tokens of it (a
 *   recompute after a preemption too); tid 0 is the process's own metadata,
 *   so sequence s is tid s + 1. The phases carry the request's figures
 *   (tokens, cached prompt tokens, preemptions, finish reason). A request's
 *   preemptions are counted in its phases' args and in the steps'
 *   "preempted", not placed in time;
 * - pid 3 "http": every HTTP request the server answered, as an async span
 *   ("b" ... "e", cat "http", one id each) named "METHOD /path", from its
 *   arrival to the end of its response (its last byte handed to the socket,
 *   or the client gone), with a "first byte" instant ("n") when the response
 *   began (for a stream: its first event), and as args the status, the
 *   X-Request-Id, the engine's request id (which names its tracks in pid 2),
 *   the body sizes and whether the client left early.
 * Requests (engine or HTTP) that arrived before the trace started are left
 * out, so every span starts inside the trace.
 *
 * Bounded: events are kept as JSON text in a ring; past --trace-max-mb the
 * oldest go first (the document says how many). The engine thread and the
 * HTTP threads append under the trace's lock; off, the engine reads one flag
 * (trace_on) per step and takes no lock.
 */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include <cjson/cJSON.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

struct engine_trace {
    pthread_mutex_t mu;         /* guards everything below; on is also read unlocked (trace_on) */
    bool on;
    FILE *f;                    /* --trace FILE (NULL: in memory, for /lab/trace) */
    char *path;
    double t0;
    size_t cap_bytes, n_bytes;
    char **ring;                /* events [head, head + n) mod cap */
    int64_t head, n, cap;
    int64_t n_dropped;
    int64_t next_http_id;
};

engine_trace_t *trace_new(size_t cap_bytes) {
    engine_trace_t *t = sl_calloc(1, sizeof *t);
    pthread_mutex_init(&t->mu, NULL);
    t->cap_bytes = cap_bytes;
    return t;
}

engine_trace_t *trace_open(const char *path, size_t cap_bytes, sl_err_t *err) {
    FILE *f = fopen(path, "w");
    if (!f) {
        sl_fail(err, "--trace %s: cannot write the file: %s", path, strerror(errno));
        return NULL;
    }
    engine_trace_t *t = trace_new(cap_bytes);
    t->f = f;
    t->path = sl_strdup(path);
    t->t0 = sl_now_s();
    t->on = true;
    return t;
}

bool trace_on(engine_trace_t *t) { return t && __atomic_load_n(&t->on, __ATOMIC_ACQUIRE); }

bool engine_tracing(engine_t *e) { return e && trace_on(e->trace); }

static void ring_clear(engine_trace_t *t) {
    for (int64_t i = 0; i < t->n; i++) free(t->ring[(t->head + i) % t->cap]);
    free(t->ring);
    t->ring = NULL;
    t->head = t->n = t->cap = 0;
    t->n_bytes = 0;
    t->n_dropped = 0;
}

static double us(const engine_trace_t *t, double s) { return (s - t->t0) * 1e6; }

/* Takes ownership of ev (freed here). Under t->mu. */
static void append(engine_trace_t *t, cJSON *ev) {
    char *s = cJSON_PrintUnformatted(ev);
    cJSON_Delete(ev);
    if (!s) return;
    size_t len = strlen(s) + 2; /* ",\n" */
    while (t->n > 0 && t->n_bytes + len > t->cap_bytes) {
        t->n_bytes -= strlen(t->ring[t->head]) + 2;
        free(t->ring[t->head]);
        t->head = (t->head + 1) % t->cap;
        t->n--;
        t->n_dropped++;
    }
    if (t->n == t->cap) { /* grow, unrolling the ring */
        int64_t cap = t->cap ? 2 * t->cap : 1024;
        char **ring = sl_malloc((size_t)cap * sizeof *ring);
        for (int64_t i = 0; i < t->n; i++) ring[i] = t->ring[(t->head + i) % t->cap];
        free(t->ring);
        t->ring = ring, t->cap = cap, t->head = 0;
    }
    t->ring[(t->head + t->n) % t->cap] = s;
    t->n++;
    t->n_bytes += len;
}

static cJSON *event(const char *name, const char *ph, int pid, double tid, double ts_us) {
    cJSON *ev = cJSON_CreateObject();
    cJSON_AddStringToObject(ev, "name", name);
    cJSON_AddStringToObject(ev, "ph", ph);
    cJSON_AddNumberToObject(ev, "pid", pid);
    cJSON_AddNumberToObject(ev, "tid", tid);
    cJSON_AddNumberToObject(ev, "ts", ts_us);
    return ev;
}

static cJSON *span(engine_trace_t *t, const char *name, int pid, double tid, double t_start, double t_end) {
    cJSON *ev = event(name, "X", pid, tid, us(t, t_start));
    cJSON_AddNumberToObject(ev, "dur", us(t, t_end) - us(t, t_start));
    return ev;
}

/* Locks t when it records; false (unlocked) when it does not. */
static bool lock_on(engine_trace_t *t) {
    if (!trace_on(t)) return false;
    pthread_mutex_lock(&t->mu);
    if (t->on) return true;
    pthread_mutex_unlock(&t->mu);
    return false;
}

void trace_step(engine_trace_t *t, const sched_output_t *so, step_mix_t mix, int32_t n_sampled, double t_start,
                double t_end, double forward_s) {
    if (!lock_on(t)) return;
    for (int32_t s = 0; s < so->n; s++) {
        const request_t *r = so->reqs[s];
        if (step_decodes(r, so->n_new[s]) || r->t_arrival < t->t0) continue;
        cJSON *ev = span(t, "prefill chunk", 2, (double)(r->seq_no + 1), t_start, t_end);
        cJSON *args = cJSON_AddObjectToObject(ev, "args");
        cJSON_AddNumberToObject(args, "tokens", so->n_new[s]);
        cJSON_AddNumberToObject(args, "computed_before", r->n_computed);
        cJSON_AddNumberToObject(args, "batch_tokens", so->n_tokens);
        append(t, ev);
    }
    if (t_start >= t->t0) {
        cJSON *ev = span(t, "step", 1, 1, t_start, t_end);
        cJSON *args = cJSON_AddObjectToObject(ev, "args");
        cJSON_AddNumberToObject(args, "prefill_tokens", (double)mix.prefill);
        cJSON_AddNumberToObject(args, "decode_tokens", (double)mix.decode);
        cJSON_AddNumberToObject(args, "seqs", so->n);
        cJSON_AddNumberToObject(args, "sampled", n_sampled);
        cJSON_AddNumberToObject(args, "preempted", so->n_preempted);
        cJSON_AddNumberToObject(args, "forward_ms", forward_s * 1e3);
        append(t, ev);
    }
    pthread_mutex_unlock(&t->mu);
}

void trace_request_done(engine_trace_t *t, const request_t *r) {
    if (!lock_on(t)) return;
    if (r->t_arrival < t->t0) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    double tid = (double)(r->seq_no + 1), end = r->t_finished;
    double sched = r->t_first_scheduled > 0 ? r->t_first_scheduled : end;
    double first = r->t_first_token > 0 ? r->t_first_token : end;
    char name[160];
    snprintf(name, sizeof name, "%s[%d]", r->request_id ? r->request_id : "?", r->index);
    cJSON *meta = event("thread_name", "M", 2, tid, 0);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(meta, "args"), "name", name);
    append(t, meta);
    const struct { const char *name; double a, b; } phases[] = {
        {"queued", r->t_arrival, sched}, {"prefill", sched, first}, {"decode", first, end},
    };
    for (size_t i = 0; i < sizeof phases / sizeof phases[0]; i++) {
        cJSON *ev = span(t, phases[i].name, 2, tid, phases[i].a, phases[i].b);
        cJSON *args = cJSON_AddObjectToObject(ev, "args");
        cJSON_AddStringToObject(args, "request", name);
        cJSON_AddNumberToObject(args, "prompt_tokens", r->n_prompt);
        cJSON_AddNumberToObject(args, "cached_prompt_tokens", r->n_cached_prompt);
        cJSON_AddNumberToObject(args, "output_tokens", request_n_output(r));
        cJSON_AddNumberToObject(args, "preemptions", r->n_preemptions);
        cJSON_AddStringToObject(args, "finish_reason", finish_reason_str(r->finish) ? finish_reason_str(r->finish)
                                                                                     : "none");
        cJSON_AddNumberToObject(args, "e2e_ms", (end - r->t_arrival) * 1e3);
        append(t, ev);
    }
    pthread_mutex_unlock(&t->mu);
}

void engine_trace_http(engine_t *e, const engine_trace_http_t *h) {
    engine_trace_t *t = e ? e->trace : NULL;
    if (!lock_on(t)) return;
    if (h->t_start < t->t0) {
        pthread_mutex_unlock(&t->mu);
        return;
    }
    char name[300], id[24];
    snprintf(name, sizeof name, "%s %s", h->method ? h->method : "?", h->url ? h->url : "?");
    snprintf(id, sizeof id, "0x%llx", (unsigned long long)++t->next_http_id);
    const struct { const char *ph; double at; } marks[] = {{"b", h->t_start}, {"n", h->t_first_byte}, {"e", h->t_end}};
    for (size_t i = 0; i < sizeof marks / sizeof marks[0]; i++) {
        if (marks[i].at <= 0) continue; /* no response began */
        cJSON *ev = event(i == 1 ? "first byte" : name, marks[i].ph, 3, 1, us(t, marks[i].at));
        cJSON_AddStringToObject(ev, "cat", "http");
        cJSON_AddStringToObject(ev, "id", id);
        if (i == 2) {
            cJSON *args = cJSON_AddObjectToObject(ev, "args");
            cJSON_AddNumberToObject(args, "status", h->status);
            if (h->request_id) cJSON_AddStringToObject(args, "x_request_id", h->request_id);
            if (h->engine_request_id) cJSON_AddStringToObject(args, "engine_request", h->engine_request_id);
            cJSON_AddNumberToObject(args, "request_bytes", (double)h->request_bytes);
            cJSON_AddNumberToObject(args, "response_bytes", (double)h->response_bytes);
            cJSON_AddBoolToObject(args, "client_gone", h->client_gone);
            cJSON_AddNumberToObject(args, "ms", (h->t_end - h->t_start) * 1e3);
        }
        append(t, ev);
    }
    pthread_mutex_unlock(&t->mu);
}

/* The document, ring in order; frees the ring's events. Under t->mu. */
static void write_doc(engine_trace_t *t, FILE *f, const char *generator) {
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", f);
    static const char procs[] =
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"ts\":0,\"args\":{\"name\":\"engine\"}},\n"
        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"ts\":0,\"args\":{\"name\":\"steps\"}},\n"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"tid\":0,\"ts\":0,\"args\":{\"name\":\"requests\"}},\n"
        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":3,\"tid\":1,\"ts\":0,\"args\":{\"name\":\"http\"}}";
    fputs(procs, f);
    for (int64_t i = 0; i < t->n; i++) fprintf(f, ",\n%s", t->ring[(t->head + i) % t->cap]);
    fprintf(f, "\n],\"otherData\":{\"generator\":\"%s\",\"events\":%lld,\"dropped_oldest\":%lld}}\n", generator,
            (long long)t->n, (long long)t->n_dropped);
    ring_clear(t);
}

int engine_trace_start(engine_t *e, sl_err_t *err) {
    engine_trace_t *t = e->trace;
    pthread_mutex_lock(&t->mu);
    if (t->on) {
        if (t->f) sl_fail(err, "a trace is already recording: --trace %s, until the server stops", t->path);
        else sl_fail(err, "a trace is already recording: POST /lab/trace/stop ends it");
        pthread_mutex_unlock(&t->mu);
        return -1;
    }
    ring_clear(t);
    t->t0 = sl_now_s();
    __atomic_store_n(&t->on, true, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&t->mu);
    return 0;
}

char *engine_trace_stop(engine_t *e, size_t *len, sl_err_t *err) {
    engine_trace_t *t = e->trace;
    pthread_mutex_lock(&t->mu);
    if (!t->on || t->f) {
        if (t->f) sl_fail(err, "the trace of --trace %s records until the server stops", t->path);
        else sl_fail(err, "no trace is recording: POST /lab/trace/start begins one");
        pthread_mutex_unlock(&t->mu);
        return NULL;
    }
    __atomic_store_n(&t->on, false, __ATOMIC_RELEASE);
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    if (f) {
        write_doc(t, f, "servelab POST /lab/trace/stop");
        fclose(f);
    } else {
        ring_clear(t);
    }
    pthread_mutex_unlock(&t->mu);
    if (!buf) {
        sl_fail(err, "out of memory writing the trace");
        return NULL;
    }
    *len = n;
    return buf;
}

int trace_close(engine_trace_t *t, sl_err_t *err) {
    if (!t) return 0;
    int rc = 0;
    if (t->f) {
        write_doc(t, t->f, "servelab --trace");
        bool bad = ferror(t->f) != 0; /* a failed fprintf (a full disk) shows here, not always at fclose */
        if (fclose(t->f) != 0 || bad) rc = sl_fail(err, "--trace %s: writing the file failed: %s", t->path, strerror(errno));
    }
    ring_clear(t);
    pthread_mutex_destroy(&t->mu);
    free(t->path);
    free(t);
    return rc;
}
