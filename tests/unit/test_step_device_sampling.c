/* test_step_device_sampling.c - sampling on the device gives the tokens sampling on the host does.
 *
 * A device backend keeps the logits where they are (ops->logits_device) and
 * samples them there (ops->sample): the engine resolves each request into a
 * sampling_row_t on the host and takes the request's draw from its own
 * generator. Here the "device" is the CPU ops table plus a sample op that
 * runs sampler_run_u (the CPU twin of the CUDA sampler) on each row, so any
 * mistake in step.c's half (a draw taken when sampler_run takes none, or in
 * another order; a row's history, masks or bias laid out wrong; logits of
 * the wrong row) shows as a token or logprob that differs from the plain
 * CPU engine's. Every sampling feature is on in some request; n > 1, a KV
 * pool small enough to preempt, and chunked prefill mix the rows.
 */
#include "servelab/engine.h"
#include "servelab/sampler.h"
#include "test.h"

#define MODEL_DIR "models/tiny"
#define N_REQS 9

static const sl_ops_t *cpu;
static sampler_scratch_t scratch;
static int64_t n_sample_calls, n_rows_sampled;

static void dev_logits(void *ctx, float *out, const void *in, const sl_weight_t *w, int64_t S) {
    cpu->logits(ctx, out, in, w, S); /* "device" memory is host memory here */
}

static void dev_sample(void *ctx, const float *logits, int64_t n, int64_t V, const sampling_row_t *rows,
                       const int32_t *ids, const float *bias, int64_t n_ids, sample_result_t *out) {
    (void)ctx;
    n_sample_calls++;
    n_rows_sampled += n;
    for (int64_t i = 0; i < n; i++) {
        const sampling_row_t *r = &rows[i];
        /* Every row's slices lie inside the flat arrays. */
        SL_ASSERT(r->mask_off + r->n_mask <= n_ids && r->bias_off + r->n_bias <= n_ids &&
                  r->hist_off + r->n_prompt + r->n_output <= n_ids);
        sampler_run_u(r, ids, bias, logits + i * V, V, &scratch, &out[i]);
    }
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

static void run(const sl_ops_t *ops, result_t *res, int64_t *n_preemptions) {
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
    run(cpu, host, &pre_host);
    run(&dev, device, &pre_dev);
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

int main(void) {
    test_seed();
    cpu = cpu_backend_init(1);
    sl_err_t err;
    model_config_t cfg;
    SL_ASSERT(config_load(MODEL_DIR, &cfg, &err) == 0);
    sampler_scratch_init(&scratch, cfg.vocab_size);
    RUN(test_device_sampling_path_draws_what_the_host_path_draws);
    sampler_scratch_free(&scratch);
    return test_summary();
}
