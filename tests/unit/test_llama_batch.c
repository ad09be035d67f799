/* test_llama_batch.c - the flat batch: mixing sequences in one step changes nothing.
 *
 * Runs the committed tiny checkpoint. A sequence's logits must be the same
 * whether its tokens run alone, in prefill chunks of any size, or in one step
 * together with other sequences' prefill chunks and decodes, with block tables
 * that are scattered and interleaved. Also checks --load-format dummy builds
 * the same random weights for the same seed, and --dtype conversion.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/model.h"
#include "servelab/model_runner.h"
#include "test.h"

#define MODEL_DIR "models/tiny"
#define B 16
#define MAX_BLOCKS 8

typedef struct {
    int32_t ids[64];
    int32_t n;
    int32_t blocks[MAX_BLOCKS];
} seq_t;

/* One eager forward of b through m, on a model runner of its own. */
static void forward(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv, float *logits) {
    model_runner_t r;
    sl_err_t err;
    SL_ASSERT(runner_init(&r, m, b->max_blocks, &err) == 0);
    runner_forward(&r, b, kv, logits);
    runner_free(&r);
}

static float max_abs_diff(const float *a, const float *b, int64_t n) {
    float m = 0.0f;
    for (int64_t i = 0; i < n; i++) m = fmaxf(m, fabsf(a[i] - b[i]));
    return m;
}

/* Adds tokens [start, start + n) of `s` as sequence number b->n_seqs. */
static void add_chunk(sl_batch_t *b, const seq_t *s, int32_t start, int32_t n, bool logits) {
    int32_t si = b->n_seqs++, t0 = b->n_tokens;
    for (int32_t i = 0; i < n; i++) {
        int32_t pos = start + i, t = t0 + i;
        b->token_ids[t] = s->ids[pos];
        b->positions[t] = pos;
        b->slot_mapping[t] = (int64_t)s->blocks[pos / B] * B + pos % B;
    }
    b->n_tokens += n;
    b->query_start[si] = t0;
    b->query_start[si + 1] = b->n_tokens;
    b->seq_lens[si] = start + n;
    memcpy(b->block_tables + si * b->max_blocks, s->blocks, sizeof s->blocks);
    if (logits) b->logits_index[b->n_logits++] = b->n_tokens - 1;
}

static void reset(sl_batch_t *b) { b->n_tokens = b->n_seqs = b->n_logits = 0; }

static llama_model_t model;
static kv_cache_t kv;
static sl_batch_t batch;
static seq_t seqs[3];

static void make_seqs(void) {
    int32_t n[3] = {37, 20, 5};
    int next_block = 1;
    for (int s = 0; s < 3; s++) {
        seqs[s].n = n[s];
        for (int i = 0; i < n[s]; i++) seqs[s].ids[i] = 3 + (int32_t)(test_rng() % 1000);
    }
    /* Interleave the sequences' blocks so a wrong table shows up. */
    for (int j = 0; j < MAX_BLOCKS; j++)
        for (int s = 0; s < 3; s++) seqs[s].blocks[j] = next_block++;
}

/* Logits of the last token of `s` after prefilling it in chunks of `chunk`. */
static void run_alone(const seq_t *s, int32_t chunk, float *logits) {
    for (int32_t start = 0; start < s->n; start += chunk) {
        int32_t n = s->n - start < chunk ? s->n - start : chunk;
        reset(&batch);
        add_chunk(&batch, s, start, n, start + n == s->n);
        forward(&model, &batch, &kv, logits);
    }
}

static void test_chunked_prefill_matches_whole_prefill(void) {
    int64_t V = model.cfg.vocab_size;
    float *whole = sl_malloc(V * sizeof(float)), *chunked = sl_malloc(V * sizeof(float));
    run_alone(&seqs[0], 64, whole);
    int32_t chunks[] = {1, 5, 16, 17};
    for (size_t i = 0; i < sizeof chunks / sizeof chunks[0]; i++) {
        run_alone(&seqs[0], chunks[i], chunked);
        float d = max_abs_diff(whole, chunked, V);
        printf("  chunk %2d: max |logit diff| %.2e\n", chunks[i], d);
        CHECK(d < 1e-4f);
    }
    free(whole);
    free(chunked);
}

static void test_mixed_step_matches_sequences_run_alone(void) {
    int64_t V = model.cfg.vocab_size;
    float *alone = sl_malloc(3 * V * sizeof(float)), *mixed = sl_malloc(3 * V * sizeof(float));
    /* Reference: each sequence alone, whole prompt. */
    for (int s = 0; s < 3; s++) run_alone(&seqs[s], 64, alone + s * V);
    /* Mixed: seq 0 already has 36 tokens cached and decodes its last one;
     * seq 1 is prefilled in two chunks, the second in the mixed step; seq 2
     * is prefilled whole in the mixed step. */
    reset(&batch);
    add_chunk(&batch, &seqs[0], 0, 36, false);
    add_chunk(&batch, &seqs[1], 0, 9, false);
    forward(&model, &batch, &kv, mixed);
    reset(&batch);
    add_chunk(&batch, &seqs[2], 0, 5, true);
    add_chunk(&batch, &seqs[0], 36, 1, true);
    add_chunk(&batch, &seqs[1], 9, 11, true);
    forward(&model, &batch, &kv, mixed);
    int order[3] = {2, 0, 1};
    for (int r = 0; r < 3; r++) {
        float d = max_abs_diff(mixed + r * V, alone + order[r] * V, V);
        printf("  seq %d: max |logit diff| %.2e\n", order[r], d);
        CHECK(d < 1e-4f);
    }
    free(alone);
    free(mixed);
}

