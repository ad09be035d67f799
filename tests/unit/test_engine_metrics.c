/* test_engine_metrics.c - vLLM's engine metrics count exactly what the engine did.
 *
 * Drives the engine synchronously (engine_step) on the committed tiny model
 * with metrics on, then reads the series back from the exposition text (so
 * names and labels are checked too). Token counters must equal the exact
 * token counts of the requests; the preemption, abort and prefix-cache
 * counters must move exactly when a scenario forces those events (the
 * number of each is derived below from the pool size, not observed); the
 * latency histograms must be consistent with one another and start at the
 * arrival time the client gave.
 */
#include <math.h>

#include "servelab/engine.h"
#include "servelab/metrics.h"
#include "test.h"

#define MODEL_DIR "models/tiny"
#define LABELS "{engine=\"0\",model_name=\"tiny\"}"

static tokenizer_t *tok;

typedef struct {
    engine_t *e;
    metrics_t *m;
} rig_t;

static void rig_init(rig_t *g, int32_t num_blocks, int32_t max_seqs, bool prefix_caching) {
    engine_config_t c = {.block_size = 16, .kv_cache_memory_bytes = 64 << 20,
                         .enable_prefix_caching = prefix_caching, .num_gpu_blocks_override = num_blocks};
    c.sched = (sched_config_t){.max_num_batched_tokens = 2048, .max_num_seqs = max_seqs, .max_model_len = 512,
                               .enable_chunked_prefill = true};
    c.model_dir = MODEL_DIR;
    c.load = (model_load_opts_t){.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true};
    c.device = ENGINE_DEVICE_CPU;
    c.max_model_len = 512;
    c.max_num_batched_tokens_set = true;
    sl_err_t err;
    g->e = engine_create(&c, &err);
    SL_ASSERT(g->e);
    g->m = metrics_new();
    engine_enable_metrics(g->e, g->m, "tiny");
}

static void rig_free(rig_t *g) {
    engine_free(g->e);
    metrics_free(g->m);
}

/* The value on the exposition line that starts with `series` followed by a
 * space; NAN when there is none. */
static double scrape(rig_t *g, const char *series) {
    size_t len;
    char *text = metrics_render(g->m, false, &len);
    double v = NAN;
    size_t n = strlen(series);
    for (char *line = text; line && *line;) {
        char *eol = strchr(line, '\n');
        if (!strncmp(line, series, n) && line[n] == ' ') {
            v = strtod(line + n + 1, NULL);
            break;
        }
        line = eol ? eol + 1 : NULL;
    }
    free(text);
    return v;
}

static sampling_params_t exact(int32_t max_tokens) {
    sampling_params_t p;
    sampling_params_default(&p);
    p.max_tokens = max_tokens;
    p.ignore_eos = true; /* exactly max_tokens tokens */
    p.temperature = 0.0f;
    return p;
}

static void prompt_of(int32_t *ids, int32_t n, int32_t salt) {
    ids[0] = 1;
    for (int32_t i = 1; i < n; i++) ids[i] = 3 + (salt * 131 + i * 17) % 900;
}

static void finish_all(rig_t *g, engine_stream_t **st, int n) {
    while (engine_step(g->e)) {}
    for (int i = 0; i < n; i++) {
        for (engine_output_t *o; (o = engine_stream_next(st[i])); engine_output_free(o)) {}
        engine_stream_release(g->e, st[i]);
    }
}

