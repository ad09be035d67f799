/* attention_decode.cuh - paged decode attention (one query token per
 * sequence), split along the context, GQA-aware; and the reduce kernel that
 * combines the partitions' partials.
 *
 * Decode kernel. Grid (min(n_parts, cap), Hkv * n_head_tiles, S), 128
 * threads (attention_plan.c). A block takes sequence s, KV head kvh and a
 * tile of GT query heads of kvh's group (GT = 1, 2, 4 or 8; the plan picks it
 * from H / Hkv), and partitions blockIdx.x, blockIdx.x + gridDim.x, ... of
 * the sequence's context of n_ctx = positions[t] + 1 tokens, as
 * attn_decode_split cuts it (attention_plan.h: whole 64-token tiles, about
 * target_parts partitions, from the sequence's own length and the plan; a
 * block past the last partition returns at once). The cut depends on the
 * sequence's own length, S and the SM count, not on the other sequences'
 * lengths (nor on max_seq_len, unless the context exceeds it): a sequence's
 * result is deterministic for a given batch size and device, and may differ
 * in its last bits between batch sizes. Each K and V row is read
 * from memory once for all GT heads. A partition is walked in tiles of 64
 * tokens with an online softmax whose running max / sum are per head and
 * block-wide. The tile's 64 cache slots are looked up once, into shared
 * memory, one tile ahead (two slot buffers); positions past the partition
 * are clamped to its last token, so every K / V load is unconditional and in
 * the sequence's own blocks, and the clamped rows get weight 0.
 *   QK:  groups of LPR = min(8, D / VEC) lanes (16 groups of 8; 32 groups of
 *        4 at D=32 in 16-bit, whose 64-byte rows are 4 vectors); group g
 *        takes tokens g, g + NGRP, ..., each lane a 16-byte vector of the K
 *        row per token (coalesced rows of up to 128 bytes) and GT dot
 *        products against q in shared memory, reduced by log2(LPR) shuffles.
 *   max: a warp per head: tile max, rescale factor, p = exp(s - m) (0 for
 *        clamped rows), sum.
 *   PV:  thread (tg, c) owns 16-byte column chunk c of the V rows of tokens
 *        tg, tg + NG, ...; accumulators acc[GT][VEC] fp32, rescaled per tile.
 * Rows of up to 256 bytes (16-bit D <= 128, f32 D <= 64; PF): a thread's K
 * and V of a whole tile (up to 128 bytes each) are held in registers and
 * loaded one phase early: the next tile's K as soon as this tile's scores
 * are in shared memory (in flight during max and PV), its V right after
 * this tile's PV (in flight during the next QK). Wider rows load each
 * phase's K / V at the start of the phase, all of a round's vectors at once.
 * After a partition the NG token groups' accumulators are summed in shared
 * memory in a fixed order (deterministic). With one partition the block
 * writes out = acc / l in dt; otherwise it writes fp32 partials (m, l,
 * unnormalized o) of partition p to the workspace (stride n_parts, the
 * plan's bound) and the reduce kernel, grid (H, S), combines them: out =
 * sum_p e^(m_p - M) o_p / sum_p e^(m_p - M) l_p.
 *
 * Shared memory (dynamic, bytes = attn_plan_decode_smem_bytes): m, l, alpha
 * per head (128 B), two buffers of 64 int64 slots (1 KB), then a union of q
 * (GT, D) fp32 pre-scaled [stored plane-split: element c*VEC + j*4 + e of a
 * head at j*(D/NQ4) + c*4 + e, so the LPR lanes of a group reading chunks
 * c..c+LPR-1 hit LPR distinct 16-byte bank groups] + p (64, GT) during a
 * partition, and the reduction buffer (NG, GT, D) after it (q is loaded
 * again for the next partition). 17.1 KB (f32) to 33.1 KB (16-bit) at
 * GT = 8, for every D (NG * D = 128 * VEC).
 *
 * Next steps for speed: tensor cores for QK and PV when GT >= 4 (the FMA
 * count per K/V byte equals the H200's FP32 rate per HBM byte at GT = 8),
 * and cp.async tiles in shared memory for the wide rows.
 *
 * The kernels and their launchers are templates on T (q and out) and KV
 * (the cache's element: T, or fp8 with 16-bit T); attention_decode.cu
 * instantiates KV = T, attention_decode_fp8.cu the fp8 caches, so that the
 * two halves compile side by side.
 */
#ifndef SERVELAB_ATTENTION_DECODE_CUH
#define SERVELAB_ATTENTION_DECODE_CUH

