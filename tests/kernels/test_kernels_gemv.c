/* test_kernels_gemv.c - the GEMV kernel (kernels/cuda/gemv.cu, slk_gemv)
 * against its CPU twin cpu_linear: out(T, N) = in(T, K) . w(N, K)^T.
 *
 * Every T from 1 to the cutoff SLK_GEMV_MAX_T (8, which includes the padded
 * token counts 3, 5, 6, 7), the three dtypes, the output in dt and in fp32
 * (logits), N in {1, 7, 256, 4099}, K in {1, 8, 64, 4096, 4099, 14336}
 * (4099: rows not 16-byte aligned, the one-element path), and base pointers
 * one element off 16-byte alignment. Inputs are fresh random values in
 * [-1, 1) (seed printed), rounded to dt, so the kernel and cpu_linear
 * multiply the same numbers; only the order of the fp32 sums differs. The
 * output is poisoned with NaN bytes before each run and followed by a
 * poisoned guard: every element must be written, none past the end.
 *
 * Tolerances (u = 2^-24, fp32's unit roundoff):
 * - fp32 output: ||got - want||_2 / ||scale||_2 < 1e-5, scale_i =
 *   max(|want_i|, ||terms_i||_2), the size a sum of random-sign terms has
 *   when it does not happen to cancel (with N = 1 one cancelling sum is the
 *   whole norm: measured 8e-5 relative to |want| on an H200, 4e-7 to the
 *   scale). Each order of the fp32 sum is within ~u sqrt(L) ||terms|| of
 *   the exact sum for chains of L terms; the CPU's chains (16 simd lanes)
 *   and the kernel's (a lane's K / (32 ksplit) terms, then a tree) are at
 *   most K / 16 = 896 long here: ~2e-6, five times below the bound.
 * - 16-bit output, per element: |got - want| <= ulp_dt(|want|) +
 *   1e-5 sqrt(K) max_k |w_k x_k|. The two fp32 sums differ by about
 *   u sqrt(K) (rms of the partial sums) <= u K max|term| for random signs,
 *   which is below 1e-5 sqrt(K) max|term| while sqrt(K) <= 1e-5 / u = 167
 *   (K <= 27,000, beyond every K here); the roundings of two fp32 values
 *   that close to dt agree or differ by one ulp of dt (they can straddle a
 *   rounding boundary).
 */
#include <string.h>

#include "kernel_test.h"
#include "launch_plan.h"

static const sl_dtype_t DTS[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
#define N_DTS 3
static const int64_t NS[] = {1, 7, 256, 4096 + 3};
#define N_NS 4
static const int64_t KS[] = {1, 8, 64, 4096, 4099, 14336};
#define N_KS 6
#define GUARD 64 /* poisoned elements after the output that must stay poisoned */

static cudaStream_t stream;

/* A case's inputs: w (N, K) and in (SLK_GEMV_MAX_T, K) on host and device,
 * the device copies `off` elements past a 256-byte aligned allocation. */
typedef struct {
    sl_dtype_t dt;
    int64_t N, K;
    int off;
    float *w, *in, *want; /* want (SLK_GEMV_MAX_T, N): cpu_linear, fp32 */
    float *maxterm;       /* (SLK_GEMV_MAX_T, N): max_k |w[n, k] in[t, k]| */
    float *termnorm;      /* (SLK_GEMV_MAX_T, N): sqrt(sum_k (w[n, k] in[t, k])^2) */
    char *d_w, *d_in;     /* allocations; the arguments are + off elements */
} gemv_inputs_t;

static void inputs_init(gemv_inputs_t *c, sl_dtype_t dt, int64_t N, int64_t K, int off) {
    const int64_t T = SLK_GEMV_MAX_T;
    const size_t es = kt_size(dt);
    c->dt = dt, c->N = N, c->K = K, c->off = off;
    c->w = kt_fvec(N * K), c->in = kt_fvec(T * K), c->want = kt_fvec(T * N), c->maxterm = kt_fvec(T * N);
    c->termnorm = kt_fvec(T * N);
    kt_fill(c->w, N * K, -1.0f, 1.0f, dt);
    kt_fill(c->in, T * K, -1.0f, 1.0f, dt);
    void *raw_w = malloc((size_t)(N * K) * es), *raw_in = malloc((size_t)(T * K) * es);
    dtype_from_f32(raw_w, c->w, dt, N * K);
    dtype_from_f32(raw_in, c->in, dt, T * K);
    cpu_linear(c->want, c->in, raw_w, dt, T, N, K);
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double m = 0, ss = 0;
            for (int64_t k = 0; k < K; k++) {
                double term = (double)c->w[n * K + k] * c->in[t * K + k];
                m = fmax(m, fabs(term)), ss += term * term;
            }
            c->maxterm[t * N + n] = (float)m, c->termnorm[t * N + n] = (float)sqrt(ss);
        }
    KT_CUDA(cudaMalloc((void **)&c->d_w, (size_t)(N * K + off) * es));
    KT_CUDA(cudaMalloc((void **)&c->d_in, (size_t)(T * K + off) * es));
    KT_CUDA(cudaMemcpy(c->d_w + off * es, raw_w, (size_t)(N * K) * es, cudaMemcpyHostToDevice));
    KT_CUDA(cudaMemcpy(c->d_in + off * es, raw_in, (size_t)(T * K) * es, cudaMemcpyHostToDevice));
    free(raw_w), free(raw_in);
}

