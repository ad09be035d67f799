/* elementwise.cu - the memory-bound ops: embed, gather_rows, add, silu_mul,
 * rmsnorm and the fused residual add + rmsnorm.
 *
 * Launch shapes (chosen in launch_plan.h, unit-tested on the CPU):
 * - row copies (embed, gather_rows, and kv_write in rope_kv.cu): grid
 *   (accesses of a row / threads, rows, pairs of arrays); the access is the
 *   widest of 16/8/4/2/1 bytes dividing every address and the row size, so a
 *   copy is dtype-blind and has no tail. embed has its own kernel on the same
 *   plan: a vocabulary shard maps an id to a table row or to a row of zeros,
 *   a range check the plain copies (gather_rows, kv_write) do not pay.
 * - flat ops (add, silu_mul): 256 threads, grid-stride over 16-byte packs when
 *   every pointer is 16-byte aligned (else single elements), then a scalar
 *   tail for the n % pack elements.
 * - norms: threads per row a power of two, 32..1024, so that each takes 1
 *   access (few rows: latency) or up to 4 (from 1024 rows); 32 is a warp per
 *   row, 8 rows per block, else a block per row. fp32 sum of squares (fmaf),
 *   warp/block butterfly, then a second pass scales. A thread issues up to
 *   SLK_NORM_UNROLL 16-byte loads before using any. The second pass re-reads
 *   the row (an L1/L2 hit: the block just read it) rather than holding it in
 *   registers, so one kernel serves every n.
 * Choices for parity with kernels/cpu/ops_cpu.c: r = 1.0f / sqrtf(ss / n +
 * eps) with IEEE division and sqrt (not rsqrtf, 2 ulp), y = w * (x * r) with
 * __fmul_rn; only the order of the fp32 sum of squares differs from the CPU.
 * silu uses expf (<= 2 ulp from glibc's) and an IEEE division.
 * Aliasing (no __restrict__ where the ops allow it): rmsnorm's out may be in,
 * silu_mul's out may be gate, add_rmsnorm's out may be y (not x): the thread
 * that reads an element is the one that writes its alias, reads first.
 * embed's and gather_rows' out must not overlap their source (the CPU's
 * sequential memmove allows it; rows copied in parallel do not).
 */
#include "common.cuh"
#include "kernels.h"
#include "launch_plan.h"

namespace {

/* ---- row copies ------------------------------------------------------------ */

/* Up to two (dst, src) array pairs copied row by row, blockIdx.z picking the
 * pair. Row r reads src row src_idx[r] (r when NULL) and writes dst row
 * dst_idx[r] (r when NULL); a negative index skips the row. */
struct CopyRows {
    char *dst0, *dst1;
    const char *src0, *src1;
    const int32_t *src_idx; /* (rows) device, or NULL */
    const int64_t *dst_idx; /* (rows) device, or NULL */
    int64_t rows, words;    /* words: accesses of W per row */
};

template <typename W> __global__ void __launch_bounds__(256) copy_rows_kernel(const CopyRows a) {
    W *const dst = reinterpret_cast<W *>(blockIdx.z ? a.dst1 : a.dst0);
    const W *const src = reinterpret_cast<const W *>(blockIdx.z ? a.src1 : a.src0);
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t r = blockIdx.y; r < a.rows; r += gridDim.y) {
        const int64_t s = a.src_idx ? (int64_t)a.src_idx[r] : r, d = a.dst_idx ? a.dst_idx[r] : r;
        if (s < 0 || d < 0) continue;
        const W *srow = src + s * a.words;
        W *drow = dst + d * a.words;
        for (int64_t c = first; c < a.words; c += stride) drow[c] = srow[c];
    }
}

/* out row t = table row ids[t] - vocab0 when that is in [0, n_rows), else a
 * row of zeros (the ids of another rank's vocabulary shard). */
template <typename W>
__global__ void __launch_bounds__(256)
    embed_kernel(W *__restrict__ out, const W *__restrict__ table, const int32_t *__restrict__ ids, int64_t T,
                 int64_t words, int64_t vocab0, int64_t n_rows) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    for (int64_t t = blockIdx.y; t < T; t += gridDim.y) {
        const int64_t row = (int64_t)ids[t] - vocab0;
        W *drow = out + t * words;
        if (row >= 0 && row < n_rows) {
            const W *srow = table + row * words;
            for (int64_t c = first; c < words; c += stride) drow[c] = srow[c];
        } else {
            for (int64_t c = first; c < words; c += stride) drow[c] = W{};
        }
    }
}

