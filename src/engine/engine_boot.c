/* engine_boot.c - the engine bootstrap (engine.h engine_create): device, model, KV size, warm-up, graphs.
 *
 * One path for `serve`, `generate`, every benchmark and the tests. --device
 * auto picks CUDA when this build has the backend and device 0 answers,
 * else the CPU; the choice and its reason are logged at INFO once the model
 * has loaded (not before, so a bad checkpoint still fails with exactly one
 * line). On CUDA,
 * startup follows vLLM's worker: check free memory against
 * --gpu-memory-utilization, load the weights (in the activation dtype), run
 * profiling forwards at the largest shapes the scheduler can produce, size
 * the KV pool from what they left (kv_sizing.c), warm up, build the engine,
 * capture CUDA graphs. The CPU path: fp32 activations, the KV cache from
 * --kv-cache-memory-bytes (4 GiB). Every failure is one line in err.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "engine_internal.h"
#include "servelab/kv_sizing.h"

#define GIB ((double)(1ll << 30))
#define CPU_KV_CACHE_BYTES (4ll << 30)

void engine_config_default(engine_config_t *c) {
    memset(c, 0, sizeof *c);
    c->load = (model_load_opts_t){.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true, .progress = true};
    c->device = ENGINE_DEVICE_AUTO;
    c->gpu_memory_utilization = 0.9;
    c->max_seq_len_to_capture = 8192;
    c->block_size = 16;
    c->enable_prefix_caching = true;
    c->sched = (sched_config_t){.max_num_batched_tokens = 2048, .max_num_seqs = 256, .enable_chunked_prefill = true};
}

/* --max-model-len against the checkpoint, and vLLM's budget rule: without
 * chunked prefill an unset budget grows to max_model_len. */
static int resolve_lengths(engine_config_t *c, const model_config_t *mc, sl_err_t *err) {
    if (c->max_model_len == 0) c->max_model_len = mc->max_position_embeddings;
    if (c->max_model_len > mc->max_position_embeddings)
        return sl_fail(err, "User-specified max_model_len (%lld) is greater than the derived max_model_len "
                       "(max_position_embeddings=%lld in %s/config.json).", (long long)c->max_model_len,
                       (long long)mc->max_position_embeddings, c->model_dir);
    sched_config_t *sc = &c->sched;
    sc->max_model_len = (int32_t)c->max_model_len;
    if (!sc->enable_chunked_prefill && !c->max_num_batched_tokens_set && sc->max_num_batched_tokens < sc->max_model_len)
        sc->max_num_batched_tokens = sc->max_model_len;
    return 0;
}

/* A step that failed may have failed on the device: err gets the backend's
 * own message after its own, "... (CUDA error: ...)". */
static void add_device_error(const sl_ops_t *ops, sl_err_t *err) {
    char msg[SL_ERR_LEN], what[SL_ERR_LEN];
    if (!ops->last_error || !ops->last_error(ops->ctx, msg, sizeof msg)) return;
    snprintf(what, sizeof what, "%s", err->msg);
    sl_fail(err, "%s (%s)", what, msg);
}

/* Rows of logits a step can ask for: one per sequence, and with
 * speculative decoding one more per draft, never more than the step's
 * tokens (the model's and the runner's max_seqs). */
static int32_t max_logit_rows(const engine_config_t *c) {
    const sched_config_t *sc = &c->sched;
    if (!c->spec.on) return sc->max_num_seqs;
    int64_t rows = (int64_t)sc->max_num_seqs * (1 + c->spec.num_speculative_tokens);
    int64_t cap = sc->max_num_batched_tokens > sc->max_num_seqs ? sc->max_num_batched_tokens : sc->max_num_seqs;
    return (int32_t)(rows < cap ? rows : cap);
}

