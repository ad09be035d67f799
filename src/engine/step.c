/* step.c - one engine step: admit, schedule, build the flat batch, forward, sample, update.
 *
 * Stop checks follow vLLM V1 (v1/core/sched/utils.py check_stop, then the
 * output processor's stop strings): LENGTH when max_tokens or max_model_len
 * is reached; nothing else before min_tokens; then EOS (unless ignore_eos)
 * and stop_token_ids, whose text is not shown unless
 * include_stop_str_in_output; then stop strings, which are only looked for
 * once more than min_tokens tokens exist and win over LENGTH on the same
 * step. A request whose prompt is complete after this step gets one row of
 * logits and a token; a partial prefill chunk gets none. The forward and the
 * sampling are the model runner's (model_runner.c); this file is what the
 * engine does with the tokens. The lab's faults (docs/lab.md) act at marked
 * points, all behind the one mask load at the top of engine_step: a stall
 * or leaked blocks to give back before anything (engine_lab.c), oom and
 * cold_start after scheduling, step_delay and logit_noise before the
 * forward, suppress_eos in the stop checks, kv_leak when a request retires.
 */
#define _GNU_SOURCE /* nanosleep */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "servelab/lab.h"
#include "servelab/spec_decode.h"

void engine_post(engine_stream_t *st, engine_output_t *o, bool finishes_sequence) {
    o->t_posted = sl_now_s();
    pthread_mutex_lock(&st->mu);
    if (st->tail) st->tail->next = o;
    else st->head = o;
    st->tail = o;
    if (finishes_sequence) st->n_live--;
    pthread_cond_signal(&st->cv);
    engine_notify_fn fn = st->notify;
    void *user = st->notify_user;
    if (fn) st->in_notify++;
    pthread_mutex_unlock(&st->mu);
    if (!fn) return;
    fn(user);
    pthread_mutex_lock(&st->mu);
    st->in_notify--;
    pthread_cond_broadcast(&st->cv);
    pthread_mutex_unlock(&st->mu);
}

static engine_output_t *new_output(const request_t *r, const char *text, size_t len) {
    engine_output_t *o = sl_calloc(1, sizeof *o);
    o->index = r->index;
    o->text = sl_malloc(len + 1);
    memcpy(o->text, text, len);
    o->text[len] = '\0';
    o->text_len = len;
    o->stop_index = r->stop_index;
    o->stop_token = r->stop_token;
    o->prompt_tokens = r->n_prompt;
    o->completion_tokens = request_n_output(r);
    o->cached_tokens = r->n_cached_prompt;
    return o;
}

/* Retires a finished sequence: frees its blocks, records it, posts its last
 * event and, once every sequence of the client's request has finished,
 * drops the engine's reference to the stream. */
static void retire(engine_t *e, request_t *r, finish_reason_t why, double now, engine_output_t *last_event) {
    /* kv_leak (lab): some blocks keep a reference past sched_remove's release. */
    if (__builtin_expect(e->step_faults & FAULT_BIT(FAULT_KV_LEAK), 0)) lab_leak(e, r);
    sched_remove(&e->sched, r);
    r->status = REQ_FINISHED;
    r->finish = why;
    r->t_finished = now;
    if (trace_on(e->trace)) trace_request_done(e->trace, r);
    last_event->finish = why;
    em_finished(e->metrics, r);
    engine_stream_t *st = r->stream;
    engine_post(st, last_event, true);
    pthread_mutex_lock(&st->mu);
    bool last = st->n_live == 0;
    pthread_mutex_unlock(&st->mu);
    if (!last) return;
    em_parent_finished(e->metrics, st);
    engine_stream_unref(st); /* the engine's reference */
}

/* Finishes r for a reason other than its own last token (abort, error):
 * releases its blocks and held-back text, posts the final event. */
void engine_finish_request(engine_t *e, request_t *r, finish_reason_t why, double now) {
    size_t from, to;
    detok_finish(&r->detok, &from, &to);
    retire(e, r, why, now, new_output(r, detok_text(&r->detok) + from, to - from));
}

