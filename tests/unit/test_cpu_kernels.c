/* test_cpu_kernels.c - the CPU kernels that come in ISA levels (cpu_isa.h),
 * each level against a double-precision reference, on this machine.
 *
 * Every level this CPU supports runs (SERVELAB_CPU_ISA, set here); the ones
 * it does not are named as not run. Shapes are odd on purpose: N not a
 * multiple of the 32-feature panel, K odd (a padded pair) and not a multiple
 * of the vector width, T of 1, a partial 8-row tile, several tiles.
 * References: the packed linears (bf16, fp32 and f16 weights) at the fp32-exact
 * levels are the exact sum of the weights times fp32 activations; bf16 at
 * avx512_bf16 the same sum with the activations rounded to bf16 first (what
 * vdpbf16ps multiplies); all to fp32 accumulation error. Attention: softmax(q k^T scale) v in double over
 * a paged cache, fp32 or bf16 (the reference reads the bf16 values).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "vec_exp.h"
#include "servelab/core.h"
#include "test.h"

static float *rand_floats(int64_t n, float scale) {
    float *x = sl_malloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = scale * test_uniform();
    return x;
}

/* Forces a level; 0 if this CPU does not have it. */
static int use_isa(cpu_isa_t isa) {
    if (isa > cpu_isa_detect()) return 0;
    setenv("SERVELAB_CPU_ISA", cpu_isa_name(isa), 1);
    cpu_isa_reload();
    return cpu_isa() == isa;
}

static void report_missing_levels(void) {
    for (int i = cpu_isa_detect() + 1; i < CPU_ISA_COUNT; i++)
        printf("  level %s: not on this CPU, not run\n", cpu_isa_name((cpu_isa_t)i));
}

static const struct { int64_t T, N, K; } linear_cases[] = {
    {1, 67, 131}, {3, 32, 2}, {8, 33, 1}, {9, 301, 1031}, {17, 64, 64}, {40, 31, 255}, {1, 8192, 96},
};

/* The packed linear of dtype dt (BF16, F32 or F16) at every level. */
static void packed_linear_at_every_level(sl_dtype_t dt) {
    int bf = dt == DTYPE_BF16, f16 = dt == DTYPE_F16;
    for (size_t ci = 0; ci < sizeof linear_cases / sizeof linear_cases[0]; ci++) {
        int64_t T = linear_cases[ci].T, N = linear_cases[ci].N, K = linear_cases[ci].K;
        float *x = rand_floats(T * K, 1.0f), *wf = rand_floats(N * K, 0.1f);
        uint16_t *w = sl_malloc((size_t)(N * K) * sizeof *w);
        for (int64_t i = 0; i < N * K; i++) w[i] = f16 ? f32_to_f16(wf[i]) : f32_to_bf16(wf[i]);
        void *packed = sl_malloc(bf ? cpu_bf16_packed_bytes(N, K) : f16 ? cpu_f16_packed_bytes(N, K)
                                                                           : cpu_f32_packed_bytes(N, K));
        if (bf) cpu_bf16_pack(packed, w, N, K);
        else if (f16) cpu_f16_pack(packed, w, N, K);
        else cpu_f32_pack(packed, wf, N, K);
        float *out = sl_malloc((size_t)(T * N) * sizeof *out), *first = sl_malloc((size_t)(T * N) * sizeof *first);
        double *ref = sl_malloc((size_t)(T * N) * sizeof *ref);
        int have_first = 0;
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            if (!use_isa((cpu_isa_t)isa)) continue;
            int rounds = bf && isa == CPU_ISA_AVX512_BF16;
            for (int64_t t = 0; t < T; t++)
                for (int64_t n = 0; n < N; n++) {
                    double acc = 0;
                    for (int64_t k = 0; k < K; k++) {
                        float xv = rounds ? bf16_to_f32(f32_to_bf16(x[t * K + k])) : x[t * K + k];
                        acc += (double)xv * (bf ? bf16_to_f32(w[n * K + k]) : f16 ? f16_to_f32(w[n * K + k]) : wf[n * K + k]);
                    }
                    ref[t * N + n] = acc;
                }
            memset(out, 0xff, (size_t)(T * N) * sizeof *out);
            if (bf) cpu_linear_bf16_packed(out, x, packed, T, N, K);
            else if (f16) cpu_linear_f16_packed(out, x, packed, T, N, K);
            else cpu_linear_f32_packed(out, x, packed, T, N, K);
            char what[96];
            snprintf(what, sizeof what, "%s %s T=%lld N=%lld K=%lld", dtype_name(dt), cpu_isa_name((cpu_isa_t)isa),
                     (long long)T, (long long)N, (long long)K);
            check_close(what, out, ref, T * N, 1e-5, 1e-5);
            /* The fp32-exact levels compute the same FMA chain per output: equal bits. */
            if (!rounds && have_first) CHECK(!memcmp(out, first, (size_t)(T * N) * sizeof *out));
            if (!rounds && !have_first) memcpy(first, out, (size_t)(T * N) * sizeof *out), have_first = 1;
            /* A row's outputs do not depend on the other rows of the call. */
            float *one = sl_malloc((size_t)N * sizeof *one);
            for (int64_t t = 0; t < T; t += T > 3 ? T / 3 : 1) {
                if (bf) cpu_linear_bf16_packed(one, x + t * K, packed, 1, N, K);
                else if (f16) cpu_linear_f16_packed(one, x + t * K, packed, 1, N, K);
                else cpu_linear_f32_packed(one, x + t * K, packed, 1, N, K);
                CHECK(!memcmp(one, out + t * N, (size_t)N * sizeof *one));
            }
            free(one);
        }
        free(x), free(wf), free(w), free(packed), free(out), free(first), free(ref);
    }
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
    report_missing_levels();
}

