/* cli_engine.c - the engine flags (see cli_engine.h) and loading model + engine.
 *
 * --device auto picks CUDA when this build has the backend and device 0
 * answers, else the CPU (nothing is logged for that choice before the model
 * has loaded, so a bad checkpoint still fails with exactly one line). On
 * CUDA, startup follows vLLM's worker: check free memory against
 * --gpu-memory-utilization, load the weights (converted to the activation
 * dtype: --dtype auto is bfloat16 for a bf16 checkpoint, else float16, as
 * vLLM), run profiling forwards at the largest shapes the scheduler can
 * produce, size the KV pool (kv_sizing.c), warm up, create the engine. The
 * CPU path is unchanged: fp32 activations, --kv-cache-memory-bytes (4 GiB).
 */
#define _GNU_SOURCE
#include "engine_args.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/kv_sizing.h"

enum {
    E_DTYPE = ENGINE_OPT_BASE, E_LOAD, E_MAX_LEN, E_BLOCK, E_NUM_BLOCKS, E_KV_BYTES, E_PREFIX,
    E_NO_PREFIX, E_CHUNKED, E_NO_CHUNKED, E_BATCHED, E_SEQS, E_BATCHING, E_SEED, E_THREADS,
    E_DEVICE, E_GPU_UTIL, E_EAGER, E_SKIP_WARMUP, E_GRAPH_SIZES, E_SEQ_TO_CAPTURE, E_HASH_ALGO,
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
    {"enable-chunked-prefill", no_argument, 0, E_CHUNKED},
    {"no-enable-chunked-prefill", no_argument, 0, E_NO_CHUNKED},
    {"max-num-batched-tokens", required_argument, 0, E_BATCHED},
    {"max-num-seqs", required_argument, 0, E_SEQS},
    {"batching", required_argument, 0, E_BATCHING},
    {"seed", required_argument, 0, E_SEED},
    {"threads", required_argument, 0, E_THREADS},
    {"device", required_argument, 0, E_DEVICE},
    {"gpu-memory-utilization", required_argument, 0, E_GPU_UTIL},
    {"enforce-eager", no_argument, 0, E_EAGER},
    {"skip-warmup", no_argument, 0, E_SKIP_WARMUP},
    {"cuda-graph-sizes", required_argument, 0, E_GRAPH_SIZES},
    {"max-seq-len-to-capture", required_argument, 0, E_SEQ_TO_CAPTURE},
    {0, 0, 0, 0},
};

const char *engine_usage =
    "engine flags: [--device auto|cpu|cuda] [--dtype auto|float32|bfloat16|float16]\n"
    "  [--load-format auto|safetensors|dummy] [--max-model-len N] [--block-size 16]\n"
    "  [--gpu-memory-utilization 0.9] [--num-gpu-blocks-override N] [--kv-cache-memory-bytes N]\n"
    "  [--[no-]enable-prefix-caching] [--prefix-caching-hash-algo sha256|xxhash]\n"
    "  [--[no-]enable-chunked-prefill] [--max-num-batched-tokens 2048]\n"
    "  [--max-num-seqs 256] [--enforce-eager] [--cuda-graph-sizes N|N,N,...] [--max-seq-len-to-capture 8192]\n"
    "  [--batching continuous|static] [--seed 0] [--threads N] [--skip-warmup]\n";

