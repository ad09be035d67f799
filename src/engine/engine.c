/* engine.c - engine lifecycle, the KV pool's size, the submission queue, streams and the thread.
 *
 * Only the engine thread (or the caller of engine_step) touches requests,
 * the scheduler and the pool. Clients touch their stream (its own mutex) and
 * the submission/abort lists (the engine's mutex), nothing else. A stream is
 * freed when both sides have let go of it (a reference count of two).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"
#include "servelab/lab.h"

const char *finish_reason_str(finish_reason_t f) {
    switch (f) {
    case FINISH_STOP: return "stop";
    case FINISH_LENGTH: return "length";
    case FINISH_ABORT: return "abort";
    case FINISH_ERROR: return "error";
    case FINISH_NONE: break;
    }
    return NULL;
}

void request_append(request_t *r, int32_t token) {
    if (r->n_tokens == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->tokens = sl_realloc(r->tokens, (size_t)r->cap * sizeof *r->tokens);
    }
    r->tokens[r->n_tokens++] = token;
}

void request_set_drafts(request_t *r, const int32_t *drafts, int32_t n) {
    if (r->n_tokens + n > r->cap) {
        while (r->n_tokens + n > r->cap) r->cap = r->cap ? 2 * r->cap : 64;
        r->tokens = sl_realloc(r->tokens, (size_t)r->cap * sizeof *r->tokens);
    }
    memcpy(r->tokens + r->n_tokens, drafts, (size_t)n * sizeof *drafts);
    r->n_spec = n;
}

/* "1,234,567" as Python's f"{n:,}" prints it. */
static const char *with_commas(int64_t n, char *buf, size_t cap) {
    char digits[32];
    int len = snprintf(digits, sizeof digits, "%lld", (long long)n), o = 0;
    for (int i = 0; i < len && (size_t)o + 2 < cap; i++) {
        if (i > 0 && digits[i - 1] != '-' && (len - i) % 3 == 0) buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o] = '\0';
    return buf;
}

engine_t *engine_assemble(const engine_config_t *cfg, llama_model_t *model, tokenizer_t *tok, sl_err_t *err) {
    const sched_config_t *sc = &cfg->sched;
    int32_t B = cfg->block_size;
    if (sc->max_num_batched_tokens < sc->max_num_seqs) {
        sl_fail(err, "max_num_batched_tokens (%d) must be greater than or equal to max_num_seqs (%d).",
                sc->max_num_batched_tokens, sc->max_num_seqs);
        return NULL;
    }
    if (!sc->enable_chunked_prefill && sc->max_num_batched_tokens < sc->max_model_len) {
        sl_fail(err, "max_num_batched_tokens (%d) is smaller than max_model_len (%d). This effectively "
                "limits the maximum sequence length to max_num_batched_tokens and makes the engine "
                "reject longer sequences. Please increase max_num_batched_tokens or decrease "
                "max_model_len.", sc->max_num_batched_tokens, sc->max_model_len);
        return NULL;
    }
    int32_t max_blocks = (sc->max_model_len + B - 1) / B;
    SL_ASSERT(model->max_tokens >= sc->max_num_batched_tokens && model->max_seqs >= sc->max_num_seqs);

    size_t block_bytes = llama_kv_block_bytes(model, B); /* per rank: each rank's budget */
    int64_t n_blocks = cfg->num_gpu_blocks_override > 0 ? cfg->num_gpu_blocks_override
                                                        : cfg->kv_cache_memory_bytes / (int64_t)block_bytes;
    if (n_blocks < 2) {
        sl_fail(err, "No available memory for the cache blocks: one block of %d tokens takes %zu bytes, "
                "--kv-cache-memory-bytes is %lld. Try increasing --kv-cache-memory-bytes.", B,
                block_bytes, (long long)cfg->kv_cache_memory_bytes);
        return NULL;
    }
    if (n_blocks > INT32_MAX / 2) n_blocks = INT32_MAX / 2;
    int64_t pool_tokens = (n_blocks - 1) * B;
    if (cfg->num_gpu_blocks_override <= 0 && pool_tokens < sc->max_model_len) {
        sl_fail(err, "To serve at least one request with the model's max seq len (%d), %.2f GiB KV cache "
                "is needed, which is larger than the available KV cache memory (%.2f GiB). Based on the "
                "available memory, the estimated maximum model length is %lld. Try increasing "
                "--kv-cache-memory-bytes or decreasing `max_model_len` when initializing the engine.",
                sc->max_model_len, (double)(max_blocks + 1) * (double)block_bytes / (1 << 30),
                (double)cfg->kv_cache_memory_bytes / (1 << 30), (long long)pool_tokens);
        return NULL;
    }

    engine_t *e = sl_calloc(1, sizeof *e);
    if (runner_init(&e->runner, model, max_blocks, err) || runner_alloc_kv(&e->runner, n_blocks, B, err)) {
        runner_free(&e->runner);
        free(e);
        return NULL;
    }
    e->cfg = *cfg;
    e->model = *model;
    e->runner.model = &e->model; /* the engine owns the model from here on */
    e->tok = tok;
    e->max_request_tokens = pool_tokens;
    kv_pool_init(&e->pool, (int32_t)n_blocks, B, cfg->enable_prefix_caching, cfg->prefix_caching_hash_algo);
    sched_init(&e->sched, sc, &e->pool);
    e->sampled = sl_malloc((size_t)sc->max_num_seqs * sizeof *e->sampled);
    e->results = sl_malloc((size_t)e->runner.max_seqs * sizeof *e->results);
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    e->stats.n_blocks = (int32_t)n_blocks;

    char a[32], b[32];
    if (sc->enable_chunked_prefill)
        LOG_INFO("Chunked prefill is enabled with max_num_batched_tokens=%d.", sc->max_num_batched_tokens);
    LOG_INFO("Available KV cache memory: %.2f GiB",
             (double)(cfg->num_gpu_blocks_override > 0 ? n_blocks * (int64_t)block_bytes
                                                       : cfg->kv_cache_memory_bytes) / (1 << 30));
    if (cfg->num_gpu_blocks_override > 0)
        LOG_INFO("Overriding num_gpu_blocks=%lld with num_gpu_blocks_override=%d", (long long)n_blocks,
                 cfg->num_gpu_blocks_override);
    LOG_INFO("GPU KV cache size: %s tokens", with_commas(n_blocks * B, a, sizeof a));
    LOG_INFO("Maximum concurrency for %s tokens per request: %.2fx",
             with_commas(sc->max_model_len, b, sizeof b), (double)n_blocks / (double)max_blocks);
    if (pool_tokens < sc->max_model_len)
        LOG_WARNING("The KV cache holds %lld tokens, fewer than max_model_len (%d): requests that "
                    "need more are refused", (long long)pool_tokens, sc->max_model_len);
    return e;
}

