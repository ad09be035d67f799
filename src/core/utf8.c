/* utf8.c - strict UTF-8 decoding (include/servelab/utf8.h). */
#include "servelab/utf8.h"

int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad) {
    size_t bad_len;
    if (!bad) bad = &bad_len;
    uint8_t c = s[0], lo = 0x80, hi = 0xBF; /* the allowed range of the next byte */
    int need;
    uint32_t v;
    if (c < 0x80) return *cp = c, 1;
    if (c >= 0xC2 && c <= 0xDF) need = 1, v = c & 0x1F;
    else if (c >= 0xE0 && c <= 0xEF) need = 2, v = c & 0x0F;
    else if (c >= 0xF0 && c <= 0xF4) need = 3, v = c & 0x07;
    else return *bad = 1, -1; /* a continuation byte, C0/C1 (overlong) or F5..FF */
    /* The second byte's range rules out overlongs (E0, F0), surrogates (ED)
     * and code points past U+10FFFF (F4), as the Unicode standard's table 3-7. */
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return *bad = n, 0;
        if (s[k] < lo || s[k] > hi) return *bad = (size_t)k, -1;
        lo = 0x80, hi = 0xBF;
        v = (v << 6) | (s[k] & 0x3F);
    }
    *cp = v;
    return need + 1;
}

size_t utf8_invalid_at(const char *s, size_t n) {
    uint32_t cp;
    for (size_t i = 0; i < n;) {
        int k = utf8_decode((const uint8_t *)s + i, n - i, &cp, NULL);
        if (k <= 0) return i;
        i += (size_t)k;
    }
    return n;
}

bool utf8_valid(const char *s, size_t n) { return utf8_invalid_at(s, n) == n; }
