/* cuda_backend.c - the ops table over the CUDA kernels (kernels/cuda) and cuBLAS.
 *
 * Memory is plain cudaMalloc (no managed memory); every op is enqueued on one
 * non-blocking stream; activations, the KV cache and every weight are in the
 * backend's activation dtype (F32, BF16 or F16; engine_boot.c converts weights at
 * load), but for an fp8 KV cache (--kv-cache-dtype fp8 / fp8_e5m2, opts.kv_fp8,
 * with 16-bit activations: rope_kv_write stores fp8 codes, attention widens
 * them in registers; kernels/cuda/fp8.cuh). linear and logits with at most GEMV_MAX_T (2) rows take the GEMV
 * kernel (kernels/cuda/gemv.cu: reads each weight row once, where cuBLAS's
 * tiles are mostly idle); with more, cublasGemmEx. Both accumulate in fp32
 * (cuBLAS: CUBLAS_COMPUTE_32F, default math without reduced-precision
 * reductions, no TF32 for fp32). A decode step under a CUDA graph pads its
 * batch to 1, 2, 4, 8, 16, ...: the graphs of batch 1 and 2 run the GEMV
 * kernel, from 4 up cuBLAS; eager steps pick by their own T (a prefill chunk
 * of 1 or 2 tokens takes the GEMV kernel too). The mapping
 * of our row-major layout onto cuBLAS's column-major one is written at
 * gemm(). Uploads smaller than 1 MiB go
 * through a pinned staging buffer (no stream sync per upload; the staging
 * area is reused only after an event says its copies are done); larger ones
 * sync, so the caller may free its source at once. download waits.
 * CUDA graphs: graph_begin/graph_end capture the ops in between from the
 * stream (relaxed mode: nothing between them allocates or waits, which the
 * code below enforces, but cuBLAS and the kernels' shared-memory opt-ins may
 * make runtime calls that stricter modes refuse). cuBLAS gets a fixed
 * workspace (cublasSetWorkspace), so no GEMM allocates while capturing; a
 * step for a graph (meta->for_graph) puts its attention partials in a
 * workspace of their own, sized by the warm-up run before each capture;
 * a graph holds its address, so when a later (lazily captured, larger)
 * size outgrows it, the old one is kept for the graphs that use it and a
 * new one is allocated. Eager steps keep growing theirs as contexts grow.
 * Errors: at init one line with a hint; in an op nothing exits, the first
 * failure is recorded, later ops are skipped, and last_error hands it over
 * (ops.h). SERVELAB_CUDA_SYNC_OPS=1 syncs after every op so an asynchronous
 * kernel fault is pinned on the op that caused it.
 * Compiled to nothing without SERVELAB_HAVE_CUDA.
 */
#ifdef SERVELAB_HAVE_CUDA

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "launch_plan.h"
#include "servelab/core.h"
#include "servelab/ops.h"

#define STAGING_BYTES ((size_t)1 << 20)
/* The most rows for which linear and logits take slk_gemv rather than cuBLAS.
 * The kernel takes up to SLK_GEMV_MAX_T (8), but measured on an H200 (bf16,
 * servelab-kernel-bench gemv rows, llama-3-8b and TinyLlama linears) it is
 * faster than cuBLAS at T = 1 and 2 on every shape (T = 1: q 15.2 vs 18.5 us,
 * down 37.0 vs 42.1, TinyLlama k/v 5.3 vs 8.1, lm_head a tie) and slower from
 * T = 4 (llama-3-8b q 20.9 vs 19.2 us, 27.6 vs 18.5 at T = 8: fp32 FMAs on
 * the CUDA cores against cuBLAS's tensor cores). */
#define GEMV_MAX_T 2
_Static_assert(GEMV_MAX_T <= SLK_GEMV_MAX_T, "slk_gemv takes at most SLK_GEMV_MAX_T rows");
/* cuBLAS's workspace: what NVIDIA recommends for Hopper (32 MiB). */
#define BLAS_WORKSPACE_BYTES ((size_t)32 << 20)
/* Graph workspaces outgrown while graphs still use them (lazy capture, smaller sizes first). */
#define MAX_RETIRED 64
#define STAGING_ALIGN ((size_t)256)
#define HINT_CPU "Hint: run with --device cpu"

typedef struct {
    int device;
    sl_dtype_t dt;
    sl_dtype_t kv_dt;       /* the KV cache: dt, or fp8 (opts.kv_fp8) */
    cudaStream_t stream;
    cublasHandle_t blas;
    void *attn_ws;          /* slk_attention's split partials, grown on demand */
    size_t attn_ws_bytes;
    void *graph_ws;         /* the same for steps of CUDA graphs (below) */
    size_t graph_ws_bytes;
    void *retired_ws[MAX_RETIRED]; /* earlier graph workspaces, still read by the graphs captured on them */
    int n_retired;
    void *blas_ws;          /* cuBLAS's workspace (BLAS_WORKSPACE_BYTES) */
    void *awq_ws;           /* the AWQ tensor-core kernel's split partials: its fixed bound, at first use */
    size_t awq_ws_bytes;
    void *awq_w;            /* an AWQ linear dequantized for cuBLAS (awq_linear), the largest one */
    size_t awq_w_bytes;
    void *sample_ws;        /* slk_sample's scratch: zero between calls (zeroed when it grows) */
    size_t sample_ws_bytes;
    void *sample_in;        /* rows, then ids, then bias, uploaded for slk_sample */
    size_t sample_in_bytes;
    sample_result_t *sample_out;
    size_t sample_out_bytes;
    int capturing;          /* between graph_begin and graph_end */
    int n_graphs;           /* graphs alive */
    float *d_logits;        /* (S, V) fp32 logits on the device before download */
    size_t d_logits_bytes;
    uint8_t *staging;       /* pinned host memory for small uploads */
    size_t staging_off;
    cudaEvent_t staging_done; /* recorded after the last copy out of staging */
    int sync_ops;           /* SERVELAB_CUDA_SYNC_OPS: sync and check after every op */
    int failed;             /* an op failed since the last last_error() */
    int fatal;              /* the failure is a sticky one: the context is unusable for good */
    char error[SL_ERR_LEN];
} cuda_ctx_t;

