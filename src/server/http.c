/* http.c - libmicrohttpd plumbing: connections, bodies, suspend/resume, SSE, shutdown.
 *
 * The daemon runs an internal epoll thread pool. A request's body is gathered
 * (up to max_request_bytes: 413 beyond), then handed to routes.c. A request
 * that waits on the engine parks its connection (MHD_suspend_connection) and
 * is resumed by the engine thread's notify callback, or by the ticker every
 * keepalive_s so that a closed socket is noticed and a streaming client gets
 * an SSE comment. A connection that ends before its request finished aborts
 * the request (its KV blocks are freed at the engine's next step). The ticker
 * also enforces the deadlines on receiving a request (http_conn.c).
 */
#define _GNU_SOURCE
#include "http.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "servelab/http_checks.h"
#include "servelab/metrics.h"
#include "servelab/openai.h"

static void conn_notify(void *user);

/* ---- waking parked connections ------------------------------------------------ */

/* Parks the connection unless something arrived since the caller last looked.
 * Returns true when it parked. Called on an MHD thread from a callback. */
bool http_park(http_req_t *r) {
    pthread_mutex_lock(&r->mu);
    bool parked = false;
    if (!r->pending && !r->srv->stopping) {
        r->suspended = true;
        MHD_suspend_connection(r->conn);
        parked = true;
    }
    r->pending = false;
    r->tick = false; /* a tick only had to bring the connection back to MHD's loop */
    pthread_mutex_unlock(&r->mu);
    return parked;
}

