/* trace.c - the engine's trace (--trace FILE): Chrome / Perfetto trace-event
 * JSON, openable in ui.perfetto.dev or chrome://tracing.
 *
 * What it holds (timestamps in microseconds since the trace opened):
 * - pid 1 "engine", tid 1 "steps": one complete event ("X") per engine step,
 *   from the step's start (before scheduling) to the end of its forward and
 *   sampling, with the batch composition as args: prefill and decode tokens,
 *   sequences, sampled rows, preemptions, the forward's milliseconds;
 * - pid 2 "requests", one track per sequence (named "<request id>[<index>]"):
 *   its lifecycle as three phases that
 *   partition arrival to finish, so they sum to its e2e latency: "queued"
 *   (arrival to first scheduled), "prefill" (to the first token), "decode"
 *   (to the finish); inside them a "prefill chunk" event for every step that
 *   computed prompt tokens of it (a recompute after a preemption too); tid 0
 *   is the process's own metadata, so sequence s is tid s + 1. The
 *   phases carry the request's figures (tokens, cached prompt tokens,
 *   preemptions, finish reason).
 * A request's preemptions are counted in its phases' args and in the steps'
 * "preempted", not placed in time. The HTTP side is not traced.
 *
 * Bounded: events are kept as JSON text in a ring; past --trace-max-mb the
 * oldest go first (the file says how many). Written once, when the engine is
 * freed (a server's shutdown), by the engine thread's owner: the engine
 * thread alone appends, so no lock.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

struct engine_trace {
    FILE *f;
    char *path;
    double t0;
    size_t cap_bytes, n_bytes;
    char **ring;                /* events [head, head + n) mod cap */
    int64_t head, n, cap;
    int64_t n_dropped;
};

engine_trace_t *trace_open(const char *path, size_t cap_bytes, sl_err_t *err) {
    FILE *f = fopen(path, "w");
    if (!f) {
        sl_fail(err, "--trace %s: cannot write the file: %s", path, strerror(errno));
        return NULL;
    }
    engine_trace_t *t = sl_calloc(1, sizeof *t);
    t->f = f;
    t->path = sl_strdup(path);
    t->t0 = sl_now_s();
    t->cap_bytes = cap_bytes;
    return t;
}

static double us(const engine_trace_t *t, double s) { return (s - t->t0) * 1e6; }

/* Takes ownership of ev (freed here). */
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

void trace_step(engine_trace_t *t, const sched_output_t *so, step_mix_t mix, int32_t n_sampled, double t_start,
                double t_end, double forward_s) {
    for (int32_t s = 0; s < so->n; s++) {
        const request_t *r = so->reqs[s];
        if (step_decodes(r, so->n_new[s])) continue;
        cJSON *ev = span(t, "prefill chunk", 2, (double)(r->seq_no + 1), t_start, t_end);
        cJSON *args = cJSON_AddObjectToObject(ev, "args");
        cJSON_AddNumberToObject(args, "tokens", so->n_new[s]);
        cJSON_AddNumberToObject(args, "computed_before", r->n_computed);
        cJSON_AddNumberToObject(args, "batch_tokens", so->n_tokens);
        append(t, ev);
    }
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

void trace_request_done(engine_trace_t *t, const request_t *r) {
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
}

int trace_close(engine_trace_t *t, sl_err_t *err) {
    if (!t) return 0;
    fputs("{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n", t->f);
    const char *procs = "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"ts\":0,\"args\":{\"name\":\"engine\"}},\n"
                        "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":1,\"tid\":1,\"ts\":0,\"args\":{\"name\":\"steps\"}},\n"
                        "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":2,\"tid\":0,\"ts\":0,\"args\":{\"name\":\"requests\"}}";
    fputs(procs, t->f);
    for (int64_t i = 0; i < t->n; i++) {
        char *s = t->ring[(t->head + i) % t->cap];
        fprintf(t->f, ",\n%s", s);
        free(s);
    }
    fprintf(t->f, "\n],\"otherData\":{\"generator\":\"servelab --trace\",\"events\":%lld,\"dropped_oldest\":%lld}}\n",
            (long long)t->n, (long long)t->n_dropped);
    int rc = 0;
    bool bad = ferror(t->f) != 0; /* a failed fprintf (a full disk) shows here, not always at fclose */
    if (fclose(t->f) != 0 || bad) rc = sl_fail(err, "--trace %s: writing the file failed: %s", t->path, strerror(errno));
    free(t->ring);
    free(t->path);
    free(t);
    return rc;
}
