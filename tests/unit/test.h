/* test.h - a minimal unit-test harness for ctest.
 *
 * Each test file defines `static void test_<behaviour>(void)` functions and a
 * main() that calls RUN(test_...) for each, then returns test_summary(). A
 * failed CHECK prints file:line and the expression, marks the current test
 * failed and carries on; the exit status is non-zero if any test failed.
 * Random inputs come from test_rng(), seeded from SERVELAB_TEST_SEED (printed).
 */
#ifndef SERVELAB_TEST_H
#define SERVELAB_TEST_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_n_passed, test_n_failed, test_cur_failed;
static const char *test_cur_name;

#define CHECK(expr)                                                                      \
    do {                                                                                 \
        if (!(expr)) {                                                                   \
            fprintf(stderr, "  %s:%d: %s: CHECK failed: %s\n", __FILE__, __LINE__,       \
                    test_cur_name, #expr);                                               \
            test_cur_failed = 1;                                                         \
        }                                                                                \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                               \
    do {                                                                                 \
        long long va_ = (long long)(a), vb_ = (long long)(b);                            \
        if (va_ != vb_) {                                                                \
            fprintf(stderr, "  %s:%d: %s: %s == %s failed: %lld != %lld\n", __FILE__,    \
                    __LINE__, test_cur_name, #a, #b, va_, vb_);                          \
            test_cur_failed = 1;                                                         \
        }                                                                                \
    } while (0)

#define CHECK_STR_CONTAINS(haystack, needle)                                             \
    do {                                                                                 \
        const char *h_ = (haystack), *n_ = (needle);                                     \
        if (!h_ || !strstr(h_, n_)) {                                                    \
            fprintf(stderr, "  %s:%d: %s: expected \"%s\" to contain \"%s\"\n", __FILE__, \
                    __LINE__, test_cur_name, h_ ? h_ : "(null)", n_);                    \
            test_cur_failed = 1;                                                         \
        }                                                                                \
    } while (0)

#define RUN(fn)                                                                          \
    do {                                                                                 \
        test_cur_name = #fn;                                                             \
        test_cur_failed = 0;                                                             \
        fn();                                                                            \
        if (test_cur_failed) {                                                           \
            test_n_failed++;                                                             \
            fprintf(stderr, "FAIL %s\n", #fn);                                           \
        } else {                                                                         \
            test_n_passed++;                                                             \
            printf("ok   %s\n", #fn);                                                    \
        }                                                                                \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_n_passed, test_n_failed);
    return test_n_failed ? 1 : 0;
}

/* xorshift64*: small, seeded, reproducible. */
static uint64_t test_rng_state;
static inline void test_seed(void) {
    const char *s = getenv("SERVELAB_TEST_SEED");
    test_rng_state = s ? strtoull(s, NULL, 10) : 20261121u;
    if (!test_rng_state) test_rng_state = 1;
    printf("seed %llu (SERVELAB_TEST_SEED)\n", (unsigned long long)test_rng_state);
}
static inline uint64_t test_rng(void) {
    test_rng_state ^= test_rng_state >> 12;
    test_rng_state ^= test_rng_state << 25;
    test_rng_state ^= test_rng_state >> 27;
    return test_rng_state * 2685821657736338717ull;
}
/* Uniform in [-1, 1). */
static inline float test_uniform(void) {
    return (float)((double)(test_rng() >> 11) * (2.0 / 9007199254740992.0) - 1.0);
}

/* Compares n values against a double-precision reference with the budget
 * |got - ref| <= atol + rtol * |ref|; prints the worst element and its error
 * as a percentage of its budget, and fails the current test if over. */
static inline int check_close(const char *what, const float *got, const double *ref, int64_t n,
                              double atol, double rtol) {
    double worst = 0.0;
    int64_t worst_i = 0;
    for (int64_t i = 0; i < n; i++) {
        double budget = atol + rtol * fabs(ref[i]);
        double diff = fabs((double)got[i] - ref[i]);
        double frac = budget > 0 ? diff / budget : (diff == 0 ? 0.0 : INFINITY);
        if (!(frac <= worst)) { /* also catches NaN */
            worst = frac;
            worst_i = i;
            if (isnan(frac)) break;
        }
    }
    int ok = worst <= 1.0;
    printf("  %-28s n=%-8lld max error %6.1f%% of budget at [%lld]: got %.8g ref %.8g\n", what,
           (long long)n, worst * 100.0, (long long)worst_i, n ? got[worst_i] : 0.0,
           n ? ref[worst_i] : 0.0);
    if (!ok) test_cur_failed = 1;
    return ok;
}

/* Writes `len` bytes to `path`; returns 0 on success. */
static inline int test_write_file(const char *path, const void *data, size_t len) {
    FILE *f = fopen(path, "wb");
    if (!f) return -1;
    size_t n = fwrite(data, 1, len, f);
    fclose(f);
    return n == len ? 0 : -1;
}

#endif
