/* gemv.cu - out(T, N) = in(T, K) . W(N, K)^T for decode-sized T (<= 8):
 * the linears and logits of a decode step, where cuBLAS leaves much of the
 * HBM bandwidth unused (a GEMM tiling for T = 1 wastes most of its tile).
 * The CUDA backend calls it for T <= 2, where it measured faster than
 * cuBLAS (cuda_backend.c, GEMV_MAX_T); from T = 4 its fp32 FMAs on the CUDA
 * cores lose to cuBLAS's tensor cores.
 *
 * Memory-bound design (shapes chosen by slk_plan_gemv in launch_plan.h):
 * - a warp owns `R` weight rows (2 at T' = 1, else min(T', 4); T' is T
 *   rounded up to 1, 2, 4 or 8) and one K slice of them; its lanes read
 *   16-byte packs, so a warp reads 512 contiguous bytes of a row per access.
 *   Each lane issues SLK_GEMV_LOADS (8) weight loads (8 / R per row) before
 *   its first FMA, and the next batch of 8 before using the current one;
 *   the last, partial batch is predicated, its loads issued together too.
 *   Weights are streamed (ld.global.cs: read once, evict first).
 * - the input pack at the same k, one per token, is read through L1 (it is
 *   small and every warp of the SM reads it) and serves all R rows: each
 *   weight byte is read from HBM exactly once, for every token.
 * - fp32 FMAs, a butterfly per (row, token); when K is split over ksplit
 *   warps (small N: fill the SMs), the slices meet in shared memory and are
 *   summed in slice order: deterministic, run to run.
 * - padded tokens (T < T') read input row T - 1 and store nothing; rows past
 *   N read row N - 1 and store nothing. No early return: every thread
 *   reaches the barrier.
 * Pointers or K that break 16-byte alignment of the rows take the same
 * kernel with one-element accesses. Graph-capture safe: no allocation, no
 * sync, the grid from host sizes. The CPU twin is cpu_linear (ops_cpu.h);
 * only the order of the fp32 sum differs.
 */
#include "common.cuh"
#include "kernels.h"
#include "launch_plan.h"

namespace {

constexpr int WARPS = SLK_GEMV_THREADS / 32;

/* The 16-byte loads are written in PTX for their cache hints. Note that
 * ptxas, left to itself, sinks each weight load of a batch next to its
 * first FMA (two loads in flight, not SLK_GEMV_LOADS); the software
 * pipelining in the kernel is what keeps the batch's loads together. */

/* V elements of a weight row: streamed (ld.global.cs: evict first). */
template <typename T, int V> __device__ __forceinline__ slk::raw_t<T, V> load_weight(const T *p) {
    if constexpr (V == 1) {
        return *p;
    } else {
        uint4 r;
        asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p));
        return r;
    }
}

/* V input elements as fp32, through the read-only (L1) path. */
template <typename T, int V> __device__ __forceinline__ void load_input(const T *p, float (&f)[V]) {
    if constexpr (V == 1) {
        f[0] = slk::to_f32(__ldg(p));
    } else {
        uint4 r;
        asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                     : "l"(p));
        slk::unpack<T, V>(r, f);
    }
}

/* Loads accesses i, i + stride, ..., i + (U - 1) stride of each of the R
 * rows; with CHECK, only those below n_acc (the others are never used). */
template <typename T, int R, int U, int V, bool CHECK>
__device__ __forceinline__ void load_batch(slk::raw_t<T, V> (&wr)[R][U], const T *const (&wrow)[R], int64_t i,
                                           int64_t stride, int64_t n_acc) {
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int r = 0; r < R; r++)
            if (!CHECK || i + u * stride < n_acc) wr[r][u] = load_weight<T, V>(wrow[r] + (i + u * stride) * V);
}

/* acc[r][t] += w row r . x row t over the batch load_batch loaded at i. */
template <typename T, int NT, int R, int U, int V, bool CHECK>
__device__ __forceinline__ void fma_batch(float (&acc)[R][NT], const slk::raw_t<T, V> (&wr)[R][U],
                                          const T *const (&xrow)[NT], int64_t i, int64_t stride, int64_t n_acc) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        if (CHECK && i + u * stride >= n_acc) break;
        float wf[R][V];
#pragma unroll
        for (int r = 0; r < R; r++) slk::unpack<T, V>(wr[r][u], wf[r]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            float x[V];
            load_input<T, V>(xrow[t] + (i + u * stride) * V, x);
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int e = 0; e < V; e++) acc[r][t] = fmaf(wf[r][e], x[e], acc[r][t]);
        }
    }
}

/* out (n_tok, N) in O; in (n_tok, K), w (N, K) in T. NT: tokens computed
 * (n_tok <= NT), R: rows per warp, V: elements per access. */