#include <math.h>

#include "attention_common.cuh"

namespace slattn {

template <typename T, int D, int GT> struct DecodeLayout {
    static constexpr int NT = ATTN_THREADS, TK = ATTN_DECODE_TILE, VEC = Vec<T>::N;
    static constexpr int NCH = D / VEC;    /* 16-byte chunks per row */
    static constexpr int LPR = NCH < 8 ? NCH : 8; /* QK lanes per K row */
    static constexpr int CPL = NCH / LPR;  /* chunks per lane in the QK phase */
    static constexpr int NGRP = NT / LPR;  /* QK lane groups */
    static constexpr int KR = TK / NGRP;   /* QK rounds (tokens per group) per tile */
    static constexpr int NG = NT / NCH;    /* token groups of the PV phase */
    static constexpr int VR = TK / NG;     /* PV rounds (V rows per thread) per tile */
    /* K and V of a whole tile in registers, a phase ahead: rows of <= 256 bytes
     * (KR * CPL = VR <= 8 vectors each) */
    static constexpr bool PF = D * (int)sizeof(T) <= 256;
    static constexpr int STATS = 0;        /* floats: m[8], l[8], alpha[8] */
    static constexpr int SLOT_BYTE = 128;  /* int64 slots[2][TK] */
    static constexpr int UNION = (SLOT_BYTE + 2 * TK * 8) / 4; /* floats */
    static constexpr int Q = UNION, P = UNION + GT * D, RED = UNION;
    static constexpr int LOOP_FLOATS = GT * D + TK * GT, RED_FLOATS = NG * GT * D;
    static constexpr size_t BYTES =
        (size_t)UNION * 4 + (size_t)(LOOP_FLOATS > RED_FLOATS ? LOOP_FLOATS : RED_FLOATS) * 4;
    /* Register bounds: GT = 8 holds acc[8][VEC] plus a tile of K and V (up to
     * 64 registers) and gets up to 255 (168, 3 blocks per SM, spilled at D =
     * 64 in 16-bit); GT <= 4 gets up to 168. */
    static constexpr int MIN_BLOCKS = GT >= 8 ? 1 : 3;
    static_assert(GT <= ATTN_DECODE_MAX_HEADS, "stats hold 8 heads");
    static_assert(NCH % LPR == 0 && 32 % LPR == 0 && TK % NGRP == 0,
                  "LPR lanes per K row, groups within a warp, whole rounds of tokens");
    static_assert(NT % NCH == 0 && TK % NG == 0, "whole V rows per NCH threads, whole rounds of tokens");
    static_assert(TK == 64 && NT >= TK, "the max phase reads 2 scores per lane; a thread per slot");
    static_assert((UNION * 4) % 16 == 0 && (P * 4) % 16 == 0, "float4 alignment");
};

template <typename T, typename KV, int D, int GT>
__global__ void __launch_bounds__(ATTN_THREADS, DecodeLayout<T, D, GT>::MIN_BLOCKS)
    attn_decode_kernel(T *__restrict__ out,                 /* (T, H, D) */
                       const T *__restrict__ q,             /* (T, H, D) */
                       const KV *__restrict__ kc,           /* (slots, Hkv, D) */
                       const KV *__restrict__ vc,           /* (slots, Hkv, D) */
                       const int32_t *__restrict__ positions,    /* (T) */
                       const int32_t *__restrict__ query_start,  /* (S+1) */
                       const int32_t *__restrict__ block_tables, /* (S, max_blocks) */
                       int max_blocks, int block_size, int H, int Hkv, int group, int n_head_tiles,
                       float scale, int target_parts, int n_parts,
                       float *__restrict__ ws_o, /* (S, H, n_parts, D) */
                       float *__restrict__ ws_m, /* (S, H, n_parts) */
                       float *__restrict__ ws_l) /* (S, H, n_parts) */
{
    using L = DecodeLayout<T, D, GT>;
    constexpr int NT = L::NT, TK = L::TK, VEC = L::VEC, NCH = L::NCH, NG = L::NG, LPR = L::LPR;
    constexpr int CPL = L::CPL, NGRP = L::NGRP, KR = L::KR, VR = L::VR;
    constexpr bool PF = L::PF;
    constexpr int NQ4 = VEC / 4;        /* float4s per chunk */
    constexpr int QPLANE = D / NQ4;     /* see the q layout in the header */

    extern __shared__ float4 smem4[];
    float *smem = reinterpret_cast<float *>(smem4);
    float *s_m = smem + L::STATS, *s_l = s_m + 8, *s_alpha = s_m + 16;
    int64_t *s_slot = reinterpret_cast<int64_t *>(reinterpret_cast<char *>(smem) + L::SLOT_BYTE); /* [2][TK] */
    float *s_q = smem + L::Q, *s_p = smem + L::P, *s_red = smem + L::RED;

    const int s = blockIdx.z;
    const int kvh = blockIdx.y / n_head_tiles, g0 = (blockIdx.y % n_head_tiles) * GT;
    const int n_heads = min(GT, group - g0);
    const int h0 = kvh * group + g0;
    const int t = query_start[s];
    if (query_start[s + 1] <= t) return; /* no query token for s this step */
    const int n_ctx = positions[t] + 1;
    int part_len, n_valid;
    attn_decode_split(n_ctx, target_parts, n_parts, &part_len, &n_valid);
    if ((int)blockIdx.x >= n_valid) return; /* block-uniform, before any barrier */
    const int tid = threadIdx.x;

    const int32_t *table = block_tables + (int64_t)s * max_blocks;
    const int64_t kv_stride = (int64_t)Hkv * D; /* elements between consecutive slots */
    const KV *kbase = kc + (int64_t)kvh * D, *vbase = vc + (int64_t)kvh * D;
    const int li = tid % LPR, grp = tid / LPR;  /* QK: lane in group, group */
    const int warp = tid >> 5, lane = tid & 31; /* max phase */
    const int vc_chunk = tid % NCH, vtg = tid / NCH; /* PV: column chunk, token group */

    /* A thread's share of a tile's K rows (QK) and V rows (PV), VEC raw elements each. */
    using Raw = kv_raw_t<T, KV>;
    Raw kr[PF ? KR : 1][CPL];
    Raw vr[PF ? VR : 1];
    auto load_k = [&](const int64_t *slots, int r, Raw *dst) { /* round r of QK */
        const KV *krow = kbase + slots[grp + r * NGRP] * kv_stride;
#pragma unroll
        for (int i = 0; i < CPL; i++) dst[i] = ldg_kv<T, KV>(krow + (li + LPR * i) * VEC);
    };
    auto load_v = [&](const int64_t *slots, int r) { /* round r of PV */
        return ldg_kv<T, KV>(vbase + slots[vtg + r * NG] * kv_stride + vc_chunk * VEC);
    };
    auto load_tile = [&](const int64_t *slots, bool k, bool v) { /* PF: a whole tile */
        if constexpr (PF) {
            if (k) {
#pragma unroll
                for (int r = 0; r < KR; r++) load_k(slots, r, kr[r]);
            }
            if (v) {
#pragma unroll
                for (int r = 0; r < VR; r++) vr[r] = load_v(slots, r);
            }
        }
    };

    for (int part = blockIdx.x; part < n_valid; part += gridDim.x) {
        const int ctx_begin = part * part_len, ctx_end = min(ctx_begin + part_len, n_ctx);

        /* q of the GT heads, fp32, times scale; heads past the group are zero.
         * (Again per partition: the reduction buffer overwrote it.) */
        for (int e = tid; e < GT * NCH; e += NT) {
            const int g = e / NCH, c = e % NCH;
            float f[VEC];
            if (g < n_heads) {
                load16(q + ((int64_t)t * H + h0 + g) * D + c * VEC, f);
#pragma unroll
                for (int v = 0; v < VEC; v++) f[v] *= scale;
            } else {
#pragma unroll
                for (int v = 0; v < VEC; v++) f[v] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < NQ4; j++)
                *reinterpret_cast<float4 *>(s_q + g * D + j * QPLANE + c * 4) =
                    make_float4(f[4 * j], f[4 * j + 1], f[4 * j + 2], f[4 * j + 3]);
        }
        if (tid < GT) s_m[tid] = -INFINITY, s_l[tid] = 0.0f;
        /* the first tile's slots; a position past the partition reads its last token */
        if (tid < TK) s_slot[tid] = kv_slot(table, min(ctx_begin + tid, ctx_end - 1), block_size);
        __syncthreads();

        float acc[GT][VEC];
#pragma unroll
        for (int g = 0; g < GT; g++)
#pragma unroll
            for (int v = 0; v < VEC; v++) acc[g][v] = 0.0f;
        if constexpr (PF) load_tile(s_slot, true, true);

        for (int tile = ctx_begin, buf = 0; tile < ctx_end; tile += TK, buf ^= 1) {
            const int n_tile = min(TK, ctx_end - tile);
            const bool has_next = tile + TK < ctx_end; /* block-uniform */
            int64_t *slot_cur = s_slot + buf * TK, *slot_next = s_slot + (buf ^ 1) * TK;
            /* the next tile's slots: the table is read now, shared memory written after QK */
            int64_t next_slot = 0;
            if (has_next && tid < TK) next_slot = kv_slot(table, min(tile + TK + tid, ctx_end - 1), block_size);

            /* QK: scores s_p[j][g] = (q_g * scale) . k_j */
#pragma unroll
            for (int r = 0; r < KR; r++) {
                const int j = grp + r * NGRP;
                if constexpr (!PF) load_k(slot_cur, r, kr[0]);
                float dot[GT];
#pragma unroll
                for (int g = 0; g < GT; g++) dot[g] = 0.0f;
#pragma unroll
                for (int i = 0; i < CPL; i++) {
                    const int c = li + LPR * i;
                    float kf[VEC];
                    unpack_kv<T, KV>(kr[PF ? r : 0][i], kf);
#pragma unroll
                    for (int g = 0; g < GT; g++)
#pragma unroll
                        for (int jq = 0; jq < NQ4; jq++) {
                            const float4 qq =
                                *reinterpret_cast<const float4 *>(s_q + g * D + jq * QPLANE + c * 4);
                            dot[g] = fmaf(qq.x, kf[4 * jq + 0], dot[g]);
                            dot[g] = fmaf(qq.y, kf[4 * jq + 1], dot[g]);
                            dot[g] = fmaf(qq.z, kf[4 * jq + 2], dot[g]);
                            dot[g] = fmaf(qq.w, kf[4 * jq + 3], dot[g]);
                        }
                }
                /* offsets below LPR stay inside a group */
#pragma unroll
                for (int g = 0; g < GT; g++)
#pragma unroll
                    for (int o = 1; o < LPR; o <<= 1) dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], o);
                if (li == 0) {
#pragma unroll
                    for (int g = 0; g < GT; g++) s_p[j * GT + g] = dot[g]; /* j >= n_tile: masked below */
                }
            }
            if (has_next && tid < TK) slot_next[tid] = next_slot;
            __syncthreads();
            /* kr is free: the next tile's K, in flight during max and PV */
            if constexpr (PF) {
                if (has_next) load_tile(slot_next, true, false);
            }

            /* max: per head, fold the tile into the running max and sum */
            for (int g = warp; g < GT; g += NT / 32) {
                const float m_old = s_m[g];
                const float x0 = lane < n_tile ? s_p[lane * GT + g] : -INFINITY;
                const float x1 = lane + 32 < n_tile ? s_p[(lane + 32) * GT + g] : -INFINITY;
                const float m_new = fmaxf(m_old, warp_max(fmaxf(x0, x1))); /* finite: n_tile >= 1 */
                const float e0 = lane < n_tile ? expf(x0 - m_new) : 0.0f;
                const float e1 = lane + 32 < n_tile ? expf(x1 - m_new) : 0.0f;
                s_p[lane * GT + g] = e0; /* 0: the clamped rows add nothing in PV */
                s_p[(lane + 32) * GT + g] = e1;
                const float sum = warp_sum(e0 + e1);
                /* Every lane read s_m[g] above; the shuffles order no memory, so
                 * the warp syncs before lane 0 overwrites it. */
                __syncwarp();
                if (lane == 0) {
                    const float alpha = expf(m_old - m_new); /* 0 on the first tile */
                    s_alpha[g] = alpha;
                    s_l[g] = s_l[g] * alpha + sum;
                    s_m[g] = m_new;
                }
            }
            __syncthreads();

            /* PV: acc = acc * alpha + sum_j p_j v_j over this thread's tokens */
#pragma unroll
            for (int g = 0; g < GT; g++) {
                const float alpha = s_alpha[g];
#pragma unroll
                for (int v = 0; v < VEC; v++) acc[g][v] *= alpha;
            }
#pragma unroll
            for (int r = 0; r < VR; r++) {
                const int j = vtg + r * NG;
                if constexpr (!PF) vr[0] = load_v(slot_cur, r);
                float vf[VEC];
                unpack_kv<T, KV>(vr[PF ? r : 0], vf);
                float pj[GT];
                if constexpr (GT % 4 == 0) {
#pragma unroll
                    for (int g = 0; g < GT; g += 4) {
                        const float4 p4 = *reinterpret_cast<const float4 *>(s_p + j * GT + g);
                        pj[g] = p4.x, pj[g + 1] = p4.y, pj[g + 2] = p4.z, pj[g + 3] = p4.w;
                    }
                } else {
#pragma unroll
                    for (int g = 0; g < GT; g++) pj[g] = s_p[j * GT + g];
                }
#pragma unroll
                for (int g = 0; g < GT; g++)
#pragma unroll
                    for (int v = 0; v < VEC; v++) acc[g][v] = fmaf(pj[g], vf[v], acc[g][v]);
            }
            /* vr is free: the next tile's V, in flight during the next QK */
            if constexpr (PF) {
                if (has_next) load_tile(slot_next, false, true);
            }
            __syncthreads(); /* s_p, s_alpha and this tile's slot buffer are rewritten next tile */
        }