/* The model and tokenizer on `ops`; frees what it made on failure. */
static int load_model(const engine_config_t *c, const model_load_opts_t *load, const sl_ops_t *ops,
                      llama_model_t *m, tokenizer_t **tok, sl_err_t *err) {
    if (!(*tok = tok_load(c->tokenizer_dir ? c->tokenizer_dir : c->model_dir, err))) return -1;
    if (llama_init(m, c->model_dir, load, ops, c->sched.max_num_batched_tokens, max_logit_rows(c), err)) {
        add_device_error(ops, err);
        tok_free(*tok);
        *tok = NULL;
        return -1;
    }
    return 0;
}

/* Builds the engine over a loaded model; on failure frees model and tokenizer. */
static engine_t *assemble(const engine_config_t *c, llama_model_t *m, tokenizer_t *tok, sl_err_t *err) {
    engine_t *e = engine_assemble(c, m, tok, err);
    if (e) return e;
    add_device_error(m->ops, err);
    llama_free(m);
    tok_free(tok);
    return NULL;
}

sl_dtype_t engine_cuda_act_dtype(const model_load_opts_t *load, const model_config_t *mc) {
    if (!load->dtype_auto) return load->dtype;
    return mc->torch_dtype == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F16;
}

int engine_kv_cache_dtype_parse(const char *name, sl_dtype_t *fp8) {
    if (!name || !strcmp(name, "auto")) *fp8 = DTYPE_COUNT;
    else if (!strcmp(name, "fp8") || !strcmp(name, "fp8_e4m3")) *fp8 = DTYPE_F8_E4M3;
    else if (!strcmp(name, "fp8_e5m2")) *fp8 = DTYPE_F8_E5M2;
    else return -1;
    return 0;
}

sl_dtype_t engine_cpu_kv_dtype(const model_load_opts_t *load, const model_config_t *mc, const char *kv_cache_dtype) {
    sl_dtype_t fp8;
    if (engine_kv_cache_dtype_parse(kv_cache_dtype, &fp8) == 0 && fp8 != DTYPE_COUNT) return fp8;
    sl_dtype_t model = load->dtype_auto ? mc->torch_dtype : load->dtype;
    return model == DTYPE_BF16 ? DTYPE_BF16 : DTYPE_F32;
}

/* ---- CUDA -------------------------------------------------------------------- */

#ifdef SERVELAB_HAVE_CUDA
static int32_t min32(int64_t a, int64_t b) { return (int32_t)(a < b ? a : b); }

static void log_cast(sl_dtype_t from, sl_dtype_t to) {
    if (from == to) return;
    if (to == DTYPE_F32) LOG_INFO("Upcasting torch.%s to torch.%s.", dtype_torch_name(from), dtype_torch_name(to));
    else if (from == DTYPE_F32) LOG_INFO("Downcasting torch.%s to torch.%s.", dtype_torch_name(from), dtype_torch_name(to));
    else LOG_WARNING("Casting torch.%s to torch.%s.", dtype_torch_name(from), dtype_torch_name(to));
}

/* CUDA graphs of decode steps, as vLLM's capture_model: the sizes of
 * --cuda-graph-sizes (one value: vLLM's pattern up to it, by default
 * min(2 * max_num_seqs, 512); several: those), for contexts up to
 * --max-seq-len-to-capture. --skip-warmup defers each capture to its size's
 * first use, so that cold start shows in the first decode steps too. */
