/* engine_metrics.c - vLLM's V1 engine metrics, recorded by the engine thread.
 *
 * Names, HELP strings, buckets, label sets and registration order are those of
 * vLLM 0.10.2's PrometheusStatLogger (v1/metrics/loggers.py), the last release
 * that serves both the current names and the deprecated aliases runbooks still
 * query (vllm:gpu_cache_usage_perc, vllm:gpu_prefix_cache_*,
 * vllm:time_per_output_token_seconds), plus 0.11's
 * vllm:request_time_per_output_token_seconds. Every series has model_name (the
 * first served name) and engine="0"; every child, including one
 * vllm:request_success child per finish reason, exists at 0 from startup.
 *
 * Timing, as vLLM V1 (all from the request's own timestamps, monotonic clock):
 *   TTFT      arrival (before tokenization) -> first token handed to its stream
 *   ITL       one observation per later token: the gap since the previous one
 *             (vllm:time_per_output_token_seconds gets the same observations)
 *   queue     queued in the scheduler -> first scheduled
 *   prefill   first scheduled -> first token
 *   decode    first token -> last token
 *   inference first scheduled -> last token
 *   e2e       arrival -> finished
 * Preemption time stays inside the phase where it happened. Where vLLM is
 * silent: an aborted request is counted (finished_reason="abort") with its
 * phases cut at the abort (a phase it never reached counts 0), and
 * request_time_per_output_token is decode / (tokens - 1), 0 for one token.
 *
 * Names the serving playbooks use that vLLM never exported are served too, so
 * their queries return data (docs/metrics.md):
 *   vllm:prefix_cache_hit_rate   gauge, the hit rate of vLLM's log line (tokens hit /
 *                                queried over the last 1000 admitted requests)
 *   vllm:num_requests_swapped    gauge, always 0 (V1 never swaps; preemption recomputes)
 *   vllm:cpu_cache_usage_perc    gauge, always 0 (no CPU swap space)
 *   vllm:preemption_count_total  counter, the same count as vllm:num_preemptions_total
 *
 * Observations made during a step are buffered and applied under one lock
 * acquisition at the end of the step (em_flush), never while the engine
 * holds a stream's lock or wakes a client.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "servelab/metrics.h"

static const double TTFT_BUCKETS[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                      1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double TPOT_BUCKETS[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                      0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double LATENCY_BUCKETS[] = {0.3,  0.5,  0.8,  1.0,  1.5,  2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                         30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double ITERATION_BUCKETS[] = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};
static const double N_BUCKETS[] = {1, 2, 5, 10, 20};

#define N_REASONS 4 /* FINISH_STOP .. FINISH_ERROR */

typedef struct {
    finish_reason_t reason;
    double e2e, queue, prefill, decode, inference, tpot;
    int32_t n_prompt, n_gen, max_tokens;
} finished_rec_t;

struct engine_metrics {
    metrics_t *reg;
    metric_t *running, *waiting, *gpu_cache_usage, *gpu_prefix_queries, *gpu_prefix_hits, *kv_usage,
        *prefix_queries, *prefix_hits, *preemptions, *prompt_tokens, *generation_tokens,
        *success[N_REASONS], *h_prompt_tokens, *h_generation_tokens, *h_iteration_tokens,
        *h_max_generation_tokens, *h_n, *h_max_tokens, *h_ttft, *h_tpot, *h_itl, *h_request_tpot, *h_e2e,
        *h_queue, *h_inference, *h_prefill, *h_decode, *cache_config_info, *prefix_hit_rate, *swapped,
        *cpu_cache_usage, *preemption_count, *allreduce_seconds;
    /* --speculative-config only (NULL otherwise): vLLM's SpecDecodingProm. */
    metric_t *spec_drafts, *spec_draft_tokens, *spec_accepted, *spec_per_pos[SPEC_MAX_TOKENS];
    int32_t spec_k;
    /* This step's observations (engine thread only). */
    double *ttft, *itl;
    int32_t n_ttft, n_itl, cap_ttft, cap_itl;
    finished_rec_t *fin;
    int32_t n_fin, cap_fin;
    int32_t (*parents)[2]; /* (n, max generated tokens) of client requests that finished */
    int32_t n_parents, cap_parents;
};