static void take_submissions(engine_t *e, double now) {
    pthread_mutex_lock(&e->mu);
    for (int32_t i = 0; i < e->n_incoming; i++) {
        e->incoming[i]->t_queued = now;
        sched_add(&e->sched, e->incoming[i]);
    }
    e->n_incoming = 0;
    int32_t n_aborts = e->n_aborts;
    engine_stream_t **aborts = NULL;
    if (n_aborts) {
        aborts = sl_malloc((size_t)n_aborts * sizeof *aborts);
        memcpy(aborts, e->aborts, (size_t)n_aborts * sizeof *aborts);
        e->n_aborts = 0;
    }
    pthread_mutex_unlock(&e->mu);
    for (int32_t i = 0; i < n_aborts; i++) {
        engine_stream_t *st = aborts[i];
        for (int32_t k = 0; k < st->n_seqs; k++)
            if (st->seqs[k]->status != REQ_FINISHED) engine_finish_request(e, st->seqs[k], FINISH_ABORT, now);
        engine_stream_unref(st); /* the abort list's reference */
    }
    free(aborts);
}

static bool is_in(const int32_t *ids, int32_t n, int32_t id) {
    for (int32_t i = 0; i < n; i++)
        if (ids[i] == id) return true;
    return false;
}

/* Appends the sampled token to r, runs the stop checks and posts the event.
 * Returns true when r finished (it is retired, and may be freed already).
 * suppress_eos (lab): EOS and stop_token_ids do not end r; each one that
 * would have counts. first_of_step: the step's first token for r; a step
 * that keeps several (speculative decoding) observes one inter-token
 * latency for them, as vLLM's iteration stats do; more_this_step: another
 * of them follows (engine_output_t). */
static bool update_with_token(engine_t *e, request_t *r, const sample_result_t *res, double now, bool suppress_eos,
                              bool first_of_step, bool more_this_step) {
    const model_config_t *mc = &e->model.cfg;
    const sampling_params_t *p = &r->params;
    request_append(r, res->token);
    int32_t n_out = request_n_output(r);
    double prev_token = r->t_last_token;
    if (n_out == 1) r->t_first_token = now;
    r->t_last_token = now;
    if (first_of_step) em_token(e->metrics, r, now, prev_token);

    finish_reason_t fin = FINISH_NONE;
    bool stop_token = false;
    if (n_out >= r->max_tokens || r->n_tokens >= e->cfg.sched.max_model_len) fin = FINISH_LENGTH;
    if (fin == FINISH_NONE && n_out >= p->min_tokens) {
        bool eos = !p->ignore_eos && is_in(mc->eos_token_ids, mc->n_eos_token_ids, res->token);
        if (suppress_eos && (eos || is_in(p->stop_token_ids, p->n_stop_token_ids, res->token))) {
            faults_count(e->cfg.faults, FAULT_SUPPRESS_EOS, 1);
        } else if (eos) {
            fin = FINISH_STOP;
            stop_token = true;
        } else if (is_in(p->stop_token_ids, p->n_stop_token_ids, res->token)) {
            fin = FINISH_STOP;
            stop_token = true;
            r->stop_token = res->token;
        }
    }
    size_t from = detok_emitted(&r->detok), to = from;
    if (!stop_token || p->include_stop_str_in_output) {
        int k = detok_push(&r->detok, res->token, &from, &to);
        if (k >= 0) {
            fin = FINISH_STOP;
            r->stop_index = k;
        }
    }
    if (fin != FINISH_NONE && r->stop_index < 0) {
        size_t f2, t2;
        detok_finish(&r->detok, &f2, &t2);
        if (from == to) from = f2;
        to = t2;
    }
    engine_output_t *o = new_output(r, detok_text(&r->detok) + from, to - from);
    o->n_new = 1;
    o->token = res->token;
    o->more_this_step = more_this_step && fin == FINISH_NONE;
    if (p->logprobs >= 0) o->logprobs = *res;
    if (fin == FINISH_NONE) {
        engine_post(r->stream, o, false);
        return false;
    }
    retire(e, r, fin, now, o);
    return true;
}

