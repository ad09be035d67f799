/* test_step_device_sampling.c - the model runner's sampling: rows, draws, and logits on either side.
 *
 * The runner resolves each sampled sequence into a sampling_row_t on the
 * host, takes the request's draw from its own generator, and has the
 * backend's `sample` op run the rows where the logits are: in backend
 * memory on a device backend (ops->logits_device), on the host otherwise.
 * Two checks:
 * - The device path gives the plain CPU engine's tokens and logprobs. The
 *   "device" is the CPU ops table with logits_device and a sample op that
 *   checks every row's slices lie inside the flat arrays, so logits of the
 *   wrong row, or a row's history, masks or bias laid out wrong, show as a
 *   difference. Every sampling feature is on in some request; n > 1, a KV
 *   pool small enough to preempt, and chunked prefill mix the rows.
 * - The draws: a seeded random request's rows carry exactly the successive
 *   uniforms of a generator seeded with its seed (one per token, none
 *   skipped or repeated), and a greedy request's rows draw nothing (u = 0).
 * - The lab's logit_noise acts on either path alike: on the device path the
 *   rows go to the host for their noise and back, and every request draws
 *   the tokens the host path draws with the same noise (and others than
 *   without it).
 */
#include "servelab/engine.h"
#include "servelab/lab.h"
#include "servelab/rng.h"
#include "servelab/sampler.h"
#include "test.h"

#define MODEL_DIR "models/tiny"
#define N_REQS 9

static const sl_ops_t *cpu;
static int64_t n_sample_calls, n_rows_sampled;

static void dev_logits(void *ctx, float *out, const void *in, const sl_weight_t *w, int64_t S) {
    cpu->logits(ctx, out, in, w, S); /* "device" memory is host memory here */
}

static void dev_sample(void *ctx, const float *logits, int64_t n, int64_t V, const sampling_row_t *rows,
                       const int32_t *ids, const float *bias, int64_t n_ids, sample_result_t *out) {
    n_sample_calls++;
    n_rows_sampled += n;
    for (int64_t i = 0; i < n; i++) {
        const sampling_row_t *r = &rows[i];
        /* Every row's slices lie inside the flat arrays. */
        SL_ASSERT(r->mask_off + r->n_mask <= n_ids && r->bias_off + r->n_bias <= n_ids &&
                  r->hist_off + r->n_prompt + r->n_output <= n_ids);
    }
    cpu->sample(ctx, logits, n, V, rows, ids, bias, n_ids, out);
}

typedef struct {
    int32_t tokens[4][64];
    float logprobs[4][64];
    int32_t n[4];
    finish_reason_t finish[4];
} result_t;

static void spec(sampling_params_t *p, int i) {
    sampling_params_default(p);
    p->max_tokens = 24 + 3 * i;
    p->ignore_eos = i % 2 == 0;
    p->has_seed = i != 4; /* one unseeded: seeded from --seed in submission order */
    p->seed = 1000 + (uint64_t)i;
    p->logprobs = i % 3 == 0 ? 5 : -1;
    switch (i) {
    case 0: p->temperature = 0.0f; break;
    case 1: p->temperature = 0.8f; p->top_k = 20; break;
    case 2: p->temperature = 1.3f; p->top_p = 0.7f; p->n = 3; break;
    case 3: p->min_p = 0.05f; p->repetition_penalty = 1.3f; break;
    case 4: p->frequency_penalty = 0.7f; p->presence_penalty = -0.4f; p->min_tokens = 10; break;
    case 5:
        p->n_logit_bias = 2;
        p->logit_bias_ids = sl_malloc(2 * sizeof(int32_t));
        p->logit_bias_values = sl_malloc(2 * sizeof(float));
        p->logit_bias_ids[0] = 7, p->logit_bias_values[0] = 5.0f;
        p->logit_bias_ids[1] = 9, p->logit_bias_values[1] = -100.0f;
        break;
    case 6: p->temperature = 0.005f; p->n = 2; break; /* below vLLM's 0.01 clamp, still random */
    case 7:
        p->temperature = 0.0f;
        p->repetition_penalty = 1.5f;
        p->n_stop_token_ids = 1;
        p->stop_token_ids = sl_malloc(sizeof(int32_t));
        p->stop_token_ids[0] = 11;
        p->min_tokens = 5;
        break;
    default: p->top_k = 3; p->top_p = 0.9f; p->min_p = 0.1f; p->frequency_penalty = 1.0f; break;
    }
}

