/* kv_sizing.c - the KV pool size on a GPU from measured memory (see kv_sizing.h).
 *
 * Pure arithmetic, no device: the CUDA path measures, this decides, the unit
 * test checks every branch. Choices where vLLM and this engine differ:
 * - The pool reserves block 0 (the null block), so "needed" for one
 *   max_model_len request is ceil(max_model_len / B) + 1 blocks and the
 *   estimated maximum model length is (n_blocks - 1) * B: the same figures
 *   engine_create prints on CPU (vLLM counts no null block here).
 * - --num-gpu-blocks-override is taken as is, without vLLM's memory checks:
 *   as on CPU it is the lab's way to get a pool of an exact size, smaller
 *   than one max_model_len request if asked (engine_create then refuses the
 *   requests that can never fit).
 * - The startup check runs in every mode, as vLLM's init_device does.
 */
#include "servelab/kv_sizing.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GIB ((double)(1ll << 30))

const char *kv_sizing_format_gib(int64_t bytes, char *buf, size_t cap) {
    /* Python's round(x, 2) is the correctly rounded decimal, as printf's %.2f. */
    char tmp[64];
    snprintf(tmp, sizeof tmp, "%.2f", (double)bytes / GIB);
    sl_format_py_float(strtod(tmp, NULL), 0, buf, cap);
    return buf;
}

int kv_sizing_check_startup(int device, int64_t total_bytes, int64_t free_bytes,
                            double gpu_memory_utilization, int64_t *requested_bytes,
                            sl_err_t *err) {
    SL_ASSERT(total_bytes > 0 && gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0);
    int64_t requested = (int64_t)ceil((double)total_bytes * gpu_memory_utilization);
    *requested_bytes = requested;
    if (free_bytes >= requested) return 0;
    char f[32], t[32], r[32], u[32];
    sl_format_py_float(gpu_memory_utilization, 0, u, sizeof u);
    return sl_fail(err, "Free memory on device cuda:%d (%s/%s GiB) on startup is less than desired GPU "
                   "memory utilization (%s, %s GiB). Decrease GPU memory utilization or reduce GPU "
                   "memory used by other processes.", device,
                   kv_sizing_format_gib(free_bytes, f, sizeof f),
                   kv_sizing_format_gib(total_bytes, t, sizeof t), u,
                   kv_sizing_format_gib(requested, r, sizeof r));
}

int kv_sizing_compute(const kv_sizing_in_t *in, kv_sizing_out_t *out, sl_err_t *err) {
    memset(out, 0, sizeof *out);
    SL_ASSERT(in->block_bytes > 0 && in->block_size > 0 && in->max_model_len > 0);
    SL_ASSERT(in->weights_bytes >= 0 && in->activation_peak_bytes >= 0);
    if (kv_sizing_check_startup(in->device, in->total_bytes, in->free_at_start_bytes,
                                in->gpu_memory_utilization, &out->requested_bytes, err))
        return -1;
    if (in->kv_cache_memory_bytes > 0) {
        out->available_bytes = in->kv_cache_memory_bytes;
        out->from_kv_cache_memory_bytes = true;
    } else {
        out->available_bytes = out->requested_bytes - in->weights_bytes - in->activation_peak_bytes;
    }
    if (in->num_gpu_blocks_override > 0) {
        out->n_blocks = in->num_gpu_blocks_override;
        out->overridden = true;
        return 0;
    }
    if (out->available_bytes <= 0)
        return sl_fail(err, "No available memory for the cache blocks. Try increasing "
                       "`gpu_memory_utilization` when initializing the engine.");
    int64_t n_blocks = out->available_bytes / in->block_bytes;
    if (n_blocks > INT32_MAX / 2) n_blocks = INT32_MAX / 2; /* as engine_create caps it */
    out->n_blocks = n_blocks;
    int64_t B = in->block_size, max_blocks = (in->max_model_len + B - 1) / B;
    int64_t pool_tokens = (n_blocks - 1) * B;
    if (pool_tokens < in->max_model_len)
        return sl_fail(err, "To serve at least one request with the models's max seq len (%d), (%.2f GiB KV "
                       "cache is needed, which is larger than the available KV cache memory (%.2f GiB). "
                       "Based on the available memory, the estimated maximum model length is %lld. Try "
                       "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                       "initializing the engine.", in->max_model_len,
                       (double)(max_blocks + 1) * (double)in->block_bytes / GIB,
                       (double)out->available_bytes / GIB, (long long)(pool_tokens > 0 ? pool_tokens : 0));
    return 0;
}