/* r's rows of this step: its last known token's, then one per draft it
 * verified (r->n_spec). Keeps the drafts up to the first the model did not
 * sample, then the model's own token (spec_n_accepted), each through the
 * stop checks until one finishes r; the KV of the drafts it dropped is
 * recomputed (n_computed steps back over them). One draw of r's generator
 * per token kept (model_runner.h). With speculation on, a request still
 * running gets its next drafts. Returns the tokens kept. */
static int32_t take_tokens(engine_t *e, request_t *r, const sample_result_t *rows, double now, bool suppress_eos) {
    int32_t k = r->n_spec, sampled[SPEC_MAX_TOKENS + 1];
    for (int32_t j = 0; j <= k; j++) sampled[j] = rows[j].token;
    int32_t a = spec_n_accepted(r->tokens + r->n_tokens, k, sampled);
    r->n_spec = 0;
    r->n_computed -= k - a;
    if (k > 0) spec_stats_observe(&e->spec_stats, k, a);
    bool draws = sampling_draws(&r->params);
    for (int32_t j = 0; j <= a; j++) {
        if (draws) rng_uniform(&r->rng);
        if (update_with_token(e, r, &rows[j], now, suppress_eos, j == 0, j < a)) return j + 1;
    }
    const spec_config_t *sc = &e->cfg.spec;
    if (sc->on) {
        int32_t drafts[SPEC_MAX_TOKENS];
        int32_t n = spec_ngram_propose(r->tokens, r->n_tokens, sc->prompt_lookup_min, sc->prompt_lookup_max,
                                       sc->num_speculative_tokens, e->cfg.sched.max_model_len, drafts);
        request_set_drafts(r, drafts, n);
    }
    return a + 1;
}

/* Once per step: the snapshot engine_get_stats returns (under the engine's
 * lock) and the step's metrics (under the registry's). */
void engine_publish_stats(engine_t *e, int64_t steps, int64_t n_prompt_done, int64_t n_gen) {
    kv_prefix_stats_t px = kv_pool_prefix_stats(&e->pool);
    int64_t n_preemptions = sched_n_preemptions(&e->sched);
    em_step_t m = {
        .stepped = steps > 0,
        .n_running = sched_n_running(&e->sched),
        .kv_usage = kv_pool_usage(&e->pool),
        .d_prompt_tokens = n_prompt_done,
        .d_generation_tokens = n_gen,
        .d_preemptions = n_preemptions - e->seen_preemptions,
        .d_queries = px.queries - e->seen_prefix.queries,
        .d_hits = px.hits - e->seen_prefix.hits,
    };
    spec_stats_t d_spec;
    if (e->cfg.spec.on) {
        spec_stats_diff(&d_spec, &e->spec_stats, &e->seen_spec);
        e->seen_spec = e->spec_stats;
        m.d_spec = &d_spec;
    }
    hit_window_observe(&e->hit_window, px.lookups - e->seen_prefix.lookups, m.d_queries, m.d_hits);
    m.prefix_hit_rate = hit_window_rate(&e->hit_window);
    e->seen_preemptions = n_preemptions;
    e->seen_prefix = px;

    pthread_mutex_lock(&e->mu);
    engine_stats_t *st = &e->stats;
    st->n_running = m.n_running;
    e->stats_sched_waiting = sched_n_waiting(&e->sched);
    st->n_waiting = m.n_waiting = e->stats_sched_waiting + e->n_incoming;
    st->kv_usage = m.kv_usage;
    st->n_preemptions = n_preemptions;
    st->prefix_queries = px.queries;
    st->prefix_hits = px.hits;
    st->prefix_hit_rate = m.prefix_hit_rate;
    st->n_steps += steps;
    st->n_prompt_tokens_total += n_prompt_done;
    st->n_generation_tokens_total += n_gen;
    st->forward_s_total += e->step_forward_s;
    st->allreduce_s_total += e->step_allreduce_s;
    st->spec = e->spec_stats;
    st->spec_k = e->cfg.spec.on ? e->cfg.spec.num_speculative_tokens : 0;
    pthread_mutex_unlock(&e->mu);
    m.d_allreduce_s = e->step_allreduce_s;
    e->step_forward_s = e->step_allreduce_s = 0.0;
    em_flush(e->metrics, &m);
    if (e->lab_snap.on) lab_snapshot_publish(e, m.kv_usage, !sched_has_work(&e->sched));
}

