/* kbench.c - servelab-kernel-bench: each CUDA kernel (and the cuBLAS GEMMs of
 * the linear layers) at the shapes of real models, validated against its CPU
 * twin, then timed, then set against a roofline measured in the same run.
 *
 *   servelab-kernel-bench [--dtype bf16] [--iters 50] [--quick] [--only NAME,..] [--json FILE]
 *
 * The roofline is measured, not looked up: the device-to-device copy rate of
 * 1 GiB (read + write bytes, median) and the cuBLAS GEMM rate of
 * 8192 x 8192 x 8192 in the bench's dtype (median), as llm.c's dev/cuda
 * compares against what the same card does on the same day. Timing: warm-up
 * launches, then --iters launches, each after an L2 flush (a cudaMemsetAsync
 * of twice the L2) and between two events; the median is reported. Without a
 * GPU: one line and exit 77, like the parity tests.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"

static char g_case[192] = "setup";

void kb_die_cuda(const char *call, int err, const char *file, int line) {
    fprintf(stderr, "servelab-kernel-bench: %s:%d: %s failed: %s (%s) [case: %s]\n", file, line, call,
            cudaGetErrorString((cudaError_t)err), cudaGetErrorName((cudaError_t)err), g_case);
    exit(1);
}

void kb_die_blas(const char *call, int status, const char *file, int line) {
    fprintf(stderr, "servelab-kernel-bench: %s:%d: %s failed: %s [case: %s]\n", file, line, call,
            cublasGetStatusString((cublasStatus_t)status), g_case);
    exit(1);
}

void kb_set_case(const char *kernel, const char *model, const char *shape) {
    snprintf(g_case, sizeof g_case, "%s %s %s", kernel, model, shape);
}

void *kb_try_alloc(size_t bytes) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* not sticky: clear it so later calls do not report it */
        return NULL;
    }
    if (e != cudaSuccess) kb_die_cuda("cudaMalloc", (int)e, __FILE__, __LINE__);
    return p;
}

void kb_free_all(void **ptrs, int n) {
    for (int i = 0; i < n; i++)
        if (ptrs[i]) KB_CUDA(cudaFree(ptrs[i]));
}

/* ---- timing and the report ------------------------------------------------------- */

double kb_time_us(kb_ctx_t *c, kb_launch_fn fn, void *arg) {
    for (int i = 0; i < c->opts.warmup; i++) fn(c, arg);
    for (int i = 0; i < c->opts.iters; i++) {
        /* A new byte each time, so no layer can skip a write it has seen before. */
        KB_CUDA(cudaMemsetAsync(c->flush, i & 0xff, c->flush_bytes, c->stream));
        KB_CUDA(cudaEventRecord(c->ev[2 * i], c->stream));
        fn(c, arg);
        KB_CUDA(cudaEventRecord(c->ev[2 * i + 1], c->stream));
    }
    KB_CUDA(cudaStreamSynchronize(c->stream));
    KB_CUDA(cudaGetLastError());
    double *us = malloc((size_t)c->opts.iters * sizeof *us);
    if (!us) abort();
    for (int i = 0; i < c->opts.iters; i++) {
        float ms = 0;
        KB_CUDA(cudaEventElapsedTime(&ms, c->ev[2 * i], c->ev[2 * i + 1]));
        us[i] = (double)ms * 1e3;
    }
    double m = kb_median(us, c->opts.iters);
    free(us);
    return m;
}

static kb_result_t *push_result(kb_ctx_t *c) {
    if (c->n_results == c->cap_results) {
        c->cap_results = c->cap_results ? 2 * c->cap_results : 64;
        c->results = realloc(c->results, (size_t)c->cap_results * sizeof *c->results);
        if (!c->results) abort();
    }
    kb_result_t *r = &c->results[c->n_results++];
    memset(r, 0, sizeof *r);
    return r;
}

void kb_report(kb_ctx_t *c, const char *kernel, const char *model, const char *shape, double median_us,
               double bytes, double flops, kb_check_t check) {
    kb_result_t *r = push_result(c);
    snprintf(r->kernel, sizeof r->kernel, "%s", kernel);
    snprintf(r->model, sizeof r->model, "%s", model);
    snprintf(r->shape, sizeof r->shape, "%s", shape);
    snprintf(r->dtype, sizeof r->dtype, "%s", kb_dtype_short(c->dt));
    r->median_us = median_us, r->bytes = bytes, r->flops = flops, r->check = check;
    kb_roofline(r, c->copy_gbs, c->gemm_tflops);
    if (check == KB_CHECK_FAIL) c->n_fail++;
    char line[256];
    printf("%s\n", kb_format_row(line, sizeof line, r));
    fflush(stdout);
}

