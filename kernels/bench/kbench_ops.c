/* kbench_ops.c - the row kernels (rmsnorm, add_rmsnorm, silu_mul,
 * rope_kv_write, embed) of kernels/cuda at a model's shapes, for each token
 * count T of kb_token_counts.
 *
 * Each case fills its inputs with tiled random patterns (kbench.h), launches
 * once, and checks up to four rows (kb_sample_rows) against the CPU op run on
 * the same rounded inputs, rebuilt on the host from the patterns; the rows
 * are independent in all five ops, so a subset checks the real launch
 * without a CPU pass over 8192 rows. Tolerances are those of
 * tests/kernels/test_kernels_elementwise.c (units of one rounding of dt):
 * copies and the residual add exact; other 16-bit outputs 1; f32 rmsnorm
 * 2 sqrt(n) + 8, silu_mul 8, rope 4 (floored at 4 ulps of the largest
 * value). The in-place ops (add_rmsnorm's x, rope's q and k) keep changing
 * while they are timed; their cost does not depend on the values.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "ops_cpu.h"
#include "kbench.h"
#include "kernels.h"

#define EPS 1e-5f

static float *fvec(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) abort();
    return p;
}

static double norm_ulps(sl_dtype_t dt, int64_t n) { return dt == DTYPE_F32 ? 2.0 * sqrt((double)n) + 8.0 : 1.0; }

/* ---- rmsnorm and add_rmsnorm ------------------------------------------------------- */

typedef struct {
    void *x, *y, *w, *out;
    int64_t T, n;
    sl_dtype_t dt;
} norm_arg_t;

static void launch_rmsnorm(kb_ctx_t *c, void *arg) {
    norm_arg_t *a = arg;
    KB_LAUNCH(slk_rmsnorm(a->out, a->x, a->w, a->T, a->n, EPS, a->dt, c->stream));
}

static void launch_add_rmsnorm(kb_ctx_t *c, void *arg) {
    norm_arg_t *a = arg;
    KB_LAUNCH(slk_add_rmsnorm(a->x, a->out, a->y, a->w, a->T, a->n, EPS, a->dt, c->stream));
}

/* fused: x += y, out = rmsnorm(x) (add_rmsnorm); else out = rmsnorm(x). */
static void norm_case(kb_ctx_t *c, const kb_model_t *m, int64_t T, int fused) {
    const char *kernel = fused ? "add_rmsnorm" : "rmsnorm";
    const sl_dtype_t dt = c->dt;
    const int64_t n = m->hidden;
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld,n=%lld", (long long)T, (long long)n);
    kb_set_case(kernel, m->name, shape);
    const size_t bytes = (size_t)(T * n) * (size_t)c->es;
    norm_arg_t a = {kb_try_alloc(bytes), fused ? kb_try_alloc(bytes) : NULL, kb_try_alloc((size_t)n * (size_t)c->es),
                    kb_try_alloc(bytes), T, n, dt};
    void *ptrs[4] = {a.x, a.y, a.w, a.out};
    if (!a.x || (fused && !a.y) || !a.w || !a.out) {
        kb_free_all(ptrs, 4);
        kb_skip(c, kernel, m->name, shape, "out of device memory");
        return;
    }
    kb_pattern_t px, pw;
    kb_pattern_init(&px, -2.0f, 2.0f, dt);
    kb_pattern_init(&pw, -1.5f, 1.5f, dt);
    const int64_t y_off = 333333; /* y: the same pattern, shifted */
    kb_fill(c, a.x, T * n, dt, &px, 0);
    if (fused) kb_fill(c, a.y, T * n, dt, &px, y_off);
    kb_fill(c, a.w, n, dt, &pw, 0);
    if (fused) launch_add_rmsnorm(c, &a);
    else launch_rmsnorm(c, &a);

    float *w = fvec(n), *x = fvec(n), *y = fvec(n), *want = fvec(n), *got = fvec(n);
    kb_pattern_read(w, 0, n, &pw, 0);
    void *w_raw = kb_host_dt(w, n, dt);
    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    char what[160];
    for (int i = 0; i < n_rows; i++) {
        snprintf(what, sizeof what, "%s %s %s row %lld", kernel, m->name, shape, (long long)rows[i]);
        kb_pattern_read(x, rows[i] * n, n, &px, 0);
        if (fused) { /* the unfused sequence: add, store x (rounded), rmsnorm of the stored x */
            kb_pattern_read(y, rows[i] * n, n, &px, y_off);
            cpu_add(x, y, n);
            kb_round(x, n, dt);
            kb_download(got, a.x, rows[i] * n, n, dt);
            ok &= kb_close(what, got, x, n, dt, 0.0, 0.0);
        }
        cpu_rmsnorm(want, x, w_raw, dt, 1, n, EPS);
        kb_round(want, n, dt);
        kb_download(got, a.out, rows[i] * n, n, dt);
        ok &= kb_close(what, got, want, n, dt, norm_ulps(dt, n), 1e-3);
    }
    free(w), free(x), free(y), free(want), free(got), free(w_raw);
    kb_pattern_free(&px), kb_pattern_free(&pw);

    double us = kb_time_us(c, fused ? launch_add_rmsnorm : launch_rmsnorm, &a);
    double b = fused ? kb_bytes_add_rmsnorm(T, n, c->es) : kb_bytes_rmsnorm(T, n, c->es);
    kb_report(c, kernel, m->name, shape, us, b, 0.0, ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 4);
}