template <typename W>
int launch_embed(const slk_copy_plan_t &p, void *out, const void *table, const int32_t *ids, int64_t T,
                 int64_t vocab0, int64_t n_rows, int64_t row_bytes, cudaStream_t st) {
    const dim3 grid((unsigned)p.blocks_x, (unsigned)p.blocks_y);
    embed_kernel<W><<<grid, p.threads, 0, st>>>(static_cast<W *>(out), static_cast<const W *>(table), ids, T,
                                                row_bytes / p.width, vocab0, n_rows);
    return slk::launch_result();
}

}  // namespace

/* Declared in common.cuh (rope_kv.cu's slk_kv_write uses it too). */
int slk::copy_rows(void *dst0, const void *src0, void *dst1, const void *src1, const int32_t *src_idx,
                  const int64_t *dst_idx, int64_t rows, int64_t row_bytes, cudaStream_t st) {
    if (rows <= 0 || row_bytes <= 0) return 0;
    const int pairs = dst1 ? 2 : 1;
    const slk_copy_plan_t p = slk_plan_copy(rows, row_bytes, slk::or_addr(dst0, src0, dst1, src1));
    const CopyRows a = {(char *)dst0, (char *)dst1, (const char *)src0, (const char *)src1,
                        src_idx,      dst_idx,      rows,               row_bytes / p.width};
    const dim3 grid((unsigned)p.blocks_x, (unsigned)p.blocks_y, (unsigned)pairs);
    switch (p.width) {
    case 16: copy_rows_kernel<uint4><<<grid, p.threads, 0, st>>>(a); break;
    case 8: copy_rows_kernel<uint2><<<grid, p.threads, 0, st>>>(a); break;
    case 4: copy_rows_kernel<uint32_t><<<grid, p.threads, 0, st>>>(a); break;
    case 2: copy_rows_kernel<uint16_t><<<grid, p.threads, 0, st>>>(a); break;
    default: copy_rows_kernel<uint8_t><<<grid, p.threads, 0, st>>>(a); break;
    }
    return slk::launch_result();
}

