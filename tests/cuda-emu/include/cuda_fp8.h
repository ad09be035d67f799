/* cuda_fp8.h (cuda-emu stand-in): the two conversions kernels/cuda/fp8.cuh
 * uses, written from their documented semantics, not from the CPU's
 * f32_to_fp8_* (src/core/dtype.c), so that the parity tests compare two
 * independent implementations.
 *
 * A code's value is decoded by its formula (E4M3: bias 7, S.1111.111 NaN,
 * no infinities; E5M2: bias 15, IEEE-like). __nv_cvt_float_to_fp8 with
 * __NV_SATFINITE (the only mode the kernels use) finds the nearest finite
 * code by binary search over the sorted positive values, a tie going to the
 * even code, values past the largest finite one saturating to it (infinities
 * too), NaN giving 0x7f; the sign is copied, so -0.0 is 0x80.
 */
#ifndef SLEMU_CUDA_FP8_H
#define SLEMU_CUDA_FP8_H

#include <math.h>
#include <stdlib.h>

#include "slemu_device.h"

typedef unsigned char __nv_fp8_storage_t;
typedef unsigned short __nv_fp8x2_storage_t;
typedef enum { __NV_NOSAT, __NV_SATFINITE } __nv_saturation_t;
typedef enum { __NV_E4M3, __NV_E5M2 } __nv_fp8_interpretation_t;
struct __half2_raw {
    unsigned short x, y;
};

/* The value of code c (0..255) of kind k. */
static inline float slemu_fp8_value(unsigned c, __nv_fp8_interpretation_t k) {
    const int man = k == __NV_E4M3 ? 3 : 2, bias = k == __NV_E4M3 ? 7 : 15;
    const unsigned e = (c & 0x7fu) >> man, m = c & ((1u << man) - 1);
    const unsigned e_max = k == __NV_E4M3 ? 15 : 31;
    float v;
    if (k == __NV_E4M3 && e == e_max && m == (1u << man) - 1) v = NAN;
    else if (k == __NV_E5M2 && e == e_max) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexpf((float)m, 1 - bias - man);
    else v = ldexpf((float)((1u << man) + m), (int)e - bias - man);
    return c & 0x80u ? -v : v;
}

static inline __nv_fp8_storage_t __nv_cvt_float_to_fp8(float x, __nv_saturation_t sat,
                                                       __nv_fp8_interpretation_t k) {
    if (sat != __NV_SATFINITE) abort(); /* the kernels use satfinite only */
    if (isnan(x)) return 0x7f;
    const unsigned sign = signbit(x) ? 0x80u : 0u, max_code = k == __NV_E4M3 ? 0x7eu : 0x7bu;
    const float a = fabsf(x);
    if (a >= slemu_fp8_value(max_code, k)) return (__nv_fp8_storage_t)(sign | max_code);
    unsigned lo = 0, hi = max_code; /* value(lo) <= a < value(hi) */
    while (hi - lo > 1) {
        const unsigned mid = (lo + hi) / 2;
        if (slemu_fp8_value(mid, k) <= a) lo = mid;
        else hi = mid;
    }
    const float dlo = a - slemu_fp8_value(lo, k), dhi = slemu_fp8_value(hi, k) - a;
    /* dlo is exact (Sterbenz: value(hi) <= 2 value(lo), or lo = 0), and so is dhi wherever the two can
     * be close: a tie is decided exactly */
    const unsigned c = dlo < dhi ? lo : dhi < dlo ? hi : (lo & 1u ? hi : lo);
    return (__nv_fp8_storage_t)(sign | c);
}

static inline __half2_raw __nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t x, __nv_fp8_interpretation_t k) {
    __half2_raw r;
    r.x = __half_as_ushort(__float2half_rn(slemu_fp8_value(x & 0xffu, k)));
    r.y = __half_as_ushort(__float2half_rn(slemu_fp8_value(x >> 8, k)));
    return r;
}

#endif
