/* http_conn.c - every connection's phase, and the deadlines on receiving a request.
 *
 * libmicrohttpd's MHD_OPTION_CONNECTION_TIMEOUT closes a connection only after
 * that long without a byte, so a client that sends one byte a second keeps a
 * request head or body open forever. Here each connection is in one phase:
 * HEAD (from its accept, or from the end of its previous response, until the
 * access handler's first call: the request line and headers), BODY (until the
 * body is complete) or RESPONSE (no deadline: a client that reads a long SSE
 * stream slowly is not cut off). The ticker (http.c) calls http_conns_enforce,
 * which shuts down the socket of a connection past its phase's limit; MHD then
 * reads EOF and closes it. See docs/architecture.md, "HTTP hardening".
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

#include "http.h"

struct http_conn {
    struct http_conn *prev, *next; /* server's conns list (guarded by srv->conn_mu) */
    int fd;                        /* valid until MHD's CLOSED notification, which unlinks this */
    http_phase_t phase;
    double since_s;                /* sl_now_s() when the phase began */
    bool cut;                      /* its socket was shut down past a deadline */
    char peer[80];                 /* "host:port", for the log */
};

void http_peer(struct MHD_Connection *conn, char *out, size_t cap) {
    snprintf(out, cap, "?");
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    if (!ci || !ci->client_addr) return;
    char host[64] = "?";
    int port = 0;
    if (ci->client_addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ci->client_addr;
        inet_ntop(AF_INET, &a->sin_addr, host, sizeof host);
        port = ntohs(a->sin_port);
    } else if (ci->client_addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ci->client_addr;
        inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host);
        port = ntohs(a->sin6_port);
    }
    snprintf(out, cap, "%s:%d", host, port);
}

void http_on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode toe) {
    server_t *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        http_conn_t *c = sl_calloc(1, sizeof *c);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        c->phase = HTTP_PHASE_HEAD;
        c->since_s = sl_now_s();
        http_peer(conn, c->peer, sizeof c->peer);
        pthread_mutex_lock(&s->conn_mu);
        c->next = s->conns;
        if (s->conns) s->conns->prev = c;
        s->conns = c;
        pthread_mutex_unlock(&s->conn_mu);
        *socket_context = c;
        return;
    }
    http_conn_t *c = *socket_context; /* MHD_CONNECTION_NOTIFY_CLOSED: before MHD closes the fd */
    if (!c) return;
    pthread_mutex_lock(&s->conn_mu);
    if (c->prev) c->prev->next = c->next;
    else s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    pthread_mutex_unlock(&s->conn_mu);
    free(c);
    *socket_context = NULL;
}

http_conn_t *http_conn_of(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

void http_conn_enter(server_t *s, http_conn_t *c, http_phase_t phase) {
    if (!c) return;
    pthread_mutex_lock(&s->conn_mu);
    c->phase = phase;
    c->since_s = sl_now_s();
    pthread_mutex_unlock(&s->conn_mu);
}

/* The limit of `phase` in seconds; 0: none. */
static double phase_limit_s(const server_config_t *cfg, http_phase_t phase) {
    if (phase == HTTP_PHASE_HEAD) return cfg->header_timeout_s;
    if (phase == HTTP_PHASE_BODY) return cfg->body_timeout_s;
    return 0;
}

void http_conns_enforce(server_t *s) {
    enum { MAX_LOGGED = 8 };
    http_phase_t cut_phase[MAX_LOGGED];
    char cut_peer[MAX_LOGGED][80];
    int n_cut = 0, n_more = 0;
    double now = sl_now_s();
    pthread_mutex_lock(&s->conn_mu);
    for (http_conn_t *c = s->conns; c; c = c->next) {
        double limit = phase_limit_s(&s->cfg, c->phase);
        if (c->cut || limit <= 0 || now - c->since_s <= limit || c->fd < 0) continue;
        shutdown(c->fd, SHUT_RDWR); /* MHD reads EOF, closes, and only then frees c */
        c->cut = true;
        if (n_cut < MAX_LOGGED) {
            cut_phase[n_cut] = c->phase;
            snprintf(cut_peer[n_cut++], sizeof cut_peer[0], "%s", c->peer);
        } else {
            n_more++;
        }
    }
    pthread_mutex_unlock(&s->conn_mu);
    for (int i = 0; i < n_cut; i++) {
        bool head = cut_phase[i] == HTTP_PHASE_HEAD;
        LOG_WARNING("Closed the connection from %s: its request %s did not arrive within %g s (%s)",
                    cut_peer[i], head ? "headers" : "body", phase_limit_s(&s->cfg, cut_phase[i]),
                    head ? "--request-header-timeout" : "--request-body-timeout");
    }
    if (n_more) LOG_WARNING("Closed %d more connections past their request deadlines", n_more);
}

double http_conns_period_s(const server_config_t *cfg) {
    double p = 1.0; /* a quarter of the smallest limit, within [0.05, 1] s */
    if (cfg->header_timeout_s > 0 && cfg->header_timeout_s / 4 < p) p = cfg->header_timeout_s / 4;
    if (cfg->body_timeout_s > 0 && cfg->body_timeout_s / 4 < p) p = cfg->body_timeout_s / 4;
    return p < 0.05 ? 0.05 : p;
}
