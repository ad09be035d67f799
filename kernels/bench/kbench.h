/* kbench.h - what the parts of servelab-kernel-bench share: the run's state,
 * the timing harness, checked CUDA calls, and the tiled random inputs.
 *
 * Internal to kernels/bench (a CUDA program, so CUDA types are fine here).
 * A case allocates its buffers, fills them (kb_fill), launches once and
 * validates a subset of rows against the CPU op, then hands a launch
 * callback to kb_time and its counts to kb_report, and frees everything.
 * Every CUDA or cuBLAS failure exits 1 with one line naming the call; only
 * running out of device memory for a case's buffers skips that case.
 */
#ifndef SERVELAB_KBENCH_H
#define SERVELAB_KBENCH_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdint.h>

#include "kbench_report.h"

typedef struct {
    kb_opts_t opts;
    sl_dtype_t dt;
    int64_t es;                 /* bytes per element of dt */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *flush;                /* written before every timed launch: 2x the L2 */
    size_t flush_bytes;
    cudaEvent_t *ev;            /* 2 * iters: start and stop of each timed launch */
    double copy_gbs;            /* measured roofline (0 until measured) */
    double gemm_tflops;
    kb_result_t *results;
    int n_results, cap_results;
    int n_fail, n_skip;
} kb_ctx_t;

/* ---- checked calls ------------------------------------------------------------ */

void kb_die_cuda(const char *call, int err, const char *file, int line);
void kb_die_blas(const char *call, int status, const char *file, int line);

#define KB_CUDA(call)                                                                      \
    do {                                                                                   \
        cudaError_t e_ = (call);                                                           \
        if (e_ != cudaSuccess) kb_die_cuda(#call, (int)e_, __FILE__, __LINE__);            \
    } while (0)
#define KB_BLAS(call)                                                                      \
    do {                                                                                   \
        cublasStatus_t s_ = (call);                                                        \
        if (s_ != CUBLAS_STATUS_SUCCESS) kb_die_blas(#call, (int)s_, __FILE__, __LINE__);  \
    } while (0)
/* A slk_* launcher returns 0 or the cudaError_t of its launch. */
#define KB_LAUNCH(call)                                                                    \
    do {                                                                                   \
        int r_ = (call);                                                                   \
        if (r_ != 0) kb_die_cuda(#call, r_, __FILE__, __LINE__);                           \
    } while (0)

/* Names the case that a later failure message reports. */
void kb_set_case(const char *kernel, const char *model, const char *shape);

/* cudaMalloc, or NULL when the device is out of memory (the error is cleared);
 * any other failure exits. */
void *kb_try_alloc(size_t bytes);
/* Frees every non-NULL pointer of ptrs[0..n). */
void kb_free_all(void **ptrs, int n);

/* ---- timing --------------------------------------------------------------------- */

/* Enqueues one launch of the case on c->stream (checked). */
typedef void (*kb_launch_fn)(kb_ctx_t *c, void *arg);

/* opts.warmup untimed launches, then opts.iters launches each preceded by
 * an L2 flush (cudaMemsetAsync of c->flush) and bracketed by events; returns
 * the median in microseconds. */
double kb_time_us(kb_ctx_t *c, kb_launch_fn fn, void *arg);

/* Records one result (roofline from c), prints its table row, counts a FAIL. */
void kb_report(kb_ctx_t *c, const char *kernel, const char *model, const char *shape, double median_us,
               double bytes, double flops, kb_check_t check);
/* Prints a table line saying the case was skipped and why. */
void kb_skip(kb_ctx_t *c, const char *kernel, const char *model, const char *shape, const char *why);

/* ---- inputs (kbench_check.c) ---------------------------------------------------------
 * A buffer of n elements of dt is filled with a random pattern of KB_PERIOD
 * values, repeated: element e holds pattern[(e + offset) % KB_PERIOD]. Filling
 * many GiB costs one small upload and a few device copies, and the host can
 * rebuild any element for the CPU reference without keeping a copy. The
 * period is odd, so rows of a power-of-two length never repeat each other. */
#define KB_PERIOD ((int64_t)(1 << 20) + 7)

typedef struct {
    float *v;                   /* KB_PERIOD values, already rounded to dt */
} kb_pattern_t;

/* Seeds the generator (SERVELAB_TEST_SEED, printed). */
void kb_seed(void);
/* Uniform values in [lo, hi), rounded to dt. */
void kb_pattern_init(kb_pattern_t *p, float lo, float hi, sl_dtype_t dt);
void kb_pattern_free(kb_pattern_t *p);
static inline float kb_pattern_at(const kb_pattern_t *p, int64_t e) { return p->v[e % KB_PERIOD]; }
/* dev[e] = pattern[(e + offset) % KB_PERIOD] for e in [0, n), in dt; synchronizes. */
void kb_fill(kb_ctx_t *c, void *dev, int64_t n, sl_dtype_t dt, const kb_pattern_t *p, int64_t offset);
/* host[i] = pattern[(first + i + offset) % KB_PERIOD] for i in [0, n). */
void kb_pattern_read(float *host, int64_t first, int64_t n, const kb_pattern_t *p, int64_t offset);
/* A uniform integer in [0, n). */
uint64_t kb_rand_below(uint64_t n);

/* n elements of dt at dev + first elements, as fp32 on the host (synchronizes). */
void kb_download(float *host, const void *dev, int64_t first, int64_t n, sl_dtype_t dt);
/* In-place rounding of fp32 values to dt (what a store in dt keeps). */
void kb_round(float *x, int64_t n, sl_dtype_t dt);
/* fp32 values as dt's bytes (malloc'd), for the CPU ops that read a dt array. */
void *kb_host_dt(const float *x, int64_t n, sl_dtype_t dt);

/* |got - want| <= atol + rtol |want|, rtol = ulps * (one rounding of dt),
 * atol = rtol * max|want| * floor_frac (kernels/check.h's kt_close, the
 * parity tests' rule): 1 when close, else prints the worst element under `what`. */
int kb_close(const char *what, const float *got, const float *want, int64_t n, sl_dtype_t dt, double ulps,
             double floor_frac);
/* The relative size of one rounding in dt. */
double kb_eps(sl_dtype_t dt);

/* Up to 4 distinct sample indices in [0, n), ascending: 0, n / 3, 2n / 3, n - 1. Returns the count. */
int kb_sample_rows(int64_t n, int64_t rows[4]);

/* ---- the cases ---------------------------------------------------------------------- */

void kb_bench_elementwise(kb_ctx_t *c, const kb_model_t *m);  /* kbench_ops.c */
void kb_bench_attention(kb_ctx_t *c, const kb_model_t *m);    /* kbench_attn.c */
void kb_bench_gemm(kb_ctx_t *c, const kb_model_t *m);         /* kbench_gemm.c */
void kb_bench_gemm_layer(kb_ctx_t *c, const kb_model_t *m, int64_t T); /* kbench_gemm.c */
void kb_bench_awq(kb_ctx_t *c, const kb_model_t *m);          /* kbench_awq.c */
void kb_bench_sample(kb_ctx_t *c, const kb_model_t *m);       /* kbench_sample.c */
/* One cuBLAS GEMM as cuda_backend.c's gemm(): out (T, N) in ctype = in (T, K) . W (N, K)^T,
 * inputs in c->dt, fp32 compute. */
void kb_gemm(kb_ctx_t *c, void *out, cudaDataType_t ctype, const void *in, const void *w, int64_t T, int64_t N,
             int64_t K);
cudaDataType_t kb_cuda_type(sl_dtype_t dt);

#endif