static void wake(http_req_t *r, bool tick) {
    pthread_mutex_lock(&r->mu);
    if (tick) r->tick = true;
    else r->pending = true;
    if (r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
    pthread_mutex_unlock(&r->mu);
}

static void conn_notify(void *user) { wake(user, false); }

void http_watch_stream(http_req_t *r, engine_stream_t *st) {
    engine_stream_set_notify(st, conn_notify, r);
}

void http_wake_at(http_req_t *r, double at) {
    server_t *s = r->srv;
    pthread_mutex_lock(&s->mu);
    if (r->wake_at == 0) s->n_timed++;
    r->wake_at = at;
    pthread_cond_broadcast(&s->cv); /* the ticker may have to wake sooner */
    pthread_mutex_unlock(&s->mu);
}

/* Waits on s->cv (s->mu held) for at most `seconds`. */
static void ticker_wait(server_t *s, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    double when = (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9 + (seconds > 0 ? seconds : 0);
    ts.tv_sec = (time_t)when;
    ts.tv_nsec = (long)((when - (double)ts.tv_sec) * 1e9);
    pthread_cond_timedwait(&s->cv, &s->mu, &ts);
}

/* Every keepalive_s: wakes each parked request (SSE comment, disconnect check).
 * Every http_conns_period_s: enforces the request head and body deadlines.
 * At each request's wake_at (http_wake_at): resumes it; the live list is only
 * walked for that while some request has one (n_timed). */
static void *ticker_main(void *arg) {
    server_t *s = arg;
    double period_s = http_conns_period_s(&s->cfg);
    double next_tick = sl_now_s() + s->cfg.keepalive_s, next_enforce = sl_now_s() + period_s;
    pthread_mutex_lock(&s->mu);
    while (!s->ticker_stop) {
        double next = next_tick < next_enforce ? next_tick : next_enforce;
        if (s->n_timed > 0)
            for (http_req_t *r = s->live; r; r = r->next)
                if (r->wake_at > 0 && r->wake_at < next) next = r->wake_at;
        ticker_wait(s, next - sl_now_s());
        if (s->ticker_stop) break;
        double now = sl_now_s();
        if (s->n_timed > 0)
            for (http_req_t *r = s->live; r; r = r->next)
                if (r->wake_at > 0 && r->wake_at <= now) {
                    r->wake_at = 0;
                    s->n_timed--;
                    wake(r, false);
                }
        if (now >= next_enforce) {
            pthread_mutex_unlock(&s->mu);
            http_conns_enforce(s);
            pthread_mutex_lock(&s->mu);
            next_enforce = now + period_s;
        }
        if (now >= next_tick) {
            for (http_req_t *r = s->live; r; r = r->next) wake(r, true);
            next_tick = now + s->cfg.keepalive_s;
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

/* ---- request lifetime ------------------------------------------------------------ */

static http_req_t *req_new(server_t *s, struct MHD_Connection *conn, const char *method,
                           const char *url) {
    http_req_t *r = sl_calloc(1, sizeof *r);
    r->srv = s;
    r->conn = conn;
    r->t_start = sl_now_s();
    snprintf(r->method, sizeof r->method, "%s", method);
    snprintf(r->url, sizeof r->url, "%s", url);
    http_peer(conn, r->peer, sizeof r->peer);
    r->hc = http_conn_of(conn);
    http_conn_enter(s, r->hc, HTTP_PHASE_BODY); /* the head is in: the body's deadline starts */
    pthread_mutex_init(&r->mu, NULL);
    pthread_mutex_lock(&s->mu);
    r->next = s->live;
    if (s->live) s->live->prev = r;
    s->live = r;
    s->n_inflight++;
    pthread_mutex_unlock(&s->mu);
    return r;
}

/* ---- HTTP metrics ------------------------------------------------------------------ */

/* vLLM instruments its app with prometheus-fastapi-instrumentator
 * (excluded_handlers /metrics /health /load /ping /version): statuses grouped
 * as "2xx", untemplated paths as handler "none", sizes from Content-Length
 * only (0 for a streamed response), latency until the response was sent. */
static void http_metrics_init(server_t *s) {
    metrics_t *m = s->cfg.metrics;
    if (!m) return;
    static const char *const total_labels[] = {"method", "status", "handler"};
    static const char *const handler_label[] = {"handler"};
    static const char *const lowr_labels[] = {"method", "handler"};
    static const double highr[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2,
                                   2.5,  3,     3.5,  4,     4.5, 5,    7.5, 10,   30, 60};
    static const double lowr[] = {0.1, 0.5, 1};
    s->http_total = metrics_add(m, "http_requests_total", "Total number of requests by method, status and handler.",
                                METRIC_COUNTER, 3, total_labels, NULL, 0, 0);
    s->http_req_size = metrics_add(m, "http_request_size_bytes",
                                   "Content length of incoming requests by handler. Only value of header is "
                                   "respected. Otherwise ignored. No percentile calculated. ",
                                   METRIC_SUMMARY, 1, handler_label, NULL, 0, 0);
    s->http_resp_size = metrics_add(m, "http_response_size_bytes",
                                    "Content length of outgoing responses by handler. Only value of header is "
                                    "respected. Otherwise ignored. No percentile calculated. ",
                                    METRIC_SUMMARY, 1, handler_label, NULL, 0, 0);
    metric_family_t *fh = metrics_add(m, "http_request_duration_highr_seconds",
                                      "Latency with many buckets but no API specific labels. Made for more "
                                      "accurate percentile calculations. ",
                                      METRIC_HISTOGRAM, 0, NULL, highr, (int)(sizeof highr / sizeof highr[0]), 0);
    s->http_highr = metric_child(fh, NULL);
    s->http_lowr = metrics_add(m, "http_request_duration_seconds",
                               "Latency with only few buckets by handler. Made to be only used if aggregation "
                               "by handler is important. ",
                               METRIC_HISTOGRAM, 2, lowr_labels, lowr, (int)(sizeof lowr / sizeof lowr[0]), 0);
}

static void http_metrics_record(http_req_t *r) {
    server_t *s = r->srv;
    if (!s->http_total || r->status == 0) return;
    static const char *const excluded[] = {"/metrics", "/metrics/", "/health", "/load", "/ping", "/version"};
    static const char *const routes[] = {"/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize",
                                         "/detokenize"};
    for (size_t i = 0; i < sizeof excluded / sizeof excluded[0]; i++)
        if (!strcmp(r->url, excluded[i])) return;
    const char *handler = "none";
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (!strcmp(r->url, routes[i])) handler = routes[i];
    char status[8];
    snprintf(status, sizeof status, "%uxx", r->status / 100 % 10);
    double seconds = sl_now_s() - r->t_start;
    const char *total_v[] = {r->method, status, handler}, *handler_v[] = {handler}, *lowr_v[] = {r->method, handler};
    metric_t *total = metric_child(s->http_total, total_v);
    metric_t *req_size = metric_child(s->http_req_size, handler_v);
    metric_t *resp_size = metric_child(s->http_resp_size, handler_v);
    metric_t *lowr = metric_child(s->http_lowr, lowr_v);
    metrics_lock(s->cfg.metrics);
    metric_inc_locked(total, 1.0);
    metric_observe_locked(req_size, (double)r->req_len);
    metric_observe_locked(resp_size, (double)r->resp_len);
    metric_observe_locked(s->http_highr, seconds);
    metric_observe_locked(lowr, seconds);
    metrics_unlock(s->cfg.metrics);
}

/* The request as an HTTP span of the engine's trace, while one records (trace.c). */
static void http_trace_record(http_req_t *r) {
    if (!engine_tracing(r->srv->engine)) return;
    char *url = http_log_escape(r->url, strlen(r->url)); /* the client's bytes, as printable ASCII */
    engine_trace_http_t h = {.method = r->method, .url = url, .request_id = r->request_id,
                             .engine_request_id = routes_engine_id(r), .status = r->status, .t_start = r->t_start,
                             .t_first_byte = r->t_first_byte, .t_end = sl_now_s(), .request_bytes = (int64_t)r->len,
                             .response_bytes = r->resp_len ? r->resp_len : r->sent_bytes,
                             .client_gone = r->client_gone};
    engine_trace_http(r->srv->engine, &h);
    free(url);
}

static void req_free(http_req_t *r) {
    server_t *s = r->srv;
    http_metrics_record(r);
    http_trace_record(r);
    routes_release(r); /* aborts unfinished engine work, drops stream notifications */
    pthread_mutex_lock(&s->mu);
    if (r->prev) r->prev->next = r->next;
    else s->live = r->next;
    if (r->next) r->next->prev = r->prev;
    if (r->wake_at > 0) s->n_timed--;
    s->n_inflight--;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    free(r->body);
    free(r->out);
    free(r->lab_last);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe) {
    (void)cls, (void)conn;
    http_req_t *r = *con_cls;
    if (!r) return;
    if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) r->client_gone = true;
    http_conn_enter(r->srv, r->hc, HTTP_PHASE_HEAD); /* a kept-alive connection's next request */
    req_free(r);
    *con_cls = NULL;
}

/* ---- responses ------------------------------------------------------------------------ */

static const char *reason_phrase(unsigned status) {
    switch (status) {
    case 200: return "OK";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 409: return "Conflict";
    case 413: return "Request Entity Too Large";
    case 500: return "Internal Server Error";
    case 503: return "Service Unavailable";
    }
    return "";
}

void http_access_log(http_req_t *r, unsigned status) {
    if (r->logged) return;
    r->logged = true;
    r->status = status;
    /* uvicorn's access line, as vLLM prints it. */
    sl_log(LOG_INFO, "uvicorn", 0, "%s - \"%s %s HTTP/1.1\" %u %s", r->peer, r->method, r->url, status,
           reason_phrase(status));
}

enum MHD_Result http_respond(http_req_t *r, unsigned status, const char *content_type, const char *body,
                             size_t len, const char *extra_header, const char *extra_value) {
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp) return MHD_NO; /* out of memory: MHD closes the connection */
    if (content_type) MHD_add_response_header(resp, "Content-Type", content_type);
    if (extra_header) MHD_add_response_header(resp, extra_header, extra_value);
    if (r->request_id) MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    enum MHD_Result ret = MHD_queue_response(r->conn, status, resp);
    MHD_destroy_response(resp);
    r->resp_len = (int64_t)len;
    r->t_first_byte = sl_now_s();
    http_access_log(r, status);
    return ret;
}

/* SSE: MHD asks for bytes; routes.c fills r->out from engine events. The
 * response has no free callback: MHD destroys it after the completion
 * notification has already freed the request, so req_free owns r->out. */
static ssize_t sse_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    http_req_t *r = cls;
    for (;;) {
        if (r->out_off < r->out_len) {
            size_t n = r->out_len - r->out_off < max ? r->out_len - r->out_off : max;
            memcpy(buf, r->out + r->out_off, n);
            r->out_off += n;
            r->sent_bytes += (int64_t)n;
            if (r->t_first_byte == 0) r->t_first_byte = sl_now_s();
            return (ssize_t)n;
        }
        r->out_len = r->out_off = 0;
        if (r->sse_finished) return MHD_CONTENT_READER_END_OF_STREAM;
        routes_stream_fill(r); /* appends events (or ends the stream) to r->out */
        if (r->out_len > 0 || r->sse_finished) continue;
        if (r->tick) { /* a keep-alive comment: a closed socket fails this write */
            pthread_mutex_lock(&r->mu);
            r->tick = false;
            pthread_mutex_unlock(&r->mu);
            http_out_append(r, ": keep-alive\n\n", 14);
            continue;
        }
        if (http_park(r)) return 0; /* resumed by the engine or the ticker */
        if (r->srv->stopping && !r->pending) r->sse_finished = true; /* shutting down: end it */
    }
}

void http_out_append(http_req_t *r, const char *data, size_t len) {
    if (r->out_len + len > r->out_cap) {
        r->out_cap = 2 * (r->out_len + len) + 256;
        r->out = sl_realloc(r->out, r->out_cap);
    }
    memcpy(r->out + r->out_len, data, len);
    r->out_len += len;
}

enum MHD_Result http_start_sse(http_req_t *r) {
    struct MHD_Response *resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, sse_reader, r, NULL);
    if (!resp) return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream; charset=utf-8");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    if (r->request_id) MHD_add_response_header(resp, "X-Request-Id", r->request_id);
    enum MHD_Result ret = MHD_queue_response(r->conn, 200, resp);
    MHD_destroy_response(resp);
    http_access_log(r, 200);
    return ret;
}

/* ---- the access handler ------------------------------------------------------------------ */

static enum MHD_Result too_large(http_req_t *r) {
    if (r->logged) return MHD_YES; /* already answered */
    char msg[160];
    snprintf(msg, sizeof msg, "Request body too large: the limit is %lld bytes (--max-request-bytes).",
             (long long)r->srv->cfg.max_request_bytes);
    return routes_error(r, 413, "BadRequestError", msg, NULL);
}

/* Collects a request's header fields, in order, for http_framing_error. */
typedef struct {
    http_field_t *fields;
    size_t n, cap;
} field_list_t;

static enum MHD_Result collect_field(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    (void)kind;
    field_list_t *l = cls;
    if (l->n == l->cap) {
        l->cap = l->cap ? 2 * l->cap : 32;
        l->fields = sl_realloc(l->fields, l->cap * sizeof *l->fields);
    }
    l->fields[l->n++] = (http_field_t){key, value};
    return MHD_YES;
}

/* The framing checks libmicrohttpd does not make (docs/architecture.md, "HTTP
 * hardening"): NULL when the request may go on, else why it may not. */
static const char *framing_error(struct MHD_Connection *conn) {
    field_list_t l = {0};
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_field, &l);
    const char *why = http_framing_error(l.fields, l.n);
    free(l.fields);
    return why;
}

