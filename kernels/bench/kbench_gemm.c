/* kbench_gemm.c - the cuBLAS GEMMs of a model's linear layers, called exactly
 * as src/backend/cuda_backend.c's gemm() calls them (cublasGemmEx, TN
 * layout, inputs in dt, CUBLAS_COMPUTE_32F, default math: no TF32), at each
 * token count T of kb_token_counts; lm_head (fp32 logits, as the backend's
 * logits op) only at the decode batch sizes T <= 256, the only ones where
 * the model computes logits for T rows. "gemv" rows time the GEMV kernel
 * (kernels/cuda/gemv.cu, slk_gemv), which the backend runs instead of
 * cuBLAS for small T, at T = 1, 2, 4 and 8 (the graph batch sizes it can
 * serve), next to cuBLAS at the same T: one run compares the two on the
 * same card, validated the same way.
 *
 * Validation: four rows of the output (first, last, two between) x the
 * first and the last 64 output features, against cpu_linear on the same
 * rounded inputs, rebuilt from the patterns. This checks the row-major to
 * column-major mapping (a transposed operand fails by the output's whole
 * magnitude); cuBLAS's arithmetic is not ours to test, so the tolerance is
 * generous: 2 ulps of the output dtype (64 for an fp32 output) plus 0.1% of
 * the largest |value|. The absolute part covers the summation order over K
 * up to 14336 terms, and tensor cores that align and truncate within their
 * fp32 accumulation (biased: up to ~1e-3 absolute on outputs of ~20 here).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"
#include "kernels.h"
#include "launch_plan.h"
#include "ops_cpu.h"

#define CHECK_COLS 64

cudaDataType_t kb_cuda_type(sl_dtype_t dt) {
    return dt == DTYPE_BF16 ? CUDA_R_16BF : dt == DTYPE_F16 ? CUDA_R_16F : CUDA_R_32F;
}

/* out^T (N, T) = W (N, K) . in^T (K, T) in cuBLAS's column-major terms: see
 * cuda_backend.c's gemm() for the mapping, copied here unchanged. */
