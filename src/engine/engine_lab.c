/* engine_lab.c - the lab's faults where the engine acts on them: engine_stall,
 * kv_leak, oom and cold_start (step_delay, suppress_eos and logit_noise sit
 * in step.c and the model runner, where they act; docs/lab.md lists all).
 *
 * Why here and this way: engine_step loads the fault mask once and calls in
 * only when a bit is set (or blocks are still leaked), so nothing runs per
 * step or per token while the lab is off. Each fault then reads its
 * parameters under the table's mutex (faults_get); the epoch it returns
 * tells a new setting from the one already acted on, which is how a stall
 * is counted once and cold_start's steps restart when it is set again.
 * Every effect is real: a stall really stops stepping, leaked blocks really
 * leave the free pool (one extra reference each, so the prefix cache can
 * neither free nor evict them), an OOM really fails the request through the
 * path a failed forward takes, and a cold step really sleeps.
 */
#define _GNU_SOURCE /* nanosleep */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_internal.h"
#include "servelab/lab.h"
#include "servelab/ops.h"

/* How often a stalled engine looks at its fault (cleared, expired, stop). */
#define STALL_POLL_MS 10

static void sleep_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = (time_t)(ms / 1000), .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {}
}

/* ---- kv_leak ------------------------------------------------------------------------ */

void lab_leak(engine_t *e, request_t *r) {
    fault_params_t p;
    if (!faults_get(e->cfg.faults, FAULT_KV_LEAK, &p, NULL, NULL)) return;
    int32_t n = p.blocks < r->blocks.n ? (int32_t)p.blocks : r->blocks.n;
    engine_lab_t *l = &e->lab;
    if (l->n_leaked + n > l->cap_leaked) {
        l->cap_leaked = l->n_leaked + n > 2 * l->cap_leaked ? l->n_leaked + n : 2 * l->cap_leaked;
        l->leaked = sl_realloc(l->leaked, (size_t)l->cap_leaked * sizeof *l->leaked);
    }
    /* The newest blocks: the ones least likely shared through the prefix
     * cache, so each leaked block is most likely one block less in the pool. */
    for (int32_t i = 0; i < n; i++) {
        int32_t id = r->blocks.ids[r->blocks.n - 1 - i];
        kv_block_hold(&e->pool, id);
        l->leaked[l->n_leaked++] = id;
    }
    if (n > 0) faults_count(e->cfg.faults, FAULT_KV_LEAK, n);
}

/* The fault is off: every held block goes back (a block shared with a live
 * request stays with it; the rest return to the free queue). */
static void return_leaks(engine_t *e) {
    engine_lab_t *l = &e->lab;
    for (int32_t i = 0; i < l->n_leaked; i++) kv_block_release(&e->pool, l->leaked[i]);
    LOG_INFO("Fault injection: kv_leak gave back %d leaked KV cache blocks", l->n_leaked);
    l->n_leaked = 0;
}

void lab_free(engine_t *e) {
    free(e->lab.leaked); /* the pool goes with the engine: no reference to drop */
    e->lab.leaked = NULL;
    e->lab.n_leaked = e->lab.cap_leaked = 0;
}

/* ---- engine_stall ------------------------------------------------------------------- */

/* True when the engine is to do nothing this step: it publishes its (frozen)
 * state, so the waiting queue it shows grows with the submissions it does
 * not take, sleeps a short while and lets the loop come back (where a stop
 * is seen). A stall with `seconds` clears itself once they have passed
 * since it was set. */
static bool stalled(engine_t *e) {
    faults_t *f = e->cfg.faults;
    fault_params_t p;
    uint64_t epoch;
    double set_at;
    if (!faults_get(f, FAULT_ENGINE_STALL, &p, &epoch, &set_at)) return false;
    if (epoch != e->lab.stall_epoch) {
        e->lab.stall_epoch = epoch;
        faults_count(f, FAULT_ENGINE_STALL, 1);
    }
    if (p.seconds > 0 && sl_now_s() >= set_at + (double)p.seconds) {
        faults_expire(f, FAULT_ENGINE_STALL, epoch, "its time ran out");
        return false;
    }
    engine_publish_stats(e, 0, 0, 0);
    sleep_ms(STALL_POLL_MS);
    return true;
}

/* allreduce_delay acts inside the model's communicator (comm.h): every
 * all-reduce of the step really lasts longer, on every rank, so step time,
 * ITL and servelab:tp_allreduce_seconds_total move because the collectives
 * took longer. Injections count all-reduces. At -tp 1 there is none to slow. */
void lab_allreduce_delay(engine_t *e, uint32_t faults) {
    fault_params_t p = {0};
    bool on = (faults & FAULT_BIT(FAULT_ALLREDUCE_DELAY)) &&
              faults_get(e->cfg.faults, FAULT_ALLREDUCE_DELAY, &p, NULL, NULL);
    if (!on) p.allreduce_ms = p.gbps = 0.0;
    bool has_ranks = llama_set_allreduce_delay(&e->model, p.allreduce_ms, p.gbps);
    e->lab.allreduce_delay_on = on && has_ranks;
    if (e->lab.allreduce_delay_on)
        faults_count(e->cfg.faults, FAULT_ALLREDUCE_DELAY, llama_allreduces_per_step(&e->model));
}

