/* test_engine.c - continuous batching changes nothing about a request's tokens.
 *
 * Runs the engine synchronously (engine_step) on the committed tiny model.
 * Invariance: a request's tokens, greedy or seeded sampling, are identical
 * alone; among 50 others of mixed lengths; with prefix caching on and off;
 * with token budgets 16, 64 and unlimited; with a KV pool so small that it is
 * preempted several times; with static batching; with n-gram speculative
 * decoding, alone and in each of those conditions. Then one test per named
 * edge case of the engine issue.
 * SERVELAB_TEST_DEVICE=cuda runs it all on the CUDA backend (fp32, CUDA
 * graphs for decode unless SERVELAB_TEST_EAGER=1): tools/gpu-check does, so
 * the invariances are checked on the GPU too. Default: the CPU.
 */
#include <math.h>

#include "servelab/engine.h"
#include "test.h"

/* SERVELAB_TEST_MODEL names another checkpoint of tiny's tokenizer (the AWQ copy). */
#define MODEL_DIR (getenv("SERVELAB_TEST_MODEL") ? getenv("SERVELAB_TEST_MODEL") : "models/tiny")
#define MAX_REQS 64

static tokenizer_t *tok;

typedef struct {
    int32_t prompt[640];
    int32_t n_prompt;
    sampling_params_t params;
} req_spec_t;

typedef struct {
    int32_t tokens[8][256];
    int32_t n[8];
    finish_reason_t finish[8];
    int32_t stop_index[8];
    char text[8][2048];
    int32_t cached;
} result_t;

typedef struct {
    int32_t budget, num_blocks, max_seqs;
    bool no_prefix, no_chunked, static_batching;
    int32_t spec_k; /* n-gram speculative decoding with K drafts (prompt lookup 1..3); 0: off */
} run_cfg_t;

typedef struct {
    engine_t *e;
} rig_t;

static bool on_cuda;

/* SERVELAB_TEST_DEVICE=cuda runs every test on the CUDA backend in float32,
 * with CUDA graphs unless SERVELAB_TEST_EAGER=1: the same engine_create as
 * `servelab serve --device cuda --dtype float32`. SERVELAB_TEST_TP=N splits
 * the model over N tensor-parallel ranks (`-tp N`). */
static void rig_init(rig_t *g, const run_cfg_t *rc) {
    const char *dev = getenv("SERVELAB_TEST_DEVICE"), *eager = getenv("SERVELAB_TEST_EAGER");
    on_cuda = dev && !strcmp(dev, "cuda");
    engine_config_t c;
    engine_config_default(&c);
    c.model_dir = MODEL_DIR;
    c.load.progress = false;
    c.device = on_cuda ? ENGINE_DEVICE_CUDA : ENGINE_DEVICE_CPU;
    c.threads = 0;
    const char *tp = getenv("SERVELAB_TEST_TP");
    c.load.tensor_parallel_size = tp ? atoi(tp) : 1;
    c.max_model_len = 512;
    c.kv_cache_memory_bytes = 64 << 20;
    c.enable_prefix_caching = !rc->no_prefix;
    c.num_gpu_blocks_override = rc->num_blocks;
    int32_t budget = rc->budget ? rc->budget : 2048;
    c.sched = (sched_config_t){.max_num_batched_tokens = budget,
                               .max_num_seqs = rc->max_seqs ? rc->max_seqs : (budget < 256 ? budget : 256),
                               .enable_chunked_prefill = !rc->no_chunked, .static_batching = rc->static_batching};
    c.max_num_batched_tokens_set = true;
    if (rc->spec_k)
        c.spec = (spec_config_t){.on = true, .num_speculative_tokens = rc->spec_k, .prompt_lookup_min = 1,
                                 .prompt_lookup_max = 3};
    if (on_cuda) {
        c.load.dtype_auto = false;
        c.load.dtype = DTYPE_F32;
        c.enforce_eager = eager && !strcmp(eager, "1");
        c.max_seq_len_to_capture = 512;
    }
    sl_err_t err;
    g->e = engine_create(&c, &err);
    if (!g->e) fprintf(stderr, "engine_create: %s\n", err.msg);
    SL_ASSERT(g->e);
}