void kb_skip(kb_ctx_t *c, const char *kernel, const char *model, const char *shape, const char *why) {
    printf("%-14s %-15s %-32s SKIP: %s\n", kernel, model, shape, why);
    fflush(stdout);
    c->n_skip++;
}

/* ---- the measured roofline ---------------------------------------------------------- */

typedef struct {
    void *dst;
    const void *src;
    size_t bytes;
} copy_arg_t;

static void launch_copy(kb_ctx_t *c, void *arg) {
    copy_arg_t *a = arg;
    KB_CUDA(cudaMemcpyAsync(a->dst, a->src, a->bytes, cudaMemcpyDeviceToDevice, c->stream));
}

typedef struct {
    void *out, *in, *w;
    int64_t n;
} peak_arg_t;

static void launch_peak_gemm(kb_ctx_t *c, void *arg) {
    peak_arg_t *a = arg;
    kb_gemm(c, a->out, kb_cuda_type(c->dt), a->in, a->w, a->n, a->n, a->n);
}

/* Copy bandwidth: 1 GiB (less if the device cannot hold two), device to device. */
static void measure_copy(kb_ctx_t *c) {
    size_t bytes = (size_t)1 << 30;
    void *src = NULL, *dst = NULL;
    for (; bytes >= ((size_t)64 << 20); bytes /= 2) {
        src = kb_try_alloc(bytes);
        dst = src ? kb_try_alloc(bytes) : NULL;
        if (dst) break;
        if (src) KB_CUDA(cudaFree(src));
        src = NULL;
    }
    if (!dst) {
        fprintf(stderr, "servelab-kernel-bench: cannot allocate 2 x 64 MiB for the copy roofline\n");
        exit(1);
    }
    char shape[64];
    snprintf(shape, sizeof shape, "bytes=%zu", bytes);
    kb_set_case("roofline_copy", "-", shape);
    KB_CUDA(cudaMemsetAsync(src, 0x3c, bytes, c->stream));
    copy_arg_t a = {dst, src, bytes};
    double us = kb_time_us(c, launch_copy, &a);
    c->copy_gbs = 2.0 * (double)bytes / (us * 1e-6) / 1e9;
    kb_report(c, "roofline_copy", "-", shape, us, 2.0 * (double)bytes, 0.0, KB_CHECK_NONE);
    KB_CUDA(cudaFree(src));
    KB_CUDA(cudaFree(dst));
}

/* The cuBLAS GEMM rate at 8192^3, inputs in the bench's dtype, fp32 compute
 * (what the linear layers run), on random values: zeros would draw less power. */
static void measure_gemm(kb_ctx_t *c) {
    const int64_t n = 8192;
    const size_t bytes = (size_t)(n * n) * (size_t)c->es;
    peak_arg_t a = {kb_try_alloc(bytes), kb_try_alloc(bytes), kb_try_alloc(bytes), n};
    if (!a.out || !a.in || !a.w) {
        fprintf(stderr, "servelab-kernel-bench: cannot allocate 3 x %zu bytes for the GEMM roofline\n", bytes);
        exit(1);
    }
    char shape[64];
    snprintf(shape, sizeof shape, "T=%lld,N=%lld,K=%lld", (long long)n, (long long)n, (long long)n);
    kb_set_case("roofline_gemm", "-", shape);
    kb_pattern_t p;
    kb_pattern_init(&p, -1.0f, 1.0f, c->dt);
    kb_fill(c, a.in, n * n, c->dt, &p, 0);
    kb_fill(c, a.w, n * n, c->dt, &p, 12345);
    kb_pattern_free(&p);
    double us = kb_time_us(c, launch_peak_gemm, &a);
    double flops = kb_flops_gemm(n, n, n);
    c->gemm_tflops = flops / (us * 1e-6) / 1e12;
    kb_report(c, "roofline_gemm", "-", shape, us, kb_bytes_gemm(n, n, n, c->es, c->es), flops, KB_CHECK_NONE);
    void *ptrs[3] = {a.out, a.in, a.w};
    kb_free_all(ptrs, 3);
}

/* ---- main ------------------------------------------------------------------------------ */

