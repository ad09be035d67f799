/* engine_args.c - vLLM's engine flags (see engine_args.h) into an engine_config_t.
 *
 * Only the flags: what they mean is the engine bootstrap's
 * (src/engine/engine_boot.c). Bad values exit 2 as argparse does for vLLM.
 */
#define _GNU_SOURCE
#include "engine_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum {
    E_DTYPE = ENGINE_OPT_BASE, E_LOAD, E_MAX_LEN, E_BLOCK, E_NUM_BLOCKS, E_KV_BYTES, E_PREFIX,
    E_NO_PREFIX, E_CHUNKED, E_NO_CHUNKED, E_BATCHED, E_SEQS, E_BATCHING, E_SEED, E_THREADS,
    E_DEVICE, E_GPU_UTIL, E_EAGER, E_SKIP_WARMUP, E_GRAPH_SIZES, E_SEQ_TO_CAPTURE, E_HASH_ALGO, E_KV_DTYPE, E_TP, E_QUANT,
    E_TRACE, E_TRACE_MB, E_SPEC, E_TOKENIZER,
};

const struct option engine_long_options[] = {
    {"dtype", required_argument, 0, E_DTYPE},
    {"load-format", required_argument, 0, E_LOAD},
    {"max-model-len", required_argument, 0, E_MAX_LEN},
    {"block-size", required_argument, 0, E_BLOCK},
    {"num-gpu-blocks-override", required_argument, 0, E_NUM_BLOCKS},
    {"kv-cache-memory-bytes", required_argument, 0, E_KV_BYTES},
    {"enable-prefix-caching", no_argument, 0, E_PREFIX},
    {"no-enable-prefix-caching", no_argument, 0, E_NO_PREFIX},
    {"prefix-caching-hash-algo", required_argument, 0, E_HASH_ALGO},
    {"kv-cache-dtype", required_argument, 0, E_KV_DTYPE},
    {"enable-chunked-prefill", no_argument, 0, E_CHUNKED},
    {"no-enable-chunked-prefill", no_argument, 0, E_NO_CHUNKED},
    {"max-num-batched-tokens", required_argument, 0, E_BATCHED},
    {"max-num-seqs", required_argument, 0, E_SEQS},
    {"batching", required_argument, 0, E_BATCHING},
    {"seed", required_argument, 0, E_SEED},
    {"threads", required_argument, 0, E_THREADS},
    {"tensor-parallel-size", required_argument, 0, E_TP},
    {"quantization", required_argument, 0, E_QUANT},
    {"device", required_argument, 0, E_DEVICE},
    {"gpu-memory-utilization", required_argument, 0, E_GPU_UTIL},
    {"enforce-eager", no_argument, 0, E_EAGER},
    {"skip-warmup", no_argument, 0, E_SKIP_WARMUP},
    {"cuda-graph-sizes", required_argument, 0, E_GRAPH_SIZES},
    {"max-seq-len-to-capture", required_argument, 0, E_SEQ_TO_CAPTURE},
    {"trace", required_argument, 0, E_TRACE},
    {"trace-max-mb", required_argument, 0, E_TRACE_MB},
    {"speculative-config", required_argument, 0, E_SPEC},
    {"tokenizer", required_argument, 0, E_TOKENIZER},
    {0, 0, 0, 0},
};

const char *engine_usage =
    "engine flags: [--device auto|cpu|cuda] [--dtype auto|float32|bfloat16|float16] [--tokenizer DIR]\n"
    "  [--load-format auto|safetensors|dummy] [--max-model-len N] [--block-size 16]\n"
    "  [--gpu-memory-utilization 0.9] [--num-gpu-blocks-override N] [--kv-cache-memory-bytes N]\n"
    "  [--[no-]enable-prefix-caching] [--prefix-caching-hash-algo sha256|xxhash]\n"
    "  [--kv-cache-dtype auto|fp8|fp8_e4m3|fp8_e5m2]\n"
    "  [--[no-]enable-chunked-prefill] [--max-num-batched-tokens 2048]\n"
    "  [--max-num-seqs 256] [--enforce-eager] [--cuda-graph-sizes N|N,N,...] [--max-seq-len-to-capture 8192]\n"
    "  [--batching continuous|static] [--seed 0] [--threads N] [--skip-warmup]\n"
    "  [--tensor-parallel-size N | -tp N] [--quantization awq|awq_marlin | -q ...]\n"
    "  [--speculative-config '{\"method\": \"ngram\", \"num_speculative_tokens\": K, ...}']\n"
    "  [--trace FILE.json] [--trace-max-mb 64]\n";

