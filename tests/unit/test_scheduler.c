/* test_scheduler.c - sched_step's schedules, step by step, against vLLM V1's rules.
 *
 * Each test drives the scheduler directly on a tiny block pool (block size 4)
 * and, after each step, plays the engine's part: n_computed += n_new, and a
 * request whose known tokens are all computed gets one generated token. The
 * expected schedule of every step ("A:6 B:2" = A computes 6 tokens, then B 2)
 * is derived by hand in the comments from the rules in scheduler.h, so a
 * scheduler that breaks one rule (victim, FCFS, budget, max_num_seqs...) fails.
 */
#include "servelab/scheduler.h"

#include "servelab/core.h"
#include "test.h"

#define B 4
#define MAX_REQS 8
#define GEN_TOKEN 7 /* every generated token; prompts use name * 1000 + i */

typedef struct {
    kv_pool_t pool;
    scheduler_t s;
    request_t *reqs[MAX_REQS];
    int n_reqs;
    double now;
} fixture_t;

static void fx_init(fixture_t *f, int32_t n_blocks, bool prefix_caching, sched_config_t cfg) {
    memset(f, 0, sizeof *f);
    kv_pool_init(&f->pool, n_blocks, B, prefix_caching, KV_HASH_SHA256);
    sched_init(&f->s, &cfg, &f->pool);
}

/* A request named `name` (one letter, kept in request_id) with an n_prompt
 * token prompt no other request shares, queued at the back of WAITING. */
static request_t *fx_add(fixture_t *f, char name, int32_t n_prompt) {
    SL_ASSERT(f->n_reqs < MAX_REQS);
    request_t *r = sl_calloc(1, sizeof *r);
    r->cap = n_prompt + 4;
    r->tokens = sl_malloc((size_t)r->cap * sizeof *r->tokens);
    for (int32_t i = 0; i < n_prompt; i++) r->tokens[i] = name * 1000 + i;
    r->n_prompt = r->n_tokens = n_prompt;
    r->max_tokens = 64;
    r->stop_index = r->stop_token = -1;
    char id[2] = {name, 0};
    r->request_id = sl_strdup(id);
    f->reqs[f->n_reqs++] = r;
    sched_add(&f->s, r);
    return r;
}

/* The engine finishing a request (max_tokens, EOS...): it leaves the scheduler. */
static void fx_finish(fixture_t *f, request_t *r) {
    sched_remove(&f->s, r);
    r->status = REQ_FINISHED;
}

/* Frees everything and checks that every block went back to the pool. */
static void fx_free(fixture_t *f) {
    for (int i = 0; i < f->n_reqs; i++) {
        request_t *r = f->reqs[i];
        sched_remove(&f->s, r);
        free(r->tokens);
        kv_seq_blocks_free(&r->blocks);
        free(r->request_id);
        free(r);
    }
    kv_pool_check(&f->pool);
    CHECK_EQ_INT(kv_pool_n_free(&f->pool), f->pool.n_blocks - 1);
    sched_free(&f->s);
    kv_pool_free(&f->pool);
}

/* "A:6 B:2": the scheduled requests in batch order with their n_new. */
static void sched_str(const sched_output_t *so, char *buf, size_t cap) {
    size_t o = 0;
    buf[0] = 0;
    for (int32_t i = 0; i < so->n && o < cap; i++)
        o += (size_t)snprintf(buf + o, cap - o, "%s%s:%d", i ? " " : "", so->reqs[i]->request_id,
                              so->n_new[i]);
}

/* Plans one step; checks its schedule, the budget, max_num_seqs and the pool. */
static const sched_output_t *fx_sched(fixture_t *f, const char *want, int line) {
    const sched_output_t *so = sched_step(&f->s, f->now += 1.0);
    char got[128];
    sched_str(so, got, sizeof got);
    if (strcmp(got, want)) {
        fprintf(stderr, "  %s:%d: %s: schedule \"%s\", want \"%s\"\n", __FILE__, line,
                test_cur_name, got, want);
        test_cur_failed = 1;
    }
    int32_t sum = 0;
    for (int32_t i = 0; i < so->n; i++) sum += so->n_new[i];
    CHECK_EQ_INT(so->n_tokens, sum);
    CHECK(so->n_tokens <= f->s.cfg.max_num_batched_tokens);
    CHECK(f->s.n_running <= f->s.cfg.max_num_seqs);
    kv_pool_check(&f->pool);
    return so;
}

