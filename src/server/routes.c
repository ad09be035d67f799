/* routes.c - what each route does: parse with the OpenAI layer, submit, answer.
 *
 * Routes (vLLM's): GET /health, /metrics, /version, /v1/models; POST /v1/chat/completions,
 * /v1/completions, /tokenize, /detokenize. API keys guard /v1/... only, and a
 * failed check answers 401 {"error":"Unauthorized"} as vLLM does. An unknown
 * path is FastAPI's 404 {"detail":"Not Found"}, a known one with another method
 * its 405 with an Allow header. A completions request with a
 * list of prompts submits one engine stream per prompt; their events are
 * merged into one response (choice index = prompt * n + i, as vLLM).
 * The lab's server-side faults act here (docs/lab.md): http_error before a
 * request is parsed, tokenize_cost after its prompt is tokenized, and
 * stream_delay / stream_coalesce on its SSE events; one faults_mask() load per
 * POST request decides whether any of them looks further.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "http.h"
#include "servelab/http_checks.h"
#include "servelab/lab.h"
#include "servelab/metrics.h"
#include "servelab/openai.h"

struct routes_state {
    oai_ctx_t ctx;
    pthread_mutex_t rng_mu;
    uint64_t rng;
    char perm_hex[33];
    uint8_t (*key_digests)[HTTP_KEY_DIGEST_BYTES]; /* SHA-256 of each --api-key */
    uint8_t admin_digest[1][HTTP_KEY_DIGEST_BYTES];  /* SHA-256 of --admin-key */
};

typedef struct route_job {
    oai_request_t req;
    bool is_stream;
    int32_t n_streams;
    engine_stream_t **streams;
    bool *stream_done;
    oai_acc_t *acc;                 /* non-streaming */
    oai_stream_t *ost;              /* streaming */
    oai_chunks_t chunks;
    char *id;                       /* the response id (UTF-8; the JSON writers escape it) */
    char *log_id;                   /* the same, escaped for log lines (http_log_escape) */
    int64_t created;                /* unix seconds when the request was handled, as vLLM */
    bool finished;
    bool fed;                       /* streaming: every event, the usage and [DONE] framed */
    /* The lab's stream faults, read once when the stream starts. */
    bool coalesce;                  /* stream_coalesce: oai_stream merges events */
    int64_t delay_ms;               /* stream_delay: each SSE event held this long (0: off) */
    char **held;                    /* stream_delay: (n_held) framed events, [held_next, n_held) unsent */
    size_t *held_len;               /* (n_held) */
    int32_t n_held, cap_held, held_next;
    double release_s;               /* sl_now_s() when held[held_next] may go (0: not yet timed) */
} route_job_t;

