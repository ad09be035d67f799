/* run.c - the benchmark proper: every stream on one libcurl multi handle, one thread.
 *
 * The loop releases each request at its arrival time (bench_arrivals), holds it in a FIFO
 * while --max-concurrency streams are open, then sends it; curl_multi_poll sleeps until
 * the next arrival or socket activity. Timestamps are taken as each SSE event is parsed,
 * as vLLM's client does: TTFT = send -> first event whose "choices" is non-empty (for
 * chat that is the role event, which a vLLM-like server emits with the first token),
 * ITL = the gaps between later such events, E2EL = send -> the last one; usage events
 * give the token counts. A request fails on a non-200 status (its body is the error),
 * a transport error, an {"error": ...} event in the stream, an event that is not JSON,
 * or a stream without any choice event. Connections are kept alive and reused, as
 * aiohttp's pool does (across the warm-up and the run when the caller passes its multi
 * handle). The open-file limit is raised to its hard limit when the streams
 * need more descriptors than the soft one allows.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "bench.h"

#define ERR_BODY_MAX ((size_t)64 << 10)

typedef struct {
    const bench_run_cfg_t *cfg;
    bench_output_t *out;
    CURL *easy;
    struct curl_slist *hdr;
    bench_sse_t sse;
    double t_last;
    bool first;
    long status;
    char *body; /* a non-200 response */
    size_t body_len;
    char errbuf[CURL_ERROR_SIZE];
} stream_t;

static void fail(bench_output_t *o, const char *msg, size_t len) {
    if (o->error) return; /* the first reason stands */
    o->error = sl_malloc(len + 1);
    memcpy(o->error, msg, len);
    o->error[len] = 0;
}

static void append_text(bench_output_t *o, const char *s, size_t n) {
    if (o->text_len + n + 1 > o->text_cap) {
        o->text_cap = (o->text_len + n + 1) * 2;
        o->text = sl_realloc(o->text, o->text_cap);
    }
    memcpy(o->text + o->text_len, s, n);
    o->text_len += n;
    o->text[o->text_len] = 0;
}

static bool on_event(void *user, const char *data, size_t len) {
    stream_t *s = user;
    bench_output_t *o = s->out;
    double t = sl_now_s();
    if (len == 6 && !memcmp(data, "[DONE]", 6)) return true;
    cJSON *j = cJSON_ParseWithLength(data, len);
    if (!j) {
        char msg[300];
        int n = snprintf(msg, sizeof msg, "invalid JSON in the stream: %.200s", data);
        fail(o, msg, (size_t)n);
        return false;
    }
    const cJSON *choices = cJSON_GetObjectItemCaseSensitive(j, "choices");
    const cJSON *usage = cJSON_GetObjectItemCaseSensitive(j, "usage");
    const cJSON *error = cJSON_GetObjectItemCaseSensitive(j, "error");
    if (cJSON_IsArray(choices) && choices->child) {
        const cJSON *c0 = choices->child;
        const cJSON *text = s->cfg->chat ? cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c0, "delta"), "content")
                                         : cJSON_GetObjectItemCaseSensitive(c0, "text");
        if (!s->first) {
            s->first = true;
            o->ttft = t - o->start_time;
        } else {
            if (o->n_itl == o->cap_itl) {
                o->cap_itl = o->cap_itl ? 2 * o->cap_itl : 64;
                o->itl = sl_realloc(o->itl, (size_t)o->cap_itl * sizeof *o->itl);
            }
            o->itl[o->n_itl++] = t - s->t_last;
        }
        s->t_last = t;
        if (cJSON_IsString(text)) append_text(o, text->valuestring, strlen(text->valuestring));
    } else if (error && !cJSON_IsNull(error)) {
        char *msg = cJSON_PrintUnformatted(error);
        fail(o, msg, strlen(msg));
        free(msg);
        cJSON_Delete(j);
        return false;
    }
    if (cJSON_IsObject(usage)) {
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(usage, "completion_tokens");
        const cJSON *pt = cJSON_GetObjectItemCaseSensitive(usage, "prompt_tokens");
        if (cJSON_IsNumber(ct)) o->output_tokens = (int64_t)ct->valuedouble;
        if (cJSON_IsNumber(pt)) o->prompt_len = (int64_t)pt->valuedouble;
    }
    cJSON_Delete(j);
    return true;
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *user) {
    stream_t *s = user;
    size_t n = size * nmemb;
    if (!s->status) curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
    if (s->status != 200) {
        size_t keep = s->body_len + n > ERR_BODY_MAX ? ERR_BODY_MAX - s->body_len : n;
        s->body = sl_realloc(s->body, s->body_len + keep + 1);
        memcpy(s->body + s->body_len, p, keep);
        s->body_len += keep;
        s->body[s->body_len] = 0;
        return n;
    }
    return bench_sse_feed(&s->sse, p, n, on_event, s) < 0 ? 0 : n;
}

