/* kernel_test.h - what the GPU parity tests share: device check, random
 * inputs, dtype round trips and dtype-scaled comparison with the CPU twin.
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

static inline size_t kt_size(sl_dtype_t dt) { return dt == DTYPE_F32 ? 4 : 2; }
static inline const char *kt_name(sl_dtype_t dt) {
    return dt == DTYPE_F32 ? "f32" : dt == DTYPE_BF16 ? "bf16" : "f16";
}

/* n uniform values in [lo, hi), rounded to dt in place (so host and device agree). */
static inline void kt_fill(float *x, int64_t n, float lo, float hi, sl_dtype_t dt) {
    for (int64_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)((double)(test_rng() >> 11) / 9007199254740992.0);
    if (dt != DTYPE_F32) {
        void *tmp = malloc((size_t)n * 2);
        dtype_from_f32(tmp, x, dt, n);
        dtype_to_f32(x, tmp, dt, n);
        free(tmp);
    }
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

/* Relative tolerance of one rounding of the output in dt, times `ulps`. */
static inline double kt_eps(sl_dtype_t dt) { return dt == DTYPE_F32 ? 1.2e-7 : dt == DTYPE_BF16 ? 7.9e-3 : 9.8e-4; }

/* Compares got with want elementwise: |got - want| <= atol + rtol * |want|,
 * rtol = ulps * kt_eps(dt), atol = rtol * (the largest |want|) * floor_frac.
 * Prints the worst element on failure. Returns 1 when every element is close. */
static inline int kt_close(const char *what, const float *got, const float *want, int64_t n, sl_dtype_t dt,
                           double ulps, double floor_frac) {
    double maxw = 0;
    for (int64_t i = 0; i < n; i++) maxw = fmax(maxw, fabs((double)want[i]));
    double rtol = ulps * kt_eps(dt), atol = rtol * maxw * floor_frac + 1e-30;
    int64_t worst = -1;
    double worst_r = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)want[i]), lim = atol + rtol * fabs((double)want[i]);
        if (!(d <= lim) && (worst < 0 || d / lim > worst_r)) worst = i, worst_r = d / lim;
    }
    if (worst >= 0) {
        fprintf(stderr, "  %s (%s): element %lld got %.8g want %.8g (%.1fx the tolerance)\n", what, kt_name(dt),
                (long long)worst, got[worst], want[worst], worst_r);
        return 0;
    }
    return 1;
}

#endif
