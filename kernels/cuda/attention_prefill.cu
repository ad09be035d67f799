/* attention_prefill.cu - varlen paged attention for prefill, chunked prefill,
 * prefix hits and mixed batches; and slk_attention, which dispatches to it or
 * to the decode kernel by the plan (attention_plan.h).
 *
 * Prefill kernel. Grid (ceil(max_query_len / BQ), H, S), 128 threads. A
 * block takes query rows q0 .. q0+BQ-1 of sequence s (tokens query_start[s]
 * + blockIdx.x * BQ ..., exiting when the sequence has fewer) and query head
 * h, and walks its KV from position 0 to the largest position among its rows
 * in tiles of BK, through the block table, FlashAttention-2 style: S = Q K^T
 * in fp32, causal mask by absolute position (key p is seen by row r iff
 * p <= positions[r], so a chunk that starts at position 500, or a sequence
 * whose first blocks are a prefix hit, attends to its cached context), an
 * online softmax per row, O += P V, and out = O / l once at the end in dt.
 * Decode sequences in a mixed batch are just blocks with one valid row.
 *
 * Two kernels, one contract (three with the wmma fallback below). bf16 /
 * f16 run on tensor cores through PTX, as FlashAttention-2 does:
 * mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16} (fp32 accumulate) fed by
 * ldmatrix from shared memory; sm_80 and later (the build targets sm_90).
 * 4 warps, one per 16 query rows (BQ = 64); K and V tiles of BK rows (64; 32
 * at D=256) are copied as they are, 16 bytes at a time, into 16-bit shared
 * memory, rows padded by 8 elements so that the 8 rows of an ldmatrix matrix
 * fall in distinct banks. A warp loads its Q A fragments once (ldmatrix.x4;
 * at D=256 once per tile, as 64 more registers beside O's 128 would spill)
 * and keeps O, D/8 m16n8 fp32 accumulators, in registers. Per tile: S = Q K^T
 * as D/16 x BK/8 MMAs, K^T's B fragments taken from K's rows by ldmatrix.x4
 * (two 8-key tiles per load), S in registers; the scale applied to S in fp32
 * (q stays unscaled: its products with K are exact), the causal mask by
 * absolute position, an online softmax per row: lane (g, t) = (lane / 4,
 * lane % 4) holds rows g and g + 8, columns 2t, 2t + 1 of each 8-key tile,
 * so a row's max and sum take 2 quad shuffles (xor 1, 2). P = exp(S - m)
 * rounded to dt (as FlashAttention does) and l sums the rounded P, so the
 * weights the MMA applies sum to l exactly. The C fragments of key tiles 2j
 * and 2j + 1, packed in pairs, are the A fragment of P for k step j of P V:
 * P never leaves registers. O *= alpha per row, O += P V with V's B
 * fragments by ldmatrix.x4.trans. out = O / l, a lane writing 2 elements of
 * each of its rows per 8 columns. A warp skips a tile past its last row's
 * position (causal diagonal, padding rows). Rounding P costs up to half an
 * ulp of dt per weight (the output's error bound in
 * tests/kernels/test_kernels_attention.c).
 *
 * ptxas (CUDA 13.0, sm_90, Release): registers per thread at D = 32, 64, 128,
 * 256: bf16 127, 148, 201, 210; f16 128, 168, 194, 209; no spills, no stack
 * (__launch_bounds__(128, 2) allows 255). SASS (nvdisasm) of both dtypes:
 * LDSM.16.M88.4 for Q and K, LDSM.16.MT88.4 for V, HMMA.16816; per tile and
 * warp at D=128 32 + 32 LDSM and 128 HMMA, no generic loads and no MOVM (the
 * wmma kernel's bf16 build has 304 LD.E and 128 MOVM there). Unverified: this
 * kernel has not run on a GPU; its results are checked only on the CUDA
 * emulator (tests/cuda-emu, which models ldmatrix and mma.sync with the PTX
 * ISA's layouts) and its speed is unmeasured. Until it has, the wmma kernel
 * stays (attention_prefill_wmma.cu: nvcuda::wmma m16n16k16, S and P through
 * shared memory), run instead when SERVELAB_ATTN_PREFILL=wmma (read once).
 *
 * f32 runs on the FMA kernel, the exactness reference. Thread (rg, cg) =
 * (tid / 8, tid % 8) owns rows rg + 16 i (i < BQ/16) of S, P and O: S
 * columns cg + 8 c (c < BK/8) and O columns 4 (cg + 8 k) .. +3 (k < D/32);
 * the 8 threads of a row are 8 consecutive lanes, so row max / sum take 3
 * shuffles. Tiles are staged by 16-byte vectors, D / VEC per row, in whole
 * rows per pass of 128 threads.
 *
 * Shared memory (dynamic; bytes = attn_plan_prefill_smem_bytes /
 * attn_plan_prefill_mma_smem_bytes; the launcher raises the limit when it is
 * over 48 KB). FMA: fp32 q (BQ, D+4) pre-scaled, k (BK, D+4), v (BK, D), p
 * (BQ, BK+4), positions int32 (BQ); the +4 pads make the float4 reads of 8
 * different rows by a quarter-warp hit 8 distinct 16-byte bank groups.
 * Tiles: 64x64 (D=32, D=64), 64x32 (D=128), 32x32 (D=256): 43 KB at D=32,
 * 68-104 KB otherwise. mma.sync: dt q (64, D+8), k and v (BK, D+8),
 * positions: 15, 27, 51 and 66 KB at D = 32, 64, 128, 256.
 *
 * Next steps for speed, once it has run: cp.async double-buffered K/V (the
 * kernel waits on each tile's loads), then wgmma on sm_90a.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <type_traits>

#include "attention_common.cuh"
#include "common.cuh"
#include "kernels.h"

namespace slattn {

template <int D, int BQ, int BK> struct PrefillLayout {
    static constexpr int QP = D + 4, PP = BK + 4; /* padded row strides (floats) */
    static constexpr int Q = 0, K = Q + BQ * QP, V = K + BK * QP, P = V + BK * D, END = P + BQ * PP;
    static constexpr size_t BYTES = (size_t)END * 4 + (size_t)BQ * 4;
    static_assert(BQ % 16 == 0 && BK % 8 == 0 && BK % 4 == 0 && D % 32 == 0, "thread layout");
    static_assert((K * 4) % 16 == 0 && (V * 4) % 16 == 0 && (P * 4) % 16 == 0, "float4 alignment");
};

