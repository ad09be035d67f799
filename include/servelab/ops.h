/* ops.h - the backend seam: a small table of ops the Llama forward is written in.
 *
 * The model never touches a buffer's contents: activations, weights and the
 * KV cache live in backend memory (host memory on CPU, device memory on CUDA)
 * in the backend's activation dtype, and are only passed between ops. Every
 * op is also a plain function in kernels/cpu/ (the reference) and, for CUDA,
 * a kernel with a parity test against it. No CUDA types appear here.
 *
 * Shapes follow the letters of docs/architecture.md: T tokens, S sequences, H / Hkv heads,
 * D head dim, V vocab. Weights use PyTorch's Linear layout (out, in).
 */
#ifndef SERVELAB_OPS_H
#define SERVELAB_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "servelab/config.h"
#include "servelab/sample_row.h"

/* A 2-D weight in backend memory, row-major (rows, cols), any float dtype.
 * `packed` is the backend's own copy of a linear weight in the layout its
 * linear op reads (see pack_linear), or NULL; with it, `data` may be NULL. */
typedef struct {
    const void *data;
    const void *packed;
    sl_dtype_t dtype;
    int64_t rows, cols;
    /* AWQ 4-bit (awq_group > 0, the input rows per group; dtype DTYPE_I32):
     * data is AutoAWQ's qweight int32 (cols, rows / 8), qzeros int32
     * (cols / G, rows / 8) and scales fp16 (cols / G, rows); each int32 holds
     * 8 output columns in the order 0, 2, 4, 6, 1, 3, 5, 7, and
     * w = (q - z) * s. Only linear and logits read it, through packed (a
     * host backend) or as the backend's awq_repack left it (a device one). */
    const void *qzeros, *scales;
    int64_t awq_group;
} sl_weight_t;

/* The batch metadata as the attention op reads it: counts are host values,
 * arrays backend memory. */
typedef struct {
    int32_t n_tokens, n_seqs, max_blocks;
    int32_t max_seq_len, max_query_len; /* largest seq_lens[s] and query length this step */
    const int32_t *positions;    /* (T) */
    const int32_t *query_start;  /* (S+1) */
    const int32_t *seq_lens;     /* (S) */
    const int32_t *block_tables; /* (S, max_blocks) */
    /* The step is captured in (or warms up for) a CUDA graph: a device
     * backend must keep its scratch at addresses that never move. */
    int32_t for_graph;
} sl_attn_meta_t;

typedef struct sl_ops sl_ops_t;
struct sl_ops {
    const char *name;       /* "cpu", "cuda" */
    void *ctx;
    sl_dtype_t act_dtype;   /* activations */
    sl_dtype_t kv_dtype;    /* the KV cache: act_dtype, or on CPU the model's bf16 (as vLLM's
                               --kv-cache-dtype auto), whose rows kv_write rounds */
    int host_memory;        /* backend memory is host memory: mapped weights are used in place */

    /* Memory. alloc returns NULL when the backend is out of memory. */
    void *(*alloc)(void *ctx, size_t n_bytes);
    void (*free)(void *ctx, void *p);
    void (*upload)(void *ctx, void *dst, const void *src, size_t n_bytes);
    void (*download)(void *ctx, void *dst, const void *src, size_t n_bytes);
    /* Prepares the calling thread to run ops (the engine thread calls it once;
     * CUDA: selects the device). May be NULL. */
    void (*thread_init)(void *ctx);

