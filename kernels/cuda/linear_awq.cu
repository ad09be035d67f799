/* linear_awq.cu - AutoAWQ's 4-bit GEMM format (W4A16) on CUDA:
 * out(T, N) = in(T, K) . W(N, K)^T with the weights read as packed nibbles,
 * by the CUDA cores (slk_awq_gemv, decode-sized T) or the tensor cores
 * (slk_awq_mma, 16-bit activations, below), and the weights dequantized to dt
 * for the cuBLAS path of larger T (slk_awq_dequantize). The backend picks by
 * T (cuda_backend.c, awq_linear).
 *
 * The format (as kernels/cpu/linear_awq.c), per Linear of shape (N, K) and
 * group size G (G | K, N % 8 == 0): qweight int32 (K, N/8), qzeros int32
 * (K/G, N/8), scales fp16 (K/G, N); nibble i (bits 4i..4i+3) of an int32 is
 * column awq_col(i) = [0, 2, 4, 6, 1, 3, 5, 7][i] of its 8, and
 *   W[n][k] = (q(k, n) - z(k/G, n)) * s(k/G, n).
 * The kernels read qweight repacked once at load (slk_awq_repack): its
 * transpose, qweight_t int32 (N/8, K), so that the K words of an int32
 * column are contiguous, as a bf16 weight row is: a thread reads 4
 * consecutive k of one column with one 16-byte load. The int32s themselves
 * (and qzeros, scales) are the checkpoint's, bit for bit.
 * Each weight is built exactly in fp32: (q - z) * s has at most 4 + 11
 * significant bits, and fma(q, s, -(z * s)) rounds it once, to itself
 * (z * s is exact too). So the kernels compute the CPU twin's weights
 * (cpu_awq_dequantize) bit for bit, and differ from cpu_linear on them only
 * in the order of their fp32 sums.
 *
 * slk_awq_gemv (memory-bound: 4.13 bits per weight at G = 128), shaped as
 * the bf16 GEMV (gemv.cu), which reads at 80% of the copy bandwidth:
 * - a warp owns 4 int32 columns (32 outputs), 8 lanes each; an access of
 *   the warp is 16 bytes a lane, 128 contiguous bytes (32 k) of each of its
 *   columns. A batch is U consecutive accesses (32 U k, U = 4 at T <= 2,
 *   2 at T = 4, 1 at T = 8, where registers bound it, and U divides G / 32):
 *   it lies in one group, so it comes with one zero word and one 16-byte
 *   load of the column's 8 scales, loaded with it.
 * - batches are software-pipelined: batch b + 1 is loaded (in a branch of
 *   its own, which ptxas does not schedule across) before batch b is used,
 *   so a lane has up to 2 U weight loads in flight while it computes; the
 *   weights are streamed (ld.global.cs). The inputs at the same k are read
 *   through L1 (every warp of the SM reads them) and serve all 8 columns.
 * - no int-to-float conversion (a quarter-rate instruction): nibble i, masked
 *   in place ((q >> 16 for i >= 4) & 0xF << 4m, m = i % 4) and OR-ed into
 *   the bits of 2^23, is the float 2^23 + 16^m q exactly; one add of
 *   -(2^23 + 16^m z) leaves 16^m (q - z), exact. Then
 *   - T <= 2 (group sums): x . 16^m (q - z) is summed over the batch's rows
 *     and multiplied by s / 16^m once per batch: per weight a LOP3, an add
 *     and T FMAs, under the card's instruction rate at full bandwidth;
 *   - T >= 4 (weights): each weight 16^m (q - z) * (s / 16^m) = (q - z) * s,
 *     exact: the CPU twin's weight bit for bit, used by all T tokens.
 * - the 8 lanes of a column meet by shuffles; when K is split over the
 *   block's warps (small N: fill the SMs, as the bf16 GEMV), the slices meet
 *   in shared memory, summed in slice order: deterministic, run to run, and
 *   one launch (no workspace).
 * On the H100 (docs/gpu-results.md, Run 7) one Llama-3-8B layer at T = 1
 * takes 116.7 us, 1.78x faster than the bf16 GEMV but only 32% of the copy
 * bandwidth on its bytes (gate/up alone: 43%): the launch floor (~5 us) is a
 * third of a small linear's time. Three blocks per SM bought with spills
 * measured slower.
 * Graph-capture safe: no allocation, no sync; the grid from host sizes.
 */