/* 2 blocks per SM (at D >= 64 their shared memory allows 2-3): up to 255
 * registers, which the accumulators need; ptxas's own target of 168 spilled. */
template <typename T, int D, int BQ, int BK>
__global__ void __launch_bounds__(ATTN_THREADS, 2)
    attn_prefill_kernel(T *__restrict__ out,                      /* (T, H, D) */
                        const T *__restrict__ q,                  /* (T, H, D) */
                        const T *__restrict__ kc,                 /* (slots, Hkv, D) */
                        const T *__restrict__ vc,                 /* (slots, Hkv, D) */
                        const int32_t *__restrict__ positions,    /* (T) */
                        const int32_t *__restrict__ query_start,  /* (S+1) */
                        const int32_t *__restrict__ block_tables, /* (S, max_blocks) */
                        int max_blocks, int block_size, int H, int Hkv, int group, float scale) {
    using L = PrefillLayout<D, BQ, BK>;
    constexpr int NT = ATTN_THREADS, VEC = Vec<T>::N, NCH = D / VEC;
    constexpr int RQ = BQ / 16, CK = BK / 8, CD4 = D / 32, QP = L::QP, PP = L::PP;
    static_assert(NT == 128 && BQ <= NT, "16 x 8 thread layout; one thread per row's position");
    static_assert((BQ * NCH) % NT == 0 && (BK * NCH) % NT == 0, "whole rows of chunks per pass");

    extern __shared__ float4 smem4[];
    float *sm = reinterpret_cast<float *>(smem4);
    float *s_q = sm + L::Q, *s_k = sm + L::K, *s_v = sm + L::V, *s_p = sm + L::P;
    int *s_pos = reinterpret_cast<int *>(sm + L::END);

    const int s = blockIdx.z, h = blockIdx.y;
    const int qe = query_start[s + 1];
    const int q0 = query_start[s] + blockIdx.x * BQ;
    if (q0 >= qe) return;
    const int qn = min(BQ, qe - q0);
    const int kvh = h / group;
    const int tid = threadIdx.x, rg = tid >> 3, cg = tid & 7;

    if (tid < BQ) s_pos[tid] = tid < qn ? positions[q0 + tid] : -1; /* -1: padding row, sees no key */
#pragma unroll 2
    for (int it = 0; it < BQ * NCH / NT; it++) {
        const int e = tid + it * NT, r = e / NCH, c = e % NCH;
        float f[VEC];
        if (r < qn) {
            load16(q + ((int64_t)(q0 + r) * H + h) * D + c * VEC, f);
#pragma unroll
            for (int v = 0; v < VEC; v++) f[v] *= scale;
        } else {
#pragma unroll
            for (int v = 0; v < VEC; v++) f[v] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < VEC; j += 4)
            *reinterpret_cast<float4 *>(s_q + r * QP + c * VEC + j) = make_float4(f[j], f[j + 1], f[j + 2], f[j + 3]);
    }
    __syncthreads();

    int kv_end = 0; /* keys 0 .. kv_end-1 are seen by some row of this block */
    for (int r = 0; r < qn; r++) kv_end = max(kv_end, s_pos[r] + 1);
    int row_pos[RQ];
#pragma unroll
    for (int i = 0; i < RQ; i++) row_pos[i] = s_pos[rg + 16 * i];

    float o[RQ][CD4][4], m[RQ], l[RQ];
#pragma unroll
    for (int i = 0; i < RQ; i++) {
        m[i] = -INFINITY, l[i] = 0.0f;
#pragma unroll
        for (int k = 0; k < CD4; k++) o[i][k][0] = o[i][k][1] = o[i][k][2] = o[i][k][3] = 0.0f;
    }

    const int32_t *table = block_tables + (int64_t)s * max_blocks;
    const int64_t kv_stride = (int64_t)Hkv * D;
    const T *kbase = kc + (int64_t)kvh * D, *vbase = vc + (int64_t)kvh * D;

    for (int k0 = 0; k0 < kv_end; k0 += BK) {
        const int kn = min(BK, kv_end - k0);

        /* K and V tiles to fp32 shared memory; rows past kn are zero, so the
         * masked columns multiply zeros, never stale or NaN data. */
#pragma unroll
        for (int it = 0; it < BK * NCH / NT; it++) {
            const int e = tid + it * NT, j = e / NCH, c = e % NCH;
            float kf[VEC], vf[VEC];
            if (j < kn) {
                const int64_t off = kv_slot(table, k0 + j, block_size) * kv_stride + c * VEC;
                load16(kbase + off, kf);
                load16(vbase + off, vf);
            } else {
#pragma unroll
                for (int v = 0; v < VEC; v++) kf[v] = vf[v] = 0.0f;
            }
#pragma unroll
            for (int v = 0; v < VEC; v += 4) {
                *reinterpret_cast<float4 *>(s_k + j * QP + c * VEC + v) = make_float4(kf[v], kf[v + 1], kf[v + 2], kf[v + 3]);
                *reinterpret_cast<float4 *>(s_v + j * D + c * VEC + v) = make_float4(vf[v], vf[v + 1], vf[v + 2], vf[v + 3]);
            }
        }
        __syncthreads();

        /* S = (Q * scale) K^T for this thread's rows and columns */
        float sc[RQ][CK];
#pragma unroll
        for (int i = 0; i < RQ; i++)
#pragma unroll
            for (int c = 0; c < CK; c++) sc[i][c] = 0.0f;
#pragma unroll 4
        for (int d = 0; d < D; d += 4) {
            float4 qv[RQ], kv[CK];
#pragma unroll
            for (int i = 0; i < RQ; i++) qv[i] = *reinterpret_cast<const float4 *>(s_q + (rg + 16 * i) * QP + d);
#pragma unroll
            for (int c = 0; c < CK; c++) kv[c] = *reinterpret_cast<const float4 *>(s_k + (cg + 8 * c) * QP + d);
#pragma unroll
            for (int i = 0; i < RQ; i++)
#pragma unroll
                for (int c = 0; c < CK; c++) {
                    sc[i][c] = fmaf(qv[i].x, kv[c].x, sc[i][c]);
                    sc[i][c] = fmaf(qv[i].y, kv[c].y, sc[i][c]);
                    sc[i][c] = fmaf(qv[i].z, kv[c].z, sc[i][c]);
                    sc[i][c] = fmaf(qv[i].w, kv[c].w, sc[i][c]);
                }
        }

        /* causal mask, online softmax, P to shared memory */
#pragma unroll
        for (int i = 0; i < RQ; i++) {
            float mx = -INFINITY;
#pragma unroll
            for (int c = 0; c < CK; c++) {
                const int j = cg + 8 * c;
                if (!(j < kn && k0 + j <= row_pos[i])) sc[i][c] = -INFINITY;
                mx = fmaxf(mx, sc[i][c]);
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 4));
            const float m_new = fmaxf(m[i], mx);
            /* a row that has seen no key yet (padding rows: never) keeps m = -inf;
             * subtracting 0 instead keeps exp(-inf - m) = 0 and avoids inf - inf */
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(m[i] - m_use);
            float rs = 0.0f;
#pragma unroll
            for (int c = 0; c < CK; c++) {
                sc[i][c] = expf(sc[i][c] - m_use);
                rs += sc[i][c];
            }
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            rs += __shfl_xor_sync(0xffffffffu, rs, 2);
            rs += __shfl_xor_sync(0xffffffffu, rs, 4);
            l[i] = l[i] * alpha + rs;
            m[i] = m_new;
#pragma unroll
            for (int k = 0; k < CD4; k++)
                o[i][k][0] *= alpha, o[i][k][1] *= alpha, o[i][k][2] *= alpha, o[i][k][3] *= alpha;
#pragma unroll
            for (int c = 0; c < CK; c++) s_p[(rg + 16 * i) * PP + cg + 8 * c] = sc[i][c];
        }
        __syncthreads();

        /* O += P V; rows of P past kn are 0 and rows of V past kn are 0 */
#pragma unroll 2
        for (int j = 0; j < BK; j += 4) {
            float4 pv[RQ];
#pragma unroll
            for (int i = 0; i < RQ; i++) pv[i] = *reinterpret_cast<const float4 *>(s_p + (rg + 16 * i) * PP + j);
#pragma unroll
            for (int jj = 0; jj < 4; jj++) {
#pragma unroll
                for (int k = 0; k < CD4; k++) {
                    const float4 vv = *reinterpret_cast<const float4 *>(s_v + (j + jj) * D + 4 * (cg + 8 * k));
#pragma unroll
                    for (int i = 0; i < RQ; i++) {
                        const float p = jj == 0 ? pv[i].x : jj == 1 ? pv[i].y : jj == 2 ? pv[i].z : pv[i].w;
                        o[i][k][0] = fmaf(p, vv.x, o[i][k][0]);
                        o[i][k][1] = fmaf(p, vv.y, o[i][k][1]);
                        o[i][k][2] = fmaf(p, vv.z, o[i][k][2]);
                        o[i][k][3] = fmaf(p, vv.w, o[i][k][3]);
                    }
                }
            }
        }
        __syncthreads(); /* K, V and P are rewritten by the next tile */
    }

