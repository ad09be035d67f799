/* attention_prefill_wmma.cu - the bf16 / f16 prefill on nvcuda::wmma
 * m16n16k16: the fallback of the mma.sync kernel (attention_prefill.cu),
 * selected by SERVELAB_ATTN_PREFILL=wmma. Same contract, grid and tiles.
 *
 * 4 warps, one per 16 query rows (BQ = 64); K and V tiles of BK rows (64, 32
 * at D=256) are copied as they are, 16 bytes at a time, into 16-bit shared
 * memory (rows padded by 8 elements). A warp keeps its Q fragments (D <= 128;
 * reloaded per tile at D=256) and its O accumulators in registers. Per tile:
 * S = Q K^T into fp32, stored to the warp's fp32 scratch; the warp's softmax
 * there (lane = row r, half of the columns), scale applied to S in fp32, mask,
 * online max / sum; P = exp(S - m) rounded to dt, l sums the rounded P; the
 * per-row alpha reaches the accumulators as a 16x16 fragment loaded from a
 * row-factor scratch and multiplied element by element (no use is made of
 * which lane holds which element); O += P V from P in shared memory. The
 * portable API, so nothing depends on the fragments' register layout; but
 * for bf16, ptxas turns its fragment loads into generic loads (LD.E, no
 * LDSM), the reason for the mma.sync kernel.
 *
 * Shared memory (attn_plan_prefill_wmma_smem_bytes): dt q (64, D+8), k and v
 * (BK, D+8), fp32 s (64, BK+8), dt p (64, BK+8), fp32 row factors (64, 16),
 * positions: 46, 58, 82 and 85 KB at D = 32, 64, 128, 256.
 */
#include <math.h>
#include <mma.h>

#include "attention_common.cuh"

namespace slattn {

/* Byte offsets of the wmma kernel's shared memory (the formula of
 * attn_plan_prefill_wmma_smem_bytes). Strides in elements: QP for q, k and v
 * rows, SP for s and p rows. Every wmma tile pointer must be 32-byte aligned:
 * region starts are, and so is each warp's / fragment's 16-row, 16-column
 * corner within them (16 * a stride that is a multiple of 8 elements). */
template <int D, int BK> struct WmmaLayout {
    static constexpr int BQ = ATTN_PREFILL_TC_BQ, QP = D + 8, SP = BK + 8;
    static constexpr size_t Q = 0, K = Q + (size_t)BQ * QP * 2, V = K + (size_t)BK * QP * 2,
                            S = V + (size_t)BK * QP * 2, P = S + (size_t)BQ * SP * 4,
                            R = P + (size_t)BQ * SP * 2, POS = R + (size_t)BQ * 16 * 4, BYTES = POS + (size_t)BQ * 4;
    static_assert(BQ == 16 * (ATTN_THREADS / 32), "one warp per 16 query rows");
    static_assert(D % 16 == 0 && BK % 16 == 0, "whole 16x16 fragments");
    static_assert(K % 32 == 0 && V % 32 == 0 && S % 32 == 0 && P % 32 == 0 && R % 32 == 0, "wmma tile alignment");
};

/* 2 blocks per SM: up to 255 registers, which D >= 128 needs (at D=128: 64
 * for Q, 64 for O, 32 for S; ptxas spills a few bytes at D=128 and f16
 * D=256); shared memory allows 2 at every D. */
template <typename T, typename KV, int D, int BK>
__global__ void __launch_bounds__(ATTN_THREADS, 2)
    attn_prefill_wmma_kernel(T *__restrict__ out,                      /* (T, H, D) */
                           const T *__restrict__ q,                  /* (T, H, D) */
                           const KV *__restrict__ kc,                /* (slots, Hkv, D) */
                           const KV *__restrict__ vc,                /* (slots, Hkv, D) */
                           const int32_t *__restrict__ positions,    /* (T) */
                           const int32_t *__restrict__ query_start,  /* (S+1) */
                           const int32_t *__restrict__ block_tables, /* (S, max_blocks) */
                           int max_blocks, int block_size, int H, int Hkv, int group, float scale) {
    using namespace nvcuda;
    using L = WmmaLayout<D, BK>;
    using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
    using FragKt = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>; /* K^T from K rows */
    using FragV = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
    using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;
    constexpr int NT = ATTN_THREADS, BQ = L::BQ, QP = L::QP, SP = L::SP, VEC = Vec<T>::N, NCH = D / VEC;
    constexpr int ND = D / 16, NK = BK / 16, NC = BK / 8;
    constexpr bool QREG = D <= 128; /* Q fragments held in registers */
    static_assert(sizeof(T) == 2, "16-bit dtypes");
    static_assert((BQ * NCH) % NT == 0 && (BK * NCH) % NT == 0, "whole rows of chunks per pass");

    extern __shared__ __align__(128) unsigned char smem_wmma[];
    T *s_q = reinterpret_cast<T *>(smem_wmma + L::Q), *s_k = reinterpret_cast<T *>(smem_wmma + L::K);
    T *s_v = reinterpret_cast<T *>(smem_wmma + L::V), *s_p = reinterpret_cast<T *>(smem_wmma + L::P);
    float *s_s = reinterpret_cast<float *>(smem_wmma + L::S), *s_r = reinterpret_cast<float *>(smem_wmma + L::R);
    int *s_pos = reinterpret_cast<int *>(smem_wmma + L::POS);

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
        *reinterpret_cast<uint4 *>(s_q + r * QP + c * VEC) = u;
    }
    __syncthreads();

