/* kv_sizing.h - how many KV blocks fit on a GPU: vLLM's rule as a pure function.
 *
 * The CUDA path of engine_create (engine_boot.c) measures device memory (before the
 * model, after loading it, after a profiling forward) and asks this module
 * for the pool size; this module never touches a device, so every branch is
 * unit-tested on the CPU (tests/unit/test_kv_sizing.c).
 *
 * The rule (vLLM V1, gpu_worker.py determine_available_memory):
 *   requested = ceil(total * gpu_memory_utilization)   (this instance's share)
 *   startup:   free at startup < requested -> error ("Free memory on device ...")
 *   available = requested - weights - activation_peak  (profiled), or
 *             = --kv-cache-memory-bytes when given (no profile needed)
 *   n_blocks  = --num-gpu-blocks-override when given (a lab setting: no check),
 *               else floor(available / block_bytes), which must hold one
 *               max_model_len request beside the null block.
 */
#ifndef SERVELAB_KV_SIZING_H
#define SERVELAB_KV_SIZING_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/core.h"

typedef struct {
    int device;                     /* CUDA device index, for the messages */
    int64_t total_bytes;            /* device memory (cudaMemGetInfo total) */
    int64_t free_at_start_bytes;    /* free before the model (other processes hold the rest) */
    double gpu_memory_utilization;  /* (0, 1] */
    int64_t weights_bytes;          /* the model's weights on the device */
    int64_t activation_peak_bytes;  /* everything else the profiling forward left in use
                                     * (activations, workspaces, cuBLAS), measured */
    int64_t block_bytes;            /* one block over all layers, K and V */
    int32_t block_size;             /* tokens per block */
    int32_t max_model_len;
    int32_t num_gpu_blocks_override;/* 0: none */
    int64_t kv_cache_memory_bytes;  /* 0: none (size from the utilization) */
} kv_sizing_in_t;

typedef struct {
    int64_t requested_bytes;        /* ceil(total * utilization) */
    int64_t available_bytes;        /* for "Available KV cache memory: %.2f GiB" (may be <= 0
                                     * only when an override decided the size) */
    int64_t n_blocks;               /* the pool, null block included */
    bool overridden;                /* n_blocks is --num-gpu-blocks-override */
    bool from_kv_cache_memory_bytes;/* available is --kv-cache-memory-bytes */
} kv_sizing_out_t;

/* vLLM's startup check: fails, with vLLM's "Free memory on device cuda:N
 * (F/T GiB) on startup is less than desired GPU memory utilization (U, R
 * GiB). ..." in err, when less than ceil(total * utilization) is free.
 * Returns 0 and sets *requested_bytes otherwise. */
int kv_sizing_check_startup(int device, int64_t total_bytes, int64_t free_bytes,
                            double gpu_memory_utilization, int64_t *requested_bytes,
                            sl_err_t *err);

/* The pool size (see the rule above). On error returns -1 with vLLM's text
 * in err ("No available memory for the cache blocks. ..." or "To serve at
 * least one request with the models's max seq len (N), ..."), out filled as
 * far as it got. */
int kv_sizing_compute(const kv_sizing_in_t *in, kv_sizing_out_t *out, sl_err_t *err);

/* Python's round(bytes / 2**30, 2) as vLLM's format_gib prints it ("6.0",
 * "111.93"), into buf (cap bytes); returns buf. */
const char *kv_sizing_format_gib(int64_t bytes, char *buf, size_t cap);

#endif
