/* http.c - libcurl for the load generator's side calls: GET /v1/models, POST /tokenize,
 * /detokenize (and re-tokenizing outputs a server sent no usage for).
 *
 * Calls run as a batch on one multi handle, max_parallel at a time, so sizing a thousand
 * prompts costs a few round trips of wall time rather than thousands. Every request
 * carries the same headers as the benchmark's streams: Content-Type, no Expect, Authorization:
 * Bearer $OPENAI_API_KEY when set (vLLM's bench reads that variable), and --header
 * KEY=VALUE pairs. Side calls give up after 10 s without a connection or 10 min in all;
 * a non-2xx status is reported with its body.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define RESP_MAX ((size_t)256 << 20)

int bench_http_init(bench_http_t *h, const bench_args_t *a, sl_err_t *err) {
    memset(h, 0, sizeof *h);
    h->insecure = a->insecure;
    h->headers = curl_slist_append(NULL, "Content-Type: application/json");
    /* curl would send "Expect: 100-continue" with larger bodies and wait a round trip
     * (up to 1 s) for the answer; aiohttp never does, and it would count in TTFT. */
    h->headers = curl_slist_append(h->headers, "Expect:");
    const char *key = getenv("OPENAI_API_KEY");
    if (key && *key) {
        char *line = NULL;
        if (asprintf(&line, "Authorization: Bearer %s", key) < 0) sl_die("out of memory");
        h->headers = curl_slist_append(h->headers, line);
        free(line);
    }
    for (int i = 0; i < a->header.n; i++) {
        const char *kv = a->header.v[i], *eq = strchr(kv, '=');
        if (!eq || eq == kv) return sl_fail(err, "Invalid header format. Please use KEY=VALUE format: '%s'", kv);
        const char *ks = kv, *ke = eq, *vs = eq + 1;
        while (ks < ke && *ks == ' ') ks++;
        while (ke > ks && ke[-1] == ' ') ke--;
        while (*vs == ' ') vs++;
        char *line = NULL;
        if (asprintf(&line, "%.*s: %s", (int)(ke - ks), ks, vs) < 0) sl_die("out of memory");
        h->headers = curl_slist_append(h->headers, line);
        free(line);
    }
    return 0;
}

void bench_http_free(bench_http_t *h) {
    curl_slist_free_all(h->headers);
    h->headers = NULL;
}

static size_t on_body(char *p, size_t size, size_t nmemb, void *user) {
    bench_call_t *c = user;
    size_t n = size * nmemb;
    if (c->resp_len + n > RESP_MAX) return 0; /* aborts the transfer: CURLE_WRITE_ERROR */
    c->resp = sl_realloc(c->resp, c->resp_len + n + 1);
    memcpy(c->resp + c->resp_len, p, n);
    c->resp_len += n;
    c->resp[c->resp_len] = 0;
    return n;
}

static CURL *easy_for(const bench_http_t *h, bench_call_t *c) {
    CURL *e = curl_easy_init();
    if (!e) sl_die("curl_easy_init failed");
    curl_easy_setopt(e, CURLOPT_URL, c->url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h->headers);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 10000L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 600000L);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, c->err);
    curl_easy_setopt(e, CURLOPT_PRIVATE, c);
    if (h->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    if (c->body) {
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, c->body);
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(c->body));
    }
    return e;
}

void bench_http_run(const bench_http_t *h, bench_call_t *calls, int64_t n, int max_parallel) {
    CURLM *m = curl_multi_init();
    if (!m) sl_die("curl_multi_init failed");
    int64_t next = 0, done = 0, active = 0;
    while (done < n) {
        while (next < n && active < max_parallel) {
            bench_call_t *c = &calls[next++];
            c->status = 0;
            c->err[0] = 0;
            curl_multi_add_handle(m, easy_for(h, c));
            active++;
        }
        int still = 0;
        curl_multi_perform(m, &still);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            CURL *e = msg->easy_handle;
            bench_call_t *c = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&c);
            if (msg->data.result == CURLE_OK) {
                curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &c->status);
            } else {
                c->status = 0;
                if (!c->err[0]) snprintf(c->err, sizeof c->err, "%s", curl_easy_strerror(msg->data.result));
            }
            curl_multi_remove_handle(m, e);
            curl_easy_cleanup(e);
            active--;
            done++;
        }
        if (done < n) curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    curl_multi_cleanup(m);
}

void bench_call_free(bench_call_t *c) {
    free(c->url);
    free(c->body);
    free(c->resp);
    memset(c, 0, sizeof *c);
}

int bench_call_fail(const bench_call_t *c, sl_err_t *err) {
    const char *method = c->body ? "POST" : "GET";
    if (c->status == 0) return sl_fail(err, "%s %s: %s", method, c->url, c->err[0] ? c->err : "no response");
    /* The body on one line, shortened: error bodies are JSON and usually short. */
    char body[200];
    size_t k = 0;
    for (size_t i = 0; c->resp && i < c->resp_len && k + 1 < sizeof body; i++)
        body[k++] = (c->resp[i] == '\n' || c->resp[i] == '\r') ? ' ' : c->resp[i];
    body[k] = 0;
    return sl_fail(err, "%s %s: HTTP %ld%s%s", method, c->url, c->status, k ? ": " : "", body);
}
