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
 * Each weight is built exactly in fp32: (q - z) * s has at most 4 + 11
 * significant bits, and fma(q, s, -(z * s)) rounds it once, to itself
 * (z * s is exact too). So both kernels compute the CPU twin's weights
 * (cpu_awq_dequantize) bit for bit, and the GEMV differs from cpu_linear on
 * them only in the order of its fp32 sums.
 *
 * slk_awq_gemv (memory-bound: 4.16 bits per weight at G = 128):
 * - a block is 8 warps over 32 consecutive int32 columns of qweight (256
 *   outputs): lane l owns column j = 32 * blockIdx.x + l, so a warp reads
 *   128 contiguous bytes of a qweight row per access; warp w takes rows
 *   k0 + w, k0 + w + 8, ... of the block's K chunk, U at a time: the U loads
 *   (and their inputs) are issued before any is used, so each thread keeps U
 *   x 4 bytes in flight (U = 8 at T <= 2, 4 at T = 4, 1 at T = 8, where
 *   registers bound it). A thread reloads its column's 8 scales and zeros
 *   when its row enters a new group: once per G / 8 rows.
 *   On the H100 (docs/gpu-results.md) this is still latency-bound: about a
 *   fifth of the copy bandwidth at T = 1 on Llama-3-8B shapes, 1.2x the bf16
 *   GEMV's time; each thread waits a full memory latency per batch and per
 *   group reload.
 * - no int-to-float conversion (a quarter-rate instruction): nibble i, masked
 *   in place ((q >> 16 for i >= 4) & 0xF << 4m, m = i % 4) and OR-ed into
 *   the bits of 2^23, is the float 2^23 + 16^m q exactly; one add of
 *   -(2^23 + 16^m z) leaves 16^m (q - z), exact. Then
 *   - T <= 2 (group sums): x . 16^m (q - z) is summed over the thread's rows
 *     of the group, and multiplied by s / 16^m once per group: per weight a
 *     LOP3, an add and T FMAs, which keeps batch-1 decode under the card's
 *     instruction rate at full bandwidth;
 *   - T >= 4 (weights): each weight 16^m (q - z) * (s / 16^m) = (q - z) * s,
 *     exact (at most 15 significant bits): the CPU twin's weight bit for bit,
 *     used by all T tokens (fewer accumulators than group sums at large T).
 *   The GEMV so differs from cpu_linear on the twin's weights only in the
 *   order (T >= 4) or grouping (T <= 2) of its fp32 sums.
 * - the input element x(t, k) is the same for the whole warp (a broadcast
 *   through L1); each weight serves all T tokens, so qweight is read once.
 * - the 8 warps' sums meet in shared memory and are added in warp order;
 *   when K is split over blocks too (gridDim.y, to give the card at least
 *   AWQ_MIN_WARPS warps), each block writes fp32 partials to the workspace
 *   and a second kernel adds them in split order: deterministic, run to run.
 * Graph-capture safe: no allocation, no sync; the grid from host sizes.
 */
#include "common.cuh"
#include "kernels.h"
#include "launch_plan.h"