static void rig_free(rig_t *g) { engine_free(g->e); }

static void drain(engine_stream_t *st, result_t *r) {
    for (engine_output_t *o; (o = engine_stream_next(st)); engine_output_free(o)) {
        int32_t i = o->index;
        if (o->n_new) r->tokens[i][r->n[i]++] = o->token;
        size_t len = strlen(r->text[i]);
        if (len + o->text_len < sizeof r->text[i]) memcpy(r->text[i] + len, o->text, o->text_len + 1);
        if (o->finish != FINISH_NONE) {
            r->finish[i] = o->finish;
            r->stop_index[i] = o->stop_index;
        }
        r->cached = o->cached_tokens;
    }
}

/* Runs all specs through one engine (all submitted before the first step). */
static void run(const run_cfg_t *rc, req_spec_t *specs, int n, result_t *res, engine_stats_t *stats) {
    rig_t g;
    rig_init(&g, rc);
    engine_stream_t *st[MAX_REQS];
    sl_err_t err;
    for (int i = 0; i < n; i++) {
        st[i] = engine_submit(g.e, specs[i].prompt, specs[i].n_prompt, &specs[i].params, &err);
        SL_ASSERT(st[i]);
        memset(&res[i], 0, sizeof res[i]);
    }
    while (engine_step(g.e)) {}
    for (int i = 0; i < n; i++) {
        drain(st[i], &res[i]);
        engine_stream_release(g.e, st[i]);
    }
    engine_stats_t st_end;
    engine_get_stats(g.e, &st_end);
    CHECK(st_end.kv_usage == 0.0); /* every block returned */
    CHECK_EQ_INT(st_end.n_running + st_end.n_waiting, 0);
    if (stats) *stats = st_end;
    rig_free(&g);
}

static void make_prompt(req_spec_t *r, int32_t n) {
    r->n_prompt = n;
    r->prompt[0] = 1; /* BOS */
    for (int32_t i = 1; i < n; i++) r->prompt[i] = 3 + (int32_t)(test_rng() % 1000);
}

static req_spec_t specs[MAX_REQS];
static result_t alone_res, res[MAX_REQS];

/* specs[0] is the target; specs[1..50] the crowd. */
static void make_workload(bool sampled) {
    for (int i = 0; i < 51; i++) {
        sampling_params_free(&specs[i].params);
        sampling_params_default(&specs[i].params);
        make_prompt(&specs[i], i == 0 ? 37 : 2 + (int32_t)(test_rng() % 120));
        specs[i].params.max_tokens = i == 0 ? 24 : 1 + (int32_t)(test_rng() % 40);
        specs[i].params.ignore_eos = true;
        specs[i].params.temperature = sampled ? 0.8f : 0.0f;
        specs[i].params.has_seed = sampled;
        specs[i].params.seed = 1000 + (uint64_t)i;
    }
    /* A few of the crowd share the target's first 32 tokens (prefix hits). */
    for (int i = 1; i <= 5; i++) memcpy(specs[i].prompt, specs[0].prompt, 32 * sizeof(int32_t)), specs[i].n_prompt = specs[i].n_prompt < 33 ? 33 : specs[i].n_prompt;
}

static bool same_tokens(const result_t *a, const result_t *b) {
    return a->n[0] == b->n[0] && !memcmp(a->tokens[0], b->tokens[0], (size_t)a->n[0] * sizeof(int32_t));
}