static int capture_graphs(engine_t *e, sl_err_t *err) {
    const engine_config_t *c = &e->cfg;
    const sched_config_t *sc = &c->sched;
    if (c->enforce_eager) {
        LOG_INFO("Skipping CUDA graph capture (--enforce-eager): decode runs eagerly.");
        return 0;
    }
    int32_t sizes[ENGINE_MAX_GRAPH_SIZES + 80];
    int n;
    if (c->n_cuda_graph_sizes > 1) {
        n = c->n_cuda_graph_sizes;
        memcpy(sizes, c->cuda_graph_sizes, (size_t)n * sizeof sizes[0]);
    } else {
        int32_t top = c->n_cuda_graph_sizes == 1 ? c->cuda_graph_sizes[0] : min32(2 * (int64_t)sc->max_num_seqs, 512);
        n = runner_graph_sizes(top, sc->max_num_seqs, sc->max_num_batched_tokens, sizes,
                               (int)(sizeof sizes / sizeof sizes[0]));
    }
    int32_t max_seq_len = min32(c->max_seq_len_to_capture, sc->max_model_len);
    model_runner_t *r = &e->runner;
    int64_t free0, free1, total;
    if (cuda_backend_mem_info(r->ops, &free0, &total, err)) return -1;
    double t0 = sl_now_s();
    if (runner_capture_graphs(r, &r->kv, sizes, n, max_seq_len, c->skip_warmup, err)) {
        char what[SL_ERR_LEN];
        snprintf(what, sizeof what, "%s", err->msg);
        return sl_fail(err, "%s. Hint: --enforce-eager runs without CUDA graphs", what);
    }
    if (cuda_backend_mem_info(r->ops, &free1, &total, err)) return -1;
    const runner_graphs_t *g = &r->graphs;
    if (g->n == 0) {
        LOG_INFO("No CUDA graph size fits --max-num-seqs %d: decode runs eagerly.", sc->max_num_seqs);
    } else if (c->skip_warmup) {
        LOG_INFO("Deferring CUDA graph capture to each batch size's first use (--skip-warmup): %d sizes, 1 to %d "
                 "sequences, contexts up to %d tokens", g->n, g->sizes[g->n - 1], max_seq_len);
    } else {
        LOG_INFO("Graph capturing finished in %.0f secs, took %.2f GiB", sl_now_s() - t0,
                 (double)(free0 > free1 ? free0 - free1 : 0) / GIB);
        LOG_DEBUG("CUDA graphs: %d sizes, 1 to %d sequences, contexts up to %d tokens", g->n, g->sizes[g->n - 1],
                  max_seq_len);
    }
    return 0;
}

/* Tensor parallelism on CUDA: a backend instance per rank, on devices
 * 0..N-1 with NCCL between them, or every rank on device 0 with the
 * shared-device communicator (SERVELAB_TP_SHARED_DEVICE=1, a test-only mode:
 * NCCL refuses two ranks on one device, and this lets the sharded model be
 * checked on one). rank_ops and *comm on success; 0 or -1 with err. */
static int cuda_ranks(int64_t max_elems, sl_dtype_t act, sl_dtype_t kv_fp8, int tp, bool shared,
                      const sl_ops_t **rank_ops, sl_comm_t **comm, sl_err_t *err) {
    int n_dev = cuda_backend_device_count();
    if (!shared && tp > n_dev)
        return sl_fail(err, "tensor_parallel_size (%d) is larger than the number of CUDA devices this process can "
                       "use (%d). Hint: --tensor-parallel-size %d, or SERVELAB_TP_SHARED_DEVICE=1 (a test-only mode: "
                       "every rank on device 0)", tp, n_dev, n_dev > 0 ? n_dev : 1);
#ifndef SERVELAB_HAVE_NCCL
    if (!shared)
        return sl_fail(err, "tensor_parallel_size %d on CUDA: this servelab was built without NCCL. Hint: install "
                       "NCCL and rebuild, or SERVELAB_TP_SHARED_DEVICE=1 (a test-only mode: every rank on device 0)",
                       tp);
#endif
    int devices[CUDA_MAX_INSTANCES];
    void *streams[CUDA_MAX_INSTANCES];
    if (tp > CUDA_MAX_INSTANCES)
        return sl_fail(err, "tensor_parallel_size %d: at most %d ranks on CUDA", tp, CUDA_MAX_INSTANCES);
    for (int r = 0; r < tp; r++) {
        devices[r] = shared ? 0 : r;
        cuda_backend_opts_t o = {.device = devices[r], .act_dtype = act, .kv_fp8 = kv_fp8, .instance = r};
        if (!(rank_ops[r] = cuda_backend_init(&o, err))) return -1;
        streams[r] = cuda_backend_stream(rank_ops[r]);
    }
    rank_ops[0]->thread_init(rank_ops[0]->ctx);
    if (shared) {
        *comm = comm_staged_new(tp, max_elems, rank_ops);
        LOG_WARNING("SERVELAB_TP_SHARED_DEVICE=1: %d tensor-parallel ranks share CUDA device 0 and reduce through "
                    "host memory. A test-only mode: correct, not fast.", tp);
        return 0;
    }
#ifdef SERVELAB_HAVE_NCCL
    char v[32];
    if (!(*comm = comm_nccl_new(tp, devices, streams, err))) return -1;
    LOG_INFO("vLLM is using nccl==%s", comm_nccl_version(v, sizeof v) ? v : "unknown");
    LOG_INFO("world_size=%d: one NCCL communicator per device, devices 0..%d", tp, tp - 1);
#else
    (void)streams;
#endif
    return 0;
}

