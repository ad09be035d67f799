/* kbench_awq.c - the AWQ W4A16 kernels (kernels/cuda/linear_awq.cu) on a
 * model's quantized linears (q, k/v, o, gate/up, down; lm_head stays
 * unquantized, as AutoAWQ leaves it) at group size 128: "awq_gemv"
 * (slk_awq_gemv) at T = 1, 2, 4 and 8, next to the "gemv" and "gemm" rows of
 * the same shapes in bf16, and "awq_mma" (slk_awq_mma, the tensor cores) at
 * T = 1 to 256, with cuBLAS's "gemm" rows at its T above 8: the byte ratio
 * (4.16 bits per weight against 16) is the most either can gain; the backend
 * (cuda_backend.c, awq_linear) picks between them by T from these rows.
 * Bytes counted: qweight, qzeros and scales once, the input and the output;
 * % of the copy bandwidth measured in the same run.
 *
 * Validation: the checkpoint tensors are random (every nibble value, scales
 * of ~1/64), dequantized on the host by cpu_awq_dequantize (and rounded to dt
 * for awq_mma, whose operands they are); four rows of the output x the first
 * and last 64 features against cpu_linear on them, with test_kernels_awq's
 * rule for the sum order (2 ulps of dt + 0.1% of the largest |value|, as the
 * gemv rows).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"
#include "kernels.h"
#include "launch_plan.h"
#include "ops_cpu.h"

#define CHECK_COLS 64
#define GROUP 128

typedef struct {
    void *out, *in, *qweight, *qzeros, *scales, *ws; /* qweight: repacked (N / 8, K) */
    size_t ws_bytes;
    int64_t T, N, K;
    int mma;                    /* slk_awq_mma, else slk_awq_gemv */
} awq_arg_t;

static void launch_awq(kb_ctx_t *c, void *arg) {
    awq_arg_t *a = arg;
    if (a->mma)
        KB_LAUNCH(slk_awq_mma(a->out, a->in, a->qweight, a->qzeros, a->scales, a->T, a->N, a->K, GROUP, c->dt, a->ws,
                              a->ws_bytes, c->stream));
    else
        KB_LAUNCH(slk_awq_gemv(a->out, a->in, a->qweight, a->qzeros, a->scales, a->T, a->N, a->K, GROUP, c->dt,
                               c->stream));
}

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

