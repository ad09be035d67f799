/* test_llama_graphs.c - decode steps replayed from CUDA graphs compute what eager steps do.
 *
 * The host side of CUDA graphs, on the CPU: the capture sizes (vLLM's
 * pattern), the bucket a batch pads to, the padding rows, and llama.c's
 * capture and replay. A graph replays the ops it recorded with the arguments
 * they had at capture, host values included; only the contents of buffers
 * change between replays. The recording backend below does exactly that over
 * the CPU ops, so a per-step value that leaked into a captured op (a token
 * count, a context length, a stale input buffer) shows up as logits that
 * differ from the eager model's. Runs the committed tiny checkpoint.
 */
#include <math.h>

#include "servelab/model.h"
#include "servelab/model_runner.h"
#include "test.h"

#define MODEL_DIR "models/tiny"
#define B 16
#define MAX_BLOCKS 8
#define MAX_SEQS 8
#define GRAPH_MAX_SEQ_LEN 64

/* ---- a backend whose "graphs" record op calls and replay them ----------------- */

typedef enum { R_EMBED, R_RMSNORM, R_LINEAR, R_ROPE, R_KV_WRITE, R_ATTENTION, R_SILU_MUL, R_ADD, R_GATHER,
               R_LOGITS } rec_kind_t;

typedef struct {
    rec_kind_t kind;
    void *p[6];
    const sl_weight_t *w;
    int64_t i[6];
    float f[3];
    sl_attn_meta_t meta; /* by value: what a kernel's parameters freeze */
} rec_t;

typedef struct {
    rec_t *recs;
    int n, cap;
} graph_t;

static const sl_ops_t *cpu;
static sl_ops_t rec_ops;
static graph_t *recording;
static int n_uploads_while_recording;

static void put(rec_t r) {
    if (recording->n == recording->cap) {
        recording->cap = recording->cap ? 2 * recording->cap : 64;
        recording->recs = realloc(recording->recs, (size_t)recording->cap * sizeof(rec_t));
        SL_ASSERT(recording->recs);
    }
    recording->recs[recording->n++] = r;
}

static void run(void *ctx, const rec_t *r) {
    switch (r->kind) {
    case R_EMBED: cpu->embed(ctx, r->p[0], r->w, r->p[1], r->i[0], r->i[1]); break;
    case R_RMSNORM: cpu->rmsnorm(ctx, r->p[0], r->p[1], r->w, r->i[0], r->f[0]); break;
    case R_LINEAR: cpu->linear(ctx, r->p[0], r->p[1], r->w, r->i[0]); break;
    case R_ROPE: cpu->rope(ctx, r->p[0], r->p[1], r->p[2], r->i[0], r->i[1], r->i[2], r->i[3], r->f[0], r->f[1]); break;
    case R_KV_WRITE:
        cpu->kv_write(ctx, r->p[0], r->p[1], r->p[2], r->p[3], r->p[4], r->i[0], r->i[1], r->i[2], r->i[3]);
        break;
    case R_ATTENTION:
        cpu->attention(ctx, r->p[0], r->p[1], r->p[2], r->p[3], &r->meta, r->i[0], r->i[1], r->i[2], r->i[3],
                       r->f[0]);
        break;
    case R_SILU_MUL: cpu->silu_mul(ctx, r->p[0], r->p[1], r->p[2], r->i[0]); break;
    case R_ADD: cpu->add(ctx, r->p[0], r->p[1], r->i[0]); break;
    case R_GATHER: cpu->gather_rows(ctx, r->p[0], r->p[1], r->p[2], r->i[0], r->i[1]); break;
    case R_LOGITS: cpu->logits(ctx, r->p[0], r->p[1], r->w, r->i[0]); break;
    }
}

static void op(void *ctx, rec_t r) {
    if (recording) put(r);
    else run(ctx, &r);
}