/* kv_fp8: the fp8 KV cache's dtype, or 0 (the cache in the activation dtype). */
static engine_t *boot_cuda(engine_config_t *c, const model_config_t *mc, const cuda_device_info_t *info,
                           sl_dtype_t kv_fp8, sl_err_t *err) {
    sched_config_t *sc = &c->sched;
    sl_dtype_t act = engine_cuda_act_dtype(&c->load, mc);
    if (act == DTYPE_BF16 && info->cc_major < 8) {
        sl_fail(err, "Bfloat16 is only supported on GPUs with compute capability of at least 8.0. Your %s GPU has "
                "compute capability %d.%d. You can use float16 instead by explicitly setting the `dtype` flag in "
                "CLI, for example: --dtype=half.", info->name, info->cc_major, info->cc_minor);
        return NULL;
    }
    cuda_backend_opts_t opts = {.device = 0, .act_dtype = act, .kv_fp8 = kv_fp8};
    int tp = c->load.tensor_parallel_size > 1 ? c->load.tensor_parallel_size : 1;
    const char *shared_env = getenv("SERVELAB_TP_SHARED_DEVICE");
    bool shared = tp > 1 && shared_env && !strcmp(shared_env, "1");
    const sl_ops_t *rank_ops[CUDA_MAX_INSTANCES];
    sl_comm_t *comm = NULL;
    if (tp > 1 && c->ops) {
        sl_fail(err, "tensor parallelism on CUDA runs on the process's own backends, not a test's");
        return NULL;
    }
    if (tp > 1 && cuda_ranks((int64_t)sc->max_num_batched_tokens * mc->hidden_size, act, kv_fp8, tp, shared,
                             rank_ops, &comm, err))
        return NULL;
    const sl_ops_t *ops = c->ops ? c->ops : tp > 1 ? rank_ops[0] : cuda_backend_init(&opts, err);
    if (!ops) return NULL;

    /* vLLM's init_device: this instance's share must be free before anything loads. */
    int64_t free0, total, free1, free2, requested;
    if (cuda_backend_mem_info(ops, &free0, &total, err) ||
        kv_sizing_check_startup(opts.device, total, free0, c->gpu_memory_utilization, &requested, err)) {
        if (comm) comm->free(comm);
        return NULL;
    }

    /* Every weight in the activation dtype: the kernels and cuBLAS take one dtype. */
    model_load_opts_t load = c->load;
    load.dtype_auto = false;
    load.dtype = act;
    if (tp > 1) {
        load.rank_ops = rank_ops;
        load.comm = comm; /* the model owns it from here on, failure included */
    }
    llama_model_t m;
    tokenizer_t *tok;
    if (load_model(c, &load, ops, &m, &tok, err)) return NULL;
    if (c->device == ENGINE_DEVICE_AUTO) LOG_INFO("Automatically detected platform cuda.");
    LOG_INFO("Using CUDA device %d: %s (compute capability %d.%d, %.2f GiB), %s activations", opts.device,
             info->name, info->cc_major, info->cc_minor, (double)info->total_bytes / GIB, dtype_torch_name(act));
    log_cast(mc->torch_dtype, act);
    /* What the weights take on device 0: rank 0's shard, or with the ranks
     * sharing it (the test-only mode) every rank's, as their KV caches will. */
    int64_t on_device0 = (int64_t)(shared ? llama_weight_bytes(&m) : m.w.n_bytes);

    /* Profiling and warm-up run on a runner of their own (its batch buffers
     * are counted in the activation peak, as the engine's will be). */
    double t0 = sl_now_s();
    int32_t B = c->block_size, L = sc->max_model_len;
    int32_t Tmax = sc->max_num_batched_tokens, Smax = min32(sc->max_num_seqs, Tmax);
    model_runner_t probe;
    if (cuda_backend_mem_info(ops, &free1, &total, err) || runner_init(&probe, &m, (L + B - 1) / B, err)) goto fail;

    /* Profile only when the pool size depends on it (vLLM always profiles; an
     * explicit size here skips it, so with --skip-warmup too the first request
     * meets every first-use cost: lazy module loading, cuBLAS heuristics,
     * workspace growth). The shapes: the largest prefill (fresh prompts of up
     * to max_model_len tokens), the largest mixed step (every sequence at
     * max_model_len context, the budget spread over them) and the largest
     * decode step (which sizes the attention partials, the logits and the
     * sampler's workspace). */
    bool profile = c->num_gpu_blocks_override <= 0 && c->kv_cache_memory_bytes <= 0;
    int64_t activation = 0;
    double profile_s = 0.0;
    if (profile) {
        int32_t S1 = min32(Smax, ((int64_t)Tmax + L - 1) / L);
        /* With speculative decoding, the largest verification step last:
         * every sequence computes its token and K drafts, each sampled (the
         * logits and the sampler's workspace grow with them). */
        int32_t K = c->spec.on ? c->spec.num_speculative_tokens : 0;
        runner_shape_t shapes[] = {
            {S1, min32(Tmax, (int64_t)S1 * L), false, false},
            {Smax, min32(Tmax, (int64_t)Smax * L), true, false},
            {Smax, Smax, true, false},
            {Smax, min32(Tmax, (int64_t)Smax * (1 + K)), true, true},
        };
        if (runner_dummy_steps(&probe, B, L, shapes, K > 0 ? 4 : 3, true, "the profiling forward", err) ||
            cuda_backend_mem_info(ops, &free2, &total, err))
            goto fail_probe;
        profile_s = sl_now_s() - t0;
        /* Everything this process holds beyond the weights: scratch activations,
         * batch buffers, workspaces, cuBLAS. */
        activation = free0 - free2 - on_device0;
    } else {
        activation = free0 - free1 - on_device0;
    }
    if (activation < 0) activation = 0; /* another process freed memory meanwhile */

    kv_sizing_in_t in = {
        .device = opts.device, .total_bytes = total, .free_at_start_bytes = free0,
        .gpu_memory_utilization = c->gpu_memory_utilization, .weights_bytes = on_device0,
        .activation_peak_bytes = activation,
        .block_bytes = (int64_t)llama_kv_block_bytes(&m, B) * (shared ? tp : 1), .block_size = B,
        .max_model_len = L, .num_gpu_blocks_override = c->num_gpu_blocks_override,
        .kv_cache_memory_bytes = c->kv_cache_memory_bytes,
    };
    kv_sizing_out_t sized;
    if (kv_sizing_compute(&in, &sized, err)) goto fail_probe;
    if (profile)
        LOG_INFO("Memory profiling takes %.2f seconds. the current vLLM instance can use total_gpu_memory "
                 "(%.2fGiB) x gpu_memory_utilization (%.2f) = %.2fGiB; model weights take %.2fGiB; activation "
                 "peak memory takes %.2fGiB; the rest of the memory reserved for KV Cache is %.2fGiB.",
                 profile_s, (double)total / GIB, c->gpu_memory_utilization, (double)sized.requested_bytes / GIB,
                 (double)on_device0 / GIB, (double)activation / GIB, (double)sized.available_bytes / GIB);
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

    if (c->skip_warmup) {
        LOG_INFO("Skipping the warm-up forward (--skip-warmup): the first requests pay the cold-start costs.");
    } else {
        /* Decode steps at batch 1 and at the largest batch, at full context. */
        runner_shape_t shapes[] = {{1, 1, true, false}, {Smax, Smax, true, false}};
        if (runner_dummy_steps(&probe, B, L, shapes, 2, true, "the warm-up forward", err)) goto fail_probe;
    }
    runner_free(&probe);

    /* engine_assemble sizes the pool from these bytes exactly as kv_sizing did
     * (floor(bytes / block_bytes)); an override it takes as is. */
    if (!sized.overridden) c->kv_cache_memory_bytes = sized.available_bytes / (shared ? tp : 1);
    if (tp > 1 && !c->enforce_eager) {
        LOG_INFO("CUDA graphs are not captured with tensor parallelism: decode runs eagerly.");
        c->enforce_eager = true;
    }
    engine_t *e = assemble(c, &m, tok, err);
    if (!e) return NULL;
    SL_ASSERT(kv_pool_n_blocks(&e->pool) == sized.n_blocks);
    if (capture_graphs(e, err)) {
        engine_free(e);
        return NULL;
    }
    LOG_INFO("init engine (profile, create kv cache, warmup model) took %.2f seconds", sl_now_s() - t0);
    return e;

fail_probe:
    runner_free(&probe);
fail:
    llama_free(&m);
    tok_free(tok);
    return NULL;
}
#endif