void engine_args_default(engine_args_t *a) {
    memset(a, 0, sizeof *a);
    a->load = (model_load_opts_t){.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true, .progress = true};
    a->engine.block_size = 16;
    a->engine.kv_cache_memory_bytes = 4ll << 30;
    a->engine.enable_prefix_caching = true;
    a->engine.prefix_caching_hash_algo = KV_HASH_SHA256;
    a->engine.sched = (sched_config_t){.max_num_batched_tokens = 2048, .max_num_seqs = 256,
                                       .enable_chunked_prefill = true};
    a->device = DEVICE_AUTO;
    a->gpu_memory_utilization = 0.9;
    a->max_seq_len_to_capture = 8192;
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
    case E_MAX_LEN: a->max_model_len = cli_parse_human_int("--max-model-len", v, 0x1p30); return 1;
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
        /* Up to 1 PiB: GPU pools are tens of GiB ("40G"). */
        a->engine.kv_cache_memory_bytes = cli_parse_human_int("--kv-cache-memory-bytes", v, 0x1p50);
        a->kv_cache_memory_bytes_set = true;
        return 1;
    case E_PREFIX: a->engine.enable_prefix_caching = true; return 1;
    case E_NO_PREFIX: a->engine.enable_prefix_caching = false; return 1;
    case E_HASH_ALGO: {
        /* vLLM's sha256_cbor and xxhash_cbor are refused; src/engine/kv_pool.c's header says why. */
        int h = kv_hash_algo_parse(v);
        if (h < 0)
            cli_usage_error("", "argument --prefix-caching-hash-algo: invalid choice: '%s' (choose from 'sha256', "
                            "'xxhash')", v);
        a->engine.prefix_caching_hash_algo = (kv_hash_algo_t)h;
        return 1;
    }
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
    case E_DEVICE:
        if (!strcmp(v, "auto")) a->device = DEVICE_AUTO;
        else if (!strcmp(v, "cpu")) a->device = DEVICE_CPU;
        else if (!strcmp(v, "cuda")) a->device = DEVICE_CUDA;
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
            if (len == 0 || len >= sizeof num || a->n_cuda_graph_sizes == CLI_MAX_GRAPH_SIZES)
                cli_usage_error("", "argument --cuda-graph-sizes: invalid value '%s' (one size, or up to %d "
                                "comma-separated sizes)", v, CLI_MAX_GRAPH_SIZES);
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

/* ---- CUDA startup ------------------------------------------------------------ */

#ifdef SERVELAB_HAVE_CUDA
#define GIB ((double)(1ll << 30))

/* vLLM's _get_and_verify_dtype: auto keeps a bf16 checkpoint in bf16 and runs
 * fp32 and fp16 checkpoints in fp16. */
static sl_dtype_t cuda_act_dtype(const engine_args_t *a, const model_config_t *cfg) {
    if (!a->load.dtype_auto) return a->load.dtype;
    return cfg->torch_dtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F16;
}

static void log_cast(sl_dtype_t from, sl_dtype_t to) {
    if (from == to) return;
    if (to == DTYPE_F32) LOG_INFO("Upcasting torch.%s to torch.%s.", dtype_torch_name(from), dtype_torch_name(to));
    else if (from == DTYPE_F32) LOG_INFO("Downcasting torch.%s to torch.%s.", dtype_torch_name(from), dtype_torch_name(to));
    else LOG_WARNING("Casting torch.%s to torch.%s.", dtype_torch_name(from), dtype_torch_name(to));
}

static void mem_now(const sl_ops_t *ops, int64_t *free_b, int64_t *total_b) {
    sl_err_t err;
    if (cuda_backend_mem_info(ops, free_b, total_b, &err)) sl_die("%s", err.msg);
}

/* A startup forward that failed on the device ends the process with the
 * backend's first error (ops.h: last_error). */
static void check_device(const sl_ops_t *ops, const char *what) {
    char msg[SL_ERR_LEN];
    if (ops->last_error && ops->last_error(ops->ctx, msg, sizeof msg))
        sl_die("%s failed: %s%s", what, msg,
               strstr(msg, "(in op ") ? "" : ". Hint: SERVELAB_CUDA_SYNC_OPS=1 names the op that faulted");
}

/* A dummy step: S sequences share T tokens (the first T % S get one more).
 * With `context`, each sequence has max_model_len tokens in the cache after
 * the step (its queries are the last ones); otherwise it is a fresh prompt.
 * Every block-table entry is the scratch cache's one block and every slot is
 * -1 (nothing is written), so one block of KV memory serves any shape. Each
 * sequence produces a row of logits. Needs S <= T <= S * max_model_len. */
static void dummy_batch(sl_batch_t *b, int32_t S, int32_t T, int32_t max_model_len, bool context, int64_t V) {
    SL_ASSERT(S >= 1 && T >= S && (int64_t)T <= (int64_t)S * max_model_len);
    b->n_tokens = T;
    b->n_seqs = S;
    b->n_logits = S;
    int32_t t = 0;
    for (int32_t s = 0; s < S; s++) {
        int32_t q = T / S + (s < T % S), len = context ? max_model_len : q;
        b->query_start[s] = t;
        for (int32_t i = 0; i < q; i++, t++) {
            b->token_ids[t] = (int32_t)(t % V);
            b->positions[t] = len - q + i;
            b->slot_mapping[t] = -1;
        }
        b->query_start[s + 1] = t;
        b->seq_lens[s] = len;
        b->logits_index[s] = t - 1;
        memset(b->block_tables + (size_t)s * (size_t)b->max_blocks, 0, (size_t)b->max_blocks * sizeof(int32_t));
    }
}

/* One block of KV cache (kv_cache_init zeroes block 0, so attention over it reads finite values). */
static void scratch_kv(kv_cache_t *kv, const llama_model_t *m, int32_t block_size) {
    sl_err_t err;
    if (kv_cache_init(kv, m, 1, block_size, &err)) sl_die("%s", err.msg);
}

static int32_t min32(int64_t a, int64_t b) { return (int32_t)(a < b ? a : b); }

/* Runs dummy steps (S sequences, T tokens, with or without full context) on
 * the scratch cache; `what` names them in an error. */
typedef struct {
    int32_t S, T;
    bool context;
} shape_t;
static void run_shapes(llama_model_t *m, const kv_cache_t *kv, int32_t max_model_len, const shape_t *shapes, int n,
                       const char *what) {
    sl_batch_t b;
    batch_init(&b, m->max_tokens, m->max_seqs, m->max_blocks);
    float *logits = sl_malloc((size_t)m->max_seqs * (size_t)m->cfg.vocab_size * sizeof(float));
    for (int i = 0; i < n; i++) {
        dummy_batch(&b, shapes[i].S, shapes[i].T, max_model_len, shapes[i].context, m->cfg.vocab_size);
        llama_forward(m, &b, kv, logits);
        check_device(m->ops, what);
    }
    free(logits);
    batch_free(&b);
}

/* One device sampling of S rows over the logits the last forward left in
 * m->d_logits, with every stage on (temperature, top_k, top_p, min_p,
 * penalties, 20 logprobs): the profile then counts the sampler's workspace,
 * and the warm-up its first-use costs, as vLLM's dummy sampler run does. */
static void run_sampler(llama_model_t *m, int32_t S, const char *what) {
    const sl_ops_t *ops = m->ops;
    if (!ops->sample || !m->d_logits) return;
    sampling_params_t p;
    sampling_params_default(&p);
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.logprobs = SAMPLING_MAX_LOGPROBS;
    int32_t history[2] = {0, 1};
    sampling_row_t *rows = sl_malloc((size_t)S * sizeof *rows);
    int64_t n_ids = (int64_t)S * sampling_row_n_ids(&p, 1, 1, m->cfg.n_eos_token_ids), off = 0;
    int32_t *ids = sl_malloc((size_t)n_ids * sizeof *ids);
    float *bias = sl_malloc((size_t)n_ids * sizeof *bias);
    for (int32_t s = 0; s < S; s++)
        off = sampling_row_resolve(&rows[s], &p, history, 1, history + 1, 1, m->cfg.eos_token_ids,
                                   m->cfg.n_eos_token_ids, 0.5, ids, bias, off);
    sample_result_t *out = sl_malloc((size_t)S * sizeof *out);
    ops->sample(ops->ctx, m->d_logits, S, m->cfg.vocab_size, rows, ids, bias, off, out);
    check_device(ops, what);
    free(out);
    free(bias);
    free(ids);
    free(rows);
    sampling_params_free(&p);
}

/* CUDA graphs of decode steps, as vLLM's capture_model: the sizes of
 * --cuda-graph-sizes (one value: vLLM's pattern up to it, by default
 * min(2 * max_num_seqs, 512); several: those), for contexts up to
 * --max-seq-len-to-capture. --skip-warmup defers each capture to its size's
 * first use, so that cold start shows in the first decode steps too. */
static void capture_graphs(const engine_args_t *a, engine_bundle_t *b, int32_t max_model_len) {
    if (a->enforce_eager) {
        LOG_INFO("Skipping CUDA graph capture (--enforce-eager): decode runs eagerly.");
        return;
    }
    const sched_config_t *sc = &a->engine.sched;
    int32_t sizes[CLI_MAX_GRAPH_SIZES + 80];
    int n;
    if (a->n_cuda_graph_sizes > 1) {
        n = a->n_cuda_graph_sizes;
        memcpy(sizes, a->cuda_graph_sizes, (size_t)n * sizeof sizes[0]);
    } else {
        int32_t top = a->n_cuda_graph_sizes == 1 ? a->cuda_graph_sizes[0] : min32(2 * (int64_t)sc->max_num_seqs, 512);
        n = llama_graph_sizes(top, sc->max_num_seqs, sc->max_num_batched_tokens, sizes, (int)(sizeof sizes / sizeof sizes[0]));
    }
    int32_t max_seq_len = min32(a->max_seq_len_to_capture, max_model_len);
    const sl_ops_t *ops = b->model.ops;
    int64_t free0, free1, total;
    sl_err_t err;
    mem_now(ops, &free0, &total);
    double t0 = sl_now_s();
    if (engine_capture_graphs(b->engine, sizes, n, max_seq_len, a->skip_warmup, &err))
        sl_die("%s. Hint: --enforce-eager runs without CUDA graphs", err.msg);
    mem_now(ops, &free1, &total);
    const llama_model_t *m = &b->model;
    if (m->n_graphs == 0) {
        LOG_INFO("No CUDA graph size fits --max-num-seqs %d: decode runs eagerly.", sc->max_num_seqs);
    } else if (a->skip_warmup) {
        LOG_INFO("Deferring CUDA graph capture to each batch size's first use (--skip-warmup): %d sizes, 1 to %d "
                 "sequences, contexts up to %d tokens", m->n_graphs, m->graph_sizes[m->n_graphs - 1], max_seq_len);
    } else {
        LOG_INFO("Graph capturing finished in %.0f secs, took %.2f GiB", sl_now_s() - t0,
                 (double)(free0 > free1 ? free0 - free1 : 0) / GIB);
        LOG_DEBUG("CUDA graphs: %d sizes, 1 to %d sequences, contexts up to %d tokens", m->n_graphs,
                  m->graph_sizes[m->n_graphs - 1], max_seq_len);
    }
}

static void load_cuda(engine_args_t *a, engine_bundle_t *b, const model_config_t *cfg, int32_t max_blocks,
                      const cuda_device_info_t *info) {
    sched_config_t *sc = &a->engine.sched;
    sl_err_t err;
    sl_dtype_t act = cuda_act_dtype(a, cfg);
    if (act == DTYPE_BF16 && info->cc_major < 8)
        sl_die("Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your %s GPU has "
               "compute capability %d.%d. You can use float16 instead by explicitly setting the `dtype` flag in "
               "CLI, for example: --dtype=half.", info->name, info->cc_major, info->cc_minor);
    cuda_backend_opts_t opts = {.device = 0, .act_dtype = act};
    const sl_ops_t *ops = cuda_backend_init(&opts, &err);
    if (!ops) sl_die("%s", err.msg);

    /* vLLM's init_device: this instance's share must be free before anything loads. */
    int64_t free0, total, free1, free2, requested;
    mem_now(ops, &free0, &total);
    if (kv_sizing_check_startup(opts.device, total, free0, a->gpu_memory_utilization, &requested, &err))
        sl_die("%s", err.msg);

    /* Every weight in the activation dtype: the kernels and cuBLAS take one dtype. */
    model_load_opts_t load = a->load;
    load.dtype_auto = false;
    load.dtype = act;
    if (!(b->tok = tok_load(a->model_dir, &err))) sl_die("%s", err.msg);
    if (llama_init(&b->model, a->model_dir, &load, ops, sc->max_num_batched_tokens, sc->max_num_seqs, max_blocks,
                   &err)) {
        char msg[SL_ERR_LEN];
        if (ops->last_error && ops->last_error(ops->ctx, msg, sizeof msg)) sl_die("%s (%s)", err.msg, msg);
        sl_die("%s", err.msg);
    }
    check_device(ops, "loading the weights");
    b->on_cuda = true;
    if (a->device == DEVICE_AUTO) LOG_INFO("Automatically detected platform cuda.");
    LOG_INFO("Using CUDA device %d: %s (compute capability %d.%d, %.2f GiB), %s activations", opts.device,
             info->name, info->cc_major, info->cc_minor, (double)info->total_bytes / GIB, dtype_torch_name(act));
    log_cast(cfg->torch_dtype, act);
    mem_now(ops, &free1, &total);

    double t0 = sl_now_s();
    llama_model_t *m = &b->model;
    int32_t B = a->engine.block_size, L = sc->max_model_len;
    int32_t Tmax = sc->max_num_batched_tokens, Smax = min32(sc->max_num_seqs, Tmax);
    kv_cache_t kv;
    scratch_kv(&kv, m, B);

    /* Profile only when the pool size depends on it (vLLM always profiles; an
     * explicit size here skips it, so with --skip-warmup too the first request
     * meets every first-use cost: lazy module loading, cuBLAS heuristics,
     * workspace growth). The shapes: the largest prefill (fresh prompts of up
     * to max_model_len tokens), the largest mixed step (every sequence at
     * max_model_len context, the budget spread over them) and the largest
     * decode step (which sizes the attention partials and the logits). */
    bool profile = a->engine.num_gpu_blocks_override <= 0 && !a->kv_cache_memory_bytes_set;
    int64_t activation = 0;
    double profile_s = 0.0;
    if (profile) {
        int32_t S1 = min32(Smax, ((int64_t)Tmax + L - 1) / L);
        shape_t shapes[] = {
            {S1, min32(Tmax, (int64_t)S1 * L), false},
            {Smax, min32(Tmax, (int64_t)Smax * L), true},
            {Smax, Smax, true},
        };
        run_shapes(m, &kv, L, shapes, 3, "the profiling forward");
        run_sampler(m, Smax, "the profiling sampler run"); /* the last shape left Smax rows of logits */
        mem_now(ops, &free2, &total);
        profile_s = sl_now_s() - t0;
        /* Everything this process holds beyond the weights: scratch activations,
         * the one scratch KV block, workspaces, cuBLAS. */
        activation = free0 - free2 - (int64_t)m->w.n_bytes;
        if (activation < 0) activation = 0; /* another process freed memory meanwhile */
    } else {
        activation = free0 - free1 - (int64_t)m->w.n_bytes;
        if (activation < 0) activation = 0;
    }

    kv_sizing_in_t in = {
        .device = opts.device, .total_bytes = total, .free_at_start_bytes = free0,
        .gpu_memory_utilization = a->gpu_memory_utilization, .weights_bytes = (int64_t)m->w.n_bytes,
        .activation_peak_bytes = activation,
        .block_bytes = (int64_t)kv_cache_block_bytes(&m->cfg, B, ops->act_dtype), .block_size = B,
        .max_model_len = L, .num_gpu_blocks_override = a->engine.num_gpu_blocks_override,
        .kv_cache_memory_bytes = a->kv_cache_memory_bytes_set ? a->engine.kv_cache_memory_bytes : 0,
    };
    kv_sizing_out_t sized;
    if (kv_sizing_compute(&in, &sized, &err)) sl_die("%s", err.msg);
    if (profile)
        LOG_INFO("Memory profiling takes %.2f seconds. the current vLLM instance can use total_gpu_memory "
                 "(%.2fGiB) x gpu_memory_utilization (%.2f) = %.2fGiB; model weights take %.2fGiB; activation "
                 "peak memory takes %.2fGiB; the rest of the memory reserved for KV Cache is %.2fGiB.",
                 profile_s, (double)total / GIB, a->gpu_memory_utilization, (double)sized.requested_bytes / GIB,
                 (double)m->w.n_bytes / GIB, (double)activation / GIB, (double)sized.available_bytes / GIB);
    if (sized.from_kv_cache_memory_bytes) {
        char f[32], r[32];
        LOG_INFO("Initial free memory %s GiB, reserved %s GiB memory for KV Cache as specified by "
                 "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
                 "gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
                 "control of KV cache memory size. If OOM'ed, check the difference of initial free memory "
                 "between the current run and the previous run where kv_cache_memory_bytes is suggested and "
                 "update it correspondingly.", kv_sizing_format_gib(free0, f, sizeof f),
                 kv_sizing_format_gib(sized.available_bytes, r, sizeof r));
    }

    if (a->skip_warmup) {
        LOG_INFO("Skipping the warm-up forward (--skip-warmup): the first requests pay the cold-start costs.");
    } else {
        /* Decode steps at batch 1 and at the largest batch, at full context. */
        shape_t shapes[] = {{1, 1, true}, {Smax, Smax, true}};
        run_shapes(m, &kv, L, shapes, 2, "the warm-up forward");
        run_sampler(m, Smax, "the warm-up sampler run");
    }
    kv_cache_free(&kv, m);

    /* engine_create sizes the pool from these bytes exactly as kv_sizing did
     * (floor(bytes / block_bytes)); an override it takes as is. */
    if (!sized.overridden) a->engine.kv_cache_memory_bytes = sized.available_bytes;
    if (!(b->engine = engine_create(&a->engine, m, b->tok, a->seed, &err))) {
        char msg[SL_ERR_LEN];
        if (ops->last_error && ops->last_error(ops->ctx, msg, sizeof msg)) sl_die("%s (%s)", err.msg, msg);
        sl_die("%s", err.msg);
    }
    engine_stats_t st;
    engine_get_stats(b->engine, &st);
    SL_ASSERT(st.n_blocks == sized.n_blocks);
    capture_graphs(a, b, L);
    LOG_INFO("init engine (profile, create kv cache, warmup model) took %.2f seconds", sl_now_s() - t0);
}
#endif

/* Whether to run on CUDA: --device cpu never; cuda or dies saying why not;
 * auto when this build has the backend and device 0 answers. */
static bool want_cuda(const engine_args_t *a, cuda_device_info_t *info) {
    memset(info, 0, sizeof *info);
    if (a->device == DEVICE_CPU) return false;
#ifdef SERVELAB_HAVE_CUDA
    sl_err_t err;
    if (cuda_backend_probe(0, info, &err) == 0) return true;
    if (a->device == DEVICE_CUDA) sl_die("%s", err.msg);
    LOG_DEBUG("--device auto: no usable CUDA device (%s); using the CPU", err.msg);
    return false;
#else
    if (a->device == DEVICE_CUDA)
        sl_die("--device cuda: this servelab was built without the CUDA backend (no nvcc at configure time, or "
               "-DSERVELAB_CUDA=OFF). Hint: rebuild with -DSERVELAB_CUDA=ON, or run with --device cpu");
    return false;
#endif
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

    cuda_device_info_t info;
    if (want_cuda(a, &info)) {
#ifdef SERVELAB_HAVE_CUDA
        load_cuda(a, b, &cfg, max_blocks, &info);
        return;
#endif
    }
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
