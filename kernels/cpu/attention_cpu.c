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

typedef struct {
    float *out;
    const float *q, *kc, *vc;
    const int32_t *positions, *query_start, *block_tables;
    int64_t S, max_blocks, H, Hkv, D, B;
    float scale;
} attn_args_t;

/* Items i = t * H + h in [i0, i1): one query head of one token each. */
static void attention_items(void *arg, int64_t i0, int64_t i1, int worker) {
    (void)worker;
    const attn_args_t *a = arg;
    int64_t H = a->H, Hkv = a->Hkv, D = a->D, B = a->B, group = H / Hkv;
    for (int64_t i = i0; i < i1; i++) {
        int64_t t = i / H, h = i % H;
        int64_t s = seq_of_token(a->query_start, a->S, t);
        const int32_t *table = a->block_tables + s * a->max_blocks;
        const float *qv = a->q + (t * H + h) * D;
        int64_t kvh = h / group;
        float acc[ATTN_MAX_D];
        float m = -INFINITY, l = 0.0f;
        for (int64_t d = 0; d < D; d++) acc[d] = 0.0f;
        for (int64_t p = 0; p <= a->positions[t]; p++) {
            int64_t slot = (int64_t)table[p / B] * B + p % B;
            const float *kv = a->kc + (slot * Hkv + kvh) * D;
            const float *vv = a->vc + (slot * Hkv + kvh) * D;
            float score = 0.0f;
#pragma omp simd reduction(+ : score)
            for (int64_t d = 0; d < D; d++) score += qv[d] * kv[d];
            score *= a->scale;
            float m_new = score > m ? score : m;
            float c = expf(m - m_new), e = expf(score - m_new);
            l = l * c + e;
#pragma omp simd
            for (int64_t d = 0; d < D; d++) acc[d] = acc[d] * c + e * vv[d];
            m = m_new;
        }
        float *o = a->out + (t * H + h) * D;
        for (int64_t d = 0; d < D; d++) o[d] = acc[d] / l;
    }
}

void cpu_attention(float *out, const float *q, const float *kc, const float *vc,
                   const int32_t *positions, const int32_t *query_start,
                   const int32_t *block_tables, int64_t S, int64_t max_blocks, int64_t T,
                   int64_t H, int64_t Hkv, int64_t D, int64_t B, float scale) {
    SL_ASSERT(D <= ATTN_MAX_D && H % Hkv == 0);
    attn_args_t a = {out, q, kc, vc, positions, query_start, block_tables, S, max_blocks, H, Hkv, D, B, scale};
    /* The work is about T * H * D * (context): bound the context by the block tables. */
    cpu_parallel_for(T * H * D * max_blocks * B, T * H, 0, attention_items, &a);
}