/* ---- silu_mul ------------------------------------------------------------------------- */

typedef struct {
    void *gate, *up, *out;
    int64_t n;
    sl_dtype_t dt;
} silu_arg_t;

static void launch_silu(kb_ctx_t *c, void *arg) {
    silu_arg_t *a = arg;
    KB_LAUNCH(slk_silu_mul(a->out, a->gate, a->up, a->n, a->dt, c->stream));
}

static void silu_case(kb_ctx_t *c, const kb_model_t *m, int64_t T) {
    const sl_dtype_t dt = c->dt;
    const int64_t row = m->inter, n = T * row;
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld,n=%lld", (long long)T, (long long)row);
    kb_set_case("silu_mul", m->name, shape);
    const size_t bytes = (size_t)n * (size_t)c->es;
    silu_arg_t a = {kb_try_alloc(bytes), kb_try_alloc(bytes), kb_try_alloc(bytes), n, dt};
    void *ptrs[3] = {a.gate, a.up, a.out};
    if (!a.gate || !a.up || !a.out) {
        kb_free_all(ptrs, 3);
        kb_skip(c, "silu_mul", m->name, shape, "out of device memory");
        return;
    }
    kb_pattern_t pg, pu;
    kb_pattern_init(&pg, -8.0f, 8.0f, dt);
    kb_pattern_init(&pu, -2.0f, 2.0f, dt);
    kb_fill(c, a.gate, n, dt, &pg, 0);
    kb_fill(c, a.up, n, dt, &pu, 0);
    launch_silu(c, &a);

    float *g = fvec(row), *u = fvec(row), *want = fvec(row), *got = fvec(row);
    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    char what[160];
    for (int i = 0; i < n_rows; i++) {
        snprintf(what, sizeof what, "silu_mul %s %s row %lld", m->name, shape, (long long)rows[i]);
        kb_pattern_read(g, rows[i] * row, row, &pg, 0);
        kb_pattern_read(u, rows[i] * row, row, &pu, 0);
        cpu_silu_mul(want, g, u, row);
        kb_round(want, row, dt);
        kb_download(got, a.out, rows[i] * row, row, dt);
        ok &= kb_close(what, got, want, row, dt, dt == DTYPE_F32 ? 8.0 : 1.0, 1e-3);
    }
    free(g), free(u), free(want), free(got);
    kb_pattern_free(&pg), kb_pattern_free(&pu);

    double us = kb_time_us(c, launch_silu, &a);
    kb_report(c, "silu_mul", m->name, shape, us, kb_bytes_silu_mul(n, c->es), 0.0, ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 3);
}

/* ---- rope_kv_write -------------------------------------------------------------------- */

typedef struct {
    void *q, *k, *v, *kc, *vc, *pos, *slots;
    int64_t T, H, Hkv, D;
    float theta;
    sl_dtype_t dt;
} rope_arg_t;

static void launch_rope(kb_ctx_t *c, void *arg) {
    rope_arg_t *a = arg;
    KB_LAUNCH(slk_rope_kv_write(a->q, a->k, a->v, a->kc, a->vc, a->pos, a->slots, a->T, a->H, a->Hkv, a->D, a->theta,
                                1.0f, a->dt, a->dt, c->stream));
}

/* T tokens at random positions below 8192, written to the slots of a paged
 * cache whose blocks of 16 are handed out in random order (block 0, the null
 * block, never). */