static void start(CURLM *m, stream_t *s, const bench_run_cfg_t *c, const char *payload, int64_t index) {
    s->cfg = c;
    s->easy = curl_easy_init();
    if (!s->easy) sl_die("curl_easy_init failed");
    for (const struct curl_slist *h = c->http->headers; h; h = h->next) s->hdr = curl_slist_append(s->hdr, h->data);
    if (c->request_id_prefix) {
        char line[512];
        snprintf(line, sizeof line, "x-request-id: %s%lld", c->request_id_prefix, (long long)index);
        s->hdr = curl_slist_append(s->hdr, line);
    }
    CURL *e = s->easy;
    curl_easy_setopt(e, CURLOPT_URL, c->api_url);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, s->hdr);
    curl_easy_setopt(e, CURLOPT_POSTFIELDS, payload);
    curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(payload));
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT, 6L * 3600L); /* vLLM's aiohttp total timeout */
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, s);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, s->errbuf);
    curl_easy_setopt(e, CURLOPT_PRIVATE, s);
    if (c->http->insecure) {
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, 0L);
        curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, 0L);
    }
    s->out->start_time = sl_now_s();
    curl_multi_add_handle(m, e);
}

static void finish(CURLM *m, stream_t *s, CURLcode rc) {
    bench_output_t *o = s->out;
    curl_easy_getinfo(s->easy, CURLINFO_RESPONSE_CODE, &s->status);
    o->status = s->status;
    if (rc == CURLE_OK && s->status == 200 && bench_sse_end(&s->sse, on_event, s) < 0 && !o->error)
        fail(o, "stream ended inside an event", strlen("stream ended inside an event"));
    if (o->error) {
        /* set by an event: an error object or bad JSON */
    } else if (rc != CURLE_OK) {
        const char *msg = s->errbuf[0] ? s->errbuf : curl_easy_strerror(rc);
        fail(o, msg, strlen(msg));
    } else if (s->status != 200) {
        if (s->body_len) fail(o, s->body, s->body_len);
        else {
            char msg[64];
            int n = snprintf(msg, sizeof msg, "HTTP %ld", s->status);
            fail(o, msg, (size_t)n);
        }
    } else if (!s->first) {
        const char *msg = "Never received a valid chunk to calculate TTFT.This response will be marked as failed!";
        fail(o, msg, strlen(msg));
    } else {
        o->success = true;
        o->latency = s->t_last - o->start_time;
    }
    curl_multi_remove_handle(m, s->easy);
    curl_easy_cleanup(s->easy);
    curl_slist_free_all(s->hdr);
    bench_sse_free(&s->sse);
    free(s->body);
    s->easy = NULL, s->hdr = NULL, s->body = NULL;
}