        /* Sum the NG token groups' accumulators (s_red aliases q and p, done with). */
#pragma unroll
        for (int g = 0; g < GT; g++)
#pragma unroll
            for (int jq = 0; jq < NQ4; jq++)
                *reinterpret_cast<float4 *>(s_red + (vtg * GT + g) * D + vc_chunk * VEC + jq * 4) =
                    make_float4(acc[g][4 * jq], acc[g][4 * jq + 1], acc[g][4 * jq + 2], acc[g][4 * jq + 3]);
        __syncthreads();

        for (int e = tid; e < n_heads * NCH; e += NT) {
            const int g = e / NCH, c = e % NCH, h = h0 + g;
            float o[VEC];
#pragma unroll
            for (int v = 0; v < VEC; v++) o[v] = 0.0f;
            for (int tg = 0; tg < NG; tg++) {
#pragma unroll
                for (int jq = 0; jq < NQ4; jq++) {
                    const float4 x =
                        *reinterpret_cast<const float4 *>(s_red + (tg * GT + g) * D + c * VEC + jq * 4);
                    o[4 * jq] += x.x, o[4 * jq + 1] += x.y, o[4 * jq + 2] += x.z, o[4 * jq + 3] += x.w;
                }
            }
            if (n_valid == 1) {
                const float l = s_l[g];
#pragma unroll
                for (int v = 0; v < VEC; v++) o[v] /= l;
                store16(out + ((int64_t)t * H + h) * D + c * VEC, o);
            } else {
                float *dst = ws_o + (((int64_t)s * H + h) * n_parts + part) * D + c * VEC;
#pragma unroll
                for (int jq = 0; jq < NQ4; jq++)
                    *reinterpret_cast<float4 *>(dst + 4 * jq) =
                        make_float4(o[4 * jq], o[4 * jq + 1], o[4 * jq + 2], o[4 * jq + 3]);
            }
        }
        if (n_valid > 1 && tid < n_heads) {
            const int64_t i = ((int64_t)s * H + h0 + tid) * n_parts + part;
            ws_m[i] = s_m[tid];
            ws_l[i] = s_l[tid];
        }
        __syncthreads(); /* the next partition rewrites q (s_red), the stats and the slots */
    }
}

