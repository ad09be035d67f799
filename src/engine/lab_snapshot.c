/* lab_snapshot.c - the engine as the lab page sees it (GET /lab/snapshot,
 * serve --enable-lab-ui): the scheduler's queues, the step's token budget and
 * the KV block map, as one JSON document.
 *
 * The engine thread builds it at the end of a step, from the same pool and
 * queue state as the step's published statistics (so its kv_usage, running
 * and waiting are the values /metrics reports for that step), at most
 * LAB_SNAPSHOT_HZ times a second, plus once when the engine goes idle; the
 * HTTP side takes a copy under a lock held only for the pointer swap and the
 * copy. Off (the default), nothing is built.
 *
 * The document (its JSON Schema: docs/schemas/lab-snapshot.schema.json):
 *   {"time": s since the engine started, "steps": n,
 *    "config": {"block_size", "num_blocks" (usable: the null block is not
 *               counted), "max_num_seqs", "max_num_batched_tokens"},
 *    "step": {"prefill_tokens", "decode_tokens"}        the last step's work,
 *    "running": [req], "waiting": [req], "incoming": n   submitted, not yet queued,
 *    "kv": {"usage", "free", "cached", "used", "shared",
 *           "map": [["f"|"c"|"u"|"s", run length], ...]}}  blocks 1.. in order
 *   req = {"id", "state": "prefilling"|"decoding"|"waiting"|"preempted",
 *          "prompt_tokens", "computed_tokens", "output_tokens", "max_tokens",
 *          "preemptions", "blocks": [ids]}
 * Block states: f free, c free but holding a cached prefix (reusable by a
 * hit), u held by one sequence, s held by several (a shared prefix). usage =
 * (u + s) / num_blocks, vLLM's kv_cache_usage_perc. The map is run-length
 * encoded, so a large, mostly free pool stays small.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine_internal.h"

#define LAB_SNAPSHOT_HZ 4.0

static char block_state(const kv_block_t *b) {
    if (b->ref_cnt > 1) return 's';
    if (b->ref_cnt == 1) return 'u';
    return b->has_hash ? 'c' : 'f';
}

static void add_request(cJSON *list, const request_t *r, bool running) {
    cJSON *o = cJSON_CreateObject();
    char id[160];
    snprintf(id, sizeof id, "%s[%d]", r->request_id ? r->request_id : "?", r->index);
    cJSON_AddStringToObject(o, "id", id);
    /* Running: prefilling while tokens it knows remain to compute beyond the last (step_decodes). */
    const char *state = running ? (r->n_computed < r->n_tokens - 1 ? "prefilling" : "decoding")
                                : (r->n_preemptions > 0 ? "preempted" : "waiting");
    cJSON_AddStringToObject(o, "state", state);
    cJSON_AddNumberToObject(o, "prompt_tokens", r->n_prompt);
    cJSON_AddNumberToObject(o, "computed_tokens", r->n_computed);
    cJSON_AddNumberToObject(o, "output_tokens", request_n_output(r));
    cJSON_AddNumberToObject(o, "max_tokens", r->max_tokens);
    cJSON_AddNumberToObject(o, "preemptions", r->n_preemptions);
    /* cJSON_CreateIntArray gives NULL for no numbers: a request holding no block has []. */
    cJSON_AddItemToObject(o, "blocks", r->blocks.n > 0 ? cJSON_CreateIntArray(r->blocks.ids, r->blocks.n)
                                                       : cJSON_CreateArray());
    cJSON_AddItemToArray(list, o);
}