/* The backends of this process: one per tensor-parallel rank (instance). */
static cuda_ctx_t g_ctx[CUDA_MAX_INSTANCES];
static sl_ops_t g_ops[CUDA_MAX_INSTANCES];
static int g_ready[CUDA_MAX_INSTANCES];

/* ---- errors ----------------------------------------------------------------- */

/* Records the first failure since the last last_error(); later ones are consequences. */
static void record(cuda_ctx_t *c, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void record(cuda_ctx_t *c, int line, const char *fmt, ...) {
    if (c->failed) return;
    c->failed = 1;
    char what[SL_ERR_LEN - 64];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    snprintf(c->error, sizeof c->error, "%s (cuda_backend.c:%d)", what, line);
}

/* Errors after which, as the CUDA documentation says of them, "the process
 * is left in an inconsistent state and any further CUDA work will return
 * the same error": only a new process recovers. */
static int is_sticky(cudaError_t e) {
    switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
        return 1;
    default:
        return 0;
    }
}

/* After a failure e: clears the runtime's error state (so the next call does
 * not report e again) and says whether the context is lost. A sticky error
 * survives the clearing, so the peek after it catches those the list above
 * misses (cudaErrorUnknown, say). */
static int clear_is_sticky(cudaError_t e) {
    (void)cudaGetLastError();
    return is_sticky(e) || cudaPeekAtLastError() != cudaSuccess;
}

static int cuda_ok(cuda_ctx_t *c, cudaError_t e, const char *call, int line) {
    if (e == cudaSuccess) return 1;
    int sticky = clear_is_sticky(e);
    /* A launch returns the first error pending, which may be an earlier
     * kernel's asynchronous fault: say so rather than blame this call. */
    record(c, line, "CUDA error: %s (%s%s)", cudaGetErrorString(e), call,
           sticky ? "; an earlier kernel's fault can surface here" : "");
    if (sticky) c->fatal = 1;
    return 0;
}
/* CU(c, cudaMemcpyAsync, (dst, src, ...)): call, check, name the call. */
#define CU(c, fn, args) cuda_ok((c), fn args, #fn, __LINE__)

/* A cuBLAS failure may come with a CUDA error underneath (an execution
 * failure after a fault): name it too, clear it, and mark a lost context. */
static int blas_ok(cuda_ctx_t *c, cublasStatus_t s, const char *call, int line) {
    if (s == CUBLAS_STATUS_SUCCESS) return 1;
    cudaError_t e = cudaPeekAtLastError();
    if (e == cudaSuccess) {
        record(c, line, "cuBLAS error: %s (%s)", cublasGetStatusString(s), call);
        return 0;
    }
    int sticky = clear_is_sticky(e);
    record(c, line, "cuBLAS error: %s (%s; CUDA error: %s)", cublasGetStatusString(s), call, cudaGetErrorString(e));
    if (sticky) c->fatal = 1;
    return 0;
}

/* A kernel launcher returns 0 or the cudaError_t of its launch. */
static int launch_ok(cuda_ctx_t *c, int rc, const char *launcher, int line) {
    if (rc == 0) return 1;
    return cuda_ok(c, (cudaError_t)rc, launcher, line);
}
#define LAUNCH(c, fn, args) launch_ok((c), fn args, #fn, __LINE__)

/* With SERVELAB_CUDA_SYNC_OPS=1, a kernel's asynchronous fault is caught right
 * after the op that enqueued it, and named. */
static void op_end(cuda_ctx_t *c, const char *op) {
    if (!c->sync_ops || c->failed || c->capturing) return;
    cudaError_t e = cudaStreamSynchronize(c->stream);
    if (e != cudaSuccess) {
        int sticky = clear_is_sticky(e);
        record(c, __LINE__, "CUDA error: %s (in op %s)", cudaGetErrorString(e), op);
        if (sticky) c->fatal = 1;
    }
}

static cudaDataType_t cuda_type(sl_dtype_t dt) {
    switch (dt) {
    case DTYPE_F32: return CUDA_R_32F;
    case DTYPE_BF16: return CUDA_R_16BF;
    case DTYPE_F16: return CUDA_R_16F;
    default: break;
    }
    SL_ASSERT(!"CUDA activation dtype must be F32, BF16 or F16");
    return CUDA_R_32F;
}