/* 1, 2, 5, 10, 20, 50, ... up to max (vLLM's build_1_2_5_buckets). */
static int build_1_2_5(int64_t max, double *out, int cap) {
    int n = 0;
    for (int64_t scale = 1;; scale *= 10)
        for (int k = 0; k < 3; k++) {
            int64_t v = (k == 0 ? 1 : k == 1 ? 2 : 5) * scale;
            if (v > max || n == cap) return n;
            out[n++] = (double)v;
        }
}

static metric_t *family(engine_metrics_t *em, const char *name, const char *help, metric_type_t type,
                        const double *buckets, int n_buckets, const char *const *labels) {
    static const char *const names[] = {"model_name", "engine"};
    metric_family_t *f = metrics_add(em->reg, name, help, type, 2, names, buckets, n_buckets, 0);
    return metric_child(f, labels);
}

#define GAUGE(name, help) family(em, name, help, METRIC_GAUGE, NULL, 0, lv)
#define COUNTER(name, help) family(em, name, help, METRIC_COUNTER, NULL, 0, lv)
#define HISTOGRAM(name, help, b) family(em, name, help, METRIC_HISTOGRAM, b, (int)(sizeof b / sizeof b[0]), lv)

engine_metrics_t *em_new(metrics_t *reg, const char *model_name, const engine_t *e) {
    engine_metrics_t *em = sl_calloc(1, sizeof *em);
    em->reg = reg;
    const char *lv[] = {model_name, "0"};
    double b125[64];
    int n125 = build_1_2_5(e->cfg.sched.max_model_len, b125, 64);

    em->running = GAUGE("vllm:num_requests_running", "Number of requests in model execution batches.");
    em->waiting = GAUGE("vllm:num_requests_waiting", "Number of requests waiting to be processed.");
    em->gpu_cache_usage = GAUGE("vllm:gpu_cache_usage_perc",
                                "GPU KV-cache usage. 1 means 100 percent usage."
                                "DEPRECATED: Use vllm:kv_cache_usage_perc instead.");
    em->gpu_prefix_queries = COUNTER("vllm:gpu_prefix_cache_queries",
                                     "GPU prefix cache queries, in terms of number of queried"
                                     "tokens. DEPRECATED: Use vllm:prefix_cache_queries instead.");
    em->gpu_prefix_hits = COUNTER("vllm:gpu_prefix_cache_hits",
                                  "GPU prefix cache hits, in terms of number of cached "
                                  "tokens. DEPRECATED: Use vllm:prefix_cache_hits instead.");
    em->kv_usage = GAUGE("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.");
    em->prefix_queries = COUNTER("vllm:prefix_cache_queries",
                                 "Prefix cache queries, in terms of number of queried tokens.");
    em->prefix_hits = COUNTER("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.");
    em->preemptions = COUNTER("vllm:num_preemptions", "Cumulative number of preemption from the engine.");
    em->prompt_tokens = COUNTER("vllm:prompt_tokens", "Number of prefill tokens processed.");
    em->generation_tokens = COUNTER("vllm:generation_tokens", "Number of generation tokens processed.");

    static const char *const success_labels[] = {"model_name", "engine", "finished_reason"};
    metric_family_t *fs = metrics_add(reg, "vllm:request_success", "Count of successfully processed requests.",
                                      METRIC_COUNTER, 3, success_labels, NULL, 0, 0);
    for (int k = 0; k < N_REASONS; k++) {
        const char *v[] = {model_name, "0", finish_reason_str((finish_reason_t)(FINISH_STOP + k))};
        em->success[k] = metric_child(fs, v);
    }

    em->h_prompt_tokens = family(em, "vllm:request_prompt_tokens", "Number of prefill tokens processed.",
                                 METRIC_HISTOGRAM, b125, n125, lv);
    em->h_generation_tokens = family(em, "vllm:request_generation_tokens",
                                     "Number of generation tokens processed.", METRIC_HISTOGRAM, b125, n125, lv);
    em->h_iteration_tokens = HISTOGRAM("vllm:iteration_tokens_total",
                                       "Histogram of number of tokens per engine_step.", ITERATION_BUCKETS);
    em->h_max_generation_tokens =
        family(em, "vllm:request_max_num_generation_tokens",
               "Histogram of maximum number of requested generation tokens.", METRIC_HISTOGRAM, b125, n125, lv);
    em->h_n = HISTOGRAM("vllm:request_params_n", "Histogram of the n request parameter.", N_BUCKETS);
    em->h_max_tokens = family(em, "vllm:request_params_max_tokens",
                              "Histogram of the max_tokens request parameter.", METRIC_HISTOGRAM, b125, n125, lv);
    em->h_ttft = HISTOGRAM("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.",
                           TTFT_BUCKETS);
    em->h_tpot = HISTOGRAM("vllm:time_per_output_token_seconds",
                           "Histogram of time per output token in seconds."
                           "DEPRECATED: Use vllm:inter_token_latency_seconds instead.",
                           TPOT_BUCKETS);
    em->h_itl = HISTOGRAM("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.",
                          TPOT_BUCKETS);
    em->h_request_tpot = HISTOGRAM("vllm:request_time_per_output_token_seconds",
                                   "Histogram of time_per_output_token_seconds per request.", TPOT_BUCKETS);
    em->h_e2e = HISTOGRAM("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.",
                          LATENCY_BUCKETS);
    em->h_queue = HISTOGRAM("vllm:request_queue_time_seconds",
                            "Histogram of time spent in WAITING phase for request.", LATENCY_BUCKETS);
    em->h_inference = HISTOGRAM("vllm:request_inference_time_seconds",
                                "Histogram of time spent in RUNNING phase for request.", LATENCY_BUCKETS);
    em->h_prefill = HISTOGRAM("vllm:request_prefill_time_seconds",
                              "Histogram of time spent in PREFILL phase for request.", LATENCY_BUCKETS);
    em->h_decode = HISTOGRAM("vllm:request_decode_time_seconds",
                             "Histogram of time spent in DECODE phase for request.", LATENCY_BUCKETS);

    /* vllm:cache_config_info: every CacheConfig field as a string label (Python's
     * str() of the value), the gauge set to 1. Fields that have no meaning here
     * keep vLLM's defaults. */
    char block_size[16], num_blocks[24], override[24], kv_bytes[32];
    snprintf(block_size, sizeof block_size, "%d", e->cfg.block_size);
    snprintf(num_blocks, sizeof num_blocks, "%d", kv_pool_n_blocks(&e->pool));
    if (e->cfg.num_gpu_blocks_override > 0)
        snprintf(override, sizeof override, "%d", e->cfg.num_gpu_blocks_override);
    else
        snprintf(override, sizeof override, "None");
    if (e->cfg.num_gpu_blocks_override > 0)
        snprintf(kv_bytes, sizeof kv_bytes, "None");
    else
        snprintf(kv_bytes, sizeof kv_bytes, "%lld", (long long)e->cfg.kv_cache_memory_bytes);
    static const char *const info_names[] = {
        "block_size", "cache_dtype", "calculate_kv_scales", "cpu_offload_gb", "enable_prefix_caching",
        "engine", "gpu_memory_utilization", "is_attention_free", "kv_cache_memory_bytes",
        "kv_sharing_fast_prefill", "mamba_cache_dtype", "mamba_ssm_cache_dtype", "num_cpu_blocks",
        "num_gpu_blocks", "num_gpu_blocks_override", "prefix_caching_hash_algo", "sliding_window",
        "swap_space"};
    const char *info_values[] = {
        block_size, e->cfg.kv_cache_dtype ? e->cfg.kv_cache_dtype : "auto", "False", "0",
        e->cfg.enable_prefix_caching ? "True" : "False", "0", "0.9",
        "False", kv_bytes, "False", "auto", "auto", "None", num_blocks, override,
        kv_hash_algo_name(e->cfg.prefix_caching_hash_algo), "None", "4"};
    metric_family_t *fi = metrics_add(reg, "vllm:cache_config_info", "Information of the LLMEngine CacheConfig",
                                      METRIC_GAUGE, (int)(sizeof info_names / sizeof info_names[0]),
                                      info_names, NULL, 0, 0);
    em->cache_config_info = metric_child(fi, info_values);
    metric_set(em->cache_config_info, 1.0);

    em->prefix_hit_rate = GAUGE("vllm:prefix_cache_hit_rate",
                                "Prefix cache hit rate over the last 1000 requests (tokens hit / queried), "
                                "as in the engine's log line. Not a vLLM V1 series.");
    em->swapped = GAUGE("vllm:num_requests_swapped",
                        "Always 0: requests are never swapped to CPU (preemption recomputes). "
                        "Not a vLLM V1 series.");
    em->cpu_cache_usage = GAUGE("vllm:cpu_cache_usage_perc",
                                "Always 0: there is no CPU swap space. Not a vLLM V1 series.");
    em->preemption_count = COUNTER("vllm:preemption_count",
                                   "Same count as vllm:num_preemptions_total. Not a vLLM series.");
    em->allreduce_seconds = COUNTER("servelab:tp_allreduce_seconds",
                                    "Seconds the engine's steps spent in tensor-parallel all-reduces (rank 0; "
                                    "0 at --tensor-parallel-size 1).");
    if (e->cfg.spec.on) {
        em->spec_k = e->cfg.spec.num_speculative_tokens;
        em->spec_drafts = COUNTER("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.");
        em->spec_draft_tokens = COUNTER("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.");
        em->spec_accepted = COUNTER("vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.");
        static const char *const pos_labels[] = {"model_name", "engine", "position"};
        metric_family_t *fp = metrics_add(reg, "vllm:spec_decode_num_accepted_tokens_per_pos",
                                          "Accepted tokens per draft position.", METRIC_COUNTER, 3, pos_labels,
                                          NULL, 0, 0);
        for (int32_t i = 0; i < em->spec_k; i++) {
            char pos[12];
            snprintf(pos, sizeof pos, "%d", i);
            const char *v[] = {model_name, "0", pos};
            em->spec_per_pos[i] = metric_child(fp, v);
        }
    }
    return em;
}

