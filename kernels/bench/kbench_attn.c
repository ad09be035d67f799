/* kbench_attn.c - slk_attention over a paged KV cache at a model's head
 * shapes: decode (S sequences of one query token each, every one with the
 * same context: kb_decode_batches x kb_decode_contexts) and the prefill of
 * one fresh prompt (kb_prefill_lengths tokens, causal).
 *
 * Blocks of 16 are handed out in random order (block 0, the null block,
 * never), as a fragmented pool would. The cache is tiled with random
 * patterns (kbench.h), so 8 GiB of it costs one small upload, and the host
 * rebuilds the blocks of the sequences it checks: decode checks the first
 * and the last sequence, prefill four query rows (first, last, two between),
 * each against cpu_attention on the same rounded values. Tolerance as
 * tests/kernels/test_kernels_attention.c: 1 ulp of dt (100 fp32 ulps in f32)
 * plus an absolute 2e-5 for the summation order, grown with sqrt(context)
 * past 4096 tokens (the order differences grow like it); the bf16/f16
 * prefill (tensor cores) rounds the softmax weights to dt before P V, which
 * can move an output by up to 2u (1 + u) max|v - o| (u: dt's unit roundoff,
 * |v| <= 1 here): an absolute 1 ulp of dt there, as the parity test.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops_cpu.h"
#include "kbench.h"
#include "kernels.h"

#define BLOCK 16

typedef struct {
    void *out, *q, *kc, *vc, *ws;
    size_t ws_bytes;
    sl_attn_meta_t meta;
    int64_t H, Hkv, D;
    float scale;
    sl_dtype_t dt;
} attn_arg_t;

static void launch_attn(kb_ctx_t *c, void *arg) {
    attn_arg_t *a = arg;
    KB_LAUNCH(slk_attention(a->out, a->q, a->kc, a->vc, &a->meta, a->H, a->Hkv, a->D, BLOCK, a->scale, a->dt, a->dt,
                            a->ws_bytes ? a->ws : NULL, a->ws_bytes, c->stream));
}

static float *fvec(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

static int attn_close(const char *what, const float *got, const float *want, int64_t n, sl_dtype_t dt, int64_t ctx,
                      int prefill) {
    double maxw = 0;
    for (int64_t i = 0; i < n; i++) maxw = fmax(maxw, fabs((double)want[i]));
    double ulps = dt == DTYPE_F32 ? 100.0 : 1.0, rtol = ulps * kb_eps(dt);
    double atol = 2e-5 * (ctx > 4096 ? sqrt((double)ctx / 4096.0) : 1.0);
    if (prefill && dt != DTYPE_F32) atol = fmax(atol, kb_eps(dt));
    return kb_close(what, got, want, n, dt, ulps, maxw > 0 ? atol / (rtol * maxw) : 1.0);
}

/* The host copy of one sequence's n_blk blocks (table[0..n_blk)), as blocks
 * 0..n_blk-1 of a small cache. */
static void read_blocks(float *dst, const int32_t *table, int64_t n_blk, int64_t row, const kb_pattern_t *p) {
    for (int64_t i = 0; i < n_blk; i++)
        kb_pattern_read(dst + i * BLOCK * row, (int64_t)table[i] * BLOCK * row, BLOCK * row, p, 0);
}

/* Everything but the token layout: buffers, shuffled block tables, patterns. */
typedef struct {
    attn_arg_t a;
    int32_t *tables;            /* (S, nb) host copy */
    int64_t nb, n_blocks;
    kb_pattern_t pq, pk, pv;
    void *ptrs[9];
} attn_setup_t;