#pragma unroll
    for (int i = 0; i < RQ; i++) {
        const int r = rg + 16 * i;
        if (r >= qn) continue;
        T *dst = out + ((int64_t)(q0 + r) * H + h) * D;
        const float li = l[i];
#pragma unroll
        for (int k = 0; k < CD4; k++)
            store4(dst + 4 * (cg + 8 * k), o[i][k][0] / li, o[i][k][1] / li, o[i][k][2] / li, o[i][k][3] / li);
    }
}

/* ---- tensor cores (bf16, f16): mma.sync m16n8k16 -------------------------- */

/* Byte offsets of the mma.sync kernel's shared memory (the formula of
 * attn_plan_prefill_mma_smem_bytes): 16-bit q (BQ, RP), k (BK, RP), v (BK,
 * RP), RP = D + 8, then BQ int32 positions. Each ldmatrix row is 16 bytes at a
 * multiple of 16: region starts and strides are. The 8-element pad puts the 8
 * rows of one 8x8 matrix 4 banks apart: an ldmatrix phase hits all 32 banks. */
template <int D, int BK> struct MmaLayout {
    static constexpr int BQ = ATTN_PREFILL_TC_BQ, RP = D + 8;
    static constexpr size_t Q = 0, K = Q + (size_t)BQ * RP * 2, V = K + (size_t)BK * RP * 2,
                            POS = V + (size_t)BK * RP * 2, BYTES = POS + (size_t)BQ * 4;
    static_assert(BQ == 16 * (ATTN_THREADS / 32), "one warp per 16 query rows");
    static_assert(D % 16 == 0 && BK % 16 == 0, "whole 16x16 A tiles, pairs of 8-key tiles");
    static_assert((RP * 2) % 16 == 0 && K % 16 == 0 && V % 16 == 0 && POS % 16 == 0, "16-byte ldmatrix rows");
};

