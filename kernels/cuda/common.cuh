/* common.cuh - device helpers shared by the kernels in kernels/cuda/.
 *
 * Element types: float, __nv_bfloat16, __half; every value is widened to fp32
 * as it is loaded and narrowed with round-to-nearest-even as it is stored,
 * bit for bit the CPU's dtype_to_f32 / dtype_from_f32 on finite values (a NaN
 * stays a NaN, its payload may differ). Accesses come in two widths: one
 * element, or 16 bytes (Pack<T>::N elements) from a 16-byte aligned address,
 * picked at compile time by the V template argument of load_vec / store_vec
 * (load_raw + unpack when a thread wants several loads in flight in few
 * registers). Reductions are fp32 butterflies (every lane gets the sum).
 * Launchers pick the instantiation with SLK_DISPATCH and end with
 * slk::launch_result(). slk::copy_rows (elementwise.cu) is the dtype-blind
 * row copy behind gather_rows and kv_write. Nothing here is visible
 * to C: kernels.h is the only seam.
 */
#ifndef SERVELAB_KERNELS_CUDA_COMMON_CUH
#define SERVELAB_KERNELS_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

#include <type_traits>

#include "servelab/config.h"

namespace slk {

/* ---- scalar conversions ---------------------------------------------------- */

__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

/* x rounded to T and widened back: the value a store then a load would give. */
template <typename T> __device__ __forceinline__ float round_to(float x) { return to_f32(from_f32<T>(x)); }

/* ---- 16-byte packs --------------------------------------------------------- */

/* N elements of T fill one 16-byte access. */
template <typename T> struct Pack {
    static constexpr int N = 16 / (int)sizeof(T);
};

/* Two 16-bit elements packed in one 32-bit word, lower address in the low half. */
__device__ __forceinline__ float lo_f32(uint32_t w, __nv_bfloat16) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float hi_f32(uint32_t w, __nv_bfloat16) { return __uint_as_float(w & 0xffff0000u); }
__device__ __forceinline__ float lo_f32(uint32_t w, __half) {
    return __half2float(__ushort_as_half((unsigned short)(w & 0xffffu)));
}
__device__ __forceinline__ float hi_f32(uint32_t w, __half) {
    return __half2float(__ushort_as_half((unsigned short)(w >> 16)));
}
__device__ __forceinline__ uint32_t bits16(float x, __nv_bfloat16) {
    return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x));
}
__device__ __forceinline__ uint32_t bits16(float x, __half) {
    return (uint32_t)__half_as_ushort(__float2half_rn(x));
}

/* V elements of T as loaded, not yet widened: T itself, or a 16-byte pack
 * (4 registers however many elements it holds, so a thread can keep several
 * loads in flight cheaply and widen each one as it is used). */
template <typename T, int V> using raw_t = std::conditional_t<V == 1, T, uint4>;

/* Loads V elements of T at p. V is 1, or Pack<T>::N with p 16-byte aligned. */
template <typename T, int V> __device__ __forceinline__ raw_t<T, V> load_raw(const T *p) {
    static_assert(V == 1 || V == Pack<T>::N, "a load is one element or 16 bytes");
    if constexpr (V == 1) return *p;
    else return *reinterpret_cast<const uint4 *>(p);
}

/* Widens what load_raw<T, V> returned to V fp32 values (exact). */
template <typename T, int V> __device__ __forceinline__ void unpack(const raw_t<T, V> &r, float (&f)[V]) {
    if constexpr (V == 1) {
        f[0] = to_f32(r);
    } else if constexpr (sizeof(T) == 4) {
        f[0] = __uint_as_float(r.x), f[1] = __uint_as_float(r.y), f[2] = __uint_as_float(r.z),
        f[3] = __uint_as_float(r.w);
    } else {
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int j = 0; j < 4; j++) f[2 * j] = lo_f32(w[j], T()), f[2 * j + 1] = hi_f32(w[j], T());
    }
}

/* Loads V elements of T at p as fp32 (load_raw, then unpack). */
template <typename T, int V> __device__ __forceinline__ void load_vec(const T *p, float (&f)[V]) {
    unpack<T, V>(load_raw<T, V>(p), f);
}

/* One plain (weak) 16-byte global store. Written in PTX because NVVM splits
 * some uint4 stores into four 4-byte ones, and the __st* intrinsics come out
 * as STRONG (memory-model) stores; "memory" keeps it ordered with the
 * loads and stores around it, as a C++ store through an aliasing pointer is. */