template <typename T, typename O, int NT, int R, int V>
__global__ void __launch_bounds__(SLK_GEMV_THREADS) gemv_kernel(O *__restrict__ out, const T *__restrict__ in,
                                                                const T *__restrict__ w, int n_tok, int64_t N,
                                                                int64_t K, int ksplit) {
    constexpr int U = SLK_GEMV_LOADS / R; /* accesses per row in one batch of loads */
    static_assert(U * R == SLK_GEMV_LOADS, "the loads divide over the rows");
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int slice = warp & (ksplit - 1), group = warp / ksplit; /* ksplit is a power of two */
    const int64_t row0 = ((int64_t)blockIdx.x * (WARPS / ksplit) + group) * R;

    const T *wrow[R];
#pragma unroll
    for (int r = 0; r < R; r++) wrow[r] = w + (row0 + r < N ? row0 + r : N - 1) * K;
    const T *xrow[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xrow[t] = in + (int64_t)(t < n_tok ? t : n_tok - 1) * K;

    float acc[R][NT];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = 0.0f;

    /* Access i covers elements [i V, i V + V) of every row; slice s, lane l
     * takes i = 32 s + l, then steps by 32 ksplit: the warps of a row read
     * adjacent 512-byte runs. */
    const int64_t n_acc = K / V, stride = 32 * (int64_t)ksplit;
    int64_t i = 32 * (int64_t)slice + lane;
    /* Batches of U accesses per row, software-pipelined: batch b + 1 is
     * loaded (in a branch of its own, which ptxas does not schedule across)
     * before batch b is used, so SLK_GEMV_LOADS to twice that many loads
     * are in flight while a lane computes. The last, partial batch (fewer
     * than U accesses left) is one predicated batch, its loads issued
     * together too: a short row (K / ksplit small) is one round trip. */
    slk::raw_t<T, V> nxt[R][U];
    if (i + (U - 1) * stride < n_acc) {
        load_batch<T, R, U, V, false>(nxt, wrow, i, stride, n_acc);
        for (;;) {
            slk::raw_t<T, V> cur[R][U];
#pragma unroll
            for (int r = 0; r < R; r++)
#pragma unroll
                for (int u = 0; u < U; u++) cur[r][u] = nxt[r][u];
            const int64_t next = i + U * stride;
            const bool more = next + (U - 1) * stride < n_acc;
            if (more) load_batch<T, R, U, V, false>(nxt, wrow, next, stride, n_acc);
            fma_batch<T, NT, R, U, V, false>(acc, cur, xrow, i, stride, n_acc);
            i = next;
            if (!more) break;
        }
    }
    if (i < n_acc) {
        load_batch<T, R, U, V, true>(nxt, wrow, i, stride, n_acc);
        fma_batch<T, NT, R, U, V, true>(acc, nxt, xrow, i, stride, n_acc);
    }

#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[r][t] = slk::warp_sum(acc[r][t]);

    if (ksplit == 1) { /* lane r NT + t stores (row0 + r, t) */
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++)
                if (lane == r * NT + t && row0 + r < N && t < n_tok)
                    out[(int64_t)t * N + row0 + r] = slk::from_f32<O>(acc[r][t]);
        return;
    }
    /* ksplit is uniform over the block: every thread of it gets here. */
    __shared__ float part[WARPS][R * NT];
    if (lane == 0) {
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int t = 0; t < NT; t++) part[warp][r * NT + t] = acc[r][t];
    }
    __syncthreads();
    if (slice == 0 && lane < R * NT) {
        const int r = lane / NT, t = lane % NT;
        float s = part[warp][lane];
        for (int k = 1; k < ksplit; k++) s += part[warp + k][lane];
        if (row0 + r < N && t < n_tok) out[(int64_t)t * N + row0 + r] = slk::from_f32<O>(s);
    }
}

template <typename T, typename O, int NT>
int launch_gemv(const slk_gemv_plan_t &p, void *out, const void *in, const void *w, int64_t T_, int64_t N, int64_t K,
                cudaStream_t st) {
    constexpr int R = NT == 1 ? 2 : NT < 4 ? NT : 4, V = slk::Pack<T>::N; /* as slk_plan_gemv's rows */
    O *o = static_cast<O *>(out);
    const T *x = static_cast<const T *>(in), *wt = static_cast<const T *>(w);
    if (p.vec == V)
        gemv_kernel<T, O, NT, R, V><<<(unsigned)p.blocks, p.threads, 0, st>>>(o, x, wt, (int)T_, N, K, p.ksplit);
    else
        gemv_kernel<T, O, NT, R, 1><<<(unsigned)p.blocks, p.threads, 0, st>>>(o, x, wt, (int)T_, N, K, p.ksplit);
    return slk::launch_result();
}

template <typename T, typename O>
int dispatch_tokens(const slk_gemv_plan_t &p, void *out, const void *in, const void *w, int64_t T_, int64_t N,
                    int64_t K, cudaStream_t st) {
    switch (p.tokens) {
    case 1: return launch_gemv<T, O, 1>(p, out, in, w, T_, N, K, st);
    case 2: return launch_gemv<T, O, 2>(p, out, in, w, T_, N, K, st);
    case 4: return launch_gemv<T, O, 4>(p, out, in, w, T_, N, K, st);
    default: return launch_gemv<T, O, 8>(p, out, in, w, T_, N, K, st);
    }
}

}  // namespace

extern "C" int slk_gemv(void *out, const void *in, const void *w, int64_t T, int64_t N, int64_t K, sl_dtype_t dt,
                        sl_dtype_t out_dt, void *stream) {
    const int es = slk_elem_bytes(dt);
    if (es == 0 || (out_dt != dt && out_dt != DTYPE_F32) || T < 0 || T > SLK_GEMV_MAX_T || N < 0 || K < 0)
        return (int)cudaErrorInvalidValue;
    if (T == 0 || N == 0) return 0;
    const slk_gemv_plan_t p = slk_plan_gemv(T, N, K, es, slk::or_addr(in, w));
    if (p.blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
    const cudaStream_t st = slk::as_stream(stream);
    SLK_DISPATCH(dt, E, {
        if (out_dt == dt) return dispatch_tokens<E, E>(p, out, in, w, T, N, K, st);
        return dispatch_tokens<E, float>(p, out, in, w, T, N, K, st);
    });
    return (int)cudaErrorInvalidValue;
}