void em_free(engine_metrics_t *em) {
    if (!em) return;
    free(em->ttft);
    free(em->itl);
    free(em->fin);
    free(em->parents);
    free(em);
}

static void push_double(double **a, int32_t *n, int32_t *cap, double v) {
    if (*n == *cap) {
        *cap = *cap ? 2 * *cap : 64;
        *a = sl_realloc(*a, (size_t)*cap * sizeof **a);
    }
    (*a)[(*n)++] = v;
}

void em_token(engine_metrics_t *em, const request_t *r, double now, double prev_token) {
    if (!em) return;
    if (request_n_output(r) == 1) push_double(&em->ttft, &em->n_ttft, &em->cap_ttft, now - r->t_arrival);
    else push_double(&em->itl, &em->n_itl, &em->cap_itl, now - prev_token);
}

static double since(double from, double to) { return from > 0 && to > from ? to - from : 0.0; }

void em_finished(engine_metrics_t *em, const request_t *r) {
    if (!em || r->finish < FINISH_STOP || r->finish > FINISH_ERROR) return;
    if (em->n_fin == em->cap_fin) {
        em->cap_fin = em->cap_fin ? 2 * em->cap_fin : 64;
        em->fin = sl_realloc(em->fin, (size_t)em->cap_fin * sizeof *em->fin);
    }
    finished_rec_t *f = &em->fin[em->n_fin++];
    double end = r->t_finished;
    double scheduled = r->t_first_scheduled, first = r->t_first_token, last = r->t_last_token;
    int32_t n_gen = request_n_output(r);
    f->reason = r->finish;
    f->e2e = since(r->t_arrival, end);
    f->queue = since(r->t_queued, scheduled > 0 ? scheduled : end);
    f->prefill = scheduled > 0 ? since(scheduled, first > 0 ? first : end) : 0.0;
    f->decode = first > 0 ? since(first, last) : 0.0;
    f->inference = scheduled > 0 ? since(scheduled, last > 0 ? last : end) : 0.0;
    f->tpot = n_gen > 1 ? f->decode / (double)(n_gen - 1) : 0.0;
    f->n_prompt = r->n_prompt;
    f->n_gen = n_gen;
    f->max_tokens = r->params.max_tokens;
}