static void test_packed_bf16_linear_matches_double_at_every_level(void) { packed_linear_at_every_level(DTYPE_BF16); }
static void test_packed_f32_linear_matches_double_at_every_level(void) { packed_linear_at_every_level(DTYPE_F32); }
static void test_packed_f16_linear_matches_double_at_every_level(void) { packed_linear_at_every_level(DTYPE_F16); }

/* The packed layout itself: feature n, column k of the weight is the low
 * (k even) or high (k odd) half of packed[n / 32][k / 2][n % 32]; padding is 0. */
static void test_pack_layout(void) {
    int64_t N = 45, K = 7, kp2 = 4;
    uint16_t w[45 * 7];
    for (int64_t i = 0; i < N * K; i++) w[i] = (uint16_t)(i + 1);
    CHECK_EQ_INT((int)cpu_bf16_packed_bytes(N, K), 2 * 32 * 4 * 4);
    uint32_t *p = sl_malloc(cpu_bf16_packed_bytes(N, K));
    cpu_bf16_pack(p, w, N, K);
    int bad = 0;
    for (int64_t n = 0; n < 64; n++)
        for (int64_t k = 0; k < 2 * kp2; k++) {
            uint32_t u = p[(n / 32 * kp2 + k / 2) * 32 + n % 32];
            uint16_t got = k % 2 ? (uint16_t)(u >> 16) : (uint16_t)u;
            uint16_t want = n < N && k < K ? w[n * K + k] : 0;
            bad += got != want;
        }
    CHECK_EQ_INT(bad, 0);
    free(p);
}

