/* openai_json.c - the byte-level writers of the OpenAI layer.
 *
 * vLLM's bodies come out of Python (json.dumps(ensure_ascii=False) and pydantic),
 * so strings keep UTF-8 as is and escape only '"', '\\' and control characters,
 * and floats are written as repr(float): the shortest digits that read back as
 * the same double, "1.0" for integral values, exponent form below 1e-4 and from
 * 1e16. cJSON would write 1.0 as "1" and is not used for output for that reason.
 * Also the byte-level checks of input: UTF-8, and the scan of raw JSON text for
 * what cJSON would let through (see oai_json_scan in openai_internal.h).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai_internal.h"

static void sb_reserve(oai_sb_t *b, size_t extra) {
    if (b->len + extra + 1 <= b->cap) return;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    b->buf = sl_realloc(b->buf, cap);
    b->cap = cap;
}

void sb_put(oai_sb_t *b, const char *s, size_t n) {
    sb_reserve(b, n);
    if (n) memcpy(b->buf + b->len, s, n);
    b->len += n;
    b->buf[b->len] = '\0';
}

void sb_puts(oai_sb_t *b, const char *s) { sb_put(b, s, strlen(s)); }

void sb_printf(oai_sb_t *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    SL_ASSERT(n >= 0);
    sb_reserve(b, (size_t)n);
    vsnprintf(b->buf + b->len, (size_t)n + 1, fmt, ap2);
    va_end(ap2);
    b->len += (size_t)n;
}

void sb_json_str(oai_sb_t *b, const char *s, size_t n) {
    sb_reserve(b, n + 2);
    b->buf[b->len++] = '"';
    size_t run = 0; /* bytes copied verbatim in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        sb_put(b, s + run, i - run);
        run = i + 1;
        switch (c) {
        case '"': sb_put(b, "\\\"", 2); break;
        case '\\': sb_put(b, "\\\\", 2); break;
        case '\n': sb_put(b, "\\n", 2); break;
        case '\r': sb_put(b, "\\r", 2); break;
        case '\t': sb_put(b, "\\t", 2); break;
        case '\b': sb_put(b, "\\b", 2); break;
        case '\f': sb_put(b, "\\f", 2); break;
        default: sb_printf(b, "\\u%04x", c); break;
        }
    }
    sb_put(b, s + run, n - run);
    sb_put(b, "\"", 1);
}

void sb_py_float(oai_sb_t *b, double x) {
    if (isnan(x)) {
        sb_puts(b, "NaN");
        return;
    }
    if (isinf(x)) {
        sb_puts(b, x > 0 ? "Infinity" : "-Infinity");
        return;
    }
    char out[64];
    sl_format_py_float(x, 0, out, sizeof out);
    sb_puts(b, out);
}

char *sb_take(oai_sb_t *b, size_t *len_out) {
    if (!b->buf) sb_reserve(b, 0), b->buf[0] = '\0';
    char *s = b->buf;
    if (len_out) *len_out = b->len;
    b->buf = NULL;
    b->len = b->cap = 0;
    return s;
}

oai_json_scan_t oai_json_scan(const char *s, size_t n, int max_depth, size_t *at) {
    int depth = 0;
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        *at = i;
        if (c < 0x20) { /* RFC 8259: escaped in strings; between tokens only \t \n \r */
            if (in_str || (c != '\t' && c != '\n' && c != '\r')) return OAI_JSON_CONTROL_CHAR;
        } else if (in_str) {
            if (c == '"') {
                in_str = false;
            } else if (c == '\\' && i + 1 < n) { /* the escaped byte is consumed here */
                unsigned char e = (unsigned char)s[++i];
                if (e < 0x20) {
                    *at = i;
                    return OAI_JSON_CONTROL_CHAR;
                }
                if (e == 'u' && n - i > 4 && !memcmp(s + i + 1, "0000", 4)) return OAI_JSON_NUL_ESCAPE;
            }
        } else if (c == '"') {
            in_str = true;
        } else if (c == '[' || c == '{') {
            if (++depth > max_depth) return OAI_JSON_TOO_DEEP;
        } else if (c == ']' || c == '}') {
            depth--;
        }
    }
    return OAI_JSON_OK;
}

int64_t oai_utf8_chars(const char *s, size_t n) {
    int64_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}
