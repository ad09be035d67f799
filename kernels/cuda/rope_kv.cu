/* rope_kv.cu - rotary position embedding on q and k, the paged KV-cache
 * write, and both fused in one pass (rotate, store q/k in place, store the
 * rotated k and v at the token's cache slot).
 *
 * Launch shape (launch_plan.h): a block per token, blocks striding over
 * tokens (at most SLK_ROPE_MAX_BLOCKS); the block first writes the token's
 * cos/sin table (D/2 floats each) to shared memory, then its threads take
 * (head, i..i+vec) items over the H + Hkv heads, loading x[i..] and
 * x[i + D/2 ..] as 16-byte packs when D/2 * elem is a multiple of 16 and
 * every pointer is aligned (else single elements). slk_kv_write alone is a
 * dtype-blind row copy (slk::copy_rows: grid y = tokens, z = k or v).
 *
 * Parity with cpu_rope, bit for bit in fp32 where the libm results agree:
 * - inv_freq is computed on the host by the CPU's own expression
 *   (float)(1 / pow((double)theta, (double)(2i) / D)) / scale, with the
 *   host's libm, cached per thread for (theta, scale, D), and passed in the
 *   kernel's arguments (so D <= SLK_ROPE_MAX_D);
 * - angle = (float)pos * inv_freq in fp32 (__fmul_rn), as the CPU does;
 * - cos and sin of that fp32 angle in double precision (sincos, <= 2 ulp of
 *   a double, i.e. the correctly rounded float in all but ~2^-28 of cases),
 *   as the CPU's (float)cos((double)angle) — rather than sincosf, whose 2 fp32
 *   ulp would add ~1e-7 relative error for no memory saving; it costs D/2
 *   double sincos per token, once, shared by all H + Hkv heads;
 * - x1 * c - x2 * s and x2 * c + x1 * s with __fmul_rn / __fadd_rn, never
 *   contracted into an FMA (gcc does not contract on x86-64 either).
 * A slot < 0 skips the cache write of that token (its q and k still rotate).
 *
 * An fp8 cache (kv_dt DTYPE_F8_E4M3 / _E5M2, 16-bit dt only; fp8.cuh) stores
 * each k and v element as the fp8 code of its value in dt: the rotated k
 * is rounded to dt first (the value k itself then holds), so the cache is
 * bit for bit cpu_rope, dt rounding, then cpu_kv_write_dt's conversion,
 * never a direct (double-rounding-free but different) f32 -> fp8. The
 * unfused slk_kv_write converts the same way (kv_write_kernel: a block per
 * token, 8 elements per access).
 */
#include <math.h>
#include <string.h>

#include "common.cuh"
#include "fp8.cuh"
#include "kernels.h"
#include "launch_plan.h"

