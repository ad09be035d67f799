/* vec_exp.h - e^x for the CPU kernels, branch-free so that a loop of it
 * vectorizes (GCC turns the selects into blends): Cephes' expf polynomial on
 * the reduced argument r = x - n ln 2, with 2^n put into the exponent field
 * directly. Within 2 ulp of glibc's expf on their common range.
 *
 *   exp_neg(x)  x <= 0 only (softmax weights): 0 below -86, where 2^n would
 *               leave the normal range (e^-86 is 4e-38).
 *   exp_f32(x)  any x: 0 below -86, +inf above expf's overflow threshold,
 *               NaN for NaN. 2^n goes in as 2^(n-1) times 2, so that n = 128
 *               (x up to 88.72) still fits the exponent field.
 */
#ifndef SERVELAB_VEC_EXP_H
#define SERVELAB_VEC_EXP_H

#include <stdint.h>
#include <string.h>

/* p(r) ~ e^r on |r| <= ln 2 / 2, n the integer nearest x / ln 2, *ti the
 * bits of n + 1.5 * 2^23 (its low mantissa bits hold n). */
static inline float exp_reduced(float x, int32_t *ti) {
    float t = x * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: rounds to an integer */
    float n = t - 12582912.0f;
    memcpy(ti, &t, sizeof *ti);
    float r = x - n * 0.693359375f;
    r = r + n * 2.12194440e-4f; /* ln 2 = 0.693359375 - 2.12194440e-4, the product above exact */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    return p * r * r + r + 1.0f;
}

/* p * 2^(n + bias), n from ti (exp_reduced), by adding to p's exponent field. */
static inline float exp_scale(float p, int32_t ti, int32_t bias) {
    int32_t pi;
    memcpy(&pi, &p, sizeof pi);
    pi += (ti - 0x4b400000 + bias) * (1 << 23);
    memcpy(&p, &pi, sizeof p);
    return p;
}

static inline float exp_neg(float x) {
    float xc = x < -86.0f ? -86.0f : x;
    int32_t ti;
    float p = exp_reduced(xc, &ti);
    p = exp_scale(p, ti, 0);
    return x < -86.0f ? 0.0f : p;
}

static inline float exp_f32(float x) {
    float xc = x < -86.0f ? -86.0f : x > 88.8f ? 88.8f : x == x ? x : 0.0f;
    int32_t ti;
    float p = exp_reduced(xc, &ti);
    p = exp_scale(p, ti, -1) * 2.0f; /* overflows to inf past 88.72 */
    return x == x ? (x < -86.0f ? 0.0f : p) : x;
}

#endif
