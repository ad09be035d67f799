/* attention_cpu.c - paged causal attention over block tables, with GQA.
 *
 * Token t of sequence s attends to positions 0..positions[t] of s, whose K/V
 * live in the blocks block_tables[s][p / B] at offset p % B. This one loop is
 * prefill, chunked prefill, prefix-cache hits and decode alike. One pass with
 * an online softmax (running max and sum, rescaling the accumulator), so no
 * score buffer sized by the context is needed. Threads split (token, head).
 * KV cache layout: (n_blocks * B, Hkv, D) fp32, i.e. slot-major.
 */
#include <math.h>

#include "ops_cpu.h"
#include "servelab/core.h"

#define ATTN_MAX_D 512

static int64_t seq_of_token(const int32_t *query_start, int64_t S, int64_t t) {
    int64_t lo = 0, hi = S - 1; /* last s with query_start[s] <= t */
    while (lo < hi) {
        int64_t mid = (lo + hi + 1) / 2;
        if (query_start[mid] <= t) lo = mid;
        else hi = mid - 1;
    }
    return lo;
}

void cpu_attention(float *out, const float *q, const float *kc, const float *vc,
                   const int32_t *positions, const int32_t *query_start,
                   const int32_t *block_tables, int64_t S, int64_t max_blocks, int64_t T,
                   int64_t H, int64_t Hkv, int64_t D, int64_t B, float scale) {
    SL_ASSERT(D <= ATTN_MAX_D && H % Hkv == 0);
    int64_t group = H / Hkv;
    /* The work is about T * H * D * (context): bound the context by the block tables. */
#pragma omp parallel for collapse(2) schedule(static) if (T * H * D * max_blocks * B >= CPU_PAR_MIN_WORK)
    for (int64_t t = 0; t < T; t++) {
        for (int64_t h = 0; h < H; h++) {
            int64_t s = seq_of_token(query_start, S, t);
            const int32_t *table = block_tables + s * max_blocks;
            const float *qv = q + (t * H + h) * D;
            int64_t kvh = h / group;
            float acc[ATTN_MAX_D];
            float m = -INFINITY, l = 0.0f;
            for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
            for (int64_t p = 0; p <= positions[t]; p++) {
                int64_t slot = (int64_t)table[p / B] * B + p % B;
                const float *kv = kc + (slot * Hkv + kvh) * D;
                const float *vv = vc + (slot * Hkv + kvh) * D;
                float score = 0.0f;
#pragma omp simd reduction(+ : score)
                for (int64_t d = 0; d < D; d++) score += qv[d] * kv[d];
                score *= scale;
                float m_new = score > m ? score : m;
                float c = expf(m - m_new), e = expf(score - m_new);
                l = l * c + e;
#pragma omp simd
                for (int64_t d = 0; d < D; d++) acc[d] = acc[d] * c + e * vv[d];
                m = m_new;
            }
            float *o = out + (t * H + h) * D;
            for (int64_t d = 0; d < D; d++) o[d] = acc[d] / l;
        }
    }
}