#include "common.cuh"
#include "kernels.h"
#include "launch_plan.h"

namespace {

constexpr int WARPS = SLK_AWQ_THREADS / 32;
/* Nibble i of an int32 holds column awq_col(i) of its 8: [0, 2, 4, 6, 1, 3, 5, 7][i]. */
__device__ __forceinline__ constexpr int awq_col(int i) { return (i & 3) * 2 + (i >> 2); }

/* 2^23 as float bits: OR-ing an integer below 2^23 into the mantissa gives 2^23 + it, exactly. */
constexpr uint32_t MAGIC = 0x4B000000u;

/* Nibble i of q as the float 2^23 + 16^(i % 4) q_i, without a conversion: bits 4i..4i+3 masked in
 * place (from q >> 16 for i >= 4, so the nibble stays below bit 23). */
__device__ __forceinline__ float nibble_magic(uint32_t lo, uint32_t hi, int i) {
    const uint32_t src = i < 4 ? lo : hi;
    return __uint_as_float((src & (0xFu << (4 * (i & 3)))) | MAGIC);
}

/* Half m of 16 bytes of scales (columns 8j..8j+7): the scale of column 8j + m. */
__device__ __forceinline__ __half scale_of(uint4 s, int m) {
    const uint32_t w = m < 2 ? s.x : m < 4 ? s.y : m < 6 ? s.z : s.w;
    return __ushort_as_half((unsigned short)(w >> (16 * (m & 1))));
}

/* 16 bytes of weights, streamed (ld.global.cs: read once, evict first); p 16-byte aligned. */
__device__ __forceinline__ uint4 load_stream(const int32_t *p) {
    uint4 r;
    asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}

/* 4 consecutive inputs as fp32, through L1; p aligned to 4 elements. */
template <typename T> __device__ __forceinline__ void load4(const T *p, float (&f)[4]) {
    if constexpr (sizeof(T) == 4) {
        const float4 v = __ldg(reinterpret_cast<const float4 *>(p));
        f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
    } else {
        const uint2 v = __ldg(reinterpret_cast<const uint2 *>(p));
        f[0] = slk::lo_f32(v.x, T()), f[1] = slk::hi_f32(v.x, T()), f[2] = slk::lo_f32(v.y, T()),
        f[3] = slk::hi_f32(v.y, T());
    }
}

/* ---- slk_awq_repack: qweight (K, N8) -> qweight_t (N8, K), through 32 x 32 tiles ---- */
__global__ void __launch_bounds__(256)
    awq_repack_kernel(int32_t *__restrict__ dst, const int32_t *__restrict__ src, int64_t K, int64_t N8) {
    __shared__ int32_t tile[32][33]; /* padded: the column reads hit 32 banks */
    const int tx = threadIdx.x % 32, ty = threadIdx.x / 32;
    const int64_t j0 = (int64_t)blockIdx.x * 32, k0 = (int64_t)blockIdx.y * 32;
    for (int y = ty; y < 32; y += 8)
        if (k0 + y < K && j0 + tx < N8) tile[y][tx] = src[(k0 + y) * N8 + j0 + tx];
    __syncthreads();
    for (int y = ty; y < 32; y += 8)
        if (j0 + y < N8 && k0 + tx < K) dst[(j0 + y) * K + k0 + tx] = tile[tx][y];
}

/* ---- slk_awq_gemv ---- */

/* One batch of a lane: U accesses of 4 k of its column, and the group's zero word and scales. */
template <int U> struct GemvBatch {
    uint4 w[U];
    uint32_t z;
    uint4 s;
};

/* The batch of rows [k, k + 32 U) of the lane's column, in group grp. */
template <int U>
__device__ __forceinline__ void gemv_load(GemvBatch<U> &b, const int32_t *col, const int32_t *zcol,
                                          const __half *scol, int64_t k, int64_t grp, int64_t N) {
#pragma unroll
    for (int u = 0; u < U; u++) b.w[u] = load_stream(col + k + 32 * u);
    b.z = (uint32_t)__ldg(zcol + grp * (N / 8));
    b.s = __ldg(reinterpret_cast<const uint4 *>(scol + grp * N));
}

/* acc[t][i] += the batch's rows [k, k + 32 U) of nibble i of the lane's column . x(t). */
template <typename T, int NT, int U>
__device__ __forceinline__ void gemv_fma(float (&acc)[NT][8], const GemvBatch<U> &b, const T *const (&xrow)[NT],
                                         int64_t k) {
    constexpr bool GROUP_SUMS = NT <= 2;
    /* The group's constants by nibble: sc = s / 16^(i % 4) (exact: a power of
     * two) and bias = -(2^23 + 16^(i % 4) z), so that
     * (nibble_magic + bias) * sc = (q - z) * s. */
    float sc[8], bias[8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int m = i & 3;
        sc[i] = __half2float(scale_of(b.s, awq_col(i))) * (1.0f / (float)(1u << (4 * m)));
        bias[i] = -__uint_as_float((((b.z >> (4 * i)) & 15u) << (4 * m)) | MAGIC);
    }
    float gacc[GROUP_SUMS ? NT : 1][8];
#pragma unroll
    for (int t = 0; t < (GROUP_SUMS ? NT : 1); t++)
#pragma unroll
        for (int i = 0; i < 8; i++) gacc[t][i] = 0.0f;
#pragma unroll
    for (int u = 0; u < U; u++) {
        float x[NT][4];
#pragma unroll
        for (int t = 0; t < NT; t++) load4<T>(xrow[t] + k + 32 * u, x[t]);
        const uint32_t q[4] = {b.w[u].x, b.w[u].y, b.w[u].z, b.w[u].w};
#pragma unroll
        for (int r = 0; r < 4; r++) {
            const uint32_t hi = q[r] >> 16;
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const float d = nibble_magic(q[r], hi, i) + bias[i]; /* 16^m (q - z), exact */
                if constexpr (GROUP_SUMS) {
#pragma unroll
                    for (int t = 0; t < NT; t++) gacc[t][i] = fmaf(x[t][r], d, gacc[t][i]);
                } else {
                    const float w = d * sc[i]; /* (q - z) * s, exact */
#pragma unroll
                    for (int t = 0; t < NT; t++) acc[t][i] = fmaf(x[t][r], w, acc[t][i]);
                }
            }
        }
    }
    if constexpr (GROUP_SUMS) {
#pragma unroll
        for (int t = 0; t < NT; t++)
#pragma unroll
            for (int i = 0; i < 8; i++) acc[t][i] = fmaf(gacc[t][i], sc[i], acc[t][i]);
    }
}

