/* test_kernels_awq.c - the AWQ W4A16 kernels (kernels/cuda/linear_awq.cu)
 * against their CPU twins: slk_awq_repack against the transpose (bit for
 * bit), slk_awq_dequantize against cpu_awq_dequantize (bit for bit, after the
 * rounding to dt), and slk_awq_gemv and slk_awq_mma against cpu_linear on
 * those dequantized weights (in fp32 for the GEMV, rounded to dt for the
 * tensor cores: only the order of the fp32 sums differs).
 *
 * Random checkpoint tensors (every nibble value, scales in [2^-10, 2^-5)),
 * group sizes from 4 to 128 and K (a checkpoint's group_size -1), N from 8
 * to 4104 and K from 32 to 14336, every T from 1 to SLK_AWQ_MAX_T and the
 * three dtypes, each kernel on the shapes it takes. The output
 * is poisoned with NaN bytes and followed by a poisoned guard: every element
 * must be written, none past the end. Tolerances as test_kernels_gemv.c's
 * (its header derives them): fp32, ||got - want|| / ||scale|| < 1e-5 with
 * scale_i = max(|want_i|, ||terms_i||); 16-bit, per element, one ulp of dt
 * plus 1e-5 sqrt(K) max_k |w_k x_k|.
 */
#include <string.h>

#include "kernel_test.h"
#include "launch_plan.h"

static const sl_dtype_t DTS[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
#define N_DTS 3
#define GUARD 64

static cudaStream_t stream;

typedef struct {
    int64_t N, K, G;
    int32_t *qweight, *qzeros;
    uint16_t *scales;
    float *w;                   /* (N, K): cpu_awq_dequantize */
    void *d_qweight_t, *d_qzeros, *d_scales; /* qweight as slk_awq_repack leaves it */
} awq_t;

static uint32_t rnd32(void) { return (uint32_t)test_rng(); }

static void awq_init(awq_t *a, int64_t N, int64_t K, int64_t G) {
    a->N = N, a->K = K, a->G = G;
    const int64_t nq = K * (N / 8), nz = (K / G) * (N / 8), ns = (K / G) * N;
    a->qweight = malloc((size_t)nq * 4), a->qzeros = malloc((size_t)nz * 4), a->scales = malloc((size_t)ns * 2);
    a->w = malloc((size_t)(N * K) * sizeof(float));
    for (int64_t i = 0; i < nq; i++) a->qweight[i] = (int32_t)rnd32();
    for (int64_t i = 0; i < nz; i++) a->qzeros[i] = (int32_t)rnd32();
    float *s = malloc((size_t)ns * sizeof(float));
    for (int64_t i = 0; i < ns; i++) s[i] = ldexpf(1.0f + (float)(rnd32() % 1024) / 1024.0f, -10 + (int)(rnd32() % 5));
    dtype_from_f32(a->scales, s, DTYPE_F16, ns);
    free(s);
    cpu_awq_dequantize(a->w, a->qweight, a->qzeros, a->scales, N, K, G);
    /* The repack against the host's transpose, bit for bit, guard words untouched. */
    void *d_qweight = kt_upload_raw(a->qweight, (size_t)nq * 4);
    KT_CUDA(cudaMalloc(&a->d_qweight_t, (size_t)(nq + GUARD) * 4));
    KT_CUDA(cudaMemset(a->d_qweight_t, 0xff, (size_t)(nq + GUARD) * 4));
    CHECK_EQ_INT(slk_awq_repack(a->d_qweight_t, d_qweight, N, K, stream), 0);
    int32_t *got = malloc((size_t)(nq + GUARD) * 4);
    KT_CUDA(cudaDeviceSynchronize());
    KT_CUDA(cudaMemcpy(got, a->d_qweight_t, (size_t)(nq + GUARD) * 4, cudaMemcpyDeviceToHost));
    int64_t differ = 0;
    for (int64_t j = 0; j < N / 8; j++)
        for (int64_t k = 0; k < K; k++) differ += got[j * K + k] != a->qweight[k * (N / 8) + j];
    for (int64_t i = nq; i < nq + GUARD; i++) differ += got[i] != -1;
    if (differ) {
        fprintf(stderr, "  awq_repack N=%lld K=%lld: %lld words differ from the transpose\n", (long long)N,
                (long long)K, (long long)differ);
        test_cur_failed = 1;
    }
    free(got);
    cudaFree(d_qweight);
    a->d_qzeros = kt_upload_raw(a->qzeros, (size_t)nz * 4);
    a->d_scales = kt_upload_raw(a->scales, (size_t)ns * 2);
}

static void awq_free(awq_t *a) {
    free(a->qweight), free(a->qzeros), free(a->scales), free(a->w);
    cudaFree(a->d_qweight_t), cudaFree(a->d_qzeros), cudaFree(a->d_scales);
}

/* slk_awq_gemv (mma = 0) or slk_awq_mma (mma = 1) for T rows of x (T, K) in dt against cpu_linear on the
 * dequantized weights: in fp32 for the GEMV, rounded to dt for the tensor cores (their operands). */
static void check_product(const awq_t *a, int64_t T, sl_dtype_t dt, int mma) {
    const int64_t N = a->N, K = a->K, n_out = T * N;
    char ctx[160];
    snprintf(ctx, sizeof ctx, "%s %s T=%lld N=%lld K=%lld G=%lld", mma ? "awq_mma" : "awq_gemv", kt_name(dt),
             (long long)T, (long long)N, (long long)K, (long long)a->G);
    float *x = kt_fvec(T * K), *want = kt_fvec(n_out), *maxterm = kt_fvec(n_out), *termnorm = kt_fvec(n_out);
    const float *w = a->w;
    float *rounded = NULL;
    if (mma) {
        rounded = kt_fvec(N * K);
        memcpy(rounded, a->w, (size_t)(N * K) * sizeof(float));
        kt_round(rounded, N * K, dt);
        w = rounded;
    }
    kt_fill(x, T * K, -1.0f, 1.0f, dt);
    cpu_linear(want, x, w, DTYPE_F32, T, N, K);
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double m = 0, ss = 0;
            for (int64_t k = 0; k < K; k++) {
                double term = (double)w[n * K + k] * x[t * K + k];
                m = fmax(m, fabs(term)), ss += term * term;
            }
            maxterm[t * N + n] = (float)m, termnorm[t * N + n] = (float)sqrt(ss);
        }
    void *d_x = kt_upload(x, T * K, dt), *d_out = NULL, *ws = NULL;
    const size_t es = kt_size(dt);
    const size_t ws_bytes = mma ? slk_awq_mma_workspace_bytes(T, N, K, a->G) : 0;
    KT_CUDA(cudaMalloc(&d_out, (size_t)(n_out + GUARD) * es));
    KT_CUDA(cudaMemset(d_out, 0xff, (size_t)(n_out + GUARD) * es));
    if (ws_bytes) KT_CUDA(cudaMalloc(&ws, ws_bytes));
    int rc = mma ? slk_awq_mma(d_out, d_x, a->d_qweight_t, a->d_qzeros, a->d_scales, T, N, K, a->G, dt, ws,
                               ws_bytes, stream)
                 : slk_awq_gemv(d_out, d_x, a->d_qweight_t, a->d_qzeros, a->d_scales, T, N, K, a->G, dt, stream);
    if (rc != 0) {
        fprintf(stderr, "  %s: launcher returned %d\n", ctx, rc);
        test_cur_failed = 1;
    }
    float *got = kt_fvec(n_out + GUARD);
    kt_download(got, d_out, n_out + GUARD, dt);
    kt_check_linear(ctx, got, want, n_out, GUARD, termnorm, maxterm, K, dt);
    free(x), free(want), free(maxterm), free(termnorm), free(got), free(rounded);
    cudaFree(d_x), cudaFree(d_out), cudaFree(ws);
}