namespace {

/* ---- flat elementwise ------------------------------------------------------ */

struct AddOp {
    __device__ __forceinline__ float operator()(float x, float y) const { return x + y; }
};
/* cpu_silu_mul: g / (1 + expf(-g)) * u, evaluated in that order. */
struct SiluMulOp {
    __device__ __forceinline__ float operator()(float g, float u) const { return g / (1.0f + expf(-g)) * u; }
};

/* out(n) = op(a, b); out may alias a (each element is read, then written, by one thread). */
template <typename T, int V, typename Op>
__global__ void __launch_bounds__(256) flat_kernel(T *out, const T *a, const T *b, int64_t n, Op op) {
    const int64_t first = (int64_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (int64_t)gridDim.x * blockDim.x;
    const int64_t n_vec = n / V;
    for (int64_t i = first; i < n_vec; i += stride) {
        float fa[V], fb[V];
        slk::load_vec<T, V>(a + i * V, fa);
        slk::load_vec<T, V>(b + i * V, fb);
#pragma unroll
        for (int e = 0; e < V; e++) fa[e] = op(fa[e], fb[e]);
        slk::store_vec<T, V>(out + i * V, fa);
    }
    for (int64_t i = n_vec * V + first; i < n; i += stride)
        out[i] = slk::from_f32<T>(op(slk::to_f32(a[i]), slk::to_f32(b[i])));
}

template <typename T, typename Op>
int launch_flat(void *out, const void *a, const void *b, int64_t n, cudaStream_t st) {
    if (n <= 0) return n == 0 ? 0 : (int)cudaErrorInvalidValue;
    const slk_flat_plan_t p = slk_plan_flat(n, (int)sizeof(T), slk::or_addr(out, a, b));
    constexpr int N = slk::Pack<T>::N;
    T *o = static_cast<T *>(out);
    const T *x = static_cast<const T *>(a), *y = static_cast<const T *>(b);
    if (p.vec == N)
        flat_kernel<T, N, Op><<<(unsigned)p.blocks, p.threads, 0, st>>>(o, x, y, n, Op());
    else
        flat_kernel<T, 1, Op><<<(unsigned)p.blocks, p.threads, 0, st>>>(o, x, y, n, Op());
    return slk::launch_result();
}

/* ---- RMSNorm ----------------------------------------------------------------- */

constexpr int U = SLK_NORM_UNROLL;

/* This thread's share of the row's sum of squares: accesses first,
 * first + stride, ... of V elements, U loads in flight at a time. With ADD,
 * x += y is stored first, rounded to T, and the rounded value is what is
 * squared (the unfused add then rmsnorm reads x back from memory). */
template <typename T, int V, bool ADD>
__device__ __forceinline__ float row_sumsq(const T *x, T *x_out, const T *y, int64_t n_acc, int first, int stride) {
    float ss = 0.0f;
    for (int64_t c0 = first; c0 < n_acc; c0 += (int64_t)stride * U) {
        slk::raw_t<T, V> rx[U] = {}, ry[U] = {};
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * stride;
            if (c < n_acc) {
                rx[u] = slk::load_raw<T, V>(x + c * V);
                if constexpr (ADD) ry[u] = slk::load_raw<T, V>(y + c * V);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * stride;
            if (c < n_acc) {
                float a[V];
                slk::unpack<T, V>(rx[u], a);
                if constexpr (ADD) {
                    float b[V];
                    slk::unpack<T, V>(ry[u], b);
#pragma unroll
                    for (int e = 0; e < V; e++) a[e] = slk::round_to<T>(a[e] + b[e]);
                    slk::store_vec<T, V>(x_out + c * V, a);
                }
#pragma unroll
                for (int e = 0; e < V; e++) ss = fmaf(a[e], a[e], ss);
            }
        }
    }
    return ss;
}

/* out = w * (x * r) over the same accesses as row_sumsq (so out may alias x's
 * or y's elements: this thread read them, and nobody else touches them). */
template <typename T, int V>
__device__ __forceinline__ void row_scale(T *out, const T *x, const T *w, float r, int64_t n_acc, int first,
                                          int stride) {
    for (int64_t c0 = first; c0 < n_acc; c0 += (int64_t)stride * U) {
        slk::raw_t<T, V> rx[U] = {}, rw[U] = {};
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * stride;
            if (c < n_acc) {
                rx[u] = slk::load_raw<T, V>(x + c * V);
                rw[u] = slk::load_raw<T, V>(w + c * V);
            }
        }
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t c = c0 + (int64_t)u * stride;
            if (c < n_acc) {
                float a[V], g[V];
                slk::unpack<T, V>(rx[u], a);
                slk::unpack<T, V>(rw[u], g);
#pragma unroll
                for (int e = 0; e < V; e++) a[e] = __fmul_rn(g[e], __fmul_rn(a[e], r));
                slk::store_vec<T, V>(out + c * V, a);
            }
        }
    }
}

/* Rows of n: x (rows, n) read (and, with ADD, x += y written back through
 * x_out == x), out (rows, n) = rmsnorm(x) * w. WARP: a warp per row, blockDim
 * / 32 rows per block; else the whole block per row. */
template <typename T, int V, bool ADD, bool WARP>
__global__ void __launch_bounds__(1024) rmsnorm_kernel(const T *x, T *x_out, const T *y, const T *__restrict__ w,
                                                       T *out, int64_t rows, int64_t n, float eps) {
    const int64_t n_acc = n / V;
    const int lane = WARP ? (int)(threadIdx.x & 31) : (int)threadIdx.x, tpr = WARP ? 32 : (int)blockDim.x;
    const int64_t rows_per_block = WARP ? (int64_t)(blockDim.x >> 5) : 1;
    const int64_t first_row = (int64_t)blockIdx.x * rows_per_block + (WARP ? (int64_t)(threadIdx.x >> 5) : 0);
    for (int64_t row = first_row; row < rows; row += (int64_t)gridDim.x * rows_per_block) {
        const int64_t off = row * n;
        float ss = row_sumsq<T, V, ADD>(x + off, ADD ? x_out + off : nullptr, ADD ? y + off : nullptr, n_acc, lane,
                                        tpr);
        ss = WARP ? slk::warp_sum(ss) : slk::block_sum(ss);
        const float r = 1.0f / sqrtf(ss / (float)n + eps);
        row_scale<T, V>(out + off, x + off, w, r, n_acc, lane, tpr);
    }
}