void em_parent_finished(engine_metrics_t *em, const engine_stream_t *st) {
    if (!em) return;
    int32_t max_gen = 0;
    for (int32_t i = 0; i < st->n_seqs; i++) {
        int32_t g = request_n_output(st->seqs[i]);
        if (g > max_gen) max_gen = g;
    }
    if (em->n_parents == em->cap_parents) {
        em->cap_parents = em->cap_parents ? 2 * em->cap_parents : 64;
        em->parents = sl_realloc(em->parents, (size_t)em->cap_parents * sizeof *em->parents);
    }
    em->parents[em->n_parents][0] = st->n_seqs;
    em->parents[em->n_parents][1] = max_gen;
    em->n_parents++;
}

void em_flush(engine_metrics_t *em, const em_step_t *s) {
    if (!em) return;
    metrics_lock(em->reg);
    metric_set_locked(em->running, s->n_running);
    metric_set_locked(em->waiting, s->n_waiting);
    metric_set_locked(em->kv_usage, s->kv_usage);
    metric_set_locked(em->gpu_cache_usage, s->kv_usage);
    metric_set_locked(em->prefix_hit_rate, s->prefix_hit_rate);
    metric_inc_locked(em->prefix_queries, (double)s->d_queries);
    metric_inc_locked(em->gpu_prefix_queries, (double)s->d_queries);
    metric_inc_locked(em->prefix_hits, (double)s->d_hits);
    metric_inc_locked(em->gpu_prefix_hits, (double)s->d_hits);
    metric_inc_locked(em->preemptions, (double)s->d_preemptions);
    metric_inc_locked(em->preemption_count, (double)s->d_preemptions);
    metric_inc_locked(em->allreduce_seconds, s->d_allreduce_s);
    metric_inc_locked(em->prompt_tokens, (double)s->d_prompt_tokens);
    metric_inc_locked(em->generation_tokens, (double)s->d_generation_tokens);
    if (s->d_spec && em->spec_drafts) {
        metric_inc_locked(em->spec_drafts, (double)s->d_spec->n_drafts);
        metric_inc_locked(em->spec_draft_tokens, (double)s->d_spec->n_draft_tokens);
        metric_inc_locked(em->spec_accepted, (double)s->d_spec->n_accepted);
        for (int32_t i = 0; i < em->spec_k; i++) metric_inc_locked(em->spec_per_pos[i], (double)s->d_spec->per_pos[i]);
    }
    if (s->stepped)
        metric_observe_locked(em->h_iteration_tokens, (double)(s->d_prompt_tokens + s->d_generation_tokens));
    for (int32_t i = 0; i < em->n_ttft; i++) metric_observe_locked(em->h_ttft, em->ttft[i]);
    for (int32_t i = 0; i < em->n_itl; i++) {
        metric_observe_locked(em->h_itl, em->itl[i]);
        metric_observe_locked(em->h_tpot, em->itl[i]);
    }
    for (int32_t i = 0; i < em->n_fin; i++) {
        const finished_rec_t *f = &em->fin[i];
        metric_inc_locked(em->success[f->reason - FINISH_STOP], 1.0);
        metric_observe_locked(em->h_e2e, f->e2e);
        metric_observe_locked(em->h_queue, f->queue);
        metric_observe_locked(em->h_prefill, f->prefill);
        metric_observe_locked(em->h_inference, f->inference);
        metric_observe_locked(em->h_decode, f->decode);
        metric_observe_locked(em->h_request_tpot, f->tpot);
        metric_observe_locked(em->h_prompt_tokens, f->n_prompt);
        metric_observe_locked(em->h_generation_tokens, f->n_gen);
        if (f->max_tokens > 0) metric_observe_locked(em->h_max_tokens, f->max_tokens);
    }
    for (int32_t i = 0; i < em->n_parents; i++) {
        metric_observe_locked(em->h_n, em->parents[i][0]);
        metric_observe_locked(em->h_max_generation_tokens, em->parents[i][1]);
    }
    metrics_unlock(em->reg);
    em->n_ttft = em->n_itl = em->n_fin = em->n_parents = 0;
}

/* ---- vLLM's PrefixCachingMetrics: hit rate over the most recent requests ---- */

void hit_window_observe(hit_window_t *w, int64_t requests, int64_t queries, int64_t hits) {
    if (requests == 0) return; /* empty steps would push useful history out */
    if (w->n == HIT_WINDOW_CAP) { /* cannot happen with >= 1 request per entry; keep it safe */
        w->head = (w->head + 1) % HIT_WINDOW_CAP;
        w->n--;
    }
    int32_t tail = (w->head + w->n) % HIT_WINDOW_CAP;
    w->e[tail][0] = requests;
    w->e[tail][1] = queries;
    w->e[tail][2] = hits;
    w->n++;
    w->requests += requests, w->queries += queries, w->hits += hits;
    /* Drop the oldest while over the limit, always keeping the newest. */
    while (w->n > 1 && w->requests > HIT_WINDOW_REQUESTS) {
        int64_t *o = w->e[w->head];
        w->requests -= o[0], w->queries -= o[1], w->hits -= o[2];
        w->head = (w->head + 1) % HIT_WINDOW_CAP;
        w->n--;
    }
}

double hit_window_rate(const hit_window_t *w) {
    return w->queries > 0 ? (double)w->hits / (double)w->queries : 0.0;
}
