/* ops_cpu.h - the CPU reference ops: plain C, fp32 activations, loops split
 * over the worker pool (servelab/parallel.h).
 *
 * These are the definitions every other backend is tested against, so they
 * are written for clarity first; the hot two (linear, attention) are also
 * written so that gcc vectorizes their inner loops. Weights may be F32, F16
 * or BF16 and are widened to fp32 as they are read; all sums are fp32.
 * Shapes: T tokens, S sequences, H/Hkv heads, D head dim, B block size.
 */
#ifndef SERVELAB_OPS_CPU_H
#define SERVELAB_OPS_CPU_H

#include <stdint.h>
#include <string.h>

#include "servelab/config.h"
#include "servelab/dtype.h"
#include "servelab/parallel.h"
#include "servelab/sample_row.h"

/* Work (elements or multiply-adds) below which an op runs on the calling
 * thread alone: handing chunks to the pool costs microseconds (more when a
 * worker has to be woken), which a small op does not win back. Every output
 * is computed the same way either way. */
#define CPU_PAR_MIN_WORK ((int64_t)1 << 15)

/* fn over [0, n): on at most max_threads of the pool (<= 0: all) when `work`
 * reaches CPU_PAR_MIN_WORK, else here. */
static inline void cpu_parallel_for(int64_t work, int64_t n, int max_threads, parallel_fn_t fn, void *arg) {
    if (work >= CPU_PAR_MIN_WORK) parallel_for(n, max_threads, fn, arg);
    else fn(arg, 0, n, 0);
}

/* out(T, n) = table(V, n)[ids[t]] */
void cpu_embed(float *out, const void *table, sl_dtype_t dt, int64_t n, const int32_t *ids,
               int64_t T);
/* The same over a vocabulary shard: table holds rows [vocab0, vocab0 + n_rows)
 * of the embedding, and a token outside them gets a row of zeros. */
void cpu_embed_shard(float *out, const void *table, sl_dtype_t dt, int64_t n, const int32_t *ids, int64_t T,
                     int64_t vocab0, int64_t n_rows);
/* out(T, n) = in * rsqrt(mean(in^2) + eps) * w(n); out may alias in */
void cpu_rmsnorm(float *out, const float *in, const void *w, sl_dtype_t dt, int64_t T, int64_t n,
                 float eps);
/* out(T, N) = in(T, K) . w(N, K)^T */
void cpu_linear(float *out, const float *in, const void *w, sl_dtype_t dt, int64_t T, int64_t N,
                int64_t K);
/* Linear weights in the packed layouts of linear_packed.c (panels of 32
 * features; bf16 with K interleaved by pairs, fp32 and f16 k-major): their sizes, the
 * packing, and the ops, which give a token the same result whatever T is
 * (see linear_packed.c for which ISA level rounds activations to bf16). */
/* n linears of the same input as one op (q/k/v, gate/up): parts[i].out(T,
 * parts[i].N) = in(T, K) . W_i^T, W_i packed at parts[i].packed. One pass
 * over the activations and one split of all the parts' panels over the pool;
 * each output has the bits of its own single-linear call. */
#define CPU_LINEAR_MAX_PARTS 4
typedef struct {
    float *out;
    const void *packed;
    int64_t N;
} cpu_linear_part_t;
size_t cpu_bf16_packed_bytes(int64_t N, int64_t K);
void cpu_bf16_pack(void *dst, const uint16_t *w, int64_t N, int64_t K);
void cpu_linear_bf16_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N,
                            int64_t K);
void cpu_linears_bf16_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K);
size_t cpu_f32_packed_bytes(int64_t N, int64_t K);
void cpu_f32_pack(void *dst, const float *w, int64_t N, int64_t K);
void cpu_linear_f32_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N, int64_t K);
void cpu_linears_f32_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K);
size_t cpu_f16_packed_bytes(int64_t N, int64_t K);
void cpu_f16_pack(void *dst, const uint16_t *w, int64_t N, int64_t K);
void cpu_linear_f16_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N, int64_t K);
void cpu_linears_f16_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K);
/* AutoAWQ 4-bit (W4A16) linears, GEMM format, of PyTorch shape (N, K) with
 * group size G (G | K, N % 8 == 0; a checkpoint's group_size -1 is G = K):
 * qweight int32 (K, N/8), qzeros int32 (K/G, N/8), scales fp16 (K/G, N), nibble
 * i of an int32 holding column [0, 2, 4, 6, 1, 3, 5, 7][i] of its 8.
 * cpu_awq_dequantize: w(N, K) fp32 = (q - z) * s, the reference (exact).
 * cpu_awq_pack: the kernel's copy (layout in linear_awq.c) into dst of
 * cpu_awq_packed_bytes, 4-byte aligned (64 is best); the checkpoint's
 * tensors are not referenced afterwards.
 * cpu_linear_awq_packed: out(T, N) = in(T, K) . w^T, fp32 sums; a token
 * gives the same bits whatever T. portable and avx512 give the same bits as
 * each other, the exact product but for the order of the additions; avx2
 * quantizes the activations to int16 per group first (to within 2^-15 of
 * the group's largest) and sums in integers, applying the scale and zero
 * once per group; avx512_bf16 rounds them to bf16 first, as the bf16 linear
 * does there, and applies the scale and zero once per group too
 * (linear_awq.c).
 * cpu_awq_avx2_reads: dst(T, K) = the activations x(T, K) as the avx2 level
 * computes with them (d_g x16), for a reference. */
void cpu_awq_dequantize(float *w, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, int64_t N,
                        int64_t K, int64_t G);