/* Every weight is in the activation dtype (engine_boot.c loads them so): a
 * mismatch is a bug in the caller, not a device failure. */
static void check_weight(const cuda_ctx_t *c, const sl_weight_t *w) { SL_ASSERT(w->dtype == c->dt); }

/* Grows a device buffer to at least `need` bytes, by half again at least, so
 * a slowly growing need (attention partials as contexts get longer) does not
 * reallocate every step. The profiling forward at startup reaches the
 * largest need, so serving normally never grows. */
static int grow(cuda_ctx_t *c, void **buf, size_t *cap, size_t need, const char *what) {
    if (need <= *cap) return 1;
    if (c->capturing) {
        record(c, __LINE__, "the %s needs %zu bytes while a CUDA graph is being captured (it holds %zu): the "
               "warm-up run before the capture should have sized it", what, need, *cap);
        return 0;
    }
    size_t n = need > *cap + *cap / 2 ? need : *cap + *cap / 2;
    n = (n + ((size_t)2 << 20) - 1) & ~(((size_t)2 << 20) - 1);
    if (*buf) {
        /* Kernels already enqueued may still read the old buffer. */
        if (!CU(c, cudaStreamSynchronize, (c->stream)) || !CU(c, cudaFree, (*buf))) return 0;
        *buf = NULL;
        *cap = 0;
    }
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        record(c, __LINE__, "CUDA error: %s (cudaMalloc of %zu bytes for the %s)", cudaGetErrorString(e), n,
               what);
        return 0;
    }
    *buf = p;
    *cap = n;
    return 1;
}

/* ---- memory ----------------------------------------------------------------- */

static void *cu_alloc(void *ctx, size_t n) {
    cuda_ctx_t *c = ctx;
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 256);
    if (e == cudaSuccess) return p;
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError(); /* out of memory: NULL is the answer (ops.h), not a failure */
        return NULL;
    }
    cuda_ok(c, e, "cudaMalloc", __LINE__);
    return NULL;
}

static void cu_free(void *ctx, void *p) {
    cuda_ctx_t *c = ctx;
    if (p) CU(c, cudaFree, (p)); /* cudaFree waits for the device: no kernel still reads p */
}

static void cu_upload(void *ctx, void *dst, const void *src, size_t n) {
    cuda_ctx_t *c = ctx;
    SL_ASSERT(!c->capturing); /* a graph would replay the copy from a reused staging area */
    if (c->failed || n == 0) return;
    if (n <= STAGING_BYTES - STAGING_ALIGN) {
        if (c->staging_off + n > STAGING_BYTES) {
            /* Wrap: every copy out of the buffer was enqueued before this event. */
            if (!CU(c, cudaEventSynchronize, (c->staging_done))) return;
            c->staging_off = 0;
        }
        uint8_t *s = c->staging + c->staging_off;
        memcpy(s, src, n);
        c->staging_off += (n + STAGING_ALIGN - 1) & ~(STAGING_ALIGN - 1);
        if (CU(c, cudaMemcpyAsync, (dst, s, n, cudaMemcpyHostToDevice, c->stream)))
            CU(c, cudaEventRecord, (c->staging_done, c->stream));
        return;
    }
    /* Pageable source: the copy may still read it after cudaMemcpyAsync returns. */
    if (CU(c, cudaMemcpyAsync, (dst, src, n, cudaMemcpyHostToDevice, c->stream)))
        CU(c, cudaStreamSynchronize, (c->stream));
}

static void cu_download(void *ctx, void *dst, const void *src, size_t n) {
    cuda_ctx_t *c = ctx;
    SL_ASSERT(!c->capturing);
    if (n == 0) return;
    if (!c->failed && CU(c, cudaMemcpyAsync, (dst, src, n, cudaMemcpyDeviceToHost, c->stream)) &&
        CU(c, cudaStreamSynchronize, (c->stream)))
        return;
    memset(dst, 0, n); /* defined contents; the caller learns of the failure from last_error */
}

/* The current device is per host thread: the engine thread selects it here. */
static void cu_thread_init(void *ctx) {
    cuda_ctx_t *c = ctx;
    CU(c, cudaSetDevice, (c->device));
}

/* ---- GEMM --------------------------------------------------------------------- */

/* out(T, N) = in(T, K) . W(N, K)^T, all row-major, fp32 accumulation; out in `ctype`.
 *
 * T <= GEMV_MAX_T: slk_gemv. Otherwise cuBLAS.
 *
 * cuBLAS is column-major, and a row-major (r, c) array is, byte for byte, the
 * column-major (c, r) array with leading dimension c. Read that way our
 * product is out^T (N, T) = W (N, K) . in^T (K, T), a column-major GEMM with
 *   m = N, n = T, k = K;
 *   A = W's bytes, column-major (K, N) with lda = K, op(A) = A^T = W (N, K);
 *   B = in's bytes, column-major (K, T) with ldb = K, op(B) = B;
 *   C = out's bytes, column-major (N, T) with ldc = N.
 * The reduction runs along K, contiguous in both operands (the "TN" layout). */
static void gemm(cuda_ctx_t *c, void *out, cudaDataType_t ctype, const void *in, const sl_weight_t *w,
                 int64_t T, const char *op);