static void request_free(request_t *r) {
    if (r->index == 0) free(r->request_id); /* shared by the n sequences */
    free(r->tokens);
    kv_seq_blocks_free(&r->blocks);
    detok_free(&r->detok);
    sampling_params_free(&r->params);
    free(r);
}

static void stream_drop_events(engine_stream_t *st) {
    for (engine_output_t *o = st->head, *next; o; o = next) {
        next = o->next;
        engine_output_free(o);
    }
    st->head = st->tail = NULL;
}

void engine_stream_unref(engine_stream_t *st) {
    pthread_mutex_lock(&st->mu);
    int left = --st->refs;
    pthread_mutex_unlock(&st->mu);
    if (left > 0) return;
    stream_drop_events(st);
    for (int32_t i = 0; i < st->n_seqs; i++) request_free(st->seqs[i]);
    free(st->seqs);
    pthread_mutex_destroy(&st->mu);
    pthread_cond_destroy(&st->cv);
    free(st);
}

void engine_free(engine_t *e) {
    if (!e) return;
    engine_stop(e);
    /* Finish whatever is still queued or running so every stream is released. */
    for (int32_t i = 0; i < e->n_incoming; i++) sched_add(&e->sched, e->incoming[i]);
    e->n_incoming = 0;
    double now = sl_now_s();
    engine_finish_all(e, FINISH_ABORT, now);
    sl_err_t err;
    if (trace_close(e->trace, &err)) LOG_ERROR("%s", err.msg);
    lab_free(e);
    lab_snapshot_free(e);
    for (int32_t i = 0; i < e->n_aborts; i++) engine_stream_unref(e->aborts[i]);
    free(e->incoming);
    free(e->aborts);
    free(e->sampled);
    free(e->results);
    sched_free(&e->sched);
    kv_pool_free(&e->pool);
    runner_free(&e->runner);
    llama_free(&e->model);
    tok_free(e->tok);
    em_free(e->metrics);
    pthread_mutex_destroy(&e->mu);
    pthread_cond_destroy(&e->cv);
    free(e);
}

void engine_enable_metrics(engine_t *e, struct metrics *reg, const char *model_name) {
    SL_ASSERT(!e->thread_running && !e->metrics);
    e->metrics = em_new(reg, model_name, e);
}

static bool has_work_locked(engine_t *e) {
    return e->n_incoming > 0 || e->n_aborts > 0 || e->poked || sched_has_work(&e->sched);
}