/* The engine's side of a step (step.c engine_step): every scheduled request's
 * KV is computed, and one whose known tokens are now all computed samples a
 * token (a partial prefill chunk does not). */
static void engine_sim(const sched_output_t *so) {
    for (int32_t i = 0; i < so->n; i++) {
        request_t *r = so->reqs[i];
        r->n_computed += so->n_new[i];
        SL_ASSERT(r->n_computed <= r->n_tokens);
        if (r->n_computed == r->n_tokens) request_append(r, GEN_TOKEN);
    }
}

#define SCHED(f, want) fx_sched((f), (want), __LINE__)
#define STEP(f, want) engine_sim(fx_sched((f), (want), __LINE__))

static sched_config_t config(int32_t budget, int32_t max_num_seqs, bool chunked) {
    return (sched_config_t){.max_num_batched_tokens = budget, .max_num_seqs = max_num_seqs,
                            .max_model_len = 64, .enable_chunked_prefill = chunked};
}

static request_t *waiting_at(const fixture_t *f, int32_t i) {
    return i < f->s.n_waiting ? f->s.waiting[f->s.wait_head + i] : NULL;
}

/* ---- admission order and the token budget --------------------------------------------- */

static void test_running_first_then_waiting_in_arrival_order(void) {
    fixture_t f;
    fx_init(&f, 12, false, config(6, 8, true));
    request_t *a = fx_add(&f, 'A', 8);
    fx_add(&f, 'B', 3);
    fx_add(&f, 'C', 3);
    /* 1: nothing runs; A is first in line: 8 cut to the budget 6; budget 0, B
     *    and C wait (LIFO would give "C:3 B:3"). */
    STEP(&f, "A:6");
    /* 2: running A first: its last 2 prompt tokens (budget 4 left), then
     *    waiting in order: B:3 (budget 1), C cut to 1. A and B finish their
     *    prompts and get a token. */
    STEP(&f, "A:2 B:3 C:1");
    CHECK_EQ_INT(a->n_tokens, 9);
    /* 3: all three run, in admission order: A and B decode, C its last 2. */
    STEP(&f, "A:1 B:1 C:2");
    CHECK_EQ_INT(f.s.n_waiting, 0);
    fx_free(&f);
}

static void test_chunked_prefill_cuts_prompt_to_remaining_budget(void) {
    fixture_t f;
    fx_init(&f, 12, false, config(6, 8, true));
    request_t *a = fx_add(&f, 'A', 13);
    fx_add(&f, 'B', 6);
    /* 1: A(13) cut to the budget: A:6; B waits (budget 0). */
    STEP(&f, "A:6");
    /* 2: A has 7 left, one more than the budget: A:6 (a budget + 1 slip gives A:7). */
    STEP(&f, "A:6");
    CHECK_EQ_INT(a->n_computed, 12);
    CHECK_EQ_INT(a->n_tokens, 13); /* partial chunks sample nothing */
    /* 3: A's last prompt token (budget 5 left), then B(6) cut to 5. */
    STEP(&f, "A:1 B:5");
    /* 4: A decodes, B computes its last prompt token. */
    STEP(&f, "A:1 B:1");
    CHECK_EQ_INT(a->n_tokens, 15);
    fx_free(&f);
}

static void test_without_chunked_prefill_a_prompt_that_does_not_fit_blocks_the_queue(void) {
    fixture_t f;
    fx_init(&f, 12, false, config(8, 8, false));
    fx_add(&f, 'A', 6);
    fx_add(&f, 'B', 3);
    fx_add(&f, 'C', 2);
    /* 1: A:6 leaves budget 2; B(3) does not fit and is not chunked, and FCFS
     *    stops there: C(2), which would fit, waits behind it. */
    STEP(&f, "A:6");
    CHECK(waiting_at(&f, 0) == f.reqs[1]);
    /* 2: A decodes (budget 7), then B:3 (budget 4), C:2. */
    STEP(&f, "A:1 B:3 C:2");
    fx_free(&f);
}

static void test_max_num_seqs_caps_running_requests(void) {
    fixture_t f;
    fx_init(&f, 12, false, config(32, 2, true));
    request_t *a = fx_add(&f, 'A', 4);
    fx_add(&f, 'B', 4);
    request_t *c = fx_add(&f, 'C', 4);
    /* 1: A and B fill max_num_seqs = 2; C waits although 24 tokens of budget remain. */
    STEP(&f, "A:4 B:4");
    CHECK(waiting_at(&f, 0) == c);
    /* 2: still two running. */
    STEP(&f, "A:1 B:1");
    /* 3: A finishes; its seat goes to C. */
    fx_finish(&f, a);
    STEP(&f, "B:1 C:4");
    fx_free(&f);
}