static void rope_case(kb_ctx_t *c, const kb_model_t *m, int64_t T) {
    const sl_dtype_t dt = c->dt;
    const int64_t H = m->H, Hkv = m->Hkv, D = m->D, B = 16, nb = (T + B - 1) / B, n_slots = (nb + 1) * B;
    const int64_t qrow = H * D, krow = Hkv * D;
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld,H=%lld,Hkv=%lld,D=%lld", (long long)T, (long long)H, (long long)Hkv,
             (long long)D);
    kb_set_case("rope_kv_write", m->name, shape);
    const size_t es = (size_t)c->es;
    rope_arg_t a = {kb_try_alloc((size_t)(T * qrow) * es), kb_try_alloc((size_t)(T * krow) * es),
                    kb_try_alloc((size_t)(T * krow) * es), kb_try_alloc((size_t)(n_slots * krow) * es),
                    kb_try_alloc((size_t)(n_slots * krow) * es), kb_try_alloc((size_t)T * sizeof(int32_t)),
                    kb_try_alloc((size_t)T * sizeof(int64_t)), T, H, Hkv, D, m->rope_theta, dt};
    void *ptrs[7] = {a.q, a.k, a.v, a.kc, a.vc, a.pos, a.slots};
    for (int i = 0; i < 7; i++)
        if (!ptrs[i]) {
            kb_free_all(ptrs, 7);
            kb_skip(c, "rope_kv_write", m->name, shape, "out of device memory");
            return;
        }
    int32_t *pos = malloc((size_t)T * sizeof *pos), *perm = malloc((size_t)nb * sizeof *perm);
    int64_t *slots = malloc((size_t)T * sizeof *slots);
    if (!pos || !perm || !slots) abort();
    for (int64_t i = 0; i < nb; i++) perm[i] = (int32_t)(i + 1);
    for (int64_t i = nb - 1; i > 0; i--) {
        int64_t j = (int64_t)kb_rand_below((uint64_t)(i + 1));
        int32_t t = perm[i];
        perm[i] = perm[j], perm[j] = t;
    }
    for (int64_t t = 0; t < T; t++) {
        pos[t] = (int32_t)kb_rand_below(8192);
        slots[t] = (int64_t)perm[t / B] * B + t % B;
    }
    KB_CUDA(cudaMemcpy(a.pos, pos, (size_t)T * sizeof *pos, cudaMemcpyHostToDevice));
    KB_CUDA(cudaMemcpy(a.slots, slots, (size_t)T * sizeof *slots, cudaMemcpyHostToDevice));
    kb_pattern_t pq, pv;
    kb_pattern_init(&pq, -2.0f, 2.0f, dt);
    kb_pattern_init(&pv, -2.0f, 2.0f, dt);
    const int64_t k_off = 424242;
    kb_fill(c, a.q, T * qrow, dt, &pq, 0);
    kb_fill(c, a.k, T * krow, dt, &pq, k_off);
    kb_fill(c, a.v, T * krow, dt, &pv, 0);
    launch_rope(c, &a);

    float *q = fvec(qrow), *k = fvec(krow), *v = fvec(krow), *kc = fvec(krow), *vc = fvec(krow), *got = fvec(qrow);
    const double ulps = dt == DTYPE_F32 ? 4.0 : 1.0, floor_frac = dt == DTYPE_F32 ? 1.0 : 1e-3;
    const int64_t slot0 = 0;
    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    char what[192];
    for (int i = 0; i < n_rows; i++) {
        int64_t t = rows[i];
        snprintf(what, sizeof what, "rope_kv_write %s %s token %lld", m->name, shape, (long long)t);
        kb_pattern_read(q, t * qrow, qrow, &pq, 0);
        kb_pattern_read(k, t * krow, krow, &pq, k_off);
        kb_pattern_read(v, t * krow, krow, &pv, 0);
        cpu_rope(q, k, &pos[t], 1, H, Hkv, D, m->rope_theta, 1.0f);
        kb_round(q, qrow, dt);
        kb_round(k, krow, dt);
        cpu_kv_write(kc, vc, k, v, &slot0, 1, Hkv, D); /* into a one-slot host cache */
        kb_download(got, a.q, t * qrow, qrow, dt);
        ok &= kb_close(what, got, q, qrow, dt, ulps, floor_frac);
        kb_download(got, a.k, t * krow, krow, dt);
        ok &= kb_close(what, got, k, krow, dt, ulps, floor_frac);
        kb_download(got, a.kc, slots[t] * krow, krow, dt);
        ok &= kb_close(what, got, kc, krow, dt, ulps, floor_frac);
        kb_download(got, a.vc, slots[t] * krow, krow, dt);
        ok &= kb_close(what, got, vc, krow, dt, 0.0, 0.0);
    }
    free(q), free(k), free(v), free(kc), free(vc), free(got), free(pos), free(perm), free(slots);
    kb_pattern_free(&pq), kb_pattern_free(&pv);

    double us = kb_time_us(c, launch_rope, &a);
    kb_report(c, "rope_kv_write", m->name, shape, us, kb_bytes_rope_kv_write(T, H, Hkv, D, c->es), 0.0,
              ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 7);
}

