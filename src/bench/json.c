/* json.c - a small JSON writer that spells values as Python's json.dump does.
 *
 * vLLM saves results with json.dump(result, f): ", " between items, ": " after keys,
 * floats as repr() (1.0, 0.1, 1e-05), NaN/Infinity bare, and ensure_ascii (every
 * non-ASCII character as a lowercase \uXXXX escape, surrogate pairs above U+FFFF).
 * Writing the same spelling keeps result files diffable against vLLM's. Bytes that are
 * not UTF-8 become U+FFFD. cJSON parses; this only writes.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

static void put(bench_json_t *j, const char *s, size_t n) {
    if (j->len + n + 1 > j->cap) {
        size_t cap = j->cap ? j->cap : 256;
        while (cap < j->len + n + 1) cap *= 2;
        j->buf = sl_realloc(j->buf, cap);
        j->cap = cap;
    }
    memcpy(j->buf + j->len, s, n);
    j->len += n;
    j->buf[j->len] = 0;
}
static void puts_(bench_json_t *j, const char *s) { put(j, s, strlen(s)); }

/* Before a value: the separator if this container already has an item. A value right
 * after a key needs none (bj_key wrote ": "). */
static void sep(bench_json_t *j) {
    if (j->after_key) {
        j->after_key = false;
        return;
    }
    if (j->depth > 0) {
        if (j->need_comma[j->depth]) puts_(j, ", ");
        j->need_comma[j->depth] = true;
    }
}

static void open_(bench_json_t *j, const char *c) {
    sep(j);
    puts_(j, c);
    SL_ASSERT(j->depth + 1 < (int)(sizeof j->need_comma / sizeof *j->need_comma));
    j->need_comma[++j->depth] = false;
}
static void close_(bench_json_t *j, const char *c) {
    SL_ASSERT(j->depth > 0);
    j->depth--;
    puts_(j, c);
}
void bj_obj(bench_json_t *j) { open_(j, "{"); }
void bj_obj_end(bench_json_t *j) { close_(j, "}"); }
void bj_arr(bench_json_t *j) { open_(j, "["); }
void bj_arr_end(bench_json_t *j) { close_(j, "]"); }

void bj_key(bench_json_t *j, const char *key) {
    bj_str(j, key, strlen(key));
    puts_(j, ": ");
    j->after_key = true;
}

/* Decodes one UTF-8 character at s (n bytes left); returns its length, or 0 if invalid. */
static int utf8_decode(const unsigned char *s, size_t n, unsigned *cp) {
    int len = s[0] >= 0xF0 ? 4 : s[0] >= 0xE0 ? 3 : s[0] >= 0xC0 ? 2 : 0;
    if (s[0] >= 0xF8 || len == 0 || (size_t)len > n) return 0;
    unsigned c = s[0] & (0x7F >> len);
    for (int i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    static const unsigned min[5] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < min[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return 0;
    *cp = c;
    return len;
}

void bj_str(bench_json_t *j, const char *s, size_t len) {
    sep(j);
    puts_(j, "\"");
    const unsigned char *p = (const unsigned char *)s;
    char esc[16];
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        if (c >= 0x20 && c < 0x7F && c != '"' && c != '\\') {
            size_t k = i;
            while (k < len && p[k] >= 0x20 && p[k] < 0x7F && p[k] != '"' && p[k] != '\\') k++;
            put(j, s + i, k - i);
            i = k;
            continue;
        }
        if (c < 0x80) {
            const char *e = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                          : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
            if (e) puts_(j, e);
            else {
                snprintf(esc, sizeof esc, "\\u%04x", c);
                puts_(j, esc);
            }
            i++;
            continue;
        }
        unsigned cp;
        int n = utf8_decode(p + i, len - i, &cp);
        if (n == 0) cp = 0xFFFD, n = 1;
        if (cp >= 0x10000) {
            unsigned v = cp - 0x10000;
            snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
        } else {
            snprintf(esc, sizeof esc, "\\u%04x", cp);
        }
        puts_(j, esc);
        i += (size_t)n;
    }
    puts_(j, "\"");
}

void bj_int(bench_json_t *j, int64_t v) {
    char b[32];
    snprintf(b, sizeof b, "%lld", (long long)v);
    sep(j);
    puts_(j, b);
}

void bj_float(bench_json_t *j, double v) {
    char b[64];
    if (isnan(v)) snprintf(b, sizeof b, "NaN");
    else if (isinf(v)) snprintf(b, sizeof b, "%sInfinity", v < 0 ? "-" : "");
    else sl_format_py_float(v, 0, b, sizeof b);
    sep(j);
    puts_(j, b);
}

void bj_null(bench_json_t *j) {
    sep(j);
    puts_(j, "null");
}

void bj_bool(bench_json_t *j, bool v) {
    sep(j);
    puts_(j, v ? "true" : "false");
}

char *bj_take(bench_json_t *j, size_t *len) {
    SL_ASSERT(j->depth == 0);
    if (!j->buf) put(j, "", 0);
    char *out = j->buf;
    if (len) *len = j->len;
    memset(j, 0, sizeof *j);
    return out;
}