/* A lab fault was set or cleared: an idle engine takes one step, so that a
 * stall begins, or blocks a cleared kv_leak kept go back, at once rather
 * than at the next request (no residue while idle). */
static void engine_poke(void *arg) {
    engine_t *e = arg;
    pthread_mutex_lock(&e->mu);
    e->poked = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
}

static void *engine_main(void *arg) {
    engine_t *e = arg;
    if (e->model.ops->thread_init) e->model.ops->thread_init(e->model.ops->ctx);
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stop && !has_work_locked(e)) pthread_cond_wait(&e->cv, &e->mu);
        bool stop = e->stop;
        e->poked = false;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        engine_step(e);
    }
    return NULL;
}

void engine_start(engine_t *e) {
    SL_ASSERT(!e->thread_running);
    e->stop = false;
    if (pthread_create(&e->thread, NULL, engine_main, e) != 0) sl_die("cannot start the engine thread");
    e->thread_running = true;
    if (e->cfg.faults) faults_on_change(e->cfg.faults, engine_poke, e);
}

void engine_stop(engine_t *e) {
    if (!e->thread_running) return;
    if (e->cfg.faults) faults_on_change(e->cfg.faults, NULL, NULL);
    pthread_mutex_lock(&e->mu);
    e->stop = true;
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    pthread_join(e->thread, NULL);
    e->thread_running = false;
}

