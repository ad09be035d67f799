/* scheduler.h - which requests run in the next step, and how many tokens each.
 *
 * vLLM V1 semantics (reference: vllm v1/core/sched/scheduler.py):
 *  1. RUNNING requests first, in admission order: each asks for the tokens it
 *     has not computed (1 for a decode, the rest of its prompt for a chunked
 *     prefill), cut to the remaining --max-num-batched-tokens budget. When
 *     blocks run out, the most recently admitted running request is preempted
 *     (blocks freed, recomputed later, pushed to the front of WAITING) until
 *     the allocation fits or the request itself is the victim.
 *  2. WAITING requests in FCFS order, only if nothing was preempted this step
 *     and while budget remains and fewer than --max-num-seqs run: prefix-cache
 *     lookup, then the uncached part cut to the budget (chunked prefill), or,
 *     without chunked prefill, admitted only if the whole prompt fits.
 * Speculative decoding: a running request's drafts (request_t n_spec) follow
 * its uncomputed tokens and count against the budget like them; those the
 * budget or max_model_len leave out are not verified this step
 * (sched_n_drafts).
 * Static batching (--batching static, a lab mode): waiting requests are
 * admitted only while the batch is forming (nothing running has produced a
 * token yet); once it decodes, nothing joins until it has drained.
 */
#ifndef SERVELAB_SCHEDULER_H
#define SERVELAB_SCHEDULER_H

#include <stdbool.h>
#include <stdint.h>

#include "servelab/kv_pool.h"
#include "servelab/request.h"

typedef struct {
    int32_t max_num_batched_tokens;
    int32_t max_num_seqs;
    int32_t max_model_len;
    bool enable_chunked_prefill;
    bool static_batching;
} sched_config_t;

typedef struct {
    int32_t n, cap;             /* scheduled requests */
    request_t **reqs;           /* (n) in batch order: running first, then newly admitted */
    int32_t *n_new;             /* (n) tokens computed for each this step */
    int32_t n_tokens;           /* sum of n_new */
    int32_t n_preempted;        /* preemptions this step */
    request_t *last_preempted;  /* the last of them */
} sched_output_t;

typedef struct {
    sched_config_t cfg;
    kv_pool_t *pool;
    request_t **running;        /* admission order */
    int32_t n_running, cap_running;
    request_t **waiting;        /* a deque: waiting[wait_head .. wait_head + n_waiting) */
    int32_t wait_head, n_waiting, cap_waiting;
    int64_t n_preemptions;      /* total (vllm:num_preemptions_total) */
    sched_output_t out;
    int32_t *hit_buf;           /* scratch for prefix lookups */
    int32_t hit_cap;
} scheduler_t;

void sched_init(scheduler_t *s, const sched_config_t *cfg, kv_pool_t *pool);
void sched_free(scheduler_t *s);

/* Queues a new request at the back of WAITING. */
void sched_add(scheduler_t *s, request_t *r);

/* Plans one step. The result stays valid until the next call. */
const sched_output_t *sched_step(scheduler_t *s, double now);

/* Removes a finished or aborted request from whichever queue holds it and
 * frees its blocks. */
void sched_remove(scheduler_t *s, request_t *r);

/* The queues as the engine sees them: sizes, whether anything is left to
 * run, the oldest running request and the next waiting one (NULL when the
 * queue is empty; finishing them one by one drains the scheduler), and the
 * preemptions so far (vllm:num_preemptions_total). */
static inline int32_t sched_n_running(const scheduler_t *s) { return s->n_running; }
static inline int32_t sched_n_waiting(const scheduler_t *s) { return s->n_waiting; }
static inline bool sched_has_work(const scheduler_t *s) { return s->n_running > 0 || s->n_waiting > 0; }
static inline request_t *sched_first_running(const scheduler_t *s) { return s->n_running ? s->running[0] : NULL; }
static inline request_t *sched_first_waiting(const scheduler_t *s) {
    return s->n_waiting ? s->waiting[s->wait_head] : NULL;
}
/* How many of r's drafts a step that computes n_new of its tokens verifies
 * (call before n_computed advances): 0 for a prefill chunk or a plain decode. */
static inline int32_t sched_n_drafts(const request_t *r, int32_t n_new) {
    int32_t k = r->n_computed + n_new - r->n_tokens;
    return k > 0 ? k : 0;
}
static inline int64_t sched_n_preemptions(const scheduler_t *s) { return s->n_preemptions; }

#endif