namespace {

struct RopeArgs {
    void *q;                  /* (T, H, D) */
    void *k;                  /* (T, Hkv, D) */
    const void *v;            /* (T, Hkv, D), KV only */
    void *k_cache, *v_cache;  /* (slots, Hkv, D), KV only */
    const int32_t *positions; /* (T) */
    const int64_t *slots;     /* (T), KV only */
    int64_t T;
    int H, Hkv, D;
    float inv_freq[SLK_ROPE_MAX_D / 2];
};

/* Copies one (Hkv * D)-element row of raw T values, V per access. */
template <typename T, int V> __device__ __forceinline__ void copy_row(T *dst, const T *src, int n) {
    if constexpr (V == 1) {
        for (int i = (int)threadIdx.x; i < n; i += (int)blockDim.x) dst[i] = src[i];
    } else {
        uint4 *d = reinterpret_cast<uint4 *>(dst);
        const uint4 *s = reinterpret_cast<const uint4 *>(src);
        for (int i = (int)threadIdx.x; i < n / V; i += (int)blockDim.x) d[i] = s[i];
    }
}

/* Stores V floats as KV at p: as T (store_vec), or each rounded to T and
 * then to its fp8 code (V = 1, or 8 bytes from an 8-byte aligned p). */
template <typename T, typename KV, int V> __device__ __forceinline__ void store_kv(KV *p, const float (&f)[V]) {
    if constexpr (std::is_same_v<T, KV>) {
        slk::store_vec<T, V>(p, f);
    } else {
        static_assert(slfp8::is_fp8<KV> && sizeof(T) == 2 && (V == 1 || V == 8), "fp8 from 16-bit T");
        float r[V];
#pragma unroll
        for (int e = 0; e < V; e++) r[e] = slk::round_to<T>(f[e]);
        if constexpr (V == 1) {
            p->bits = (uint8_t)slfp8::encode1<KV>(r[0]);
        } else {
            uint32_t w[2];
            slfp8::encode<KV, 8>(r, w);
            *reinterpret_cast<uint2 *>(p) = make_uint2(w[0], w[1]);
        }
    }
}

/* One (n)-element row of T values into a cache row of KV, V per access
 * (copied raw when KV is T). */
template <typename T, typename KV, int V> __device__ __forceinline__ void store_row(KV *dst, const T *src, int n) {
    if constexpr (std::is_same_v<T, KV>) {
        copy_row<T, V>(dst, src, n);
    } else {
        for (int i = (int)threadIdx.x; i < n / V; i += (int)blockDim.x) {
            float f[V];
            slk::load_vec<T, V>(src + i * V, f);
            store_kv<T, KV, V>(dst + i * V, f);
        }
    }
}

template <typename T, typename C, int V, bool KV>
__global__ void __launch_bounds__(SLK_ROPE_MAX_THREADS) rope_kernel(const __grid_constant__ RopeArgs a) {
    extern __shared__ float cs[]; /* [0, half): cos, [half, 2 half): sin */
    const int half = a.D / 2, per_head = half / V, items = (a.H + a.Hkv) * per_head;
    T *const q = static_cast<T *>(a.q);
    T *const k = static_cast<T *>(a.k);
    for (int64_t t = blockIdx.x; t < a.T; t += gridDim.x) {
        const float pos = (float)a.positions[t];
        __syncthreads(); /* the previous token's readers are done with cs */
        for (int i = (int)threadIdx.x; i < half; i += (int)blockDim.x) {
            double s, c;
            sincos((double)__fmul_rn(pos, a.inv_freq[i]), &s, &c);
            cs[i] = (float)c;
            cs[half + i] = (float)s;
        }
        __syncthreads();
        const int64_t slot = KV ? a.slots[t] : -1;
        for (int it = (int)threadIdx.x; it < items; it += (int)blockDim.x) {
            const int h = it / per_head, j = (it - h * per_head) * V;
            T *x = h < a.H ? q + (t * a.H + h) * a.D : k + (t * a.Hkv + (h - a.H)) * a.D;
            float x1[V], x2[V];
            slk::load_vec<T, V>(x + j, x1);
            slk::load_vec<T, V>(x + half + j, x2);
#pragma unroll
            for (int e = 0; e < V; e++) {
                const float c = cs[j + e], s = cs[half + j + e], a1 = x1[e], a2 = x2[e];
                x1[e] = __fsub_rn(__fmul_rn(a1, c), __fmul_rn(a2, s));
                x2[e] = __fadd_rn(__fmul_rn(a2, c), __fmul_rn(a1, s));
            }
            slk::store_vec<T, V>(x + j, x1);
            slk::store_vec<T, V>(x + half + j, x2);
            if (KV && h >= a.H && slot >= 0) {
                C *kc = static_cast<C *>(a.k_cache) + (slot * a.Hkv + (h - a.H)) * a.D;
                store_kv<T, C, V>(kc + j, x1);
                store_kv<T, C, V>(kc + half + j, x2);
            }
        }
        if (KV && slot >= 0) {
            const int64_t row = (int64_t)a.Hkv * a.D;
            store_row<T, C, V>(static_cast<C *>(a.v_cache) + slot * row, static_cast<const T *>(a.v) + t * row,
                               (int)row);
            if (a.D & 1) { /* odd D: element D - 1 of each k head is not rotated, but is cached */
                C *kc = static_cast<C *>(a.k_cache) + slot * row;
                const T *kt = k + t * row;
                for (int h = (int)threadIdx.x; h < a.Hkv; h += (int)blockDim.x)
                    store_kv<T, C, 1>(kc + h * a.D + a.D - 1, {slk::to_f32(kt[h * a.D + a.D - 1])});
            }
        }
    }
}

/* inv_freq[i] exactly as cpu_rope computes it, for i < D/2. The host's libm
 * pow is the CPU twin's; the table is cached per thread (a TP rank worker
 * rotates with the same (theta, scale, D) every layer and step). */
const float *rope_inv_freq(float theta, float scale, int64_t D) {
    struct Cache {
        int valid;
        float theta, scale;
        int64_t D;
        float f[SLK_ROPE_MAX_D / 2];
    };
    static thread_local Cache c;
    if (!(c.valid && c.theta == theta && c.scale == scale && c.D == D)) {
        for (int64_t i = 0; i < D / 2; i++) {
            float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)D));
            inv_freq /= scale;
            c.f[i] = inv_freq;
        }
        c.valid = 1, c.theta = theta, c.scale = scale, c.D = D;
    }
    return c.f;
}

