/* engine.h - the engine loop: continuous batching over the model, in its own thread.
 *
 * Clients (the HTTP server, offline generation) talk to the engine only
 * through engine_submit (a thread-safe submission queue) and the stream it
 * returns (a per-request output queue). The engine thread owns every
 * request, block and counter; a client that goes away calls engine_abort,
 * and the engine frees the request at the next step boundary. Each step:
 * take new and aborted requests, schedule, build the flat batch, one forward,
 * sample, detokenize and check stops, free finished requests, publish
 * outputs. engine_step() runs one such step synchronously (tests, benchmarks).
 */
#ifndef SERVELAB_ENGINE_H
#define SERVELAB_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/kv_pool.h"
#include "servelab/model.h"
#include "servelab/model_runner.h"
#include "servelab/request.h"
#include "servelab/sampling.h"
#include "servelab/scheduler.h"
#include "servelab/spec_decode.h"
#include "servelab/tokenizer.h"

typedef enum { ENGINE_DEVICE_AUTO, ENGINE_DEVICE_CPU, ENGINE_DEVICE_CUDA } engine_device_t;

#define ENGINE_MAX_GRAPH_SIZES 128

/* Everything engine_create needs, in vLLM's terms (the CLI fills it from
 * vLLM's flags, tests write it directly); engine_config_default gives vLLM's
 * defaults. */
typedef struct {
    /* The model. */
    const char *model_dir;          /* a Hugging Face checkpoint directory */
    const char *tokenizer_dir;      /* --tokenizer: the tokenizer (and its chat template) of this
                                       directory instead (NULL: model_dir's) */
    model_load_opts_t load;         /* --load-format, --dtype (auto) */
    int64_t max_model_len;          /* --max-model-len (0: the config's max_position_embeddings) */
    /* The device. */
    engine_device_t device;         /* --device (auto: CUDA when built with it and device 0 answers) */
    int threads;                    /* --threads, CPU (0: OpenMP's default) */
    double gpu_memory_utilization;  /* --gpu-memory-utilization (0.9), CUDA */
    bool enforce_eager;             /* --enforce-eager: no CUDA graphs */
    int32_t cuda_graph_sizes[ENGINE_MAX_GRAPH_SIZES]; /* --cuda-graph-sizes (none: vLLM's default) */
    int n_cuda_graph_sizes;
    int32_t max_seq_len_to_capture; /* --max-seq-len-to-capture (8192): longer contexts run eagerly */
    bool skip_warmup;               /* --skip-warmup (lab): no warm-up forward, a cold first request */
    const sl_ops_t *ops;            /* tests: run on this backend, whatever `device` says */
    /* The KV cache. */
    int32_t block_size;             /* --block-size (16) */
    int32_t num_gpu_blocks_override;/* --num-gpu-blocks-override (0 = from memory) */
    int64_t kv_cache_memory_bytes;  /* --kv-cache-memory-bytes (0: CPU 4 GiB; CUDA from the utilization) */
    bool enable_prefix_caching;     /* (true) */
    kv_hash_algo_t prefix_caching_hash_algo; /* --prefix-caching-hash-algo (sha256, the zero value) */
    const char *kv_cache_dtype;     /* --kv-cache-dtype: NULL or "auto" (the model's dtype), "fp8" (=
                                       "fp8_e4m3"), "fp8_e5m2"; scale 1.0 (on CUDA with 16-bit
                                       activations only) */
    /* The scheduler: budget, max seqs, chunking, static batching. max_model_len
     * is the resolved --max-model-len (engine_create fills it in). */
    sched_config_t sched;
    bool max_num_batched_tokens_set;/* without chunked prefill, vLLM raises an unset budget to max_model_len */
    uint64_t seed;                  /* --seed: seeds requests that bring none, in submission order */
    struct faults *faults;          /* lab: the fault table read each step (NULL: none; borrowed) */
    const char *trace_path;         /* --trace: the engine's Chrome/Perfetto trace, written at engine_free */
    int64_t trace_max_bytes;        /* --trace-max-mb: the trace's ring (0: 64 MiB) */
    spec_config_t spec;             /* --speculative-config (ngram); off by default */
} engine_config_t;

/* vLLM's defaults for a small GPU (max-num-seqs 256, max-num-batched-tokens
 * 2048, block size 16, prefix caching and chunked prefill on, utilization
 * 0.9, graphs up to max-seq-len-to-capture 8192), device auto, and the CPU's
 * 4 GiB KV cache (vLLM's VLLM_CPU_KVCACHE_SPACE default). */
void engine_config_default(engine_config_t *c);