static uint64_t next_rand(struct routes_state *rs) {
    pthread_mutex_lock(&rs->rng_mu);
    uint64_t x = rs->rng += 0x9e3779b97f4a7c15ull;
    pthread_mutex_unlock(&rs->rng_mu);
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

int routes_init(struct server *s, sl_err_t *err) {
    struct routes_state *rs = sl_calloc(1, sizeof *rs);
    oai_ctx_t *c = &rs->ctx;
    oai_tok_bind(&c->tok, s->tok);
    c->chat_template = s->tmpl;
    c->special_tokens = s->special_tokens;
    c->served_model_names = s->cfg.served_model_names;
    c->n_served_model_names = s->cfg.n_served_model_names;
    c->model_root = s->cfg.model_path;
    c->max_model_len = s->cfg.max_model_len;
    c->max_logprobs = SAMPLING_MAX_LOGPROBS;
    c->vocab_size = tok_vocab_size(s->tok);
    if (s->cfg.generation_config_dir && oai_gen_defaults_load(s->cfg.generation_config_dir, &c->gen, err)) {
        free(rs);
        return -1;
    }
    const oai_gen_defaults_t *g = &c->gen;
    if (g->has_temperature || g->has_top_p || g->has_top_k || g->has_min_p || g->has_repetition_penalty ||
        g->max_new_tokens > 0)
        LOG_WARNING("Default sampling parameters have been overridden by the model's Hugging Face generation "
                    "config recommended from the model creator. If this is not intended, please relaunch "
                    "with `--generation-config vllm`.");
    rs->key_digests = sl_calloc((size_t)(s->cfg.n_api_keys > 0 ? s->cfg.n_api_keys : 1), sizeof *rs->key_digests);
    for (int i = 0; i < s->cfg.n_api_keys; i++)
        http_key_digest(s->cfg.api_keys[i], strlen(s->cfg.api_keys[i]), rs->key_digests[i]);
    if (s->cfg.admin_key) http_key_digest(s->cfg.admin_key, strlen(s->cfg.admin_key), rs->admin_digest[0]);
    pthread_mutex_init(&rs->rng_mu, NULL);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    rs->rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
    snprintf(rs->perm_hex, sizeof rs->perm_hex, "%016llx%016llx", (unsigned long long)next_rand(rs),
             (unsigned long long)next_rand(rs));
    s->routes = rs;
    return 0;
}

void routes_free(struct server *s) {
    if (!s->routes) return;
    pthread_mutex_destroy(&s->routes->rng_mu);
    free(s->routes->key_digests);
    free(s->routes);
    s->routes = NULL;
}

enum MHD_Result routes_error(http_req_t *r, unsigned status, const char *type, const char *message,
                             const char *param) {
    oai_error_t e;
    oai_error_set(&e, (int)status, type, param, "%s", message);
    size_t len;
    char *body = oai_error_body(&e, &len);
    enum MHD_Result ret = http_respond(r, status, "application/json", body, len, NULL, NULL);
    free(body);
    return ret;
}

static enum MHD_Result respond_oai_error(http_req_t *r, const oai_error_t *e, const char *hdr,
                                         const char *val) {
    size_t len;
    char *body = oai_error_body(e, &len);
    enum MHD_Result ret = http_respond(r, (unsigned)e->status, "application/json", body, len, hdr, val);
    free(body);
    return ret;
}

static enum MHD_Result respond_json(http_req_t *r, unsigned status, char *body, size_t len) {
    enum MHD_Result ret = http_respond(r, status, "application/json", body, len, NULL, NULL);
    free(body);
    return ret;
}

/* vLLM's API-key check: the scheme in any case, the key's SHA-256 compared in
 * constant time (http_bearer_ok). */
static bool authorized(http_req_t *r) {
    const server_config_t *c = &r->srv->cfg;
    if (c->n_api_keys == 0) return true;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    return http_bearer_ok(h, (const uint8_t(*)[HTTP_KEY_DIGEST_BYTES])r->srv->routes->key_digests, c->n_api_keys);
}

/* ---- engine jobs ------------------------------------------------------------------ */

static void log_received(http_req_t *r, route_job_t *j) {
    const server_config_t *c = &r->srv->cfg;
    for (int32_t i = 0; i < j->req.n_prompts; i++) {
        const oai_prompt_t *p = &j->req.prompts[i];
        int plen = c->max_log_len >= 0 && (size_t)c->max_log_len < p->text_len ? c->max_log_len : (int)p->text_len;
        char ids[256];
        int n = 0;
        n += snprintf(ids + n, sizeof ids - (size_t)n, "[");
        int32_t shown = c->max_log_len >= 0 && c->max_log_len < p->n_ids ? c->max_log_len : p->n_ids;
        for (int32_t k = 0; k < shown && n < (int)sizeof ids - 16; k++)
            n += snprintf(ids + n, sizeof ids - (size_t)n, "%s%d", k ? ", " : "", p->ids[k]);
        snprintf(ids + n, sizeof ids - (size_t)n, "%s]", shown < p->n_ids ? ", ..." : "");
        const sampling_params_t *sp = &j->req.params;
        char seed[24] = "None", logprobs[16] = "None", suffix[16] = "";
        if (sp->has_seed) snprintf(seed, sizeof seed, "%llu", (unsigned long long)sp->seed);
        if (sp->logprobs >= 0) snprintf(logprobs, sizeof logprobs, "%d", sp->logprobs);
        if (j->req.n_prompts > 1) snprintf(suffix, sizeof suffix, "-%d", i); /* vLLM: one id per prompt */
        char temp[32], top_p[32], min_p[32]; /* Python's float repr, as vLLM's log prints them */
        sl_format_py_float(sp->temperature, 1, temp, sizeof temp);
        sl_format_py_float(sp->top_p, 1, top_p, sizeof top_p);
        sl_format_py_float(sp->min_p, 1, min_p, sizeof min_p);
        LOG_INFO("Received request %s%s: prompt: '%.*s', params: SamplingParams(n=%d, temperature=%s, "
                 "top_p=%s, top_k=%d, min_p=%s, seed=%s, max_tokens=%d, min_tokens=%d, logprobs=%s), "
                 "prompt_token_ids: %s, lora_request: None.",
                 j->log_id, suffix, plen, p->text ? p->text : "", sp->n, temp, top_p, sp->top_k, min_p, seed,
                 p->max_tokens, sp->min_tokens, logprobs, ids);
    }
}

static void job_free(struct server *s, route_job_t *j, bool aborted) {
    for (int32_t i = 0; i < j->n_streams; i++)
        if (j->streams[i]) engine_stream_release(s->engine, j->streams[i]);
    if (aborted && s->cfg.log_requests) LOG_INFO("Aborted request %s.", j->log_id);
    free(j->streams);
    free(j->stream_done);
    if (j->acc) oai_acc_free(j->acc);
    if (j->ost) oai_stream_free(j->ost);
    for (int32_t i = j->held_next; i < j->n_held; i++) free(j->held[i]);
    free(j->held);
    free(j->held_len);
    oai_chunks_free(&j->chunks);
    oai_request_free(&j->req);
    free(j->id);
    free(j->log_id);
    free(j);
}

const char *routes_engine_id(const http_req_t *r) { return r->job ? r->job->log_id : NULL; }

void routes_release(http_req_t *r) {
    if (!r->job) return;
    job_free(r->srv, r->job, !r->job->finished);
    r->job = NULL;
}

/* Feeds every queued event into the job; returns true when all streams are done. */
static bool drain(http_req_t *r, route_job_t *j) {
    bool all_done = true;
    for (int32_t i = 0; i < j->n_streams; i++) {
        if (j->stream_done[i]) continue;
        for (engine_output_t *o; (o = engine_stream_try_next(j->streams[i])); engine_output_free(o)) {
            if (j->is_stream) {
                oai_stream_event(j->ost, i, o, &j->chunks);
            } else {
                oai_acc_add(j->acc, i, o);
            }
        }
        if (engine_stream_done(j->streams[i])) j->stream_done[i] = true;
        else all_done = false;
    }
    (void)r;
    return all_done;
}

/* True when the client closed its end (or the socket failed). A parked
 * non-streaming request writes nothing until it is done, so the socket is
 * looked at when the ticker wakes it (every keepalive_s, not on each token
 * event): EOF means the client is gone and its request is aborted, as vLLM
 * does for a client that disconnects from a non-streaming request. */
static bool peer_closed(http_req_t *r) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(r->conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return false;
    char b;
    ssize_t n = recv(ci->connect_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static enum MHD_Result job_continue(http_req_t *r) {
    route_job_t *j = r->job;
    pthread_mutex_lock(&r->mu);
    bool ticked = r->tick;
    pthread_mutex_unlock(&r->mu);
    if (ticked && !j->finished && peer_closed(r)) {
        r->client_gone = true;
        routes_release(r); /* aborts the engine work; its blocks are freed at the next step */
        return MHD_NO;     /* MHD closes the connection */
    }
    for (;;) {
        if (drain(r, j)) {
            j->finished = true;
            size_t len;
            char *body = oai_acc_body(j->acc, &r->srv->routes->ctx, j->id, j->created, &len);
            return respond_json(r, 200, body, len);
        }
        if (http_park(r)) return MHD_YES;
        if (r->srv->stopping) {
            oai_error_t e;
            oai_error_set(&e, 503, "ServiceUnavailableError", NULL, "The server is shutting down.");
            return respond_oai_error(r, &e, NULL, NULL);
        }
    }
}

/* One SSE event, framed: onto r->out, or under stream_delay to the back of
 * the held queue. */
static void sse_event(http_req_t *r, route_job_t *j, const char *json, size_t len) {
    if (!j->delay_ms) {
        http_out_append(r, "data: ", 6);
        http_out_append(r, json, len);
        http_out_append(r, "\n\n", 2);
        return;
    }
    if (j->n_held == j->cap_held) {
        j->cap_held = j->cap_held ? 2 * j->cap_held : 16;
        j->held = sl_realloc(j->held, (size_t)j->cap_held * sizeof *j->held);
        j->held_len = sl_realloc(j->held_len, (size_t)j->cap_held * sizeof *j->held_len);
    }
    char *e = sl_malloc(len + 8);
    memcpy(e, "data: ", 6);
    memcpy(e + 6, json, len);
    memcpy(e + 6 + len, "\n\n", 2);
    j->held[j->n_held] = e;
    j->held_len[j->n_held++] = len + 8;
}

/* stream_delay: a slow link between the engine and the client. The event at
 * the front of the queue goes out `delay_ms` after it reached the front (after
 * the one before it went, or after it arrived when the queue was empty), one
 * event at a time; until then the connection is parked and the ticker resumes
 * it at that time (http_wake_at), so no thread waits on it. */
static void release_held(http_req_t *r, route_job_t *j) {
    if (j->held_next == j->n_held) return;
    double now = sl_now_s();
    if (j->release_s == 0) j->release_s = now + (double)j->delay_ms * 1e-3;
    if (now < j->release_s) {
        http_wake_at(r, j->release_s);
        return;
    }
    http_out_append(r, j->held[j->held_next], j->held_len[j->held_next]);
    free(j->held[j->held_next++]);
    j->release_s = 0;
    if (j->held_next == j->n_held) j->n_held = j->held_next = 0;
    faults_count(r->srv->cfg.faults, FAULT_STREAM_DELAY, 1);
}

/* GET /lab/events: the engine's snapshot as an SSE event whenever it has
 * changed, looked at LAB_EVENTS_HZ times a second (the ticker wakes the
 * parked connection); the engine refreshes it at most 4 times a second. */
#define LAB_EVENTS_HZ 4.0
static void lab_events_fill(http_req_t *r) {
    if (r->srv->stopping) {
        r->sse_finished = true;
        return;
    }
    double now = sl_now_s();
    if (now >= r->lab_next) {
        char *text = engine_lab_snapshot(r->srv->engine);
        if (text && (!r->lab_last || strcmp(text, r->lab_last) != 0)) {
            http_out_append(r, "data: ", 6);
            http_out_append(r, text, strlen(text));
            http_out_append(r, "\n\n", 2);
            free(r->lab_last);
            r->lab_last = text;
        } else {
            free(text);
        }
        r->lab_next = now + 1.0 / LAB_EVENTS_HZ;
    }
    http_wake_at(r, r->lab_next);
}

void routes_stream_fill(http_req_t *r) {
    if (r->lab_events) {
        lab_events_fill(r);
        return;
    }
    route_job_t *j = r->job;
    if (!j) {
        r->sse_finished = true;
        return;
    }
    if (!j->fed) {
        bool done = drain(r, j);
        if (j->coalesce) {
            if (done) oai_stream_flush(j->ost, &j->chunks);
            int64_t merged = oai_stream_take_coalesced(j->ost);
            if (merged > 0) faults_count(r->srv->cfg.faults, FAULT_STREAM_COALESCE, merged);
        }
        for (int32_t k = 0; k < j->chunks.n; k++) sse_event(r, j, j->chunks.json[k], j->chunks.len[k]);
        oai_chunks_clear(&j->chunks);
        if (done) {
            j->finished = true;
            j->fed = true;
            size_t len;
            char *usage = oai_stream_usage(j->ost, &len);
            if (usage) sse_event(r, j, usage, len);
            free(usage);
            sse_event(r, j, "[DONE]", 6);
        }
    }
    if (j->delay_ms) release_held(r, j);
    if (j->fed && j->held_next == j->n_held) r->sse_finished = true;
}

/* stream_delay and stream_coalesce, read once when a stream starts: a change
 * applies to the streams that start after it. */
static void stream_faults(http_req_t *r, route_job_t *j, uint32_t lab) {
    faults_t *f = r->srv->cfg.faults;
    fault_params_t p;
    if ((lab & FAULT_BIT(FAULT_STREAM_COALESCE)) && faults_get(f, FAULT_STREAM_COALESCE, &p, NULL, NULL)) {
        oai_stream_set_coalesce(j->ost, (int32_t)p.tokens);
        j->coalesce = true;
    }
    if ((lab & FAULT_BIT(FAULT_STREAM_DELAY)) && faults_get(f, FAULT_STREAM_DELAY, &p, NULL, NULL))
        j->delay_ms = p.ms;
}

/* tokenize_cost: real CPU work per prompt token, on the MHD worker thread that
 * has just tokenized the prompt, so the request reaches the engine that much
 * later (TTFT, counted from arrival, grows) and process_cpu_seconds_total
 * moves. MHD's pool (n_threads workers, 2 by default) serves each connection on
 * one worker: while it burns, the other connections of that worker wait, as
 * behind a busy tokenizer, and those of the other workers go on. */
static void tokenize_cost(http_req_t *r, const oai_request_t *req) {
    faults_t *f = r->srv->cfg.faults;
    fault_params_t p;
    if (!faults_get(f, FAULT_TOKENIZE_COST, &p, NULL, NULL)) return;
    int64_t n = 0;
    for (int32_t i = 0; i < req->n_prompts; i++) {
        faults_burn_cpu(p.us_per_token * req->prompts[i].n_ids, req->prompts[i].ids, req->prompts[i].n_ids);
        n += req->prompts[i].n_ids;
    }
    faults_count(f, FAULT_TOKENIZE_COST, n);
}

/* The job's ids. An X-Request-Id header is read as vLLM reads it (latin-1, so
 * any bytes give valid UTF-8: http_latin1_to_utf8) and wins over the body's
 * request_id; the log lines get an escaped copy. The header is echoed back as
 * it came only when it is a short valid field value (http_request_id_echo_ok). */
static void response_ids(http_req_t *r, route_job_t *j, oai_kind_t kind) {
    struct routes_state *rs = r->srv->routes;
    const char *xid = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "X-Request-Id");
    char *xid_utf8 = xid && *xid ? http_latin1_to_utf8(xid, strlen(xid)) : NULL;
    j->id = oai_response_id(kind == OAI_CHAT ? "chatcmpl" : "cmpl", xid_utf8, j->req.request_id, next_rand(rs),
                            next_rand(rs));
    j->log_id = http_log_escape(j->id, strlen(j->id));
    free(xid_utf8);
    if (xid && *xid && http_request_id_echo_ok(xid)) r->request_id = xid; /* MHD's copy lives as long as r */
}

/* `lab`: the faults' mask, loaded once for this request. */
static enum MHD_Result start_job(http_req_t *r, oai_kind_t kind, uint32_t lab) {
    double t_arrival = sl_now_s(); /* vLLM's arrival: before parsing and tokenization */
    struct server *s = r->srv;
    struct routes_state *rs = s->routes;
    route_job_t *j = sl_calloc(1, sizeof *j);
    oai_error_t e;
    if (oai_request_parse(&rs->ctx, kind, r->body ? r->body : "", r->len, &j->req, &e)) {
        job_free(s, j, false);
        return respond_oai_error(r, &e, NULL, NULL);
    }
    if ((lab & FAULT_BIT(FAULT_TOKENIZE_COST)) && kind != OAI_DETOKENIZE) tokenize_cost(r, &j->req);
    char *ignored = oai_ignored_fields_message(&j->req);
    if (ignored) {
        LOG_WARNING("%s", ignored);
        free(ignored);
    }
    if (kind == OAI_TOKENIZE || kind == OAI_DETOKENIZE) {
        size_t len;
        char *body = kind == OAI_TOKENIZE ? oai_tokenize_body(&rs->ctx, &j->req, &len)
                                          : oai_detokenize_body(&j->req, &len);
        job_free(s, j, false);
        return respond_json(r, 200, body, len);
    }
    if (s->cfg.max_waiting_requests > 0) {
        engine_stats_t st;
        engine_get_stats(s->engine, &st);
        if (st.n_waiting >= s->cfg.max_waiting_requests) {
            job_free(s, j, false);
            oai_error_set(&e, 503, "ServiceUnavailableError", NULL,
                          "The server is overloaded: %d requests are waiting (--max-waiting-requests). "
                          "Retry later.", st.n_waiting);
            return respond_oai_error(r, &e, "Retry-After", "1");
        }
    }
    response_ids(r, j, kind);
    j->created = (int64_t)time(NULL);
    if (s->cfg.log_requests) log_received(r, j);

    j->is_stream = j->req.stream;
    j->n_streams = j->req.n_prompts;
    j->streams = sl_calloc((size_t)j->n_streams, sizeof *j->streams);
    j->stream_done = sl_calloc((size_t)j->n_streams, sizeof *j->stream_done);
    r->job = j;
    for (int32_t i = 0; i < j->n_streams; i++) {
        sampling_params_t p = oai_request_params(&j->req, i);
        sl_err_t err;
        char *engine_id = NULL; /* named in the engine's log lines: the log-safe id */
        if (j->n_streams > 1 && asprintf(&engine_id, "%s-%d", j->log_id, i) < 0) sl_die("out of memory");
        engine_request_info_t info = {.request_id = engine_id ? engine_id : j->log_id, .t_arrival = t_arrival};
        j->streams[i] = engine_submit_ex(s->engine, j->req.prompts[i].ids, j->req.prompts[i].n_ids, &p, &info,
                                         &err);
        free(engine_id);
        if (!j->streams[i]) {
            routes_release(r);
            return routes_error(r, 400, "BadRequestError", err.msg, NULL);
        }
        http_watch_stream(r, j->streams[i]);
    }
    if (s->cfg.log_requests) LOG_INFO("Added request %s.", j->log_id);
    if (j->is_stream) {
        j->ost = oai_stream_new(&rs->ctx, &j->req, j->id, j->created);
        if (lab) stream_faults(r, j, lab);
        return http_start_sse(r);
    }
    j->acc = oai_acc_new(&j->req);
    return job_continue(r);
}

static enum MHD_Result method_not_allowed(http_req_t *r, const char *allow);

/* ---- the lab's admin API (/admin/faults) ------------------------------------------ */

static enum MHD_Result admin_faults(http_req_t *r) {
    struct server *s = r->srv;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    if (!http_bearer_ok(h, (const uint8_t(*)[HTTP_KEY_DIGEST_BYTES])s->routes->admin_digest, 1)) {
        static const char body[] = "{\"error\":\"Unauthorized\"}";
        return http_respond(r, 401, "application/json", body, sizeof body - 1, NULL, NULL);
    }
    faults_t *f = s->cfg.faults;
    const char *name = r->url[strlen("/admin/faults")] == '/' ? r->url + strlen("/admin/faults/") : NULL;
    char err[768];
    if (!name && !strcmp(r->method, "GET")) {
        char *body = faults_list_json(f);
        return respond_json(r, 200, body, strlen(body));
    }
    if (!name && !strcmp(r->method, "POST")) {
        fault_spec_t spec;
        if (fault_spec_from_json(r->body ? r->body : "", r->len, &spec, err, sizeof err))
            return routes_error(r, 400, "BadRequestError", err, NULL);
        faults_set(f, &spec);
        char *body = faults_list_json(f);
        return respond_json(r, 200, body, strlen(body));
    }
    if (!strcmp(r->method, "DELETE")) {
        fault_id_t id;
        if (!name) faults_clear_all(f);
        else if (fault_lookup(name, &id, err, sizeof err)) return routes_error(r, 400, "BadRequestError", err, NULL);
        else faults_clear(f, id);
        char *body = faults_list_json(f);
        return respond_json(r, 200, body, strlen(body));
    }
    return method_not_allowed(r, name ? "DELETE" : "GET, POST, DELETE");
}

static enum MHD_Result not_found(http_req_t *r);

/* The lab page, src/server/lab_page.html as compiled in (CMakeLists.txt). */
extern const unsigned char lab_page_html[];
extern const size_t lab_page_html_len;

/* The lab routes' key check: with --admin-key, a Bearer header of it. */
static bool lab_authorized(http_req_t *r) {
    struct server *s = r->srv;
    const char *h = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Authorization");
    return !s->cfg.admin_key ||
           http_bearer_ok(h, (const uint8_t(*)[HTTP_KEY_DIGEST_BYTES])s->routes->admin_digest, 1);
}

static enum MHD_Result lab_unauthorized(http_req_t *r) {
    static const char body[] = "{\"error\":\"Unauthorized\"}";
    return http_respond(r, 401, "application/json", body, sizeof body - 1, NULL, NULL);
}

/* GET /lab/snapshot and /lab/events (--enable-lab-ui): the engine's newest
 * snapshot, once or as a stream of SSE events; read-only, behind the admin
 * key when one is set. */
static enum MHD_Result lab_snapshot(http_req_t *r, bool events) {
    struct server *s = r->srv;
    if (strcmp(r->method, "GET") != 0) return method_not_allowed(r, "GET");
    if (!lab_authorized(r)) return lab_unauthorized(r);
    if (events) {
        r->lab_events = true;
        return http_start_sse(r);
    }
    char *body = engine_lab_snapshot(s->engine);
    if (!body) return not_found(r);
    return respond_json(r, 200, body, strlen(body));
}

/* POST /lab/trace/start and /lab/trace/stop (--enable-lab-ui, behind the
 * admin key when one is set): a trace recorded in memory between the two
 * (src/engine/trace.c), the stop's body being the Chrome/Perfetto JSON, so
 * nothing is written on the server's disk. A start while one records, or a
 * stop with none, is a 409 (OpenAI's error body, type "ConflictError"). */
static enum MHD_Result lab_trace(http_req_t *r, bool start) {
    struct server *s = r->srv;
    if (strcmp(r->method, "POST") != 0) return method_not_allowed(r, "POST");
    if (!lab_authorized(r)) return lab_unauthorized(r);
    sl_err_t err;
    if (start) {
        if (engine_trace_start(s->engine, &err)) return routes_error(r, 409, "ConflictError", err.msg, NULL);
        static const char body[] = "{\"status\":\"recording\"}";
        return http_respond(r, 200, "application/json", body, sizeof body - 1, NULL, NULL);
    }
    size_t len;
    char *doc = engine_trace_stop(s->engine, &len, &err);
    if (!doc) return routes_error(r, 409, "ConflictError", err.msg, NULL);
    enum MHD_Result ret = http_respond(r, 200, "application/json", doc, len, "Content-Disposition",
                                       "attachment; filename=\"servelab-trace.json\"");
    free(doc);
    return ret;
}

/* http_error (lab): a POST request under /v1/ failed before it reaches the engine. */
static bool inject_http_error(http_req_t *r, uint32_t lab, enum MHD_Result *ret) {
    faults_t *f = r->srv->cfg.faults;
    int status;
    const char *type, *message;
    if (!(lab & FAULT_BIT(FAULT_HTTP_ERROR)) || !faults_http_error_draw(f, &status, &type, &message))
        return false;
    *ret = routes_error(r, (unsigned)status, type, message, NULL);
    return true;
}

/* ---- dispatch ------------------------------------------------------------------------ */

static enum MHD_Result not_found(http_req_t *r) {
    static const char body[] = "{\"detail\":\"Not Found\"}";
    return http_respond(r, 404, "application/json", body, sizeof body - 1, NULL, NULL);
}

/* FastAPI's 405: Starlette's Route names the route's methods in Allow (", "
 * between them; each route here has one). */
static enum MHD_Result method_not_allowed(http_req_t *r, const char *allow) {
    static const char body[] = "{\"detail\":\"Method Not Allowed\"}";
    return http_respond(r, 405, "application/json", body, sizeof body - 1, "Allow", allow);
}

enum MHD_Result routes_dispatch(http_req_t *r) {
    if (r->job) return job_continue(r); /* a parked non-streaming request, resumed */
    struct server *s = r->srv;
    const char *url = r->url;
    bool get = !strcmp(r->method, "GET"), post = !strcmp(r->method, "POST");
    if (!strncmp(url, "/v1/", 4) && strcmp(r->method, "OPTIONS") != 0 && !authorized(r)) {
        static const char body[] = "{\"error\":\"Unauthorized\"}";
        return http_respond(r, 401, "application/json", body, sizeof body - 1, NULL, NULL);
    }
    if (!strcmp(url, "/health")) {
        if (!get) return method_not_allowed(r, "GET");
        bool alive = engine_is_alive(s->engine);
        return http_respond(r, alive ? 200 : 503, NULL, "", 0, NULL, NULL);
    }
    if (!strcmp(url, "/metrics") || !strcmp(url, "/metrics/")) {
        if (!get) return method_not_allowed(r, "GET");
        if (!s->cfg.metrics) return not_found(r);
        const char *accept = MHD_lookup_connection_value(r->conn, MHD_HEADER_KIND, "Accept");
        bool om = metrics_accept_openmetrics(accept);
        size_t len;
        char *body = metrics_render(s->cfg.metrics, om, &len);
        enum MHD_Result ret = http_respond(r, 200, om ? METRICS_CONTENT_TYPE_OPENMETRICS : METRICS_CONTENT_TYPE_TEXT,
                                           body, len, NULL, NULL);
        free(body);
        return ret;
    }
    if (!strcmp(url, "/version")) {
        if (!get) return method_not_allowed(r, "GET");
        size_t len;
        char *body = oai_version_body(SERVELAB_VERSION, &len);
        return respond_json(r, 200, body, len);
    }
    if (!strcmp(url, "/v1/models")) {
        if (!get) return method_not_allowed(r, "GET");
        size_t len;
        char *body = oai_models_body(&s->routes->ctx, s->created, s->routes->perm_hex, &len);
        return respond_json(r, 200, body, len);
    }
    struct { const char *path; oai_kind_t kind; } posts[] = {
        {"/v1/chat/completions", OAI_CHAT}, {"/v1/completions", OAI_COMPLETION},
        {"/tokenize", OAI_TOKENIZE},        {"/detokenize", OAI_DETOKENIZE},
    };
    for (size_t i = 0; i < sizeof posts / sizeof posts[0]; i++) {
        if (strcmp(url, posts[i].path) != 0) continue;
        if (!post) return method_not_allowed(r, "POST");
        enum MHD_Result ret;
        uint32_t lab = faults_mask(s->cfg.faults); /* the lab's one look per request */
        if (!strncmp(url, "/v1/", 4) && inject_http_error(r, lab, &ret)) return ret;
        return start_job(r, posts[i].kind, lab);
    }
    if (s->cfg.enable_fault_injection && (!strcmp(url, "/admin/faults") || !strncmp(url, "/admin/faults/", 14)))
        return admin_faults(r);
    if (s->cfg.enable_lab_ui && !strcmp(url, "/lab/snapshot")) return lab_snapshot(r, false);
    if (s->cfg.enable_lab_ui && !strcmp(url, "/lab/events")) return lab_snapshot(r, true);
    if (s->cfg.enable_lab_ui && !strcmp(url, "/lab/trace/start")) return lab_trace(r, true);
    if (s->cfg.enable_lab_ui && !strcmp(url, "/lab/trace/stop")) return lab_trace(r, false);
    if (s->cfg.enable_lab_ui && (!strcmp(url, "/lab") || !strcmp(url, "/lab/"))) {
        /* No data in it (the snapshot route holds the key check), so no key to load it. */
        if (strcmp(r->method, "GET") != 0) return method_not_allowed(r, "GET");
        return http_respond(r, 200, "text/html; charset=utf-8", (const char *)lab_page_html, lab_page_html_len, NULL,
                            NULL);
    }
    return not_found(r);
}