/* C: the cache's element type (T, or fp8 with 16-bit T); unused without KV. */
template <typename T, typename C, bool KV> int launch_rope(RopeArgs &a, cudaStream_t st) {
    const slk_rope_plan_t p = slk_plan_rope(a.T, a.H, a.Hkv, a.D, (int)sizeof(T),
                                            slk::or_addr(a.q, a.k, a.v, a.k_cache, a.v_cache));
    constexpr int N = slk::Pack<T>::N;
    if (p.vec == N)
        rope_kernel<T, C, N, KV><<<(unsigned)p.blocks, p.threads, p.smem_bytes, st>>>(a);
    else
        rope_kernel<T, C, 1, KV><<<(unsigned)p.blocks, p.threads, p.smem_bytes, st>>>(a);
    return slk::launch_result();
}

/* k and v (T, Hkv, D) in T into an fp8 cache of C at their slots: a block per
 * token (striding), V elements per access. */
template <typename T, typename C, int V>
__global__ void __launch_bounds__(256) kv_write_kernel(C *__restrict__ kc, C *__restrict__ vc,
                                                       const T *__restrict__ k, const T *__restrict__ v,
                                                       const int64_t *__restrict__ slots, int64_t T_, int row) {
    for (int64_t t = blockIdx.x; t < T_; t += gridDim.x) {
        const int64_t slot = slots[t];
        if (slot < 0) continue; /* block-uniform; no barrier in the loop */
        store_row<T, C, V>(kc + slot * row, k + t * row, row);
        store_row<T, C, V>(vc + slot * row, v + t * row, row);
    }
}

template <typename T, typename C> int launch_kv_write(void *kc, void *vc, const void *k, const void *v,
                                                      const int64_t *slots, int64_t T_, int64_t row,
                                                      cudaStream_t st) {
    const unsigned blocks = (unsigned)slk_min64(T_, SLK_ROPE_MAX_BLOCKS);
    /* 8 elements per access when every row starts 16-byte aligned in T (so 8 in fp8) */
    if (slk_vec_elems((int)sizeof(T), slk::or_addr(kc, vc, k, v) | (uintptr_t)(row * (int64_t)sizeof(T))) > 1)
        kv_write_kernel<T, C, slk::Pack<T>::N><<<blocks, 256, 0, st>>>(
            static_cast<C *>(kc), static_cast<C *>(vc), static_cast<const T *>(k), static_cast<const T *>(v),
            slots, T_, (int)row);
    else
        kv_write_kernel<T, C, 1><<<blocks, 256, 0, st>>>(static_cast<C *>(kc), static_cast<C *>(vc),
                                                         static_cast<const T *>(k), static_cast<const T *>(v),
                                                         slots, T_, (int)row);
    return slk::launch_result();
}

/* Checks the sizes and fills everything in `a` but the KV pointers. Returns
 * 0 to launch, -1 when there is nothing to do, or a cudaError_t. */
int rope_args(RopeArgs &a, void *q, void *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv, int64_t D,
              float theta, float scale) {
    if (T < 0 || H < 0 || Hkv < 0 || D < 0 || D > SLK_ROPE_MAX_D || (H + Hkv) * D > INT32_MAX)
        return (int)cudaErrorInvalidValue;
    if (T == 0 || H + Hkv == 0 || D == 0) return -1;
    a.q = q, a.k = k, a.v = nullptr, a.k_cache = a.v_cache = nullptr;
    a.positions = positions, a.slots = nullptr;
    a.T = T, a.H = (int)H, a.Hkv = (int)Hkv, a.D = (int)D;
    memcpy(a.inv_freq, rope_inv_freq(theta, scale, D), (size_t)(D / 2) * sizeof(float));
    return 0;
}