/* qweight (K, N / 8) rewritten in place as the AWQ kernels read it: its
 * transpose (slk_awq_repack, kernels.h), through a scratch copy freed at
 * once (at load, before the KV pool is sized). */
static void cu_awq_repack(void *ctx, void *qweight, int64_t N, int64_t K) {
    cuda_ctx_t *c = ctx;
    const size_t n = (size_t)(N / 8) * (size_t)K * sizeof(int32_t);
    if (c->failed || n == 0) return;
    void *tmp = cu_alloc(c, n);
    if (!tmp) {
        if (!c->failed) record(c, __LINE__, "out of CUDA memory repacking AWQ weights (%zu bytes of scratch)", n);
        return;
    }
    if (CU(c, cudaMemcpyAsync, (tmp, qweight, n, cudaMemcpyDeviceToDevice, c->stream))) {
        int rc = slk_awq_repack(qweight, tmp, N, K, c->stream);
        if (rc != 0) {
            int sticky = clear_is_sticky((cudaError_t)rc);
            record(c, __LINE__, "CUDA error: %s (slk_awq_repack of (%lld, %lld))", cudaGetErrorString((cudaError_t)rc),
                   (long long)K, (long long)(N / 8));
            if (sticky) c->fatal = 1;
        }
    }
    cu_free(c, tmp);
}

/* An AWQ linear (W4A16, ops.h), by T, on the H100 (docs/gpu-results.md, Run 7:
 * one Llama-3-8B layer's seven linears, bf16):
 * - up to SLK_AWQ_MAX_T rows where it takes the shape (G a multiple of 32),
 *   the GEMV on the nibbles (slk_awq_gemv) at one row, and at every T in
 *   fp32: 117 us at one row against the tensor cores' 134 and the bf16
 *   GEMV's 207 (at 2 rows 130 against 135: too close to call);
 * - up to AWQ_MMA_MAX_T rows at 16-bit activations (K and G multiples of
 *   16), the tensor cores on the nibbles (slk_awq_mma): 135-142 us from 2 to
 *   8 rows (the GEMV: 130-294), 173 at 16, 309 at 32 (bf16's cuBLAS: 234-237);
 * - past that, the weight dequantized into awq_w and multiplied by cuBLAS:
 *   4.5 bytes per weight (about 450 us a layer whatever T, Run 6, up to
 *   cuBLAS's compute-bound sizes), as the tensor-core kernel at 64 rows
 *   (448), which reads the nibbles once per 32 rows.
 * All three build each weight exactly as the CPU's AWQ kernels do (the last
 * two round it to dt, as their operands are), from qweight as cu_awq_repack
 * left it. awq_w grows to the largest linear during the first forward (the
 * profiling or warm-up run, before any graph is captured); the workspace of
 * the tensor-core kernel is its fixed bound. */
#define AWQ_MMA_MAX_T 32

static void awq_linear(cuda_ctx_t *c, void *out, cudaDataType_t ctype, const void *in, const sl_weight_t *w,
                       int64_t T, const char *op) {
    int64_t N = w->rows, K = w->cols, G = w->awq_group;
    if (ctype != cuda_type(c->dt)) {
        record(c, __LINE__, "%s: AWQ weights give activations in the activation dtype only", op);
        return;
    }
    const int mma_ok = T <= AWQ_MMA_MAX_T && c->dt != DTYPE_F32 && slk_awq_mma_takes(N, K, G);
    const int gemv = T <= SLK_AWQ_MAX_T && slk_awq_gemv_takes(N, K, G) && (T == 1 || !mma_ok);
    const int mma = !gemv && mma_ok;
    int rc;
    const char *what;
    if (gemv) {
        rc = slk_awq_gemv(out, in, w->data, w->qzeros, w->scales, T, N, K, G, c->dt, c->stream);
        what = "slk_awq_gemv";
    } else if (mma) {
        if (!grow(c, &c->awq_ws, &c->awq_ws_bytes, slk_awq_mma_workspace_max_bytes(), "AWQ workspace")) return;
        rc = slk_awq_mma(out, in, w->data, w->qzeros, w->scales, T, N, K, G, c->dt, c->awq_ws, c->awq_ws_bytes,
                         c->stream);
        what = "slk_awq_mma";
    } else {
        if (!grow(c, &c->awq_w, &c->awq_w_bytes, (size_t)(N * K) * dtype_size(c->dt), "AWQ dequantized weights"))
            return;
        rc = slk_awq_dequantize(c->awq_w, w->data, w->qzeros, w->scales, N, K, G, c->dt, c->stream);
        what = "slk_awq_dequantize";
    }
    if (rc != 0) {
        int sticky = clear_is_sticky((cudaError_t)rc);
        record(c, __LINE__, "CUDA error: %s (%s: %s of (%lld, %lld) x (%lld, %lld)^T, group size %lld)",
               cudaGetErrorString((cudaError_t)rc), what, op, (long long)T, (long long)K, (long long)N,
               (long long)K, (long long)G);
        if (sticky) c->fatal = 1;
        return;
    }
    if (gemv || mma) return;
    const sl_weight_t plain = {.data = c->awq_w, .dtype = c->dt, .rows = N, .cols = K};
    gemm(c, out, ctype, in, &plain, T, op);
}