/* out (n_tok, N) in O; in (n_tok, K) in T; qweight_t (N / 8, K). NT: tokens
 * computed (n_tok <= NT), U: accesses per batch (32 U divides G). */
template <typename T, typename O, int NT, int U>
__global__ void __launch_bounds__(SLK_AWQ_THREADS)
    awq_gemv_kernel(O *__restrict__ out, const T *__restrict__ in, const int32_t *__restrict__ qweight_t,
                    const int32_t *__restrict__ qzeros, const __half *__restrict__ scales, int n_tok, int64_t N,
                    int64_t K, int64_t G, int ksplit) {
    const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
    const int slice = warp & (ksplit - 1), wcol = warp / ksplit; /* ksplit is a power of two */
    const int sub = lane / 8, r = lane % 8;
    const int64_t N8 = N / 8;
    const int64_t j = ((int64_t)blockIdx.x * (WARPS / ksplit) + wcol) * 4 + sub; /* the lane's int32 column */
    const bool live = j < N8;
    const int64_t jc = live ? j : N8 - 1; /* past N: read column N8 - 1, store nothing */
    const int32_t *col = qweight_t + jc * K + 4 * r, *zcol = qzeros + jc;
    const __half *scol = scales + jc * 8;
    const T *xrow[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) xrow[t] = in + (int64_t)(t < n_tok ? t : n_tok - 1) * K + 4 * r;

    float acc[NT][8];
#pragma unroll
    for (int t = 0; t < NT; t++)
#pragma unroll
        for (int i = 0; i < 8; i++) acc[t][i] = 0.0f;

    /* Batch b covers k [32 U b, 32 U (b + 1)); slice s takes b = s, s + ksplit, ... */
    const int64_t batches = K / (32 * U), per_group = G / (32 * U);
    int64_t b = slice;
    GemvBatch<U> nxt;
    if (b < batches) {
        gemv_load<U>(nxt, col, zcol, scol, 32 * U * b, b / per_group, N);
        for (;;) {
            const GemvBatch<U> cur = nxt;
            const int64_t next = b + ksplit;
            const bool more = next < batches;
            if (more) gemv_load<U>(nxt, col, zcol, scol, 32 * U * next, next / per_group, N);
            gemv_fma<T, NT, U>(acc, cur, xrow, 32 * U * b);
            b = next;
            if (!more) break;
        }
    }

    /* The column's 8 lanes meet; lane r then holds nibble r: output 8 j + awq_col(r). */
    float v[NT];
#pragma unroll
    for (int t = 0; t < NT; t++) {
        v[t] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            float a = acc[t][i];
            a += __shfl_xor_sync(0xffffffffu, a, 1);
            a += __shfl_xor_sync(0xffffffffu, a, 2);
            a += __shfl_xor_sync(0xffffffffu, a, 4);
            if (i == r) v[t] = a;
        }
    }
    const int64_t n = 8 * j + awq_col(r);
    if (ksplit == 1) {
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (live && t < n_tok) out[(int64_t)t * N + n] = slk::from_f32<O>(v[t]);
        return;
    }
    /* ksplit is uniform over the block: every thread of it gets here. */
    __shared__ float part[WARPS][NT][32];