/* Block-wide reductions for ATTN_THREADS threads; every thread gets the result. */
__device__ __forceinline__ float block_reduce(float x, bool is_max, float *scratch) {
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    x = is_max ? warp_max(x) : warp_sum(x);
    if (lane == 0) scratch[warp] = x;
    __syncthreads();
    if (threadIdx.x == 0) {
        float r = scratch[0];
        for (int w = 1; w < ATTN_THREADS / 32; w++) r = is_max ? fmaxf(r, scratch[w]) : r + scratch[w];
        scratch[ATTN_THREADS / 32] = r;
    }
    __syncthreads();
    return scratch[ATTN_THREADS / 32];
}

/* Grid (H, S), 128 threads; dynamic shared memory: n_parts fp32 weights. */
template <typename T>
__global__ void __launch_bounds__(ATTN_THREADS)
    attn_decode_reduce_kernel(T *__restrict__ out, const int32_t *__restrict__ positions,
                              const int32_t *__restrict__ query_start, int H, int D, int target_parts,
                              int n_parts, const float *__restrict__ ws_o, const float *__restrict__ ws_m,
                              const float *__restrict__ ws_l) {
    extern __shared__ float4 smem4[];
    float *s_w = reinterpret_cast<float *>(smem4);
    __shared__ float scratch[2][ATTN_THREADS / 32 + 1];
    const int h = blockIdx.x, s = blockIdx.y, tid = threadIdx.x;
    const int t = query_start[s];
    if (query_start[s + 1] <= t) return;
    const int n_ctx = positions[t] + 1;
    int part_len, n_valid;
    attn_decode_split(n_ctx, target_parts, n_parts, &part_len, &n_valid); /* as the decode kernel */
    if (n_valid <= 1) return; /* the decode kernel wrote this row itself */
    const int64_t base = ((int64_t)s * H + h) * n_parts;

    float m = -INFINITY;
    for (int p = tid; p < n_valid; p += ATTN_THREADS) m = fmaxf(m, ws_m[base + p]);
    const float M = block_reduce(m, true, scratch[0]);
    float wl = 0.0f;
    for (int p = tid; p < n_valid; p += ATTN_THREADS) {
        const float w = expf(ws_m[base + p] - M);
        s_w[p] = w;
        wl += w * ws_l[base + p];
    }
    const float Lsum = block_reduce(wl, false, scratch[1]); /* its barriers publish s_w */
    for (int d = tid; d < D; d += ATTN_THREADS) {
        float o = 0.0f;
        for (int p = 0; p < n_valid; p++) o = fmaf(s_w[p], ws_o[(base + p) * D + d], o);
        out[((int64_t)t * H + h) * D + d] = from_f32<T>(o / Lsum);
    }
}