static void gemm(cuda_ctx_t *c, void *out, cudaDataType_t ctype, const void *in, const sl_weight_t *w,
                 int64_t T, const char *op) {
    if (w->awq_group) {
        awq_linear(c, out, ctype, in, w, T, op);
        return;
    }
    check_weight(c, w);
    int64_t N = w->rows, K = w->cols;
    if (T <= GEMV_MAX_T) {
        sl_dtype_t out_dt = ctype == CUDA_R_32F ? DTYPE_F32 : c->dt;
        int rc = slk_gemv(out, in, w->data, T, N, K, c->dt, out_dt, c->stream);
        if (rc != 0) {
            int sticky = clear_is_sticky((cudaError_t)rc);
            record(c, __LINE__, "CUDA error: %s (slk_gemv: %s of (%lld, %lld) x (%lld, %lld)^T)",
                   cudaGetErrorString((cudaError_t)rc), op, (long long)T, (long long)K, (long long)N, (long long)K);
            if (sticky) c->fatal = 1;
        }
        return;
    }
    if (N > INT_MAX || K > INT_MAX || T > INT_MAX) {
        record(c, __LINE__, "cuBLAS: %s of (%lld, %lld) x (%lld, %lld)^T exceeds cuBLAS's int dimensions", op,
               (long long)T, (long long)K, (long long)N, (long long)K);
        return;
    }
    const float alpha = 1.0f, beta = 0.0f;
    cudaDataType_t ab = cuda_type(c->dt);
    blas_ok(c,
            cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, (int)T, (int)K, &alpha, w->data, ab, (int)K,
                         in, ab, (int)K, &beta, out, ctype, (int)N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx", __LINE__);
}

/* ---- ops ----------------------------------------------------------------------- */

/* table holds rows [vocab0, vocab0 + table->rows) of the embedding; other ids get zeros. */
static void op_embed(void *ctx, void *out, const sl_weight_t *table, const int32_t *ids, int64_t T,
                     int64_t vocab0) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    check_weight(c, table);
    LAUNCH(c, slk_embed, (out, table->data, ids, T, table->cols, vocab0, table->rows, c->dt, c->stream));
    op_end(c, "embed");
}

static void op_rmsnorm(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T, float eps) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    check_weight(c, w);
    LAUNCH(c, slk_rmsnorm, (out, in, w->data, T, w->cols, eps, c->dt, c->stream));
    op_end(c, "rmsnorm");
}

static void op_add_rmsnorm(void *ctx, void *x, void *out, const void *y, const sl_weight_t *w, int64_t T,
                           float eps) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    check_weight(c, w);
    LAUNCH(c, slk_add_rmsnorm, (x, out, y, w->data, T, w->cols, eps, c->dt, c->stream));
    op_end(c, "add_rmsnorm");
}

static void op_linear(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    gemm(c, out, cuda_type(c->dt), in, w, T, "linear");
    op_end(c, "linear");
}

static void op_rope(void *ctx, void *q, void *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv,
                    int64_t D, float theta, float scale) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    LAUNCH(c, slk_rope, (q, k, positions, T, H, Hkv, D, theta, scale, c->dt, c->stream));
    op_end(c, "rope");
}

/* The device cache is slot-major, (n_blocks * B, Hkv, D): a slot's row is the
 * same wherever its block, so the block size is not needed. */
static void op_kv_write(void *ctx, void *kc, void *vc, const void *k, const void *v, const int64_t *slots,
                        int64_t T, int64_t Hkv, int64_t D, int64_t block_size) {
    (void)block_size;
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    LAUNCH(c, slk_kv_write, (kc, vc, k, v, slots, T, Hkv, D, c->dt, c->kv_dt, c->stream));
    op_end(c, "kv_write");
}

static void op_rope_kv_write(void *ctx, void *q, void *k, const void *v, void *kc, void *vc,
                             const int32_t *positions, const int64_t *slots, int64_t T, int64_t H, int64_t Hkv,
                             int64_t D, float theta, float scale, int64_t block_size) {
    (void)block_size;
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    LAUNCH(c, slk_rope_kv_write,
           (q, k, v, kc, vc, positions, slots, T, H, Hkv, D, theta, scale, c->dt, c->kv_dt, c->stream));
    op_end(c, "rope_kv_write");
}

static void op_attention(void *ctx, void *out, const void *q, const void *kc, const void *vc,
                         const sl_attn_meta_t *m, int64_t H, int64_t Hkv, int64_t D, int64_t block_size,
                         float scale) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    size_t need = slk_attention_workspace_bytes(m, H, Hkv, D);
    void **ws = m->for_graph ? &c->graph_ws : &c->attn_ws;
    size_t *ws_bytes = m->for_graph ? &c->graph_ws_bytes : &c->attn_ws_bytes;
    if (m->for_graph && c->n_graphs > 0 && need > *ws_bytes) {
        if (c->n_retired == MAX_RETIRED) {
            record(c, __LINE__, "a CUDA graph step needs %zu bytes of attention workspace, more than the %zu its "
                   "graphs were captured with, %d times already", need, *ws_bytes, MAX_RETIRED);
            return;
        }
        c->retired_ws[c->n_retired++] = c->graph_ws; /* not freed: captured graphs read it */
        c->graph_ws = NULL;
        c->graph_ws_bytes = 0;
    }
    if (!grow(c, ws, ws_bytes, need, "attention workspace")) return;
    int rc = slk_attention(out, q, kc, vc, m, H, Hkv, D, block_size, scale, c->dt, c->kv_dt, *ws, *ws_bytes,
                           c->stream);
    if (rc != 0) {
        /* Name the shape: a refused one (an unsupported head dim, say) is the likely cause. */
        int sticky = clear_is_sticky((cudaError_t)rc);
        record(c, __LINE__, "CUDA error: %s (slk_attention: H %lld, Hkv %lld, D %lld, block size %lld, %d tokens of "
               "%d sequences)", cudaGetErrorString((cudaError_t)rc), (long long)H, (long long)Hkv, (long long)D,
               (long long)block_size, m->n_tokens, m->n_seqs);
        if (sticky) c->fatal = 1;
        return;
    }
    op_end(c, "attention");
}

