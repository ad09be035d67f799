/* cpu_backend.c - the ops table over kernels/cpu: host memory, fp32 activations.
 *
 * "Device" memory is ordinary 64-byte aligned host memory, so upload and
 * download are copies and weights mapped from a checkpoint are used in place.
 * Threads: the process's worker pool (servelab/parallel.h); `n_threads` is
 * the pool's size, so it holds on whichever thread runs the ops (the engine
 * thread, or a test's or benchmark's main thread).
 * The KV cache is fp32, or bf16 for a bf16 model (cpu_backend_init_kv), as
 * vLLM's --kv-cache-dtype auto keeps it in the model's dtype: half the bytes
 * per token, so twice the blocks in the same memory and half the reads in
 * decode attention. kv_write rounds the fp32 K/V rows to bf16 (nearest even);
 * attention widens them exactly as it gathers a block. --kv-cache-dtype fp8
 * (e4m3, or fp8_e5m2) keeps one byte per element the same way: kv_write
 * rounds with saturation (scale 1.0, as vLLM's default), attention widens
 * through a table. Activations stay fp32.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/ops.h"
#include "servelab/parallel.h"

static void *cpu_alloc(void *ctx, size_t n) {
    (void)ctx;
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) return NULL;
    return p;
}
static void cpu_free(void *ctx, void *p) { (void)ctx; free(p); }
static void cpu_copy(void *ctx, void *dst, const void *src, size_t n) {
    (void)ctx;
    if (dst != src) memcpy(dst, src, n);
}

static void op_embed(void *ctx, void *out, const sl_weight_t *table, const int32_t *ids,
                     int64_t T, int64_t vocab0) {
    (void)ctx;
    cpu_embed_shard(out, table->data, table->dtype, table->cols, ids, T, vocab0, table->rows);
}
static void op_rmsnorm(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T,
                       float eps) {
    (void)ctx;
    cpu_rmsnorm(out, in, w->data, w->dtype, T, w->cols, eps);
}
/* Linear weights get a copy of their own, made once at load in memory that
 * the loader backs with huge pages (weights.c), in the packed layouts of
 * linear_packed.c (bf16, fp32 and f16). Decode streams every weight once per
 * token, and on 4 KB pages (a checkpoint's mapping, or malloc's) one GEMV
 * read at 21 GB/s where 2 MB pages gave 32 on the same machine
 * (docs/benchmarks.md). cpu_linear stays the reference op. */
static size_t op_packed_bytes(void *ctx, const sl_weight_t *w) {
    (void)ctx;
    if (w->awq_group) return cpu_awq_packed_bytes(w->rows, w->cols, w->awq_group);
    if (w->dtype == DTYPE_BF16) return cpu_bf16_packed_bytes(w->rows, w->cols);
    if (w->dtype == DTYPE_F32) return cpu_f32_packed_bytes(w->rows, w->cols);
    return cpu_f16_packed_bytes(w->rows, w->cols);
}
static void op_pack_linear(void *ctx, const sl_weight_t *w, void *dst) {
    (void)ctx;
    if (w->awq_group) {
        cpu_awq_pack(dst, w->data, w->qzeros, w->scales, w->rows, w->cols, w->awq_group);
        return;
    }
    if (w->dtype == DTYPE_BF16) cpu_bf16_pack(dst, w->data, w->rows, w->cols);
    else if (w->dtype == DTYPE_F32) cpu_f32_pack(dst, w->data, w->rows, w->cols);
    else cpu_f16_pack(dst, w->data, w->rows, w->cols);
}

static void linear(float *out, const float *in, const sl_weight_t *w, int64_t T) {
    if (w->awq_group) {
        SL_ASSERT(w->packed); /* AWQ weights are always packed at load (weights.c) */
        cpu_linear_awq_packed(out, in, w->packed, T, w->rows, w->cols, w->awq_group);
    } else if (w->packed && w->dtype == DTYPE_BF16) cpu_linear_bf16_packed(out, in, w->packed, T, w->rows, w->cols);
    else if (w->packed && w->dtype == DTYPE_F32) cpu_linear_f32_packed(out, in, w->packed, T, w->rows, w->cols);
    else if (w->packed) cpu_linear_f16_packed(out, in, w->packed, T, w->rows, w->cols);
    else cpu_linear(out, in, w->data, w->dtype, T, w->rows, w->cols);
}
/* The packed linears of one input in one job (cpu_linears_*), when they share
 * a packing (dtype, AWQ group size) and K; otherwise one linear at a time. */
