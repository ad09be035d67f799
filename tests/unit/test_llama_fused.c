/* test_llama_fused.c - llama.c's fused-op path computes what its unfused path does.
 *
 * A device backend may offer add_rmsnorm and rope_kv_write (ops.h); llama.c
 * then folds residual adds into the next norm and reuses the `up` buffer for
 * the residual branch. Here both fused ops are built from the CPU ops in the
 * unfused order, so the two paths do the same arithmetic and any buffer mixup
 * in the fused path (an alias, a stale buffer) shows as a logit that is not
 * bit-identical. Runs the committed tiny checkpoint: a mixed prefill step,
 * then a decode step reading the KV written by the first.
 */
#include "servelab/model.h"
#include "servelab/model_runner.h"
#include "test.h"

#define MODEL_DIR "models/tiny"
#define B 16
#define MAX_BLOCKS 8

/* One eager forward of b through m, on a model runner of its own. */
static void forward(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv, float *logits) {
    model_runner_t r;
    sl_err_t err;
    SL_ASSERT(runner_init(&r, m, b->max_blocks, &err) == 0);
    runner_forward(&r, b, kv, logits);
    runner_free(&r);
}

static const sl_ops_t *cpu;

static void fused_add_rmsnorm(void *ctx, void *x, void *out, const void *y, const sl_weight_t *w, int64_t T,
                              float eps) {
    cpu->add(ctx, x, y, T * w->cols);
    cpu->rmsnorm(ctx, out, x, w, T, eps);
}

static void fused_rope_kv_write(void *ctx, void *q, void *k, const void *v, void *kc, void *vc,
                                const int32_t *positions, const int64_t *slots, int64_t T, int64_t H, int64_t Hkv,
                                int64_t D, float theta, float scale, int64_t block_size) {
    cpu->rope(ctx, q, k, positions, T, H, Hkv, D, theta, scale);
    cpu->kv_write(ctx, kc, vc, k, v, slots, T, Hkv, D, block_size);
}

/* Two prompts (20 and 30 tokens) in one step, then one decode token each;
 * logits (4, V) of both steps. */
static void run_two_steps(const sl_ops_t *ops, float *logits, int64_t V) {
    sl_err_t err;
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true};
    llama_model_t m;
    SL_ASSERT(llama_init(&m, MODEL_DIR, &lo, ops, 64, 4, &err) == 0);
    SL_ASSERT(m.cfg.vocab_size == V);
    kv_cache_t kv;
    SL_ASSERT(kv_cache_init(&kv, &m, 16, B, &err) == 0);
    sl_batch_t b;
    batch_init(&b, 64, 4, MAX_BLOCKS);
    const int32_t lens[2] = {20, 30};
    int32_t t = 0;
    for (int32_t s = 0; s < 2; s++) {
        b.query_start[s] = t;
        for (int32_t i = 0; i < lens[s]; i++, t++) {
            b.token_ids[t] = (int32_t)((7 * t + 3) % V);
            b.positions[t] = i;
            b.slot_mapping[t] = (int64_t)(1 + s * 4 + i / B) * B + i % B;
        }
        b.query_start[s + 1] = t;
        b.seq_lens[s] = lens[s];
        b.logits_index[s] = t - 1;
        for (int32_t j = 0; j < 4; j++) b.block_tables[s * MAX_BLOCKS + j] = 1 + s * 4 + j;
    }
    b.n_tokens = t;
    b.n_seqs = b.n_logits = 2;
    forward(&m, &b, &kv, logits);
    for (int32_t s = 0; s < 2; s++) {
        int32_t i = lens[s];
        b.query_start[s] = s;
        b.token_ids[s] = 11 + s;
        b.positions[s] = i;
        b.slot_mapping[s] = (int64_t)(1 + s * 4 + i / B) * B + i % B;
        b.query_start[s + 1] = s + 1;
        b.seq_lens[s] = i + 1;
        b.logits_index[s] = s;
    }
    b.n_tokens = 2;
    forward(&m, &b, &kv, logits + 2 * V);
    batch_free(&b);
    kv_cache_free(&kv, &m);
    llama_free(&m);
}

static void test_fused_ops_path_is_bit_identical_to_the_unfused_one(void) {
    cpu = cpu_backend_init(1);
    sl_ops_t fused = *cpu;
    fused.add_rmsnorm = fused_add_rmsnorm;
    fused.rope_kv_write = fused_rope_kv_write;
    model_config_t cfg;
    sl_err_t err;
    SL_ASSERT(config_load(MODEL_DIR, &cfg, &err) == 0);
    int64_t V = cfg.vocab_size;
    float *a = sl_malloc((size_t)(4 * V) * sizeof(float)), *b = sl_malloc((size_t)(4 * V) * sizeof(float));
    run_two_steps(cpu, a, V);
    run_two_steps(&fused, b, V);
    int64_t n_diff = 0;
    for (int64_t i = 0; i < 4 * V; i++) n_diff += a[i] != b[i];
    CHECK_EQ_INT(n_diff, 0);
    free(a);
    free(b);
}

/* The CPU backend offers no fused ops: its path is the reference one. */
static void test_cpu_backend_has_no_fused_ops_and_cannot_fail(void) {
    const sl_ops_t *o = cpu_backend_init(1);
    CHECK(o->add_rmsnorm == NULL && o->rope_kv_write == NULL && o->last_error == NULL);
}

int main(void) {
    test_seed();
    RUN(test_fused_ops_path_is_bit_identical_to_the_unfused_one);
    RUN(test_cpu_backend_has_no_fused_ops_and_cannot_fail);
    return test_summary();
}
