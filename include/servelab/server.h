/* server.h - the OpenAI-compatible HTTP server over the engine (libmicrohttpd).
 *
 * One internal epoll thread pool serves every connection; no thread per
 * connection and no busy polling: a request waiting on the engine is a
 * suspended connection, resumed from the engine thread when an event for it
 * is queued (engine_stream_set_notify). A ticker resumes waiting connections
 * every keepalive_s, so a streaming client gets an SSE comment and a client
 * that went away is noticed; a disconnect aborts its request, whose blocks
 * the engine frees at the next step. The same ticker closes connections whose
 * request head or body is still arriving past header_timeout_s / body_timeout_s.
 */
#ifndef SERVELAB_SERVER_H
#define SERVELAB_SERVER_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/chat_template.h"
#include "servelab/engine.h"
#include "servelab/tokenizer.h"

typedef struct {
    const char *host;                  /* NULL: all interfaces */
    int port;                          /* 8000 */
    const char *model_path;            /* "root" in /v1/models */
    const char **served_model_names;   /* first = default and metric label */
    int n_served_model_names;
    const char **api_keys;             /* checked on /v1/... only */
    int n_api_keys;
    int64_t max_request_bytes;         /* 32 MiB -> 413 above */
    int32_t max_waiting_requests;      /* 0 = off; else 503 + Retry-After when full */
    int32_t max_model_len;
    bool log_requests;                 /* --enable-log-requests */
    int32_t max_log_len;               /* -1 = unlimited */
    double keepalive_s;                /* SSE comment / disconnect check period (2) */
    unsigned connection_limit;         /* 8192 */
    unsigned listen_backlog;           /* 4096 */
    unsigned connection_timeout_s;     /* idle connections are closed after this (5) */
    double header_timeout_s;           /* a request's line and headers must arrive within this (60; 0 = none) */
    double body_timeout_s;             /* its body within this after the headers (60; 0 = none) */
    unsigned n_threads;                /* HTTP threads (2) */
    const char *generation_config_dir; /* NULL = none ("vllm"); else defaults from its generation_config.json */
    struct metrics *metrics;           /* served on GET /metrics (NULL: 404); the server adds http_* to it */
    struct faults *faults;             /* lab: http_error is checked here (NULL: no faults; borrowed) */
    bool enable_fault_injection;       /* --enable-fault-injection: the /admin/faults API (needs admin_key) */
    const char *admin_key;             /* --admin-key: Bearer key of the /admin routes (never an API key) */
    bool enable_lab_ui;                /* --enable-lab-ui: GET /lab/snapshot (behind admin_key when set) */
} server_config_t;

void server_config_default(server_config_t *c);

typedef struct server server_t;

/* Whether cfg's host and port can be listened on now (binds, then closes):
 * 0, or -1 with err saying why. Run before the model loads. */
int server_check_listen(const server_config_t *cfg, sl_err_t *err);

/* Starts listening. `tmpl` may be NULL (chat requests then get vLLM's 400).
 * All pointers are borrowed and must outlive the server. */
server_t *server_start(const server_config_t *cfg, engine_t *engine, const tokenizer_t *tok,
                       const chat_template_t *tmpl, const cJSON *special_tokens, sl_err_t *err);

/* Graceful stop: stop accepting, let in-flight requests finish for up to
 * grace_s seconds, abort the rest, close. */
void server_stop(server_t *s, double grace_s);

/* Requests currently being served. */
int64_t server_n_inflight(server_t *s);

#endif