/* slk_awq_dequantize against cpu_awq_dequantize rounded to dt: equal bits. */
static void check_dequantize(const awq_t *a, sl_dtype_t dt) {
    const int64_t n = a->N * a->K;
    const size_t es = kt_size(dt);
    void *d_w = NULL;
    KT_CUDA(cudaMalloc(&d_w, (size_t)(n + GUARD) * es));
    KT_CUDA(cudaMemset(d_w, 0xff, (size_t)(n + GUARD) * es));
    CHECK_EQ_INT(slk_awq_dequantize(d_w, a->d_qweight_t, a->d_qzeros, a->d_scales, a->N, a->K, a->G, dt, stream), 0);
    uint8_t *got = malloc((size_t)(n + GUARD) * es), *want = malloc((size_t)n * es);
    KT_CUDA(cudaDeviceSynchronize());
    KT_CUDA(cudaMemcpy(got, d_w, (size_t)(n + GUARD) * es, cudaMemcpyDeviceToHost));
    dtype_from_f32(want, a->w, dt, n);
    int64_t differ = 0, first = -1, clobbered = 0;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(got + i * es, want + i * es, es)) differ++, first = first < 0 ? i : first;
    for (size_t i = (size_t)n * es; i < (size_t)(n + GUARD) * es; i++) clobbered += got[i] != 0xff;
    if (differ || clobbered) {
        fprintf(stderr, "  awq_dequantize %s N=%lld K=%lld G=%lld: %lld weights differ (first at n %lld, k %lld), "
                "%lld guard bytes overwritten\n", kt_name(dt), (long long)a->N, (long long)a->K, (long long)a->G,
                (long long)differ, (long long)(first < 0 ? 0 : first / a->K), (long long)(first < 0 ? 0 : first % a->K),
                (long long)clobbered);
        test_cur_failed = 1;
    }
    free(got), free(want);
    cudaFree(d_w);
}

