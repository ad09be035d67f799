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
 * This first version uses fp32 FMA, no tensor cores (written without a GPU
 * to test on, correctness first). Thread (rg, cg) = (tid / 8, tid % 8) owns
 * rows rg + 16 i (i < BQ/16) of S, P and O: S columns cg + 8 c (c < BK/8) and
 * O columns 4 (cg + 8 k) .. +3 (k < D/32: one float4 per row at D=32); the
 * 8 threads of a row are 8 consecutive lanes, so row max / sum take 3
 * shuffles. Tiles are staged by 16-byte vectors, D / VEC per row (4 at D=32
 * in 16-bit), in whole rows per pass of 128 threads.
 *
 * Shared memory (dynamic, bytes = attn_plan_prefill_smem_bytes; the
 * launcher raises the limit when it is over 48 KB, at every D but 32): fp32
 * q (BQ, D+4) pre-scaled, k (BK, D+4), v (BK, D), p (BQ, BK+4), positions
 * int32 (BQ). The +4 pads make the float4 reads of 8 different rows by a
 * quarter-warp hit 8 distinct 16-byte bank groups. Tiles: 64x64 (D=32,
 * D=64), 64x32 (D=128), 32x32 (D=256): 43 KB at D=32, 68-104 KB otherwise.
 *
 * Next step for speed: mma.sync m16n8k16 (bf16/f16) for Q K^T and P V with
 * ldmatrix from swizzled tiles, cp.async double-buffered K/V, one warp per
 * 16 query rows; then wgmma on sm_90a. f32 would keep this FMA path.
 */
#include <math.h>

#include "attention_common.cuh"
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

template <typename T, int D, int BQ, int BK>
static cudaError_t launch_prefill_d(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    using L = PrefillLayout<D, BQ, BK>;
    if (pl->prefill_smem_bytes != L::BYTES || pl->q_tile != BQ || pl->kv_tile != BK)
        return cudaErrorInvalidConfiguration;
    auto kern = attn_prefill_kernel<T, D, BQ, BK>;
    cudaError_t err;
    if (L::BYTES > 48 * 1024 &&
        (err = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)L::BYTES)))
        return err;
    const dim3 grid((unsigned)pl->prefill_grid[0], (unsigned)pl->prefill_grid[1], (unsigned)pl->prefill_grid[2]);
    kern<<<grid, ATTN_THREADS, L::BYTES, st>>>(static_cast<T *>(a.out), static_cast<const T *>(a.q),
                                                static_cast<const T *>(a.k_cache), static_cast<const T *>(a.v_cache),
                                                a.positions, a.query_start, a.block_tables, a.max_blocks,
                                                a.block_size, (int)pl->H, (int)pl->Hkv, (int)pl->group, a.scale);
    return cudaGetLastError();
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
    return launch_prefill<float>(pl, a, st);
}
cudaError_t launch_prefill_bf16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return launch_prefill<__nv_bfloat16>(pl, a, st);
}
cudaError_t launch_prefill_f16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return launch_prefill<__half>(pl, a, st);
}

} // namespace slattn

static int misaligned(const void *p) { return ((uintptr_t)p & 15u) != 0; }

extern "C" size_t slk_attention_workspace_bytes(const sl_attn_meta_t *meta, int64_t H, int64_t D) {
    if (!meta) return 0;
    return attn_plan_workspace_bytes(meta->n_seqs, meta->max_seq_len, meta->max_query_len, H, D);
}

/* Contract as kernels.h; in addition: out, q, k_cache, v_cache and the
 * workspace must be 16-byte aligned (cudaMalloc gives 256), and every
 * positions[t] < max_seq_len for the decode split to be balanced (a longer
 * context is still computed exactly, by the last partition). */
extern "C" int slk_attention(void *out, const void *q, const void *k_cache, const void *v_cache,
                             const sl_attn_meta_t *meta, int64_t H, int64_t Hkv, int64_t D, int64_t block_size,
                             float scale, sl_dtype_t dt, void *workspace, size_t workspace_bytes, void *stream) {
    if (!meta || meta->n_tokens < 0) return cudaErrorInvalidValue;
    if (meta->n_tokens == 0) return cudaSuccess;
    if (dt != DTYPE_F32 && dt != DTYPE_BF16 && dt != DTYPE_F16) return cudaErrorInvalidValue;
    if (block_size < 1 || block_size > INT32_MAX || meta->max_blocks < 1) return cudaErrorInvalidValue;
    if (H > INT32_MAX || Hkv > INT32_MAX) return cudaErrorInvalidValue;
    if (!out || !q || !k_cache || !v_cache || !meta->positions || !meta->query_start || !meta->block_tables)
        return cudaErrorInvalidValue;
    attn_plan_t plan;
    if (attn_plan_make(&plan, meta->n_tokens, meta->n_seqs, meta->max_seq_len, meta->max_query_len, H, Hkv, D,
                       dt == DTYPE_F32 ? 4 : 2))
        return cudaErrorInvalidValue;
    if (workspace_bytes < plan.workspace_bytes || (plan.workspace_bytes && !workspace))
        return cudaErrorInvalidValue;
    if (misaligned(out) || misaligned(q) || misaligned(k_cache) || misaligned(v_cache) ||
        (plan.workspace_bytes && misaligned(workspace)))
        return cudaErrorInvalidValue;

    slattn::AttnArgs a;
    a.out = out, a.q = q, a.k_cache = k_cache, a.v_cache = v_cache;
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
