/* scheduler.c - vLLM V1's schedule(): running first, then waiting FCFS (see scheduler.h).
 *
 * Speculative drafts (request_t's n_spec) are tokens a running request asks
 * to compute like any other, after its uncomputed ones: they take budget and
 * blocks, and the budget or max_model_len may cut them (vLLM trims
 * spec_token_ids the same way). Only real tokens are hashed into the prefix
 * cache. A preempted request drops its drafts: it recomputes its real tokens.
 *
 * Static batching admits new requests only while the current batch is still
 * forming: nothing running, or nothing running has produced a token yet (its
 * prompts may take several steps to prefill under the token budget). Once the
 * batch decodes, nothing joins it until it has drained.
 */
#include "servelab/scheduler.h"

#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"

void sched_init(scheduler_t *s, const sched_config_t *cfg, kv_pool_t *pool) {
    memset(s, 0, sizeof *s);
    s->cfg = *cfg;
    s->pool = pool;
    s->cap_running = 64;
    s->running = sl_malloc((size_t)s->cap_running * sizeof *s->running);
    s->cap_waiting = 64;
    s->waiting = sl_malloc((size_t)s->cap_waiting * sizeof *s->waiting);
    s->hit_cap = cfg->max_model_len / pool->block_size + 1;
    s->hit_buf = sl_malloc((size_t)s->hit_cap * sizeof *s->hit_buf);
}

void sched_free(scheduler_t *s) {
    free(s->running);
    free(s->waiting);
    free(s->out.reqs);
    free(s->out.n_new);
    free(s->hit_buf);
    memset(s, 0, sizeof *s);
}

/* ---- queues -------------------------------------------------------------------- */

static void waiting_reserve(scheduler_t *s, int32_t extra) {
    if (s->wait_head + s->n_waiting + extra <= s->cap_waiting) return;
    if (s->n_waiting + extra <= s->cap_waiting / 2) { /* compact */
        memmove(s->waiting, s->waiting + s->wait_head, (size_t)s->n_waiting * sizeof *s->waiting);
        s->wait_head = 0;
        return;
    }
    while (s->n_waiting + extra > s->cap_waiting / 2) s->cap_waiting *= 2;
    request_t **w = sl_malloc((size_t)s->cap_waiting * sizeof *w);
    memcpy(w, s->waiting + s->wait_head, (size_t)s->n_waiting * sizeof *w);
    free(s->waiting);
    s->waiting = w;
    s->wait_head = 0;
}

static void waiting_push_back(scheduler_t *s, request_t *r) {
    waiting_reserve(s, 1);
    s->waiting[s->wait_head + s->n_waiting++] = r;
}

static void waiting_push_front(scheduler_t *s, request_t *r) {
    if (s->wait_head == 0) {
        waiting_reserve(s, 1);
        memmove(s->waiting + 1, s->waiting, (size_t)s->n_waiting * sizeof *s->waiting);
        s->wait_head = 1;
    }
    s->waiting[--s->wait_head] = r;
    s->n_waiting++;
}

static void running_push(scheduler_t *s, request_t *r) {
    if (s->n_running == s->cap_running) {
        s->cap_running *= 2;
        s->running = sl_realloc(s->running, (size_t)s->cap_running * sizeof *s->running);
    }
    s->running[s->n_running++] = r;
}

static void out_push(scheduler_t *s, request_t *r, int32_t n_new) {
    sched_output_t *o = &s->out;
    if (o->n == o->cap) {
        o->cap = o->cap ? 2 * o->cap : 64;
        o->reqs = sl_realloc(o->reqs, (size_t)o->cap * sizeof *o->reqs);
        o->n_new = sl_realloc(o->n_new, (size_t)o->cap * sizeof *o->n_new);
    }
    o->reqs[o->n] = r;
    o->n_new[o->n++] = n_new;
    o->n_tokens += n_new;
}

void sched_add(scheduler_t *s, request_t *r) {
    r->status = REQ_WAITING;
    waiting_push_back(s, r);
}

