/* attention_common.cuh - what the two attention kernels share: dtype
 * conversion of 16-byte vectors to fp32 and back, warp reductions, the
 * paged-slot lookup, the shared-memory limit, and the internal launchers
 * slk_attention dispatches to.
 *
 * Internal to servelab_cuda (C++ linkage, not in kernels.h). Kept separate
 * from common.cuh on purpose: the attention kernels need only these few
 * helpers. Every helper reads or writes exactly 16 bytes: 4 fp32 or 8 16-bit
 * values, converted to / from fp32 with round-to-nearest-even, as the CPU
 * reference's dtype_from_f32 does. The KV cache's element type KV is T, or
 * with 16-bit T an fp8 one (fp8.cuh): the same Vec<T>::N elements per
 * vector then take 8 bytes, so every kernel keeps T's thread layout and
 * only its K / V loads change (ldg_kv + unpack_kv, or ldg_kv_as for the
 * kernels that stage K and V in T).
 */
#ifndef SERVELAB_ATTENTION_COMMON_CUH
#define SERVELAB_ATTENTION_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <string.h>

#include <mutex>
#include <type_traits>

#include "attention_plan.h"
#include "fp8.cuh"

namespace slattn {

/* Elements per 16-byte vector. */
template <typename T> struct Vec { static constexpr int N = 16 / (int)sizeof(T); };

__device__ __forceinline__ float2 u32_to_f2(uint32_t u, const __nv_bfloat16 *) {
    __nv_bfloat162 h;
    memcpy(&h, &u, 4);
    return __bfloat1622float2(h);
}
__device__ __forceinline__ float2 u32_to_f2(uint32_t u, const __half *) {
    __half2 h;
    memcpy(&h, &u, 4);
    return __half22float2(h);
}
__device__ __forceinline__ uint32_t f2_to_u32(float a, float b, const __nv_bfloat16 *) {
    __nv_bfloat162 h = __floats2bfloat162_rn(a, b); /* .x = a (low half), .y = b */
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}
__device__ __forceinline__ uint32_t f2_to_u32(float a, float b, const __half *) {
    __half2 h = __floats2half2_rn(a, b);
    uint32_t u;
    memcpy(&u, &h, 4);
    return u;
}

/* Loads 16 bytes at p (16-byte aligned), unconverted, through the read-only
 * path: the KV cache and q never change during the kernel. Split from the
 * conversion so that a kernel can issue many loads before it needs any. */
template <typename T>
__device__ __forceinline__ uint4 ldg16(const T *__restrict__ p) {
    return __ldg(reinterpret_cast<const uint4 *>(p));
}

/* The 16 bytes u of T as Vec<T>::N floats. */
template <typename T>
__device__ __forceinline__ void unpack16(uint4 u, float *f) {
    if constexpr (sizeof(T) == 4) {
        f[0] = __uint_as_float(u.x), f[1] = __uint_as_float(u.y);
        f[2] = __uint_as_float(u.z), f[3] = __uint_as_float(u.w);
    } else {
        const T *tag = nullptr;
        float2 a = u32_to_f2(u.x, tag), b = u32_to_f2(u.y, tag), c = u32_to_f2(u.z, tag),
               d = u32_to_f2(u.w, tag);
        f[0] = a.x, f[1] = a.y, f[2] = b.x, f[3] = b.y;
        f[4] = c.x, f[5] = c.y, f[6] = d.x, f[7] = d.y;
    }
}

/* Loads 16 bytes at p (16-byte aligned) as Vec<T>::N floats. */
template <typename T>
__device__ __forceinline__ void load16(const T *__restrict__ p, float *f) {
    unpack16<T>(ldg16(p), f);
}

/* Stores Vec<T>::N floats as 16 bytes of T at p (16-byte aligned). */
template <typename T>
__device__ __forceinline__ void store16(T *p, const float *f) {
    uint4 u;
    if constexpr (sizeof(T) == 4) {
        u.x = __float_as_uint(f[0]), u.y = __float_as_uint(f[1]);
        u.z = __float_as_uint(f[2]), u.w = __float_as_uint(f[3]);
    } else {
        const T *tag = nullptr;
        u.x = f2_to_u32(f[0], f[1], tag), u.y = f2_to_u32(f[2], f[3], tag);
        u.z = f2_to_u32(f[4], f[5], tag), u.w = f2_to_u32(f[6], f[7], tag);
    }
    *reinterpret_cast<uint4 *>(p) = u;
}

/* Stores 4 floats as 4 elements of T at p (aligned to 4 elements). */
template <typename T>
__device__ __forceinline__ void store4(T *p, float a, float b, float c, float d) {
    if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<float4 *>(p) = make_float4(a, b, c, d);
    } else {
        const T *tag = nullptr;
        uint2 u;
        u.x = f2_to_u32(a, b, tag), u.y = f2_to_u32(c, d, tag);
        *reinterpret_cast<uint2 *>(p) = u;
    }
}

/* ---- the KV cache's elements: T, or fp8 with 16-bit T ---------------------------- */

enum KvKind { KV_AS_T, KV_E4M3, KV_E5M2 };

template <int BYTES> struct RawOf;
template <> struct RawOf<16> { using type = uint4; };
template <> struct RawOf<8> { using type = uint2; };

/* Vec<T>::N elements of a KV row as loaded: 16 bytes of T, or 8 fp8 codes. */
template <typename T, typename KV> using kv_raw_t = typename RawOf<Vec<T>::N * (int)sizeof(KV)>::type;