static void check_invariance(bool sampled) {
    make_workload(sampled);
    run(&(run_cfg_t){0}, specs, 1, &alone_res, NULL);
    CHECK_EQ_INT(alone_res.n[0], 24);
    struct { const char *name; run_cfg_t cfg; int n; } cases[] = {
        {"with 50 others", {0}, 51},
        {"prefix caching off", {.no_prefix = true}, 51},
        {"budget 16", {.budget = 16}, 51},
        {"budget 64", {.budget = 64}, 51},
        {"budget unlimited", {.budget = 8192, .no_chunked = true}, 51},
        {"tiny KV pool", {.num_blocks = 12}, 51},
        {"static batching", {.static_batching = true, .max_seqs = 8}, 51},
        {"ngram K=4 alone", {.spec_k = 4}, 1},
        {"ngram K=4 batched", {.spec_k = 4}, 51},
        {"ngram K=2 budget 16", {.spec_k = 2, .budget = 16}, 51},
        {"ngram K=4 no prefix", {.spec_k = 4, .no_prefix = true}, 51},
        {"ngram K=4 tiny pool", {.spec_k = 4, .num_blocks = 12}, 51},
    };
    spec_stats_t spec_all = {0};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        engine_stats_t st;
        run(&cases[c].cfg, specs, cases[c].n, res, &st);
        bool ok = same_tokens(&alone_res, &res[0]);
        printf("  %-20s tokens %s (%lld steps, %lld preemptions, prefix hits %lld/%lld tokens",
               cases[c].name, ok ? "identical" : "DIFFER", (long long)st.n_steps,
               (long long)st.n_preemptions, (long long)st.prefix_hits, (long long)st.prefix_queries);
        if (cases[c].cfg.spec_k)
            printf(", %lld drafts, %lld/%lld draft tokens accepted", (long long)st.spec.n_drafts,
                   (long long)st.spec.n_accepted, (long long)st.spec.n_draft_tokens);
        printf(")\n");
        CHECK(ok);
        if (cases[c].cfg.spec_k) {
            CHECK(st.spec.n_drafts > 0);
            spec_all.n_accepted += st.spec.n_accepted;
            spec_all.n_draft_tokens += st.spec.n_draft_tokens;
        } else {
            CHECK_EQ_INT(st.spec.n_drafts, 0);
        }
        if (cases[c].cfg.num_blocks) CHECK(st.n_preemptions >= 3);
        if (cases[c].cfg.no_prefix) CHECK_EQ_INT(st.prefix_hits, 0);
        else if (!cases[c].cfg.num_blocks && cases[c].n > 1) CHECK(st.prefix_hits > 0);
    }
    /* Both outcomes of verification happened: drafts kept and drafts dropped. */
    CHECK(spec_all.n_accepted > 0 && spec_all.n_accepted < spec_all.n_draft_tokens);
}

static void test_greedy_tokens_do_not_depend_on_the_batch(void) { check_invariance(false); }
static void test_seeded_sampling_does_not_depend_on_the_batch(void) { check_invariance(true); }

/* One request at a time through a fresh engine; returns its result. */
static void run_one(const run_cfg_t *rc, req_spec_t *spec, result_t *out) { run(rc, spec, 1, out, NULL); }

static void greedy(req_spec_t *r, int32_t n_prompt, int32_t max_tokens) {
    sampling_params_free(&r->params);
    sampling_params_default(&r->params);
    make_prompt(r, n_prompt);
    r->params.temperature = 0.0f;
    r->params.max_tokens = max_tokens;
    r->params.ignore_eos = true;
}

static void test_fully_cached_prompt_recomputes_last_block(void) {
    req_spec_t r = {0};
    greedy(&r, 48, 8); /* exactly three blocks */
    rig_t g;
    rig_init(&g, &(run_cfg_t){0});
    result_t a = {0}, b = {0};
    sl_err_t err;
    engine_stream_t *s1 = engine_submit(g.e, r.prompt, r.n_prompt, &r.params, &err);
    while (engine_step(g.e)) {}
    drain(s1, &a);
    engine_stream_t *s2 = engine_submit(g.e, r.prompt, r.n_prompt, &r.params, &err);
    while (engine_step(g.e)) {}
    drain(s2, &b);
    CHECK_EQ_INT(a.cached, 0);
    CHECK_EQ_INT(b.cached, 32); /* at most n - 1 tokens: the last block is computed again */
    CHECK(same_tokens(&a, &b));
    engine_stream_release(g.e, s1);
    engine_stream_release(g.e, s2);
    rig_free(&g);
    sampling_params_free(&r.params);
}