/* S sequences of nb blocks each; positions etc. are the caller's. 0, or -1 when out of memory. */
static int attn_alloc(kb_ctx_t *c, const kb_model_t *m, attn_setup_t *s, int64_t S, int64_t T, int64_t nb) {
    const size_t es = (size_t)c->es;
    const int64_t krow = m->Hkv * m->D;
    s->nb = nb;
    s->n_blocks = S * nb + 1;
    attn_arg_t *a = &s->a;
    a->H = m->H, a->Hkv = m->Hkv, a->D = m->D, a->dt = c->dt;
    a->scale = 1.0f / sqrtf((float)m->D);
    a->out = kb_try_alloc((size_t)(T * m->H * m->D) * es);
    a->q = kb_try_alloc((size_t)(T * m->H * m->D) * es);
    a->kc = kb_try_alloc((size_t)(s->n_blocks * BLOCK * krow) * es);
    a->vc = kb_try_alloc((size_t)(s->n_blocks * BLOCK * krow) * es);
    int32_t *d_pos = kb_try_alloc((size_t)T * sizeof(int32_t)), *d_qs = kb_try_alloc((size_t)(S + 1) * sizeof(int32_t));
    int32_t *d_sl = kb_try_alloc((size_t)S * sizeof(int32_t)), *d_bt = kb_try_alloc((size_t)(S * nb) * sizeof(int32_t));
    a->meta.positions = d_pos, a->meta.query_start = d_qs, a->meta.seq_lens = d_sl, a->meta.block_tables = d_bt;
    void *ptrs[9] = {a->out, a->q, a->kc, a->vc, d_pos, d_qs, d_sl, d_bt, NULL};
    for (int i = 0; i < 9; i++) s->ptrs[i] = ptrs[i];
    for (int i = 0; i < 8; i++)
        if (!ptrs[i]) return -1;

    s->tables = malloc((size_t)(S * nb) * sizeof *s->tables);
    if (!s->tables) abort();
    for (int64_t i = 0; i < S * nb; i++) s->tables[i] = (int32_t)(i + 1);
    for (int64_t i = S * nb - 1; i > 0; i--) {
        int64_t j = (int64_t)kb_rand_below((uint64_t)(i + 1));
        int32_t t = s->tables[i];
        s->tables[i] = s->tables[j], s->tables[j] = t;
    }
    KB_CUDA(cudaMemcpy(d_bt, s->tables, (size_t)(S * nb) * sizeof *s->tables, cudaMemcpyHostToDevice));
    kb_pattern_init(&s->pq, -3.0f, 3.0f, c->dt); /* scores of std ~1: softmax neither flat nor one-hot */
    kb_pattern_init(&s->pk, -1.0f, 1.0f, c->dt);
    kb_pattern_init(&s->pv, -1.0f, 1.0f, c->dt);
    kb_fill(c, a->q, T * m->H * m->D, c->dt, &s->pq, 0);
    kb_fill(c, a->kc, s->n_blocks * BLOCK * krow, c->dt, &s->pk, 0);
    kb_fill(c, a->vc, s->n_blocks * BLOCK * krow, c->dt, &s->pv, 0);
    return 0;
}

/* The metadata arrays (host values) to the device, and the workspace. 0, or -1 when out of memory. */
static int attn_meta(attn_setup_t *s, const int32_t *pos, const int32_t *qs, const int32_t *sl) {
    attn_arg_t *a = &s->a;
    const int64_t T = a->meta.n_tokens, S = a->meta.n_seqs;
    KB_CUDA(cudaMemcpy((void *)a->meta.positions, pos, (size_t)T * sizeof *pos, cudaMemcpyHostToDevice));
    KB_CUDA(cudaMemcpy((void *)a->meta.query_start, qs, (size_t)(S + 1) * sizeof *qs, cudaMemcpyHostToDevice));
    KB_CUDA(cudaMemcpy((void *)a->meta.seq_lens, sl, (size_t)S * sizeof *sl, cudaMemcpyHostToDevice));
    a->ws_bytes = slk_attention_workspace_bytes(&a->meta, a->H, a->Hkv, a->D);
    if (a->ws_bytes) {
        a->ws = s->ptrs[8] = kb_try_alloc(a->ws_bytes);
        if (!a->ws) return -1;
    }
    return 0;
}