bool lab_begin_step(engine_t *e, uint32_t faults) {
    if (e->lab.n_leaked > 0 && !(faults & FAULT_BIT(FAULT_KV_LEAK))) return_leaks(e);
    return (faults & FAULT_BIT(FAULT_ENGINE_STALL)) && stalled(e);
}

/* ---- oom ---------------------------------------------------------------------------- */

/* The capacity the OOM line names: the real device's on the CUDA backend;
 * otherwise an 80 GB A100's as PyTorch reports it (79.15 GiB). */
static int64_t gpu_total_bytes(engine_t *e) {
    int64_t total = (int64_t)(79.15 * 1073741824.0);
#ifdef SERVELAB_HAVE_CUDA
    int64_t free_b, dev_total;
    sl_err_t err;
    if (!strcmp(e->model.ops->name, "cuda") && cuda_backend_mem_info(e->model.ops, &free_b, &dev_total, &err) == 0)
        total = dev_total;
#else
    (void)e;
#endif
    return total;
}

/* Fails r as a CUDA OOM in this step's forward would: it leaves the step,
 * its uncomputed blocks leave the prefix cache, and it finishes with
 * finish_reason "error", as fail_step (step.c) finishes the requests of a
 * failed forward. `ask` is what the failed allocation asked for. */
static void oom_fail(engine_t *e, sched_output_t *so, request_t *r, int64_t ask, double now) {
    for (int32_t s = 0; s < so->n; s++) {
        if (so->reqs[s] != r) continue;
        so->n_tokens -= so->n_new[s];
        memmove(so->reqs + s, so->reqs + s + 1, (size_t)(so->n - s - 1) * sizeof *so->reqs);
        memmove(so->n_new + s, so->n_new + s + 1, (size_t)(so->n - s - 1) * sizeof *so->n_new);
        so->n--;
        break;
    }
    char msg[1024];
    fault_oom_message(msg, sizeof msg, ask, gpu_total_bytes(e));
    LOG_ERROR("Model forward failed for request %s; finishing it with an error: %s", r->request_id, msg);
    faults_count(e->cfg.faults, FAULT_OOM, 1); /* before the client can hear of it */
    kv_forget_uncomputed(&e->pool, &r->blocks, r->n_computed);
    engine_finish_request(e, r, FINISH_ERROR, now);
}

/* A prompt longer than prompt_tokens fails at its prefill, asking for its
 * KV blocks; a step with more than `running` running requests fails the
 * newest of them, asking for its blocks (the batch's growth is what did not
 * fit). */
static void oom(engine_t *e, sched_output_t *so, double now) {
    fault_params_t p;
    if (!faults_get(e->cfg.faults, FAULT_OOM, &p, NULL, NULL)) return;
    int64_t block_bytes = (int64_t)llama_kv_block_bytes(&e->model, e->pool.block_size);
    int64_t B = e->pool.block_size;
    for (int32_t s = 0; p.prompt_tokens > 0 && s < so->n;) {
        request_t *r = so->reqs[s];
        if (r->n_prompt > p.prompt_tokens && r->n_computed < r->n_prompt)
            oom_fail(e, so, r, (r->n_prompt + B - 1) / B * block_bytes, now); /* so->reqs[s] is the next one now */
        else s++;
    }
    int32_t n_run = sched_n_running(&e->sched);
    if (p.running > 0 && n_run > p.running) {
        request_t *r = e->sched.running[n_run - 1]; /* admission order: the newest last */
        oom_fail(e, so, r, (int64_t)(r->blocks.n > 0 ? r->blocks.n : 1) * block_bytes, now);
    }
}

/* ---- cold_start --------------------------------------------------------------------- */

/* The first `steps` steps with model work after the fault was set (at boot
 * with --fault) sleep `ms` each; then the fault clears itself. */
static void cold_start(engine_t *e) {
    faults_t *f = e->cfg.faults;
    fault_params_t p;
    uint64_t epoch;
    if (!faults_get(f, FAULT_COLD_START, &p, &epoch, NULL)) return;
    engine_lab_t *l = &e->lab;
    if (epoch != l->cold_epoch) {
        l->cold_epoch = epoch;
        l->cold_left = p.steps;
    }
    if (l->cold_left <= 0) return;
    sleep_ms(p.ms);
    faults_count(f, FAULT_COLD_START, 1);
    if (--l->cold_left == 0) faults_expire(f, FAULT_COLD_START, epoch, "its steps ran out");
}

void lab_before_forward(engine_t *e, uint32_t faults, sched_output_t *so, double now) {
    if (faults & FAULT_BIT(FAULT_OOM)) oom(e, so, now);
    if ((faults & FAULT_BIT(FAULT_COLD_START)) && so->n > 0) cold_start(e);
}