void kb_gemm(kb_ctx_t *c, void *out, cudaDataType_t ctype, const void *in, const void *w, int64_t T, int64_t N,
             int64_t K) {
    const float alpha = 1.0f, beta = 0.0f;
    cudaDataType_t ab = kb_cuda_type(c->dt);
    KB_BLAS(cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)T, (int)K, &alpha, w, ab, (int)K, in, ab,
                         (int)K, &beta, out, ctype, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

typedef struct {
    const char *name;
    int64_t N, K;
    int logits;                 /* fp32 output, decode batches only */
} linear_t;

typedef struct {
    void *out, *in, *w;
    int64_t T, N, K;
    cudaDataType_t ctype;
    sl_dtype_t out_dt;
} gemm_arg_t;

static void launch_gemm(kb_ctx_t *c, void *arg) {
    gemm_arg_t *a = arg;
    kb_gemm(c, a->out, a->ctype, a->in, a->w, a->T, a->N, a->K);
}

static void launch_gemv(kb_ctx_t *c, void *arg) {
    gemm_arg_t *a = arg;
    KB_LAUNCH(slk_gemv(a->out, a->in, a->w, a->T, a->N, a->K, c->dt, a->out_dt, c->stream));
}

static float *fvec(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

/* kernel: "gemm" (cuBLAS) or "gemv" (slk_gemv). */
static void gemm_case(kb_ctx_t *c, const kb_model_t *m, const linear_t *l, int64_t T, const char *kernel) {
    const sl_dtype_t dt = c->dt, out_dt = l->logits ? DTYPE_F32 : dt;
    const kb_launch_fn launch = strcmp(kernel, "gemv") ? launch_gemm : launch_gemv;
    const int64_t N = l->N, K = l->K, out_es = kb_elem_bytes(out_dt);
    char shape[96];
    snprintf(shape, sizeof shape, "w=%s,T=%lld,N=%lld,K=%lld", l->name, (long long)T, (long long)N, (long long)K);
    kb_set_case(kernel, m->name, shape);
    gemm_arg_t a = {kb_try_alloc((size_t)(T * N) * (size_t)out_es), kb_try_alloc((size_t)(T * K) * (size_t)c->es),
                    kb_try_alloc((size_t)(N * K) * (size_t)c->es), T, N, K, kb_cuda_type(out_dt), out_dt};
    void *ptrs[3] = {a.out, a.in, a.w};
    if (!a.out || !a.in || !a.w) {
        kb_free_all(ptrs, 3);
        kb_skip(c, kernel, m->name, shape, "out of device memory");
        return;
    }
    kb_pattern_t pin, pw;
    kb_pattern_init(&pin, -1.0f, 1.0f, dt);
    kb_pattern_init(&pw, -1.0f, 1.0f, dt);
    kb_fill(c, a.in, T * K, dt, &pin, 0);
    kb_fill(c, a.w, N * K, dt, &pw, 0);
    launch(c, &a);

    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    float *in = fvec(n_rows * K), *wf = fvec(CHECK_COLS * K), *want = fvec(n_rows * CHECK_COLS);
    float *got = fvec(CHECK_COLS);
    for (int i = 0; i < n_rows; i++) kb_pattern_read(in + i * K, rows[i] * K, K, &pin, 0);
    const int64_t firsts[2] = {0, N - CHECK_COLS};
    const double ulps = out_dt == DTYPE_F32 ? 64.0 : 2.0;
    char what[192];
    for (int j = 0; j < 2; j++) {
        const int64_t n0 = firsts[j];
        kb_pattern_read(wf, n0 * K, CHECK_COLS * K, &pw, 0);
        void *w_raw = kb_host_dt(wf, CHECK_COLS * K, dt);
        cpu_linear(want, in, w_raw, dt, n_rows, CHECK_COLS, K);
        free(w_raw);
        kb_round(want, n_rows * CHECK_COLS, out_dt);
        for (int i = 0; i < n_rows; i++) {
            snprintf(what, sizeof what, "%s %s %s row %lld, outputs %lld..%lld", kernel, m->name, shape, (long long)rows[i],
                     (long long)n0, (long long)(n0 + CHECK_COLS - 1));
            kb_download(got, a.out, rows[i] * N + n0, CHECK_COLS, out_dt);
            ok &= kb_close(what, got, want + i * CHECK_COLS, CHECK_COLS, out_dt, ulps, 1e-3 / (ulps * kb_eps(out_dt)));
        }
    }
    free(in), free(wf), free(want), free(got);
    kb_pattern_free(&pin), kb_pattern_free(&pw);

    double us = kb_time_us(c, launch, &a);
    kb_report(c, kernel, m->name, shape, us, kb_bytes_gemm(T, N, K, c->es, out_es), kb_flops_gemm(T, N, K),
              ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 3);
}

/* The linears of src/model/llama.c, in the order a layer runs them; k and v share a shape. */
static int model_linears(const kb_model_t *m, linear_t out[6]) {
    const linear_t l[] = {
        {"q", m->H * m->D, m->hidden, 0},     {"k/v", m->Hkv * m->D, m->hidden, 0},
        {"o", m->hidden, m->H * m->D, 0},     {"gate/up", m->inter, m->hidden, 0},
        {"down", m->hidden, m->inter, 0},     {"lm_head", m->V, m->hidden, 1},
    };
    memcpy(out, l, sizeof l);
    return 6;
}

/* cuBLAS on the layer's linears (lm_head aside) at T: the bf16 rows that kbench_awq.c's tensor-core rows are
 * read against. */
void kb_bench_gemm_layer(kb_ctx_t *c, const kb_model_t *m, int64_t T) {
    linear_t linears[6];
    const int n = model_linears(m, linears);
    for (int j = 0; j < n; j++)
        if (!linears[j].logits) gemm_case(c, m, &linears[j], T, "gemm");
}

void kb_bench_gemm(kb_ctx_t *c, const kb_model_t *m) {
    const int want_gemm = kb_opts_wants(&c->opts, "gemm"), want_gemv = kb_opts_wants(&c->opts, "gemv");
    if (!want_gemm && !want_gemv) return;
    linear_t linears[6];
    const size_t n_linears = (size_t)model_linears(m, linears);
    int64_t Ts[8];
    int n_T = kb_token_counts(c->opts.quick, Ts), has_gemv_t = 0;
    for (int i = 0; want_gemm && i < n_T; i++)
        for (size_t j = 0; j < n_linears; j++) {
            if (linears[j].logits && Ts[i] > 256) continue;
            gemm_case(c, m, &linears[j], Ts[i], "gemm");
        }
    /* The GEMV kernel at the graph batch sizes it can serve, cuBLAS beside it where the rows above lack that T. */
    const int64_t gemv_Ts[] = {1, 2, 4, SLK_GEMV_MAX_T};
    for (int i = 0; want_gemv && i < 4; i++) {
        has_gemv_t = 0;
        for (int k = 0; k < n_T; k++) has_gemv_t |= Ts[k] == gemv_Ts[i];
        for (size_t j = 0; j < n_linears; j++) {
            if (want_gemm && !has_gemv_t) gemm_case(c, m, &linears[j], gemv_Ts[i], "gemm");
            gemm_case(c, m, &linears[j], gemv_Ts[i], "gemv");
        }
    }
}