static void r_embed(void *ctx, void *out, const sl_weight_t *t, const int32_t *ids, int64_t T, int64_t vocab0) {
    op(ctx, (rec_t){.kind = R_EMBED, .p = {out, (void *)ids}, .w = t, .i = {T, vocab0}});
}
static void r_rmsnorm(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T, float eps) {
    op(ctx, (rec_t){.kind = R_RMSNORM, .p = {out, (void *)in}, .w = w, .i = {T}, .f = {eps}});
}
static void r_linear(void *ctx, void *out, const void *in, const sl_weight_t *w, int64_t T) {
    op(ctx, (rec_t){.kind = R_LINEAR, .p = {out, (void *)in}, .w = w, .i = {T}});
}
static void r_rope(void *ctx, void *q, void *k, const int32_t *pos, int64_t T, int64_t H, int64_t Hkv, int64_t D,
                   float theta, float scale) {
    op(ctx, (rec_t){.kind = R_ROPE, .p = {q, k, (void *)pos}, .i = {T, H, Hkv, D}, .f = {theta, scale}});
}
static void r_kv_write(void *ctx, void *kc, void *vc, const void *k, const void *v, const int64_t *slots, int64_t T,
                       int64_t Hkv, int64_t D, int64_t bs) {
    op(ctx, (rec_t){.kind = R_KV_WRITE, .p = {kc, vc, (void *)k, (void *)v, (void *)slots}, .i = {T, Hkv, D, bs}});
}
static void r_attention(void *ctx, void *out, const void *q, const void *kc, const void *vc, const sl_attn_meta_t *m,
                        int64_t H, int64_t Hkv, int64_t D, int64_t bs, float scale) {
    op(ctx, (rec_t){.kind = R_ATTENTION, .p = {out, (void *)q, (void *)kc, (void *)vc}, .i = {H, Hkv, D, bs},
                    .f = {scale}, .meta = *m});
}
static void r_silu_mul(void *ctx, void *out, const void *g, const void *u, int64_t n) {
    op(ctx, (rec_t){.kind = R_SILU_MUL, .p = {out, (void *)g, (void *)u}, .i = {n}});
}
static void r_add(void *ctx, void *x, const void *y, int64_t n) {
    op(ctx, (rec_t){.kind = R_ADD, .p = {x, (void *)y}, .i = {n}});
}
static void r_gather(void *ctx, void *out, const void *in, const int32_t *idx, int64_t S, int64_t n) {
    op(ctx, (rec_t){.kind = R_GATHER, .p = {out, (void *)in, (void *)idx}, .i = {S, n}});
}
static void r_logits_device(void *ctx, float *out, const void *in, const sl_weight_t *w, int64_t S) {
    op(ctx, (rec_t){.kind = R_LOGITS, .p = {out, (void *)in}, .w = w, .i = {S}});
}
static void r_upload(void *ctx, void *dst, const void *src, size_t n) {
    n_uploads_while_recording += recording != NULL;
    cpu->upload(ctx, dst, src, n);
}
static void r_download(void *ctx, void *dst, const void *src, size_t n) {
    n_uploads_while_recording += recording != NULL;
    cpu->download(ctx, dst, src, n);
}

static void g_begin(void *ctx) {
    (void)ctx;
    SL_ASSERT(!recording);
    recording = sl_calloc(1, sizeof(graph_t));
}
static void *g_end(void *ctx) {
    (void)ctx;
    graph_t *g = recording;
    recording = NULL;
    return g;
}
static void g_launch(void *ctx, void *graph) {
    const graph_t *g = graph;
    for (int i = 0; i < g->n; i++) run(ctx, &g->recs[i]);
}
static int n_freed;
static void g_free(void *ctx, void *graph) {
    (void)ctx;
    graph_t *g = graph;
    free(g->recs);
    free(g);
    n_freed++;
}
static int no_error(void *ctx, char *msg, size_t cap) {
    (void)ctx, (void)msg, (void)cap;
    return 0;
}

static void make_rec_ops(void) {
    rec_ops = *cpu;
    rec_ops.name = "recording";
    rec_ops.embed = r_embed;
    rec_ops.rmsnorm = r_rmsnorm;
    rec_ops.linear = r_linear;
    rec_ops.linears = NULL; /* each linear recorded on its own */
    rec_ops.rope = r_rope;
    rec_ops.kv_write = r_kv_write;
    rec_ops.attention = r_attention;
    rec_ops.silu_mul = r_silu_mul;
    rec_ops.add = r_add;
    rec_ops.gather_rows = r_gather;
    rec_ops.logits_device = r_logits_device;
    rec_ops.upload = r_upload;
    rec_ops.download = r_download;
    rec_ops.last_error = no_error;
    rec_ops.graph_begin = g_begin;
    rec_ops.graph_end = g_end;
    rec_ops.graph_launch = g_launch;
    rec_ops.graph_free = g_free;
}