static void test_prompt_shapes_around_blocks_and_budget_give_same_tokens(void) {
    int32_t lens[] = {16, 17, 15, 48, 100};      /* one block; block +/- 1; chunk = block boundary; > budget */
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        req_spec_t r = {0};
        greedy(&r, lens[i], 6);
        result_t whole, chunked;
        run_one(&(run_cfg_t){0}, &r, &whole);
        run_one(&(run_cfg_t){.budget = 16}, &r, &chunked);
        CHECK(same_tokens(&whole, &chunked));
        CHECK_EQ_INT(chunked.n[0], 6);
        sampling_params_free(&r.params);
    }
}

static void test_abort_while_waiting_mid_prefill_and_mid_decode_frees_blocks(void) {
    rig_t g;
    rig_init(&g, &(run_cfg_t){.budget = 16, .max_seqs = 1});
    req_spec_t r[3] = {0};
    greedy(&r[0], 40, 50); /* will be decoding */
    greedy(&r[1], 60, 5);  /* will be mid-prefill */
    greedy(&r[2], 10, 5);  /* will be waiting */
    sl_err_t err;
    engine_stream_t *st[3];
    for (int i = 0; i < 3; i++) st[i] = engine_submit(g.e, r[i].prompt, r[i].n_prompt, &r[i].params, &err);
    for (int k = 0; k < 5; k++) engine_step(g.e); /* r0 prefilled (3 steps) and decoding */
    engine_abort(g.e, st[0]);
    engine_step(g.e); /* r0 freed; r1 admitted: first 16-token chunk */
    engine_step(g.e);
    engine_abort(g.e, st[1]); /* mid-prefill */
    engine_abort(g.e, st[2]); /* still waiting (max_num_seqs 1) */
    engine_step(g.e);
    engine_stats_t s;
    engine_get_stats(g.e, &s);
    result_t res3[3] = {0};
    for (int i = 0; i < 3; i++) {
        drain(st[i], &res3[i]);
        CHECK(res3[i].finish[0] == FINISH_ABORT);
        engine_stream_release(g.e, st[i]);
        sampling_params_free(&r[i].params);
    }
    CHECK(res3[0].n[0] >= 1 && res3[0].n[0] < 50);
    CHECK_EQ_INT(res3[1].n[0], 0);
    CHECK_EQ_INT(res3[2].n[0], 0);
    CHECK(!engine_step(g.e));
    engine_get_stats(g.e, &s);
    CHECK(s.kv_usage == 0.0);
    rig_free(&g);
}

/* The server's path for a client that hangs up: it releases a stream that is
 * still running, and the engine must abort it and free its blocks. */
static void test_releasing_a_live_stream_aborts_it_and_frees_blocks(void) {
    rig_t g;
    rig_init(&g, &(run_cfg_t){0});
    req_spec_t r = {0};
    greedy(&r, 40, 100);
    r.params.n = 2;
    sl_err_t err;
    engine_stream_t *st = engine_submit(g.e, r.prompt, r.n_prompt, &r.params, &err);
    for (int k = 0; k < 5; k++) engine_step(g.e);
    engine_stats_t s;
    engine_get_stats(g.e, &s);
    CHECK(s.kv_usage > 0.0 && s.n_running == 2);
    engine_stream_release(g.e, st); /* no drain: the client is gone */
    engine_step(g.e);
    engine_get_stats(g.e, &s);
    CHECK(s.kv_usage == 0.0);
    CHECK_EQ_INT(s.n_running + s.n_waiting, 0);
    CHECK(!engine_step(g.e));
    rig_free(&g);
    sampling_params_free(&r.params);
}