void sched_remove(scheduler_t *s, request_t *r) {
    for (int32_t i = 0; i < s->n_running; i++) {
        if (s->running[i] != r) continue;
        memmove(s->running + i, s->running + i + 1, (size_t)(s->n_running - i - 1) * sizeof *s->running);
        s->n_running--;
        break;
    }
    for (int32_t i = 0; i < s->n_waiting; i++) {
        request_t **w = s->waiting + s->wait_head;
        if (w[i] != r) continue;
        memmove(w + i, w + i + 1, (size_t)(s->n_waiting - i - 1) * sizeof *w);
        s->n_waiting--;
        break;
    }
    kv_free_seq(s->pool, &r->blocks);
}

/* ---- the step ------------------------------------------------------------------ */

static void preempt(scheduler_t *s, request_t *r) {
    kv_free_seq(s->pool, &r->blocks);
    r->n_computed = 0;
    r->n_spec = 0;
    r->status = REQ_WAITING;
    r->n_preemptions++;
    s->n_preemptions++;
    s->out.n_preempted++;
    s->out.last_preempted = r;
    waiting_push_front(s, r);
}

static bool batch_is_forming(const scheduler_t *s) {
    for (int32_t i = 0; i < s->n_running; i++)
        if (request_n_output(s->running[i]) > 0) return false;
    return true;
}

const sched_output_t *sched_step(scheduler_t *s, double now) {
    sched_output_t *o = &s->out;
    o->n = o->n_tokens = o->n_preempted = 0;
    int32_t budget = s->cfg.max_num_batched_tokens;
    bool admit = !s->cfg.static_batching || batch_is_forming(s);

    /* 1. Running requests, oldest first. */
    for (int32_t i = 0; i < s->n_running && budget > 0; i++) {
        request_t *r = s->running[i];
        int32_t n_new = r->n_tokens + r->n_spec - r->n_computed;
        if (n_new > budget) n_new = budget;
        if (n_new > s->cfg.max_model_len - 1 - r->n_computed)
            n_new = s->cfg.max_model_len - 1 - r->n_computed;
        if (n_new <= 0) continue;
        bool scheduled = false;
        for (;;) {
            int32_t upto = r->n_computed + n_new, known = upto < r->n_tokens ? upto : r->n_tokens;
            if (kv_allocate(s->pool, &r->blocks, r->tokens, known, upto, NULL, 0)) {
                scheduled = true;
                break;
            }
            /* Out of blocks: preempt the most recently admitted request. */
            request_t *victim = s->running[--s->n_running];
            preempt(s, victim);
            if (victim == r) break;
        }
        if (!scheduled) break;
        int32_t k = sched_n_drafts(r, n_new);
        if (k < r->n_spec) r->n_spec = k; /* the drafts left out are dropped */
        out_push(s, r, n_new);
        budget -= n_new;
    }

    /* 2. Waiting requests, FCFS, only if nothing was preempted this step. */
    while (admit && o->n_preempted == 0 && budget > 0 && s->n_waiting > 0 &&
           s->n_running < s->cfg.max_num_seqs) {
        request_t *r = s->waiting[s->wait_head];
        SL_ASSERT(r->n_computed == 0 && r->blocks.n == 0);
        int32_t n_hit = kv_lookup_prefix(s->pool, r->tokens, r->n_tokens, s->hit_buf, s->hit_cap);
        int32_t cached = n_hit * s->pool->block_size;
        int32_t n_new = r->n_tokens - cached;
        if (!s->cfg.enable_chunked_prefill && n_new > budget) break;
        if (n_new > budget) n_new = budget;
        if (!kv_allocate(s->pool, &r->blocks, r->tokens, cached + n_new, cached + n_new, s->hit_buf,
                         n_hit))
            break;
        s->wait_head++;
        s->n_waiting--;
        if (s->n_waiting == 0) s->wait_head = 0;
        r->n_computed = cached;
        r->status = REQ_RUNNING;
        if (!r->scheduled_once) {
            r->scheduled_once = true;
            r->t_first_scheduled = now;
            r->n_cached_prompt = cached;
        }
        running_push(s, r);
        out_push(s, r, n_new);
        budget -= n_new;
    }
    return o;
}