template <typename T, int V, bool ADD>
int launch_norm_v(const slk_norm_plan_t &p, T *x_out, const T *x, const T *y, const T *w, T *out, int64_t rows,
                  int64_t n, float eps, cudaStream_t st) {
    if (p.threads_per_row == 32)
        rmsnorm_kernel<T, V, ADD, true><<<(unsigned)p.blocks, p.threads, 0, st>>>(x, x_out, y, w, out, rows, n, eps);
    else
        rmsnorm_kernel<T, V, ADD, false><<<(unsigned)p.blocks, p.threads, 0, st>>>(x, x_out, y, w, out, rows, n, eps);
    return slk::launch_result();
}

template <typename T, bool ADD>
int launch_norm(void *x_out, const void *x, const void *y, const void *w, void *out, int64_t rows, int64_t n,
                float eps, cudaStream_t st) {
    if (rows < 0 || n < 0) return (int)cudaErrorInvalidValue;
    if (rows == 0 || n == 0) return 0;
    const slk_norm_plan_t p = slk_plan_norm(rows, n, (int)sizeof(T), slk::or_addr(x, y, w, out));
    constexpr int N = slk::Pack<T>::N;
    T *xo = static_cast<T *>(x_out), *o = static_cast<T *>(out);
    const T *xi = static_cast<const T *>(x), *yi = static_cast<const T *>(y), *wi = static_cast<const T *>(w);
    if (p.vec == N) return launch_norm_v<T, N, ADD>(p, xo, xi, yi, wi, o, rows, n, eps, st);
    return launch_norm_v<T, 1, ADD>(p, xo, xi, yi, wi, o, rows, n, eps, st);
}

}  // namespace

/* ---- launchers (kernels.h) --------------------------------------------------- */

extern "C" int slk_embed(void *out, const void *table, const int32_t *ids, int64_t T, int64_t n, int64_t vocab0,
                         int64_t n_rows, sl_dtype_t dt, void *stream) {
    const int eb = slk_elem_bytes(dt);
    if (!eb || T < 0 || n < 0 || vocab0 < 0 || n_rows < 0) return (int)cudaErrorInvalidValue;
    if (T == 0 || n == 0) return 0;
    const int64_t row_bytes = n * eb;
    const slk_copy_plan_t p = slk_plan_copy(T, row_bytes, slk::or_addr(out, table));
    const cudaStream_t st = slk::as_stream(stream);
    switch (p.width) {
    case 16: return launch_embed<uint4>(p, out, table, ids, T, vocab0, n_rows, row_bytes, st);
    case 8: return launch_embed<uint2>(p, out, table, ids, T, vocab0, n_rows, row_bytes, st);
    case 4: return launch_embed<uint32_t>(p, out, table, ids, T, vocab0, n_rows, row_bytes, st);
    case 2: return launch_embed<uint16_t>(p, out, table, ids, T, vocab0, n_rows, row_bytes, st);
    default: return launch_embed<uint8_t>(p, out, table, ids, T, vocab0, n_rows, row_bytes, st);
    }
}

extern "C" int slk_gather_rows(void *out, const void *in, const int32_t *idx, int64_t S, int64_t n, sl_dtype_t dt,
                               void *stream) {
    const int eb = slk_elem_bytes(dt);
    if (!eb || S < 0 || n < 0) return (int)cudaErrorInvalidValue;
    return slk::copy_rows(out, in, nullptr, nullptr, idx, nullptr, S, n * eb, slk::as_stream(stream));
}

extern "C" int slk_add(void *x, const void *y, int64_t n, sl_dtype_t dt, void *stream) {
    SLK_DISPATCH(dt, T, return launch_flat<T, AddOp>(x, x, y, n, slk::as_stream(stream)));
}

extern "C" int slk_silu_mul(void *out, const void *gate, const void *up, int64_t n, sl_dtype_t dt, void *stream) {
    SLK_DISPATCH(dt, T, return launch_flat<T, SiluMulOp>(out, gate, up, n, slk::as_stream(stream)));
}

extern "C" int slk_rmsnorm(void *out, const void *in, const void *w, int64_t T, int64_t n, float eps, sl_dtype_t dt,
                           void *stream) {
    SLK_DISPATCH(dt, E, return launch_norm<E, false>(nullptr, in, nullptr, w, out, T, n, eps, slk::as_stream(stream)));
}

extern "C" int slk_add_rmsnorm(void *x, void *out, const void *y, const void *w, int64_t T, int64_t n, float eps,
                               sl_dtype_t dt, void *stream) {
    SLK_DISPATCH(dt, E, return launch_norm<E, true>(x, x, y, w, out, T, n, eps, slk::as_stream(stream)));
}