static void op_linears(void *ctx, int n, void *const *outs, const void *in, const sl_weight_t *const *ws, int64_t T) {
    (void)ctx;
    bool joint = n >= 1 && n <= CPU_LINEAR_MAX_PARTS;
    cpu_linear_part_t parts[CPU_LINEAR_MAX_PARTS];
    for (int i = 0; joint && i < n; i++) {
        joint = ws[i]->packed && ws[i]->dtype == ws[0]->dtype && ws[i]->awq_group == ws[0]->awq_group &&
                ws[i]->cols == ws[0]->cols;
        parts[i] = (cpu_linear_part_t){outs[i], ws[i]->packed, ws[i]->rows};
    }
    if (!joint) {
        for (int i = 0; i < n; i++) linear(outs[i], in, ws[i], T);
        return;
    }
    const sl_weight_t *w = ws[0];
    if (w->awq_group) cpu_linears_awq_packed(parts, n, in, T, w->cols, w->awq_group);
    else if (w->dtype == DTYPE_BF16) cpu_linears_bf16_packed(parts, n, in, T, w->cols);
    else if (w->dtype == DTYPE_F32) cpu_linears_f32_packed(parts, n, in, T, w->cols);
    else cpu_linears_f16_packed(parts, n, in, T, w->cols);
}
static void op_linear(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T) {
    (void)ctx;
    linear(out, in, w, T);
}
static void op_rope(void *ctx, void *q, void *k, const int32_t *positions, int64_t T, int64_t H,
                    int64_t Hkv, int64_t D, float theta, float scale) {
    (void)ctx;
    cpu_rope(q, k, positions, T, H, Hkv, D, theta, scale);
}
/* ctx: the KV cache's dtype (the two tables below differ only there). */
typedef struct {
    sl_dtype_t kv_dtype;
} cpu_ctx_t;

/* The cache is head-major (ops_cpu.h): a decode item, one KV head, streams
 * its block's rows in one run. */
static void op_kv_write(void *ctx, void *kc, void *vc, const void *k, const void *v,
                        const int64_t *slots, int64_t T, int64_t Hkv, int64_t D, int64_t block_size) {
    cpu_kv_write_dt(kc, vc, ((const cpu_ctx_t *)ctx)->kv_dtype, KV_HEAD_MAJOR, block_size, k, v, slots, T, Hkv, D);
}
static void op_attention(void *ctx, void *out, const void *q, const void *kc, const void *vc,
                         const sl_attn_meta_t *m, int64_t H, int64_t Hkv, int64_t D,
                         int64_t block_size, float scale) {
    cpu_attention_kv(out, q, kc, vc, ((const cpu_ctx_t *)ctx)->kv_dtype, KV_HEAD_MAJOR, m->positions, m->query_start,
                     m->block_tables, m->n_seqs, m->max_blocks, m->n_tokens, H, Hkv, D, block_size, scale);
}
static void op_silu_mul(void *ctx, void *out, const void *g, const void *u, int64_t n) {
    (void)ctx;
    cpu_silu_mul(out, g, u, n);
}
static void op_add(void *ctx, void *x, const void *y, int64_t n) {
    (void)ctx;
    cpu_add(x, y, n);
}
static void op_gather_rows(void *ctx, void *out, const void *in, const int32_t *idx, int64_t S,
                           int64_t n) {
    (void)ctx;
    cpu_gather_rows(out, in, idx, S, n);
}
static void op_logits(void *ctx, float *host_logits, const void *in, const sl_weight_t *w,
                      int64_t S) {
    (void)ctx;
    linear(host_logits, in, w, S);
}

/* Sampling: rows are independent, so they split over the pool; each thread
 * works in its own scratch (thread-specific, sized to the largest vocabulary
 * it has sampled, freed when the thread ends). */
static pthread_key_t scratch_key;
static pthread_once_t scratch_once = PTHREAD_ONCE_INIT;

static void scratch_destroy(void *p) {
    cpu_sample_scratch_free(p);
    free(p);
}
static void scratch_key_init(void) { SL_ASSERT(pthread_key_create(&scratch_key, scratch_destroy) == 0); }

static cpu_sample_scratch_t *thread_scratch(int64_t V) {
    pthread_once(&scratch_once, scratch_key_init);
    cpu_sample_scratch_t *s = pthread_getspecific(scratch_key);
    if (s && s->V >= V) return s;
    if (s) {
        cpu_sample_scratch_free(s);
    } else {
        s = sl_calloc(1, sizeof *s);
        pthread_setspecific(scratch_key, s);
    }
    cpu_sample_scratch_init(s, V);
    return s;
}