#pragma unroll
    for (int t = 0; t < NT; t++) part[warp][t][lane] = v[t];
    __syncthreads();
    if (slice == 0 && live) {
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n_tok) break;
            float s = part[warp][t][lane];
            for (int k = 1; k < ksplit; k++) s += part[warp + k][t][lane];
            out[(int64_t)t * N + n] = slk::from_f32<O>(s);
        }
    }
}

/* out(t, n) = the splits' partials summed in split order. */
template <typename O>
__global__ void awq_reduce_kernel(O *__restrict__ out, const float *__restrict__ ws, int64_t TN, int ksplit) {
    const int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= TN) return;
    float sum = 0.0f;
    for (int s = 0; s < ksplit; s++) sum += ws[(int64_t)s * TN + i];
    out[i] = slk::from_f32<O>(sum);
}

/* After a kernel that split K over ksplit blocks (its partials in ws): out = their sums. Returns
 * the launches' error. */
template <typename O> int reduce_splits(void *out, const void *ws, int64_t TN, int ksplit, cudaStream_t st) {
    if (ksplit > 1)
        awq_reduce_kernel<O><<<(unsigned)slk_cdiv64(TN, 256), 256, 0, st>>>(
            static_cast<O *>(out), static_cast<const float *>(ws), TN, ksplit);
    return slk::launch_result();
}

/* w(N, K) in T from qweight_t: lanes take consecutive k (coalesced loads of
 * a column's words and stores of its 8 rows), warps consecutive int32
 * columns. */
template <typename T>
__global__ void awq_dequantize_kernel(T *__restrict__ w, const int32_t *__restrict__ qweight_t,
                                      const int32_t *__restrict__ qzeros, const __half *__restrict__ scales,
                                      int64_t N, int64_t K, int64_t G) {
    const int64_t N8 = N / 8;
    const int64_t k = (int64_t)blockIdx.x * 32 + threadIdx.x % 32;
    const int64_t j = (int64_t)blockIdx.y * WARPS + threadIdx.x / 32;
    if (k >= K || j >= N8) return;
    const int64_t g = k / G;
    const uint32_t z = (uint32_t)__ldg(qzeros + g * N8 + j);
    const __half *sp = scales + g * N + j * 8; /* the 8 scales of columns 8j..8j+7 */
    const uint32_t q = (uint32_t)__ldg(qweight_t + j * K + k);
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const float s = __half2float(sp[awq_col(i)]);
        const float zs = (float)((z >> (4 * i)) & 15u) * s;
        w[(j * 8 + awq_col(i)) * K + k] = slk::from_f32<T>(fmaf((float)((q >> (4 * i)) & 15u), s, -zs));
    }
}

