/* kernel_test.h - what the GPU parity tests share: device check, random
 * inputs, dtype round trips, and (from kernels/check.h, shared with the
 * kernel bench) the dtype-scaled comparison with the CPU twin.
 *
 * A test calls kt_require_gpu() first: without a usable CUDA device it exits
 * 77, which ctest reports as skipped (never as passed). Inputs are drawn from
 * test_rng() (SERVELAB_TEST_SEED), built in fp32, rounded to the kernel's
 * dtype, and the CPU twin runs on exactly the rounded values, so the only
 * difference left is the kernel's own arithmetic and its output rounding.
 */
#ifndef SERVELAB_KERNEL_TEST_H
#define SERVELAB_KERNEL_TEST_H

#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "ops_cpu.h"
#include "kernels.h"
#include "test.h"

static inline void kt_require_gpu(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: skipped\n");
        exit(77);
    }
}

#define KT_CUDA(call)                                                                        \
    do {                                                                                     \
        cudaError_t e_ = (call);                                                             \
        if (e_ != cudaSuccess) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                         \
        }                                                                                    \
    } while (0)

/* SERVELAB_TEST_MAX_WORK=N (tests/cuda-emu sets it: the emulator is slow) makes a
 * test leave out the cases whose work, a multiply-add count the test
 * estimates, is over N; kt_report_left_out() prints how many. Unset or 0: no
 * limit, every case runs. */
static int64_t kt_n_left_out;
static inline int kt_too_big(int64_t work) {
    static int64_t cap = -1;
    if (cap < 0) {
        const char *env = getenv("SERVELAB_TEST_MAX_WORK");
        cap = env ? strtoll(env, NULL, 10) : 0;
        if (cap > 0) printf("cases over %lld multiply-adds are left out (SERVELAB_TEST_MAX_WORK)\n", (long long)cap);
    }
    if (cap > 0 && work > cap) {
        kt_n_left_out++;
        return 1;
    }
    return 0;
}
static inline void kt_report_left_out(void) {
    if (kt_n_left_out) printf("%lld case(s) left out by SERVELAB_TEST_MAX_WORK\n", (long long)kt_n_left_out);
}

/* n floats (at least one), or abort. */
static inline float *kt_fvec(int64_t n) {
    float *p = (float *)malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

/* The spacing of dt's values at |x| (its ulp there; subnormals ignored: the outputs compared are far above them). */
static inline double kt_ulp_at(double x, sl_dtype_t dt) {
    int e;
    frexp(fabs(x) > 1e-30 ? fabs(x) : 1e-30, &e); /* |x| in [2^(e-1), 2^e) */
    int mant = dt == DTYPE_F32 ? 24 : dt == DTYPE_BF16 ? 8 : 11;
    return ldexp(1.0, e - mant);
}

/* A linear's output (T, N) as got (n = T * N elements, then `guard` that
 * must stay poisoned) against want, the CPU's fp32 sums of the same products:
 * every element written, none past the end; then test_kernels_gemv.c's
 * tolerances (its header derives them): an fp32 output within 1e-5 of
 * ||scale||, scale_i = max(|want_i|, termnorm_i); a 16-bit one, per element,
 * within one ulp of dt plus 1e-5 sqrt(K) maxterm_i of want rounded to dt.
 * Reports under ctx and marks the test failed. */
static inline void kt_check_linear(const char *ctx, const float *got, const float *want, int64_t n, int64_t guard,
                                   const float *termnorm, const float *maxterm, int64_t K, sl_dtype_t dt) {
    int64_t unwritten = 0, clobbered = 0;
    for (int64_t i = 0; i < n; i++) unwritten += isnan(got[i]);
    for (int64_t i = n; i < n + guard; i++) clobbered += !isnan(got[i]);
    if (unwritten || clobbered) {
        fprintf(stderr, "  %s: %lld outputs not written, %lld guard elements after the output overwritten\n", ctx,
                (long long)unwritten, (long long)clobbered);
        test_cur_failed = 1;
        return;
    }
    if (dt == DTYPE_F32) {
        double d2 = 0, s2 = 0;
        for (int64_t i = 0; i < n; i++) {
            double d = (double)got[i] - want[i], sc = fmax(fabs((double)want[i]), termnorm[i]);
            d2 += d * d, s2 += sc * sc;
        }
        double rel = s2 > 0 ? sqrt(d2 / s2) : sqrt(d2);
        if (!(rel < 1e-5)) {
            fprintf(stderr, "  %s: relative error %.3g (limit 1e-5)\n", ctx, rel);
            test_cur_failed = 1;
        }
        return;
    }
    int64_t worst = -1;
    double worst_r = 0;
    float worst_want = 0;
    for (int64_t i = 0; i < n; i++) {
        float w;
        uint16_t b;
        dtype_from_f32(&b, &want[i], dt, 1), dtype_to_f32(&w, &b, dt, 1);
        double d = fabs((double)got[i] - w);
        double lim = kt_ulp_at(fmax(fabs((double)got[i]), fabs((double)w)), dt) + 1e-5 * sqrt((double)K) * maxterm[i];
        if (!(d <= lim) && (worst < 0 || d / lim > worst_r)) worst = i, worst_r = d / lim, worst_want = w;
    }
    if (worst >= 0) {
        fprintf(stderr, "  %s: element %lld got %.8g want %.8g (%.2fx the tolerance)\n", ctx, (long long)worst,
                got[worst], worst_want, worst_r);
        test_cur_failed = 1;
    }
}

/* n uniform values in [lo, hi) from test_rng(), rounded to dt in place (so host and device agree). */
static inline void kt_fill(float *x, int64_t n, float lo, float hi, sl_dtype_t dt) {
    kt_fill_with(test_rng, x, n, lo, hi, dt);
}

/* A device copy of fp32 host values in dt. */
static inline void *kt_upload(const float *x, int64_t n, sl_dtype_t dt) {
    size_t bytes = (size_t)n * kt_size(dt);
    void *tmp = malloc(bytes ? bytes : 1), *d = NULL;
    dtype_from_f32(tmp, x, dt, n);
    KT_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
    KT_CUDA(cudaMemcpy(d, tmp, bytes, cudaMemcpyHostToDevice));
    free(tmp);
    return d;
}

static inline void *kt_upload_raw(const void *x, size_t bytes) {
    void *d = NULL;
    KT_CUDA(cudaMalloc(&d, bytes ? bytes : 1));
    KT_CUDA(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* Device dt values back as fp32 (synchronizes). */
static inline void kt_download(float *x, const void *d, int64_t n, sl_dtype_t dt) {
    size_t bytes = (size_t)n * kt_size(dt);
    void *tmp = malloc(bytes ? bytes : 1);
    KT_CUDA(cudaDeviceSynchronize());
    KT_CUDA(cudaMemcpy(tmp, d, bytes, cudaMemcpyDeviceToHost));
    dtype_to_f32(x, tmp, dt, n);
    free(tmp);
}

#endif
