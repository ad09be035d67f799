/* linear_cpu.c - out(T, N) = in(T, K) . w(N, K)^T with F32/F16/BF16 weights
 * in PyTorch's (N, K) layout, as they are: the reference op, and what the CPU
 * backend runs for f16 weights. Loaded bf16 and fp32 linears run on packed
 * copies instead (linear_packed.c).
 *
 * Threads take chunks of the output features N, so each streams its own
 * slice of the weight matrix once per tile of tokens. At T == 1 (decode) the
 * op is a GEMV bound by memory bandwidth: BF16 weights are widened inside the
 * dot product, never copied. For T > 1 a weight row is widened once into the
 * worker's buffer and reused for a tile of tokens, four tokens per pass.
 * Dot products are `omp simd` reductions (vector partial sums), and the hot
 * functions are cloned for AVX2 with a plain x86-64 fallback picked at
 * load time, so one binary runs everywhere.
 *
 * Batches of at least LINEAR_GEMM_MIN_T tokens (prefill) go to
 * OpenBLAS's cblas_sgemm instead: each worker of servelab's pool takes a panel
 * of output features, widens its weight rows to fp32 if they are 16-bit (into
 * its own buffer, which stays in cache for the GEMM that reads it) and calls a
 * single-threaded sgemm for all T tokens against that panel. OpenBLAS's own
 * threads are set to 1 once, so the one GEMM is never split by two pools.
 * Sums stay fp32 and bf16/f16 weights are widened exactly, so the result
 * differs from the loops below only by the order of the additions.
 * (Debian 12's OpenBLAS is built without cblas_sbgemm, so no bf16 GEMM.)
 */
#include "ops_cpu.h"

#include <cblas.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>

#include "servelab/core.h"

#define LINEAR_TILE_T 32

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define HOT_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define HOT_CLONES
#endif

HOT_CLONES
static float dot_f32(const float *restrict w, const float *restrict x, int64_t K) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc) simdlen(16)
    for (int64_t k = 0; k < K; k++) acc += w[k] * x[k];
    return acc;
}

/* Four tokens against one weight row: each weight load feeds four FMAs and
 * the four sums are independent chains, which is what makes batched steps
 * (prefill, many decodes) compute-bound instead of load-bound. */
HOT_CLONES
static void dot4_f32(const float *restrict w, const float *restrict x, int64_t K, float *out) {
    const float *restrict x0 = x, *restrict x1 = x + K, *restrict x2 = x + 2 * K, *restrict x3 = x + 3 * K;
    float a0 = 0.0f, a1 = 0.0f, a2 = 0.0f, a3 = 0.0f;
#pragma omp simd reduction(+ : a0, a1, a2, a3) simdlen(8)
    for (int64_t k = 0; k < K; k++) {
        float wk = w[k];
        a0 += wk * x0[k];
        a1 += wk * x1[k];
        a2 += wk * x2[k];
        a3 += wk * x3[k];
    }
    out[0] = a0, out[1] = a1, out[2] = a2, out[3] = a3;
}

HOT_CLONES
static float dot_bf16(const uint16_t *restrict w, const float *restrict x, int64_t K) {
    float acc = 0.0f;
#pragma omp simd reduction(+ : acc) simdlen(16)
    for (int64_t k = 0; k < K; k++) {
        uint32_t u = (uint32_t)w[k] << 16;
        float wf;
        memcpy(&wf, &u, sizeof wf);
        acc += wf * x[k];
    }
    return acc;
}

/* Output features [n0, n1) of tokens [t0, t1). */
HOT_CLONES
static void linear_rows(float *restrict out, const float *restrict in, const void *w,
                        sl_dtype_t dt, int64_t t0, int64_t t1, int64_t n0, int64_t n1, int64_t N,
                        int64_t K, float *restrict row) {
    size_t row_bytes = (size_t)K * dtype_size(dt);
    for (int64_t n = n0; n < n1; n++) {
        const void *wr = (const uint8_t *)w + (size_t)n * row_bytes;
        if (t1 - t0 == 1 && dt == DTYPE_BF16) {
            out[t0 * N + n] = dot_bf16(wr, in + t0 * K, K);
            continue;
        }
        const float *wf = wr;
        if (dt != DTYPE_F32) {
            dtype_to_f32(row, wr, dt, K);
            wf = row;
        }
        int64_t t = t0;
        for (; t + 4 <= t1; t += 4) {
            float r[4];
            dot4_f32(wf, in + t * K, K, r);
            for (int i = 0; i < 4; i++) out[(t + i) * N + n] = r[i];
        }
        for (; t < t1; t++) out[t * N + n] = dot_f32(wf, in + t * K, K);
    }
}

typedef struct {
    float *out;
    const float *in;
    const void *w;
    sl_dtype_t dt;
    int64_t T, N, K;
    float *rows; /* (workers, K) widened weight rows, one per worker; NULL when none is widened */
} linear_args_t;

