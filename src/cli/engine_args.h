/* engine_args.h - vLLM's engine flags, shared by every subcommand that runs the engine.
 *
 *   --device auto|cpu|cuda --dtype --load-format --max-model-len --block-size
 *   --gpu-memory-utilization --num-gpu-blocks-override --kv-cache-memory-bytes
 *   --[no-]enable-prefix-caching --prefix-caching-hash-algo sha256|xxhash
 *   --[no-]enable-chunked-prefill --max-num-batched-tokens
 *   --max-num-seqs --enforce-eager --cuda-graph-sizes --max-seq-len-to-capture
 *   --batching continuous|static --seed --threads --skip-warmup (lab)
 *
 * Defaults are vLLM's for a small GPU (max-num-seqs 256, max-num-batched-tokens
 * 2048, or max(max_model_len, 2048) without chunked prefill, as vLLM sets it),
 * and 4 GiB of KV cache on CPU (vLLM's CPU default, VLLM_CPU_KVCACHE_SPACE).
 * On CUDA the KV pool is sized from --gpu-memory-utilization (0.9) after a
 * profiling forward, unless --kv-cache-memory-bytes or --num-gpu-blocks-override
 * says otherwise (both win, as in vLLM; src/engine/kv_sizing.c).
 */
#ifndef SERVELAB_CLI_ENGINE_ARGS_H
#define SERVELAB_CLI_ENGINE_ARGS_H

#include <getopt.h>

#include "servelab/engine.h"

typedef enum { DEVICE_AUTO, DEVICE_CPU, DEVICE_CUDA } device_kind_t;

#define CLI_MAX_GRAPH_SIZES 128

typedef struct {
    const char *model_dir;
    model_load_opts_t load;
    engine_config_t engine;
    int threads;
    uint64_t seed;
    long long max_model_len;            /* 0: the config's max_position_embeddings */
    bool max_num_batched_tokens_set;
    device_kind_t device;               /* --device: auto = cuda when built with it and a device works */
    double gpu_memory_utilization;      /* --gpu-memory-utilization (0.9), CUDA only */
    bool kv_cache_memory_bytes_set;     /* CUDA: given bytes win over the utilization */
    bool enforce_eager;                 /* --enforce-eager: no CUDA graphs */
    int32_t cuda_graph_sizes[CLI_MAX_GRAPH_SIZES]; /* --cuda-graph-sizes (none: vLLM's default) */
    int n_cuda_graph_sizes;
    int32_t max_seq_len_to_capture;     /* --max-seq-len-to-capture (8192): longer contexts run eagerly */
    bool skip_warmup;                   /* --skip-warmup (lab): no warm-up forward, a cold first request */
} engine_args_t;

/* Option codes 1000.. are the engine's; merge them into a command's table. */
#define ENGINE_OPT_BASE 1000
extern const struct option engine_long_options[];
extern const char *engine_usage;

void engine_args_default(engine_args_t *a);
/* Handles getopt code `c` if it is an engine flag: 1 if consumed, 0 if not.
 * Bad values exit 2 with argparse's style of message. */
int engine_args_handle(engine_args_t *a, int c, const char *value);

/* Everything an engine needs, loaded from a.model_dir on the --device backend;
 * startup errors exit 1 with one line (a CUDA one names the call and a hint). */
typedef struct {
    tokenizer_t *tok;
    llama_model_t model;
    engine_t *engine;
    bool on_cuda;                       /* the model runs on the CUDA backend */
} engine_bundle_t;
void engine_bundle_load(engine_args_t *a, engine_bundle_t *b);
void engine_bundle_free(engine_bundle_t *b);

#endif