/* ---- the bootstrap --------------------------------------------------------------- */

/* Whether to run on CUDA: --device cpu never; cuda or fails saying why not;
 * auto when this build has the backend and device 0 answers. 1 yes, 0 no,
 * -1 error. On 0, `why` says why the CPU was chosen (for the INFO line). */
static int want_cuda(const engine_config_t *c, cuda_device_info_t *info, sl_err_t *why, sl_err_t *err) {
    memset(info, 0, sizeof *info);
    if (c->device == ENGINE_DEVICE_CPU) return sl_fail(why, "--device cpu"), 0;
#ifdef SERVELAB_HAVE_CUDA
    sl_err_t probe_err;
    if (cuda_backend_probe(0, info, &probe_err) == 0) return 1;
    if (c->device == ENGINE_DEVICE_CUDA) return sl_fail(err, "%s", probe_err.msg);
    sl_fail(why, "--device auto: no usable CUDA device: %s", probe_err.msg);
    return 0;
#else
    if (c->device == ENGINE_DEVICE_CUDA)
        return sl_fail(err, "--device cuda: this servelab was built without the CUDA backend (no nvcc at configure "
                       "time, or -DSERVELAB_CUDA=OFF). Hint: rebuild with -DSERVELAB_CUDA=ON, or run with --device "
                       "cpu");
    sl_fail(why, "--device auto: this servelab was built without the CUDA backend");
    return 0;
#endif
}