typedef struct {
    const float *logits;
    int64_t V;
    const sampling_row_t *rows;
    const int32_t *ids;
    const float *bias;
    sample_result_t *out;
} sample_args_t;

static void sample_rows(void *arg, int64_t i0, int64_t i1, int worker) {
    (void)worker;
    const sample_args_t *a = arg;
    cpu_sample_scratch_t *s = thread_scratch(a->V);
    for (int64_t i = i0; i < i1; i++)
        cpu_sample(&a->rows[i], a->ids, a->bias, a->logits + (size_t)i * (size_t)a->V, a->V, s, &a->out[i]);
}

static void op_sample(void *ctx, const float *logits, int64_t n, int64_t V, const sampling_row_t *rows,
                      const int32_t *ids, const float *bias, int64_t n_ids, sample_result_t *out) {
    (void)ctx, (void)n_ids;
    sample_args_t a = {logits, V, rows, ids, bias, out};
    cpu_parallel_for(n * V, n, 0, sample_rows, &a);
}

static cpu_ctx_t ctx_f32 = {DTYPE_F32}, ctx_kv[] = {{DTYPE_BF16}, {DTYPE_F8_E4M3}, {DTYPE_F8_E5M2}};
#define N_KV_TABLES (sizeof ctx_kv / sizeof ctx_kv[0])

static const sl_ops_t cpu_ops_f32 = {
    .name = "cpu",
    .ctx = &ctx_f32,
    .act_dtype = DTYPE_F32,
    .kv_dtype = DTYPE_F32,
    .host_memory = 1,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_copy,
    .download = cpu_copy,
    .thread_init = NULL, /* the pool's size is process-wide */
    .embed = op_embed,
    .rmsnorm = op_rmsnorm,
    .linear = op_linear,
    .linears = op_linears,
    .rope = op_rope,
    .kv_write = op_kv_write,
    .attention = op_attention,
    .silu_mul = op_silu_mul,
    .add = op_add,
    .gather_rows = op_gather_rows,
    .logits = op_logits,
    .sample = op_sample,
    /* The unfused sequence is the reference, and CPU ops cannot fail. */
    .packed_bytes = op_packed_bytes,
    .pack_linear = op_pack_linear,
    .add_rmsnorm = NULL,
    .rope_kv_write = NULL,
    .last_error = NULL,
};

/* The other KV dtypes' tables (bf16, fp8 e4m3, fp8 e5m2): the same ops, their
 * ctx saying the dtype. */
static sl_ops_t cpu_ops_kv[N_KV_TABLES];
static pthread_once_t kv_once = PTHREAD_ONCE_INIT;
static void kv_tables(void) {
    for (size_t i = 0; i < N_KV_TABLES; i++) {
        cpu_ops_kv[i] = cpu_ops_f32;
        cpu_ops_kv[i].ctx = &ctx_kv[i];
        cpu_ops_kv[i].kv_dtype = ctx_kv[i].kv_dtype;
    }
}

const sl_ops_t *cpu_backend_init(int n_threads) { return cpu_backend_init_kv(n_threads, DTYPE_F32); }

const sl_ops_t *cpu_backend_init_kv(int n_threads, sl_dtype_t kv_dtype) {
    parallel_set_threads(n_threads);
    (void)cpu_isa(); /* decided now: an unusable SERVELAB_CPU_ISA stops the process before loading */
    if (kv_dtype == DTYPE_F32) return &cpu_ops_f32;
    pthread_once(&kv_once, kv_tables);
    for (size_t i = 0; i < N_KV_TABLES; i++)
        if (ctx_kv[i].kv_dtype == kv_dtype) return &cpu_ops_kv[i];
    SL_ASSERT(!"cpu_backend_init_kv: a KV dtype the CPU kernels do not have");
    return NULL;
}

void cpu_backend_log_kernels(const sl_ops_t *ops) {
    cpu_isa_t isa = cpu_isa();
    LOG_INFO("CPU kernels: %s (this CPU: %s); KV cache dtype %s%s", cpu_isa_name(isa),
             cpu_isa_name(cpu_isa_detect()), dtype_torch_name(ops->kv_dtype),
             isa == CPU_ISA_AVX512_BF16 ? "; bf16 and AWQ linears round activations to bf16 (vdpbf16ps)" : "");
}