    /* out(T, hidden) = table[ids[t] - vocab0], or zeros where ids[t] - vocab0
     * is not a row of table (a vocabulary shard: tensor parallelism; vocab0 is
     * 0 and every id a row with one rank) */
    void (*embed)(void *ctx, void *out, const sl_weight_t *table, const int32_t *ids, int64_t T, int64_t vocab0);
    /* out(T, n) = in * rsqrt(mean(in^2) + eps) * w; out may alias in */
    void (*rmsnorm)(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T,
                    float eps);
    /* out(T, w->rows) = in(T, w->cols) . w^T, fp32 accumulation */
    void (*linear)(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T);
    /* Optional: n (<= 4) linears of one input as one op, out[i] = in . ws[i]^T
     * (q/k/v, gate/up), each out[i] what linear gives it. NULL: llama.c calls
     * linear n times. */
    void (*linears)(void *ctx, int n, void *const *outs, const void *in, const sl_weight_t *const *ws, int64_t T);
    /* Rotates q(T, H, D) and k(T, Hkv, D) in place, Hugging Face rotate-half
     * convention: pairs (i, i + D/2), angle = pos * theta^(-2i/D) / scale. */
    void (*rope)(void *ctx, void *q, void *k, const int32_t *positions, int64_t T, int64_t H,
                 int64_t Hkv, int64_t D, float theta, float scale);
    /* k_cache[slot[t]] = k[t], v_cache[slot[t]] = v[t]. A cache is n_blocks
     * blocks of block_size slots, each block's Hkv * block_size rows of D
     * contiguous, laid out within the block as the backend chooses: CUDA
     * (n_blocks * B, Hkv, D), CPU (n_blocks, Hkv, B, D) (kernels/cpu/ops_cpu.h).
     * Only kv_write and attention read or write rows. */
    void (*kv_write)(void *ctx, void *k_cache, void *v_cache, const void *k, const void *v,
                     const int64_t *slot_mapping, int64_t T, int64_t Hkv, int64_t D, int64_t block_size);
    /* out(T, H, D) = causal softmax(q k^T * scale) v over each sequence's
     * blocks; query head h reads KV head h / (H / Hkv) (GQA). */
    void (*attention)(void *ctx, void *out, const void *q, const void *k_cache,
                      const void *v_cache, const sl_attn_meta_t *meta, int64_t H, int64_t Hkv,
                      int64_t D, int64_t block_size, float scale);
    /* out(n) = silu(gate(n)) * up(n); out may alias gate */
    void (*silu_mul)(void *ctx, void *out, const void *gate, const void *up, int64_t n);
    /* x(n) += y(n) */
    void (*add)(void *ctx, void *x, const void *y, int64_t n);
    /* out(S, n) = in[idx[s]] */
    void (*gather_rows)(void *ctx, void *out, const void *in, const int32_t *idx, int64_t S,
                        int64_t n);
    /* host_logits(S, w->rows) fp32 = in(S, w->cols) . w^T */
    void (*logits)(void *ctx, float *host_logits, const void *in, const sl_weight_t *w,
                   int64_t S);

    /* Optional fused ops (NULL: llama.c runs the unfused sequence; NULL on CPU,
     * whose unfused sequence is the reference). */
    /* x(T, n) += y(T, n), then out(T, n) = rmsnorm(x) * w with n = w->cols;
     * out must not alias x or y. */
    void (*add_rmsnorm)(void *ctx, void *x, void *out, const void *y, const sl_weight_t *w,
                        int64_t T, float eps);
    /* rope(q, k) in place, then k_cache/v_cache[slot[t]] = k[t] (rotated) / v[t];
     * a slot < 0 skips the token. Same arguments as rope and kv_write. */
    void (*rope_kv_write)(void *ctx, void *q, void *k, const void *v, void *k_cache,
                          void *v_cache, const int32_t *positions, const int64_t *slot_mapping,
                          int64_t T, int64_t H, int64_t Hkv, int64_t D, float theta,
                          float scale, int64_t block_size);

    /* Optional (host-memory backends): a copy of linear weight w (the rows of
     * a linear or logits op) in a layout of the backend's choosing, which
     * linear and logits then read instead of w->data. packed_bytes is its
     * size, 0 when the backend reads w as it is; pack_linear writes it to dst
     * (64-byte aligned host memory, which the loader owns: weights.c). */
    size_t (*packed_bytes)(void *ctx, const sl_weight_t *w);
    void (*pack_linear)(void *ctx, const sl_weight_t *w, void *dst);
    /* linear reads AWQ weights in backend memory, no packed copy: the CUDA
     * backend. A backend with neither this nor packed_bytes has no W4A16
     * kernels and refuses AWQ checkpoints. */
    int awq_weights;
    /* Optional, with awq_weights: rewrites an AWQ linear's qweight (K = cols,
     * N / 8 = rows / 8 int32), just loaded into backend memory, in place into
     * the layout its linear reads (the CUDA kernels': the transpose). A
     * failure is recorded (last_error). */
    void (*awq_repack)(void *ctx, void *qweight, int64_t N, int64_t K);

    /* Optional (NULL on CPU, whose ops cannot fail). A device backend never
     * exits from an op: a failure (a kernel fault, a cuBLAS error, no memory
     * for a workspace) is recorded, the ops after it are skipped, and this
     * returns 1 with the first recorded message in msg (cap bytes), then
     * clears it; 0 if nothing failed since the last call. It waits for the
     * work already enqueued, so its answer covers every op called before it.
     * 2 instead of 1 says the device is lost for good (a sticky CUDA error
     * such as an illegal address: every later op would fail the same way);
     * it then keeps answering 2 with the same message.
     * The caller owns what to do: at startup die with the message; in the
     * engine, fail the requests of the step whose forward it was, and on a
     * 2 declare the engine dead (step.c). */
    int (*last_error)(void *ctx, char *msg, size_t cap);