static void check_attention_at_every_level(int64_t H, int64_t Hkv, cpu_kv_layout_t layout) {
    static const int64_t dims[] = {16, 20, 24, 64};
    const int64_t B = 16, S = 3, max_blocks = 12, n_blocks = 40;
    int32_t ctx_len[3] = {150, 5, 97}, n_new[3] = {70, 5, 1};
    int32_t tables[3 * 12], perm[40];
    for (int i = 0; i < 40; i++) perm[i] = i;
    for (int i = 39; i > 1; i--) {
        int j = 1 + (int)(test_rng() % (uint64_t)i), tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    for (int i = 0; i < S * max_blocks; i++) tables[i] = perm[1 + i % 39];
    int32_t qs[4] = {0, 70, 75, 76}, positions[76];
    int64_t T = 76;
    for (int s = 0, t = 0; s < S; s++)
        for (int i = 0; i < n_new[s]; i++) positions[t++] = ctx_len[s] - n_new[s] + i;
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++) {
        int64_t D = dims[di], n_slots = n_blocks * B * Hkv * D;
        float *kc = rand_floats(n_slots, 1.0f), *vc = rand_floats(n_slots, 1.0f), *q = rand_floats(T * H * D, 1.0f);
        uint16_t *kb = sl_malloc((size_t)n_slots * 2), *vb = sl_malloc((size_t)n_slots * 2);
        for (int64_t i = 0; i < n_slots; i++) kb[i] = f32_to_bf16(kc[i]), vb[i] = f32_to_bf16(vc[i]);
        float *out = sl_malloc((size_t)(T * H * D) * sizeof *out);
        double *ref = sl_malloc((size_t)(T * H * D) * sizeof *ref), scale = 1.0 / sqrt((double)D);
        for (int bf = 0; bf < 2; bf++) {
            for (int s = 0; s < S; s++)
                for (int64_t t = qs[s]; t < qs[s + 1]; t++)
                    for (int64_t h = 0; h < H; h++) {
                        int64_t g = h / (H / Hkv), n = positions[t] + 1;
                        double *sc = sl_malloc((size_t)n * sizeof *sc), mx = -INFINITY, sum = 0;
                        for (int64_t p = 0; p < n; p++) {
                            int64_t slot = (int64_t)tables[s * max_blocks + p / B] * B + p % B;
                            int64_t o = cpu_kv_row(layout, slot, g, Hkv, B) * D;
                            double dot = 0;
                            for (int64_t d = 0; d < D; d++)
                                dot += (double)q[(t * H + h) * D + d] * (bf ? bf16_to_f32(kb[o + d]) : kc[o + d]);
                            sc[p] = dot * scale;
                            mx = sc[p] > mx ? sc[p] : mx;
                        }
                        for (int64_t p = 0; p < n; p++) sum += (sc[p] = exp(sc[p] - mx));
                        for (int64_t d = 0; d < D; d++) {
                            double acc = 0;
                            for (int64_t p = 0; p < n; p++) {
                                int64_t slot = (int64_t)tables[s * max_blocks + p / B] * B + p % B;
                                int64_t o = cpu_kv_row(layout, slot, g, Hkv, B) * D;
                                acc += sc[p] / sum * (bf ? bf16_to_f32(vb[o + d]) : vc[o + d]);
                            }
                            ref[(t * H + h) * D + d] = acc;
                        }
                        free(sc);
                    }
            for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
                if (!use_isa((cpu_isa_t)isa)) continue;
                memset(out, 0xff, (size_t)(T * H * D) * sizeof *out);
                cpu_attention_kv(out, q, bf ? (const void *)kb : kc, bf ? (const void *)vb : vc,
                                 bf ? DTYPE_BF16 : DTYPE_F32, layout, positions, qs, tables, S, max_blocks, T, H, Hkv,
                                 D, B, (float)scale);
                char what[96];
                snprintf(what, sizeof what, "%s H=%lld/%lld D=%lld kv %s %s", cpu_isa_name((cpu_isa_t)isa),
                         (long long)H, (long long)Hkv, (long long)D, bf ? "bf16" : "f32",
                         layout == KV_SLOT_MAJOR ? "slot-major" : "head-major");
                check_close(what, out, ref, T * H * D, 1e-5, 1e-4);
                /* Each token of the 70-token chunk alone, as a decode step
                 * reads it (a tile of one token, H / Hkv rows): the same bits. */
                float *one = sl_malloc((size_t)(H * D) * sizeof *one);
                int32_t qs1[2] = {0, 1};
                int same = 1;
                for (int64_t t = 0; t < 70; t += 23) {
                    cpu_attention_kv(one, q + t * H * D, bf ? (const void *)kb : kc, bf ? (const void *)vb : vc,
                                     bf ? DTYPE_BF16 : DTYPE_F32, layout, positions + t, qs1, tables, 1, max_blocks, 1,
                                     H, Hkv, D, B, (float)scale);
                    same &= !memcmp(one, out + t * H * D, (size_t)(H * D) * sizeof *one);
                }
                CHECK(same);
                free(one);
            }
        }
        free(kc), free(vc), free(q), free(kb), free(vb), free(out), free(ref);
    }
}