    int kv_end = 0; /* keys 0 .. kv_end-1 are seen by some row of this block */
    for (int r = 0; r < qn; r++) kv_end = max(kv_end, s_pos[r] + 1);
    int w_last = -1; /* the last key a row of this warp sees; -1: all padding */
    for (int r = 16 * warp; r < min(16 * warp + 16, qn); r++) w_last = max(w_last, s_pos[r]);
    /* softmax and output: this lane's row of the warp's 16, and half of its columns */
    const int r = lane >> 1, hf = lane & 1, row_pos = s_pos[16 * warp + r];
    float m = -INFINITY, l = 0.0f;

    const T *q_w = s_q + 16 * warp * QP;
    float *s_w = s_s + 16 * warp * SP, *r_w = s_r + 256 * warp;
    T *p_w = s_p + 16 * warp * SP;
    FragA qf[QREG ? ND : 1];
    if constexpr (QREG) {
#pragma unroll
        for (int d = 0; d < ND; d++) wmma::load_matrix_sync(qf[d], q_w + 16 * d, QP);
    }
    FragC of[ND];
#pragma unroll
    for (int k = 0; k < ND; k++) wmma::fill_fragment(of[k], 0.0f);

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
            *reinterpret_cast<uint4 *>(s_k + j * QP + c * VEC) = ku;
            *reinterpret_cast<uint4 *>(s_v + j * QP + c * VEC) = vu;
        }
        __syncthreads();

        if (k0 <= w_last) { /* warp-uniform: else every row of the warp masks the whole tile */
            /* S = Q K^T (unscaled) to the warp's fp32 scratch */
            FragC sf[NK];
#pragma unroll
            for (int n = 0; n < NK; n++) wmma::fill_fragment(sf[n], 0.0f);
#pragma unroll
            for (int d = 0; d < ND; d++) {
                if constexpr (!QREG) wmma::load_matrix_sync(qf[0], q_w + 16 * d, QP);
                const FragA &qa = qf[QREG ? d : 0];
#pragma unroll
                for (int n = 0; n < NK; n++) {
                    FragKt kt;
                    wmma::load_matrix_sync(kt, s_k + 16 * n * QP + 16 * d, QP);
                    wmma::mma_sync(sf[n], qa, kt, sf[n]);
                }
            }
#pragma unroll
            for (int n = 0; n < NK; n++) wmma::store_matrix_sync(s_w + 16 * n, sf[n], SP, wmma::mem_row_major);
            __syncwarp();

            /* row r, columns 8 j + 4 hf .. +3: scale, mask, online softmax;
             * P rounded to dt, and l sums what was rounded */
            float x[NC][4], mx = -INFINITY;
#pragma unroll
            for (int j = 0; j < NC; j++) {
                const float4 f = *reinterpret_cast<const float4 *>(s_w + r * SP + 8 * j + 4 * hf);
                x[j][0] = f.x * scale, x[j][1] = f.y * scale, x[j][2] = f.z * scale, x[j][3] = f.w * scale;
#pragma unroll
                for (int v = 0; v < 4; v++) {
                    const int c = 8 * j + 4 * hf + v;
                    if (!(c < kn && k0 + c <= row_pos)) x[j][v] = -INFINITY;
                    mx = fmaxf(mx, x[j][v]);
                }
            }
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
            const float m_new = fmaxf(m, mx);
            /* a row that has seen no key yet keeps m = -inf; subtracting 0
             * instead keeps exp(-inf - m) = 0 and avoids inf - inf */
            const float m_use = m_new == -INFINITY ? 0.0f : m_new;
            const float alpha = expf(m - m_use);
            float rs = 0.0f;
#pragma unroll
            for (int j = 0; j < NC; j++) {
                uint2 w;
                w.x = f2_to_u32(expf(x[j][0] - m_use), expf(x[j][1] - m_use), tag);
                w.y = f2_to_u32(expf(x[j][2] - m_use), expf(x[j][3] - m_use), tag);
                const float2 a = u32_to_f2(w.x, tag), b = u32_to_f2(w.y, tag);
                rs += (a.x + a.y) + (b.x + b.y);
                *reinterpret_cast<uint2 *>(p_w + r * SP + 8 * j + 4 * hf) = w;
            }
            rs += __shfl_xor_sync(0xffffffffu, rs, 1);
            l = l * alpha + rs;
            m = m_new;
            /* alpha of row r to the row factors, columns 8 hf .. 8 hf + 7 */
            const float4 a4 = make_float4(alpha, alpha, alpha, alpha);
            *reinterpret_cast<float4 *>(r_w + 16 * r + 8 * hf) = a4;
            *reinterpret_cast<float4 *>(r_w + 16 * r + 8 * hf + 4) = a4;
            __syncwarp();

            /* O = O * alpha (per row) + P V */
            FragC af;
            wmma::load_matrix_sync(af, r_w, 16, wmma::mem_row_major);
#pragma unroll
            for (int k = 0; k < ND; k++)
#pragma unroll
                for (int i = 0; i < af.num_elements; i++) of[k].x[i] *= af.x[i];
#pragma unroll
            for (int n = 0; n < NK; n++) {
                FragA pa;
                wmma::load_matrix_sync(pa, p_w + 16 * n, SP);
#pragma unroll
                for (int k = 0; k < ND; k++) {
                    FragV vb;
                    wmma::load_matrix_sync(vb, s_v + 16 * n * QP + 16 * k, QP);
                    wmma::mma_sync(of[k], pa, vb, of[k]);
                }
            }
        }
        __syncthreads(); /* K and V are rewritten by the next tile */
    }

    /* out = O / l, one 16-column fragment at a time through the S scratch;
     * a lane writes 8 columns (16 bytes) of its row */
    const int row = 16 * warp + r;
    T *dst = out + ((int64_t)(q0 + row) * H + h) * D + 8 * hf;