/* ---- preemption ------------------------------------------------------------------------- */

static void test_preemption_victim_is_most_recently_admitted(void) {
    fixture_t f;
    fx_init(&f, 5, false, config(16, 8, true)); /* 4 usable blocks */
    request_t *a = fx_add(&f, 'A', 4);
    request_t *b = fx_add(&f, 'B', 3);
    request_t *c = fx_add(&f, 'C', 7);
    /* 1: all three prompts fit the budget (14 <= 16): A 1 block, B 1, C 2;
     *    the pool is full. Each gets a token: A 5 tokens, B 4, C 8. */
    STEP(&f, "A:4 B:3 C:7");
    CHECK_EQ_INT(kv_pool_n_free(&f.pool), 0);
    /* 2: A's 5th token needs a 2nd block, none free: preempt the newest, C
     *    (not B, not A itself); A takes one of C's 2 blocks. B's 4th token
     *    fits its block: B:1. C waits again: 0 computed, tokens kept. No
     *    admission after a preemption (C could not fit anyway: 8 tokens, 1 block). */
    const sched_output_t *so = SCHED(&f, "A:1 B:1");
    CHECK_EQ_INT(so->n_preempted, 1);
    CHECK(so->last_preempted == c);
    CHECK_EQ_INT(f.s.n_preemptions, 1);
    CHECK_EQ_INT(f.s.n_running, 2);
    CHECK(c->status == REQ_WAITING && a->status == REQ_RUNNING && b->status == REQ_RUNNING);
    CHECK_EQ_INT(c->n_computed, 0);
    CHECK_EQ_INT(c->blocks.n, 0);
    CHECK_EQ_INT(c->n_tokens, 8);
    CHECK_EQ_INT(c->n_preemptions, 1);
    CHECK(waiting_at(&f, 0) == c);
    engine_sim(so);
    /* 3: A decodes in its 2 blocks; B's 5th token takes the last free block.
     *    C needs 2 blocks: none left. */
    STEP(&f, "A:1 B:1");
    CHECK_EQ_INT(kv_pool_n_free(&f.pool), 0);
    /* 4: A finishes (2 blocks back). B decodes; C resumes from scratch, all
     *    8 tokens (its prompt and its generated token) recomputed. */
    fx_finish(&f, a);
    STEP(&f, "B:1 C:8");
    CHECK_EQ_INT(c->n_tokens, 9);
    fx_free(&f);
}

static void test_step_that_preempts_admits_nothing_and_victim_goes_first(void) {
    fixture_t f;
    fx_init(&f, 4, false, config(5, 8, true)); /* 3 usable blocks */
    request_t *a = fx_add(&f, 'A', 3);
    request_t *c = fx_add(&f, 'C', 8);
    /* 1: A:3 (1 block, budget 2 left), C cut to 2 (1 block). A gets a token. */
    STEP(&f, "A:3 C:2");
    /* 2: A decodes its 4th token in its block (budget 4 left); C:4 reaches 6
     *    tokens, a 2nd block: the pool is full. */
    STEP(&f, "A:1 C:4");
    request_t *d = fx_add(&f, 'D', 2);
    /* 3: A's 5th token needs a block: C, the newest, is preempted (2 blocks
     *    back, A takes 1). Budget 4 and 1 free block would let C:4 or D:2 in,
     *    but a step that preempted admits nothing. C goes in front of D. */
    const sched_output_t *so = SCHED(&f, "A:1");
    CHECK_EQ_INT(so->n_preempted, 1);
    CHECK(so->last_preempted == c);
    CHECK_EQ_INT(c->n_computed, 0);
    CHECK(waiting_at(&f, 0) == c && waiting_at(&f, 1) == d);
    engine_sim(so);
    /* 4: A decodes (6 tokens, 2 blocks); C first: 8 cut to the 4 left, into
     *    the free block; D waits (budget 0). With C behind D it would be
     *    "A:1 D:2" (C:2 then finds no block). */
    STEP(&f, "A:1 C:4");
    CHECK(waiting_at(&f, 0) == d);
    CHECK_EQ_INT(a->n_tokens, 7);
    fx_free(&f);
}