/* One output event of one sequence (choice). */
typedef struct engine_output {
    int32_t index;                  /* choice index (n > 1) */
    int32_t n_new;                  /* new tokens in this event (0 or 1) */
    bool more_this_step;            /* another token of this choice, kept by the same engine step
                                     * (speculative decoding), follows at once: streams send them
                                     * together, as vLLM sends a step's tokens in one chunk */
    int32_t token;                  /* the new token, if n_new */
    sample_result_t logprobs;       /* when the request asked for logprobs */
    char *text;                     /* new text, complete UTF-8 (may be "") */
    size_t text_len;
    finish_reason_t finish;         /* FINISH_NONE while running */
    int32_t stop_index;             /* stop string that matched, or -1 */
    int32_t stop_token;             /* stop_token_ids entry that matched, or -1 */
    int32_t prompt_tokens, completion_tokens, cached_tokens;
    double t_posted;                /* sl_now_s() when the engine posted it (a reader may take it later) */
    struct engine_output *next;
} engine_output_t;

typedef struct engine_stream engine_stream_t;
typedef struct engine engine_t;

/* The engine bootstrap: loads the checkpoint and tokenizer from
 * cfg->model_dir onto the device (cfg->ops, else --device), sizes the KV
 * cache, warms up, captures CUDA graphs, and builds the engine, logging
 * vLLM's startup lines on the way ("Loading weights took", "Memory profiling
 * takes", "GPU KV cache size", "Maximum concurrency", "Graph capturing
 * finished", "init engine ... took"). On CUDA, as vLLM's worker: check free
 * memory against the utilization, load the weights in the activation dtype
 * (--dtype auto: bfloat16 for a bf16 checkpoint, else float16), profile
 * forwards at the largest shapes the scheduler can produce, size the pool
 * (kv_sizing.c), warm up, capture graphs. On the CPU: fp32 activations and
 * --kv-cache-memory-bytes. As vLLM, a pool sized from memory that cannot
 * hold one max_model_len request is an error; an explicit
 * --num-gpu-blocks-override may be smaller (a lab setting: requests that can
 * never fit are refused at submission). NULL with one line in err (a CUDA
 * failure names the call and a hint) when anything fails; nothing leaks. */
engine_t *engine_create(const engine_config_t *cfg, sl_err_t *err);
void engine_free(engine_t *e);

/* The CUDA activation dtype of a checkpoint, vLLM's _get_and_verify_dtype:
 * --dtype when given; auto keeps a bf16 checkpoint in bf16 and runs fp32 and
 * fp16 checkpoints in fp16. */
sl_dtype_t engine_cuda_act_dtype(const model_load_opts_t *load, const model_config_t *mc);
/* --kv-cache-dtype's value: 0 with *fp8 the fp8 dtype it names (DTYPE_COUNT for
 * NULL or "auto"), -1 for a name vLLM's choices do not have here. */
int engine_kv_cache_dtype_parse(const char *name, sl_dtype_t *fp8);
/* The CPU KV cache's dtype: the fp8 one --kv-cache-dtype names (kv_cache_dtype,
 * parsed), or for auto the model's dtype (--dtype, or the checkpoint's
 * torch_dtype): bf16 for a bf16 model, else fp32 (the CPU keeps no f16 cache;
 * f16 models compute in fp32 there). */
sl_dtype_t engine_cpu_kv_dtype(const model_load_opts_t *load, const model_config_t *mc, const char *kv_cache_dtype);

/* What the engine was built with: the resolved config (max_model_len,
 * budget, KV bytes), the model (weights, config) and tokenizer it owns, and
 * the runner (CUDA graph counters). Valid until engine_free. */
const engine_config_t *engine_config(const engine_t *e);
const llama_model_t *engine_model(const engine_t *e);
const tokenizer_t *engine_tokenizer(const engine_t *e);
const model_runner_t *engine_runner(const engine_t *e);

/* Starts / stops the engine thread. Without a thread, drive it with engine_step. */
void engine_start(engine_t *e);
void engine_stop(engine_t *e);

/* Submits a request (prompt ids copied, params deep-copied). Validation
 * failures (a prompt that cannot fit max_model_len or the whole KV pool, bad
 * sampling params) return NULL with an OpenAI-style message in `err`. */
engine_stream_t *engine_submit(engine_t *e, const int32_t *prompt, int32_t n_prompt,
                               const sampling_params_t *params, sl_err_t *err);