size_t cpu_awq_packed_bytes(int64_t N, int64_t K, int64_t G);
void cpu_awq_pack(void *dst, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, int64_t N,
                  int64_t K, int64_t G);
void cpu_linears_awq_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K, int64_t G);
void cpu_linear_awq_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N, int64_t K,
                           int64_t G);
void cpu_awq_avx2_reads(float *dst, const float *x, int64_t T, int64_t K, int64_t G);
/* In place on q(T, H, D) and k(T, Hkv, D); see ops.h. */
void cpu_rope(float *q, float *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv,
              int64_t D, float theta, float scale);
/* Where a paged KV cache keeps the row (D elements) of a slot and KV head.
 * A cache is n_blocks blocks of B slots, each block contiguous in both:
 *   KV_SLOT_MAJOR  (n_blocks * B, Hkv, D): a slot's Hkv rows side by side, as
 *                  the CUDA kernels keep it (their CPU twins use this one);
 *   KV_HEAD_MAJOR  (n_blocks, Hkv, B, D): a KV head's B rows of the block side
 *                  by side (the CPU backend's; vLLM's CPU cache is head-major
 *                  too). A decode work item, one KV head, then streams runs of
 *                  B * D elements rather than D elements every Hkv * D, which
 *                  the hardware prefetcher follows: decode attention up to
 *                  2.2x faster once the weights have pushed the cache out of
 *                  the last-level cache (cpu_attn_bench, docs/benchmarks.md). */
typedef enum { KV_SLOT_MAJOR, KV_HEAD_MAJOR } cpu_kv_layout_t;

/* The row index (in rows of D elements from the cache's start) of slot
 * `slot`'s head g. */
static inline int64_t cpu_kv_row(cpu_kv_layout_t layout, int64_t slot, int64_t g, int64_t Hkv, int64_t B) {
    return layout == KV_SLOT_MAJOR ? slot * Hkv + g : ((slot / B) * Hkv + g) * B + slot % B;
}

/* kc/vc slot-major (slots, Hkv, D) at slot_mapping[t] = k/v(T, Hkv, D); slot < 0 skips the token. */
void cpu_kv_write(float *kc, float *vc, const float *k, const float *v,
                  const int64_t *slot_mapping, int64_t T, int64_t Hkv, int64_t D);
/* The same into a cache of kv_dt (F32, BF16 rounded to nearest even, or fp8),
 * in `layout` with blocks of B slots. */
void cpu_kv_write_dt(void *kc, void *vc, sl_dtype_t kv_dt, cpu_kv_layout_t layout, int64_t B, const float *k,
                     const float *v, const int64_t *slot_mapping, int64_t T, int64_t Hkv, int64_t D);
/* out(T, H, D) over a slot-major fp32 cache; see ops.h for the meaning. */
void cpu_attention(float *out, const float *q, const float *kc, const float *vc,
                   const int32_t *positions, const int32_t *query_start,
                   const int32_t *block_tables, int64_t S, int64_t max_blocks, int64_t T,
                   int64_t H, int64_t Hkv, int64_t D, int64_t B, float scale);
/* The same with the cache in kv_dt (F32, BF16 or fp8) and `layout`, widened to
 * fp32 as it is read. */
void cpu_attention_kv(float *out, const float *q, const void *kc, const void *vc, sl_dtype_t kv_dt,
                      cpu_kv_layout_t layout, const int32_t *positions, const int32_t *query_start,
                      const int32_t *block_tables, int64_t S, int64_t max_blocks, int64_t T,
                      int64_t H, int64_t Hkv, int64_t D, int64_t B, float scale);
/* out(n) = silu(g) * u */
void cpu_silu_mul(float *out, const float *g, const float *u, int64_t n);
/* x(n) += y(n) */
void cpu_add(float *x, const float *y, int64_t n);
/* out(S, n) = in[idx[s]] */
void cpu_gather_rows(float *out, const float *in, const int32_t *idx, int64_t S, int64_t n);

/* ---- sampling (sampling_cpu.c) ----------------------------------------------- */

/* What cpu_sample works in, reused across calls so the hot path does not
 * allocate; one per thread that samples. `counts` and `in_prompt` are all
 * zero between calls. */
typedef struct {
    int64_t V;
    float *work;                    /* (V) the processed logits, then the draw's weights */
    int32_t *idx;                   /* (V) */
    uint32_t *counts;               /* (V) output-token counts */
    uint8_t *in_prompt;             /* (V) history marks */
} cpu_sample_scratch_t;

void cpu_sample_scratch_init(cpu_sample_scratch_t *s, int64_t V);
void cpu_sample_scratch_free(cpu_sample_scratch_t *s);

/* Chooses the next token of one row given its draw: min_tokens mask,
 * logit_bias, penalties, then greedy (argmax, first index on ties) or
 * temperature, min_p, top_k (ties at the k-th value stay), top_p (the
 * smallest set, best first and lower id first on ties, whose probability
 * reaches top_p), and the inverse CDF of row->u in id order; then the raw
 * logprobs. `logits` (V) is not modified; ids and bias as described at
 * sampling_row_t. Cost is O(V) plus O(n_mask + n_bias + history); top_k and
 * top_p add an expected O(V) selection, never a sort of the vocabulary.
 * scratch->V >= V. The device sampler (slk_sample) gives the same results. */
void cpu_sample(const sampling_row_t *row, const int32_t *ids, const float *bias, const float *logits, int64_t V,
                cpu_sample_scratch_t *scratch, sample_result_t *out);

#endif