/* A 400 for ambiguous framing: where the body ends is in doubt, so the
 * connection is closed after the answer rather than read any further. */
static enum MHD_Result bad_framing(http_req_t *r, const char *why) {
    oai_error_t e;
    oai_error_set(&e, 400, "BadRequestError", NULL, "%s", why);
    size_t len;
    char *body = oai_error_body(&e, &len);
    enum MHD_Result ret = http_respond(r, 400, "application/json", body, len, "Connection", "close");
    free(body);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **con_cls) {
    (void)version;
    server_t *s = cls;
    http_req_t *r = *con_cls;
    if (!r) {
        r = req_new(s, conn, method, url);
        *con_cls = r;
        const char *why = framing_error(conn);
        if (why) {
            r->refused = true;
            http_conn_enter(s, r->hc, HTTP_PHASE_RESPONSE);
            return bad_framing(r, why);
        }
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Content-Length");
        if (cl) r->req_len = strtoll(cl, NULL, 10);
        if (cl && strtoll(cl, NULL, 10) > s->cfg.max_request_bytes) {
            /* Answer before the body arrives; MHD closes the connection after it. */
            r->refused = true;
            http_conn_enter(s, r->hc, HTTP_PHASE_RESPONSE);
            return too_large(r);
        }
        return MHD_YES;
    }
    if (*upload_data_size > 0) {
        if (!r->refused && r->len + *upload_data_size <= (size_t)s->cfg.max_request_bytes) {
            if (r->len + *upload_data_size + 1 > r->cap) {
                r->cap = 2 * (r->len + *upload_data_size) + 1;
                r->body = sl_realloc(r->body, r->cap);
            }
            memcpy(r->body + r->len, upload_data, *upload_data_size);
            r->len += *upload_data_size;
        } else {
            r->refused = true;
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    if (!r->dispatched) { /* the body is in: from here on, no deadline (slow readers included) */
        r->dispatched = true;
        http_conn_enter(s, r->hc, HTTP_PHASE_RESPONSE);
    }
    if (r->refused) return too_large(r);
    if (r->body) r->body[r->len] = '\0';
    return routes_dispatch(r);
}

/* ---- server lifecycle ------------------------------------------------------------------ */

void server_config_default(server_config_t *c) {
    memset(c, 0, sizeof *c);
    c->port = 8000;
    c->max_request_bytes = 32ll << 20;
    c->max_log_len = -1;
    c->keepalive_s = 2.0;          /* below the idle timeout, so waiting streams stay open */
    c->connection_limit = 8192;
    c->listen_backlog = 4096;
    c->connection_timeout_s = 5;  /* vLLM's VLLM_HTTP_TIMEOUT_KEEP_ALIVE default */
    c->header_timeout_s = 60;     /* nginx's client_header_timeout default */
    c->body_timeout_s = 60;
    c->n_threads = 2;
}

/* The address --host/--port name: NULL sa for all IPv4 interfaces (MHD's
 * default), else an IPv4/IPv6 literal or "localhost". Fails on other names. */
typedef struct {
    struct sockaddr_in v4;
    struct sockaddr_in6 v6;
    const struct sockaddr *sa;
} bind_addr_t;

static int bind_addr_resolve(const server_config_t *cfg, bind_addr_t *b, sl_err_t *err) {
    memset(b, 0, sizeof *b);
    if (!cfg->host || !*cfg->host) return 0;
    if (inet_pton(AF_INET, cfg->host, &b->v4.sin_addr) == 1) {
        b->v4.sin_family = AF_INET;
        b->v4.sin_port = htons((uint16_t)cfg->port);
        b->sa = (const struct sockaddr *)&b->v4;
    } else if (inet_pton(AF_INET6, cfg->host, &b->v6.sin6_addr) == 1) {
        b->v6.sin6_family = AF_INET6;
        b->v6.sin6_port = htons((uint16_t)cfg->port);
        b->sa = (const struct sockaddr *)&b->v6;
    } else if (!strcmp(cfg->host, "localhost")) {
        b->v4.sin_family = AF_INET;
        b->v4.sin_port = htons((uint16_t)cfg->port);
        b->v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        b->sa = (const struct sockaddr *)&b->v4;
    } else {
        return sl_fail(err, "--host %s: not an IPv4/IPv6 address", cfg->host);
    }
    return 0;
}

/* Binds and listens on the server's address as MHD will (SO_REUSEADDR), then
 * closes the socket: a busy port or a bad --host is reported before the
 * model loads rather than after. */
int server_check_listen(const server_config_t *cfg, sl_err_t *err) {
    bind_addr_t b;
    if (bind_addr_resolve(cfg, &b, err)) return -1;
    if (!b.sa) {
        b.v4.sin_family = AF_INET;
        b.v4.sin_port = htons((uint16_t)cfg->port);
        b.v4.sin_addr.s_addr = htonl(INADDR_ANY);
        b.sa = (const struct sockaddr *)&b.v4;
    }
    socklen_t len = b.sa->sa_family == AF_INET6 ? sizeof b.v6 : sizeof b.v4;
    int fd = socket(b.sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return sl_fail(err, "cannot create a socket: %s", strerror(errno));
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (b.sa->sa_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    int rc = bind(fd, b.sa, len) == 0 && listen(fd, 1) == 0 ? 0 : errno;
    close(fd);
    if (rc)
        return sl_fail(err, "cannot listen on %s:%d: %s", cfg->host && *cfg->host ? cfg->host : "0.0.0.0",
                       cfg->port, rc == EADDRINUSE ? "address already in use" : strerror(rc));
    return 0;
}

server_t *server_start(const server_config_t *cfg, engine_t *engine, const tokenizer_t *tok,
                       const chat_template_t *tmpl, const cJSON *special_tokens, sl_err_t *err) {
    server_t *s = sl_calloc(1, sizeof *s);
    s->cfg = *cfg;
    s->engine = engine;
    s->tok = tok;
    s->tmpl = tmpl;
    s->special_tokens = special_tokens;
    s->created = (int64_t)time(NULL);
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->conn_mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (routes_init(s, err)) {
        free(s);
        return NULL;
    }
    http_metrics_init(s);

    bind_addr_t ba;
    if (bind_addr_resolve(cfg, &ba, err)) {
        routes_free(s);
        free(s);
        return NULL;
    }
    const struct sockaddr *bind_addr = ba.sa;
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_ALLOW_SUSPEND_RESUME |
                     MHD_USE_ERROR_LOG;
    if (bind_addr && bind_addr->sa_family == AF_INET6) flags |= MHD_USE_IPv6;
    s->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, on_request, s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_NOTIFY_CONNECTION, http_on_connection, s,
                            MHD_OPTION_CONNECTION_LIMIT, cfg->connection_limit,
                            MHD_OPTION_LISTEN_BACKLOG_SIZE, cfg->listen_backlog,
                            MHD_OPTION_CONNECTION_TIMEOUT, cfg->connection_timeout_s,
                            /* 1: an HTTP/1.1 request without Host, or with a space in its
                             * target, is a 400 (libmicrohttpd 0.9.75; http_framing_error
                             * checks the rest). */
                            MHD_OPTION_STRICT_FOR_CLIENT, (int)1,
                            MHD_OPTION_THREAD_POOL_SIZE, cfg->n_threads,
                            bind_addr ? MHD_OPTION_SOCK_ADDR : MHD_OPTION_END, bind_addr,
                            MHD_OPTION_END);
    if (!s->d) {
        routes_free(s);
        free(s);
        sl_fail(err, "cannot listen on %s:%d (address in use, or no permission)",
                cfg->host ? cfg->host : "0.0.0.0", cfg->port);
        return NULL;
    }
    if (pthread_create(&s->ticker, NULL, ticker_main, s) != 0) sl_die("cannot start the ticker thread");
    /* vLLM's wording, so that greps for a started server find this one. */
    LOG_INFO("Starting vLLM API server on http://%s:%d", cfg->host ? cfg->host : "0.0.0.0", cfg->port);
    static const char *const route_lines[][2] = {
        {"/health", "GET"}, {"/metrics", "GET"}, {"/version", "GET"}, {"/v1/models", "GET"},
        {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/tokenize", "POST"},
        {"/detokenize", "POST"}};
    for (size_t i = 0; i < sizeof route_lines / sizeof route_lines[0]; i++)
        LOG_INFO("Route: %s, Methods: %s", route_lines[i][0], route_lines[i][1]);
    if (cfg->enable_fault_injection) { /* the lab's admin API (docs/lab.md) */
        LOG_INFO("Route: /admin/faults, Methods: GET, POST, DELETE");
        LOG_INFO("Route: /admin/faults/{name}, Methods: DELETE");
    }
    sl_log(LOG_INFO, "uvicorn", 0, "Application startup complete.");
    return s;
}

int64_t server_n_inflight(server_t *s) {
    pthread_mutex_lock(&s->mu);
    int64_t n = s->n_inflight;
    pthread_mutex_unlock(&s->mu);
    return n;
}

void server_stop(server_t *s, double grace_s) {
    MHD_quiesce_daemon(s->d); /* no new connections */
    double until = sl_now_s() + grace_s;
    pthread_mutex_lock(&s->mu);
    while (s->n_inflight > 0 && sl_now_s() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 100 * 1000 * 1000;
        if (ts.tv_nsec >= 1000000000) ts.tv_sec++, ts.tv_nsec -= 1000000000;
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    if (s->n_inflight > 0) LOG_WARNING("Aborting %lld requests still in flight", (long long)s->n_inflight);
    s->ticker_stop = true;
    s->stopping = true;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
    pthread_join(s->ticker, NULL);
    /* Resume what is parked so MHD can close it; closing aborts the requests. */
    pthread_mutex_lock(&s->mu);
    for (http_req_t *r = s->live; r; r = r->next) wake(r, true);
    pthread_mutex_unlock(&s->mu);
    MHD_stop_daemon(s->d); /* closes every connection: their http_conn_t are freed */
    routes_free(s);
    pthread_mutex_destroy(&s->conn_mu);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->cv);
    free(s);
}