/* What a client knows of a request beyond its tokens. */
typedef struct {
    const char *request_id;         /* named in engine log lines ("cmpl-..."); NULL: a number */
    double t_arrival;               /* sl_now_s() when the request arrived, before tokenization
                                     * (TTFT and e2e latency start here); 0: at submission */
} engine_request_info_t;
engine_stream_t *engine_submit_ex(engine_t *e, const int32_t *prompt, int32_t n_prompt,
                                  const sampling_params_t *params, const engine_request_info_t *info,
                                  sl_err_t *err);

/* Blocks until the next event of the stream; NULL once every choice has
 * finished and all its events were taken. Free events with engine_output_free. */
engine_output_t *engine_stream_next(engine_stream_t *st);
void engine_output_free(engine_output_t *o);
/* Non-blocking: the next event, or NULL if none is queued right now. */
engine_output_t *engine_stream_try_next(engine_stream_t *st);
/* True once every choice has finished and all events were taken. */
bool engine_stream_done(engine_stream_t *st);
/* Calls fn(user) on the engine thread after each event is queued (outside
 * the stream's lock), so an event-driven client can wake up. Set it right
 * after engine_submit; events queued before that are not signalled, so
 * check the queue (engine_stream_try_next) after setting it. Setting it
 * (to NULL, say) waits for a call under way to return, so the caller must
 * not hold a lock the callback takes. engine_stream_release clears it. */
typedef void (*engine_notify_fn)(void *user);
void engine_stream_set_notify(engine_stream_t *st, engine_notify_fn fn, void *user);
/* False once the engine thread has stopped, or the device was lost for good
 * (GET /health answers 503). */
bool engine_is_alive(engine_t *e);
/* Asks the engine to abort the stream's sequences (safe at any time). */
void engine_abort(engine_t *e, engine_stream_t *st);
/* The client is done with the stream (aborts it if still running). */
void engine_stream_release(engine_t *e, engine_stream_t *st);

/* Runs one step on the calling thread. Returns false when there was nothing
 * to do. Must not be mixed with a running engine thread. */
bool engine_step(engine_t *e);

typedef struct {
    int32_t n_running, n_waiting;
    double kv_usage;
    int64_t n_preemptions, prefix_queries, prefix_hits;
    double prefix_hit_rate;         /* hits / queries over the last 1000 admitted requests (vLLM's log) */
    int64_t n_steps, n_prompt_tokens_total, n_generation_tokens_total;
    int32_t n_blocks;
    /* The step timing: seconds in the model runner (forward and sampling),
     * and of those, in tensor-parallel all-reduces (rank 0's; 0 at -tp 1). */
    double forward_s_total, allreduce_s_total;
    /* Speculative decoding's totals (zero when off) and its K. */
    spec_stats_t spec;
    int32_t spec_k;
} engine_stats_t;
void engine_get_stats(engine_t *e, engine_stats_t *out);

/* The lab page's view of the engine (src/engine/lab_snapshot.c documents the
 * JSON): enable before engine_start; engine_lab_snapshot returns the newest
 * snapshot (malloc'd, any thread), NULL when not enabled. */
void engine_enable_lab_ui(engine_t *e);
char *engine_lab_snapshot(engine_t *e);

/* The trace (src/engine/trace.c documents it), from any thread. Besides
 * --trace FILE: engine_trace_start records one in memory (-1 with err while
 * one records), engine_trace_stop ends it and returns the Chrome/Perfetto
 * JSON (malloc'd, *len bytes; NULL with err when none records in memory).
 * engine_trace_http adds an HTTP request the server answered, while one
 * records (times are sl_now_s(); t_first_byte 0: no response began). */
int engine_trace_start(engine_t *e, sl_err_t *err);
char *engine_trace_stop(engine_t *e, size_t *len, sl_err_t *err);
typedef struct {
    const char *method, *url;
    const char *request_id;         /* the X-Request-Id header, or NULL */
    const char *engine_request_id;  /* the engine's id of its work (names its request tracks), or NULL */
    unsigned status;
    double t_start, t_first_byte, t_end;
    int64_t request_bytes, response_bytes;
    bool client_gone;
} engine_trace_http_t;
void engine_trace_http(engine_t *e, const engine_trace_http_t *h);
/* Whether a trace records now (a cheap read, for callers that prepare what they add). */
bool engine_tracing(engine_t *e);

/* Registers vLLM's V1 engine metrics (vllm:*, labels model_name and engine="0")
 * in `reg` and records them from now on: gauges and counters once per step,
 * latencies from each request's timestamps (engine_metrics.c says which).
 * Call before engine_start. */
struct metrics;
void engine_enable_metrics(engine_t *e, struct metrics *reg, const char *model_name);

#endif