/* ---- embed ------------------------------------------------------------------------------- */

typedef struct {
    void *out, *table, *ids;
    int64_t T, n, V;
    sl_dtype_t dt;
} embed_arg_t;

static void launch_embed(kb_ctx_t *c, void *arg) {
    embed_arg_t *a = arg;
    KB_LAUNCH(slk_embed(a->out, a->table, a->ids, a->T, a->n, 0, a->V, a->dt, c->stream));
}

static void embed_case(kb_ctx_t *c, const kb_model_t *m, int64_t T) {
    const sl_dtype_t dt = c->dt;
    const int64_t n = m->hidden, V = m->V;
    char shape[96];
    snprintf(shape, sizeof shape, "T=%lld,n=%lld,V=%lld", (long long)T, (long long)n, (long long)V);
    kb_set_case("embed", m->name, shape);
    embed_arg_t a = {kb_try_alloc((size_t)(T * n) * (size_t)c->es), kb_try_alloc((size_t)(V * n) * (size_t)c->es),
                     kb_try_alloc((size_t)T * sizeof(int32_t)), T, n, V, dt};
    void *ptrs[3] = {a.out, a.table, a.ids};
    if (!a.out || !a.table || !a.ids) {
        kb_free_all(ptrs, 3);
        kb_skip(c, "embed", m->name, shape, "out of device memory");
        return;
    }
    int32_t *ids = malloc((size_t)T * sizeof *ids);
    if (!ids) abort();
    for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)kb_rand_below((uint64_t)V);
    KB_CUDA(cudaMemcpy(a.ids, ids, (size_t)T * sizeof *ids, cudaMemcpyHostToDevice));
    kb_pattern_t p;
    kb_pattern_init(&p, -1.0f, 1.0f, dt);
    kb_fill(c, a.table, V * n, dt, &p, 0);
    launch_embed(c, &a);

    float *row = fvec(n), *want = fvec(n), *got = fvec(n);
    const int32_t id0 = 0;
    int64_t rows[4];
    int n_rows = kb_sample_rows(T, rows), ok = 1;
    char what[160];
    for (int i = 0; i < n_rows; i++) {
        int64_t t = rows[i];
        snprintf(what, sizeof what, "embed %s %s token %lld (id %d)", m->name, shape, (long long)t, ids[t]);
        kb_pattern_read(row, (int64_t)ids[t] * n, n, &p, 0);
        void *raw = kb_host_dt(row, n, dt);
        cpu_embed(want, raw, dt, n, &id0, 1); /* the table's row ids[t], as a one-row table */
        free(raw);
        kb_download(got, a.out, t * n, n, dt);
        ok &= kb_close(what, got, want, n, dt, 0.0, 0.0);
    }
    free(row), free(want), free(got), free(ids);
    kb_pattern_free(&p);

    double us = kb_time_us(c, launch_embed, &a);
    kb_report(c, "embed", m->name, shape, us, kb_bytes_embed(T, n, c->es), 0.0, ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 3);
}

void kb_bench_elementwise(kb_ctx_t *c, const kb_model_t *m) {
    int64_t Ts[8];
    int n_T = kb_token_counts(c->opts.quick, Ts);
    for (int i = 0; i < n_T; i++) {
        if (kb_opts_wants(&c->opts, "rmsnorm")) norm_case(c, m, Ts[i], 0);
        if (kb_opts_wants(&c->opts, "add_rmsnorm")) norm_case(c, m, Ts[i], 1);
        if (kb_opts_wants(&c->opts, "silu_mul")) silu_case(c, m, Ts[i]);
        if (kb_opts_wants(&c->opts, "rope_kv_write")) rope_case(c, m, Ts[i]);
        if (kb_opts_wants(&c->opts, "embed")) embed_case(c, m, Ts[i]);
    }
}