namespace {

constexpr int WARPS = SLK_AWQ_THREADS / 32;
/* Nibble i of an int32 holds column awq_col(i) of its 8: [0, 2, 4, 6, 1, 3, 5, 7][i]. */
__device__ __forceinline__ constexpr int awq_col(int i) { return (i & 3) * 2 + (i >> 2); }

/* The 8 (scale, zero * scale) pairs of column j's group g, by nibble: the
 * dequantize kernel's form. */
__device__ __forceinline__ void load_group(float (&s)[8], float (&zs)[8], const int32_t *qzeros,
                                           const __half *scales, int64_t g, int64_t j, int64_t N8) {
    const uint32_t z = (uint32_t)__ldg(qzeros + g * N8 + j);
    const __half *sp = scales + g * N8 * 8 + j * 8; /* the 8 scales of columns 8j..8j+7 */
#pragma unroll
    for (int i = 0; i < 8; i++) {
        s[i] = __half2float(sp[awq_col(i)]);
        zs[i] = (float)((z >> (4 * i)) & 15u) * s[i];
    }
}

/* 2^23 as float bits: OR-ing an integer below 2^23 into the mantissa gives 2^23 + it, exactly. */
constexpr uint32_t MAGIC = 0x4B000000u;

/* Nibble i of q as the float 2^23 + 16^(i % 4) q_i, without a conversion: bits 4i..4i+3 masked in
 * place (from q >> 16 for i >= 4, so the nibble stays below bit 23). */
__device__ __forceinline__ float nibble_magic(uint32_t lo, uint32_t hi, int i) {
    const uint32_t src = i < 4 ? lo : hi;
    return __uint_as_float((src & (0xFu << (4 * (i & 3)))) | MAGIC);
}

/* Column j's group g for the GEMV, by nibble: sc = s / 16^(i % 4) (exact: a
 * power of two) and bias = -(2^23 + 16^(i % 4) z), so that
 * (nibble_magic + bias) * sc = (q - z) * s. */
__device__ __forceinline__ void load_group_magic(float (&sc)[8], float (&bias)[8], const int32_t *qzeros,
                                                 const __half *scales, int64_t g, int64_t j, int64_t N8) {
    const uint32_t z = (uint32_t)__ldg(qzeros + g * N8 + j);
    const __half *sp = scales + g * N8 * 8 + j * 8;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int m = i & 3;
        sc[i] = __half2float(sp[awq_col(i)]) * (1.0f / (float)(1u << (4 * m)));
        bias[i] = -__uint_as_float((((z >> (4 * i)) & 15u) << (4 * m)) | MAGIC);
    }
}