/* The shared-window address of a pointer into shared memory, for ldmatrix. */
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* Four 8x8 16-bit matrices; lane 8 i + r gives the address of row r of matrix
 * i, and r[i] of lane l holds matrix i's row l / 4, columns 2 (l % 4) + 0, 1. */
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row)));
}
/* The same, each matrix transposed: r[i] of lane l holds column l / 4, rows
 * 2 (l % 4) + 0, 1. */
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], const void *row) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(row)));
}

using slk::mma_16816;

/* 2 blocks per SM: up to 255 registers (figures in the header); shared
 * memory allows 3 or more at every D. */
template <typename T, typename KV, int D, int BK>
__global__ void __launch_bounds__(ATTN_THREADS, 2)
    attn_prefill_mma_kernel(T *__restrict__ out,                      /* (T, H, D) */
                            const T *__restrict__ q,                  /* (T, H, D) */
                            const KV *__restrict__ kc,                /* (slots, Hkv, D) */
                            const KV *__restrict__ vc,                /* (slots, Hkv, D) */
                            const int32_t *__restrict__ positions,    /* (T) */
                            const int32_t *__restrict__ query_start,  /* (S+1) */
                            const int32_t *__restrict__ block_tables, /* (S, max_blocks) */
                            int max_blocks, int block_size, int H, int Hkv, int group, float scale) {
    using L = MmaLayout<D, BK>;
    constexpr int NT = ATTN_THREADS, BQ = L::BQ, RP = L::RP, VEC = Vec<T>::N, NCH = D / VEC;
    constexpr int KD = D / 16; /* 16-wide k steps of S = Q K^T */
    constexpr int NS = BK / 8; /* 8-key column tiles of S; NS / 2 16-key k steps of P V */
    constexpr int NO = D / 8;  /* 8-column tiles of O */
    constexpr bool QREG = D <= 128; /* Q fragments in registers (D=256: 64 more would spill) */
    static_assert(sizeof(T) == 2, "16-bit dtypes");
    static_assert((BQ * NCH) % NT == 0 && (BK * NCH) % NT == 0, "whole rows of chunks per pass");
    static_assert(NS % 2 == 0 && NO % 2 == 0, "x4 loads cover two 8-wide tiles");

    extern __shared__ __align__(128) unsigned char smem_mma[];
    T *s_q = reinterpret_cast<T *>(smem_mma + L::Q), *s_k = reinterpret_cast<T *>(smem_mma + L::K);
    T *s_v = reinterpret_cast<T *>(smem_mma + L::V);
    int *s_pos = reinterpret_cast<int *>(smem_mma + L::POS);

    const int s = blockIdx.z, h = blockIdx.y;
    const int qe = query_start[s + 1];
    const int q0 = query_start[s] + blockIdx.x * BQ;
    if (q0 >= qe) return;
    const int qn = min(BQ, qe - q0);
    const int kvh = h / group;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);

    if (tid < BQ) s_pos[tid] = tid < qn ? positions[q0 + tid] : -1; /* -1: padding row, sees no key */