/* The cache's element type for (dt, kv_dt): 0 as dt, 1 fp8 e4m3, 2 fp8
 * e5m2 (16-bit dt only), -1 a pair the kernels do not take. */
int kv_kind(sl_dtype_t dt, sl_dtype_t kv_dt) {
    if (!slk_elem_bytes(dt)) return -1;
    if (kv_dt == dt) return 0;
    if (dt == DTYPE_F32) return -1;
    return kv_dt == DTYPE_F8_E4M3 ? 1 : kv_dt == DTYPE_F8_E5M2 ? 2 : -1;
}

}  // namespace

/* ---- launchers (kernels.h) --------------------------------------------------- */

extern "C" int slk_rope(void *q, void *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                        float theta, float scale, sl_dtype_t dt, void *stream) {
    if (!slk_elem_bytes(dt)) return (int)cudaErrorInvalidValue;
    RopeArgs a = {};
    const int rc = rope_args(a, q, k, positions, T, H, Hkv, D, theta, scale);
    if (rc) return rc < 0 ? 0 : rc;
    SLK_DISPATCH(dt, E, return launch_rope<E, E, false>(a, slk::as_stream(stream)));
}

extern "C" int slk_kv_write(void *k_cache, void *v_cache, const void *k, const void *v, const int64_t *slot_mapping,
                            int64_t T, int64_t Hkv, int64_t D, sl_dtype_t dt, sl_dtype_t kv_dt, void *stream) {
    const int eb = slk_elem_bytes(dt), kind = kv_kind(dt, kv_dt);
    if (kind < 0 || T < 0 || Hkv < 0 || D < 0 || Hkv * D > INT32_MAX) return (int)cudaErrorInvalidValue;
    if (kind == 0)
        return slk::copy_rows(k_cache, k, v_cache, v, nullptr, slot_mapping, T, Hkv * D * eb,
                              slk::as_stream(stream));
    if (T == 0 || Hkv * D == 0) return 0;
    cudaStream_t st = slk::as_stream(stream);
    if (dt == DTYPE_BF16)
        return kind == 1 ? launch_kv_write<__nv_bfloat16, slfp8::e4m3>(k_cache, v_cache, k, v, slot_mapping, T,
                                                                       Hkv * D, st)
                         : launch_kv_write<__nv_bfloat16, slfp8::e5m2>(k_cache, v_cache, k, v, slot_mapping, T,
                                                                       Hkv * D, st);
    return kind == 1 ? launch_kv_write<__half, slfp8::e4m3>(k_cache, v_cache, k, v, slot_mapping, T, Hkv * D, st)
                     : launch_kv_write<__half, slfp8::e5m2>(k_cache, v_cache, k, v, slot_mapping, T, Hkv * D, st);
}

extern "C" int slk_rope_kv_write(void *q, void *k, const void *v, void *k_cache, void *v_cache,
                                 const int32_t *positions, const int64_t *slot_mapping, int64_t T, int64_t H,
                                 int64_t Hkv, int64_t D, float theta, float scale, sl_dtype_t dt, sl_dtype_t kv_dt,
                                 void *stream) {
    const int kind = kv_kind(dt, kv_dt);
    if (kind < 0) return (int)cudaErrorInvalidValue;
    RopeArgs a = {};
    const int rc = rope_args(a, q, k, positions, T, H, Hkv, D, theta, scale);
    if (rc) return rc < 0 ? 0 : rc;
    a.v = v, a.k_cache = k_cache, a.v_cache = v_cache, a.slots = slot_mapping;
    cudaStream_t st = slk::as_stream(stream);
    if (kind == 0) SLK_DISPATCH(dt, E, return launch_rope<E, E, true>(a, st));
    if (dt == DTYPE_BF16)
        return kind == 1 ? launch_rope<__nv_bfloat16, slfp8::e4m3, true>(a, st)
                         : launch_rope<__nv_bfloat16, slfp8::e5m2, true>(a, st);
    return kind == 1 ? launch_rope<__half, slfp8::e4m3, true>(a, st) : launch_rope<__half, slfp8::e5m2, true>(a, st);
}