static uint64_t mix_seed(uint64_t a, uint64_t b) {
    uint64_t x = a ^ (b + 0x9e3779b97f4a7c15ull + (a << 6) + (a >> 2));
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

engine_stream_t *engine_submit(engine_t *e, const int32_t *prompt, int32_t n_prompt,
                               const sampling_params_t *params, sl_err_t *err) {
    return engine_submit_ex(e, prompt, n_prompt, params, NULL, err);
}

engine_stream_t *engine_submit_ex(engine_t *e, const int32_t *prompt, int32_t n_prompt,
                                  const sampling_params_t *params, const engine_request_info_t *info,
                                  sl_err_t *err) {
    const model_config_t *mc = &e->model.cfg;
    int32_t L = e->cfg.sched.max_model_len;
    if (n_prompt <= 0) {
        sl_fail(err, "The prompt cannot be empty.");
        return NULL;
    }
    for (int32_t i = 0; i < n_prompt; i++) {
        if (prompt[i] < 0 || prompt[i] >= mc->vocab_size) {
            sl_fail(err, "Token id %d is out of vocabulary", prompt[i]);
            return NULL;
        }
    }
    if (n_prompt >= L) {
        sl_fail(err, "This model's maximum context length is %d tokens. However, your request has %d "
                "input tokens. Please reduce the length of the input messages.", L, n_prompt);
        return NULL;
    }
    if (sampling_params_validate(params, mc->vocab_size, err)) return NULL;
    int32_t max_tokens = params->max_tokens < L - n_prompt ? params->max_tokens : L - n_prompt;
    /* The KV cache holds every token but the last generated one. */
    if ((int64_t)n_prompt + max_tokens - 1 > e->max_request_tokens) {
        sl_fail(err, "This request needs %d tokens of KV cache (%d prompt + %d max_tokens - 1), but the "
                "KV cache holds only %lld tokens. Reduce max_tokens or the prompt, or give the server "
                "more KV cache blocks.", n_prompt + max_tokens - 1, n_prompt, max_tokens,
                (long long)e->max_request_tokens);
        return NULL;
    }

    engine_stream_t *st = sl_calloc(1, sizeof *st);
    pthread_mutex_init(&st->mu, NULL);
    pthread_cond_init(&st->cv, NULL);
    st->refs = 2;
    st->n_seqs = st->n_live = params->n;
    st->seqs = sl_calloc((size_t)params->n, sizeof *st->seqs);
    double now = sl_now_s();
    double arrival = info && info->t_arrival > 0 && info->t_arrival <= now ? info->t_arrival : now;
    pthread_mutex_lock(&e->mu);
    uint64_t n_submitted = e->n_submitted++;
    uint64_t base_seed = mix_seed(e->cfg.seed, n_submitted);
    char *request_id;
    if (info && info->request_id) {
        request_id = sl_strdup(info->request_id);
    } else {
        char num[24];
        snprintf(num, sizeof num, "%llu", (unsigned long long)n_submitted);
        request_id = sl_strdup(num);
    }
    for (int32_t i = 0; i < params->n; i++) {
        request_t *r = sl_calloc(1, sizeof *r);
        r->index = i;
        r->cap = n_prompt + (max_tokens < 64 ? max_tokens : 64);
        r->tokens = sl_malloc((size_t)r->cap * sizeof *r->tokens);
        memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
        r->n_prompt = r->n_tokens = n_prompt;
        r->max_tokens = max_tokens;
        sampling_params_copy(&r->params, params);
        /* vLLM gives the i-th of n sequences seed + i. */
        rng_seed(&r->rng, params->has_seed ? params->seed + (uint64_t)i : base_seed + (uint64_t)i);
        detok_init(&r->detok, e->tok, params->skip_special_tokens, r->params.stop, r->params.n_stop,
                   params->include_stop_str_in_output);
        detok_set_min_tokens(&r->detok, params->min_tokens);
        r->stop_index = r->stop_token = -1;
        r->t_arrival = arrival;
        r->request_id = request_id;
        r->seq_no = e->n_sequences++;
        r->stream = st;
        st->seqs[i] = r;
        if (e->n_incoming == e->cap_incoming) {
            e->cap_incoming = e->cap_incoming ? 2 * e->cap_incoming : 64;
            e->incoming = sl_realloc(e->incoming, (size_t)e->cap_incoming * sizeof *e->incoming);
        }
        e->incoming[e->n_incoming++] = r;
    }
    pthread_cond_signal(&e->cv);
    pthread_mutex_unlock(&e->mu);
    return st;
}

/* Takes the oldest queued event; the caller holds st->mu. */
static engine_output_t *pop_locked(engine_stream_t *st) {
    engine_output_t *o = st->head;
    if (o) {
        st->head = o->next;
        if (!st->head) st->tail = NULL;
        o->next = NULL;
    }
    return o;
}

engine_output_t *engine_stream_next(engine_stream_t *st) {
    pthread_mutex_lock(&st->mu);
    while (!st->head && st->n_live > 0) pthread_cond_wait(&st->cv, &st->mu);
    engine_output_t *o = pop_locked(st);
    pthread_mutex_unlock(&st->mu);
    return o;
}

engine_output_t *engine_stream_try_next(engine_stream_t *st) {
    pthread_mutex_lock(&st->mu);
    engine_output_t *o = pop_locked(st);
    pthread_mutex_unlock(&st->mu);
    return o;
}

bool engine_stream_done(engine_stream_t *st) {
    pthread_mutex_lock(&st->mu);
    bool done = st->n_live == 0 && !st->head;
    pthread_mutex_unlock(&st->mu);
    return done;
}

void engine_stream_set_notify(engine_stream_t *st, engine_notify_fn fn, void *user) {
    pthread_mutex_lock(&st->mu);
    st->notify = fn;
    st->notify_user = user;
    /* Once this returns, no call with the old callback is under way. */
    while (st->in_notify > 0) pthread_cond_wait(&st->cv, &st->mu);
    pthread_mutex_unlock(&st->mu);
}

bool engine_is_alive(engine_t *e) {
    pthread_mutex_lock(&e->mu);
    bool alive = e->thread_running && !e->stop && !e->dead;
    pthread_mutex_unlock(&e->mu);
    return alive;
}

void engine_output_free(engine_output_t *o) {
    if (!o) return;
    free(o->text);
    free(o);
}

void engine_abort(engine_t *e, engine_stream_t *st) {
    pthread_mutex_lock(&e->mu);
    if (!st->abort_requested) {
        st->abort_requested = true;
        pthread_mutex_lock(&st->mu);
        st->refs++; /* held by the abort list until the engine handles it */
        pthread_mutex_unlock(&st->mu);
        if (e->n_aborts == e->cap_aborts) {
            e->cap_aborts = e->cap_aborts ? 2 * e->cap_aborts : 16;
            e->aborts = sl_realloc(e->aborts, (size_t)e->cap_aborts * sizeof *e->aborts);
        }
        e->aborts[e->n_aborts++] = st;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
}

void engine_stream_release(engine_t *e, engine_stream_t *st) {
    engine_stream_set_notify(st, NULL, NULL);
    pthread_mutex_lock(&st->mu);
    bool live = st->n_live > 0;
    pthread_mutex_unlock(&st->mu);
    if (live) engine_abort(e, st);
    engine_stream_unref(st);
}

void engine_get_stats(engine_t *e, engine_stats_t *out) {
    pthread_mutex_lock(&e->mu);
    *out = e->stats;
    /* Submissions the engine has not taken yet wait too (admission control
     * must see them before the next step). */
    out->n_waiting = e->stats_sched_waiting + e->n_incoming;
    pthread_mutex_unlock(&e->mu);
}

const engine_config_t *engine_config(const engine_t *e) { return &e->cfg; }
const llama_model_t *engine_model(const engine_t *e) { return &e->model; }
const tokenizer_t *engine_tokenizer(const engine_t *e) { return e->tok; }
const model_runner_t *engine_runner(const engine_t *e) { return &e->runner; }