static void op_silu_mul(void *ctx, void *out, const void *g, const void *u, int64_t n) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    LAUNCH(c, slk_silu_mul, (out, g, u, n, c->dt, c->stream));
    op_end(c, "silu_mul");
}

static void op_add(void *ctx, void *x, const void *y, int64_t n) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    LAUNCH(c, slk_add, (x, y, n, c->dt, c->stream));
    op_end(c, "add");
}

static void op_gather_rows(void *ctx, void *out, const void *in, const int32_t *idx, int64_t S, int64_t n) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    LAUNCH(c, slk_gather_rows, (out, in, idx, S, n, c->dt, c->stream));
    op_end(c, "gather_rows");
}

/* fp32 logits straight out of the GEMM (fp32 C, fp32 accumulation), then one download. */
static void op_logits(void *ctx, float *host_logits, const void *in, const sl_weight_t *w, int64_t S) {
    cuda_ctx_t *c = ctx;
    size_t n_bytes = (size_t)S * (size_t)w->rows * sizeof(float);
    if (!c->failed && grow(c, (void **)&c->d_logits, &c->d_logits_bytes, n_bytes, "logits")) {
        gemm(c, c->d_logits, CUDA_R_32F, in, w, S, "logits");
        op_end(c, "logits");
    }
    cu_download(c, host_logits, c->d_logits, n_bytes); /* zeros if anything failed */
}

static void op_logits_device(void *ctx, float *out, const void *in, const sl_weight_t *w, int64_t S) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    gemm(c, out, CUDA_R_32F, in, w, S, "logits");
    op_end(c, "logits");
}

/* The device sampler: the rows, ids and bias go up in one buffer, the
 * results come down in one copy; the logits never leave the device. */
static void op_sample(void *ctx, const float *logits, int64_t n, int64_t V, const sampling_row_t *rows,
                      const int32_t *ids, const float *bias, int64_t n_ids, sample_result_t *out) {
    cuda_ctx_t *c = ctx;
    size_t rows_b = (size_t)n * sizeof *rows, ids_b = (size_t)n_ids * sizeof *ids, bias_b = (size_t)n_ids * sizeof *bias;
    size_t ids_at = (rows_b + 255) & ~(size_t)255, bias_at = (ids_at + ids_b + 255) & ~(size_t)255;
    size_t ws_need = slk_sample_workspace_bytes(n, V), out_b = (size_t)n * sizeof *out;
    size_t ws_had = c->sample_ws_bytes;
    if (!c->failed && grow(c, &c->sample_in, &c->sample_in_bytes, bias_at + bias_b, "sampler inputs") &&
        grow(c, (void **)&c->sample_out, &c->sample_out_bytes, out_b, "sampler results") &&
        grow(c, &c->sample_ws, &c->sample_ws_bytes, ws_need, "sampler workspace") &&
        (c->sample_ws_bytes == ws_had || CU(c, cudaMemsetAsync, (c->sample_ws, 0, c->sample_ws_bytes, c->stream)))) {
        uint8_t *in = c->sample_in;
        cu_upload(c, in, rows, rows_b);
        cu_upload(c, in + ids_at, ids, ids_b);
        cu_upload(c, in + bias_at, bias, bias_b);
        LAUNCH(c, slk_sample, (logits, n, V, (const sampling_row_t *)in, (const int32_t *)(in + ids_at),
                               (const float *)(in + bias_at), c->sample_ws, c->sample_out, c->stream));
        op_end(c, "sample");
    }
    cu_download(c, out, c->sample_out, out_b); /* zeros if anything failed */
}

/* ---- CUDA graphs ------------------------------------------------------------------ */

static void cu_graph_begin(void *ctx) {
    cuda_ctx_t *c = ctx;
    SL_ASSERT(!c->capturing);
    if (c->failed) return;
    if (CU(c, cudaStreamBeginCapture, (c->stream, cudaStreamCaptureModeRelaxed))) c->capturing = 1;
}

static void *cu_graph_end(void *ctx) {
    cuda_ctx_t *c = ctx;
    if (!c->capturing) {
        if (!c->failed) record(c, __LINE__, "no CUDA graph capture was under way (cudaStreamBeginCapture failed?)");
        return NULL;
    }
    c->capturing = 0;
    /* Always end the capture, even after a failed op, so the stream leaves capture mode. */
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(c->stream, &graph);
    if (c->failed || !cuda_ok(c, e, "cudaStreamEndCapture", __LINE__)) {
        if (graph) cudaGraphDestroy(graph);
        return NULL;
    }
    cudaGraphExec_t exec = NULL;
    int ok = CU(c, cudaGraphInstantiate, (&exec, graph, 0));
    cudaGraphDestroy(graph);
    if (!ok) return NULL;
    /* Moves the graph's setup to the device now, not at its first launch. */
    if (!CU(c, cudaGraphUpload, (exec, c->stream))) {
        cudaGraphExecDestroy(exec);
        return NULL;
    }
    c->n_graphs++;
    return exec;
}

