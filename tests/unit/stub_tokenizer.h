/* stub_tokenizer.h - a byte-level stand-in tokenizer and a UTF-8 oracle for tests of the protocol layer.
 *
 * The unit tests and fuzz targets that drive oai_request_parse and the
 * response writers without a real tokenizer share these: byte b is token
 * b + 3 (0-2 special, 1 the BOS that add_special puts first), so a prompt's
 * token count is its byte length and decoding gives the bytes back (special
 * ids as '?' unless skipped). stub_utf8_valid is an oracle written apart from
 * the code under test: strict UTF-8 (no C0/C1 leads, nothing above F4).
 */
#ifndef SERVELAB_TEST_STUB_TOKENIZER_H
#define SERVELAB_TEST_STUB_TOKENIZER_H

#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

#include "servelab/core.h"

#define STUB_VOCAB 259

static inline int stub_encode(void *user, const char *text, size_t len, bool add_special, int32_t **ids_out,
                              sl_err_t *err) {
    (void)user, (void)err;
    int32_t *ids = sl_malloc((len + 1) * sizeof *ids);
    int n = 0;
    if (add_special) ids[n++] = 1;
    for (size_t i = 0; i < len; i++) ids[n++] = (unsigned char)text[i] + 3;
    *ids_out = ids;
    return n;
}

static inline char *stub_decode(void *user, const int32_t *ids, size_t n, bool skip_special, size_t *len_out) {
    (void)user;
    char *s = sl_malloc(n + 1), *p = s;
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= 3 && ids[i] < STUB_VOCAB) *p++ = (char)(ids[i] - 3);
        else if (!skip_special) *p++ = '?';
    *p = 0;
    if (len_out) *len_out = (size_t)(p - s);
    return s;
}

static inline bool stub_utf8_valid(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    while (*u) {
        int k = *u < 0x80 ? 0 : (*u & 0xE0) == 0xC0 && *u >= 0xC2 ? 1 : (*u & 0xF0) == 0xE0 ? 2
                : (*u & 0xF8) == 0xF0 && *u <= 0xF4 ? 3 : -1;
        if (k < 0) return false;
        for (int j = 1; j <= k; j++)
            if ((u[j] & 0xC0) != 0x80) return false;
        u += k + 1;
    }
    return true;
}

#endif