__device__ __forceinline__ void st_global_16(void *p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) {
    asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

/* Stores V fp32 values at p as T, rounding to nearest even. Same V rule as load_vec. */
template <typename T, int V> __device__ __forceinline__ void store_vec(T *p, const float (&f)[V]) {
    static_assert(V == 1 || V == Pack<T>::N, "a store is one element or 16 bytes");
    if constexpr (V == 1) {
        *p = from_f32<T>(f[0]);
    } else if constexpr (sizeof(T) == 4) {
        st_global_16(p, __float_as_uint(f[0]), __float_as_uint(f[1]), __float_as_uint(f[2]), __float_as_uint(f[3]));
    } else {
        uint32_t w[4];
#pragma unroll
        for (int j = 0; j < 4; j++) w[j] = bits16(f[2 * j], T()) | (bits16(f[2 * j + 1], T()) << 16);
        st_global_16(p, w[0], w[1], w[2], w[3]);
    }
}

/* ---- reductions ------------------------------------------------------------ */

/* Sum over the 32 lanes of a full warp; every lane gets the result. */
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block; every thread gets the result. blockDim.x must be a
 * multiple of 32 (at most 1024) and every thread of the block must call it.
 * Safe to call repeatedly: the leading barrier keeps a previous call's
 * readers ahead of this call's writers. */
__device__ __forceinline__ float block_sum(float v) {
    __shared__ float part[32];
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int n_warps = (int)(blockDim.x >> 5);
    v = warp_sum(v);
    __syncthreads();
    if (lane == 0) part[warp] = v;
    __syncthreads();
    return warp_sum(lane < n_warps ? part[lane] : 0.0f);
}

/* ---- tensor cores ---------------------------------------------------------- */

/* d += A (16x16, row) B (16x8, col), fp32 accumulate: a is the A fragment
 * (a[0]: row g, columns 2t, 2t+1; a[1]: row g+8; a[2], a[3]: columns + 8),
 * b0 / b1 the B fragment (rows 2t, 2t+1 / + 8 of column g), d rows g (d[0],
 * d[1]) and g+8 (d[2], d[3]), columns 2t, 2t+1; g = lane / 4, t = lane % 4. */
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    if constexpr (std::is_same<T, __nv_bfloat16>::value) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %11, %12, %13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]),
                       "f"(d[2]), "f"(d[3]));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %11, %12, %13};\n"
                     : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(d[0]), "f"(d[1]),
                       "f"(d[2]), "f"(d[3]));
    }
}

/* ---- launch helpers -------------------------------------------------------- */

/* The launch's error (cudaSuccess = 0) as the int every launcher returns. */
static inline int launch_result(void) { return (int)cudaGetLastError(); }

static inline cudaStream_t as_stream(void *stream) { return (cudaStream_t)stream; }

/* Bitwise OR of addresses: (or_addr(...) % 16 == 0) iff every one is 16-byte aligned. */
static inline uintptr_t or_addr(const void *p) { return (uintptr_t)p; }
template <typename... R> static inline uintptr_t or_addr(const void *p, R... rest) {
    return (uintptr_t)p | or_addr(rest...);
}

/* Copies `rows` rows of row_bytes: dst0 row dst_idx[r] = src0 row src_idx[r]
 * (r where an index array is NULL; a negative index skips the row), and the
 * same for (dst1, src1) unless dst1 is NULL. Dtype-blind. Returns the launch's
 * error; no launch when there is nothing to copy. Defined in elementwise.cu. */
int copy_rows(void *dst0, const void *src0, void *dst1, const void *src1, const int32_t *src_idx,
              const int64_t *dst_idx, int64_t rows, int64_t row_bytes, cudaStream_t st);

}  // namespace slk

/* Runs the statement(s) in __VA_ARGS__ with `T` the element type of `dt`
 * (float, __nv_bfloat16, __half); any other dtype returns
 * cudaErrorInvalidValue from the enclosing launcher. */
#define SLK_DISPATCH(dt, T, ...)                                                                   \
    switch (dt) {                                                                                  \
    case DTYPE_F32: {                                                                              \
        using T = float;                                                                           \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case DTYPE_BF16: {                                                                             \
        using T = __nv_bfloat16;                                                                   \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    case DTYPE_F16: {                                                                              \
        using T = __half;                                                                          \
        __VA_ARGS__;                                                                               \
    } break;                                                                                       \
    default: return (int)cudaErrorInvalidValue;                                                    \
    }

/* Element size of a float dtype the kernels take, or 0 for any other. */
static inline int slk_elem_bytes(sl_dtype_t dt) {
    return dt == DTYPE_F32 ? 4 : (dt == DTYPE_BF16 || dt == DTYPE_F16) ? 2 : 0;
}

#endif
