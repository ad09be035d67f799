/* http.h - the server's private state, shared by http.c (libmicrohttpd
 * plumbing) and routes.c (what each route does). Not a public header. */
#ifndef SERVELAB_HTTP_H
#define SERVELAB_HTTP_H

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <sys/socket.h>

#include "servelab/server.h"

struct routes_state;
struct route_job;

/* What a connection is receiving or sending (http_conn.c). */
typedef enum {
    HTTP_PHASE_HEAD,     /* a request line and headers: header_timeout_s */
    HTTP_PHASE_BODY,     /* a request body: body_timeout_s */
    HTTP_PHASE_RESPONSE, /* answering: no deadline */
} http_phase_t;
typedef struct http_conn http_conn_t;

typedef struct http_req {
    struct server *srv;
    struct MHD_Connection *conn;
    struct http_req *prev, *next;   /* server's live list (guarded by srv->mu) */
    http_conn_t *hc;                /* its connection's phase (NULL if unknown) */
    char method[16];
    char url[256];
    char peer[80];
    const char *request_id;         /* X-Request-Id to echo (libmicrohttpd's copy), or NULL */
    double t_start;
    char *body;                     /* the request body, NUL-terminated */
    size_t len, cap;
    bool dispatched;                /* its whole request is in (the access handler's last call) */
    bool refused;                   /* answered from its head or too large: the body is dropped */
    bool logged;
    unsigned status;                /* of the response queued (0: none yet) */
    int64_t req_len;                /* the request's Content-Length header (0 without) */
    int64_t resp_len;               /* its Content-Length (0 when streamed) */
    int64_t sent_bytes;             /* a stream's bytes handed to MHD so far */
    double t_first_byte;            /* sl_now_s() its response began (0: not yet), for the trace */
    bool client_gone;
    /* Parking: guarded by mu. */
    pthread_mutex_t mu;
    bool suspended, pending, tick;
    double wake_at;                 /* sl_now_s() the ticker resumes it at (0: none); guarded by srv->mu */
    /* SSE output (MHD thread only). */
    char *out;
    size_t out_len, out_off, out_cap;
    bool sse_finished;
    struct route_job *job;          /* engine work of this request (routes.c) */
    /* GET /lab/events (routes.c): the next snapshot's time and the last one sent. */
    bool lab_events;
    double lab_next;
    char *lab_last;
} http_req_t;

struct server {
    server_config_t cfg;
    engine_t *engine;
    const tokenizer_t *tok;
    const chat_template_t *tmpl;
    const cJSON *special_tokens;
    int64_t created;
    struct MHD_Daemon *d;
    pthread_t ticker;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool ticker_stop;
    int64_t n_timed;                /* live requests with a wake_at (guarded by mu) */
    bool stopping;
    http_req_t *live;
    int64_t n_inflight;
    pthread_mutex_t conn_mu;        /* guards conns and their phases */
    http_conn_t *conns;             /* every open connection (http_conn.c) */
    struct routes_state *routes;
    /* prometheus-fastapi-instrumentator's series, as vLLM exposes them. */
    struct metric_family *http_total, *http_req_size, *http_resp_size, *http_lowr;
    struct metric *http_highr;
};

/* http.c */
bool http_park(http_req_t *r);
void http_watch_stream(http_req_t *r, engine_stream_t *st);
/* Has the ticker resume r (as an engine event would) at sl_now_s() `at`,
 * replacing an earlier time; for a parked SSE reader that must wait. */
void http_wake_at(http_req_t *r, double at);
enum MHD_Result http_respond(http_req_t *r, unsigned status, const char *content_type, const char *body,
                             size_t len, const char *extra_header, const char *extra_value);
enum MHD_Result http_start_sse(http_req_t *r);
void http_out_append(http_req_t *r, const char *data, size_t len);
void http_access_log(http_req_t *r, unsigned status);

/* http_conn.c */
/* MHD_OPTION_NOTIFY_CONNECTION: tracks each connection from accept to close. */
void http_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe);
http_conn_t *http_conn_of(struct MHD_Connection *conn);
/* Starts `phase` now (c may be NULL: nothing happens). */
void http_conn_enter(struct server *s, http_conn_t *c, http_phase_t phase);
/* Shuts down the sockets of connections past their phase's limit. */
void http_conns_enforce(struct server *s);
/* How often http_conns_enforce should run for these limits. */
double http_conns_period_s(const server_config_t *cfg);
/* The client's "host:port" ("?" if unknown). */
void http_peer(struct MHD_Connection *conn, char *out, size_t cap);

/* routes.c */
int routes_init(struct server *s, sl_err_t *err);
void routes_free(struct server *s);
enum MHD_Result routes_dispatch(http_req_t *r);
enum MHD_Result routes_error(http_req_t *r, unsigned status, const char *type, const char *message,
                             const char *param);
/* Appends the SSE events that are ready to r->out; sets r->sse_finished after [DONE]. */
void routes_stream_fill(http_req_t *r);
/* Aborts unfinished engine work and releases the request's streams. */
void routes_release(http_req_t *r);
/* The engine's id of r's work (its log id: names its request tracks in the trace), or NULL. */
const char *routes_engine_id(const http_req_t *r);

#endif
