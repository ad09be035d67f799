/* http_client.c - one HTTP request with libcurl, for the subcommands that talk to a server
 * (diagnose: /metrics, Prometheus, golden prompts; scenario: /health, /metrics, the admin API).
 * The load generator has its own, concurrent client (src/bench/http.c). */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/core.h"

static size_t on_data(char *p, size_t size, size_t n, void *user) {
    cli_buf_t *b = user;
    size_t add = size * n;
    if (b->len + add > ((size_t)64 << 20)) return 0; /* a /metrics page is kilobytes; refuse a flood */
    b->data = sl_realloc(b->data, b->len + add + 1);
    memcpy(b->data + b->len, p, add);
    b->len += add;
    b->data[b->len] = '\0';
    return add;
}

long cli_http(const char *base, const char *path, const char *body, const char *bearer, long timeout_ms,
              cli_buf_t *out, char *err, size_t err_len) {
    char url[2048];
    snprintf(url, sizeof url, "%s%s", base, path);
    CURL *c = curl_easy_init();
    struct curl_slist *h = NULL;
    char *auth = NULL;
    if (body) {
        h = curl_slist_append(h, "Content-Type: application/json");
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    }
    if (bearer && *bearer && asprintf(&auth, "Authorization: Bearer %s", bearer) > 0) h = curl_slist_append(h, auth);
    *out = (cli_buf_t){sl_strdup(""), 0};
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, timeout_ms < 10000 ? timeout_ms : 10000L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, timeout_ms);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    long status = -1;
    if (rc != CURLE_OK) snprintf(err, err_len, "%.512s: %s", url, curl_easy_strerror(rc));
    else curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_slist_free_all(h);
    free(auth);
    curl_easy_cleanup(c);
    return status;
}