static void test_preempted_request_with_n_siblings_keeps_its_tokens(void) {
    req_spec_t r = {0};
    greedy(&r, 30, 40);
    r.params.n = 3;
    r.params.temperature = 1.0f;
    r.params.has_seed = true;
    r.params.seed = 7;
    result_t roomy, tight;
    engine_stats_t st;
    run(&(run_cfg_t){0}, &r, 1, &roomy, NULL);
    run(&(run_cfg_t){.num_blocks = 8}, &r, 1, &tight, &st); /* 7 blocks for 3 x 70 tokens */
    printf("  %lld preemptions\n", (long long)st.n_preemptions);
    CHECK(st.n_preemptions >= 1);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(tight.n[i], 40);
        CHECK(!memcmp(roomy.tokens[i], tight.tokens[i], sizeof roomy.tokens[i]));
    }
    CHECK(memcmp(roomy.tokens[0], roomy.tokens[1], 40 * sizeof(int32_t)) != 0); /* seeds differ */
    sampling_params_free(&r.params);
}

/* The greedy continuation's text, used to pick stop strings that really occur. */
static void reference_text(req_spec_t *r, result_t *out) { run_one(&(run_cfg_t){0}, r, out); }

static void test_stop_string_split_across_tokens_and_on_the_last_token(void) {
    req_spec_t r = {0};
    greedy(&r, 20, 12);
    result_t ref;
    reference_text(&r, &ref);
    const char *t = ref.text[0];
    size_t len = strlen(t);
    CHECK(len >= 8);
    /* Find a token boundary k (in bytes) inside the text to split a stop string across. */
    char prefix[2048] = "";
    size_t cut = 0;
    for (int32_t i = 0; i < ref.n[0] && cut < 3; i++) {
        char piece[256];
        int n = tok_piece_bytes(tok, ref.tokens[0][i], piece, sizeof piece);
        cut += (size_t)(n > 0 ? n : 0);
    }
    memcpy(prefix, t, cut);
    /* A stop string of the 2 bytes before and 2 bytes after the boundary. */
    char stop[24] = {0};
    SL_ASSERT(cut >= 2 && cut + 2 <= len);
    /* Widen to whole UTF-8 characters: a stop string must be valid UTF-8. */
    size_t from = cut - 2, to = cut + 2;
    while (from > 0 && ((unsigned char)t[from] & 0xC0) == 0x80) from--;
    while (to < len && ((unsigned char)t[to] & 0xC0) == 0x80) to++;
    memcpy(stop, t + from, to - from);
    r.params.n_stop = 1;
    r.params.stop = sl_malloc(sizeof(char *));
    r.params.stop[0] = sl_strdup(stop);
    result_t got;
    run_one(&(run_cfg_t){0}, &r, &got);
    CHECK(got.finish[0] == FINISH_STOP);
    CHECK_EQ_INT(got.stop_index[0], 0);
    const char *hit = strstr(t, stop);
    CHECK(hit && strlen(got.text[0]) == (size_t)(hit - t)); /* cut before the stop string */
    CHECK(!strncmp(got.text[0], t, (size_t)(hit - t)));
    /* Stop string completed by the max_tokens-th token: stop wins over length. */
    int32_t n_needed = got.n[0];
    r.params.max_tokens = n_needed;
    run_one(&(run_cfg_t){0}, &r, &got);
    CHECK(got.finish[0] == FINISH_STOP);
    CHECK_EQ_INT(got.n[0], n_needed);
    r.params.max_tokens = n_needed - 1;
    run_one(&(run_cfg_t){0}, &r, &got);
    CHECK(got.finish[0] == FINISH_LENGTH);
    /* include_stop_str_in_output keeps it. */
    r.params.max_tokens = 12;
    r.params.include_stop_str_in_output = true;
    run_one(&(run_cfg_t){0}, &r, &got);
    CHECK(strlen(got.text[0]) == (size_t)(hit - t) + strlen(stop));
    sampling_params_free(&r.params);
}

