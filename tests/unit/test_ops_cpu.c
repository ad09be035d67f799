/* test_ops_cpu.c - each CPU op against a straightforward double-precision formula.
 *
 * Random inputs (seed printed), odd sizes that do not divide the vector width
 * or the token tile, every weight dtype. The references are written as the
 * textbook formulas, independent of the kernels' loop structure.
 */
#include <math.h>

#include "ops_cpu.h"
#include "servelab/core.h"
#include "test.h"

static const sl_dtype_t float_dtypes[] = {DTYPE_F32, DTYPE_F16, DTYPE_BF16};
static const char *dt_names[] = {"f32", "f16", "bf16"};

static float *rand_floats(int64_t n, float scale) {
    float *x = sl_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = scale * test_uniform();
    return x;
}

/* Random weights stored in `dt`, plus their exact fp32 values. */
static void *rand_weights(int64_t n, sl_dtype_t dt, float scale, float **exact) {
    float *x = rand_floats(n, scale);
    void *w = sl_malloc((size_t)n * dtype_size(dt));
    dtype_from_f32(w, x, dt, n);
    dtype_to_f32(x, w, dt, n);
    *exact = x;
    return w;
}

static void test_f16_round_trips_every_finite_value(void) {
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7c00u) == 0x7c00u && (h & 0x3ffu)) continue; /* nan */
        if (f32_to_f16(f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK_EQ_INT(bad, 0);
}

static void test_narrowing_rounds_to_nearest(void) {
    for (int i = 0; i < 100000; i++) {
        float x = test_uniform() * powf(2.0f, (float)(int)(test_rng() % 35) - 20.0f);
        float h = f16_to_f32(f32_to_f16(x)), b = bf16_to_f32(f32_to_bf16(x));
        /* Half a unit in the last place of each format (10 and 7 mantissa bits). */
        int e;
        frexpf(x, &e);
        double ulp_h = ldexp(1.0, (e - 11 < -24 ? -24 : e - 11)), ulp_b = ldexp(1.0, e - 8);
        if (fabs((double)h - x) > ulp_h / 2 * 1.000001 || fabs((double)b - x) > ulp_b / 2 * 1.000001) {
            CHECK(!"rounding error above half an ulp");
            break;
        }
    }
}

static void test_embed_gathers_rows(void) {
    int64_t V = 53, n = 37, T = 9;
    for (int d = 0; d < 3; d++) {
        float *exact;
        void *table = rand_weights(V * n, float_dtypes[d], 1.0f, &exact);
        int32_t ids[9];
        for (int t = 0; t < T; t++) ids[t] = (int32_t)(test_rng() % (uint64_t)V);
        float out[9 * 37];
        double ref[9 * 37];
        cpu_embed(out, table, float_dtypes[d], n, ids, T);
        for (int t = 0; t < T; t++)
            for (int i = 0; i < n; i++) ref[t * n + i] = exact[ids[t] * n + i];
        check_close(dt_names[d], out, ref, T * n, 0.0, 0.0);
        free(table);
        free(exact);
    }
}

static void test_rmsnorm_matches_double(void) {
    int64_t T = 7, n = 131;
    float eps = 1e-5f;
    for (int d = 0; d < 3; d++) {
        float *x = rand_floats(T * n, 3.0f), *wexact, *out = sl_malloc(T * n * sizeof(float));
        void *w = rand_weights(n, float_dtypes[d], 1.0f, &wexact);
        double *ref = sl_malloc(T * n * sizeof(double));
        for (int64_t t = 0; t < T; t++) {
            double ss = 0;
            for (int64_t i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
            double r = 1.0 / sqrt(ss / (double)n + eps);
            for (int64_t i = 0; i < n; i++) ref[t * n + i] = wexact[i] * x[t * n + i] * r;
        }
        cpu_rmsnorm(out, x, w, float_dtypes[d], T, n, eps);
        check_close(dt_names[d], out, ref, T * n, 1e-6, 1e-5);
        cpu_rmsnorm(x, x, w, float_dtypes[d], T, n, eps); /* in place */
        check_close("in place", x, ref, T * n, 1e-6, 1e-5);
        free(x), free(wexact), free(out), free(w), free(ref);
    }
}

static void test_linear_matches_double(void) {
    /* decode, small, and across the 32-token tile, which is also where the
     * OpenBLAS path starts (linear_cpu.c: T >= 32): both sides of it, and a
     * prefill-sized T. K and N are not multiples of 16, and N = 301 spans
     * several of the GEMM's panels with a ragged last one. */
    static const struct { int64_t T, N, K; } cases[] = {
        {1, 67, 131},    {2, 67, 131},    {33, 67, 131},   {70, 67, 131},   {8, 301, 1031},
        {31, 301, 1031}, {32, 301, 1031}, {33, 301, 1031}, {256, 301, 131}, {256, 67, 2053},
    };
    for (int d = 0; d < 3; d++) {
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            int64_t T = cases[ci].T, N = cases[ci].N, K = cases[ci].K;
            float *x = rand_floats(T * K, 1.0f), *wexact, *out = sl_malloc(T * N * sizeof(float));
            void *w = rand_weights(N * K, float_dtypes[d], 0.1f, &wexact);
            double *ref = sl_malloc(T * N * sizeof(double));
            for (int64_t t = 0; t < T; t++)
                for (int64_t o = 0; o < N; o++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++) acc += (double)x[t * K + k] * wexact[o * K + k];
                    ref[t * N + o] = acc;
                }
            cpu_linear(out, x, w, float_dtypes[d], T, N, K);
            char what[64];
            snprintf(what, sizeof what, "%s T=%lld N=%lld K=%lld", dt_names[d], (long long)T,
                     (long long)N, (long long)K);
            check_close(what, out, ref, T * N, 1e-5, 1e-5);
            free(x), free(wexact), free(out), free(w), free(ref);
        }
    }
}