static void test_awq_rejects_what_it_does_not_take(void) {
    _Alignas(16) char buf[64];
    /* N not a multiple of 8, G not dividing K or not a multiple of 32, T past the cutoff, a dtype, inputs
     * off 16-byte alignment: refused, nothing written. */
    CHECK(slk_awq_gemv(buf, buf, NULL, NULL, NULL, 1, 12, 64, 32, DTYPE_F32, stream) != 0);
    CHECK(slk_awq_gemv(buf, buf, NULL, NULL, NULL, 1, 16, 96, 64, DTYPE_F32, stream) != 0);
    CHECK(slk_awq_gemv(buf, buf, NULL, NULL, NULL, 1, 16, 96, 48, DTYPE_F32, stream) != 0);
    CHECK(slk_awq_gemv(buf, buf, NULL, NULL, NULL, SLK_AWQ_MAX_T + 1, 16, 64, 32, DTYPE_F32, stream) != 0);
    CHECK(slk_awq_gemv(buf, buf, NULL, NULL, NULL, 1, 16, 64, 32, DTYPE_I32, stream) != 0);
    CHECK(slk_awq_gemv(buf, buf + 8, NULL, NULL, NULL, 1, 16, 64, 32, DTYPE_BF16, stream) != 0);
    CHECK(slk_awq_dequantize(buf, NULL, NULL, NULL, 12, 64, 32, DTYPE_BF16, stream) != 0);
    CHECK(slk_awq_repack((int32_t *)buf, NULL, 12, 64, stream) != 0);
    /* The tensor cores: 16-bit dtypes, K and G multiples of 16, the workspace. */
    CHECK(slk_awq_mma(buf, buf, NULL, NULL, NULL, 16, 64, 64, 32, DTYPE_F32, NULL, 0, stream) != 0);
    CHECK(slk_awq_mma(buf, buf, NULL, NULL, NULL, 16, 64, 96, 24, DTYPE_BF16, NULL, 0, stream) != 0);
    CHECK(slk_awq_mma(buf, buf, NULL, NULL, NULL, 16, 64, 40, 40, DTYPE_BF16, NULL, 0, stream) != 0);
    CHECK(slk_awq_mma(buf, buf, NULL, NULL, NULL, 16, 60, 64, 32, DTYPE_F16, NULL, 0, stream) != 0);
    size_t need = slk_awq_mma_workspace_bytes(16, 64, 4096, 128);
    CHECK(need > 0);
    CHECK(slk_awq_mma(buf, buf, NULL, NULL, NULL, 16, 64, 4096, 128, DTYPE_BF16, buf, need - 1, stream) != 0);
}

/* The backend sizes the tensor-core kernel's workspace once, at the bound: no shape may need more. */
static void test_awq_workspace_never_exceeds_its_bound(void) {
    const size_t mma_max = slk_awq_mma_workspace_max_bytes();
    size_t mma_worst = 0;
    for (int64_t N = 8; N <= (int64_t)1 << 18; N += N < 4096 ? 8 : 1032)
        for (int64_t K = 128; K <= 65536; K *= 2)
            for (int64_t T = 1; T <= 1024; T += T < 40 ? 1 : 97) {
                size_t b = slk_awq_mma_workspace_bytes(T, N, K, 128);
                mma_worst = b > mma_worst ? b : mma_worst;
                if (b > mma_max) {
                    fprintf(stderr, "  awq_mma T=%lld N=%lld K=%lld needs %zu bytes, over the bound %zu\n",
                            (long long)T, (long long)N, (long long)K, b, mma_max);
                    test_cur_failed = 1;
                    return;
                }
            }
    CHECK(mma_worst > mma_max / 4);
}

/* N, K, G; the emulator (SERVELAB_TEST_MAX_WORK) keeps the small ones. The
 * GEMV's batches of 128, 64 and 32 k (G = 128 and K; 64; 32 and 96), its K
 * split over the block's warps (N / 8 under 4 x 4096 columns: every shape
 * here) and columns past N (N / 8 not a multiple of 4); groups that only the
 * tensor cores (16, 48) or only the dequantize kernel (4, 12, 20) take, and
 * K not a multiple of 8. */