static void inputs_free(gemv_inputs_t *c) {
    free(c->w), free(c->in), free(c->want), free(c->maxterm), free(c->termnorm);
    cudaFree(c->d_w), cudaFree(c->d_in);
}

/* Runs slk_gemv for T rows into a poisoned output in out_dt and checks it; returns the output (T, N) as fp32. */
static float *run_case(const gemv_inputs_t *c, int64_t T, sl_dtype_t out_dt) {
    const int64_t N = c->N, K = c->K, n_out = T * N;
    const size_t es = kt_size(c->dt), oes = kt_size(out_dt);
    char ctx[160];
    snprintf(ctx, sizeof ctx, "gemv %s->%s T=%lld N=%lld K=%lld%s", kt_name(c->dt), kt_name(out_dt), (long long)T,
             (long long)N, (long long)K, c->off ? " misaligned" : "");
    void *d_out = NULL;
    KT_CUDA(cudaMalloc(&d_out, (size_t)(n_out + GUARD) * oes));
    KT_CUDA(cudaMemset(d_out, 0xff, (size_t)(n_out + GUARD) * oes)); /* NaN in every dtype */
    int rc = slk_gemv(d_out, c->d_in + c->off * es, c->d_w + c->off * es, T, N, K, c->dt, out_dt, stream);
    if (rc != 0) {
        fprintf(stderr, "  %s: launcher returned %d (%s)\n", ctx, rc, cudaGetErrorString((cudaError_t)rc));
        test_cur_failed = 1;
    }
    float *got = kt_fvec(n_out + GUARD);
    kt_download(got, d_out, n_out + GUARD, out_dt);
    cudaFree(d_out);

    kt_check_linear(ctx, got, c->want, n_out, GUARD, c->termnorm, c->maxterm, K, out_dt);
    return got;
}

static void run_all_t(const gemv_inputs_t *c, const int64_t *Ts, int n_T) {
    for (int i = 0; i < n_T; i++) {
        free(run_case(c, Ts[i], c->dt));
        if (c->dt != DTYPE_F32) free(run_case(c, Ts[i], DTYPE_F32));
    }
}

static const int64_t ALL_T[] = {1, 2, 3, 4, 5, 6, 7, 8};

static void test_gemv_matches_cpu_linear_for_every_t_dtype_and_shape(void) {
    for (int d = 0; d < N_DTS; d++)
        for (int i = 0; i < N_NS; i++)
            for (int j = 0; j < N_KS; j++) {
                if (kt_too_big(8 * NS[i] * KS[j])) continue;
                gemv_inputs_t c;
                inputs_init(&c, DTS[d], NS[i], KS[j], 0);
                run_all_t(&c, ALL_T, 8);
                inputs_free(&c);
            }
}

/* Base pointers one element off 16-byte alignment: every access one element. */
static void test_gemv_misaligned_pointers_take_the_scalar_path(void) {
    static const int64_t Ts[] = {1, 5, 8}, Ns[] = {7, 256}, Ks[] = {64, 4096};
    for (int d = 0; d < N_DTS; d++)
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 2; j++) {
                if (kt_too_big(8 * Ns[i] * Ks[j])) continue;
                gemv_inputs_t c;
                inputs_init(&c, DTS[d], Ns[i], Ks[j], 1);
                run_all_t(&c, Ts, 3);
                inputs_free(&c);
            }
}

/* The K slices of a row meet in a fixed order: two runs agree bit for bit
 * (K split over 8 warps at N = 256, over none at N = 4099). */
static void test_gemv_is_deterministic(void) {
    static const int64_t Ns[] = {256, 4096 + 3};
    for (int i = 0; i < 2; i++) {
        if (kt_too_big(2 * 8 * Ns[i] * 4096)) continue;
        gemv_inputs_t c;
        inputs_init(&c, DTYPE_BF16, Ns[i], 4096, 0);
        float *a = run_case(&c, 8, DTYPE_F32), *b = run_case(&c, 8, DTYPE_F32);
        CHECK(memcmp(a, b, (size_t)(8 * Ns[i]) * sizeof(float)) == 0);
        free(a), free(b);
        inputs_free(&c);
    }
}

static void test_gemv_rejects_what_it_does_not_take(void) {
    const int bad = (int)cudaErrorInvalidValue;
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, 0, 64, 64, DTYPE_BF16, DTYPE_BF16, stream), 0);
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, 1, 0, 64, DTYPE_BF16, DTYPE_F32, stream), 0);
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, SLK_GEMV_MAX_T + 1, 64, 64, DTYPE_BF16, DTYPE_BF16, stream), bad);
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, -1, 64, 64, DTYPE_BF16, DTYPE_BF16, stream), bad);
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, 1, 64, 64, DTYPE_F16, DTYPE_BF16, stream), bad);
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, 1, 64, 64, DTYPE_F32, DTYPE_F16, stream), bad);
    CHECK_EQ_INT(slk_gemv(NULL, NULL, NULL, 1, 64, 64, DTYPE_I32, DTYPE_I32, stream), bad);
    KT_CUDA(cudaStreamSynchronize(stream));
}

int main(void) {
    kt_require_gpu();
    test_seed();
    KT_CUDA(cudaStreamCreate(&stream));
    RUN(test_gemv_rejects_what_it_does_not_take);
    RUN(test_gemv_matches_cpu_linear_for_every_t_dtype_and_shape);
    RUN(test_gemv_misaligned_pointers_take_the_scalar_path);
    RUN(test_gemv_is_deterministic);
    kt_report_left_out();
    KT_CUDA(cudaStreamDestroy(stream));
    return test_summary();
}