static void test_eos_at_the_first_token_finishes_with_stop(void) {
    req_spec_t r = {0};
    greedy(&r, 10, 10);
    r.params.ignore_eos = false;
    r.params.n_logit_bias = 1;
    r.params.logit_bias_ids = sl_malloc(sizeof(int32_t));
    r.params.logit_bias_values = sl_malloc(sizeof(float));
    r.params.logit_bias_ids[0] = 2; /* </s> */
    r.params.logit_bias_values[0] = 100.0f;
    result_t got;
    run_one(&(run_cfg_t){0}, &r, &got);
    CHECK(got.finish[0] == FINISH_STOP);
    CHECK_EQ_INT(got.n[0], 1);
    CHECK_EQ_INT(got.tokens[0][0], 2);
    CHECK_EQ_INT((int)strlen(got.text[0]), 0);
    r.params.min_tokens = 3; /* EOS is masked until 3 tokens exist */
    run_one(&(run_cfg_t){0}, &r, &got);
    CHECK_EQ_INT(got.n[0], 4);
    CHECK_EQ_INT(got.tokens[0][3], 2);
    sampling_params_free(&r.params);
}

static void test_request_that_can_never_fit_is_refused_not_hung(void) {
    rig_t g;
    rig_init(&g, &(run_cfg_t){.num_blocks = 5}); /* 64 tokens of KV */
    req_spec_t r = {0};
    greedy(&r, 60, 10);
    sl_err_t err;
    CHECK(engine_submit(g.e, r.prompt, r.n_prompt, &r.params, &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "KV cache holds only 64 tokens");
    greedy(&r, 600, 10);
    CHECK(engine_submit(g.e, r.prompt, r.n_prompt, &r.params, &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "maximum context length is 512 tokens");
    r.params.temperature = -1.0f;
    r.n_prompt = 5;
    CHECK(engine_submit(g.e, r.prompt, r.n_prompt, &r.params, &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "temperature");
    CHECK(!engine_step(g.e));
    rig_free(&g);
    sampling_params_free(&r.params);
}

static void test_engine_thread_serves_concurrent_streams(void) {
    rig_t g;
    rig_init(&g, &(run_cfg_t){0});
    engine_start(g.e);
    req_spec_t r[8] = {0};
    engine_stream_t *st[8];
    sl_err_t err;
    for (int i = 0; i < 8; i++) {
        greedy(&r[i], 5 + 7 * i, 10 + i);
        st[i] = engine_submit(g.e, r[i].prompt, r[i].n_prompt, &r[i].params, &err);
    }
    for (int i = 7; i >= 0; i--) { /* drain in reverse order: events queue per stream */
        result_t out = {0};
        drain(st[i], &out);
        CHECK_EQ_INT(out.n[0], 10 + i);
        CHECK(out.finish[0] == FINISH_LENGTH);
        engine_stream_release(g.e, st[i]);
        sampling_params_free(&r[i].params);
    }
    engine_stop(g.e);
    rig_free(&g);
}

int main(void) {
    test_seed();
    sl_err_t err;
    if (!(tok = tok_load(MODEL_DIR, &err))) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(test_greedy_tokens_do_not_depend_on_the_batch);
    RUN(test_seeded_sampling_does_not_depend_on_the_batch);
    RUN(test_fully_cached_prompt_recomputes_last_block);
    RUN(test_prompt_shapes_around_blocks_and_budget_give_same_tokens);
    RUN(test_abort_while_waiting_mid_prefill_and_mid_decode_frees_blocks);
    RUN(test_releasing_a_live_stream_aborts_it_and_frees_blocks);
    RUN(test_preempted_request_with_n_siblings_keeps_its_tokens);
    RUN(test_stop_string_split_across_tokens_and_on_the_last_token);
    RUN(test_eos_at_the_first_token_finishes_with_stop);
    RUN(test_request_that_can_never_fit_is_refused_not_hung);
    RUN(test_engine_thread_serves_concurrent_streams);
    for (int i = 0; i < MAX_REQS; i++) sampling_params_free(&specs[i].params);
    tok_free(tok);
    return test_summary();
}