/* vLLM V0's preemption warning (V1 has none), every 50th preemption from the
 * first, so that greps for it find preemption here too. */
static void warn_preemptions(const scheduler_t *s) {
    const sched_output_t *o = &s->out;
    for (int64_t c = s->n_preemptions - o->n_preempted + 1; c <= s->n_preemptions; c++)
        if ((c - 1) % 50 == 0)
            LOG_WARNING("Sequence group %s is preempted by PreemptionMode.RECOMPUTE mode because there is not "
                        "enough KV cache space. This can affect the end-to-end performance. Increase "
                        "gpu_memory_utilization or tensor_parallel_size to provide more KV cache memory. "
                        "total_num_cumulative_preemption=%lld",
                        o->last_preempted->request_id, (long long)c);
}

/* The forward failed on the device (ops.h, last_error): none of this step's
 * tokens was computed, so each scheduled request ends with finish_reason
 * "error" (its client gets a final event), and the blocks this step was to
 * fill leave the prefix cache (their hashes were registered when they were
 * allocated, as vLLM does). A recoverable failure ends there: the engine
 * goes on with the next step. A fatal one (the device is lost for good)
 * kills the engine, as vLLM's EngineDeadError: GET /health answers 503 and
 * every request, running, waiting or new, finishes with "error" at once
 * (fail_all); only a restart recovers. */
static void fail_step(engine_t *e, const sched_output_t *so, const char *msg, bool fatal, double now) {
    LOG_ERROR("Model forward failed; finishing the %d requests of this step with an error: %s", so->n, msg);
    if (fatal) { /* dead before any client hears of the failure */
        LOG_ERROR("EngineCore encountered a fatal error: the device cannot run anything more in this process; "
                  "every request now fails and GET /health answers 503 until the server is restarted");
        pthread_mutex_lock(&e->mu);
        e->dead = true;
        pthread_mutex_unlock(&e->mu);
    }
    for (int32_t s = 0; s < so->n; s++) {
        request_t *r = so->reqs[s];
        kv_forget_uncomputed(&e->pool, &r->blocks, r->n_computed);
        engine_finish_request(e, r, FINISH_ERROR, now);
    }
    engine_publish_stats(e, 0, 0, 0);
}

void engine_finish_all(engine_t *e, finish_reason_t why, double now) {
    for (request_t *r; (r = sched_first_running(&e->sched)) || (r = sched_first_waiting(&e->sched));)
        engine_finish_request(e, r, why, now);
}

/* A dead engine runs nothing: whatever is running or waiting finishes with "error". */
static void fail_all(engine_t *e, double now) {
    engine_finish_all(e, FINISH_ERROR, now);
    engine_publish_stats(e, 0, 0, 0);
}

