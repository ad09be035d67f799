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
 */
#include <math.h>
#include <string.h>

#include "common.cuh"
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

template <typename T, int V, bool KV>
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
                T *kc = static_cast<T *>(a.k_cache) + (slot * a.Hkv + (h - a.H)) * a.D;
                slk::store_vec<T, V>(kc + j, x1);
                slk::store_vec<T, V>(kc + half + j, x2);
            }
        }
        if (KV && slot >= 0) {
            const int64_t row = (int64_t)a.Hkv * a.D;
            copy_row<T, V>(static_cast<T *>(a.v_cache) + slot * row, static_cast<const T *>(a.v) + t * row,
                           (int)row);
            if (a.D & 1) { /* odd D: element D - 1 of each k head is not rotated, but is cached */
                T *kc = static_cast<T *>(a.k_cache) + slot * row;
                const T *kt = k + t * row;
                for (int h = (int)threadIdx.x; h < a.Hkv; h += (int)blockDim.x)
                    kc[h * a.D + a.D - 1] = kt[h * a.D + a.D - 1];
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

template <typename T, bool KV> int launch_rope(RopeArgs &a, cudaStream_t st) {
    const slk_rope_plan_t p = slk_plan_rope(a.T, a.H, a.Hkv, a.D, (int)sizeof(T),
                                            slk::or_addr(a.q, a.k, a.v, a.k_cache, a.v_cache));
    constexpr int N = slk::Pack<T>::N;
    if (p.vec == N)
        rope_kernel<T, N, KV><<<(unsigned)p.blocks, p.threads, p.smem_bytes, st>>>(a);
    else
        rope_kernel<T, 1, KV><<<(unsigned)p.blocks, p.threads, p.smem_bytes, st>>>(a);
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

}  // namespace

/* ---- launchers (kernels.h) --------------------------------------------------- */

extern "C" int slk_rope(void *q, void *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                        float theta, float scale, sl_dtype_t dt, void *stream) {
    if (!slk_elem_bytes(dt)) return (int)cudaErrorInvalidValue;
    RopeArgs a = {};
    const int rc = rope_args(a, q, k, positions, T, H, Hkv, D, theta, scale);
    if (rc) return rc < 0 ? 0 : rc;
    SLK_DISPATCH(dt, E, return launch_rope<E, false>(a, slk::as_stream(stream)));
}

extern "C" int slk_kv_write(void *k_cache, void *v_cache, const void *k, const void *v, const int64_t *slot_mapping,
                            int64_t T, int64_t Hkv, int64_t D, sl_dtype_t dt, void *stream) {
    const int eb = slk_elem_bytes(dt);
    if (!eb || T < 0 || Hkv < 0 || D < 0) return (int)cudaErrorInvalidValue;
    return slk::copy_rows(k_cache, k, v_cache, v, nullptr, slot_mapping, T, Hkv * D * eb, slk::as_stream(stream));
}

extern "C" int slk_rope_kv_write(void *q, void *k, const void *v, void *k_cache, void *v_cache,
                                 const int32_t *positions, const int64_t *slot_mapping, int64_t T, int64_t H,
                                 int64_t Hkv, int64_t D, float theta, float scale, sl_dtype_t dt, void *stream) {
    if (!slk_elem_bytes(dt)) return (int)cudaErrorInvalidValue;
    RopeArgs a = {};
    const int rc = rope_args(a, q, k, positions, T, H, Hkv, D, theta, scale);
    if (rc) return rc < 0 ? 0 : rc;
    a.v = v, a.k_cache = k_cache, a.v_cache = v_cache, a.slots = slot_mapping;
    SLK_DISPATCH(dt, E, return launch_rope<E, true>(a, slk::as_stream(stream)));
}