static void run(const sl_ops_t *ops, result_t *res, int64_t *n_preemptions, struct faults *faults) {
    sl_err_t err;
    /* 12 blocks of 16: the requests (up to 77 tokens each, n up to 3) preempt one another. */
    engine_config_t c = {.block_size = 16, .num_gpu_blocks_override = 13, .enable_prefix_caching = true};
    c.sched = (sched_config_t){.max_num_batched_tokens = 48, .max_num_seqs = 8, .max_model_len = 128,
                               .enable_chunked_prefill = true};
    c.model_dir = MODEL_DIR;
    c.load = (model_load_opts_t){.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true};
    c.ops = ops;
    c.max_model_len = 128;
    c.max_num_batched_tokens_set = true;
    c.seed = 42;
    c.faults = faults;
    engine_t *e = engine_create(&c, &err);
    SL_ASSERT(e);
    engine_stream_t *st[N_REQS];
    for (int i = 0; i < N_REQS; i++) {
        int32_t prompt[40];
        int32_t n_prompt = 5 + 4 * i;
        for (int32_t t = 0; t < n_prompt; t++) prompt[t] = 3 + (int32_t)((t * 37 + i * 11) % 200);
        sampling_params_t p;
        spec(&p, i);
        st[i] = engine_submit(e, prompt, n_prompt, &p, &err);
        SL_ASSERT(st[i]);
        sampling_params_free(&p);
    }
    while (engine_step(e)) {}
    for (int i = 0; i < N_REQS; i++) {
        memset(&res[i], 0, sizeof res[i]);
        for (engine_output_t *o; (o = engine_stream_try_next(st[i])); engine_output_free(o)) {
            int32_t k = o->index;
            if (o->n_new) {
                res[i].logprobs[k][res[i].n[k]] = o->logprobs.logprob;
                res[i].tokens[k][res[i].n[k]++] = o->token;
            }
            if (o->finish != FINISH_NONE) res[i].finish[k] = o->finish;
        }
        engine_stream_release(e, st[i]);
    }
    engine_stats_t s;
    engine_get_stats(e, &s);
    *n_preemptions = s.n_preemptions;
    engine_free(e);
}

static void test_device_sampling_path_draws_what_the_host_path_draws(void) {
    sl_ops_t dev = *cpu;
    dev.name = "fake-device";
    dev.logits_device = dev_logits;
    dev.sample = dev_sample;
    static result_t host[N_REQS], device[N_REQS];
    int64_t pre_host = 0, pre_dev = 0;
    run(cpu, host, &pre_host, NULL);
    run(&dev, device, &pre_dev, NULL);
    CHECK(n_sample_calls > 0 && n_rows_sampled > n_sample_calls); /* the device path ran, rows batched */
    CHECK(pre_host > 0);                                          /* preemption was exercised */
    CHECK_EQ_INT(pre_dev, pre_host);
    int32_t n_tokens = 0;
    for (int i = 0; i < N_REQS; i++) {
        for (int k = 0; k < 4; k++) {
            CHECK_EQ_INT(device[i].n[k], host[i].n[k]);
            CHECK(device[i].finish[k] == host[i].finish[k]);
            CHECK(memcmp(device[i].tokens[k], host[i].tokens[k], sizeof host[i].tokens[k]) == 0);
            CHECK(memcmp(device[i].logprobs[k], host[i].logprobs[k], sizeof host[i].logprobs[k]) == 0);
            n_tokens += host[i].n[k];
        }
    }
    CHECK(n_tokens > 200);
}

