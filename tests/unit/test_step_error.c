/* test_step_error.c - a forward that fails on the device fails its step's requests, not the engine.
 *
 * The CPU ops table plus a last_error that reports a (fake) CUDA fault when
 * told to: the engine must finish every request scheduled in that step with
 * FINISH_ERROR (all n sequences of a request, each with a final event and no
 * token), release their KV blocks, and then serve the next request normally.
 * The blocks the failed step was to fill leave the prefix cache. A fatal
 * failure (last_error 2: the device is lost for good) kills the engine:
 * engine_is_alive turns false (GET /health 503) and every request, new ones
 * included, finishes with FINISH_ERROR without a forward.
 * Runs the committed tiny checkpoint synchronously (engine_step), and with
 * the engine thread for the fatal case.
 */
#include "servelab/engine.h"
#include "test.h"

#define MODEL_DIR "models/tiny"

static int fail_next, n_queries;
static bool fatal; /* the next failure is a lost device: 2, then 2 forever */

static int fake_last_error(void *ctx, char *msg, size_t cap) {
    (void)ctx;
    n_queries++;
    if (!fail_next) return 0;
    if (!fatal) fail_next = 0;
    snprintf(msg, cap, "CUDA error: an illegal memory access was encountered (fake)");
    return fatal ? 2 : 1;
}

typedef struct {
    int32_t n_events, n_errors, n_tokens;
    finish_reason_t last;
} drained_t;

/* The stream's events: those queued now (engine_stream_try_next, for a
 * synchronous engine), or all of them until it ends (engine_stream_next). */
static drained_t drain_with(engine_stream_t *st, engine_output_t *(*next)(engine_stream_t *)) {
    drained_t d = {0};
    for (engine_output_t *o; (o = next(st)); engine_output_free(o)) {
        d.n_events++;
        d.n_tokens += o->n_new;
        d.n_errors += o->finish == FINISH_ERROR;
        if (o->finish != FINISH_NONE) d.last = o->finish;
    }
    return d;
}
static drained_t drain(engine_stream_t *st) { return drain_with(st, engine_stream_try_next); }
static drained_t drain_blocking(engine_stream_t *st) { return drain_with(st, engine_stream_next); }

/* The engine the tests run: models/tiny on `ops`, 2048-token budget, 8 sequences. */
static engine_config_t test_config(const sl_ops_t *ops) {
    engine_config_t c;
    engine_config_default(&c);
    c.model_dir = MODEL_DIR;
    c.load.progress = false;
    c.ops = ops;
    c.max_model_len = 512;
    c.kv_cache_memory_bytes = 64 << 20;
    c.sched.max_num_seqs = 8;
    return c;
}

static void test_failed_forward_finishes_the_steps_requests_with_error(void) {
    sl_ops_t ops = *cpu_backend_init(1);
    ops.last_error = fake_last_error;
    sl_err_t err;
    engine_config_t c = test_config(&ops);
    engine_t *e = engine_create(&c, &err);
    SL_ASSERT(e);

    int32_t prompt[20];
    for (int32_t i = 0; i < 20; i++) prompt[i] = 5 + i;
    sampling_params_t p;
    sampling_params_default(&p);
    p.max_tokens = 4;
    p.temperature = 0.0f;
    p.n = 2;
    engine_stream_t *two = engine_submit(e, prompt, 20, &p, &err);
    p.n = 1;
    engine_stream_t *one = engine_submit(e, prompt, 10, &p, &err);
    SL_ASSERT(two && one);

    fail_next = 1;
    CHECK(engine_step(e));
    drained_t d2 = drain(two), d1 = drain(one);
    CHECK_EQ_INT(d2.n_events, 2); /* one final event per sequence */
    CHECK_EQ_INT(d2.n_errors, 2);
    CHECK_EQ_INT(d2.n_tokens, 0);
    CHECK_EQ_INT(d1.n_errors, 1);
    CHECK(engine_stream_done(two) && engine_stream_done(one));
    engine_stats_t st;
    engine_get_stats(e, &st);
    CHECK_EQ_INT(st.n_running, 0);
    CHECK(st.kv_usage == 0.0);
    engine_stream_release(e, two);
    engine_stream_release(e, one);

    /* The engine goes on. */
    engine_stream_t *next = engine_submit(e, prompt, 12, &p, &err);
    SL_ASSERT(next);
    while (engine_step(e)) {}
    drained_t dn = drain(next);
    CHECK_EQ_INT(dn.n_tokens, 4);
    CHECK(dn.last == FINISH_LENGTH);
    CHECK(n_queries >= 5); /* asked after every forward */
    engine_stream_release(e, next);

    sampling_params_free(&p);
    engine_free(e);
}