static void attn_free(attn_setup_t *s) {
    kb_free_all(s->ptrs, 9);
    free(s->tables);
    kb_pattern_free(&s->pq), kb_pattern_free(&s->pk), kb_pattern_free(&s->pv);
}

/* ---- decode ---------------------------------------------------------------------------- */

static void decode_case(kb_ctx_t *c, const kb_model_t *m, int64_t S, int64_t ctx) {
    const sl_dtype_t dt = c->dt;
    const int64_t H = m->H, Hkv = m->Hkv, D = m->D, krow = Hkv * D, nb = (ctx + BLOCK - 1) / BLOCK;
    char shape[96];
    snprintf(shape, sizeof shape, "S=%lld,ctx=%lld,H=%lld,Hkv=%lld,D=%lld", (long long)S, (long long)ctx, (long long)H,
             (long long)Hkv, (long long)D);
    kb_set_case("attn_decode", m->name, shape);
    attn_setup_t s = {0};
    s.a.meta = (sl_attn_meta_t){.n_tokens = (int32_t)S, .n_seqs = (int32_t)S, .max_blocks = (int32_t)nb,
                                .max_seq_len = (int32_t)ctx, .max_query_len = 1};
    int32_t *pos = malloc((size_t)S * sizeof *pos), *qs = malloc((size_t)(S + 1) * sizeof *qs);
    int32_t *sl = malloc((size_t)S * sizeof *sl);
    if (!pos || !qs || !sl) abort();
    for (int64_t i = 0; i < S; i++) pos[i] = (int32_t)(ctx - 1), qs[i] = (int32_t)i, sl[i] = (int32_t)ctx;
    qs[S] = (int32_t)S;
    if (attn_alloc(c, m, &s, S, S, nb) || attn_meta(&s, pos, qs, sl)) {
        attn_free(&s);
        free(pos), free(qs), free(sl);
        kb_skip(c, "attn_decode", m->name, shape, "out of device memory");
        return;
    }
    launch_attn(c, &s.a);

    float *kc = fvec(nb * BLOCK * krow), *vc = fvec(nb * BLOCK * krow), *q = fvec(H * D);
    float *want = fvec(H * D), *got = fvec(H * D);
    int32_t *ident = malloc((size_t)nb * sizeof *ident), qs1[2] = {0, 1};
    if (!ident) abort();
    for (int64_t i = 0; i < nb; i++) ident[i] = (int32_t)i;
    const int64_t check[2] = {0, S - 1};
    int ok = 1;
    char what[192];
    for (int i = 0; i < (S > 1 ? 2 : 1); i++) {
        int64_t seq = check[i];
        snprintf(what, sizeof what, "attn_decode %s %s sequence %lld", m->name, shape, (long long)seq);
        read_blocks(kc, s.tables + seq * nb, nb, krow, &s.pk);
        read_blocks(vc, s.tables + seq * nb, nb, krow, &s.pv);
        kb_pattern_read(q, seq * H * D, H * D, &s.pq, 0);
        cpu_attention(want, q, kc, vc, &pos[seq], qs1, ident, 1, nb, 1, H, Hkv, D, BLOCK, s.a.scale);
        kb_download(got, s.a.out, seq * H * D, H * D, dt);
        ok &= attn_close(what, got, want, H * D, dt, ctx, 0);
    }
    free(kc), free(vc), free(q), free(want), free(got), free(ident), free(pos), free(qs), free(sl);

    double us = kb_time_us(c, launch_attn, &s.a);
    kb_report(c, "attn_decode", m->name, shape, us, kb_bytes_attn_decode(S, ctx, H, Hkv, D, BLOCK, c->es),
              kb_flops_attn_decode(S, ctx, H, D), ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    attn_free(&s);
}

/* ---- prefill --------------------------------------------------------------------------- */

static void prefill_case(kb_ctx_t *c, const kb_model_t *m, int64_t T) {
    const sl_dtype_t dt = c->dt;
    const int64_t H = m->H, Hkv = m->Hkv, D = m->D, krow = Hkv * D, nb = (T + BLOCK - 1) / BLOCK;
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld,H=%lld,Hkv=%lld,D=%lld", (long long)T, (long long)H, (long long)Hkv,
             (long long)D);
    kb_set_case("attn_prefill", m->name, shape);
    attn_setup_t s = {0};
    s.a.meta = (sl_attn_meta_t){.n_tokens = (int32_t)T, .n_seqs = 1, .max_blocks = (int32_t)nb,
                                .max_seq_len = (int32_t)T, .max_query_len = (int32_t)T};
    int32_t *pos = malloc((size_t)T * sizeof *pos), qs[2] = {0, (int32_t)T}, sl[1] = {(int32_t)T};
    if (!pos) abort();
    for (int64_t t = 0; t < T; t++) pos[t] = (int32_t)t;
    if (attn_alloc(c, m, &s, 1, T, nb) || attn_meta(&s, pos, qs, sl)) {
        attn_free(&s);
        free(pos);
        kb_skip(c, "attn_prefill", m->name, shape, "out of device memory");
        return;
    }
    launch_attn(c, &s.a);

    /* The checked query rows as a sequence of their own: same cache, same positions. */
    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    float *kc = fvec(nb * BLOCK * krow), *vc = fvec(nb * BLOCK * krow), *q = fvec(n_rows * H * D);
    float *want = fvec(n_rows * H * D), *got = fvec(H * D);
    int32_t *ident = malloc((size_t)nb * sizeof *ident), qpos[4], qs1[2] = {0, (int32_t)n_rows};
    if (!ident) abort();
    for (int64_t i = 0; i < nb; i++) ident[i] = (int32_t)i;
    read_blocks(kc, s.tables, nb, krow, &s.pk);
    read_blocks(vc, s.tables, nb, krow, &s.pv);
    for (int i = 0; i < n_rows; i++) {
        kb_pattern_read(q + i * H * D, rows[i] * H * D, H * D, &s.pq, 0);
        qpos[i] = (int32_t)rows[i];
    }
    cpu_attention(want, q, kc, vc, qpos, qs1, ident, 1, nb, n_rows, H, Hkv, D, BLOCK, s.a.scale);
    char what[192];
    for (int i = 0; i < n_rows; i++) {
        snprintf(what, sizeof what, "attn_prefill %s %s query %lld", m->name, shape, (long long)rows[i]);
        kb_download(got, s.a.out, rows[i] * H * D, H * D, dt);
        ok &= attn_close(what, got, want + i * H * D, H * D, dt, rows[i] + 1, 1);
    }
    free(kc), free(vc), free(q), free(want), free(got), free(ident), free(pos);

    double us = kb_time_us(c, launch_attn, &s.a);
    kb_report(c, "attn_prefill", m->name, shape, us, kb_bytes_attn_prefill(T, H, Hkv, D, c->es),
              kb_flops_attn_prefill(T, H, D), ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    attn_free(&s);
}

void kb_bench_attention(kb_ctx_t *c, const kb_model_t *m) {
    int64_t Ss[4], Cs[4], Ts[4];
    int n_S = kb_decode_batches(c->opts.quick, Ss), n_C = kb_decode_contexts(c->opts.quick, Cs);
    int n_T = kb_prefill_lengths(c->opts.quick, Ts);
    if (kb_opts_wants(&c->opts, "attn_decode"))
        for (int j = 0; j < n_C; j++)
            for (int i = 0; i < n_S; i++) decode_case(c, m, Ss[i], Cs[j]);
    if (kb_opts_wants(&c->opts, "attn_prefill"))
        for (int i = 0; i < n_T; i++) prefill_case(c, m, Ts[i]);
}