static void test_logit_noise_acts_alike_on_either_path(void) {
    sl_ops_t dev = *cpu;
    dev.name = "fake-device";
    dev.logits_device = dev_logits;
    dev.sample = dev_sample;
    faults_t *f = faults_new(1);
    fault_spec_t spec_;
    char err[256];
    SL_ASSERT(fault_parse_spec("logit_noise:scale=3", &spec_, err, sizeof err) == 0);
    faults_set(f, &spec_);
    static result_t clean[N_REQS], host[N_REQS], device[N_REQS];
    int64_t pre = 0;
    run(cpu, clean, &pre, NULL);
    run(cpu, host, &pre, f);
    run(&dev, device, &pre, f);
    int n_differ = 0;
    for (int i = 0; i < N_REQS; i++) {
        for (int k = 0; k < 4; k++) {
            CHECK_EQ_INT(device[i].n[k], host[i].n[k]);
            CHECK(memcmp(device[i].tokens[k], host[i].tokens[k], sizeof host[i].tokens[k]) == 0);
            n_differ += memcmp(clean[i].tokens[k], host[i].tokens[k], sizeof host[i].tokens[k]) != 0;
        }
    }
    CHECK(memcmp(clean[0].tokens[0], host[0].tokens[0], sizeof host[0].tokens[0]) != 0); /* greedy too */
    CHECK(n_differ >= N_REQS);
    faults_free(f);
}

/* ---- the draws ------------------------------------------------------------------ */

enum { MAX_DRAWS = 64 };
static double random_us[MAX_DRAWS], greedy_us[MAX_DRAWS];
static int n_random_us, n_greedy_us;

/* Records each row's draw, telling the two requests apart by temperature. */
static void recording_sample(void *ctx, const float *logits, int64_t n, int64_t V, const sampling_row_t *rows,
                             const int32_t *ids, const float *bias, int64_t n_ids, sample_result_t *out) {
    for (int64_t i = 0; i < n; i++) {
        if (rows[i].temperature == 0.0f) {
            SL_ASSERT(n_greedy_us < MAX_DRAWS);
            greedy_us[n_greedy_us++] = rows[i].u;
        } else {
            SL_ASSERT(n_random_us < MAX_DRAWS);
            random_us[n_random_us++] = rows[i].u;
        }
    }
    cpu->sample(ctx, logits, n, V, rows, ids, bias, n_ids, out);
}

static void test_rows_carry_the_requests_own_successive_draws(void) {
    enum { N_TOKENS = 12 };
    sl_ops_t rec = *cpu;
    rec.sample = recording_sample;
    sl_err_t err;
    engine_config_t c;
    engine_config_default(&c);
    c.model_dir = MODEL_DIR;
    c.load.progress = false;
    c.ops = &rec;
    c.max_model_len = 128;
    c.kv_cache_memory_bytes = 16 << 20;
    engine_t *e = engine_create(&c, &err);
    SL_ASSERT(e);
    int32_t prompt[6] = {5, 17, 29, 3, 8, 13};
    sampling_params_t p[2];
    for (int i = 0; i < 2; i++) {
        sampling_params_default(&p[i]);
        p[i].max_tokens = N_TOKENS;
        p[i].ignore_eos = true;
        p[i].temperature = i == 0 ? 0.9f : 0.0f;
        p[i].has_seed = true;
        p[i].seed = 77;
    }
    engine_stream_t *st[2];
    for (int i = 0; i < 2; i++) SL_ASSERT((st[i] = engine_submit(e, prompt, 6, &p[i], &err)));
    while (engine_step(e)) {}
    for (int i = 0; i < 2; i++) {
        for (engine_output_t *o; (o = engine_stream_try_next(st[i]));) engine_output_free(o);
        engine_stream_release(e, st[i]);
    }
    engine_free(e);

    CHECK_EQ_INT(n_random_us, N_TOKENS);
    CHECK_EQ_INT(n_greedy_us, N_TOKENS);
    sl_rng_t want;
    rng_seed(&want, 77);
    int same = 0;
    for (int k = 0; k < n_random_us; k++) same += random_us[k] == rng_uniform(&want);
    CHECK_EQ_INT(same, N_TOKENS);
    int zero = 0;
    for (int k = 0; k < n_greedy_us; k++) zero += greedy_us[k] == 0.0;
    CHECK_EQ_INT(zero, N_TOKENS);
}

int main(void) {
    test_seed();
    cpu = cpu_backend_init(1);
    RUN(test_device_sampling_path_draws_what_the_host_path_draws);
    RUN(test_rows_carry_the_requests_own_successive_draws);
    RUN(test_logit_noise_acts_alike_on_either_path);
    return test_summary();
}