#pragma unroll 2
    for (int it = 0; it < BQ * NCH / NT; it++) {
        const int e = tid + it * NT, r = e / NCH, c = e % NCH;
        uint4 u = zero;
        if (r < qn) u = __ldg(reinterpret_cast<const uint4 *>(q + ((int64_t)(q0 + r) * H + h) * D + c * VEC));
        *reinterpret_cast<uint4 *>(s_q + r * RP + c * VEC) = u;
    }
    __syncthreads();

    int kv_end = 0; /* keys 0 .. kv_end-1 are seen by some row of this block */
    for (int r = 0; r < qn; r++) kv_end = max(kv_end, s_pos[r] + 1);
    int w_last = -1; /* the last key a row of this warp sees; -1: all padding */
    for (int r = 16 * warp; r < min(16 * warp + 16, qn); r++) w_last = max(w_last, s_pos[r]);
    /* this lane's rows of the fragments: g and g + 8 of the warp's 16; its
     * columns of each 8-wide tile: 2t, 2t + 1 */
    const int g = lane >> 2, t = lane & 3;
    const int pos_g = s_pos[16 * warp + g], pos_g8 = s_pos[16 * warp + g + 8];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    /* ldmatrix row addresses (lane 8 i + r gives row r of matrix i):
     * Q, A of S = Q K^T: matrices (rows 0-7, cols 0-7), (8-15, 0-7), (0-7,
     *   8-15), (8-15, 8-15) of the warp's 16 rows = a[0..3];
     * K, B of S (K^T, "col"): keys 0-7 at d 0-7, keys 0-7 at d 8-15, then keys
     *   8-15 likewise = b0, b1 of key tile n, b0, b1 of key tile n + 1;
     * V, B of O += P V, transposed on load: keys 0-7 then 8-15 at d 0-7, then
     *   at d 8-15 = b0, b1 of column tile k, b0, b1 of column tile k + 1. */
    const T *q_lane = s_q + (16 * warp + (lane & 15)) * RP + 8 * (lane >> 4);
    const T *k_lane = s_k + ((lane & 7) + 8 * (lane >> 4)) * RP + 8 * ((lane >> 3) & 1);
    const T *v_lane = s_v + ((lane & 7) + 8 * ((lane >> 3) & 1)) * RP + 8 * (lane >> 4);

    uint32_t qf[QREG ? KD : 1][4];
    if constexpr (QREG) {
#pragma unroll
        for (int kd = 0; kd < KD; kd++) ldsm_x4(qf[kd], q_lane + 16 * kd);
    }
    float o[NO][4];