/* An fp8 KV cache on CUDA needs 16-bit activations (the kernels widen fp8
 * to bf16 / f16 tiles for the tensor cores, as vLLM's backends do): one
 * line, -1, for a model that would run in float32. */
static int fp8_needs_16bit(const engine_config_t *c, const model_config_t *mc, sl_err_t *err) {
    if (engine_cuda_act_dtype(&c->load, mc) != DTYPE_F32) return 0;
    return sl_fail(err, "--kv-cache-dtype %s: the CUDA backend keeps an fp8 KV cache with bfloat16 or float16 "
                   "activations only, and this model runs in float32. Hint: --dtype bfloat16, or --device cpu",
                   c->kv_cache_dtype);
}

static engine_t *create(const engine_config_t *cfg, sl_err_t *err) {
    engine_config_t c = *cfg;
    model_config_t mc;
    sl_dtype_t fp8;
    if (engine_kv_cache_dtype_parse(c.kv_cache_dtype, &fp8)) {
        sl_fail(err, "Unknown kv cache dtype: %s", c.kv_cache_dtype); /* vLLM's CacheConfig error */
        return NULL;
    }
    if (fp8 != DTYPE_COUNT) /* vLLM's CacheConfig line */
        LOG_INFO("Using fp8 data type to store kv cache. It reduces the GPU memory footprint and boosts the "
                 "performance. Meanwhile, it may cause accuracy drop without a proper scaling factor");
    if (config_load(c.model_dir, &mc, err) || resolve_lengths(&c, &mc, err)) return NULL;
    if (fp8 != DTYPE_COUNT && c.device == ENGINE_DEVICE_CUDA && fp8_needs_16bit(&c, &mc, err)) return NULL;

    /* A test's own backend runs as given: a device backend (one that can
     * fail) through the CUDA startup only when asked for CUDA. */
    cuda_device_info_t info;
    sl_err_t cpu_why;
    sl_fail(&cpu_why, "a test backend");
    int cuda = c.ops ? c.device == ENGINE_DEVICE_CUDA : want_cuda(&c, &info, &cpu_why, err);
    if (cuda < 0) return NULL;
#ifdef SERVELAB_HAVE_CUDA
    if (cuda) {
        if (fp8 != DTYPE_COUNT && fp8_needs_16bit(&c, &mc, err)) return NULL; /* --device auto picked CUDA */
        if (c.ops && cuda_backend_probe(0, &info, err)) return NULL;
        return boot_cuda(&c, &mc, &info, fp8 != DTYPE_COUNT ? fp8 : 0, err);
    }
#endif
    const sl_ops_t *ops = c.ops ? c.ops : cpu_backend_init_kv(c.threads, engine_cpu_kv_dtype(&c.load, &mc, c.kv_cache_dtype));
    if (c.kv_cache_memory_bytes <= 0) c.kv_cache_memory_bytes = CPU_KV_CACHE_BYTES;
    llama_model_t m;
    tokenizer_t *tok;
    if (load_model(&c, &c.load, ops, &m, &tok, err)) return NULL;
    LOG_INFO("Using device cpu (%s).", cpu_why.msg);
    cpu_backend_log_kernels(ops);
    double t0 = sl_now_s();
    engine_t *e = assemble(&c, &m, tok, err);
    if (e) LOG_INFO("init engine (profile, create kv cache, warmup model) took %.2f seconds", sl_now_s() - t0);
    return e;
}

/* The trace file is opened first, so an unwritable path fails before the
 * model loads; a failed start leaves no file behind. */
engine_t *engine_create(const engine_config_t *cfg, sl_err_t *err) {
    size_t trace_cap = cfg->trace_max_bytes > 0 ? (size_t)cfg->trace_max_bytes : (size_t)64 << 20;
    engine_trace_t *trace = cfg->trace_path ? trace_open(cfg->trace_path, trace_cap, err) : trace_new(trace_cap);
    if (!trace) return NULL;
    engine_t *e = create(cfg, err);
    if (!e) {
        sl_err_t ignored;
        trace_close(trace, &ignored);
        if (cfg->trace_path) unlink(cfg->trace_path);
        return NULL;
    }
    e->trace = trace;
    return e;
}
