/* test_utf8.c - the strict UTF-8 decoder (include/servelab/utf8.h).
 *
 * Every scalar value round-trips through a plain encoder written here; random
 * byte strings decode only where re-encoding gives the same bytes (so no
 * overlong, surrogate or out-of-range form is accepted); the maximal
 * subparts are the Unicode standard's own example (section 3.9, "U+FFFD
 * Substitution of Maximal Subparts"), which Python's errors="replace"
 * reproduces: 61 F1 80 80 E1 80 C2 62 80 63 80 BF 64 -> a, 3 x U+FFFD, b,
 * U+FFFD, c, 2 x U+FFFD, d.
 */
#include "servelab/utf8.h"
#include "test.h"

static int encode(uint32_t cp, uint8_t out[4]) {
    if (cp < 0x80) return out[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return out[0] = (uint8_t)(0xC0 | cp >> 6), out[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000) {
        out[0] = (uint8_t)(0xE0 | cp >> 12), out[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (uint8_t)(0xF0 | cp >> 18), out[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)), out[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static void test_every_scalar_value_round_trips(void) {
    int bad = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; cp++) {
        if (cp >= 0xD800 && cp <= 0xDFFF) continue;
        uint8_t b[4];
        int n = encode(cp, b);
        uint32_t got = 0xFFFFFFFF;
        int k = utf8_decode(b, (size_t)n, &got, NULL);
        bad += k != n || got != cp;
        /* every proper prefix is a valid, unfinished one */
        for (int m = 1; m < n; m++) {
            size_t sub = 0;
            bad += utf8_decode(b, (size_t)m, &got, &sub) != 0 || sub != (size_t)m;
        }
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_random_bytes_decode_only_to_their_canonical_form(void) {
    int accepted = 0, wrong = 0;
    for (int i = 0; i < 200000; i++) {
        uint8_t b[4];
        uint64_t r = test_rng();
        for (int j = 0; j < 4; j++) b[j] = (uint8_t)(r >> (8 * j));
        if (i % 2) b[0] = (uint8_t)(0xC0 | (b[0] & 0x3F)); /* half of them start a multi-byte form */
        uint32_t cp;
        size_t sub = 0;
        int k = utf8_decode(b, 4, &cp, &sub);
        if (k > 0) {
            uint8_t e[4];
            accepted++;
            wrong += encode(cp, e) != k || memcmp(e, b, (size_t)k) != 0 || (cp >= 0xD800 && cp <= 0xDFFF) ||
                     cp > 0x10FFFF;
        } else {
            wrong += k != -1 || sub < 1 || sub > 3; /* 4 bytes are enough to finish any form */
        }
    }
    CHECK(accepted > 1000);
    CHECK_EQ_INT(wrong, 0);
}

static void test_invalid_forms_are_refused(void) {
    static const char *bad[] = {"\xC0\x80", "\xC1\xBF", "\xE0\x80\x80", "\xE0\x9F\xBF", "\xED\xA0\x80",
                                "\xED\xBF\xBF", "\xF0\x80\x80\x80", "\xF0\x8F\xBF\xBF", "\xF4\x90\x80\x80",
                                "\xF5\x80\x80\x80", "\xFF", "\x80", "\xE2\x28\xA1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t cp;
        CHECK_EQ_INT(utf8_decode((const uint8_t *)bad[i], strlen(bad[i]), &cp, NULL), -1);
        CHECK(!utf8_valid(bad[i], strlen(bad[i])));
        CHECK_EQ_INT(utf8_invalid_at(bad[i], strlen(bad[i])), 0);
    }
    CHECK(utf8_valid("", 0));
    CHECK(utf8_valid("caf\xC3\xA9 \xF0\x9F\x9A\x80", 10));
    CHECK_EQ_INT(utf8_invalid_at("ab\xE2\x82", 4), 2); /* unfinished at the end */
    CHECK(utf8_valid("a\0b", 3));                     /* U+0000 is a scalar value */
}

static void test_maximal_subparts_are_the_unicode_standards(void) {
    const uint8_t s[] = {0x61, 0xF1, 0x80, 0x80, 0xE1, 0x80, 0xC2, 0x62, 0x80, 0x63, 0x80, 0xBF, 0x64};
    const char *want = "a###b#c##d"; /* '#': one U+FFFD */
    char got[32];
    size_t o = 0;
    for (size_t i = 0; i < sizeof s;) {
        uint32_t cp;
        size_t sub;
        int k = utf8_decode(s + i, sizeof s - i, &cp, &sub);
        if (k > 0) {
            got[o++] = (char)cp;
            i += (size_t)k;
        } else {
            got[o++] = '#';
            i += sub;
        }
    }
    got[o] = '\0';
    CHECK(strcmp(got, want) == 0);
}

int main(void) {
    test_seed();
    RUN(test_every_scalar_value_round_trips);
    RUN(test_random_bytes_decode_only_to_their_canonical_form);
    RUN(test_invalid_forms_are_refused);
    RUN(test_maximal_subparts_are_the_unicode_standards);
    return test_summary();
}