/* --help's descriptions, vLLM's defaults in parentheses. */
const char *engine_help =
    "\nengine flags:\n"
    "  --device auto|cpu|cuda        where the model runs (auto: CUDA when built with it and a device\n"
    "                                answers, else the CPU)\n"
    "  --dtype auto|float32|bfloat16|float16\n"
    "                                weights and activations (auto: the checkpoint's; on CPU activations\n"
    "                                stay float32)\n"
    "  --load-format auto|safetensors|dummy\n"
    "                                dummy: random weights of the config's shapes (auto)\n"
    "  --tokenizer DIR               the tokenizer (and chat template) of this checkpoint directory\n"
    "                                instead of the model's (the model's)\n"
    "  --max-model-len N             context limit, 4k accepted (the config's max_position_embeddings)\n"
    "  --block-size N                KV block size in tokens (16)\n"
    "  --gpu-memory-utilization F    share of device memory for this instance (0.9)\n"
    "  --kv-cache-memory-bytes N     KV cache size, 40G accepted (CPU: 4 GiB; CUDA: from the utilization)\n"
    "  --num-gpu-blocks-override N   exact number of KV blocks (off)\n"
    "  --[no-]enable-prefix-caching  reuse KV blocks of identical prompt prefixes (on)\n"
    "  --prefix-caching-hash-algo sha256|xxhash\n"
    "                                the prefix cache's block hash (sha256)\n"
    "  --kv-cache-dtype auto|fp8|fp8_e4m3|fp8_e5m2\n"
    "                                the KV cache's element type: auto = the model's; fp8 (= fp8_e4m3)\n"
    "                                halves a bf16 cache's bytes, CPU only, scale 1.0 (auto)\n"
    "  --[no-]enable-chunked-prefill split long prompts across steps (on)\n"
    "  --max-num-batched-tokens N    token budget of one step (2048)\n"
    "  --max-num-seqs N              sequences per step (256)\n"
    "  --enforce-eager               no CUDA graphs (off)\n"
    "  --cuda-graph-sizes N|N,N,...  decode batch sizes captured as CUDA graphs (up to min(2 x\n"
    "                                max-num-seqs, 512))\n"
    "  --max-seq-len-to-capture N    longer decode contexts run eagerly (8192)\n"
    "  --batching continuous|static  static: a new batch only when the last has finished (continuous)\n"
    "  --seed S                      seeds requests that bring no seed (0)\n"
    "  --threads N                   CPU threads, the calling one included (the CPUs this process may\n"
    "                                run on)\n"
    "  --skip-warmup                 no warm-up forward at startup (off)\n"
    "  --tensor-parallel-size N, -tp N\n"
    "                                ranks the model is split over, threads of this process sharing\n"
    "                                --threads (1)\n"
    "  --quantization awq|awq_marlin, -q\n"
    "                                the checkpoint's quantization, checked against its\n"
    "                                quantization_config (from the checkpoint)\n"
    "  --speculative-config JSON     n-gram (prompt lookup) speculative decoding: {\"method\": \"ngram\",\n"
    "                                \"num_speculative_tokens\": K, \"prompt_lookup_max\": 5,\n"
    "                                \"prompt_lookup_min\": 5} (off)\n"
    "  --trace FILE.json             the engine's steps and each request's phases as a Chrome/Perfetto\n"
    "                                trace (ui.perfetto.dev), written when the engine stops (off)\n"
    "  --trace-max-mb N              the trace keeps its newest N MB of events (64)\n";