static char *build(engine_t *e, double kv_usage, double now) {
    const scheduler_t *s = &e->sched;
    const kv_pool_t *p = &e->pool;
    cJSON *doc = cJSON_CreateObject();
    cJSON_AddNumberToObject(doc, "time", now - e->lab_snap.t0);
    pthread_mutex_lock(&e->mu);
    int64_t steps = e->stats.n_steps;
    int32_t incoming = e->n_incoming;
    pthread_mutex_unlock(&e->mu);
    cJSON_AddNumberToObject(doc, "steps", (double)steps);
    cJSON *cfg = cJSON_AddObjectToObject(doc, "config");
    cJSON_AddNumberToObject(cfg, "block_size", p->block_size);
    cJSON_AddNumberToObject(cfg, "num_blocks", p->n_blocks - 1);
    cJSON_AddNumberToObject(cfg, "max_num_seqs", s->cfg.max_num_seqs);
    cJSON_AddNumberToObject(cfg, "max_num_batched_tokens", s->cfg.max_num_batched_tokens);
    cJSON *step = cJSON_AddObjectToObject(doc, "step");
    cJSON_AddNumberToObject(step, "prefill_tokens", (double)e->lab_snap.step.prefill);
    cJSON_AddNumberToObject(step, "decode_tokens", (double)e->lab_snap.step.decode);
    cJSON *running = cJSON_AddArrayToObject(doc, "running"), *waiting = cJSON_AddArrayToObject(doc, "waiting");
    for (int32_t i = 0; i < s->n_running; i++) add_request(running, s->running[i], true);
    for (int32_t i = 0; i < s->n_waiting; i++) add_request(waiting, s->waiting[s->wait_head + i], false);
    cJSON_AddNumberToObject(doc, "incoming", incoming);

    int64_t count[4] = {0}; /* f c u s */
    cJSON *kv = cJSON_AddObjectToObject(doc, "kv");
    cJSON *map = cJSON_CreateArray();
    char run_state = 0;
    int64_t run = 0;
    for (int32_t b = 1; b <= p->n_blocks; b++) {
        char st = b < p->n_blocks ? block_state(&p->blocks[b]) : 0;
        if (st) count[st == 'f' ? 0 : st == 'c' ? 1 : st == 'u' ? 2 : 3]++;
        if (st == run_state) {
            run++;
            continue;
        }
        if (run > 0) {
            char name[2] = {run_state, 0};
            cJSON *pair = cJSON_CreateArray();
            cJSON_AddItemToArray(pair, cJSON_CreateString(name));
            cJSON_AddItemToArray(pair, cJSON_CreateNumber((double)run));
            cJSON_AddItemToArray(map, pair);
        }
        run_state = st, run = 1;
    }
    cJSON_AddNumberToObject(kv, "usage", kv_usage);
    cJSON_AddNumberToObject(kv, "free", (double)count[0]);
    cJSON_AddNumberToObject(kv, "cached", (double)count[1]);
    cJSON_AddNumberToObject(kv, "used", (double)count[2]);
    cJSON_AddNumberToObject(kv, "shared", (double)count[3]);
    cJSON_AddItemToObject(kv, "map", map);
    char *text = cJSON_PrintUnformatted(doc);
    cJSON_Delete(doc);
    return text;
}

void engine_enable_lab_ui(engine_t *e) {
    SL_ASSERT(!e->thread_running);
    pthread_mutex_init(&e->lab_snap.mu, NULL);
    e->lab_snap.on = true;
    e->lab_snap.t0 = sl_now_s();
    e->lab_snap.text = build(e, kv_pool_usage(&e->pool), e->lab_snap.t0); /* the idle engine, until a step */
    e->lab_snap.last_idle = true;
}

void lab_snapshot_publish(engine_t *e, double kv_usage, bool idle) {
    double now = sl_now_s();
    /* Rate-limited; but the step that leaves the engine idle is always shown. */
    if (now - e->lab_snap.t_last < 1.0 / LAB_SNAPSHOT_HZ && !(idle && !e->lab_snap.last_idle)) return;
    char *text = build(e, kv_usage, now);
    pthread_mutex_lock(&e->lab_snap.mu);
    char *old = e->lab_snap.text;
    e->lab_snap.text = text;
    pthread_mutex_unlock(&e->lab_snap.mu);
    free(old);
    e->lab_snap.t_last = now;
    e->lab_snap.last_idle = idle;
}

char *engine_lab_snapshot(engine_t *e) {
    if (!e->lab_snap.on) return NULL;
    pthread_mutex_lock(&e->lab_snap.mu);
    char *copy = sl_strdup(e->lab_snap.text ? e->lab_snap.text : "{}");
    pthread_mutex_unlock(&e->lab_snap.mu);
    return copy;
}

void lab_snapshot_free(engine_t *e) {
    if (!e->lab_snap.on) return;
    free(e->lab_snap.text);
    pthread_mutex_destroy(&e->lab_snap.mu);
}