#pragma unroll
    for (int k = 0; k < NO; k++) o[k][0] = o[k][1] = o[k][2] = o[k][3] = 0.0f;

    const int32_t *table = block_tables + (int64_t)s * max_blocks;
    const int64_t kv_stride = (int64_t)Hkv * D;
    const KV *kbase = kc + (int64_t)kvh * D, *vbase = vc + (int64_t)kvh * D;
    const T *tag = nullptr;

    for (int k0 = 0; k0 < kv_end; k0 += BK) {
        const int kn = min(BK, kv_end - k0);

        /* K and V tiles in T (an fp8 cache widened on the way, exactly); rows
         * past kn are zero, so the masked columns multiply zeros, never stale
         * or NaN data. */
#pragma unroll 2
        for (int it = 0; it < BK * NCH / NT; it++) {
            const int e = tid + it * NT, j = e / NCH, c = e % NCH;
            uint4 ku = zero, vu = zero;
            if (j < kn) {
                const int64_t off = kv_slot(table, k0 + j, block_size) * kv_stride + c * VEC;
                ku = ldg_kv_as<T, KV>(kbase + off);
                vu = ldg_kv_as<T, KV>(vbase + off);
            }
            *reinterpret_cast<uint4 *>(s_k + j * RP + c * VEC) = ku;
            *reinterpret_cast<uint4 *>(s_v + j * RP + c * VEC) = vu;
        }
        __syncthreads();

        if (k0 <= w_last) { /* warp-uniform: else every row of the warp masks the whole tile */
            /* S = Q K^T (unscaled), fp32 in registers */
            float sc[NS][4];
#pragma unroll
            for (int n = 0; n < NS; n++) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
            for (int kd = 0; kd < KD; kd++) {
                uint32_t qa[4];
                if constexpr (QREG) {
                    qa[0] = qf[kd][0], qa[1] = qf[kd][1], qa[2] = qf[kd][2], qa[3] = qf[kd][3];
                } else {
                    ldsm_x4(qa, q_lane + 16 * kd);
                }
#pragma unroll
                for (int n = 0; n < NS; n += 2) {
                    uint32_t kb[4];
                    ldsm_x4(kb, k_lane + 8 * n * RP + 16 * kd);
                    mma_16816<T>(sc[n], qa, kb[0], kb[1]);
                    mma_16816<T>(sc[n + 1], qa, kb[2], kb[3]);
                }
            }

            /* scale, mask and the online softmax of rows g (i = 0) and g + 8
             * (i = 1): a row's 8 columns of a tile are spread over the 4
             * lanes of a quad, so its max and sum take 2 shuffles */
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int n = 0; n < NS; n++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int c = 8 * n + 2 * t + (e & 1);
                    float x = sc[n][e] * scale;
                    if (!(c < kn && k0 + c <= (e < 2 ? pos_g : pos_g8))) x = -INFINITY;
                    sc[n][e] = x;
                    mx[e >> 1] = fmaxf(mx[e >> 1], x);
                }
            float m_use[2], alpha[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                const float m_new = fmaxf(m[i], mx[i]);
                /* a row that has seen no key yet keeps m = -inf; subtracting
                 * 0 instead keeps exp(-inf - m) = 0 and avoids inf - inf */
                m_use[i] = m_new == -INFINITY ? 0.0f : m_new;
                alpha[i] = expf(m[i] - m_use[i]);
                m[i] = m_new;
            }
            /* P = exp(S - m) rounded to dt, straight into A fragments of P V:
             * the C fragment of key tiles 2j and 2j + 1 (rows g, g + 8,
             * columns 2t, 2t + 1) is the A fragment of k step j; l sums the
             * rounded P, the weights the MMA applies */
            uint32_t pa[NS / 2][4];
            float rs[2] = {0.0f, 0.0f};
#pragma unroll
            for (int n = 0; n < NS; n++) {
                const uint32_t lo = f2_to_u32(expf(sc[n][0] - m_use[0]), expf(sc[n][1] - m_use[0]), tag);
                const uint32_t hi = f2_to_u32(expf(sc[n][2] - m_use[1]), expf(sc[n][3] - m_use[1]), tag);
                const float2 a = u32_to_f2(lo, tag), b = u32_to_f2(hi, tag);
                rs[0] += a.x + a.y;
                rs[1] += b.x + b.y;
                pa[n / 2][2 * (n & 1)] = lo;
                pa[n / 2][2 * (n & 1) + 1] = hi;
            }
#pragma unroll
            for (int i = 0; i < 2; i++) {
                rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 1);
                rs[i] += __shfl_xor_sync(0xffffffffu, rs[i], 2);
                l[i] = l[i] * alpha[i] + rs[i];
            }

            /* O = O * alpha (per row) + P V */
#pragma unroll
            for (int k = 0; k < NO; k++) {
                o[k][0] *= alpha[0], o[k][1] *= alpha[0];
                o[k][2] *= alpha[1], o[k][3] *= alpha[1];
            }
#pragma unroll
            for (int j = 0; j < NS / 2; j++)
#pragma unroll
                for (int k = 0; k < NO; k += 2) {
                    uint32_t vb[4];
                    ldsm_x4_trans(vb, v_lane + 16 * j * RP + 8 * k);
                    mma_16816<T>(o[k], pa[j], vb[0], vb[1]);
                    mma_16816<T>(o[k + 1], pa[j], vb[2], vb[3]);
                }
        }
        __syncthreads(); /* K and V are rewritten by the next tile */
    }

    /* out = O / l: a lane writes columns 8k + 2t, 2t + 1 of rows g and g + 8 */
    const int r0 = 16 * warp + g, r1 = r0 + 8;
    T *dst0 = out + ((int64_t)(q0 + r0) * H + h) * D + 2 * t, *dst1 = out + ((int64_t)(q0 + r1) * H + h) * D + 2 * t;
#pragma unroll
    for (int k = 0; k < NO; k++) {
        if (r0 < qn) *reinterpret_cast<uint32_t *>(dst0 + 8 * k) = f2_to_u32(o[k][0] / l[0], o[k][1] / l[0], tag);
        if (r1 < qn) *reinterpret_cast<uint32_t *>(dst1 + 8 * k) = f2_to_u32(o[k][2] / l[1], o[k][3] / l[1], tag);
    }
}

/* ---- launchers --------------------------------------------------------------- */

template <typename T, typename KV, int D, int BK>
static cudaError_t launch_prefill_mma_d(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    using L = MmaLayout<D, BK>;
    if (!pl->prefill_tc || pl->prefill_wmma || pl->prefill_smem_bytes != L::BYTES || pl->q_tile != L::BQ ||
        pl->kv_tile != BK)
        return cudaErrorInvalidConfiguration;
    return launch_prefill_grid<T, KV>(attn_prefill_mma_kernel<T, KV, D, BK>, L::BYTES, pl, a, st);
}