static void check_resume_after_preemption(bool prefix_caching, const char *want_resume,
                                          int32_t want_computed) {
    fixture_t f;
    fx_init(&f, 5, prefix_caching, config(16, 8, true)); /* 4 usable blocks */
    request_t *a = fx_add(&f, 'A', 4);
    request_t *c = fx_add(&f, 'C', 8);
    /* 1: A:4 (1 block), C:8 (2 blocks, both full: hashed with caching on).
     *    One block left. A has 5 tokens, C 9. */
    STEP(&f, "A:4 C:8");
    int32_t c0 = c->blocks.ids[0], c1 = c->blocks.ids[1];
    /* 2: A's 5th token takes the last block; C's 9th needs a 3rd: C, the
     *    newest, is itself the victim. Its 2 blocks go back to the free queue
     *    (with their hashes). */
    const sched_output_t *so = SCHED(&f, "A:1");
    CHECK(so->last_preempted == c);
    engine_sim(so);
    /* 3: A finishes. C is admitted again: with caching, both full blocks are
     *    still cached (nothing was allocated since), so 8 tokens are hits and
     *    only the 9th is computed; without, all 9 are. */
    fx_finish(&f, a);
    so = SCHED(&f, want_resume);
    CHECK_EQ_INT(c->n_computed, want_computed);
    if (prefix_caching) CHECK(c->blocks.ids[0] == c0 && c->blocks.ids[1] == c1);
    engine_sim(so);
    CHECK_EQ_INT(c->n_tokens, 10);
    fx_free(&f);
}

static void test_preempted_request_resumes_with_its_cached_full_blocks(void) {
    check_resume_after_preemption(true, "C:1", 8);
}

static void test_preempted_request_resumes_from_scratch_without_prefix_caching(void) {
    check_resume_after_preemption(false, "C:9", 0);
}

static void test_fully_cached_prompt_still_computes_its_last_token(void) {
    fixture_t f;
    fx_init(&f, 12, true, config(16, 8, true));
    request_t *x = fx_add(&f, 'X', 8);
    /* 1: X:8, 2 full blocks, both cached. */
    STEP(&f, "X:8");
    /* 2: X decodes; Y, with X's exact prompt, hits only the full blocks
     *    within 8 - 1 = 7 tokens, i.e. 1 block: it computes the last 4, not 0. */
    request_t *y = fx_add(&f, 'Y', 8);
    memcpy(y->tokens, x->tokens, 8 * sizeof *y->tokens);
    const sched_output_t *so = SCHED(&f, "X:1 Y:4");
    CHECK_EQ_INT(y->n_computed, 4);
    CHECK_EQ_INT(y->n_cached_prompt, 4);
    CHECK(y->blocks.ids[0] == x->blocks.ids[0] && y->blocks.ids[1] != x->blocks.ids[1]);
    engine_sim(so);
    fx_free(&f);
}

/* ---- static batching and max_model_len -------------------------------------------------- */

static void test_static_batching_admits_nothing_while_the_batch_decodes(void) {
    fixture_t f;
    sched_config_t cfg = config(6, 8, true);
    cfg.static_batching = true;
    fx_init(&f, 12, false, cfg);
    request_t *a = fx_add(&f, 'A', 8);
    /* 1: nothing runs: A(8) cut to 6. */
    STEP(&f, "A:6");
    request_t *b = fx_add(&f, 'B', 3);
    /* 2: A runs but has produced nothing yet: the batch is still forming, so
     *    B joins (budget 4 left). Both finish their prompts: tokens. */
    STEP(&f, "A:2 B:3");
    fx_add(&f, 'C', 2);
    /* 3: the batch decodes: C waits although budget (4) and blocks remain
     *    (continuous batching would give "A:1 B:1 C:2"). */
    STEP(&f, "A:1 B:1");
    /* 4: A finishes; B still decodes, so C still waits. */
    fx_finish(&f, a);
    STEP(&f, "B:1");
    /* 5: the batch has drained: C starts the next one. */
    fx_finish(&f, b);
    STEP(&f, "C:2");
    fx_free(&f);
}