    /* Optional (device backends): logits into backend memory, out(S, w->rows)
     * fp32 = in . w^T, so that they need not cross to the host (the sampler
     * reads them where they are). */
    void (*logits_device)(void *ctx, float *out, const void *in, const sl_weight_t *w, int64_t S);
    /* vLLM's sampler (kernels/cpu/sampling_cpu.c's cpu_sample) on each of the
     * n rows of logits (n, V) fp32, where the forward left them: backend
     * memory with logits_device (on the device, so that only the results
     * cross to the host), host memory otherwise. rows (n), ids and bias
     * (n_ids each, as sampling_row_resolve lays them out) and out (n) are
     * host memory. */
    void (*sample)(void *ctx, const float *logits, int64_t n, int64_t V, const sampling_row_t *rows,
                   const int32_t *ids, const float *bias, int64_t n_ids, sample_result_t *out);

    /* Optional CUDA graphs (NULL: every step runs op by op). Between
     * graph_begin and graph_end the ops record into a graph instead of
     * running; nothing in between may allocate, upload, download or wait
     * (llama.c uploads the batch before a replay and reads the logits after).
     * graph_end instantiates what was recorded and returns it, or NULL with
     * the reason in last_error; graph_launch replays one on the backend's
     * stream (its inputs are whatever the captured buffers hold then);
     * graph_free releases one. */
    void (*graph_begin)(void *ctx);
    void *(*graph_end)(void *ctx);
    void (*graph_launch)(void *ctx, void *graph);
    void (*graph_free)(void *ctx, void *graph);
};

/* The CPU backend. `n_threads` sets the size of the process's worker pool
 * (servelab/parallel.h); <= 0: the CPUs this process may run on. */
const sl_ops_t *cpu_backend_init(int n_threads);
/* The same with the KV cache in kv_dtype (F32, BF16, F8_E4M3 or F8_E5M2). */
const sl_ops_t *cpu_backend_init_kv(int n_threads, sl_dtype_t kv_dtype);
/* One INFO line: the CPU kernels' ISA level (cpu_isa.h) and the KV cache dtype. */
void cpu_backend_log_kernels(const sl_ops_t *ops);

/* ---- The CUDA backend (src/backend/cuda_backend.c) -------------------------
 * Declared always, defined only in builds with SERVELAB_HAVE_CUDA (callers
 * guard their calls with #ifdef SERVELAB_HAVE_CUDA). Device memory comes from
 * plain cudaMalloc; every op is enqueued on one non-default stream; linear and
 * logits are cuBLAS GEMMs with fp32 accumulation (never TF32). */
typedef struct {
    int device;             /* CUDA device index */
    sl_dtype_t act_dtype;   /* activations, KV cache and every weight: F32, BF16 or F16 */
    sl_dtype_t kv_fp8;      /* DTYPE_F8_E4M3 or DTYPE_F8_E5M2: the KV cache in that fp8 dtype
                               (--kv-cache-dtype; 16-bit act_dtype only); 0: in act_dtype */
    int instance;           /* which backend of this process: the tensor-parallel rank (0 with one) */
} cuda_backend_opts_t;
#define CUDA_MAX_INSTANCES 16

typedef struct {
    char name[256];         /* "NVIDIA H200" */
    int cc_major, cc_minor; /* compute capability */
    int64_t total_bytes;    /* device memory */
    int64_t free_bytes;     /* free now (cudaMemGetInfo) */
} cuda_device_info_t;

/* Whether `device` can run the backend: 0 with its description in *info, or
 * -1 with one line in err naming the failing CUDA call and a hint ("CUDA
 * error: no CUDA-capable device is detected (cudaGetDeviceCount). Hint: run
 * with --device cpu"). Creates the device's context as a side effect. */
int cuda_backend_probe(int device, cuda_device_info_t *info, sl_err_t *err);
/* Sets up the device, the stream and the cuBLAS handle for `opts` on the
 * calling thread. One backend per instance: later calls for an instance
 * with the same options return the same table, other options fail. Several
 * instances (tensor-parallel ranks) have their own streams, handles and
 * scratch, on their own devices or on one (the shared-device test mode);
 * a thread runs an instance's ops after its thread_init. NULL with one line
 * + hint in err on failure (startup: the caller dies with it). */
const sl_ops_t *cuda_backend_init(const cuda_backend_opts_t *opts, sl_err_t *err);
/* The instance's stream (cudaStream_t), for a communicator to enqueue on. */
void *cuda_backend_stream(const sl_ops_t *ops);
/* CUDA devices visible to this process (0 when none answers). */
int cuda_backend_device_count(void);
/* Device memory now, after waiting for the backend's stream: 0, or -1 with err. */
int cuda_backend_mem_info(const sl_ops_t *ops, int64_t *free_bytes, int64_t *total_bytes,
                          sl_err_t *err);

#endif