static const int64_t SHAPES[][3] = {
    {8, 32, 32},      {56, 128, 32},     {256, 128, 128},  {256, 512, 512},  {264, 4096, 128}, {520, 1024, 32},
    {4096, 4096, 128}, {4104, 1024, 32}, {1024, 14336, 128}, {8, 4096, -1},   {16, 96, 12},     {24, 100, 20},
    {16, 64, 4},       {8, 960, 96},     {72, 640, 64},     {40, 96, 48},     {24, 64, 16},
};

static const int64_t MMA_TS[] = {1, 5, 8, 9, 16, 24, 33, 70};
#define N_MMA_TS (sizeof MMA_TS / sizeof MMA_TS[0])
#define MMA_MAX_WORK ((int64_t)300000000)

static void test_awq_kernels_match_the_cpu_twins_for_every_t_dtype_and_shape(void) {
    for (size_t s = 0; s < sizeof SHAPES / sizeof SHAPES[0]; s++) {
        int64_t N = SHAPES[s][0], K = SHAPES[s][1], G = SHAPES[s][2] < 0 ? K : SHAPES[s][2];
        if (kt_too_big(SLK_AWQ_MAX_T * N * K)) continue;
        awq_t a;
        awq_init(&a, N, K, G);
        for (int d = 0; d < N_DTS; d++) {
            check_dequantize(&a, DTS[d]);
            for (int64_t T = 1; slk_awq_gemv_takes(N, K, G) && T <= SLK_AWQ_MAX_T; T++) check_product(&a, T, DTS[d], 0);
            /* the tensor cores: one and several token tiles (and token blocks: T > 32), at 16-bit dtypes;
             * the host reference's cost bounds T on the largest shapes (T <= 16 at 4096 x 4096) */
            for (size_t t = 0; DTS[d] != DTYPE_F32 && slk_awq_mma_takes(N, K, G) && t < N_MMA_TS; t++)
                if (MMA_TS[t] * N * K <= MMA_MAX_WORK && !kt_too_big(MMA_TS[t] * N * K))
                    check_product(&a, MMA_TS[t], DTS[d], 1);
        }
        awq_free(&a);
    }
}

/* The same call twice: the same bits (the K split's slices are summed in a fixed order). */
static void test_awq_gemv_is_deterministic(void) {
    const int64_t N = 256, K = 2048, G = 128, T = 3;
    CHECK(slk_plan_awq_gemv(T, N, K, G).ksplit > 1); /* the split path */
    awq_t a;
    awq_init(&a, N, K, G);
    float *x = kt_fvec(T * K);
    kt_fill(x, T * K, -1.0f, 1.0f, DTYPE_BF16);
    void *d_x = kt_upload(x, T * K, DTYPE_BF16), *o1 = NULL, *o2 = NULL;
    KT_CUDA(cudaMalloc(&o1, (size_t)(T * N) * 2));
    KT_CUDA(cudaMalloc(&o2, (size_t)(T * N) * 2));
    CHECK_EQ_INT(slk_awq_gemv(o1, d_x, a.d_qweight_t, a.d_qzeros, a.d_scales, T, N, K, G, DTYPE_BF16, stream), 0);
    CHECK_EQ_INT(slk_awq_gemv(o2, d_x, a.d_qweight_t, a.d_qzeros, a.d_scales, T, N, K, G, DTYPE_BF16, stream), 0);
    uint16_t *h1 = malloc((size_t)(T * N) * 2), *h2 = malloc((size_t)(T * N) * 2);
    KT_CUDA(cudaDeviceSynchronize());
    KT_CUDA(cudaMemcpy(h1, o1, (size_t)(T * N) * 2, cudaMemcpyDeviceToHost));
    KT_CUDA(cudaMemcpy(h2, o2, (size_t)(T * N) * 2, cudaMemcpyDeviceToHost));
    CHECK(memcmp(h1, h2, (size_t)(T * N) * 2) == 0);
    free(h1), free(h2), free(x);
    cudaFree(d_x), cudaFree(o1), cudaFree(o2);
    awq_free(&a);
}

int main(void) {
    kt_require_gpu();
    test_seed();
    KT_CUDA(cudaStreamCreate(&stream));
    RUN(test_awq_rejects_what_it_does_not_take);
    RUN(test_awq_workspace_never_exceeds_its_bound);
    RUN(test_awq_kernels_match_the_cpu_twins_for_every_t_dtype_and_shape);
    RUN(test_awq_gemv_is_deterministic);
    kt_report_left_out();
    KT_CUDA(cudaStreamDestroy(stream));
    return test_summary();
}
