/* cli_engine.c - the engine flags (see cli_engine.h) and loading model + engine. */
#define _GNU_SOURCE
#include "cli_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

enum {
    E_DTYPE = ENGINE_OPT_BASE, E_LOAD, E_MAX_LEN, E_BLOCK, E_NUM_BLOCKS, E_KV_BYTES, E_PREFIX,
    E_NO_PREFIX, E_CHUNKED, E_NO_CHUNKED, E_BATCHED, E_SEQS, E_BATCHING, E_SEED, E_THREADS,
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
    {"enable-chunked-prefill", no_argument, 0, E_CHUNKED},
    {"no-enable-chunked-prefill", no_argument, 0, E_NO_CHUNKED},
    {"max-num-batched-tokens", required_argument, 0, E_BATCHED},
    {"max-num-seqs", required_argument, 0, E_SEQS},
    {"batching", required_argument, 0, E_BATCHING},
    {"seed", required_argument, 0, E_SEED},
    {"threads", required_argument, 0, E_THREADS},
    {0, 0, 0, 0},
};

const char *engine_usage =
    "engine flags: [--dtype auto|float32|bfloat16|float16] [--load-format auto|safetensors|dummy]\n"
    "  [--max-model-len N] [--block-size 16] [--num-gpu-blocks-override N] [--kv-cache-memory-bytes N]\n"
    "  [--[no-]enable-prefix-caching] [--[no-]enable-chunked-prefill] [--max-num-batched-tokens 2048]\n"
    "  [--max-num-seqs 256] [--batching continuous|static] [--seed 0] [--threads N]\n";

void engine_args_default(engine_args_t *a) {
    memset(a, 0, sizeof *a);
    a->load = (model_load_opts_t){.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true, .progress = true};
    a->engine.block_size = 16;
    a->engine.kv_cache_memory_bytes = 4ll << 30;
    a->engine.enable_prefix_caching = true;
    a->engine.sched = (sched_config_t){.max_num_batched_tokens = 2048, .max_num_seqs = 256,
                                       .enable_chunked_prefill = true};
}

long long cli_parse_human_int(const char *flag, const char *value) {
    char *end;
    double v = strtod(value, &end);
    double mult = 1;
    if (*end == 'k') mult = 1e3;
    else if (*end == 'K') mult = 1024;
    else if (*end == 'm') mult = 1e6;
    else if (*end == 'M') mult = 1024.0 * 1024.0;
    if (mult != 1) end++;
    double x = v * mult;
    if (end == value || *end || !(x >= 1 && x <= (double)(1 << 30)) || x != floor(x))
        cli_usage_error("", "argument %s: invalid value '%s'", flag, value);
    return (long long)x;
}

int engine_args_handle(engine_args_t *a, int c, const char *v) {
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
    case E_MAX_LEN: a->max_model_len = cli_parse_human_int("--max-model-len", v); return 1;
    case E_BLOCK: {
        long long b = cli_parse_int("--block-size", v, 1, 128);
        if (b & (b - 1)) cli_usage_error("", "argument --block-size: invalid choice: %lld (choose from 1, 8, 16, 32, 64, 128)", b);
        a->engine.block_size = (int32_t)b;
        return 1;
    }
    case E_NUM_BLOCKS:
        a->engine.num_gpu_blocks_override = (int32_t)cli_parse_int("--num-gpu-blocks-override", v, 2, INT32_MAX / 2);
        return 1;
    case E_KV_BYTES:
        a->engine.kv_cache_memory_bytes = cli_parse_human_int("--kv-cache-memory-bytes", v);
        return 1;
    case E_PREFIX: a->engine.enable_prefix_caching = true; return 1;
    case E_NO_PREFIX: a->engine.enable_prefix_caching = false; return 1;
    case E_CHUNKED: a->engine.sched.enable_chunked_prefill = true; return 1;
    case E_NO_CHUNKED: a->engine.sched.enable_chunked_prefill = false; return 1;
    case E_BATCHED:
        a->engine.sched.max_num_batched_tokens = (int32_t)cli_parse_int("--max-num-batched-tokens", v, 1, 1 << 22);
        a->max_num_batched_tokens_set = true;
        return 1;
    case E_SEQS: a->engine.sched.max_num_seqs = (int32_t)cli_parse_int("--max-num-seqs", v, 1, 1 << 16); return 1;
    case E_BATCHING:
        if (!strcmp(v, "continuous")) a->engine.sched.static_batching = false;
        else if (!strcmp(v, "static")) a->engine.sched.static_batching = true;
        else cli_usage_error("", "argument --batching: invalid choice: '%s' (choose from 'continuous', 'static')", v);
        return 1;
    case E_SEED: a->seed = (uint64_t)cli_parse_int("--seed", v, 0, INT64_MAX); return 1;
    case E_THREADS: a->threads = (int)cli_parse_int("--threads", v, 1, 4096); return 1;
    }
    return 0;
}

struct option *cli_merge_options(const struct option *own) {
    size_t n_own = 0, n_eng = 0;
    while (own[n_own].name) n_own++;
    while (engine_long_options[n_eng].name) n_eng++;
    struct option *all = sl_calloc(n_own + n_eng + 1, sizeof *all);
    memcpy(all, own, n_own * sizeof *all);
    memcpy(all + n_own, engine_long_options, n_eng * sizeof *all);
    return all;
}

void engine_bundle_load(engine_args_t *a, engine_bundle_t *b) {
    memset(b, 0, sizeof *b);
    sl_err_t err;
    model_config_t cfg;
    if (config_load(a->model_dir, &cfg, &err)) sl_die("%s", err.msg);
    if (a->max_model_len == 0) a->max_model_len = cfg.max_position_embeddings;
    if (a->max_model_len > cfg.max_position_embeddings)
        sl_die("User-specified max_model_len (%lld) is greater than the derived max_model_len "
               "(max_position_embeddings=%lld in %s/config.json).", a->max_model_len,
               (long long)cfg.max_position_embeddings, a->model_dir);
    sched_config_t *sc = &a->engine.sched;
    sc->max_model_len = (int32_t)a->max_model_len;
    if (!sc->enable_chunked_prefill && !a->max_num_batched_tokens_set && sc->max_num_batched_tokens < sc->max_model_len)
        sc->max_num_batched_tokens = sc->max_model_len;
    int32_t max_blocks = (sc->max_model_len + a->engine.block_size - 1) / a->engine.block_size;

    const sl_ops_t *ops = cpu_backend_init(a->threads);
    if (!(b->tok = tok_load(a->model_dir, &err))) sl_die("%s", err.msg);
    if (llama_init(&b->model, a->model_dir, &a->load, ops, sc->max_num_batched_tokens, sc->max_num_seqs,
                   max_blocks, &err))
        sl_die("%s", err.msg);
    double t0 = sl_now_s();
    if (!(b->engine = engine_create(&a->engine, &b->model, b->tok, a->seed, &err))) sl_die("%s", err.msg);
    LOG_INFO("init engine (profile, create kv cache, warmup model) took %.2f seconds", sl_now_s() - t0);
}

void engine_bundle_free(engine_bundle_t *b) {
    engine_free(b->engine);
    llama_free(&b->model);
    tok_free(b->tok);
    memset(b, 0, sizeof *b);
}