/* ---- sizes and padding ------------------------------------------------------------ */

static void test_capture_sizes_follow_vllm(void) {
    int32_t s[128];
    int n = runner_graph_sizes(512, 256, 2048, s, 128);
    CHECK_EQ_INT(n, 35); /* 1 2 4, then 8 .. 256 by 8 */
    CHECK(s[0] == 1 && s[1] == 2 && s[2] == 4 && s[3] == 8 && s[4] == 16 && s[34] == 256);
    for (int i = 4; i < n; i++) CHECK_EQ_INT(s[i] - s[i - 1], 8);
    n = runner_graph_sizes(200, 100, 2048, s, 128); /* stops at the first size holding 100 */
    CHECK_EQ_INT(s[n - 1], 104);
    n = runner_graph_sizes(512, 256, 20, s, 128); /* none above max_num_batched_tokens */
    CHECK_EQ_INT(n, 5);
    CHECK_EQ_INT(s[n - 1], 16);
    n = runner_graph_sizes(4, 256, 2048, s, 128);
    CHECK(n == 3 && s[2] == 4);
    n = runner_graph_sizes(512, 1, 2048, s, 128);
    CHECK(n == 1 && s[0] == 1);
    CHECK_EQ_INT(runner_graph_sizes(512, 256, 2048, s, 4), 4);
}

static void test_bucket_is_smallest_size_that_holds(void) {
    int32_t s[] = {1, 2, 4, 8, 16};
    CHECK_EQ_INT(runner_graph_bucket(s, 5, 1), 0);
    CHECK_EQ_INT(runner_graph_bucket(s, 5, 3), 2);
    CHECK_EQ_INT(runner_graph_bucket(s, 5, 8), 3);
    CHECK_EQ_INT(runner_graph_bucket(s, 5, 9), 4);
    CHECK_EQ_INT(runner_graph_bucket(s, 5, 17), -1);
    CHECK_EQ_INT(runner_graph_bucket(s, 0, 1), -1);
}

/* ---- the model ---------------------------------------------------------------------- */

typedef struct {
    int32_t ids[GRAPH_MAX_SEQ_LEN + 16];
    int32_t n; /* tokens in the cache */
    int32_t blocks[MAX_BLOCKS];
} seq_t;

static seq_t seqs[MAX_SEQS];

static void make_seqs(int64_t V) {
    for (int s = 0; s < MAX_SEQS; s++) {
        seqs[s].n = 0;
        for (int i = 0; i < (int)(sizeof seqs[s].ids / sizeof seqs[s].ids[0]); i++)
            seqs[s].ids[i] = 3 + (int32_t)(test_rng() % (uint64_t)(V - 3));
        /* Interleaved blocks, 1 + s + MAX_SEQS * j: block 0 stays the null block. */
        for (int j = 0; j < MAX_BLOCKS; j++) seqs[s].blocks[j] = 1 + s + MAX_SEQS * j;
    }
}

/* One step: sequences first..first+S-1 each add n tokens (their next ones). */
static void make_step(sl_batch_t *b, int first, int S, int n) {
    b->n_tokens = b->n_seqs = b->n_logits = 0;
    for (int k = 0; k < S; k++) {
        const seq_t *q = &seqs[first + k];
        int32_t t0 = b->n_tokens;
        for (int i = 0; i < n; i++) {
            int32_t pos = q->n + i;
            b->token_ids[t0 + i] = q->ids[pos];
            b->positions[t0 + i] = pos;
            b->slot_mapping[t0 + i] = (int64_t)q->blocks[pos / B] * B + pos % B;
        }
        b->n_tokens += n;
        b->query_start[k] = t0;
        b->query_start[k + 1] = b->n_tokens;
        b->seq_lens[k] = q->n + n;
        memcpy(b->block_tables + (size_t)k * (size_t)b->max_blocks, q->blocks, sizeof q->blocks);
        b->logits_index[b->n_logits++] = b->n_tokens - 1;
    }
    b->n_seqs = S;
}