bool engine_step(engine_t *e) {
    /* Lab faults: one relaxed load per step, nothing per token when none is
     * on. Leaked blocks outlive their fault until the next step gives them
     * back, hence the second test (a plain field, false when the lab is off). */
    uint32_t faults = e->step_faults = faults_mask(e->cfg.faults);
    if (__builtin_expect(faults != 0 || e->lab.n_leaked > 0, 0) && lab_begin_step(e, faults))
        return true; /* engine_stall: no step */
    double now = sl_now_s();
    take_submissions(e, now);
    if (e->dead && sched_has_work(&e->sched)) {
        fail_all(e, now);
        return true;
    }
    if (!sched_has_work(&e->sched)) {
        engine_publish_stats(e, 0, 0, 0);
        return false;
    }
    const sched_output_t *so = sched_step(&e->sched, now);
    if (so->n_preempted > 0) warn_preemptions(&e->sched);
    if (so->n == 0) {
        /* Nothing fits although the pool is idle: only a request larger than the
         * pool can cause this, and submission refuses those; fail it, never spin. */
        if (sched_n_running(&e->sched) == 0 && sched_n_waiting(&e->sched) > 0)
            engine_finish_request(e, sched_first_waiting(&e->sched), FINISH_ERROR, now);
        engine_publish_stats(e, 0, 0, 0);
        return true;
    }
    if (__builtin_expect(faults != 0, 0)) { /* oom fails requests (they leave so); cold_start sleeps */
        lab_before_forward(e, faults, &e->sched.out, now);
        if (so->n == 0) {
            engine_publish_stats(e, 0, 0, 0);
            return true;
        }
    }
    /* Sample every sequence whose known tokens are all computed after this
     * step (a partial prefill chunk gets no token). */
    int32_t n_rows = 0, n_sampled = 0;
    for (int32_t s = 0; s < so->n; s++) {
        request_t *r = so->reqs[s];
        if (r->n_computed + so->n_new[s] < r->n_tokens) continue;
        e->sampled[n_sampled++] = r;
        n_rows += 1 + r->n_spec; /* the drafts it verifies (sched_step trimmed them to those computed) */
    }
    if (__builtin_expect(faults != 0, 0) && (faults & FAULT_BIT(FAULT_STEP_DELAY))) {
        int32_t ms = atomic_load_explicit(&e->cfg.faults->step_delay_ms, memory_order_relaxed);
        if (ms > 0) { /* 0 only in the instant a clear is under way */
            struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) != 0) {}
            faults_count(e->cfg.faults, FAULT_STEP_DELAY, 1);
        }
    }
    bool suppress_eos = faults & FAULT_BIT(FAULT_SUPPRESS_EOS);
    /* logit_noise (lab): the runner adds it to each sampled row's logits. */
    runner_noise_t noise;
    const runner_noise_t *noisy = NULL;
    fault_params_t lp;
    if (__builtin_expect(faults != 0, 0) && (faults & FAULT_BIT(FAULT_LOGIT_NOISE)) && n_rows > 0 &&
        faults_get(e->cfg.faults, FAULT_LOGIT_NOISE, &lp, NULL, NULL)) {
        noise = (runner_noise_t){.scale = lp.scale, .seed = e->cfg.seed};
        noisy = &noise;
        faults_count(e->cfg.faults, FAULT_LOGIT_NOISE, n_rows);
    }
    if (__builtin_expect((faults & FAULT_BIT(FAULT_ALLREDUCE_DELAY)) || e->lab.allreduce_delay_on, 0))
        lab_allreduce_delay(e, faults);
    char fail_msg[SL_ERR_LEN];
    double t_forward = sl_now_s();
    int failed = runner_execute(&e->runner, so, e->sampled, n_sampled, noisy, e->results, fail_msg, sizeof fail_msg);
    double done = sl_now_s();
    e->step_forward_s = done - t_forward;
    e->step_allreduce_s = llama_take_allreduce_s(&e->model);
    if (failed) {
        fail_step(e, so, fail_msg, failed == 2, done);
        return true;
    }
    bool tracing = trace_on(e->trace);
    if (__builtin_expect(tracing || e->lab_snap.on, 0)) { /* the lab's views, off by default */
        step_mix_t mix = step_mix(so);
        if (tracing) trace_step(e->trace, so, mix, n_sampled, now, done, e->step_forward_s);
        e->lab_snap.step = mix;
    }
    for (int32_t s = 0; s < so->n; s++) so->reqs[s]->n_computed += so->n_new[s];

    int64_t n_gen = 0, n_prompt_done = 0;
    const sample_result_t *rows = e->results;
    for (int32_t i = 0; i < n_sampled; i++) {
        request_t *r = e->sampled[i];
        int32_t r_rows = 1 + r->n_spec;
        if (request_n_output(r) == 0) n_prompt_done += r->n_prompt; /* counted once, as vLLM */
        n_gen += take_tokens(e, r, rows, done, suppress_eos);
        rows += r_rows;
    }

    engine_publish_stats(e, 1, n_prompt_done, n_gen);
    return true;
}