static void test_rope_matches_rotate_half_formula(void) {
    int64_t T = 5, H = 4, Hkv = 2, D = 32;
    float theta = 10000.0f;
    for (int sc = 0; sc < 2; sc++) {
        float scale = sc ? 4.0f : 1.0f;
        float *q = rand_floats(T * H * D, 1.0f), *k = rand_floats(T * Hkv * D, 1.0f);
        double *rq = sl_malloc(T * H * D * sizeof(double)), *rk = sl_malloc(T * Hkv * D * sizeof(double));
        int32_t pos[5] = {0, 1, 17, 300, 1999};
        for (int64_t t = 0; t < T; t++)
            for (int64_t h = 0; h < H + Hkv; h++) {
                const float *x = h < H ? q + (t * H + h) * D : k + (t * Hkv + h - H) * D;
                double *r = h < H ? rq + (t * H + h) * D : rk + (t * Hkv + h - H) * D;
                for (int64_t i = 0; i < D; i++) {
                    int64_t j = i % (D / 2);
                    double ang = pos[t] * pow(theta, -2.0 * (double)j / (double)D) / scale;
                    double rot = i < D / 2 ? -x[i + D / 2] : x[i - D / 2]; /* rotate_half */
                    r[i] = x[i] * cos(ang) + rot * sin(ang);
                }
            }
        cpu_rope(q, k, pos, T, H, Hkv, D, theta, scale);
        /* fp32 angles at position 1999 differ from exact ones by ~1e-4 rad. */
        check_close(sc ? "q, linear scaling 4" : "q", q, rq, T * H * D, 5e-4, 1e-4);
        check_close(sc ? "k, linear scaling 4" : "k", k, rk, T * Hkv * D, 5e-4, 1e-4);
        free(q), free(k), free(rq), free(rk);
    }
}

/* cpu_rope keeps each thread's last angles (the layers of a step share their
 * positions): a call gives the bits of a first call whatever came before it,
 * when the positions, D, theta or the scale differ, and when they are the same. */