static void cu_graph_launch(void *ctx, void *graph) {
    cuda_ctx_t *c = ctx;
    if (c->failed) return;
    CU(c, cudaGraphLaunch, ((cudaGraphExec_t)graph, c->stream));
    op_end(c, "graph_launch");
}

static void cu_graph_free(void *ctx, void *graph) {
    cuda_ctx_t *c = ctx;
    if (!graph) return;
    /* A replay may still be running: let it finish first. */
    (void)cudaStreamSynchronize(c->stream);
    CU(c, cudaGraphExecDestroy, ((cudaGraphExec_t)graph));
    c->n_graphs--;
}

static int cu_last_error(void *ctx, char *msg, size_t cap) {
    cuda_ctx_t *c = ctx;
    /* Faults of kernels already enqueued surface at a synchronization. */
    if (!c->failed) CU(c, cudaStreamSynchronize, (c->stream));
    if (!c->failed) return 0;
    snprintf(msg, cap, "%s", c->error);
    if (c->fatal) return 2; /* stays failed: every later op is skipped */
    c->failed = 0;
    c->error[0] = '\0';
    return 1;
}

/* ---- setup ------------------------------------------------------------------------ */

static int init_cuda(cudaError_t e, const char *call, sl_err_t *err) {
    if (e == cudaSuccess) return 0;
    (void)cudaGetLastError();
    return sl_fail(err, "CUDA error: %s (%s). " HINT_CPU, cudaGetErrorString(e), call);
}
static int init_blas(cublasStatus_t s, const char *call, sl_err_t *err) {
    if (s == CUBLAS_STATUS_SUCCESS) return 0;
    return sl_fail(err, "cuBLAS error: %s (%s). Hint: check that libcublas matches the CUDA runtime and "
                   "driver, or run with --device cpu", cublasGetStatusString(s), call);
}

int cuda_backend_device_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return n;
}