template <typename T, typename KV>
static cudaError_t launch_prefill_mma_kv(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (pl->D) {
    case 32: return launch_prefill_mma_d<T, KV, 32, ATTN_PREFILL_TC_BK_D32>(pl, a, st);
    case 64: return launch_prefill_mma_d<T, KV, 64, ATTN_PREFILL_TC_BK_D64>(pl, a, st);
    case 128: return launch_prefill_mma_d<T, KV, 128, ATTN_PREFILL_TC_BK_D128>(pl, a, st);
    case 256: return launch_prefill_mma_d<T, KV, 256, ATTN_PREFILL_TC_BK_D256>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T>
static cudaError_t launch_prefill_mma(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (a.kv) {
    case KV_AS_T: return launch_prefill_mma_kv<T, T>(pl, a, st);
    case KV_E4M3: return launch_prefill_mma_kv<T, slfp8::e4m3>(pl, a, st);
    case KV_E5M2: return launch_prefill_mma_kv<T, slfp8::e5m2>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T, int D, int BQ, int BK>
static cudaError_t launch_prefill_d(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    using L = PrefillLayout<D, BQ, BK>;
    if (pl->prefill_tc || pl->prefill_smem_bytes != L::BYTES || pl->q_tile != BQ || pl->kv_tile != BK)
        return cudaErrorInvalidConfiguration;
    return launch_prefill_grid<T, T>(attn_prefill_kernel<T, D, BQ, BK>, L::BYTES, pl, a, st);
}

template <typename T>
static cudaError_t launch_prefill(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (pl->D) {
    case 32: return launch_prefill_d<T, 32, ATTN_PREFILL_BQ_D32, ATTN_PREFILL_BK_D32>(pl, a, st);
    case 64: return launch_prefill_d<T, 64, ATTN_PREFILL_BQ_D64, ATTN_PREFILL_BK_D64>(pl, a, st);
    case 128: return launch_prefill_d<T, 128, ATTN_PREFILL_BQ_D128, ATTN_PREFILL_BK_D128>(pl, a, st);
    case 256: return launch_prefill_d<T, 256, ATTN_PREFILL_BQ_D256, ATTN_PREFILL_BK_D256>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t launch_prefill_f32(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return a.kv == KV_AS_T ? launch_prefill<float>(pl, a, st) : cudaErrorInvalidValue;
}
cudaError_t launch_prefill_bf16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return pl->prefill_wmma ? launch_prefill_wmma_bf16(pl, a, st) : launch_prefill_mma<__nv_bfloat16>(pl, a, st);
}
cudaError_t launch_prefill_f16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return pl->prefill_wmma ? launch_prefill_wmma_f16(pl, a, st) : launch_prefill_mma<__half>(pl, a, st);
}

} // namespace slattn

static int misaligned(const void *p) { return ((uintptr_t)p & 15u) != 0; }

/* SERVELAB_ATTN_PREFILL, read once: "wmma" runs the bf16 / f16 prefill on the
 * wmma kernel (attention_prefill_wmma.cu) instead of the mma.sync one; unset,
 * empty or "mma" keeps the default. Another value is reported once and
 * ignored. */
static bool prefill_wmma_selected(void) {
    static const bool wmma = [] {
        const char *e = getenv("SERVELAB_ATTN_PREFILL");
        if (!e || !*e || !strcmp(e, "mma")) return false;
        if (!strcmp(e, "wmma")) return true;
        fprintf(stderr, "servelab: SERVELAB_ATTN_PREFILL=%s is neither mma nor wmma; using mma\n", e);
        return false;
    }();
    return wmma;
}

/* The current device's SM count, which sizes the decode split; cached per
 * device (a driver query per call would cost more than the kernel at batch 1;
 * it is no stream operation, so it is safe during graph capture too). 1 when
 * the query fails: the plan is then merely slow, and the launch reports the error. */
static int64_t device_sm_count(void) {
    static std::atomic<int> cache[64];
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return 1;
    const int cached = dev >= 0 && dev < 64 ? cache[dev].load(std::memory_order_relaxed) : 0;
    if (cached > 0) return cached;
    int n = 0;
    if (cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess || n < 1) return 1;
    if (dev >= 0 && dev < 64) cache[dev].store(n, std::memory_order_relaxed);
    return n;
}

extern "C" size_t slk_attention_workspace_bytes(const sl_attn_meta_t *meta, int64_t H, int64_t Hkv, int64_t D) {
    if (!meta) return 0;
    return attn_plan_workspace_bytes(meta->n_seqs, meta->max_seq_len, meta->max_query_len, H, Hkv, D,
                                     device_sm_count());
}

/* Contract as kernels.h; in addition: out, q, k_cache, v_cache and the
 * workspace must be 16-byte aligned (cudaMalloc gives 256), and every
 * positions[t] < max_seq_len for the decode split to be balanced (a longer
 * context is still computed exactly, in longer partitions). */
extern "C" int slk_attention(void *out, const void *q, const void *k_cache, const void *v_cache,
                             const sl_attn_meta_t *meta, int64_t H, int64_t Hkv, int64_t D, int64_t block_size,
                             float scale, sl_dtype_t dt, sl_dtype_t kv_dt, void *workspace, size_t workspace_bytes,
                             void *stream) {
    if (!meta || meta->n_tokens < 0) return cudaErrorInvalidValue;
    if (meta->n_tokens == 0) return cudaSuccess;
    if (dt != DTYPE_F32 && dt != DTYPE_BF16 && dt != DTYPE_F16) return cudaErrorInvalidValue;
    /* the cache in dt, or fp8 with 16-bit activations */
    const int kv = kv_dt == dt                                        ? slattn::KV_AS_T
                   : dt != DTYPE_F32 && kv_dt == DTYPE_F8_E4M3 ? slattn::KV_E4M3
                   : dt != DTYPE_F32 && kv_dt == DTYPE_F8_E5M2 ? slattn::KV_E5M2
                                                               : -1;
    if (kv < 0) return cudaErrorInvalidValue;
    if (block_size < 1 || block_size > INT32_MAX || meta->max_blocks < 1) return cudaErrorInvalidValue;
    if (H > INT32_MAX || Hkv > INT32_MAX) return cudaErrorInvalidValue;
    if (!out || !q || !k_cache || !v_cache || !meta->positions || !meta->query_start || !meta->block_tables)
        return cudaErrorInvalidValue;
    attn_plan_t plan;
    if (attn_plan_make(&plan, meta->n_tokens, meta->n_seqs, meta->max_seq_len, meta->max_query_len, H, Hkv, D,
                       dt == DTYPE_F32 ? 4 : 2, device_sm_count()))
        return cudaErrorInvalidValue;
    if (plan.prefill_tc && prefill_wmma_selected()) attn_plan_use_wmma_prefill(&plan);
    if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes && !workspace))
        return cudaErrorInvalidValue;
    if (misaligned(out) || misaligned(q) || misaligned(k_cache) || misaligned(v_cache) ||
        (plan.workspace_bytes && misaligned(workspace)))
        return cudaErrorInvalidValue;

    slattn::AttnArgs a;
    a.out = out, a.q = q, a.k_cache = k_cache, a.v_cache = v_cache, a.kv = (slattn::KvKind)kv;
    a.positions = meta->positions, a.query_start = meta->query_start, a.block_tables = meta->block_tables;
    a.max_blocks = meta->max_blocks, a.block_size = (int)block_size, a.scale = scale;
    a.ws = static_cast<float *>(workspace);
    cudaStream_t st = static_cast<cudaStream_t>(stream);
    cudaError_t err;
    if (plan.path == ATTN_PATH_DECODE)
        err = dt == DTYPE_F32    ? slattn::launch_decode_f32(&plan, a, st)
              : dt == DTYPE_BF16 ? slattn::launch_decode_bf16(&plan, a, st)
                                 : slattn::launch_decode_f16(&plan, a, st);
    else
        err = dt == DTYPE_F32    ? slattn::launch_prefill_f32(&plan, a, st)
              : dt == DTYPE_BF16 ? slattn::launch_prefill_bf16(&plan, a, st)
                                 : slattn::launch_prefill_f16(&plan, a, st);
    return (int)err;
}

/* ---- the layouts, for the host-side check (attention_plan.h) ----------------- */

template <int D, int BQ, int BK> static size_t fma_bytes(int64_t *q_tile, int64_t *kv_tile) {
    *q_tile = BQ, *kv_tile = BK;
    return slattn::PrefillLayout<D, BQ, BK>::BYTES;
}

template <int D, int BK> static size_t mma_bytes(int64_t *q_tile, int64_t *kv_tile) {
    *q_tile = slattn::MmaLayout<D, BK>::BQ, *kv_tile = BK;
    return slattn::MmaLayout<D, BK>::BYTES;
}

extern "C" size_t attn_kernel_prefill_smem_bytes(int64_t elem_bytes, int wmma, int64_t D, int64_t *q_tile,
                                                 int64_t *kv_tile) {
    *q_tile = *kv_tile = 0;
    if (elem_bytes == 4) {
        switch (D) {
        case 32: return fma_bytes<32, ATTN_PREFILL_BQ_D32, ATTN_PREFILL_BK_D32>(q_tile, kv_tile);
        case 64: return fma_bytes<64, ATTN_PREFILL_BQ_D64, ATTN_PREFILL_BK_D64>(q_tile, kv_tile);
        case 128: return fma_bytes<128, ATTN_PREFILL_BQ_D128, ATTN_PREFILL_BK_D128>(q_tile, kv_tile);
        case 256: return fma_bytes<256, ATTN_PREFILL_BQ_D256, ATTN_PREFILL_BK_D256>(q_tile, kv_tile);
        default: return 0;
        }
    }
    if (elem_bytes == 2 && wmma) return slattn::prefill_wmma_smem_bytes(D, q_tile, kv_tile);
    if (elem_bytes == 2) {
        switch (D) {
        case 32: return mma_bytes<32, ATTN_PREFILL_TC_BK_D32>(q_tile, kv_tile);
        case 64: return mma_bytes<64, ATTN_PREFILL_TC_BK_D64>(q_tile, kv_tile);
        case 128: return mma_bytes<128, ATTN_PREFILL_TC_BK_D128>(q_tile, kv_tile);
        case 256: return mma_bytes<256, ATTN_PREFILL_TC_BK_D256>(q_tile, kv_tile);
        default: return 0;
        }
    }
    return 0;
}