static void test_token_counters_equal_the_exact_token_counts(void) {
    rig_t g;
    rig_init(&g, 0, 256, false);
    const int32_t lens[] = {5, 16, 17, 100, 33}, outs[] = {1, 8, 20, 3, 12};
    int32_t sum_in = 0, sum_out = 0, sum_itl = 0;
    engine_stream_t *st[5];
    for (int i = 0; i < 5; i++) {
        int32_t ids[128];
        prompt_of(ids, lens[i], i);
        sampling_params_t p = exact(outs[i]);
        sl_err_t err;
        st[i] = engine_submit(g.e, ids, lens[i], &p, &err);
        SL_ASSERT(st[i]);
        sampling_params_free(&p);
        sum_in += lens[i], sum_out += outs[i], sum_itl += outs[i] - 1;
    }
    finish_all(&g, st, 5);
    CHECK(scrape(&g, "vllm:prompt_tokens_total" LABELS) == sum_in);
    CHECK(scrape(&g, "vllm:generation_tokens_total" LABELS) == sum_out);
    CHECK(scrape(&g, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"}") == 5);
    CHECK(scrape(&g, "vllm:request_success_total{engine=\"0\",finished_reason=\"stop\",model_name=\"tiny\"}") == 0);
    CHECK(scrape(&g, "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"tiny\"}") == 0);
    CHECK(scrape(&g, "vllm:request_prompt_tokens_count" LABELS) == 5);
    CHECK(scrape(&g, "vllm:request_prompt_tokens_sum" LABELS) == sum_in);
    CHECK(scrape(&g, "vllm:request_generation_tokens_sum" LABELS) == sum_out);
    CHECK(scrape(&g, "vllm:request_params_max_tokens_sum" LABELS) == sum_out);
    CHECK(scrape(&g, "vllm:request_params_n_sum" LABELS) == 5);
    CHECK(scrape(&g, "vllm:request_max_num_generation_tokens_sum" LABELS) == sum_out);
    /* One TTFT per request, one ITL (and the deprecated TPOT) per later token. */
    CHECK(scrape(&g, "vllm:time_to_first_token_seconds_count" LABELS) == 5);
    CHECK(scrape(&g, "vllm:inter_token_latency_seconds_count" LABELS) == sum_itl);
    CHECK(scrape(&g, "vllm:time_per_output_token_seconds_count" LABELS) == sum_itl);
    /* Every step's tokens: all prompts (counted once, in full) and outputs. */
    CHECK(scrape(&g, "vllm:iteration_tokens_total_sum" LABELS) == sum_in + sum_out);
    CHECK(scrape(&g, "vllm:e2e_request_latency_seconds_count" LABELS) == 5);
    CHECK(scrape(&g, "vllm:num_requests_running" LABELS) == 0);
    CHECK(scrape(&g, "vllm:num_requests_waiting" LABELS) == 0);
    CHECK(scrape(&g, "vllm:kv_cache_usage_perc" LABELS) == 0);
    CHECK(scrape(&g, "vllm:num_preemptions_total" LABELS) == 0);
    /* Prefix caching is off: no lookups are counted (as vLLM). */
    CHECK(scrape(&g, "vllm:prefix_cache_queries_total" LABELS) == 0);
    rig_free(&g);
}

static void test_gauges_follow_the_running_and_waiting_requests(void) {
    rig_t g;
    rig_init(&g, 0, 2, false); /* two run, the third waits */
    engine_stream_t *st[3];
    for (int i = 0; i < 3; i++) {
        int32_t ids[20];
        prompt_of(ids, 20, i);
        sampling_params_t p = exact(10);
        sl_err_t err;
        st[i] = engine_submit(g.e, ids, 20, &p, &err);
        sampling_params_free(&p);
    }
    engine_step(g.e);
    CHECK(scrape(&g, "vllm:num_requests_running" LABELS) == 2);
    CHECK(scrape(&g, "vllm:num_requests_waiting" LABELS) == 1);
    double usage = scrape(&g, "vllm:kv_cache_usage_perc" LABELS);
    engine_stats_t s;
    engine_get_stats(g.e, &s);
    CHECK(usage > 0 && usage == s.kv_usage);
    CHECK(scrape(&g, "vllm:gpu_cache_usage_perc" LABELS) == usage);
    finish_all(&g, st, 3);
    CHECK(scrape(&g, "vllm:num_requests_running" LABELS) == 0);
    CHECK(scrape(&g, "vllm:kv_cache_usage_perc" LABELS) == 0);
    rig_free(&g);
}

/* 4 usable blocks (64 tokens) and two requests of 16 + 40 tokens: both grow
 * to 2 blocks; at token 33 the first needs a third block, none is free, and
 * the most recently admitted is preempted. The first then fits alone (56
 * tokens, 4 blocks), and the second, readmitted when it finishes, too: one
 * preemption, exactly. */