template <typename T, typename O, int NT>
__global__ void __launch_bounds__(SLK_AWQ_THREADS)
    awq_gemv_kernel(O *__restrict__ out, float *__restrict__ ws, const T *__restrict__ in,
                    const int32_t *__restrict__ qweight, const int32_t *__restrict__ qzeros,
                    const __half *__restrict__ scales, int T_, int64_t N, int64_t K, int64_t G, int64_t chunk) {
    constexpr bool GROUP_SUMS = NT <= 2;
    /* Rows in flight per thread. At T = 8 the accumulators alone take 64
     * registers: U = 4 (and its 32 preloaded inputs) took 147, one block per
     * SM, and ran at half the speed of U = 1 on the H100. */
    constexpr int U = NT <= 2 ? 8 : NT == 4 ? 4 : 1;
    constexpr int GS = GROUP_SUMS ? NT : 1;
    __shared__ float red[WARPS][32 * 8];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int64_t N8 = N / 8, j = (int64_t)blockIdx.x * 32 + lane;
    const int64_t k0 = (int64_t)blockIdx.y * chunk, k1 = k0 + chunk < K ? k0 + chunk : K;
    const bool live = j < N8;

    float acc[NT][8], gacc[GS][8];
#pragma unroll
    for (int i = 0; i < 8; i++) {
#pragma unroll
        for (int t = 0; t < NT; t++) acc[t][i] = 0.0f;
#pragma unroll
        for (int t = 0; t < GS; t++) gacc[t][i] = 0.0f;
    }

    if (live) {
        float sc[8], bias[8];
#pragma unroll
        for (int i = 0; i < 8; i++) sc[i] = bias[i] = 0.0f; /* the first flush adds 0 * 0 */
        int64_t gnext = INT64_MIN; /* the first row that needs a reload */
        for (int64_t kb = k0 + warp; kb < k1; kb += (int64_t)WARPS * U) {
            uint32_t q[U];
            float x[U][NT];
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t k = kb + (int64_t)u * WARPS;
                q[u] = k < k1 ? (uint32_t)__ldg(qweight + k * N8 + j) : 0u;
#pragma unroll
                for (int t = 0; t < NT; t++)
                    x[u][t] = k < k1 && t < T_ ? slk::to_f32(__ldg(in + (int64_t)t * K + k)) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < U; u++) {
                const int64_t k = kb + (int64_t)u * WARPS;
                if (k >= k1) break;
                if (k >= gnext) {
                    if constexpr (GROUP_SUMS) {
#pragma unroll
                        for (int t = 0; t < NT; t++)
#pragma unroll
                            for (int i = 0; i < 8; i++) acc[t][i] = fmaf(gacc[t][i], sc[i], acc[t][i]), gacc[t][i] = 0.0f;
                    }
                    const int64_t g = k / G;
                    load_group_magic(sc, bias, qzeros, scales, g, j, N8);
                    gnext = (g + 1) * G;
                }
                const uint32_t hi = q[u] >> 16;
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const float d = nibble_magic(q[u], hi, i) + bias[i]; /* 16^m (q - z), exact */
                    if constexpr (GROUP_SUMS) {
#pragma unroll
                        for (int t = 0; t < NT; t++) gacc[t][i] = fmaf(x[u][t], d, gacc[t][i]);
                    } else {
                        const float w = d * sc[i]; /* (q - z) * s, exact */
#pragma unroll
                        for (int t = 0; t < NT; t++) acc[t][i] = fmaf(x[u][t], w, acc[t][i]);
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

    /* Per token: the warps' sums by output column, added in warp order. */
    const int64_t n = (int64_t)blockIdx.x * 256 + threadIdx.x; /* this thread's output column below */
#pragma unroll
    for (int t = 0; t < NT; t++) {
        if (t >= T_) break; /* T_ is the same for the whole block: no thread skips a barrier */
#pragma unroll
        for (int i = 0; i < 8; i++) red[warp][lane * 8 + awq_col(i)] = acc[t][i];
        __syncthreads();
        float sum = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) sum += red[w][threadIdx.x];
        if (n < N) {
            if (gridDim.y == 1) out[(int64_t)t * N + n] = slk::from_f32<O>(sum);
            else ws[((int64_t)blockIdx.y * T_ + t) * N + n] = sum;
        }
        __syncthreads();
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

/* w(N, K) in T: lanes take consecutive k (coalesced stores of each column's
 * row), warps consecutive int32 columns. */
template <typename T>
__global__ void awq_dequantize_kernel(T *__restrict__ w, const int32_t *__restrict__ qweight,
                                      const int32_t *__restrict__ qzeros, const __half *__restrict__ scales,
                                      int64_t N, int64_t K, int64_t G) {
    const int64_t N8 = N / 8;
    const int64_t k = (int64_t)blockIdx.x * 32 + threadIdx.x % 32;
    const int64_t j = (int64_t)blockIdx.y * WARPS + threadIdx.x / 32;
    if (k >= K || j >= N8) return;
    float s[8], zs[8];
    load_group(s, zs, qzeros, scales, k / G, j, N8);
    const uint32_t q = (uint32_t)__ldg(qweight + k * N8 + j);
#pragma unroll
    for (int i = 0; i < 8; i++)
        w[(j * 8 + awq_col(i)) * K + k] = slk::from_f32<T>(fmaf((float)((q >> (4 * i)) & 15u), s[i], -zs[i]));
}

/* ---- slk_awq_mma: the weights as the A operand of mma.sync m16n8k16 ----
 *
 * Rows of the 16x16 A tile are output columns, its columns 16 consecutive k;
 * the 8 columns of the B tile are tokens. A thread (g = lane / 4, c = lane % 4)
 * needs A at rows g and g + 8 and k = 2c, 2c + 1, 2c + 8, 2c + 9, as pairs of
 * consecutive k. The tile's rows are mapped to columns so that a thread's
 * rows, in all 4 tiles of the block's 64 columns, are the 8 nibbles of ONE
 * int32 column j = 8 blockIdx.x + g: tile t's row g is nibble 2t of column j,
 * its row g + 8 nibble 2t + 1. So a thread loads 4 int32 per 16-k step (rows
 * k + 2c, + 1, + 8, + 9 of column j) and uses every nibble of them: byte t of
 * the (k, k + 1) int32s, PRMT-ed into one register, holds both pairs of tile t
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

/* Half m of 16 bytes of scales (columns 8j..8j+7): the scale of column 8j + m. */
__device__ __forceinline__ __half scale_of(uint4 s, int m) {
    const uint32_t w = m < 2 ? s.x : m < 4 ? s.y : m < 6 ? s.z : s.w;
    return __ushort_as_half((unsigned short)(w >> (16 * (m & 1))));
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
                   const int32_t *__restrict__ qweight, const int32_t *__restrict__ qzeros,
                   const __half *__restrict__ scales, int T_, int64_t N, int64_t K, int64_t G, int64_t chunk) {
    static_assert(SLK_AWQ_THREADS == 32 * SLK_AWQ_MMA_WARPS, "8 warps");
    constexpr uint32_t MAGIC = MmaDequant<T>::MAGIC;
    __shared__ float red[SLK_AWQ_MMA_WARPS][8][64];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, c = lane % 4;
    const int64_t N8 = N / 8, j = (int64_t)blockIdx.x * 8 + g, steps = K / 16;
    const int64_t s0 = (int64_t)blockIdx.y * chunk, s1 = s0 + chunk < steps ? s0 + chunk : steps;
    const int tok0 = (int)blockIdx.z * 8 * NT;
    const bool live = j < N8;
    const uint32_t *x2 = reinterpret_cast<const uint32_t *>(in); /* pairs of consecutive k */

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
            const int64_t k = (sb + u) * 16 + 2 * c;
            q[u][0] = live ? (uint32_t)__ldg(qweight + k * N8 + j) : 0u;
            q[u][1] = live ? (uint32_t)__ldg(qweight + (k + 1) * N8 + j) : 0u;
            q[u][2] = live ? (uint32_t)__ldg(qweight + (k + 8) * N8 + j) : 0u;
            q[u][3] = live ? (uint32_t)__ldg(qweight + (k + 9) * N8 + j) : 0u;
#pragma unroll
            for (int n = 0; n < NT; n++) {
                const int tok = tok0 + n * 8 + g;
                b[u][n][0] = tok < T_ ? __ldg(x2 + ((int64_t)tok * K + k) / 2) : 0u;
                b[u][n][1] = tok < T_ ? __ldg(x2 + ((int64_t)tok * K + k + 8) / 2) : 0u;
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
                /* byte t of rows (k, k + 1) in one register, and of rows (k + 8, k + 9) */
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
int launch_mma(const slk_awq_mma_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight,
               const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
               cudaStream_t st) {
    const dim3 grid((unsigned)p.col_blocks, (unsigned)p.ksplit, (unsigned)p.token_blocks);
    awq_mma_kernel<T, NT, U><<<grid, SLK_AWQ_THREADS, 0, st>>>(
        static_cast<T *>(out), static_cast<float *>(ws), static_cast<const T *>(in), qweight, qzeros,
        static_cast<const __half *>(scales), (int)T_, N, K, G, p.chunk);
    return reduce_splits<T>(out, ws, T_ * N, p.ksplit, st);
}

template <typename T, int NT>
int dispatch_batch(const slk_awq_mma_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight,
                   const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                   cudaStream_t st) {
    switch (p.batch) {
    case 1: return launch_mma<T, NT, 1>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    case 2: return launch_mma<T, NT, 2>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    /* batch 4: never with 4 tiles (slk_plan_awq_mma caps it at 2 there), so no <T, 4, 4> instance */
    default: return launch_mma<T, NT, (NT == 4 ? 2 : 4)>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    }
}

template <typename T>
int dispatch_mma(const slk_awq_mma_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight,
                 const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                 cudaStream_t st) {
    switch (p.ntiles) {
    case 1: return dispatch_batch<T, 1>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    case 2: return dispatch_batch<T, 2>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    default: return dispatch_batch<T, 4>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    }
}

template <typename T, typename O, int NT>
int launch_gemv(const slk_awq_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight,
                const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                cudaStream_t st) {
    const dim3 grid((unsigned)p.col_blocks, (unsigned)p.ksplit);
    awq_gemv_kernel<T, O, NT><<<grid, SLK_AWQ_THREADS, 0, st>>>(
        static_cast<O *>(out), static_cast<float *>(ws), static_cast<const T *>(in), qweight, qzeros,
        static_cast<const __half *>(scales), (int)T_, N, K, G, p.chunk);
    return reduce_splits<O>(out, ws, T_ * N, p.ksplit, st);
}

template <typename T, typename O>
int dispatch_tokens(const slk_awq_plan_t &p, void *out, void *ws, const void *in, const int32_t *qweight,
                    const int32_t *qzeros, const void *scales, int64_t T_, int64_t N, int64_t K, int64_t G,
                    cudaStream_t st) {
    switch (p.tokens) {
    case 1: return launch_gemv<T, O, 1>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    case 2: return launch_gemv<T, O, 2>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    case 4: return launch_gemv<T, O, 4>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    default: return launch_gemv<T, O, 8>(p, out, ws, in, qweight, qzeros, scales, T_, N, K, G, st);
    }
}

bool bad_shape(int64_t N, int64_t K, int64_t G) { return N < 0 || K < 0 || N % 8 != 0 || G <= 0 || K % G != 0; }

}  // namespace

/* The plan splits K only while the grid has under SLK_AWQ_MIN_BLOCKS blocks, so
 * ksplit <= cdiv(512, cdiv(N / 8, 32)) <= 512 * 256 / N + 1, and
 * ksplit * N < 2 * 512 * 256 (when N >= 512 * 256 there is no split): the
 * partials of any shape fit T * 4 * 2 * 512 * 256 bytes, 8 MiB at T = 8. */
extern "C" size_t slk_awq_gemv_workspace_max_bytes(void) {
    return (size_t)SLK_AWQ_MAX_T * sizeof(float) * 2 * SLK_AWQ_MIN_BLOCKS * 256;
}

extern "C" size_t slk_awq_gemv_workspace_bytes(int64_t T, int64_t N, int64_t K) {
    if (T <= 0 || N <= 0 || K <= 0) return 0;
    const slk_awq_plan_t p = slk_plan_awq_gemv(T, N, K);
    return p.ksplit > 1 ? (size_t)p.ksplit * (size_t)T * (size_t)N * sizeof(float) : 0;
}

extern "C" int slk_awq_gemv(void *out, const void *in, const int32_t *qweight, const int32_t *qzeros,
                            const void *scales, int64_t T, int64_t N, int64_t K, int64_t G, sl_dtype_t dt,
                            void *workspace, size_t workspace_bytes, void *stream) {
    if (slk_elem_bytes(dt) == 0 || T < 0 || T > SLK_AWQ_MAX_T || bad_shape(N, K, G))
        return (int)cudaErrorInvalidValue;
    if (T == 0 || N == 0) return 0;
    if (workspace_bytes < slk_awq_gemv_workspace_bytes(T, N, K)) return (int)cudaErrorInvalidValue;
    if (K == 0) return (int)cudaMemsetAsync(out, 0, (size_t)(T * N * slk_elem_bytes(dt)), slk::as_stream(stream));
    const slk_awq_plan_t p = slk_plan_awq_gemv(T, N, K);
    const cudaStream_t st = slk::as_stream(stream);
    SLK_DISPATCH(dt, E, return dispatch_tokens<E, E>(p, out, workspace, in, qweight, qzeros, scales, T, N, K, G, st));
    return (int)cudaErrorInvalidValue;
}

extern "C" int slk_awq_dequantize(void *w, const int32_t *qweight, const int32_t *qzeros, const void *scales,
                                  int64_t N, int64_t K, int64_t G, sl_dtype_t dt, void *stream) {
    if (slk_elem_bytes(dt) == 0 || bad_shape(N, K, G)) return (int)cudaErrorInvalidValue;
    if (N == 0 || K == 0) return 0;
    const dim3 grid((unsigned)slk_cdiv64(K, 32), (unsigned)slk_cdiv64(N / 8, WARPS));
    if (grid.y > 65535) return (int)cudaErrorInvalidValue;
    const cudaStream_t st = slk::as_stream(stream);
    SLK_DISPATCH(dt, E, {
        awq_dequantize_kernel<E><<<grid, SLK_AWQ_THREADS, 0, st>>>(static_cast<E *>(w), qweight, qzeros,
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

extern "C" int slk_awq_mma(void *out, const void *in, const int32_t *qweight, const int32_t *qzeros,
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
        return dispatch_mma<__nv_bfloat16>(p, out, workspace, in, qweight, qzeros, scales, T, N, K, G, st);
    return dispatch_mma<__half>(p, out, workspace, in, qweight, qzeros, scales, T, N, K, G, st);
}