static void test_rope_reuses_angles_only_for_the_same_key(void) {
    const int64_t T = 3, H = 2, Hkv = 1, D = 16;
    int32_t pos_a[3] = {5, 6, 900}, pos_b[3] = {5, 6, 901};
    float *q0 = rand_floats(T * H * D, 1.0f), *k0 = rand_floats(T * Hkv * D, 1.0f);
    float want[4][3 * 2 * 16], got[3 * 2 * 16], k[3 * 16];
    const struct { const int32_t *pos; int64_t D; float theta, scale; } keys[4] = {
        {pos_a, D, 10000.0f, 1.0f}, {pos_b, D, 10000.0f, 1.0f}, {pos_a, D, 500000.0f, 1.0f}, {pos_a, D, 10000.0f, 8.0f}};
    int32_t other = 77;
    float q1[2 * 16], k1[16];
    for (int i = 0; i < 4; i++) { /* each key alone: after a call with another T */
        memcpy(q1, q0, sizeof q1), memcpy(k1, k0, sizeof k1);
        cpu_rope(q1, k1, &other, 1, H, Hkv, D, 10000.0f, 1.0f);
        memcpy(want[i], q0, sizeof want[i]), memcpy(k, k0, sizeof k);
        cpu_rope(want[i], k, keys[i].pos, T, H, Hkv, keys[i].D, keys[i].theta, keys[i].scale);
    }
    /* Keys 1-3 each differ from key 0 in one field: each right after key 0,
     * twice running, then key 0 again. */
    int same = 1;
    const int order[] = {0, 1, 1, 0, 2, 2, 0, 3, 3, 0, 0};
    for (size_t n = 0; n < sizeof order / sizeof order[0]; n++) {
        int i = order[n];
        memcpy(got, q0, sizeof got), memcpy(k, k0, sizeof k);
        cpu_rope(got, k, keys[i].pos, T, H, Hkv, keys[i].D, keys[i].theta, keys[i].scale);
        same &= !memcmp(got, want[i], sizeof got);
    }
    CHECK(same);
    CHECK(memcmp(want[0], want[1], sizeof want[0]) != 0 && memcmp(want[0], want[2], sizeof want[0]) != 0 &&
          memcmp(want[0], want[3], sizeof want[0]) != 0);
    /* A larger head dim and more tokens than held: the memo grows. */
    float *q2 = rand_floats(40 * 64, 1.0f), *k2 = rand_floats(40 * 64, 1.0f);
    int32_t pos2[40];
    for (int i = 0; i < 40; i++) pos2[i] = 3 * i;
    double *ref = sl_malloc(40 * 64 * sizeof(double));
    for (int64_t t = 0; t < 40; t++)
        for (int64_t i = 0; i < 64; i++) {
            int64_t j = i % 32;
            double ang = pos2[t] * pow(10000.0, -2.0 * (double)j / 64.0);
            const float *x = q2 + t * 64;
            ref[t * 64 + i] = x[i] * cos(ang) + (i < 32 ? -x[i + 32] : x[i - 32]) * sin(ang);
        }
    cpu_rope(q2, k2, pos2, 40, 1, 1, 64, 10000.0f, 1.0f);
    check_close("rope after the memo grew", q2, ref, 40 * 64, 5e-4, 1e-4);
    free(q0), free(k0), free(q2), free(k2), free(ref);
}

static void test_kv_write_places_rows_at_slots(void) {
    int64_t T = 4, Hkv = 2, D = 8, slots = 64;
    float *k = rand_floats(T * Hkv * D, 1.0f), *v = rand_floats(T * Hkv * D, 1.0f);
    float *kc = calloc((size_t)(slots * Hkv * D), sizeof(float));
    float *vc = calloc((size_t)(slots * Hkv * D), sizeof(float));
    int64_t map[4] = {17, 3, -1, 63}; /* -1: a padding token, not written */
    cpu_kv_write(kc, vc, k, v, map, T, Hkv, D);
    for (int64_t t = 0; t < T; t++) {
        if (map[t] < 0) continue;
        CHECK(!memcmp(kc + map[t] * Hkv * D, k + t * Hkv * D, Hkv * D * sizeof(float)));
        CHECK(!memcmp(vc + map[t] * Hkv * D, v + t * Hkv * D, Hkv * D * sizeof(float)));
    }
    int64_t written = 0;
    for (int64_t i = 0; i < slots * Hkv * D; i++) written += kc[i] != 0.0f;
    CHECK_EQ_INT(written, 3 * Hkv * D);
    /* Head-major blocks of 16 (the CPU backend's cache), bf16: head g of slot
     * s at row ((s / 16) Hkv + g) 16 + s % 16, each element rounded. */
    uint16_t *kb = calloc((size_t)(slots * Hkv * D), 2), *vb = calloc((size_t)(slots * Hkv * D), 2);
    cpu_kv_write_dt(kb, vb, DTYPE_BF16, KV_HEAD_MAJOR, 16, k, v, map, T, Hkv, D);
    int64_t placed = 0, nonzero = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t g = 0; map[t] >= 0 && g < Hkv; g++)
            for (int64_t d = 0; d < D; d++) {
                int64_t at = (((map[t] / 16) * Hkv + g) * 16 + map[t] % 16) * D + d;
                placed += kb[at] == f32_to_bf16(k[(t * Hkv + g) * D + d]) && vb[at] == f32_to_bf16(v[(t * Hkv + g) * D + d]);
            }
    for (int64_t i = 0; i < slots * Hkv * D; i++) nonzero += kb[i] != 0;
    CHECK_EQ_INT(placed, 3 * Hkv * D);
    CHECK_EQ_INT(nonzero, 3 * Hkv * D);
    free(k), free(v), free(kc), free(vc), free(kb), free(vb);
}

/* Three sequences in one flat batch: a prefill chunk that continues cached
 * context, a fresh prefill, and a decode; block tables are scattered. */