int engine_args_handle(engine_config_t *a, int c, const char *v) {
    switch (c) {
    case E_DTYPE:
        if (dtype_parse(v, &a->load.dtype, &a->load.dtype_auto))
            cli_usage_error("", "argument --dtype: invalid choice: '%s' (choose from 'auto', 'half', "
                            "'float16', 'bfloat16', 'float', 'float32')", v);
        return 1;
    case E_LOAD: {
        int f = load_format_parse(v);
        if (f < 0)
            cli_usage_error("", "argument --load-format: invalid choice: '%s' (choose from 'auto', "
                            "'safetensors', 'dummy')", v);
        a->load.load_format = (load_format_t)f;
        return 1;
    }
    case E_TOKENIZER: a->tokenizer_dir = v; return 1;
    case E_MAX_LEN: a->max_model_len = cli_parse_human_int("--max-model-len", v, 0x1p30); return 1;
    case E_BLOCK: {
        long long b = cli_parse_int("--block-size", v, 1, 128);
        if (b & (b - 1)) cli_usage_error("", "argument --block-size: invalid choice: %lld (choose from 1, 8, 16, 32, 64, 128)", b);
        a->block_size = (int32_t)b;
        return 1;
    }
    case E_NUM_BLOCKS:
        a->num_gpu_blocks_override = (int32_t)cli_parse_int("--num-gpu-blocks-override", v, 2, INT32_MAX / 2);
        return 1;
    case E_KV_BYTES:
        /* Up to 1 PiB: GPU pools are tens of GiB ("40G"). */
        a->kv_cache_memory_bytes = cli_parse_human_int("--kv-cache-memory-bytes", v, 0x1p50);
        return 1;
    case E_PREFIX: a->enable_prefix_caching = true; return 1;
    case E_NO_PREFIX: a->enable_prefix_caching = false; return 1;
    case E_HASH_ALGO: {
        /* vLLM's sha256_cbor and xxhash_cbor are refused; src/engine/kv_pool.c's header says why. */
        int h = kv_hash_algo_parse(v);
        if (h < 0)
            cli_usage_error("", "argument --prefix-caching-hash-algo: invalid choice: '%s' (choose from 'sha256', "
                            "'xxhash')", v);
        a->prefix_caching_hash_algo = (kv_hash_algo_t)h;
        return 1;
    }
    case E_KV_DTYPE: {
        sl_dtype_t fp8;
        if (engine_kv_cache_dtype_parse(v, &fp8))
            cli_usage_error("", "argument --kv-cache-dtype: invalid choice: '%s' (choose from 'auto', 'fp8', "
                            "'fp8_e4m3', 'fp8_e5m2')", v);
        a->kv_cache_dtype = v;
        return 1;
    }
    case E_CHUNKED: a->sched.enable_chunked_prefill = true; return 1;
    case E_NO_CHUNKED: a->sched.enable_chunked_prefill = false; return 1;
    case E_BATCHED:
        a->sched.max_num_batched_tokens = (int32_t)cli_parse_int("--max-num-batched-tokens", v, 1, 1 << 22);
        a->max_num_batched_tokens_set = true;
        return 1;
    case E_SEQS: a->sched.max_num_seqs = (int32_t)cli_parse_int("--max-num-seqs", v, 1, 1 << 16); return 1;
    case E_BATCHING:
        if (!strcmp(v, "continuous")) a->sched.static_batching = false;
        else if (!strcmp(v, "static")) a->sched.static_batching = true;
        else cli_usage_error("", "argument --batching: invalid choice: '%s' (choose from 'continuous', 'static')", v);
        return 1;
    case E_TRACE: a->trace_path = v; return 1;
    case E_SPEC: {
        sl_err_t err;
        if (spec_config_parse(&a->spec, v, &err)) cli_usage_error("", "argument %s", err.msg);
        return 1;
    }
    case E_TRACE_MB: a->trace_max_bytes = cli_parse_int("--trace-max-mb", v, 1, 1 << 20) << 20; return 1;
    case E_SEED: a->seed = (uint64_t)cli_parse_int("--seed", v, 0, INT64_MAX); return 1;
    case E_THREADS: a->threads = (int)cli_parse_int("--threads", v, 1, 4096); return 1;
    case E_TP: a->load.tensor_parallel_size = (int)cli_parse_int("--tensor-parallel-size", v, 1, 256); return 1;
    case E_QUANT:
        if (strcmp(v, "awq") && strcmp(v, "awq_marlin"))
            cli_usage_error("", "argument --quantization/-q: invalid choice: '%s' (choose from 'awq', 'awq_marlin')", v);
        a->load.quantization = v;
        return 1;
    case E_DEVICE:
        if (!strcmp(v, "auto")) a->device = ENGINE_DEVICE_AUTO;
        else if (!strcmp(v, "cpu")) a->device = ENGINE_DEVICE_CPU;
        else if (!strcmp(v, "cuda")) a->device = ENGINE_DEVICE_CUDA;
        else cli_usage_error("", "argument --device: invalid choice: '%s' (choose from 'auto', 'cpu', 'cuda')", v);
        return 1;
    case E_GPU_UTIL: {
        char *end;
        double u = strtod(v, &end);
        if (end == v || *end || !(u > 0.0 && u <= 1.0))
            cli_usage_error("", "argument --gpu-memory-utilization: invalid value '%s' (expected a number in (0, 1])", v);
        a->gpu_memory_utilization = u;
        return 1;
    }
    case E_EAGER: a->enforce_eager = true; return 1;
    case E_SKIP_WARMUP: a->skip_warmup = true; return 1;
    case E_GRAPH_SIZES: {
        /* vLLM takes several values after the flag; here one value or a comma list. */
        a->n_cuda_graph_sizes = 0;
        const char *p = v;
        for (;;) {
            char num[32];
            size_t len = strcspn(p, ",");
            if (len == 0 || len >= sizeof num || a->n_cuda_graph_sizes == ENGINE_MAX_GRAPH_SIZES)
                cli_usage_error("", "argument --cuda-graph-sizes: invalid value '%s' (one size, or up to %d "
                                "comma-separated sizes)", v, ENGINE_MAX_GRAPH_SIZES);
            memcpy(num, p, len);
            num[len] = '\0';
            a->cuda_graph_sizes[a->n_cuda_graph_sizes++] =
                (int32_t)cli_parse_int("--cuda-graph-sizes", num, 1, 1 << 16);
            if (!p[len]) break;
            p += len + 1;
        }
        return 1;
    }
    case E_SEQ_TO_CAPTURE:
        a->max_seq_len_to_capture = (int32_t)cli_parse_int("--max-seq-len-to-capture", v, 1, INT32_MAX);
        return 1;
    }
    return 0;
}

engine_t *cli_engine_create(const engine_config_t *c) {
    sl_err_t err;
    engine_t *e = engine_create(c, &err);
    if (!e) sl_die("%s", err.msg);
    return e;
}