int cuda_backend_probe(int device, cuda_device_info_t *info, sl_err_t *err) {
    memset(info, 0, sizeof *info);
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaErrorInsufficientDriver) {
        /* What the runtime says when there is no driver at all, too. */
        int rt = 0;
        (void)cudaRuntimeGetVersion(&rt);
        (void)cudaGetLastError();
        return sl_fail(err, "CUDA error: %s (cudaGetDeviceCount): no NVIDIA driver, or one older than this "
                       "CUDA %d.%d runtime. " HINT_CPU, cudaGetErrorString(e), rt / 1000, rt % 1000 / 10);
    }
    if (init_cuda(e, "cudaGetDeviceCount", err)) return -1;
    if (n == 0) return init_cuda(cudaErrorNoDevice, "cudaGetDeviceCount", err);
    if (device < 0 || device >= n)
        return sl_fail(err, "CUDA error: there is no device %d, %d visible (cudaGetDeviceCount). Hint: check "
                       "CUDA_VISIBLE_DEVICES, or run with --device cpu", device, n);
    struct cudaDeviceProp p;
    if (init_cuda(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties", err)) return -1;
    snprintf(info->name, sizeof info->name, "%s", p.name);
    info->cc_major = p.major;
    info->cc_minor = p.minor;
    size_t free_b = 0, total_b = 0;
    if (init_cuda(cudaSetDevice(device), "cudaSetDevice", err) ||
        init_cuda(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo", err))
        return -1;
    info->free_bytes = (int64_t)free_b;
    info->total_bytes = (int64_t)total_b;
    return 0;
}

static void teardown(cuda_ctx_t *c) {
    if (c->blas) cublasDestroy(c->blas);
    if (c->blas_ws) cudaFree(c->blas_ws);
    if (c->staging_done) cudaEventDestroy(c->staging_done);
    if (c->staging) cudaFreeHost(c->staging);
    if (c->stream) cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    memset(c, 0, sizeof *c);
}

const sl_ops_t *cuda_backend_init(const cuda_backend_opts_t *opts, sl_err_t *err) {
    int k = opts->instance;
    if (k < 0 || k >= CUDA_MAX_INSTANCES) {
        sl_fail(err, "CUDA backend instance %d: at most %d per process", k, CUDA_MAX_INSTANCES);
        return NULL;
    }
    const sl_dtype_t kv_dt = opts->kv_fp8 ? opts->kv_fp8 : opts->act_dtype;
    if (g_ready[k]) {
        if (g_ctx[k].device == opts->device && g_ctx[k].dt == opts->act_dtype && g_ctx[k].kv_dt == kv_dt)
            return &g_ops[k];
        sl_fail(err, "the CUDA backend (instance %d) is already set up for device %d with %s activations and a %s "
                "KV cache", k, g_ctx[k].device, dtype_torch_name(g_ctx[k].dt), dtype_torch_name(g_ctx[k].kv_dt));
        return NULL;
    }
    if (opts->act_dtype != DTYPE_F32 && opts->act_dtype != DTYPE_BF16 && opts->act_dtype != DTYPE_F16) {
        sl_fail(err, "the CUDA backend runs float32, bfloat16 or float16 activations, not %s",
                dtype_name(opts->act_dtype));
        return NULL;
    }
    if (opts->kv_fp8 && (!dtype_is_fp8(opts->kv_fp8) || opts->act_dtype == DTYPE_F32)) {
        sl_fail(err, "the CUDA backend keeps an fp8 KV cache (e4m3 or e5m2) with bfloat16 or float16 activations "
                "only, not %s with %s", dtype_name(opts->kv_fp8), dtype_torch_name(opts->act_dtype));
        return NULL;
    }
    cuda_device_info_t info;
    if (cuda_backend_probe(opts->device, &info, err)) return NULL;

    cuda_ctx_t *c = &g_ctx[k];
    memset(c, 0, sizeof *c);
    c->device = opts->device;
    c->dt = opts->act_dtype;
    c->kv_dt = kv_dt;
    const char *sync_env = getenv("SERVELAB_CUDA_SYNC_OPS");
    c->sync_ops = sync_env && *sync_env && strcmp(sync_env, "0") != 0;
    cublasMath_t mode = CUBLAS_DEFAULT_MATH;
    if (init_cuda(cudaSetDevice(c->device), "cudaSetDevice", err) ||
        init_cuda(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags",
                  err) ||
        init_cuda(cudaHostAlloc((void **)&c->staging, STAGING_BYTES, cudaHostAllocDefault), "cudaHostAlloc",
                  err) ||
        init_cuda(cudaEventCreateWithFlags(&c->staging_done, cudaEventDisableTiming), "cudaEventCreateWithFlags",
                  err) ||
        init_blas(cublasCreate(&c->blas), "cublasCreate", err) ||
        init_blas(cublasSetStream(c->blas, c->stream), "cublasSetStream", err) ||
        init_cuda(cudaMalloc(&c->blas_ws, BLAS_WORKSPACE_BYTES), "cudaMalloc (cuBLAS workspace)", err) ||
        init_blas(cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WORKSPACE_BYTES), "cublasSetWorkspace", err) ||
        /* Default math keeps fp32 GEMMs off TF32 (only CUBLAS_TF32_TENSOR_OP_MATH or a
         * *_FAST_TF32 compute type would allow it); bf16/fp16 ones still use tensor
         * cores. Reductions (split-K) stay in fp32 rather than the output type. */
        init_blas(cublasSetMathMode(c->blas, (cublasMath_t)(CUBLAS_DEFAULT_MATH |
                                                            CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)),
                  "cublasSetMathMode", err) ||
        init_blas(cublasGetMathMode(c->blas, &mode), "cublasGetMathMode", err)) {
        teardown(c);
        return NULL;
    }
    /* The low bits hold the math mode proper, the high ones its flags. */
    if (((int)mode & 0xf) != (int)CUBLAS_DEFAULT_MATH ||
        !((int)mode & (int)CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)) {
        sl_fail(err, "cuBLAS error: math mode %d was not applied (cublasSetMathMode). Hint: run with --device cpu",
                (int)mode);
        teardown(c);
        return NULL;
    }

    g_ops[k] = (sl_ops_t){
        .name = "cuda",
        .ctx = c,
        .act_dtype = c->dt,
        .kv_dtype = c->kv_dt,
        .host_memory = 0,
        .alloc = cu_alloc,
        .free = cu_free,
        .upload = cu_upload,
        .download = cu_download,
        .thread_init = cu_thread_init,
        .embed = op_embed,
        .rmsnorm = op_rmsnorm,
        .linear = op_linear,
        .rope = op_rope,
        .kv_write = op_kv_write,
        .attention = op_attention,
        .silu_mul = op_silu_mul,
        .add = op_add,
        .gather_rows = op_gather_rows,
        .logits = op_logits,
        .add_rmsnorm = op_add_rmsnorm,
        .rope_kv_write = op_rope_kv_write,
        .last_error = cu_last_error,
        .logits_device = op_logits_device,
        .awq_weights = 1,
        .awq_repack = cu_awq_repack,
        .sample = op_sample,
        .graph_begin = cu_graph_begin,
        .graph_end = cu_graph_end,
        .graph_launch = cu_graph_launch,
        .graph_free = cu_graph_free,
    };
    g_ready[k] = 1;
    return &g_ops[k];
}

void *cuda_backend_stream(const sl_ops_t *ops) { return ((cuda_ctx_t *)ops->ctx)->stream; }

int cuda_backend_mem_info(const sl_ops_t *ops, int64_t *free_bytes, int64_t *total_bytes, sl_err_t *err) {
    cuda_ctx_t *c = ops->ctx;
    size_t f = 0, t = 0;
    if (init_cuda(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize", err) ||
        init_cuda(cudaMemGetInfo(&f, &t), "cudaMemGetInfo", err))
        return -1;
    *free_bytes = (int64_t)f;
    *total_bytes = (int64_t)t;
    return 0;
}

#else
/* ISO C wants at least one declaration in a translation unit. */
typedef int cuda_backend_disabled_t;
#endif