/* ---- slk_awq_mma: the weights as the A operand of mma.sync m16n8k16 ----
 *
 * Rows of the 16x16 A tile are output columns, its columns 16 consecutive k;
 * the 8 columns of the B tile are tokens. A thread (g = lane / 4, c = lane % 4)
 * needs A at rows g and g + 8 and k slots 2c, 2c + 1, 2c + 8, 2c + 9, as
 * pairs of consecutive slots, and B at the same slots. The sum over k does not
 * care which k a slot holds, as long as A and B agree: a thread's four slots
 * hold k + 4c .. k + 4c + 3, so that it reads them with one 16-byte load of
 * qweight_t's column and one 8-byte load of each token's inputs (a warp reads
 * 64 contiguous bytes of each of its 8 columns per step). The tile's rows are
 * mapped to columns so that a thread's rows, in all 4 tiles of the block's
 * 64 columns, are the 8 nibbles of ONE int32 column j = 8 blockIdx.x + g:
 * tile t's row g is nibble 2t of column j, its row g + 8 nibble 2t + 1. So a
 * thread uses every nibble of its 4 int32 words: byte t of the words of slots
 * (2c, 2c + 1), PRMT-ed into one register, holds both pairs of tile t
 * (low nibbles: row g; high: row g + 8). Masked into the low mantissa bits of
 * 128.0 (bf16) or 1024.0 (f16), a nibble is 128 + q or 1024 + q exactly.
 * Then per pair, with the group's constants of that nibble:
 * - f16: (v - (1024 + z)) is q - z exactly, times s (an fp16, exact) rounds
 *   once: the dequantize kernel's weight, bit for bit;
 * - bf16: s is split into s_hi = bf16(s) and s_lo = s - s_hi (at most 3
 *   significant bits, exact in bf16); d = q - z exactly, p = d s_lo exactly
 *   (at most 7 bits), and fma(d, s_hi, p) rounds d s once: again the
 *   dequantize kernel's weight (an fp32 (q - z) s rounded to bf16).
 * The products with the tokens are exact and summed in fp32 by the tensor
 * cores: the result is dequantize + GEMM's up to the order of fp32 sums.
 * The 8 warps' partials meet in shared memory (warp order), then the K split's
 * in the workspace (split order): deterministic, run to run. */

template <typename To, typename From> __device__ __forceinline__ To bit_cast32(From v) {
    static_assert(sizeof(To) == 4 && sizeof(From) == 4, "32-bit values");
    To t;
    memcpy(&t, &v, 4);
    return t;
}

/* One group's constants for a thread's 8 nibbles (scales and zeros of column j
 * as loaded: 16 bytes, one int32), and the pairs they make. */
template <typename T> struct MmaDequant;

template <> struct MmaDequant<__nv_bfloat16> {
    using P = __nv_bfloat162;
    static constexpr uint32_t MAGIC = 0x43004300u; /* 128.0 in each half */
    P zb[8], hi[8], lo[8];
    __device__ __forceinline__ void load(uint32_t z, uint4 s) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float sf = __half2float(scale_of(s, awq_col(i)));
            const __nv_bfloat16 h = __float2bfloat16_rn(sf), l = __float2bfloat16_rn(sf - __bfloat162float(h));
            const __nv_bfloat16 zz = __float2bfloat16_rn(128.0f + (float)((z >> (4 * i)) & 15u));
            zb[i] = P{zz, zz}, hi[i] = P{h, h}, lo[i] = P{l, l};
        }
    }
    __device__ __forceinline__ uint32_t pair(uint32_t v, int i) const {
        const P d = __hsub2(bit_cast32<P>(v), zb[i]);
        return bit_cast32<uint32_t>(__hfma2(d, hi[i], __hmul2(d, lo[i])));
    }
};

template <> struct MmaDequant<__half> {
    using P = __half2;
    static constexpr uint32_t MAGIC = 0x64006400u; /* 1024.0 in each half */
    P zb[8], sc[8];
    __device__ __forceinline__ void load(uint32_t z, uint4 s) {
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const __half zz = __float2half_rn(1024.0f + (float)((z >> (4 * i)) & 15u)), ss = scale_of(s, awq_col(i));
            zb[i] = P{zz, zz}, sc[i] = P{ss, ss};
        }
    }
    __device__ __forceinline__ uint32_t pair(uint32_t v, int i) const {
        return bit_cast32<uint32_t>(__hmul2(__hsub2(bit_cast32<P>(v), zb[i]), sc[i]));
    }
};

