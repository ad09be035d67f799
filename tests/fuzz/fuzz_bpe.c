/* fuzz_bpe.c - libFuzzer target for byte-level BPE: tokenizer.json parsing,
 * encode/decode round trips.
 *
 * The first byte picks the mode. Odd: the rest is a tokenizer.json; loading
 * must succeed or fail with a one-line message naming the file, and a loaded
 * tokenizer must encode a few fixed strings to ids in range whose decode is
 * valid UTF-8. Even: the rest is text for the committed smollm test tokenizer
 * (tests/data/bpe/smollm, read at start from the repository root, where
 * scripts/run-fuzzers.sh runs); valid UTF-8 must encode, and decoding the ids
 * must give the text back byte for byte (byte-level BPE loses nothing: its
 * added tokens are ASCII); any id sequence must decode to valid UTF-8.
 * Seeds: corpus/bpe/.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static bpe_t *smollm;

/* Strict UTF-8: no overlongs, surrogates or code points past U+10FFFF. */
static bool utf8_ok(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i], lo = 0x80, hi = 0xBF;
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        if (!k || i + k > n) return false;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
        for (size_t j = 1; j < k; j++, lo = 0x80, hi = 0xBF)
            if ((uint8_t)s[i + j] < lo || (uint8_t)s[i + j] > hi) return false;
        i += k;
    }
    return true;
}

static void check_decode(const bpe_t *b, const int32_t *ids, size_t n) {
    for (int skip = 0; skip < 2; skip++) {
        size_t len;
        char *d = bpe_decode(b, ids, n, skip, &len);
        if (!utf8_ok(d, len)) abort();
        free(d);
    }
}

static void load_smollm(void) {
    sl_err_t err;
    const char *path = "tests/data/bpe/smollm/tokenizer.json";
    size_t len;
    char *json = sl_read_file(path, 64u << 20, &len, &err);
    if (!json || !(smollm = bpe_load(json, len, path, &err))) {
        fprintf(stderr, "fuzz_bpe: %s (run from the repository root)\n", err.msg);
        abort();
    }
    free(json);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!smollm) load_smollm();
    const char *body = (const char *)data + 1;
    size_t n = size - 1;
    sl_err_t err;
    int32_t *ids;
    size_t n_ids;
    if (data[0] & 1) {
        char *json = malloc(n + 1);
        memcpy(json, body, n);
        json[n] = '\0';
        bpe_t *b = bpe_load(json, n, "fuzz/tokenizer.json", &err);
        free(json);
        if (!b) {
            if (strchr(err.msg, '\n') || strncmp(err.msg, "fuzz/tokenizer.json: ", 21) != 0) abort();
            return 0;
        }
        const char *texts[] = {"Hello world 123", "  <|x|> é 中文 😀\n\n", ""};
        for (int i = 0; i < 3; i++) {
            if (bpe_encode(b, texts[i], strlen(texts[i]), true, &ids, &n_ids, &err) != 0) {
                if (strchr(err.msg, '\n')) abort(); /* a fuzzed regex may hit PCRE2's limits */
                continue;
            }
            for (size_t k = 0; k < n_ids; k++)
                if (ids[k] < 0 || ids[k] >= bpe_vocab_size(b)) abort();
            check_decode(b, ids, n_ids);
            free(ids);
        }
        bpe_free(b);
        return 0;
    }
    int rc = bpe_encode(smollm, body, n, false, &ids, &n_ids, &err);
    if (rc != 0) {
        if (utf8_ok(body, n)) abort(); /* valid text must encode */
    } else {
        size_t len;
        char *back = bpe_decode(smollm, ids, n_ids, false, &len);
        if (len != n || memcmp(back, body, n)) abort();
        free(back);
        free(ids);
    }
    /* The same bytes read as ids. */
    size_t n_raw = n / 2;
    int32_t *raw = malloc((n_raw + 1) * sizeof *raw);
    for (size_t i = 0; i < n_raw; i++) raw[i] = (int32_t)((uint8_t)body[2 * i] | (uint8_t)body[2 * i + 1] << 8) % 1300;
    check_decode(smollm, raw, n_raw);
    free(raw);
    return 0;
}