/* Loads Vec<T>::N elements of KV at p (aligned to their size), unconverted. */
template <typename T, typename KV> __device__ __forceinline__ kv_raw_t<T, KV> ldg_kv(const KV *__restrict__ p) {
    static_assert(std::is_same_v<T, KV> || (slfp8::is_fp8<KV> && sizeof(T) == 2), "KV is T, or fp8 with 16-bit T");
    return __ldg(reinterpret_cast<const kv_raw_t<T, KV> *>(p));
}

/* What ldg_kv<T, KV> returned as Vec<T>::N floats (exact). */
template <typename T, typename KV> __device__ __forceinline__ void unpack_kv(const kv_raw_t<T, KV> &u, float *f) {
    if constexpr (std::is_same_v<T, KV>) {
        unpack16<T>(u, f);
    } else {
        const uint32_t w[2] = {u.x, u.y};
        slfp8::decode<KV, 8>(w, f);
    }
}

/* Loads 8 elements of KV at p as the 16 bytes of 16-bit T they equal (fp8
 * values are exact in bf16 and f16), for the kernels that stage K and V
 * tiles in T. */
template <typename T, typename KV> __device__ __forceinline__ uint4 ldg_kv_as(const KV *__restrict__ p) {
    static_assert(sizeof(T) == 2, "16-bit T");
    if constexpr (std::is_same_v<T, KV>) {
        return ldg16(p);
    } else {
        const uint2 u = ldg_kv<T, KV>(p);
        const T *tag = nullptr;
        const uint32_t pairs[4] = {u.x, u.x >> 16, u.y, u.y >> 16}; /* decode2 reads the low 16 bits */
        uint32_t o[4];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            const float2 f = slfp8::decode2<KV>(pairs[i]);
            o[i] = f2_to_u32(f.x, f.y, tag);
        }
        return make_uint4(o[0], o[1], o[2], o[3]);
    }
}

template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
    return __float2bfloat16_rn(x);
}
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, o));
    return x;
}
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
    return x;
}

/* Cache slot of position pos of a sequence whose block table row is `table`. */
__device__ __forceinline__ int64_t kv_slot(const int32_t *__restrict__ table, int pos, int block_size) {
    return (int64_t)table[pos / block_size] * block_size + pos % block_size;
}

/* The arguments of one slk_attention call, as the kernels' launchers take them. */
struct AttnArgs {
    void *out;                    /* (T, H, D) dt */
    const void *q;                /* (T, H, D) dt */
    const void *k_cache, *v_cache; /* (n_blocks * block_size, Hkv, D) dt, or fp8 (kv) */
    KvKind kv;                    /* the cache's element type */
    const int32_t *positions;     /* (T) */
    const int32_t *query_start;   /* (S+1) */
    const int32_t *block_tables;  /* (S, max_blocks) */
    int max_blocks, block_size;
    float scale;
    float *ws;                    /* decode partials, see attn_plan_t */
};

/* Lets `kern` use `bytes` of dynamic shared memory (the default limit is
 * 48 KB). cudaFuncSetAttribute is a driver call: it runs once per kernel and
 * size, not on every launch (a prefill step launches 2 per layer). The cache
 * is per translation unit, which is per kernel file. */
static inline cudaError_t allow_dynamic_smem(const void *kern, size_t bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    static std::mutex mu;
    static struct {
        const void *kern;
        size_t bytes;
    } done[64];
    static int n_done;
    std::lock_guard<std::mutex> lock(mu);
    for (int i = 0; i < n_done; i++)
        if (done[i].kern == kern && done[i].bytes >= bytes) return cudaSuccess;
    const cudaError_t err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (err == cudaSuccess && n_done < 64) done[n_done++] = {kern, bytes};
    return err;
}

/* Raises the kernel's shared-memory limit when it needs more than the
 * default 48 KB (once, allow_dynamic_smem), then launches it on the plan's
 * grid (every prefill kernel takes these arguments). */
template <typename T, typename KV, typename Kern>
static cudaError_t launch_prefill_grid(Kern kern, size_t smem_bytes, const attn_plan_t *pl, const AttnArgs &a,
                                       cudaStream_t st) {
    cudaError_t err;
    if ((err = allow_dynamic_smem(reinterpret_cast<const void *>(kern), smem_bytes))) return err;
    const dim3 grid((unsigned)pl->prefill_grid[0], (unsigned)pl->prefill_grid[1], (unsigned)pl->prefill_grid[2]);
    kern<<<grid, ATTN_THREADS, smem_bytes, st>>>(static_cast<T *>(a.out), static_cast<const T *>(a.q),
                                                 static_cast<const KV *>(a.k_cache), static_cast<const KV *>(a.v_cache),
                                                 a.positions, a.query_start, a.block_tables, a.max_blocks,
                                                 a.block_size, (int)pl->H, (int)pl->Hkv, (int)pl->group, a.scale);
    return cudaGetLastError();
}

/* Launch the decode (+ reduce) or prefill kernels for `plan` in dtype T, where
 * T is float, __nv_bfloat16 or __half. Return a cudaError_t. The bf16 / f16
 * prefill runs the mma.sync kernel, or the wmma one when plan->prefill_wmma
 * (attention_prefill_wmma.cu). */
cudaError_t launch_decode_f32(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_decode_bf16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_decode_f16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
/* The same over an fp8 cache (a.kv KV_E4M3 or KV_E5M2; attention_decode_fp8.cu). */
cudaError_t launch_decode_fp8_bf16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_decode_fp8_f16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_prefill_f32(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_prefill_bf16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_prefill_f16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_prefill_wmma_bf16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
cudaError_t launch_prefill_wmma_f16(const attn_plan_t *plan, const AttnArgs &a, cudaStream_t st);
/* The wmma kernel's shared-memory bytes and tiles at head dim D (0: none). */
size_t prefill_wmma_smem_bytes(int64_t D, int64_t *q_tile, int64_t *kv_tile);

} // namespace slattn

#endif