typedef struct {
    engine_t *e;
    sl_ops_t ops;
} rig_t;

static void rig_init(rig_t *g) {
    g->ops = *cpu_backend_init(1);
    g->ops.last_error = fake_last_error;
    sl_err_t err;
    engine_config_t c = test_config(&g->ops);
    g->e = engine_create(&c, &err);
    SL_ASSERT(g->e);
}

static void rig_free(rig_t *g) {
    engine_free(g->e);
}

static void test_failed_step_leaves_nothing_in_the_prefix_cache(void) {
    rig_t g;
    rig_init(&g);
    int32_t prompt[40];
    for (int32_t i = 0; i < 40; i++) prompt[i] = 7 + 3 * i;
    sampling_params_t p;
    sampling_params_default(&p);
    p.max_tokens = 2;
    p.temperature = 0.0f;
    sl_err_t err;
    engine_stream_t *a = engine_submit(g.e, prompt, 40, &p, &err);
    SL_ASSERT(a);
    fail_next = 1;
    CHECK(engine_step(g.e));
    CHECK_EQ_INT(drain(a).n_errors, 1);
    engine_stream_release(g.e, a);

    /* The same prompt again: its two full blocks were never computed, so no hit. */
    engine_stream_t *b = engine_submit(g.e, prompt, 40, &p, &err);
    SL_ASSERT(b);
    while (engine_step(g.e)) {}
    engine_stats_t st;
    engine_get_stats(g.e, &st);
    CHECK_EQ_INT(st.prefix_hits, 0);
    CHECK_EQ_INT(drain(b).n_tokens, 2);
    engine_stream_release(g.e, b);

    /* Computed this time: a third request hits both blocks. */
    engine_stream_t *c = engine_submit(g.e, prompt, 40, &p, &err);
    SL_ASSERT(c);
    while (engine_step(g.e)) {}
    engine_get_stats(g.e, &st);
    CHECK_EQ_INT(st.prefix_hits, 32);
    engine_stream_release(g.e, c);
    sampling_params_free(&p);
    rig_free(&g);
}

static void test_lost_device_kills_the_engine(void) {
    rig_t g;
    rig_init(&g);
    int32_t prompt[12];
    for (int32_t i = 0; i < 12; i++) prompt[i] = 9 + i;
    sampling_params_t p;
    sampling_params_default(&p);
    p.max_tokens = 400;
    p.ignore_eos = true;
    sl_err_t err;
    engine_start(g.e);
    CHECK(engine_is_alive(g.e));
    engine_stream_t *running = engine_submit(g.e, prompt, 12, &p, &err);
    SL_ASSERT(running);
    /* Let it produce a few tokens, then lose the device. */
    engine_output_t *o = engine_stream_next(running);
    SL_ASSERT(o && o->n_new == 1);
    engine_output_free(o);
    fatal = true;
    fail_next = 1;
    drained_t d = drain_blocking(running);
    CHECK(d.last == FINISH_ERROR);
    CHECK(d.n_tokens < 399);
    CHECK(!engine_is_alive(g.e));
    int queries = n_queries;

    /* A new request fails at once, with no forward (no last_error query). */
    engine_stream_t *late = engine_submit(g.e, prompt, 12, &p, &err);
    SL_ASSERT(late);
    drained_t dl = drain_blocking(late);
    CHECK_EQ_INT(dl.n_tokens, 0);
    CHECK(dl.last == FINISH_ERROR);
    CHECK_EQ_INT(n_queries, queries);
    engine_stats_t st;
    engine_get_stats(g.e, &st);
    CHECK_EQ_INT(st.n_running + st.n_waiting, 0);
    engine_stream_release(g.e, running);
    engine_stream_release(g.e, late);
    engine_stop(g.e);
    fatal = false;
    fail_next = 0;
    sampling_params_free(&p);
    rig_free(&g);
}

int main(void) {
    test_seed();
    RUN(test_failed_forward_finishes_the_steps_requests_with_error);
    RUN(test_failed_step_leaves_nothing_in_the_prefix_cache);
    RUN(test_lost_device_kills_the_engine);
    return test_summary();
}
