/* fp8.cuh - the fp8 KV cache's element types on the device (--kv-cache-dtype
 * fp8 = fp8_e4m3, fp8_e5m2; docs/architecture.md, "fp8 KV cache").
 *
 * An fp8 cache element is one byte, OCP's E4M3 (no infinities, 0x7f NaN,
 * largest finite 448) or E5M2 (IEEE-like, largest finite 57344), with vLLM's
 * default per-tensor scale of 1.0: the stored code is the value itself.
 * Writing rounds to nearest even and saturates to the largest finite value
 * (NaN stays NaN), through cuda_fp8.h's __nv_cvt_float_to_fp8 with
 * __NV_SATFINITE: on sm_89 and later one cvt.rn.satfinite instruction, and
 * bit for bit the CPU's f32_to_fp8_e4m3 / _e5m2 (include/servelab/dtype.h).
 * Reading widens two codes at once to two halves (cvt.f16x2.e4m3x2): exact,
 * since every E4M3 and E5M2 value is a half (and a bfloat16, and a float).
 *
 * The element types are tags (one byte, no arithmetic): a kernel templated
 * on its KV element type KV takes KV = T (the activation dtype, as before)
 * or one of these, and moves between the two through kv_load / kv_store.
 * Header-only; attention_common.cuh and rope_kv.cu include it.
 */
#ifndef SERVELAB_KERNELS_CUDA_FP8_CUH
#define SERVELAB_KERNELS_CUDA_FP8_CUH

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <stdint.h>

#include <type_traits>

namespace slfp8 {

struct e4m3 {
    uint8_t bits;
    static constexpr __nv_fp8_interpretation_t kind = __NV_E4M3;
};
struct e5m2 {
    uint8_t bits;
    static constexpr __nv_fp8_interpretation_t kind = __NV_E5M2;
};

template <typename KV> inline constexpr bool is_fp8 = std::is_same_v<KV, e4m3> || std::is_same_v<KV, e5m2>;

/* x as an F code: nearest even, saturating to the largest finite value. */
template <typename F> __device__ __forceinline__ uint32_t encode1(float x) {
    return (uint32_t)__nv_cvt_float_to_fp8(x, __NV_SATFINITE, F::kind);
}

/* The F codes in the low 16 bits of w (lower address in the low byte) as
 * two floats, exactly. */
template <typename F> __device__ __forceinline__ float2 decode2(uint32_t w) {
    const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2((__nv_fp8x2_storage_t)(w & 0xffffu), F::kind);
    return make_float2(__half2float(__ushort_as_half(h.x)), __half2float(__ushort_as_half(h.y)));
}

/* N (4 or 8) F codes, packed little-endian in 32-bit words, as N floats. */
template <typename F, int N> __device__ __forceinline__ void decode(const uint32_t *w, float *f) {
#pragma unroll
    for (int i = 0; i < N / 4; i++) {
        const float2 a = decode2<F>(w[i]), b = decode2<F>(w[i] >> 16);
        f[4 * i] = a.x, f[4 * i + 1] = a.y, f[4 * i + 2] = b.x, f[4 * i + 3] = b.y;
    }
}

/* N (4 or 8) floats as N F codes packed into N / 4 words. */
template <typename F, int N> __device__ __forceinline__ void encode(const float *f, uint32_t *w) {
#pragma unroll
    for (int i = 0; i < N / 4; i++)
        w[i] = encode1<F>(f[4 * i]) | encode1<F>(f[4 * i + 1]) << 8 | encode1<F>(f[4 * i + 2]) << 16 |
               encode1<F>(f[4 * i + 3]) << 24;
}

}  // namespace slfp8

#endif