static void advance(int first, int S, int n) {
    for (int k = 0; k < S; k++) seqs[first + k].n += n;
}

/* max_blocks: the runner's block-table width (the batches' is MAX_BLOCKS). */
static void init_model(llama_model_t *m, model_runner_t *r, kv_cache_t *kv, const sl_ops_t *ops, int32_t max_blocks) {
    sl_err_t err;
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true};
    SL_ASSERT(llama_init(m, MODEL_DIR, &lo, ops, 128, MAX_SEQS, &err) == 0);
    SL_ASSERT(runner_init(r, m, max_blocks, &err) == 0);
    SL_ASSERT(kv_cache_init(kv, m, 1 + MAX_SEQS * MAX_BLOCKS, B, &err) == 0);
}

static bool same(const float *a, const float *b, size_t n) { return memcmp(a, b, n * sizeof(float)) == 0; }

/* The padding rows add nothing: the real rows' logits and the KV cache are
 * bit-identical to the unpadded step's, and the padding writes no KV. */
static void test_padding_rows_change_nothing(void) {
    llama_model_t m;
    model_runner_t rm;
    kv_cache_t kv_a, kv_b;
    init_model(&m, &rm, &kv_a, cpu, MAX_BLOCKS);
    sl_err_t err;
    SL_ASSERT(kv_cache_init(&kv_b, &m, 1 + MAX_SEQS * MAX_BLOCKS, B, &err) == 0);
    int64_t V = m.cfg.vocab_size;
    make_seqs(V);
    sl_batch_t b, padded;
    batch_init(&b, 128, MAX_SEQS, MAX_BLOCKS);
    batch_init(&padded, 128, MAX_SEQS, MAX_BLOCKS);
    float *la = sl_malloc((size_t)MAX_SEQS * V * sizeof(float)), *lb = sl_malloc((size_t)MAX_SEQS * V * sizeof(float));
    make_step(&b, 0, 3, 9); /* prefill 9 tokens of 3 sequences in both caches */
    runner_forward(&rm, &b, &kv_a, la);
    runner_forward(&rm, &b, &kv_b, lb);
    advance(0, 3, 9);
    make_step(&b, 0, 3, 1);
    batch_pad_decode(&padded, &b, 8);
    CHECK(padded.n_tokens == 8 && padded.n_seqs == 8 && padded.n_logits == 8 && padded.query_start[8] == 8);
    CHECK(padded.seq_lens[2] == 10 && padded.seq_lens[3] == 1 && padded.slot_mapping[7] == -1);
    CHECK(padded.block_tables[(size_t)5 * MAX_BLOCKS] == 0 && padded.logits_index[6] == 6);
    runner_forward(&rm, &b, &kv_a, la);
    runner_forward(&rm, &padded, &kv_b, lb);
    CHECK(same(la, lb, (size_t)3 * (size_t)V));
    for (int l = 0; l < m.cfg.n_layers; l++) {
        size_t bytes = (size_t)kv_a.n_blocks * B * (size_t)m.cfg.n_kv_heads * (size_t)m.cfg.head_dim * sizeof(float);
        CHECK(memcmp(kv_a.k[l], kv_b.k[l], bytes) == 0 && memcmp(kv_a.v[l], kv_b.v[l], bytes) == 0);
    }
    free(la);
    free(lb);
    batch_free(&b);
    batch_free(&padded);
    kv_cache_free(&kv_a, &m);
    kv_cache_free(&kv_b, &m);
    runner_free(&rm);
    llama_free(&m);
}

/* Decode steps of 1..MAX_SEQS sequences with growing contexts, replayed from
 * graphs of sizes 1 2 4 8, against the same steps on the plain CPU ops. The
 * graphed model's block tables are twice as wide as the batches' (the padded
 * copy restrides them). */