/* A tqdm-like line on stderr: " 37%|███▋      | 370/1000 [00:05<00:08, 72.34it/s]". */
static void fmt_dur(double s, char *out, size_t cap) {
    long t = (long)s;
    if (t >= 3600) snprintf(out, cap, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(out, cap, "%02ld:%02ld", t / 60, t % 60);
}

static void progress(int64_t done, int64_t n, double elapsed, bool last) {
    static const char *const part[] = {"", "▏", "▎", "▍", "▌", "▋", "▊", "▉"};
    enum { width = 30 };
    double frac = n ? (double)done / (double)n : 1.0;
    int eighths = (int)(frac * width * 8);
    char bar[width * 4 + 8];
    size_t k = 0;
    for (int i = 0; i < eighths / 8; i++) k += (size_t)snprintf(bar + k, sizeof bar - k, "█");
    if (eighths / 8 < width) {
        k += (size_t)snprintf(bar + k, sizeof bar - k, "%s", part[eighths % 8]);
        for (int i = eighths / 8 + (eighths % 8 ? 1 : 0); i < width; i++) bar[k++] = ' ';
    }
    bar[k] = 0;
    double rate = elapsed > 0 ? (double)done / elapsed : 0.0;
    char el[32], rem[32] = "?";
    fmt_dur(elapsed, el, sizeof el);
    if (rate > 0) fmt_dur((double)(n - done) / rate, rem, sizeof rem);
    fprintf(stderr, "\r%3.0f%%|%s| %lld/%lld [%s<%s, %.2fit/s]%s", frac * 100.0, bar, (long long)done, (long long)n,
            el, rem, rate, last ? "\n" : "");
    fflush(stderr);
}

static void raise_fd_limit(int64_t streams) {
    struct rlimit rl;
    rlim_t need = (rlim_t)streams + 64;
    if (getrlimit(RLIMIT_NOFILE, &rl) || rl.rlim_cur >= need) return;
    rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > need ? need : rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < need)
        LOG_WARNING("open-file limit %llu is below the %lld streams this run may open",
                    (unsigned long long)rl.rlim_cur, (long long)streams);
}

double bench_run(const bench_run_cfg_t *c, char *const *payloads, int64_t n, const double *delay_s,
                 bench_output_t *outs) {
    int64_t max_open = c->max_concurrency > 0 && c->max_concurrency < n ? c->max_concurrency : n;
    raise_fd_limit(max_open);
    CURLM *m = c->multi ? c->multi : curl_multi_init();
    if (!m) sl_die("curl_multi_init failed");
    curl_multi_setopt(m, CURLMOPT_MAXCONNECTS, (long)(max_open > 0 ? max_open : 1));
    stream_t *st = sl_calloc((size_t)(n ? n : 1), sizeof *st);
    int64_t *fifo = sl_malloc((size_t)(n ? n : 1) * sizeof *fifo), head = 0, tail = 0;
    double *arrival = sl_malloc((size_t)(n ? n : 1) * sizeof *arrival);
    int64_t next = 0, done = 0, active = 0;
    double t0 = sl_now_s(), drawn = -1.0;
    if (c->progress) progress(0, n, 0.0, n == 0);
    while (done < n) {
        double now = sl_now_s();
        while (next < n && t0 + delay_s[next] <= now) arrival[next] = now, fifo[tail++] = next++;
        while (head < tail && (c->max_concurrency <= 0 || active < c->max_concurrency)) {
            int64_t i = fifo[head++];
            st[i].out = &outs[i];
            start(m, &st[i], c, payloads[i], i);
            outs[i].queue_time = outs[i].start_time - arrival[i];
            active++;
        }
        int still = 0;
        curl_multi_perform(m, &still);
        bool freed = false;
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE) continue;
            stream_t *s = NULL;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&s);
            finish(m, s, msg->data.result);
            active--, done++, freed = true;
        }
        now = sl_now_s();
        if (c->progress && (done == n || now - drawn >= 0.1)) {
            progress(done, n, now - t0, done == n);
            drawn = now;
        }
        if (done == n || (freed && head < tail)) continue;
        double wait_ms = 100.0;
        if (next < n) wait_ms = fmin(wait_ms, (t0 + delay_s[next] - now) * 1000.0);
        curl_multi_poll(m, NULL, 0, wait_ms > 0 ? (int)wait_ms : 0, NULL);
    }
    double duration = sl_now_s() - t0;
    free(st), free(fifo), free(arrival);
    if (!c->multi) curl_multi_cleanup(m);
    return duration;
}