template <typename T, typename KV, int D, int GT>
static cudaError_t launch_decode_dg(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    using L = DecodeLayout<T, D, GT>;
    if (pl->decode_smem_bytes != L::BYTES || pl->head_tile != GT) return cudaErrorInvalidConfiguration;
    auto kern = attn_decode_kernel<T, KV, D, GT>;
    cudaError_t err;
    if ((err = allow_dynamic_smem(reinterpret_cast<const void *>(kern), L::BYTES))) return err;
    float *ws_o = nullptr, *ws_m = nullptr, *ws_l = nullptr;
    if (pl->reduce) {
        ws_o = a.ws;
        ws_m = reinterpret_cast<float *>(reinterpret_cast<char *>(a.ws) + pl->ws_m_offset);
        ws_l = reinterpret_cast<float *>(reinterpret_cast<char *>(a.ws) + pl->ws_l_offset);
    }
    const dim3 grid((unsigned)pl->decode_grid[0], (unsigned)pl->decode_grid[1], (unsigned)pl->decode_grid[2]);
    kern<<<grid, ATTN_THREADS, L::BYTES, st>>>(
        static_cast<T *>(a.out), static_cast<const T *>(a.q), static_cast<const KV *>(a.k_cache),
        static_cast<const KV *>(a.v_cache), a.positions, a.query_start, a.block_tables, a.max_blocks,
        a.block_size, (int)pl->H, (int)pl->Hkv, (int)pl->group, (int)pl->n_head_tiles, a.scale,
        (int)pl->target_parts, (int)pl->n_parts, ws_o, ws_m, ws_l);
    if ((err = cudaGetLastError())) return err;
    if (!pl->reduce) return cudaSuccess;

    auto red = attn_decode_reduce_kernel<T>;
    if ((err = allow_dynamic_smem(reinterpret_cast<const void *>(red), pl->reduce_smem_bytes))) return err;
    const dim3 rgrid((unsigned)pl->reduce_grid[0], (unsigned)pl->reduce_grid[1], 1);
    red<<<rgrid, ATTN_THREADS, pl->reduce_smem_bytes, st>>>(static_cast<T *>(a.out), a.positions, a.query_start,
                                                           (int)pl->H, (int)pl->D, (int)pl->target_parts,
                                                           (int)pl->n_parts, ws_o, ws_m, ws_l);
    return cudaGetLastError();
}

template <typename T, typename KV, int D>
static cudaError_t launch_decode_d(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (pl->head_tile) {
    case 1: return launch_decode_dg<T, KV, D, 1>(pl, a, st);
    case 2: return launch_decode_dg<T, KV, D, 2>(pl, a, st);
    case 4: return launch_decode_dg<T, KV, D, 4>(pl, a, st);
    case 8: return launch_decode_dg<T, KV, D, 8>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T, typename KV>
static cudaError_t launch_decode_kv(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (pl->D) {
    case 32: return launch_decode_d<T, KV, 32>(pl, a, st);
    case 64: return launch_decode_d<T, KV, 64>(pl, a, st);
    case 128: return launch_decode_d<T, KV, 128>(pl, a, st);
    case 256: return launch_decode_d<T, KV, 256>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

} // namespace slattn

#endif