static void test_dummy_weights_are_deterministic_and_not_flat(void) {
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_DUMMY, .dtype_auto = true, .seed = 7};
    llama_model_t m1, m2;
    sl_err_t err;
    CHECK(llama_init(&m1, MODEL_DIR, &lo, model.ops, 64, 4, &err) == 0);
    CHECK(llama_init(&m2, MODEL_DIR, &lo, model.ops, 64, 4, &err) == 0);
    CHECK(m1.w.lm_head.dtype == DTYPE_BF16);
    /* The LM head as the linear op reads it: the CPU backend's packed copy. */
    const sl_weight_t *h1 = &m1.w.lm_head, *h2 = &m2.w.lm_head, *h0 = &model.w.lm_head;
    size_t n = h1->packed ? cpu_bf16_packed_bytes(h1->rows, h1->cols)
                          : (size_t)(h1->rows * h1->cols) * dtype_size(h1->dtype);
    const void *p1 = h1->packed ? h1->packed : h1->data, *p2 = h2->packed ? h2->packed : h2->data;
    const void *p0 = h0->packed ? h0->packed : h0->data;
    CHECK(!memcmp(p1, p2, n));
    CHECK(memcmp(p1, p0, n) != 0);
    kv_cache_t kv1;
    CHECK(kv_cache_init(&kv1, &m1, 1 + 3 * MAX_BLOCKS, B, &err) == 0);
    int64_t V = m1.cfg.vocab_size;
    float *logits = sl_malloc(V * sizeof(float));
    reset(&batch);
    add_chunk(&batch, &seqs[0], 0, seqs[0].n, true);
    forward(&m1, &batch, &kv1, logits);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < V; i++) mean += logits[i] / V;
    for (int64_t i = 0; i < V; i++) var += (logits[i] - mean) * (logits[i] - mean) / V;
    printf("  dummy logits std %.2f\n", sqrt(var));
    CHECK(sqrt(var) > 1.0);
    free(logits);
    kv_cache_free(&kv1, &m1);
    llama_free(&m1);
    llama_free(&m2);
}

static void test_dtype_float32_conversion_keeps_logits(void) {
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = false, .dtype = DTYPE_F32};
    llama_model_t m;
    sl_err_t err;
    CHECK(llama_init(&m, MODEL_DIR, &lo, model.ops, 64, 4, &err) == 0);
    int64_t V = m.cfg.vocab_size;
    float *a = sl_malloc(V * sizeof(float)), *b = sl_malloc(V * sizeof(float));
    CHECK(m.w.layers[0].q.dtype == DTYPE_F32);
    /* Exact arithmetic on the bf16 side too: an ISA level that keeps activations
     * in fp32 (avx512_bf16 rounds them to bf16, linear_packed.c). */
    cpu_isa_t best = cpu_isa_detect();
    setenv("SERVELAB_CPU_ISA", cpu_isa_name(best > CPU_ISA_AVX512 ? CPU_ISA_AVX512 : best), 1);
    cpu_isa_reload();
    run_alone(&seqs[1], 64, a);
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
    reset(&batch);
    add_chunk(&batch, &seqs[1], 0, seqs[1].n, true);
    forward(&m, &batch, &kv, b);
    float d = max_abs_diff(a, b, V);
    printf("  bf16 vs float32 weights: max |logit diff| %.2e\n", d);
    CHECK(d < 1e-4f);
    free(a);
    free(b);
    llama_free(&m);
}

int main(void) {
    test_seed();
    sl_err_t err;
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true};
    if (llama_init(&model, MODEL_DIR, &lo, cpu_backend_init(0), 64, 4, &err)) {
        fprintf(stderr, "cannot load %s: %s\n", MODEL_DIR, err.msg);
        return 1;
    }
    if (kv_cache_init(&kv, &model, 1 + 3 * MAX_BLOCKS, B, &err)) return 1;
    batch_init(&batch, 64, 4, MAX_BLOCKS);
    make_seqs();
    RUN(test_chunked_prefill_matches_whole_prefill);
    RUN(test_mixed_step_matches_sequences_run_alone);
    RUN(test_dummy_weights_are_deterministic_and_not_flat);
    RUN(test_dtype_float32_conversion_keeps_logits);
    batch_free(&batch);
    kv_cache_free(&kv, &model);
    llama_free(&model);
    return test_summary();
}