static void test_preemption_counter_moves_exactly_once(void) {
    rig_t g;
    rig_init(&g, 5, 256, true);
    engine_stream_t *st[2];
    for (int i = 0; i < 2; i++) {
        int32_t ids[16];
        prompt_of(ids, 16, 10 + i);
        sampling_params_t p = exact(40);
        sl_err_t err;
        st[i] = engine_submit(g.e, ids, 16, &p, &err);
        SL_ASSERT(st[i]);
        sampling_params_free(&p);
    }
    finish_all(&g, st, 2);
    engine_stats_t s;
    engine_get_stats(g.e, &s);
    CHECK_EQ_INT(s.n_preemptions, 1);
    CHECK(scrape(&g, "vllm:num_preemptions_total" LABELS) == 1);
    CHECK(scrape(&g, "vllm:preemption_count_total" LABELS) == 1);
    CHECK(scrape(&g, "vllm:generation_tokens_total" LABELS) == 80);
    CHECK(scrape(&g, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"}") == 2);
    rig_free(&g);
}

static void test_abort_counter_counts_each_aborted_request(void) {
    rig_t g;
    rig_init(&g, 0, 1, false);
    engine_stream_t *st[3];
    for (int i = 0; i < 3; i++) {
        int32_t ids[30];
        prompt_of(ids, 30, 20 + i);
        sampling_params_t p = exact(i == 0 ? 5 : 50);
        sl_err_t err;
        st[i] = engine_submit(g.e, ids, 30, &p, &err);
        sampling_params_free(&p);
    }
    for (int k = 0; k < 8; k++) engine_step(g.e); /* the first finished, the second decoding */
    engine_abort(g.e, st[1]);                     /* running */
    engine_abort(g.e, st[2]);                     /* waiting, never scheduled */
    finish_all(&g, st, 3);
    const char *abort_series = "vllm:request_success_total{engine=\"0\",finished_reason=\"abort\",model_name=\"tiny\"}";
    CHECK(scrape(&g, abort_series) == 2);
    CHECK(scrape(&g, "vllm:request_success_total{engine=\"0\",finished_reason=\"length\",model_name=\"tiny\"}") == 1);
    CHECK(scrape(&g, "vllm:e2e_request_latency_seconds_count" LABELS) == 3);
    /* The one never scheduled has a queue time and nothing else. */
    CHECK(scrape(&g, "vllm:request_queue_time_seconds_count" LABELS) == 3);
    CHECK(scrape(&g, "vllm:time_to_first_token_seconds_count" LABELS) == 2);
    CHECK(scrape(&g, "vllm:kv_cache_usage_perc" LABELS) == 0);
    rig_free(&g);
}

/* Two requests with the same 48-token prompt, one after the other: vLLM
 * counts every admitted lookup's prompt tokens as queries and whole cached
 * blocks, at most (48 - 1) / 16 = 2 of them, as hits. */
static void test_prefix_cache_counters_count_tokens_of_each_lookup(void) {
    rig_t g;
    rig_init(&g, 0, 256, true);
    int32_t ids[48];
    prompt_of(ids, 48, 30);
    for (int i = 0; i < 2; i++) {
        sampling_params_t p = exact(2);
        sl_err_t err;
        engine_stream_t *st = engine_submit(g.e, ids, 48, &p, &err);
        sampling_params_free(&p);
        finish_all(&g, &st, 1);
    }
    CHECK(scrape(&g, "vllm:prefix_cache_queries_total" LABELS) == 96);
    CHECK(scrape(&g, "vllm:prefix_cache_hits_total" LABELS) == 32);
    CHECK(scrape(&g, "vllm:gpu_prefix_cache_queries_total" LABELS) == 96);
    CHECK(scrape(&g, "vllm:gpu_prefix_cache_hits_total" LABELS) == 32);
    CHECK(fabs(scrape(&g, "vllm:prefix_cache_hit_rate" LABELS) - 32.0 / 96.0) < 1e-12);
    engine_stats_t s;
    engine_get_stats(g.e, &s);
    CHECK(fabs(s.prefix_hit_rate - 32.0 / 96.0) < 1e-12);
    rig_free(&g);
}

/* Phases partition the request's life: inference = prefill + decode, and
 * queue + inference <= e2e; TTFT starts at the arrival the client gave. */