/* A chunk of output features, for every tile of tokens. */
static void linear_chunk(void *arg, int64_t n0, int64_t n1, int worker) {
    const linear_args_t *a = arg;
    float *row = a->rows ? a->rows + (size_t)worker * (size_t)a->K : NULL;
    for (int64_t t0 = 0; t0 < a->T; t0 += LINEAR_TILE_T) {
        int64_t t1 = t0 + LINEAR_TILE_T < a->T ? t0 + LINEAR_TILE_T : a->T;
        linear_rows(a->out, a->in, a->w, a->dt, t0, t1, n0, n1, a->N, a->K, row);
    }
}

/* From this many tokens the GEMM path is taken. Measured on 2 cores of an
 * AVX-512 AMD EPYC with small-model shapes (docs/benchmarks.md, "OpenBLAS for
 * batched CPU linears"): sgemm wins at every shape from T = 32 (2x-2.5x at
 * T = 256). Below it the loops stay, for two reasons: OpenBLAS's path for few
 * rows is slower than the loops when K is large (K = 2048: 0.5x at T = 8,
 * though 2x at K = 768), and a token's outputs must not depend on how many
 * rows share its step for the small batches decode pads to (CUDA graph
 * buckets; test_llama_graphs checks the padded rows change no bits), which
 * holds within each path but not across them. */
#define LINEAR_GEMM_MIN_T 32
#define LINEAR_GEMM_PANEL 128 /* output features per sgemm call, at most */

static bool linear_use_gemm(int64_t T) { return T >= LINEAR_GEMM_MIN_T; }

static pthread_once_t gemm_once = PTHREAD_ONCE_INIT;
static void gemm_init(void) { openblas_set_num_threads(1); }

typedef struct {
    float *out;
    const float *in;
    const void *w;
    sl_dtype_t dt;
    int64_t T, N, K, P;
    float *panels; /* (workers, P, K) widened weight panels; NULL for f32 weights */
} gemm_args_t;

/* Panels [p0, p1) of P output features each: out[:, n0:n1] = in . w[n0:n1]^T. */
static void gemm_chunk(void *arg, int64_t p0, int64_t p1, int worker) {
    const gemm_args_t *a = arg;
    size_t row_bytes = (size_t)a->K * dtype_size(a->dt);
    for (int64_t p = p0; p < p1; p++) {
        int64_t n0 = p * a->P, n1 = n0 + a->P < a->N ? n0 + a->P : a->N;
        const void *wr = (const uint8_t *)a->w + (size_t)n0 * row_bytes;
        const float *wf = wr;
        if (a->panels) {
            float *buf = a->panels + (size_t)worker * (size_t)a->P * (size_t)a->K;
            dtype_to_f32(buf, wr, a->dt, (n1 - n0) * a->K);
            wf = buf;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)a->T, (blasint)(n1 - n0),
                    (blasint)a->K, 1.0f, a->in, (blasint)a->K, wf, (blasint)a->K, 0.0f, a->out + n0,
                    (blasint)a->N);
    }
}

static void linear_gemm(float *out, const float *in, const void *w, sl_dtype_t dt, int64_t T,
                        int64_t N, int64_t K) {
    pthread_once(&gemm_once, gemm_init);
    int nt = parallel_n_threads();
    /* At least two panels per thread where N allows, so a late worker's share
     * can be taken by the others; 16-aligned and at most LINEAR_GEMM_PANEL. */
    int64_t P = (N + 2 * nt - 1) / (2 * nt);
    P = (P + 15) / 16 * 16;
    if (P > LINEAR_GEMM_PANEL) P = LINEAR_GEMM_PANEL;
    gemm_args_t a = {out, in, w, dt, T, N, K, P, NULL};
    if (dt != DTYPE_F32) a.panels = sl_malloc((size_t)nt * (size_t)P * (size_t)K * sizeof(float));
    cpu_parallel_for(T * N * K, (N + P - 1) / P, nt, gemm_chunk, &a);
    free(a.panels);
}

void cpu_linear(float *out, const float *in, const void *w, sl_dtype_t dt, int64_t T, int64_t N,
                int64_t K) {
    SL_ASSERT(dt == DTYPE_F32 || dt == DTYPE_F16 || dt == DTYPE_BF16);
    if (linear_use_gemm(T) && T <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX) {
        linear_gemm(out, in, w, dt, T, N, K);
        return;
    }
    /* 16-bit weights are widened a row at a time into the worker's buffer,
     * except in a bf16 GEMV (T == 1), whose dot product widens in registers.
     * One allocation per op, not per chunk, for at most nt workers. */
    bool widen = dt != DTYPE_F32 && !(T == 1 && dt == DTYPE_BF16);
    int nt = parallel_n_threads();
    linear_args_t a = {out, in, w, dt, T, N, K, NULL};
    if (widen) a.rows = sl_malloc((size_t)nt * (size_t)K * sizeof(float));
    cpu_parallel_for(T * N * K, N, nt, linear_chunk, &a);
    free(a.rows);
}
