/* test_step_error.c - a forward that fails on the device fails its step's requests, not the engine.
 *
 * The CPU ops table plus a last_error that reports a (fake) CUDA fault when
 * told to: the engine must finish every request scheduled in that step with
 * FINISH_ERROR (all n sequences of a request, each with a final event and no
 * token), release their KV blocks, and then serve the next request normally.
 * Runs the committed tiny checkpoint synchronously (engine_step).
 */
#include "servelab/engine.h"
#include "test.h"

#define MODEL_DIR "models/tiny"

static int fail_next, n_queries;

static int fake_last_error(void *ctx, char *msg, size_t cap) {
    (void)ctx;
    n_queries++;
    if (!fail_next) return 0;
    fail_next = 0;
    snprintf(msg, cap, "CUDA error: an illegal memory access was encountered (fake)");
    return 1;
}

typedef struct {
    int32_t n_events, n_errors, n_tokens;
    finish_reason_t last;
} drained_t;

static drained_t drain(engine_stream_t *st) {
    drained_t d = {0};
    for (engine_output_t *o; (o = engine_stream_try_next(st)); engine_output_free(o)) {
        d.n_events++;
        d.n_tokens += o->n_new;
        d.n_errors += o->finish == FINISH_ERROR;
        if (o->finish != FINISH_NONE) d.last = o->finish;
    }
    return d;
}

static void test_failed_forward_finishes_the_steps_requests_with_error(void) {
    sl_ops_t ops = *cpu_backend_init(1);
    ops.last_error = fake_last_error;
    sl_err_t err;
    tokenizer_t *tok = tok_load(MODEL_DIR, &err);
    SL_ASSERT(tok);
    engine_config_t c = {.block_size = 16, .kv_cache_memory_bytes = 64 << 20, .enable_prefix_caching = true};
    c.sched = (sched_config_t){.max_num_batched_tokens = 2048, .max_num_seqs = 8, .max_model_len = 512,
                               .enable_chunked_prefill = true};
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true};
    llama_model_t m;
    SL_ASSERT(llama_init(&m, MODEL_DIR, &lo, &ops, 2048, 8, 512 / 16, &err) == 0);
    engine_t *e = engine_create(&c, &m, tok, 0, &err);
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
    llama_free(&m);
    tok_free(tok);
}

int main(void) {
    test_seed();
    RUN(test_failed_forward_finishes_the_steps_requests_with_error);
    return test_summary();
}