template <typename T, int NT, int U>
__global__ void __launch_bounds__(SLK_AWQ_THREADS)
    awq_mma_kernel(T *__restrict__ out, float *__restrict__ ws, const T *__restrict__ in,
                   const int32_t *__restrict__ qweight_t, const int32_t *__restrict__ qzeros,
                   const __half *__restrict__ scales, int T_, int64_t N, int64_t K, int64_t G, int64_t chunk) {
    static_assert(SLK_AWQ_THREADS == 32 * SLK_AWQ_MMA_WARPS, "8 warps");
    constexpr uint32_t MAGIC = MmaDequant<T>::MAGIC;
    __shared__ float red[SLK_AWQ_MMA_WARPS][8][64];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    const int64_t N8 = N / 8, j = (int64_t)blockIdx.x * 8 + g, steps = K / 16;
    const int64_t s0 = (int64_t)blockIdx.y * chunk, s1 = s0 + chunk < steps ? s0 + chunk : steps;
    const int tok0 = (int)blockIdx.z * 8 * NT;
    const bool live = j < N8;
    const int32_t *col = qweight_t + (live ? j : N8 - 1) * K + 4 * c; /* past N: stored nowhere */
    const T *xrow[NT];
#pragma unroll
    for (int n = 0; n < NT; n++) {
        const int tok = tok0 + n * 8 + g;
        xrow[n] = tok < T_ ? in + (int64_t)tok * K + 4 * c : nullptr;
    }

    float acc[4][NT][4];
#pragma unroll
    for (int t = 0; t < 4; t++)
#pragma unroll
        for (int n = 0; n < NT; n++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[t][n][e] = 0.0f;

    MmaDequant<T> dq;
    int64_t cur = -1;
    /* Warp-uniform bounds: every lane reaches every mma.sync. */
    for (int64_t sb = s0 + (int64_t)warp * U; sb < s1; sb += (int64_t)SLK_AWQ_MMA_WARPS * U) {
        uint32_t q[U][4], b[U][NT][2];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int64_t k = (sb + u) * 16;
            const uint4 w = load_stream(col + k); /* slots 2c, 2c + 1, 2c + 8, 2c + 9 */
            q[u][0] = w.x, q[u][1] = w.y, q[u][2] = w.z, q[u][3] = w.w;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const uint2 x = xrow[n] ? __ldg(reinterpret_cast<const uint2 *>(xrow[n] + k)) : make_uint2(0u, 0u);
                b[u][n][0] = x.x, b[u][n][1] = x.y;
            }
        }
        const int64_t grp = sb * 16 / G; /* the batch's one group */
        if (grp != cur) {
            uint32_t z = 0;
            uint4 sraw = make_uint4(0, 0, 0, 0);
            if (live) {
                z = (uint32_t)__ldg(qzeros + grp * N8 + j);
                sraw = __ldg(reinterpret_cast<const uint4 *>(scales + grp * N + j * 8));
            }
            dq.load(z, sraw);
            cur = grp;
        }
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int t = 0; t < 4; t++) {
                /* byte t of slots (2c, 2c + 1) in one register, and of slots (2c + 8, 2c + 9) */
                const uint32_t sel = (uint32_t)(t | t << 4 | (4 + t) << 8 | (4 + t) << 12);
                const uint32_t lo2 = __byte_perm(q[u][0], q[u][1], sel), hi2 = __byte_perm(q[u][2], q[u][3], sel);
                const uint32_t a[4] = {dq.pair((lo2 & 0x000F000Fu) | MAGIC, 2 * t),
                                       dq.pair(((lo2 >> 4) & 0x000F000Fu) | MAGIC, 2 * t + 1),
                                       dq.pair((hi2 & 0x000F000Fu) | MAGIC, 2 * t),
                                       dq.pair(((hi2 >> 4) & 0x000F000Fu) | MAGIC, 2 * t + 1)};
#pragma unroll
                for (int n = 0; n < NT; n++) slk::mma_16816<T>(acc[t][n], a, b[u][n][0], b[u][n][1]);
            }
    }

    /* Per 8-token tile: the warps' sums, added in warp order. acc[t][n][2h + e]
     * is column 8 j + awq_col(2t + h), token tok0 + 8n + 2c + e. */
#pragma unroll
    for (int n = 0; n < NT; n++) {
        if (tok0 + n * 8 >= T_) break; /* the same for the whole block: no thread skips a barrier */
#pragma unroll
        for (int t = 0; t < 4; t++)
#pragma unroll
            for (int h = 0; h < 2; h++)
#pragma unroll
                for (int e = 0; e < 2; e++) red[warp][2 * c + e][8 * g + awq_col(2 * t + h)] = acc[t][n][2 * h + e];
        __syncthreads();
        for (int o = threadIdx.x; o < 8 * 64; o += SLK_AWQ_THREADS) {
            const int tk = o / 64, col = o % 64, tok = tok0 + n * 8 + tk;
            const int64_t nn = (int64_t)blockIdx.x * 64 + col;
            float sum = 0.0f;
#pragma unroll
            for (int w = 0; w < SLK_AWQ_MMA_WARPS; w++) sum += red[w][tk][col];
            if (tok < T_ && nn < N) {
                if (gridDim.y == 1) out[(int64_t)tok * N + nn] = slk::from_f32<T>(sum);
                else ws[((int64_t)blockIdx.y * T_ + tok) * N + nn] = sum;
            }
        }
        __syncthreads();
    }
}