static void test_attention_matches_double_at_every_level(void) {
    /* D = 20 gathers element by element, the others eight lanes at a time;
     * D = 20 and 24 pad the accumulators to 16 lanes; contexts cross the
     * 64-key block and the 32-token tile. A token alone (a decode step) has
     * its KV group's rows only, which D = 16 and 64 read from the cache in
     * place (attend_direct) and the others gather as a prefill does: its
     * bits must be the prefill's either way. 3 query heads per KV head (a
     * prefill's rows go 6 at a time; the 5- and 1-token sequences end on 3),
     * then one (MHA: a decode item is one row). Both cache layouts: the
     * reference finds each row through cpu_kv_row. */
    for (int layout = KV_SLOT_MAJOR; layout <= KV_HEAD_MAJOR; layout++) {
        check_attention_at_every_level(6, 2, (cpu_kv_layout_t)layout);
        check_attention_at_every_level(5, 5, (cpu_kv_layout_t)layout);
    }
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
    report_missing_levels();
}

/* An fp8 KV cache (--kv-cache-dtype fp8 / fp8_e5m2): kv_write stores each
 * element as f32_to_fp8 rounds it, and attention over it gives the bits of
 * attention over an fp32 cache holding the same (widened) values, at every
 * level and in both layouts: the fp8 rows are gathered through the table, the fp32 ones read in
 * place or gathered, through the same operations. */
static void test_attention_fp8_kv_is_the_fp32_kv_of_its_values(void) {
    static const sl_dtype_t fp8[] = {DTYPE_F8_E4M3, DTYPE_F8_E5M2};
    const int64_t H = 4, Hkv = 2, D = 64, B = 16, max_blocks = 8, n_blocks = 20, T = 40;
    int32_t tables[2 * 8], qs[3] = {0, 39, 40}, positions[40];
    for (int i = 0; i < 16; i++) tables[i] = 1 + (i * 7) % 19;
    for (int t = 0; t < 39; t++) positions[t] = 60 + t; /* a 39-token chunk after 60 cached keys */
    positions[39] = 100;                            /* a decode at position 100 */
    int64_t n_slots = n_blocks * B, row = Hkv * D;
    int64_t *slots = sl_malloc((size_t)n_slots * sizeof *slots);
    for (int64_t i = 0; i < n_slots; i++) slots[i] = i;
    float *k = rand_floats(n_slots * row, 3.0f), *v = rand_floats(n_slots * row, 3.0f), *q = rand_floats(T * H * D, 1.0f);
    k[5] = 1000.0f, v[7] = -1e6f; /* past e4m3's largest finite value (448), and v[7] past e5m2's (57344) */
    uint8_t *k8 = sl_malloc((size_t)(n_slots * row)), *v8 = sl_malloc((size_t)(n_slots * row));
    float *kw = sl_malloc((size_t)(n_slots * row) * sizeof *kw), *vw = sl_malloc((size_t)(n_slots * row) * sizeof *vw);
    float *a = sl_malloc((size_t)(T * H * D) * sizeof *a), *b = sl_malloc((size_t)(T * H * D) * sizeof *b);
    for (size_t c = 0; c < 4; c++) {
        const size_t f = c % 2;
        const cpu_kv_layout_t layout = c < 2 ? KV_SLOT_MAJOR : KV_HEAD_MAJOR;
        cpu_kv_write_dt(k8, v8, fp8[f], layout, B, k, v, slots, n_slots, Hkv, D);
        int stored = 1;
        for (int64_t i = 0; i < n_slots * row; i++) {
            int64_t at = cpu_kv_row(layout, i / row, i % row / D, Hkv, B) * D + i % D;
            uint8_t ek = fp8[f] == DTYPE_F8_E4M3 ? f32_to_fp8_e4m3(k[i]) : f32_to_fp8_e5m2(k[i]);
            uint8_t ev = fp8[f] == DTYPE_F8_E4M3 ? f32_to_fp8_e4m3(v[i]) : f32_to_fp8_e5m2(v[i]);
            stored &= k8[at] == ek && v8[at] == ev;
        }
        CHECK(stored);
        const int64_t at5 = cpu_kv_row(layout, 0, 0, Hkv, B) * D + 5, at7 = cpu_kv_row(layout, 0, 0, Hkv, B) * D + 7;
        CHECK(fp8_table(fp8[f])[v8[at7]] == (fp8[f] == DTYPE_F8_E4M3 ? -448.0f : -57344.0f)); /* saturated */
        if (fp8[f] == DTYPE_F8_E4M3) CHECK(fp8_table(fp8[f])[k8[at5]] == 448.0f);
        dtype_to_f32(kw, k8, fp8[f], n_slots * row);
        dtype_to_f32(vw, v8, fp8[f], n_slots * row);
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            if (!use_isa((cpu_isa_t)isa)) continue;
            cpu_attention_kv(a, q, k8, v8, fp8[f], layout, positions, qs, tables, 2, max_blocks, T, H, Hkv, D, B,
                             0.125f);
            cpu_attention_kv(b, q, kw, vw, DTYPE_F32, layout, positions, qs, tables, 2, max_blocks, T, H, Hkv, D, B,
                             0.125f);
            if (memcmp(a, b, (size_t)(T * H * D) * sizeof *a) != 0) {
                fprintf(stderr, "  %s %s %s: fp8 attention differs from fp32 attention on its values\n",
                        dtype_name(fp8[f]), cpu_isa_name((cpu_isa_t)isa),
                        layout == KV_SLOT_MAJOR ? "slot-major" : "head-major");
                test_cur_failed = 1;
            }
        }
    }
    free(slots), free(k), free(v), free(q), free(k8), free(v8), free(kw), free(vw), free(a), free(b);
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
}