static void setup(kb_ctx_t *c, char *device, size_t device_cap) {
    struct cudaDeviceProp prop;
    KB_CUDA(cudaSetDevice(0));
    KB_CUDA(cudaGetDeviceProperties(&prop, 0));
    snprintf(device, device_cap, "%s", prop.name);
    KB_CUDA(cudaStreamCreate(&c->stream));
    c->flush_bytes = 2 * (size_t)(prop.l2CacheSize > 0 ? prop.l2CacheSize : 64 << 20);
    KB_CUDA(cudaMalloc(&c->flush, c->flush_bytes));
    c->ev = malloc(2 * (size_t)c->opts.iters * sizeof *c->ev);
    if (!c->ev) abort();
    for (int i = 0; i < 2 * c->opts.iters; i++) KB_CUDA(cudaEventCreate(&c->ev[i]));
    KB_BLAS(cublasCreate(&c->blas));
    KB_BLAS(cublasSetStream(c->blas, c->stream));
    /* As cuda_backend.c: default math (no TF32 for fp32), fp32 split-K reductions. */
    KB_BLAS(cublasSetMathMode(c->blas,
                              (cublasMath_t)(CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
    size_t free_b = 0, total_b = 0;
    KB_CUDA(cudaMemGetInfo(&free_b, &total_b));
    printf("device: %s (sm_%d%d, %d SMs, L2 %.1f MiB, %.1f GiB, %.1f GiB free)\n", prop.name, prop.major, prop.minor,
           prop.multiProcessorCount, prop.l2CacheSize / 1048576.0, (double)total_b / 1073741824.0,
           (double)free_b / 1073741824.0);
    printf("dtype %s, %d warm-up + %d timed launches per case (median), L2 flushed with %.0f MiB before each\n",
           kb_dtype_short(c->dt), c->opts.warmup, c->opts.iters, (double)c->flush_bytes / 1048576.0);
}

static void teardown(kb_ctx_t *c) {
    for (int i = 0; i < 2 * c->opts.iters; i++) KB_CUDA(cudaEventDestroy(c->ev[i]));
    free(c->ev);
    KB_CUDA(cudaFree(c->flush));
    KB_BLAS(cublasDestroy(c->blas));
    KB_CUDA(cudaStreamDestroy(c->stream));
    free(c->results);
}

int main(int argc, char **argv) {
    kb_ctx_t c;
    memset(&c, 0, sizeof c);
    char err[256];
    int pr = kb_parse_args(argc, argv, &c.opts, err, sizeof err);
    if (pr == 1) {
        fputs(kb_usage, stdout);
        return 0;
    }
    if (pr < 0) {
        fprintf(stderr, "servelab-kernel-bench: %s\n%s", err, kb_usage);
        return 2;
    }
    int n_dev = 0;
    cudaError_t e = cudaGetDeviceCount(&n_dev);
    if (e != cudaSuccess || n_dev == 0) {
        printf("no CUDA device: servelab-kernel-bench skipped (cudaGetDeviceCount: %s)\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    c.dt = c.opts.dt;
    c.es = kb_elem_bytes(c.dt);
    char device[256];
    setup(&c, device, sizeof device);
    kb_seed();

    char line[256];
    printf("\n%s\n", kb_format_header(line, sizeof line));
    measure_copy(&c);
    measure_gemm(&c);
    for (int i = 0; i < kb_n_models; i++) {
        const kb_model_t *m = &kb_models[i];
        if (c.opts.model && strcmp(c.opts.model, m->name)) continue;
        kb_bench_elementwise(&c, m);
        kb_bench_attention(&c, m);
        kb_bench_gemm(&c, m);
        kb_bench_awq(&c, m);
        kb_bench_sample(&c, m);
    }

    printf("\nroofline (measured in this run): copy %.1f GB/s (read + write), cuBLAS %s GEMM %.1f TFLOP/s\n",
           c.copy_gbs, kb_dtype_short(c.dt), c.gemm_tflops);
    for (int i = 0; i < c.n_results; i++) printf("%s\n", kb_format_result_line(line, sizeof line, &c.results[i]));
    if (c.opts.json_path) {
        FILE *f = fopen(c.opts.json_path, "w");
        if (!f || kb_write_json(f, device, &c.opts, c.copy_gbs, c.gemm_tflops, c.results, c.n_results) ||
            fclose(f)) {
            fprintf(stderr, "servelab-kernel-bench: cannot write %s\n", c.opts.json_path);
            return 1;
        }
    }
    int n_checked = 0;
    for (int i = 0; i < c.n_results; i++) n_checked += c.results[i].check != KB_CHECK_NONE;
    printf("%d results, %d validated against the CPU: %d FAIL; %d skipped\n", c.n_results, n_checked, c.n_fail,
           c.n_skip);
    int fails = c.n_fail;
    teardown(&c);
    if (fails) {
        fprintf(stderr, "servelab-kernel-bench: %d validation FAIL(s)\n", fails);
        return 1;
    }
    return 0;
}