static void test_attention_matches_double_over_paged_blocks(void) {
    const int64_t H = 6, Hkv = 2, D = 16, B = 4, S = 3, max_blocks = 8, n_blocks = 32;
    int32_t ctx_len[3] = {13, 5, 21};  /* tokens in cache after the step */
    int32_t n_new[3] = {6, 5, 1};      /* tokens computed this step */
    int32_t tables[3 * 8];
    int32_t perm[32];
    for (int i = 0; i < 32; i++) perm[i] = i;
    for (int i = 31; i > 1; i--) { int j = 1 + (int)(test_rng() % (uint64_t)i); int tmp = perm[i]; perm[i] = perm[j]; perm[j] = tmp; }
    for (int i = 0; i < S * max_blocks; i++) tables[i] = perm[1 + i]; /* block 0 is the null block */
    int32_t qs[4] = {0, 6, 11, 12}, positions[12];
    int64_t T = 12;
    for (int s = 0, t = 0; s < S; s++)
        for (int i = 0; i < n_new[s]; i++) positions[t++] = ctx_len[s] - n_new[s] + i;
    float *kc = rand_floats(n_blocks * B * Hkv * D, 1.0f), *vc = rand_floats(n_blocks * B * Hkv * D, 1.0f);
    float *q = rand_floats(T * H * D, 1.0f), *out = sl_malloc(T * H * D * sizeof(float));
    double *ref = sl_malloc(T * H * D * sizeof(double)), scale = 1.0 / sqrt((double)D);
    for (int s = 0; s < S; s++)
        for (int64_t t = qs[s]; t < qs[s + 1]; t++)
            for (int64_t h = 0; h < H; h++) {
                int64_t kvh = h / (H / Hkv), n = positions[t] + 1;
                double *sc = sl_malloc((size_t)n * sizeof(double)), mx = -INFINITY, sum = 0;
                for (int64_t p = 0; p < n; p++) {
                    int64_t slot = (int64_t)tables[s * max_blocks + p / B] * B + p % B;
                    double dot = 0;
                    for (int64_t d = 0; d < D; d++) dot += (double)q[(t * H + h) * D + d] * kc[(slot * Hkv + kvh) * D + d];
                    sc[p] = dot * scale;
                    if (sc[p] > mx) mx = sc[p];
                }
                for (int64_t p = 0; p < n; p++) sum += (sc[p] = exp(sc[p] - mx));
                for (int64_t d = 0; d < D; d++) {
                    double acc = 0;
                    for (int64_t p = 0; p < n; p++) {
                        int64_t slot = (int64_t)tables[s * max_blocks + p / B] * B + p % B;
                        acc += sc[p] / sum * vc[(slot * Hkv + kvh) * D + d];
                    }
                    ref[(t * H + h) * D + d] = acc;
                }
                free(sc);
            }
    cpu_attention(out, q, kc, vc, positions, qs, tables, S, max_blocks, T, H, Hkv, D, B, (float)scale);
    check_close("attention", out, ref, T * H * D, 1e-5, 1e-4);
    free(kc), free(vc), free(q), free(out), free(ref);
}

static void test_silu_mul_add_gather_match_double(void) {
    int64_t n = 1001;
    float *g = rand_floats(n, 6.0f), *u = rand_floats(n, 2.0f), *out = sl_malloc(n * sizeof(float));
    double *ref = sl_malloc(n * sizeof(double));
    for (int64_t i = 0; i < n; i++) ref[i] = g[i] / (1.0 + exp(-(double)g[i])) * u[i];
    cpu_silu_mul(out, g, u, n);
    check_close("silu_mul", out, ref, n, 1e-6, 1e-5);
    for (int64_t i = 0; i < n; i++) ref[i] = (double)out[i] + g[i];
    cpu_add(out, g, n);
    check_close("add", out, ref, n, 0.0, 1e-7);
    int32_t idx[3] = {5, 0, 9};
    float rows[3 * 100];
    double rref[3 * 100];
    cpu_gather_rows(rows, out, idx, 3, 100);
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < 100; i++) rref[s * 100 + i] = out[idx[s] * 100 + i];
    check_close("gather_rows", rows, rref, 300, 0.0, 0.0);
    free(g), free(u), free(out), free(ref);
}

int main(void) {
    test_seed();
    RUN(test_f16_round_trips_every_finite_value);
    RUN(test_narrowing_rounds_to_nearest);
    RUN(test_embed_gathers_rows);
    RUN(test_rmsnorm_matches_double);
    RUN(test_linear_matches_double);
    RUN(test_rope_matches_rotate_half_formula);
    RUN(test_rope_reuses_angles_only_for_the_same_key);
    RUN(test_kv_write_places_rows_at_slots);
    RUN(test_attention_matches_double_over_paged_blocks);
    RUN(test_silu_mul_add_gather_match_double);
    return test_summary();
}