static void test_request_at_max_model_len_minus_one_gets_no_tokens(void) {
    fixture_t f;
    sched_config_t cfg = config(16, 8, true);
    cfg.max_model_len = 8;
    fx_init(&f, 12, false, cfg);
    request_t *a = fx_add(&f, 'A', 6);
    fx_add(&f, 'B', 4);
    /* 1: both prompts (10 tokens). A has 7 tokens, B 5. */
    STEP(&f, "A:6 B:4");
    /* 2: A: 1 new token, capped at 8 - 1 - 6 = 1: A:1; B:1. A has 8 tokens. */
    STEP(&f, "A:1 B:1");
    CHECK_EQ_INT(a->n_computed, 7);
    /* 3: A: cap 8 - 1 - 7 = 0: skipped (the engine finishes it at max_model_len). */
    STEP(&f, "B:1");
    CHECK_EQ_INT(a->n_computed, 7);
    CHECK(a->status == REQ_RUNNING);
    fx_free(&f);
}

/* Speculative drafts (request_t n_spec) are tokens like any other for the
 * budget and the blocks; the budget cuts them before real tokens, only real
 * tokens are hashed into the prefix cache, and a preempted request drops them. */
static void test_drafts_take_budget_and_blocks_but_are_never_hashed(void) {
    fixture_t f;
    fx_init(&f, 16, true, config(6, 8, true));
    request_t *b = fx_add(&f, 'B', 2);
    request_t *a = fx_add(&f, 'A', 4);
    /* 1: both prompts (6 = the budget). B has 3 tokens, A 5. */
    STEP(&f, "B:2 A:4");
    int32_t drafts[] = {GEN_TOKEN, GEN_TOKEN, GEN_TOKEN, GEN_TOKEN};
    request_set_drafts(b, drafts, 4);
    request_set_drafts(a, drafts, 3);
    /* 2: B, oldest, computes its last token and 4 drafts (5); A gets the 1
     *    token left: its last one, no draft (they are dropped). */
    const sched_output_t *so = SCHED(&f, "B:5 A:1");
    CHECK_EQ_INT(sched_n_drafts(b, so->n_new[0]), 4);
    CHECK_EQ_INT(b->n_spec, 4);
    CHECK_EQ_INT(sched_n_drafts(a, so->n_new[1]), 0);
    CHECK_EQ_INT(a->n_spec, 0);
    /* B's 7 tokens take 2 blocks, but only its 3 real ones count for the
     *    cache: no full block of them, nothing hashed. */
    CHECK_EQ_INT(b->blocks.n, 2);
    CHECK_EQ_INT(b->blocks.n_hashed, 0);
    fx_free(&f);
}

static void test_preempted_request_drops_its_drafts(void) {
    fixture_t f;
    fx_init(&f, 4, false, config(16, 8, true)); /* 3 usable blocks */
    request_t *a = fx_add(&f, 'A', 4);
    request_t *b = fx_add(&f, 'B', 4);
    /* 1: both prompts, a block each; 5 tokens each, one block free. */
    STEP(&f, "A:4 B:4");
    int32_t drafts[] = {GEN_TOKEN, GEN_TOKEN, GEN_TOKEN};
    request_set_drafts(b, drafts, 3);
    /* 2: A's 5th token takes the free block; B's token and 3 drafts need 2
     *    more blocks: B, the newest, is preempted, and forgets its drafts. */
    const sched_output_t *so = SCHED(&f, "A:1");
    CHECK_EQ_INT(so->n_preempted, 1);
    CHECK(so->last_preempted == b && b->status == REQ_WAITING);
    CHECK_EQ_INT(b->n_spec, 0);
    CHECK(a->status == REQ_RUNNING);
    fx_free(&f);
}

int main(void) {
    RUN(test_running_first_then_waiting_in_arrival_order);
    RUN(test_chunked_prefill_cuts_prompt_to_remaining_budget);
    RUN(test_without_chunked_prefill_a_prompt_that_does_not_fit_blocks_the_queue);
    RUN(test_max_num_seqs_caps_running_requests);
    RUN(test_preemption_victim_is_most_recently_admitted);
    RUN(test_step_that_preempts_admits_nothing_and_victim_goes_first);
    RUN(test_preempted_request_resumes_with_its_cached_full_blocks);
    RUN(test_preempted_request_resumes_from_scratch_without_prefix_caching);
    RUN(test_fully_cached_prompt_still_computes_its_last_token);
    RUN(test_static_batching_admits_nothing_while_the_batch_decodes);
    RUN(test_request_at_max_model_len_minus_one_gets_no_tokens);
    RUN(test_drafts_take_budget_and_blocks_but_are_never_hashed);
    RUN(test_preempted_request_drops_its_drafts);
    return test_summary();
}