static void run_against_eager(bool lazy) {
    llama_model_t eager, graphed;
    model_runner_t re, rg;
    kv_cache_t kv_e, kv_g;
    init_model(&eager, &re, &kv_e, cpu, MAX_BLOCKS);
    init_model(&graphed, &rg, &kv_g, &rec_ops, 2 * MAX_BLOCKS); /* graphs see wider block-table rows */
    int64_t V = eager.cfg.vocab_size;
    make_seqs(V);
    sl_err_t err;
    int32_t sizes[] = {8, 2, 1, 4, 4, 64}; /* unsorted, a duplicate, one above max_seqs: clamped to it */
    n_uploads_while_recording = 0;
    CHECK(runner_capture_graphs(&rg, &kv_g, sizes, 6, GRAPH_MAX_SEQ_LEN, lazy, &err) == 0);
    CHECK_EQ_INT(rg.graphs.n, 4);
    CHECK(rg.graphs.sizes[0] == 1 && rg.graphs.sizes[3] == 8);
    for (int i = 0; i < 4; i++) CHECK(lazy ? rg.graphs.graphs[i] == NULL : rg.graphs.graphs[i] != NULL);

    sl_batch_t b;
    batch_init(&b, 128, MAX_SEQS, MAX_BLOCKS);
    float *le = sl_malloc((size_t)MAX_SEQS * V * sizeof(float)), *lg = sl_malloc((size_t)MAX_SEQS * V * sizeof(float));
    make_step(&b, 0, MAX_SEQS, 5); /* a prefill: eager on both */
    runner_forward(&re, &b, &kv_e, le);
    runner_forward(&rg, &b, &kv_g, NULL);
    CHECK(rg.n_graph_steps == 0);
    advance(0, MAX_SEQS, 5);
    const int batch_sizes[] = {1, 3, 8, 5, 2, 7, 4, 6, 8, 1};
    int64_t replays = 0;
    bool all_same = true;
    for (int step = 0; step < 40; step++) {
        int S = batch_sizes[step % 10], first = step % (MAX_SEQS - S + 1);
        make_step(&b, first, S, 1);
        runner_forward(&re, &b, &kv_e, le);
        runner_forward(&rg, &b, &kv_g, lg); /* host logits: the replay, then one download */
        all_same &= same(le, lg, (size_t)S * (size_t)V);
        replays++;
        advance(first, S, 1);
    }
    CHECK(all_same);
    CHECK_EQ_INT(rg.n_graph_steps, replays);
    for (int i = 0; i < 4; i++) CHECK(rg.graphs.graphs[i] != NULL); /* every size was used: lazy captured them */
    CHECK_EQ_INT(n_uploads_while_recording, 0);

    /* A context beyond GRAPH_MAX_SEQ_LEN runs eagerly, and still matches. */
    seqs[0].n = GRAPH_MAX_SEQ_LEN;
    for (int32_t p = 0; p < seqs[0].n; p += 16) { /* fill its cache in both models */
        int32_t n0 = seqs[0].n;
        seqs[0].n = p;
        make_step(&b, 0, 1, 16);
        runner_forward(&re, &b, &kv_e, le);
        runner_forward(&rg, &b, &kv_g, lg);
        seqs[0].n = n0;
    }
    int64_t before = rg.n_graph_steps;
    make_step(&b, 0, 1, 1);
    runner_forward(&re, &b, &kv_e, le);
    runner_forward(&rg, &b, &kv_g, lg);
    CHECK(same(le, lg, (size_t)V));
    CHECK_EQ_INT(rg.n_graph_steps, before);

    n_freed = 0;
    free(le);
    free(lg);
    batch_free(&b);
    kv_cache_free(&kv_e, &eager);
    kv_cache_free(&kv_g, &graphed);
    runner_free(&re);
    runner_free(&rg);
    llama_free(&eager);
    llama_free(&graphed);
    CHECK_EQ_INT(n_freed, 4);
}

static void test_replays_match_eager_steps(void) { run_against_eager(false); }
static void test_lazy_capture_at_first_use_matches_eager_steps(void) { run_against_eager(true); }

int main(void) {
    test_seed();
    cpu = cpu_backend_init(1);
    make_rec_ops();
    RUN(test_capture_sizes_follow_vllm);
    RUN(test_bucket_is_smallest_size_that_holds);
    RUN(test_padding_rows_change_nothing);
    RUN(test_replays_match_eager_steps);
    RUN(test_lazy_capture_at_first_use_matches_eager_steps);
    return test_summary();
}