static void awq_case(kb_ctx_t *c, const kb_model_t *m, const char *kernel, const char *name, int64_t N, int64_t K,
                     int64_t T) {
    const sl_dtype_t dt = c->dt;
    const int mma = !strcmp(kernel, "awq_mma");
    char shape[96];
    snprintf(shape, sizeof shape, "w=%s,T=%lld,N=%lld,K=%lld,G=%d", name, (long long)T, (long long)N, (long long)K,
             GROUP);
    kb_set_case(kernel, m->name, shape);
    const int64_t nq = K * (N / 8), ng = K / GROUP, nz = ng * (N / 8), ns = ng * N;
    awq_arg_t a = {kb_try_alloc((size_t)(T * N) * (size_t)c->es), kb_try_alloc((size_t)(T * K) * (size_t)c->es),
                   kb_try_alloc((size_t)nq * 4), kb_try_alloc((size_t)nz * 4), kb_try_alloc((size_t)ns * 2), NULL,
                   mma ? slk_awq_mma_workspace_bytes(T, N, K, GROUP) : 0, T, N, K, mma};
    if (a.ws_bytes) a.ws = kb_try_alloc(a.ws_bytes);
    void *ptrs[6] = {a.out, a.in, a.qweight, a.qzeros, a.scales, a.ws};
    if (!a.out || !a.in || !a.qweight || !a.qzeros || !a.scales || (a.ws_bytes && !a.ws)) {
        kb_free_all(ptrs, 6);
        kb_skip(c, kernel, m->name, shape, "out of device memory");
        return;
    }
    /* The checkpoint's tensors, on the host for the reference. */
    int32_t *qw = xmalloc((size_t)nq * 4), *qz = xmalloc((size_t)nz * 4);
    uint16_t *sc = xmalloc((size_t)ns * 2);
    for (int64_t i = 0; i < nq; i++) qw[i] = (int32_t)(uint32_t)kb_rand_below(1ull << 32);
    for (int64_t i = 0; i < nz; i++) qz[i] = (int32_t)(uint32_t)kb_rand_below(1ull << 32);
    float *sf = xmalloc((size_t)ns * sizeof(float));
    for (int64_t i = 0; i < ns; i++) sf[i] = (1.0f + (float)kb_rand_below(1024) / 1024.0f) / 64.0f;
    dtype_from_f32(sc, sf, DTYPE_F16, ns);
    free(sf);
    int32_t *qwt = xmalloc((size_t)nq * 4); /* as slk_awq_repack leaves it: the transpose */
    for (int64_t k = 0; k < K; k++)
        for (int64_t j = 0; j < N / 8; j++) qwt[j * K + k] = qw[k * (N / 8) + j];
    KB_CUDA(cudaMemcpy(a.qweight, qwt, (size_t)nq * 4, cudaMemcpyHostToDevice));
    free(qwt);
    KB_CUDA(cudaMemcpy(a.qzeros, qz, (size_t)nz * 4, cudaMemcpyHostToDevice));
    KB_CUDA(cudaMemcpy(a.scales, sc, (size_t)ns * 2, cudaMemcpyHostToDevice));
    kb_pattern_t pin;
    kb_pattern_init(&pin, -1.0f, 1.0f, dt);
    kb_fill(c, a.in, T * K, dt, &pin, 0);
    launch_awq(c, &a);

    float *w = xmalloc((size_t)(N * K) * sizeof(float));
    cpu_awq_dequantize(w, qw, qz, sc, N, K, GROUP);
    if (mma) kb_round(w, N * K, dt);
    free(qw), free(qz), free(sc);
    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    float *in = xmalloc((size_t)(n_rows * K) * sizeof(float)), *want = xmalloc((size_t)(n_rows * CHECK_COLS) * 4);
    float *got = xmalloc(CHECK_COLS * sizeof(float));
    for (int i = 0; i < n_rows; i++) kb_pattern_read(in + i * K, rows[i] * K, K, &pin, 0);
    const int64_t firsts[2] = {0, N - CHECK_COLS};
    char what[192];
    for (int j = 0; j < 2; j++) {
        const int64_t n0 = firsts[j];
        cpu_linear(want, in, w + n0 * K, DTYPE_F32, n_rows, CHECK_COLS, K);
        kb_round(want, n_rows * CHECK_COLS, dt);
        for (int i = 0; i < n_rows; i++) {
            snprintf(what, sizeof what, "%s %s %s row %lld, outputs %lld..%lld", kernel, m->name, shape,
                     (long long)rows[i], (long long)n0, (long long)(n0 + CHECK_COLS - 1));
            kb_download(got, a.out, rows[i] * N + n0, CHECK_COLS, dt);
            ok &= kb_close(what, got, want + i * CHECK_COLS, CHECK_COLS, dt, 2.0, 1e-3 / (2.0 * kb_eps(dt)));
        }
    }
    free(w), free(in), free(want), free(got);
    kb_pattern_free(&pin);

    double us = kb_time_us(c, launch_awq, &a);
    double bytes = (double)nq * 4 + (double)nz * 4 + (double)ns * 2 + (double)(T * (K + N)) * (double)c->es;
    kb_report(c, kernel, m->name, shape, us, bytes, 2.0 * (double)T * (double)N * (double)K,
              ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 6);
}

void kb_bench_awq(kb_ctx_t *c, const kb_model_t *m) {
    const int want_gemv = kb_opts_wants(&c->opts, "awq_gemv"), want_mma = kb_opts_wants(&c->opts, "awq_mma");
    if (!want_gemv && !want_mma) return;
    const struct {
        const char *name;
        int64_t N, K;
    } linears[] = {
        {"q", m->H * m->D, m->hidden}, {"k/v", m->Hkv * m->D, m->hidden}, {"o", m->hidden, m->H * m->D},
        {"gate/up", m->inter, m->hidden}, {"down", m->hidden, m->inter},
    };
    const size_t n_linears = sizeof linears / sizeof linears[0];
    for (size_t j = 0; j < n_linears; j++)
        if (linears[j].K % GROUP || linears[j].N % 8) {
            kb_skip(c, "awq_gemv", m->name, linears[j].name, "K not a multiple of the group size 128");
            return;
        }
    const int64_t gemv_Ts[] = {1, 2, 4, SLK_AWQ_MAX_T}, mma_Ts[] = {1, 2, 4, 8, 16, 32, 64, 128, 256};
    for (size_t t = 0; want_gemv && t < sizeof gemv_Ts / sizeof gemv_Ts[0]; t++)
        for (size_t j = 0; j < n_linears; j++) awq_case(c, m, "awq_gemv", linears[j].name, linears[j].N, linears[j].K,
                                                         gemv_Ts[t]);
    for (size_t t = 0; want_mma && t < sizeof mma_Ts / sizeof mma_Ts[0]; t++) {
        for (size_t j = 0; j < n_linears; j++)
            awq_case(c, m, "awq_mma", linears[j].name, linears[j].N, linears[j].K, mma_Ts[t]);
        /* bf16's cuBLAS at the T that the gemm bench does not time */
        if (mma_Ts[t] > SLK_AWQ_MAX_T && kb_opts_wants(&c->opts, "gemm")) kb_bench_gemm_layer(c, m, mma_Ts[t]);
    }
}
