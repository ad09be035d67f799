/* sse.c - Server-Sent Events framing for the streaming client.
 *
 * The WHATWG event-stream rules, reduced to what OpenAI-style streams use: lines end in
 * LF, CRLF or CR (a CRLF split across two reads is still one line end); a blank line
 * dispatches the event; "data:" lines (one optional space after the colon is dropped)
 * accumulate, joined by '\n'; lines starting with ':' are comments (keep-alives); other
 * fields (event, id, retry) are ignored. Bytes may arrive split anywhere. vLLM's client
 * also accepts a final "data: ..." without the blank line once the stream ends, which
 * bench_sse_end does.
 */
#include <stdlib.h>
#include <string.h>

#include "bench.h"

#define SSE_MAX_LINE ((size_t)64 << 20)

static void grow(char **buf, size_t *cap, size_t need) {
    if (need <= *cap) return;
    size_t c = *cap ? *cap : 256;
    while (c < need) c *= 2;
    *buf = sl_realloc(*buf, c);
    *cap = c;
}

static int dispatch(bench_sse_t *s, bench_sse_fn fn, void *user) {
    if (!s->has_data) return 0;
    s->has_data = false;
    size_t n = s->data_len;
    if (n && s->data[n - 1] == '\n') n--; /* the spec drops the last line feed */
    s->data[n] = 0;
    s->data_len = 0;
    return fn(user, s->data, n) ? 1 : -1;
}

/* One complete line (without its terminator). Returns events dispatched or -1. */
static int line(bench_sse_t *s, bench_sse_fn fn, void *user) {
    const char *l = s->line;
    size_t n = s->line_len;
    s->line_len = 0;
    if (n == 0) return dispatch(s, fn, user);
    if (l[0] == ':') return 0;
    const char *colon = memchr(l, ':', n);
    size_t name_len = colon ? (size_t)(colon - l) : n;
    if (name_len != 4 || memcmp(l, "data", 4)) return 0;
    const char *v = colon ? colon + 1 : l + n;
    if (v < l + n && *v == ' ') v++;
    size_t vl = (size_t)(l + n - v);
    grow(&s->data, &s->data_cap, s->data_len + vl + 2);
    memcpy(s->data + s->data_len, v, vl);
    s->data_len += vl;
    s->data[s->data_len++] = '\n';
    s->has_data = true;
    return 0;
}

int bench_sse_feed(bench_sse_t *s, const char *p, size_t n, bench_sse_fn fn, void *user) {
    int events = 0;
    for (size_t i = 0; i < n;) {
        char c = p[i];
        if (s->after_cr) {
            s->after_cr = false;
            if (c == '\n') { /* the LF of a CRLF */
                i++;
                continue;
            }
        }
        if (c == '\r' || c == '\n') {
            s->after_cr = c == '\r';
            i++;
            int r = line(s, fn, user);
            if (r < 0) return -1;
            events += r;
            continue;
        }
        size_t k = i;
        while (k < n && p[k] != '\r' && p[k] != '\n') k++;
        if (s->line_len + (k - i) > SSE_MAX_LINE) return -1;
        grow(&s->line, &s->line_cap, s->line_len + (k - i) + 1);
        memcpy(s->line + s->line_len, p + i, k - i);
        s->line_len += k - i;
        i = k;
    }
    return events;
}

int bench_sse_end(bench_sse_t *s, bench_sse_fn fn, void *user) {
    int events = 0;
    if (s->line_len) {
        int r = line(s, fn, user);
        if (r < 0) return -1;
        events += r;
    }
    int r = dispatch(s, fn, user);
    return r < 0 ? -1 : events + r;
}

void bench_sse_free(bench_sse_t *s) {
    free(s->line);
    free(s->data);
    memset(s, 0, sizeof *s);
}