/* Linears of one input as one op (cpu_linears_*_packed): each part's outputs
 * have the bits of its own call, for every packed dtype and level, with
 * widths that leave partial panels (the job's panels cross parts mid-chunk)
 * and an odd K (the fp32 levels' padded pairs). */
static void test_packed_linears_equal_separate_calls_at_every_level(void) {
    const int64_t Ns[3] = {100, 32, 45}, Ks[2] = {96, 131}, Ts[3] = {1, 5, 17};
    const sl_dtype_t dts[3] = {DTYPE_BF16, DTYPE_F32, DTYPE_F16};
    for (int di = 0; di < 3; di++)
        for (int ki = 0; ki < 2; ki++) {
            const int64_t K = Ks[ki];
            const sl_dtype_t dt = dts[di];
            void *packed[3];
            for (int j = 0; j < 3; j++) {
                float *w = rand_floats(Ns[j] * K, 0.5f);
                void *wd = sl_malloc((size_t)(Ns[j] * K) * dtype_size(dt));
                dtype_from_f32(wd, w, dt, Ns[j] * K);
                size_t bytes = dt == DTYPE_BF16 ? cpu_bf16_packed_bytes(Ns[j], K)
                               : dt == DTYPE_F32 ? cpu_f32_packed_bytes(Ns[j], K) : cpu_f16_packed_bytes(Ns[j], K);
                packed[j] = sl_malloc(bytes);
                if (dt == DTYPE_BF16) cpu_bf16_pack(packed[j], wd, Ns[j], K);
                else if (dt == DTYPE_F32) cpu_f32_pack(packed[j], wd, Ns[j], K);
                else cpu_f16_pack(packed[j], wd, Ns[j], K);
                free(w), free(wd);
            }
            for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
                if (!use_isa((cpu_isa_t)isa)) continue;
                for (int ti = 0; ti < 3; ti++) {
                    const int64_t T = Ts[ti];
                    float *x = rand_floats(T * K, 1.0f), *want[3], *got[3];
                    cpu_linear_part_t parts[3];
                    for (int j = 0; j < 3; j++) {
                        want[j] = sl_malloc((size_t)(T * Ns[j]) * sizeof(float));
                        got[j] = sl_malloc((size_t)(T * Ns[j]) * sizeof(float));
                        memset(got[j], 0xff, (size_t)(T * Ns[j]) * sizeof(float));
                        if (dt == DTYPE_BF16) cpu_linear_bf16_packed(want[j], x, packed[j], T, Ns[j], K);
                        else if (dt == DTYPE_F32) cpu_linear_f32_packed(want[j], x, packed[j], T, Ns[j], K);
                        else cpu_linear_f16_packed(want[j], x, packed[j], T, Ns[j], K);
                        parts[j] = (cpu_linear_part_t){got[j], packed[j], Ns[j]};
                    }
                    if (dt == DTYPE_BF16) cpu_linears_bf16_packed(parts, 3, x, T, K);
                    else if (dt == DTYPE_F32) cpu_linears_f32_packed(parts, 3, x, T, K);
                    else cpu_linears_f16_packed(parts, 3, x, T, K);
                    for (int j = 0; j < 3; j++) {
                        if (memcmp(got[j], want[j], (size_t)(T * Ns[j]) * sizeof(float)) != 0) {
                            fprintf(stderr, "  %s %s K=%lld T=%lld part %d: differs from its own call\n",
                                    dtype_name(dt), cpu_isa_name((cpu_isa_t)isa), (long long)K, (long long)T, j);
                            test_cur_failed = 1;
                        }
                        free(want[j]), free(got[j]);
                    }
                    free(x);
                }
            }
            for (int j = 0; j < 3; j++) free(packed[j]);
        }
    report_missing_levels();
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
}