template <typename T, int NT, int U>
int launch_mma(const slk_awq_mma_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight_t,
               const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
               cudaStream_t st) {
    const dim3 grid((unsigned)p.col_blocks, (unsigned)p.ksplit, (unsigned)p.token_blocks);
    awq_mma_kernel<T, NT, U><<<grid, SLK_AWQ_THREADS, 0, st>>>(
        static_cast<T *>(out), static_cast<float *>(ws), static_cast<const T *>(in), qweight_t, qzeros,
        static_cast<const __half *>(scales), (int)T_, N, K, G, p.chunk);
    return reduce_splits<T>(out, ws, T_ * N, p.ksplit, st);
}

template <typename T, int NT>
int dispatch_batch(const slk_awq_mma_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight_t,
                   const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                   cudaStream_t st) {
    switch (p.batch) {
    case 1: return launch_mma<T, NT, 1>(p, out, ws, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    case 2: return launch_mma<T, NT, 2>(p, out, ws, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    /* batch 4: never with 4 tiles (slk_plan_awq_mma caps it at 2 there), so no <T, 4, 4> instance */
    default: return launch_mma<T, NT, (NT == 4 ? 2 : 4)>(p, out, ws, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    }
}

template <typename T>
int dispatch_mma(const slk_awq_mma_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight_t,
                 const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                 cudaStream_t st) {
    switch (p.ntiles) {
    case 1: return dispatch_batch<T, 1>(p, out, ws, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    case 2: return dispatch_batch<T, 2>(p, out, ws, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    default: return dispatch_batch<T, 4>(p, out, ws, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    }
}

template <typename T, typename O, int NT, int U>
int launch_gemv(const slk_awq_plan_t &p, void *out, const void *in, const int32_t *qweight_t, const int32_t *qzeros,
                const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G, cudaStream_t st) {
    awq_gemv_kernel<T, O, NT, U><<<(unsigned)p.blocks, SLK_AWQ_THREADS, 0, st>>>(
        static_cast<O *>(out), static_cast<const T *>(in), qweight_t, qzeros, static_cast<const __half *>(scales),
        (int)T_, N, K, G, p.ksplit);
    return slk::launch_result();
}

/* U = the plan's batch, which is at most MOST (its cap for NT tokens): no instance above it. */
template <typename T, typename O, int NT>
int dispatch_batch_gemv(const slk_awq_plan_t &p, void *out, const void *in, const int32_t *qweight_t,
                        const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                        cudaStream_t st) {
    constexpr int MOST = NT <= 2 ? 4 : NT == 4 ? 2 : 1;
    switch (p.batch) {
    case 4: return launch_gemv<T, O, NT, MOST>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    case 2: return launch_gemv<T, O, NT, (MOST < 2 ? MOST : 2)>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    default: return launch_gemv<T, O, NT, 1>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    }
}

template <typename T, typename O>
int dispatch_tokens(const slk_awq_plan_t &p, void *out, const void *in, const int32_t *qweight_t,
                    const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                    cudaStream_t st) {
    switch (p.tokens) {
    case 1: return dispatch_batch_gemv<T, O, 1>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    case 2: return dispatch_batch_gemv<T, O, 2>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    case 4: return dispatch_batch_gemv<T, O, 4>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    default: return dispatch_batch_gemv<T, O, 8>(p, out, in, qweight_t, qzeros, scales, T_, N, K, G, st);
    }
}

bool bad_shape(int64_t N, int64_t K, int64_t G) { return N < 0 || K < 0 || N % 8 != 0 || G <= 0 || K % G != 0; }

}  // namespace

extern "C" int slk_awq_repack(int32_t *qweight_t, const int32_t *qweight, int64_t N, int64_t K, void *stream) {
    if (N < 0 || K < 0 || N % 8 != 0) return (int)cudaErrorInvalidValue;
    if (N == 0 || K == 0) return 0;
    const dim3 grid((unsigned)slk_cdiv64(N / 8, 32), (unsigned)slk_cdiv64(K, 32));
    if (grid.x > 0x7fffffffu || grid.y > 65535) return (int)cudaErrorInvalidValue;
    awq_repack_kernel<<<grid, 256, 0, slk::as_stream(stream)>>>(qweight_t, qweight, K, N / 8);
    return slk::launch_result();
}

extern "C" int slk_awq_gemv(void *out, const void *in, const int32_t *qweight_t, const int32_t *qzeros,
                            const void *scales, int64_t T, int64_t N, int64_t K, int64_t G, sl_dtype_t dt,
                            void *stream) {
    if (slk_elem_bytes(dt) == 0 || T < 0 || T > SLK_AWQ_MAX_T || !slk_awq_gemv_takes(N, K, G) ||
        (uintptr_t)in % 16 != 0)
        return (int)cudaErrorInvalidValue;
    if (T == 0) return 0;
    const slk_awq_plan_t p = slk_plan_awq_gemv(T, N, K, G);
    if (p.blocks > 0x7fffffff) return (int)cudaErrorInvalidValue;
    const cudaStream_t st = slk::as_stream(stream);
    SLK_DISPATCH(dt, E, return dispatch_tokens<E, E>(p, out, in, qweight_t, qzeros, scales, T, N, K, G, st));
    return (int)cudaErrorInvalidValue;
}

extern "C" int slk_awq_dequantize(void *w, const int32_t *qweight_t, const int32_t *qzeros, const void *scales,
                                  int64_t N, int64_t K, int64_t G, sl_dtype_t dt, void *stream) {
    if (slk_elem_bytes(dt) == 0 || bad_shape(N, K, G)) return (int)cudaErrorInvalidValue;
    if (N == 0 || K == 0) return 0;
    const dim3 grid((unsigned)slk_cdiv64(K, 32), (unsigned)slk_cdiv64(N / 8, WARPS));
    if (grid.y > 65535) return (int)cudaErrorInvalidValue;
    const cudaStream_t st = slk::as_stream(stream);
    SLK_DISPATCH(dt, E, {
        awq_dequantize_kernel<E><<<grid, SLK_AWQ_THREADS, 0, st>>>(static_cast<E *>(w), qweight_t, qzeros,
                                                                   static_cast<const __half *>(scales), N, K, G);
        return slk::launch_result();
    });
    return (int)cudaErrorInvalidValue;
}

/* ksplit > 1 only while col_blocks x token_blocks < SLK_AWQ_MIN_BLOCKS, and then
 * ksplit x col_blocks x token_blocks < 2 SLK_AWQ_MIN_BLOCKS; T <= 32
 * token_blocks and N <= 64 col_blocks: the partials fit 2 x 512 x 32 x 64 x 4
 * bytes, 8 MiB. */
extern "C" size_t slk_awq_mma_workspace_max_bytes(void) {
    return (size_t)2 * SLK_AWQ_MIN_BLOCKS * 32 * 64 * sizeof(float);
}

extern "C" size_t slk_awq_mma_workspace_bytes(int64_t T, int64_t N, int64_t K, int64_t G) {
    if (T <= 0 || !slk_awq_mma_takes(N, K, G)) return 0;
    const slk_awq_mma_plan_t p = slk_plan_awq_mma(T, N, K, G);
    return p.ksplit > 1 ? (size_t)p.ksplit * (size_t)T * (size_t)N * sizeof(float) : 0;
}

extern "C" int slk_awq_mma(void *out, const void *in, const int32_t *qweight_t, const int32_t *qzeros,
                           const void *scales, int64_t T, int64_t N, int64_t K, int64_t G, sl_dtype_t dt,
                           void *workspace, size_t workspace_bytes, void *stream) {
    if ((dt != DTYPE_BF16 && dt != DTYPE_F16) || T < 0 || !slk_awq_mma_takes(N, K, G))
        return (int)cudaErrorInvalidValue;
    if (T == 0) return 0;
    const slk_awq_mma_plan_t p = slk_plan_awq_mma(T, N, K, G);
    if (p.token_blocks > 65535 || workspace_bytes < slk_awq_mma_workspace_bytes(T, N, K, G))
        return (int)cudaErrorInvalidValue;
    const cudaStream_t st = slk::as_stream(stream);
    if (dt == DTYPE_BF16)
        return dispatch_mma<__nv_bfloat16>(p, out, workspace, in, qweight_t, qzeros, scales, T, N, K, G, st);
    return dispatch_mma<__half>(p, out, workspace, in, qweight_t, qzeros, scales, T, N, K, G, st);
}