static void test_latencies_start_at_arrival_and_partition_the_request(void) {
    rig_t g;
    rig_init(&g, 0, 256, false);
    int32_t ids[40];
    prompt_of(ids, 40, 40);
    sampling_params_t p = exact(6);
    sl_err_t err;
    engine_request_info_t info = {.request_id = "cmpl-test", .t_arrival = sl_now_s() - 2.0};
    engine_stream_t *st = engine_submit_ex(g.e, ids, 40, &p, &info, &err);
    sampling_params_free(&p);
    finish_all(&g, &st, 1);
    double ttft = scrape(&g, "vllm:time_to_first_token_seconds_sum" LABELS);
    double e2e = scrape(&g, "vllm:e2e_request_latency_seconds_sum" LABELS);
    double queue = scrape(&g, "vllm:request_queue_time_seconds_sum" LABELS);
    double prefill = scrape(&g, "vllm:request_prefill_time_seconds_sum" LABELS);
    double decode = scrape(&g, "vllm:request_decode_time_seconds_sum" LABELS);
    double inference = scrape(&g, "vllm:request_inference_time_seconds_sum" LABELS);
    double itl = scrape(&g, "vllm:inter_token_latency_seconds_sum" LABELS);
    double tpot = scrape(&g, "vllm:request_time_per_output_token_seconds_sum" LABELS);
    CHECK(ttft >= 2.0 && ttft < 30.0);
    CHECK(e2e >= ttft);
    CHECK(fabs(inference - (prefill + decode)) < 1e-9);
    CHECK(queue + inference <= e2e + 1e-9);
    CHECK(queue < 2.0); /* the queue starts when the engine takes it, not at arrival */
    CHECK(fabs(decode - itl) < 1e-9); /* the gaps between tokens add up to the decode time */
    CHECK(fabs(tpot - decode / 5.0) < 1e-9);
    /* The TTFT observation lands in the bucket of its value. */
    CHECK(scrape(&g, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"1.0\",model_name=\"tiny\"}") == 0);
    CHECK(scrape(&g, "vllm:time_to_first_token_seconds_bucket{engine=\"0\",le=\"+Inf\",model_name=\"tiny\"}") == 1);
    rig_free(&g);
}

static void test_every_child_exists_at_zero_before_any_request(void) {
    rig_t g;
    rig_init(&g, 0, 256, true);
    static const char *const reasons[] = {"stop", "length", "abort", "error"};
    for (int i = 0; i < 4; i++) {
        char series[160];
        snprintf(series, sizeof series,
                 "vllm:request_success_total{engine=\"0\",finished_reason=\"%s\",model_name=\"tiny\"}", reasons[i]);
        CHECK(scrape(&g, series) == 0);
    }
    CHECK(scrape(&g, "vllm:e2e_request_latency_seconds_count" LABELS) == 0);
    CHECK(scrape(&g, "vllm:num_requests_swapped" LABELS) == 0);
    /* 1-2-5 token buckets stop at max_model_len (512): ..., 200, 500. */
    CHECK(scrape(&g, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"500.0\",model_name=\"tiny\"}") == 0);
    CHECK(isnan(scrape(&g, "vllm:request_prompt_tokens_bucket{engine=\"0\",le=\"1000.0\",model_name=\"tiny\"}")));
    size_t len;
    char *text = metrics_render(g.m, false, &len);
    CHECK_STR_CONTAINS(text, "vllm:cache_config_info{block_size=\"16\",cache_dtype=\"auto\"");
    CHECK_STR_CONTAINS(text, "enable_prefix_caching=\"True\",engine=\"0\"");
    /* A zeroed config's hash is vLLM's default, sha256. */
    CHECK_STR_CONTAINS(text, "num_gpu_blocks_override=\"None\",prefix_caching_hash_algo=\"sha256\",sliding_window");
    free(text);
    rig_free(&g);
}

int main(void) {
    test_seed();
    sl_err_t err;
    if (!(tok = tok_load(MODEL_DIR, &err))) {
        fprintf(stderr, "%s\n", err.msg);
        return 1;
    }
    RUN(test_token_counters_equal_the_exact_token_counts);
    RUN(test_gauges_follow_the_running_and_waiting_requests);
    RUN(test_preemption_counter_moves_exactly_once);
    RUN(test_abort_counter_counts_each_aborted_request);
    RUN(test_prefix_cache_counters_count_tokens_of_each_lookup);
    RUN(test_latencies_start_at_arrival_and_partition_the_request);
    RUN(test_every_child_exists_at_zero_before_any_request);
    tok_free(tok);
    return test_summary();
}