#pragma unroll
    for (int k = 0; k < ND; k++) {
        wmma::store_matrix_sync(s_w, of[k], SP, wmma::mem_row_major);
        __syncwarp();
        if (row < qn) {
            const float4 a = *reinterpret_cast<const float4 *>(s_w + r * SP + 8 * hf);
            const float4 b = *reinterpret_cast<const float4 *>(s_w + r * SP + 8 * hf + 4);
            const float f[8] = {a.x / l, a.y / l, a.z / l, a.w / l, b.x / l, b.y / l, b.z / l, b.w / l};
            store16(dst + 16 * k, f);
        }
        __syncwarp(); /* the next fragment overwrites the scratch */
    }
}

template <typename T, typename KV, int D, int BK>
static cudaError_t launch_wmma_d(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    using L = WmmaLayout<D, BK>;
    if (!pl->prefill_tc || !pl->prefill_wmma || pl->prefill_smem_bytes != L::BYTES || pl->q_tile != L::BQ ||
        pl->kv_tile != BK)
        return cudaErrorInvalidConfiguration;
    return launch_prefill_grid<T, KV>(attn_prefill_wmma_kernel<T, KV, D, BK>, L::BYTES, pl, a, st);
}

template <typename T, typename KV>
static cudaError_t launch_wmma_kv(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (pl->D) {
    case 32: return launch_wmma_d<T, KV, 32, ATTN_PREFILL_TC_BK_D32>(pl, a, st);
    case 64: return launch_wmma_d<T, KV, 64, ATTN_PREFILL_TC_BK_D64>(pl, a, st);
    case 128: return launch_wmma_d<T, KV, 128, ATTN_PREFILL_TC_BK_D128>(pl, a, st);
    case 256: return launch_wmma_d<T, KV, 256, ATTN_PREFILL_TC_BK_D256>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

template <typename T> static cudaError_t launch_wmma(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (a.kv) {
    case KV_AS_T: return launch_wmma_kv<T, T>(pl, a, st);
    case KV_E4M3: return launch_wmma_kv<T, slfp8::e4m3>(pl, a, st);
    case KV_E5M2: return launch_wmma_kv<T, slfp8::e5m2>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t launch_prefill_wmma_bf16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return launch_wmma<__nv_bfloat16>(pl, a, st);
}
cudaError_t launch_prefill_wmma_f16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return launch_wmma<__half>(pl, a, st);
}

template <int D, int BK> static size_t wmma_bytes(int64_t *q_tile, int64_t *kv_tile) {
    *q_tile = WmmaLayout<D, BK>::BQ, *kv_tile = BK;
    return WmmaLayout<D, BK>::BYTES;
}

size_t prefill_wmma_smem_bytes(int64_t D, int64_t *q_tile, int64_t *kv_tile) {
    switch (D) {
    case 32: return wmma_bytes<32, ATTN_PREFILL_TC_BK_D32>(q_tile, kv_tile);
    case 64: return wmma_bytes<64, ATTN_PREFILL_TC_BK_D64>(q_tile, kv_tile);
    case 128: return wmma_bytes<128, ATTN_PREFILL_TC_BK_D128>(q_tile, kv_tile);
    case 256: return wmma_bytes<256, ATTN_PREFILL_TC_BK_D256>(q_tile, kv_tile);
    default: return 0;
    }
}

} // namespace slattn