/* exp_f32 (vec_exp.h) within 2 ulp of e^x over its whole finite range (a
 * sweep of 2^20 points and the values around the clamps), and the IEEE
 * cases: NaN stays NaN, overflow is +inf, far below is 0. */
static void test_exp_f32_within_2_ulp(void) {
    double worst = 0.0;
    float worst_x = 0.0f;
    for (int i = 0; i <= (1 << 20); i++) {
        float x = -86.0f + (88.72f + 86.0f) * (float)i / (float)(1 << 20);
        double want = exp((double)x), got = exp_f32(x);
        float w = (float)want;
        double ulp = (double)(nextafterf(w, INFINITY) - w), err = fabs(got - want) / ulp;
        if (err > worst) worst = err, worst_x = x;
    }
    printf("  exp_f32: worst %.2f ulp at x = %.6g\n", worst, (double)worst_x);
    CHECK(worst <= 2.0);
    CHECK(isnan(exp_f32(NAN)));
    CHECK(exp_f32(INFINITY) == INFINITY && exp_f32(88.73f) == INFINITY && exp_f32(1e30f) == INFINITY);
    CHECK(exp_f32(-INFINITY) == 0.0f && exp_f32(-86.5f) == 0.0f && exp_f32(-1e30f) == 0.0f);
    CHECK(exp_f32(0.0f) == 1.0f && exp_f32(-0.0f) == 1.0f);
    CHECK(exp_f32(88.72f) > 3.39e38f && exp_f32(88.72f) < INFINITY);
    for (float x = -86.0f; x <= 0.0f; x += 0.37f) CHECK(exp_neg(x) == exp_f32(x) || fabsf(exp_neg(x) - exp_f32(x)) <= 2e-7f * exp_f32(x));
}

/* silu_mul gives the same bits at every level (one source, no contraction),
 * in place as the MLP calls it, on lengths that leave vector tails. */
static void test_silu_mul_same_bits_at_every_level(void) {
    for (int64_t n = 1; n <= 2100; n += 131) {
        float *g = rand_floats(n, 12.0f), *u = rand_floats(n, 2.0f), *want = sl_malloc((size_t)n * sizeof(float));
        g[0] = NAN;
        if (n > 2) g[1] = 95.0f, g[2] = -95.0f;
        use_isa(CPU_ISA_PORTABLE);
        cpu_silu_mul(want, g, u, n);
        for (int isa = CPU_ISA_AVX2; isa < CPU_ISA_COUNT; isa++) {
            if (!use_isa((cpu_isa_t)isa)) continue;
            float *got = sl_malloc((size_t)n * sizeof(float));
            memcpy(got, g, (size_t)n * sizeof(float));
            cpu_silu_mul(got, got, u, n);
            CHECK(memcmp(got, want, (size_t)n * sizeof(float)) == 0);
            free(got);
        }
        CHECK(isnan(want[0]));
        if (n > 2) CHECK(want[1] == 95.0f * u[1] && want[2] == 0.0f * u[2]);
        free(g), free(u), free(want);
    }
    report_missing_levels();
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
}

int main(void) {
    test_seed();
    printf("  this CPU: %s\n", cpu_isa_name(cpu_isa_detect()));
    RUN(test_pack_layout);
    RUN(test_packed_bf16_linear_matches_double_at_every_level);
    RUN(test_packed_f32_linear_matches_double_at_every_level);
    RUN(test_packed_f16_linear_matches_double_at_every_level);
    RUN(test_attention_matches_double_at_every_level);
    RUN(test_attention_fp8_kv_is_the_fp32_kv_of_its_values);
    RUN(test_packed_linears_equal_separate_calls_at_every_level);
    RUN(test_exp_f32_within_2_ulp);
    RUN(test_silu_mul_same_bits_at_every_level);
    return test_summary();
}
