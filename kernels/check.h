/* check.h - how a kernel's output is checked against its CPU twin: the one
 * tolerance rule of the GPU parity tests (tests/kernels) and the kernel
 * bench (kernels/bench), with the random inputs both draw.
 *
 * Inputs are uniform values from a seeded generator, rounded to the kernel's
 * dtype so that host and device start from the same values. Outputs compare
 * elementwise within atol + rtol |want|, rtol a number of roundings in dt.
 * Header-only plain C, owned by kernels: tests include it, never the reverse.
 */
#ifndef SERVELAB_KERNELS_CHECK_H
#define SERVELAB_KERNELS_CHECK_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "servelab/dtype.h"

/* xorshift64* (the unit tests' test_rng): small, seeded, reproducible. *state != 0. */
static inline uint64_t kt_rng_next(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return *state * 2685821657736338717ull;
}

/* A run's seed: SERVELAB_TEST_SEED, else 20261121 (0 counts as 1); printed. */
static inline uint64_t kt_seed_from_env(void) {
    const char *s = getenv("SERVELAB_TEST_SEED");
    uint64_t seed = s ? strtoull(s, NULL, 10) : 20261121u;
    if (!seed) seed = 1;
    printf("seed %llu (SERVELAB_TEST_SEED)\n", (unsigned long long)seed);
    return seed;
}

/* f32, bf16 and f16 (activations, weights, KV caches); fp8 e4m3 / e5m2 (KV caches). */
static inline size_t kt_size(sl_dtype_t dt) { return dtype_size(dt); }
static inline const char *kt_name(sl_dtype_t dt) {
    switch (dt) {
    case DTYPE_F32: return "f32";
    case DTYPE_BF16: return "bf16";
    case DTYPE_F16: return "f16";
    case DTYPE_F8_E4M3: return "fp8_e4m3";
    case DTYPE_F8_E5M2: return "fp8_e5m2";
    default: return "?";
    }
}

/* x rounded to dt in place (as the device holds it). */
static inline void kt_round(float *x, int64_t n, sl_dtype_t dt) {
    if (dt == DTYPE_F32) return;
    void *tmp = malloc((size_t)n * dtype_size(dt));
    dtype_from_f32(tmp, x, dt, n);
    dtype_to_f32(x, tmp, dt, n);
    free(tmp);
}

/* n uniform values in [lo, hi) from rng, rounded to dt in place (so host and device agree). */
static inline void kt_fill_with(uint64_t (*rng)(void), float *x, int64_t n, float lo, float hi, sl_dtype_t dt) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)((double)(rng() >> 11) / 9007199254740992.0);
    kt_round(x, n, dt);
}

/* Relative tolerance of one rounding of the output in dt, times `ulps`. */
static inline double kt_eps(sl_dtype_t dt) { return dt == DTYPE_F32 ? 1.2e-7 : dt == DTYPE_BF16 ? 7.9e-3 : 9.8e-4; }

/* Compares got with want elementwise: |got - want| <= atol + rtol * |want|,
 * rtol = ulps * kt_eps(dt), atol = rtol * (the largest |want|) * floor_frac.
 * Prints the worst element on failure. Returns 1 when every element is close. */
static inline int kt_close(const char *what, const float *got, const float *want, int64_t n, sl_dtype_t dt,
                           double ulps, double floor_frac) {
    double maxw = 0;
    for (int64_t i = 0; i < n; i++) maxw = fmax(maxw, fabs((double)want[i]));
    double rtol = ulps * kt_eps(dt), atol = rtol * maxw * floor_frac + 1e-30;
    int64_t worst = -1;
    double worst_r = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]), lim = atol + rtol * fabs((double)want[i]);
        if (!(d <= lim) && (worst < 0 || d / lim > worst_r)) worst = i, worst_r = d / lim;
    }
    if (worst >= 0) {
        fprintf(stderr, "  %s (%s): element %lld got %.8g want %.8g (%.1fx the tolerance)\n", what, kt_name(dt),
                (long long)worst, got[worst], want[worst], worst_r);
        return 0;
    }
    return 1;
}

#endif
