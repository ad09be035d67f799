/* kernels.h - the CUDA kernels' C launchers (the .cu files of kernels/cuda).
 *
 * Plain C, no CUDA types: pointers are device memory, `stream` is a
 * cudaStream_t passed as void *. Activations and norm weights are in `dt`
 * (DTYPE_F32, DTYPE_BF16 or DTYPE_F16); the KV cache in `kv_dt`: dt, or
 * with a 16-bit dt one of the fp8 dtypes (DTYPE_F8_E4M3, DTYPE_F8_E5M2:
 * --kv-cache-dtype fp8, scale 1.0; fp8.cuh). Every sum is fp32. Each
 * launcher enqueues its work on `stream` and returns 0, or the cudaError_t
 * of the launch (never synchronizes, never exits). Shapes and semantics are
 * exactly those of the ops table (include/servelab/ops.h) and of the CPU
 * twins in kernels/cpu/ops_cpu.h, against which tests/kernels checks each.
 */
#ifndef SERVELAB_KERNELS_CUDA_H
#define SERVELAB_KERNELS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "servelab/config.h"
#include "servelab/ops.h"
#include "servelab/sample_row.h"

#ifdef __cplusplus
extern "C" {
#endif

/* out(T, n) = table(n_rows, n)[ids[t] - vocab0] where 0 <= ids[t] - vocab0 <
 * n_rows, else a row of zeros: the table holds rows [vocab0, vocab0 + n_rows)
 * of the (V, n) embedding (a tensor-parallel vocabulary shard; the whole
 * table is vocab0 = 0, n_rows = V). Returns cudaErrorInvalidValue for a
 * negative vocab0 or n_rows; no launch when T or n is 0. out must not
 * overlap table. */
int slk_embed(void *out, const void *table, const int32_t *ids, int64_t T, int64_t n, int64_t vocab0,
              int64_t n_rows, sl_dtype_t dt, void *stream);
/* out(T, n) = in * rsqrt(mean(in^2) + eps) * w(n); out may alias in */
int slk_rmsnorm(void *out, const void *in, const void *w, int64_t T, int64_t n, float eps, sl_dtype_t dt,
                void *stream);
/* Fused residual add + RMSNorm: x(T, n) += y, then out = rmsnorm(x) * w. */
int slk_add_rmsnorm(void *x, void *out, const void *y, const void *w, int64_t T, int64_t n, float eps,
                    sl_dtype_t dt, void *stream);
/* x(n) += y(n) */
int slk_add(void *x, const void *y, int64_t n, sl_dtype_t dt, void *stream);
/* out(n) = silu(gate(n)) * up(n); out may alias gate */
int slk_silu_mul(void *out, const void *gate, const void *up, int64_t n, sl_dtype_t dt, void *stream);
/* out(S, n) = in[idx[s]] */
int slk_gather_rows(void *out, const void *in, const int32_t *idx, int64_t S, int64_t n, sl_dtype_t dt,
                    void *stream);
/* Rotates q(T, H, D) and k(T, Hkv, D) in place (rotate-half pairs (i, i + D/2),
 * angle = pos * theta^(-2i/D) / scale). */
int slk_rope(void *q, void *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv, int64_t D,
             float theta, float scale, sl_dtype_t dt, void *stream);
/* k_cache/v_cache (slots, Hkv, D) in kv_dt at slot_mapping[t] = k/v(T, Hkv, D) in dt (an fp8
 * cache holds each value's code, as cpu_kv_write_dt converts it); a slot < 0 skips the token. */
int slk_kv_write(void *k_cache, void *v_cache, const void *k, const void *v, const int64_t *slot_mapping,
                 int64_t T, int64_t Hkv, int64_t D, sl_dtype_t dt, sl_dtype_t kv_dt, void *stream);
/* slk_rope then slk_kv_write in one pass (q and k are rotated in place too). */
int slk_rope_kv_write(void *q, void *k, const void *v, void *k_cache, void *v_cache, const int32_t *positions,
                      const int64_t *slot_mapping, int64_t T, int64_t H, int64_t Hkv, int64_t D, float theta,
                      float scale, sl_dtype_t dt, sl_dtype_t kv_dt, void *stream);

/* out(T, N) = in(T, K) . w(N, K)^T (row-major), fp32 accumulation, for
 * decode-sized T (0 <= T <= SLK_GEMV_MAX_T of launch_plan.h, 8): in and w in
 * dt, out in out_dt (dt, or DTYPE_F32 for logits). Reads each weight row
 * once for all T rows (the linears' memory-bound regime); deterministic.
 * Any N, K and alignment (16-byte accesses when both pointers and the row
 * size K * elem_bytes allow, else one element at a time). Returns
 * cudaErrorInvalidValue for a T, dtype or output dtype it does not take;
 * no launch when T or N is 0. out must not overlap in or w. */
int slk_gemv(void *out, const void *in, const void *w, int64_t T, int64_t N, int64_t K, sl_dtype_t dt,
             sl_dtype_t out_dt, void *stream);

/* AutoAWQ's 4-bit GEMM format (W4A16; layout in linear_awq.cu): qweight int32
 * (K, N/8), qzeros int32 (K/G, N/8), scales fp16 (K/G, N), N a multiple of
 * 8, G dividing K; in (T, K) and out (T, N) in dt, fp32 sums, every weight
 * built exactly as the CPU's cpu_awq_dequantize builds it. The kernels read
 * qweight_t, qweight repacked once by slk_awq_repack (its transpose, int32
 * (N/8, K); qweight_t must not overlap qweight).
 * slk_awq_gemv: 1 <= T <= SLK_AWQ_MAX_T (8), G a multiple of 32
 * (launch_plan.h, slk_awq_gemv_takes), `in` 16-byte aligned; qweight_t read
 * once for all T rows. Deterministic.
 * slk_awq_dequantize: w (N, K) in dt, for the cuBLAS path of larger T.
 * All return cudaErrorInvalidValue for a shape, T or dtype they do not
 * take; no launch when there is no output. */
int slk_awq_repack(int32_t *qweight_t, const int32_t *qweight, int64_t N, int64_t K, void *stream);
int slk_awq_gemv(void *out, const void *in, const int32_t *qweight_t, const int32_t *qzeros, const void *scales,
                 int64_t T, int64_t N, int64_t K, int64_t G, sl_dtype_t dt, void *stream);
int slk_awq_dequantize(void *w, const int32_t *qweight_t, const int32_t *qzeros, const void *scales, int64_t N,
                       int64_t K, int64_t G, sl_dtype_t dt, void *stream);
/* slk_awq_mma: the same product on the tensor cores (mma.sync), bf16 and f16
 * only, any T >= 0, K and G multiples of 16 (launch_plan.h,
 * slk_awq_mma_takes); each weight is the dequantize kernel's (rounded to
 * dt), the products summed in fp32: dequantize + GEMM up to the order of the
 * sums; `in` 8-byte aligned. `workspace` of at least slk_awq_mma_workspace_bytes (never over
 * slk_awq_mma_workspace_max_bytes(), 8 MiB). Deterministic. */
size_t slk_awq_mma_workspace_bytes(int64_t T, int64_t N, int64_t K, int64_t G);
size_t slk_awq_mma_workspace_max_bytes(void);
int slk_awq_mma(void *out, const void *in, const int32_t *qweight_t, const int32_t *qzeros, const void *scales,
                int64_t T, int64_t N, int64_t K, int64_t G, sl_dtype_t dt, void *workspace, size_t workspace_bytes,
                void *stream);

/* Paged attention, out(T, H, D), as ops.h's attention: token t of sequence s
 * attends to positions 0..positions[t] of s through its block table; query
 * head h reads KV head h / (H / Hkv). `meta`'s arrays are device memory, its
 * counts (incl. max_seq_len, max_query_len) host values. A step whose every
 * sequence has one query token takes the decode kernel (split along the
 * context into partitions, then reduced); any other the varlen prefill
 * kernel (query tiles, online softmax over KV tiles). `workspace` holds the
 * split partials: at least slk_attention_workspace_bytes(meta, H, Hkv, D),
 * which depends on the current device (its SM count sizes the split). */
size_t slk_attention_workspace_bytes(const sl_attn_meta_t *meta, int64_t H, int64_t Hkv, int64_t D);
int slk_attention(void *out, const void *q, const void *k_cache, const void *v_cache, const sl_attn_meta_t *meta,
                  int64_t H, int64_t Hkv, int64_t D, int64_t block_size, float scale, sl_dtype_t dt,
                  sl_dtype_t kv_dt, void *workspace, size_t workspace_bytes, void *stream);

/* ---- sampling on the device (sampling.cu) --------------------------------------
 * cpu_sample (kernels/cpu/sampling_cpu.c) on S rows of fp32 logits at once, so
 * that only the chosen tokens (and requested logprobs) cross PCIe. One row per
 * sequence, filled on the host by sampling_row_resolve (sample_row.h: the row
 * struct, the flat `ids` / `bias` arrays its offsets point into, and the
 * draw u, taken from the request's generator when sampling_draws). Results
 * are those of cpu_sample on the same row, ids and bias: the same float32
 * operations (exp evaluated in double and rounded once, as glibc's expf),
 * only the double sums in another order, so the draw may pick the
 * neighbouring kept token when u * total falls within rounding of a token's
 * cumulative boundary (and a top_p cut may move the same way). A NaN logit
 * is treated as the CPU treats it: never the argmax unless it is logit 0,
 * never drawn, never a top logprob, and -inf in the top_k selection; a row
 * that keeps no weight gives its argmax, never -1. */
typedef sampling_row_t slk_sample_row_t;

/* Bytes of device scratch slk_sample needs for S rows of V logits: row s
 * owns bytes [8 V s, 8 V (s + 1)), its V history counts (zero between calls)
 * then its V-float work copy, so a workspace sized for S rows serves any
 * batch of at most S rows of the same V. */
size_t slk_sample_workspace_bytes(int64_t S, int64_t V);
/* Samples S rows of logits(S, V) fp32 into out (S) (device memory, the
 * struct of sample_row.h). rows (S), ids and bias are device memory.
 * `workspace` (slk_sample_workspace_bytes) must be zero-filled when
 * allocated (and again to use it with another V): the kernel leaves every
 * history count zero again. */
int slk_sample(const float *logits, int64_t S, int64_t V, const slk_sample_row_t *rows, const int32_t *ids,
               const float *bias, void *workspace, sample_result_t *out, void *stream);

#ifdef __cplusplus
}
#endif

#endif
