/* test_awq_kernels.c - the CPU AWQ 4-bit linear (kernels/cpu/linear_awq.c):
 * the checkpoint's nibble order and dequantization by hand, then the packed
 * op at every ISA level this CPU supports against cpu_linear on the
 * dequantized weights.
 *
 * The budget per output is 1e-5 * sum_k |x_k| |w_nk|, fp32 accumulation error
 * in any order. avx512_bf16 rounds the activations to bf16 first, so its
 * reference is cpu_linear on the bf16-rounded x (and its budget uses those
 * x); avx2 quantizes them to int16 per group, so its reference is cpu_linear
 * on the x it reads (cpu_awq_avx2_reads, itself checked to be within 2^-15
 * of each group's largest |x|). portable and avx512 must also give the same
 * bits as each other (the weights are exact and each output is one FMA chain
 * in k order), while avx2 and avx512_bf16 factor the scale and zero out of
 * each group and have bits of their own, within the same budget. At every
 * level a row of a T-row call gives the same bits as that row alone. Shapes: N not a
 * multiple of the 64-column panel, K and G such that groups of 32..K and
 * G = K both occur, T across the 4-row tile; two extra shapes with G not a
 * multiple of 8 (a group's last block partial).
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/dtype.h"
#include "servelab/safetensors.h"
#include "test.h"

/* Forces a level; 0 if this CPU does not have it. */
static int use_isa(cpu_isa_t isa) {
    if (isa > cpu_isa_detect()) return 0;
    setenv("SERVELAB_CPU_ISA", cpu_isa_name(isa), 1);
    cpu_isa_reload();
    return cpu_isa() == isa;
}

static void restore_isa(void) {
    unsetenv("SERVELAB_CPU_ISA");
    cpu_isa_reload();
    for (int i = cpu_isa_detect() + 1; i < CPU_ISA_COUNT; i++)
        printf("  level %s: not on this CPU, not run\n", cpu_isa_name((cpu_isa_t)i));
}

/* out(T, N) by the packed op from the checkpoint's tensors. */
static void awq_linear(float *out, const float *x, const int32_t *qw, const int32_t *qz, const uint16_t *sc,
                       int64_t T, int64_t N, int64_t K, int64_t G) {
    void *packed = sl_malloc(cpu_awq_packed_bytes(N, K, G));
    cpu_awq_pack(packed, qw, qz, sc, N, K, G);
    cpu_linear_awq_packed(out, x, packed, T, N, K, G);
    free(packed);
}

/* One int32 with nibbles 0..7 (nibble i = i): column AWQ order[i] gets i, so
 * columns 0..7 hold 0, 4, 1, 5, 2, 6, 3, 7. Zero point 0, scale 1, x = 1. */
static void test_awq_nibble_order_maps_to_known_columns(void) {
    const int64_t N = 8, K = 8, G = 8;
    int32_t qw[8] = {0}, qz[1] = {0};
    uint16_t sc[8];
    qw[0] = 0x76543210; /* k = 0 */
    for (int n = 0; n < 8; n++) sc[n] = 0x3c00; /* 1.0 */
    const float want[8] = {0, 4, 1, 5, 2, 6, 3, 7};
    float w[64];
    cpu_awq_dequantize(w, qw, qz, sc, N, K, G);
    int bad = 0;
    for (int n = 0; n < 8; n++)
        for (int k = 0; k < 8; k++) bad += w[n * K + k] != (k == 0 ? want[n] : 0.0f);
    CHECK_EQ_INT(bad, 0);
    float x[8] = {1, 0, 0, 0, 0, 0, 0, 0}, out[8];
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!use_isa((cpu_isa_t)isa)) continue;
        awq_linear(out, x, qw, qz, sc, 1, N, K, G);
        CHECK(!memcmp(out, want, sizeof want));
    }
    restore_isa();
}

/* N = 8, K = 2, G = 1 (a scale and zero per k), values worked by hand:
 *   k = 0: q = 9 everywhere, z = 8 everywhere, s = 0.5      -> w = 0.5
 *   k = 1: q = 0x F0000003 (col 0: 3, col 7: 15), z = 0x21 (col 0: 1,
 *          col 2: 2), s = 2 but -0.25 at col 2             -> w[0] = 4,
 *          w[2] = (0 - 2) * -0.25 = 0.5, w[7] = 30, the rest 0. */
static void test_awq_dequantize_small_example_by_hand(void) {
    const int64_t N = 8, K = 2, G = 1;
    int32_t qw[2] = {(int32_t)0x99999999u, (int32_t)0xf0000003u}, qz[2] = {(int32_t)0x88888888u, 0x21};
    uint16_t sc[16];
    for (int n = 0; n < 8; n++) sc[n] = 0x3800, sc[8 + n] = 0x4000; /* 0.5, 2.0 */
    sc[8 + 2] = 0xb400;                                              /* -0.25 */
    const float want[8][2] = {{0.5f, 4}, {0.5f, 0}, {0.5f, 0.5f}, {0.5f, 0}, {0.5f, 0}, {0.5f, 0}, {0.5f, 0}, {0.5f, 30}};
    float w[16];
    cpu_awq_dequantize(w, qw, qz, sc, N, K, G);
    CHECK(!memcmp(w, want, sizeof want));
    /* The op on it: out = w[n][0] + 10 w[n][1]. */
    float x[2] = {1, 10}, out[8], expect[8];
    for (int n = 0; n < 8; n++) expect[n] = want[n][0] + 10 * want[n][1];
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!use_isa((cpu_isa_t)isa)) continue;
        awq_linear(out, x, qw, qz, sc, 1, N, K, G);
        CHECK(!memcmp(out, expect, sizeof expect));
    }
    restore_isa();
}

/* Random checkpoint tensors: nibbles uniform, scales 0.01..0.1 as fp16. */
static void rand_awq(int32_t *qw, int32_t *qz, uint16_t *sc, int64_t N, int64_t K, int64_t G) {
    for (int64_t i = 0; i < K * N / 8; i++) qw[i] = (int32_t)(uint32_t)test_rng();
    for (int64_t i = 0; i < K / G * N / 8; i++) qz[i] = (int32_t)(uint32_t)test_rng();
    for (int64_t i = 0; i < K / G * N; i++) sc[i] = f32_to_f16(0.055f + 0.045f * test_uniform());
}

/* Standard normal (Box-Muller). */
static float rand_normal(void) {
    double u1 = (test_uniform() + 1.0) * 0.5, u2 = test_uniform();
    if (u1 < 1e-300) u1 = 1e-300;
    return (float)(sqrt(-2.0 * log(u1)) * cos(3.14159265358979323846 * u2));
}

/* |got - ref| <= 1e-5 sum_k |x||w| for every output; returns the worst
 * fraction of the budget used. */
static double awq_error_fraction(const float *got, const float *ref, const float *x, const float *w, int64_t T,
                                 int64_t N, int64_t K) {
    double worst = 0;
    for (int64_t t = 0; t < T; t++)
        for (int64_t n = 0; n < N; n++) {
            double mag = 0;
            for (int64_t k = 0; k < K; k++) mag += fabs((double)x[t * K + k] * w[n * K + k]);
            double frac = fabs((double)got[t * N + n] - ref[t * N + n]) / (1e-5 * mag + 1e-30);
            if (!(frac <= worst)) worst = frac; /* NaN too */
        }
    return worst;
}

static void test_awq_linear_matches_dequantized_reference_at_every_level(void) {
    static const int64_t Ns[] = {8, 24, 72, 200}, Ks[] = {32, 128, 160, 384}, Gs[] = {32, 64, 128, 0};
    static const int64_t Ts[] = {1, 2, 3, 7, 8, 17};
    static const struct { int64_t N, K, G; } extra[] = {{16, 20, 10}, {24, 12, 12}};
    const int64_t T_max = 17;
    double worst[CPU_ISA_COUNT] = {0};
    int n_shapes = 0, level_bits_differ = 0, batch_bits_differ = 0;
    const int n_main = 4 * 4 * 4, n_all = n_main + (int)(sizeof extra / sizeof extra[0]);
    for (int si = 0; si < n_all; si++) {
        int64_t N, K, G;
        if (si < n_main) {
            N = Ns[si / 16], K = Ks[si / 4 % 4], G = Gs[si % 4] ? Gs[si % 4] : K;
            if (K % G || (Gs[si % 4] == K)) continue; /* G must divide K; G = K once */
        } else {
            N = extra[si - n_main].N, K = extra[si - n_main].K, G = extra[si - n_main].G;
        }
        n_shapes++;
        int32_t *qw = sl_malloc((size_t)(K * N / 8) * sizeof *qw), *qz = sl_malloc((size_t)(K / G * N / 8) * sizeof *qz);
        uint16_t *sc = sl_malloc((size_t)(K / G * N) * sizeof *sc);
        rand_awq(qw, qz, sc, N, K, G);
        float *w = sl_malloc((size_t)(N * K) * sizeof *w), *x = sl_malloc((size_t)(T_max * K) * sizeof *x);
        cpu_awq_dequantize(w, qw, qz, sc, N, K, G);
        for (int64_t i = 0; i < T_max * K; i++) x[i] = rand_normal();
        void *packed = sl_malloc(cpu_awq_packed_bytes(N, K, G));
        cpu_awq_pack(packed, qw, qz, sc, N, K, G);
        size_t out_bytes = (size_t)(T_max * N) * sizeof(float);
        float *ref = sl_malloc(out_bytes), *out = sl_malloc(out_bytes), *first = sl_malloc(out_bytes);
        float *ref_b = sl_malloc(out_bytes), *xb = sl_malloc((size_t)(T_max * K) * sizeof *xb);
        for (int64_t i = 0; i < T_max * K; i++) xb[i] = bf16_to_f32(f32_to_bf16(x[i])); /* as avx512_bf16 reads x */
        float *xa = sl_malloc((size_t)(T_max * K) * sizeof *xa), *ref_a = sl_malloc(out_bytes);
        cpu_awq_avx2_reads(xa, x, T_max, K, G); /* as avx2 reads x: within 1/32767 of the group's max */
        if (use_isa(CPU_ISA_AVX2)) { /* its vector quantizer gives the plain one's values */
            float *xv = sl_malloc((size_t)(T_max * K) * sizeof *xv);
            cpu_awq_avx2_reads(xv, x, T_max, K, G);
            if (use_isa(CPU_ISA_PORTABLE)) cpu_awq_avx2_reads(xa, x, T_max, K, G);
            CHECK(!memcmp(xv, xa, (size_t)(T_max * K) * sizeof *xv));
            free(xv);
        }
        restore_isa();
        for (int64_t t = 0; t < T_max; t++)
            for (int64_t g = 0; g < K / G; g++) {
                float amax = 0.0f;
                for (int64_t k = g * G; k < (g + 1) * G; k++) amax = fmaxf(amax, fabsf(x[t * K + k]));
                for (int64_t k = g * G; k < (g + 1) * G; k++) CHECK(fabsf(xa[t * K + k] - x[t * K + k]) <= amax / 32767);
            }
        float *one = sl_malloc((size_t)N * sizeof *one);
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            int64_t T = Ts[ti];
            cpu_linear(ref, x, w, DTYPE_F32, T, N, K);
            cpu_linear(ref_b, xb, w, DTYPE_F32, T, N, K);
            cpu_linear(ref_a, xa, w, DTYPE_F32, T, N, K);
            int have_first = 0;
            for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
                if (!use_isa((cpu_isa_t)isa)) continue;
                memset(out, 0xff, out_bytes);
                cpu_linear_awq_packed(out, x, packed, T, N, K, G);
                int rounds_x = isa == CPU_ISA_AVX512_BF16 || isa == CPU_ISA_AVX2;
                const float *xr = isa == CPU_ISA_AVX512_BF16 ? xb : isa == CPU_ISA_AVX2 ? xa : x;
                double frac = awq_error_fraction(out, isa == CPU_ISA_AVX512_BF16 ? ref_b : isa == CPU_ISA_AVX2 ? ref_a : ref,
                                                 xr, w, T, N, K);
                if (!(frac <= 1.0)) {
                    fprintf(stderr, "  %s N=%lld K=%lld G=%lld T=%lld: %.1f%% of budget\n",
                            cpu_isa_name((cpu_isa_t)isa), (long long)N, (long long)K, (long long)G, (long long)T,
                            frac * 100);
                    CHECK(frac <= 1.0);
                }
                if (!(frac <= worst[isa])) worst[isa] = frac;
                if (!rounds_x && isa != CPU_ISA_AVX2) { /* avx2 and avx512_bf16 have bits of their own */
                    if (have_first) level_bits_differ += memcmp(out, first, (size_t)(T * N) * sizeof *out) != 0;
                    else memcpy(first, out, (size_t)(T * N) * sizeof *out), have_first = 1;
                }
                for (int64_t t = 0; t < T; t++) {
                    cpu_linear_awq_packed(one, x + t * K, packed, 1, N, K, G);
                    batch_bits_differ += memcmp(one, out + t * N, (size_t)N * sizeof *one) != 0;
                }
            }
        }
        free(qw), free(qz), free(sc), free(w), free(x), free(packed), free(ref), free(out), free(first), free(one);
        free(ref_b), free(xb), free(ref_a), free(xa);
    }
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++)
        if (isa <= (int)cpu_isa_detect())
            printf("  %-12s %d shapes x %d T: max error %5.1f%% of 1e-5 sum|x||w|%s\n", cpu_isa_name((cpu_isa_t)isa),
                   n_shapes, (int)(sizeof Ts / sizeof Ts[0]), worst[isa] * 100,
                   isa == CPU_ISA_AVX512_BF16 ? " (x rounded to bf16)" : isa == CPU_ISA_AVX2 ? " (x in int16 per group)" : "");
    /* portable and avx512: the same bits; every row: the same bits as alone. */
    CHECK_EQ_INT(level_bits_differ, 0);
    CHECK_EQ_INT(batch_bits_differ, 0);
    restore_isa();
}

/* AutoAWQ's own packing (tests/golden/awq_autoawq, written by tools/awq-golden
 * with AutoAWQ's pseudo_quantize_tensor, WQLinear_GEMM.from_linear and
 * dequantize_gemm): the reference dequantization, and every kernel level
 * reading each weight back (unit input rows: out(t, n) = W(n, t), one term,
 * exact), give AutoAWQ's fp16 weights bit for bit once rounded to fp16 (its
 * dequantization is the same product in fp16, one rounding). */
static void test_awq_autoawq_golden_unpacks_bit_for_bit(void) {
    static const struct { int64_t N, K, G; } cases[] = {{64, 128, 32}, {96, 256, 128}, {32, 192, 64}, {32, 96, 96}};
    st_archive_t a;
    sl_err_t err;
    if (st_open_dir("tests/golden/awq_autoawq", &a, &err)) {
        fprintf(stderr, "  %s\n", err.msg);
        CHECK(0);
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int64_t N = cases[c].N, K = cases[c].K, G = cases[c].G;
        char name[64], base[32];
        snprintf(base, sizeof base, "n%lld_k%lld_g%lld", (long long)N, (long long)K, (long long)G);
        const int64_t qs[2] = {K, N / 8}, zs[2] = {K / G, N / 8}, ss[2] = {K / G, N}, ds[2] = {N, K};
        const st_tensor_t *t[4];
        const char *suffix[4] = {"qweight", "qzeros", "scales", "dequant"};
        const int64_t *shape[4] = {qs, zs, ss, ds};
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "%s.%s", base, suffix[i]);
            t[i] = st_expect(&a, name, 2, shape[i], &err);
            if (!t[i]) {
                fprintf(stderr, "  %s\n", err.msg);
                CHECK(0);
                st_close(&a);
                return;
            }
        }
        const int32_t *qw = t[0]->data, *qz = t[1]->data;
        const uint16_t *sc = t[2]->data, *want = t[3]->data;
        float *w = sl_malloc((size_t)(N * K) * sizeof *w);
        cpu_awq_dequantize(w, qw, qz, sc, N, K, G);
        int64_t differ = 0;
        for (int64_t i = 0; i < N * K; i++) differ += f32_to_f16(w[i]) != want[i];
        if (differ) fprintf(stderr, "  %s: cpu_awq_dequantize: %lld of %lld weights differ\n", base,
                            (long long)differ, (long long)(N * K));
        CHECK_EQ_INT(differ, 0);
        /* Each kernel level, through its packed copy: K unit rows read W column by column. */
        void *packed = sl_malloc(cpu_awq_packed_bytes(N, K, G));
        cpu_awq_pack(packed, qw, qz, sc, N, K, G);
        float *eye = calloc((size_t)(K * K), sizeof *eye), *out = sl_malloc((size_t)(K * N) * sizeof *out);
        for (int64_t k = 0; k < K; k++) eye[k * K + k] = 1.0f;
        for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
            if (!use_isa((cpu_isa_t)isa)) continue;
            cpu_linear_awq_packed(out, eye, packed, K, N, K, G);
            differ = 0;
            for (int64_t k = 0; k < K; k++)
                for (int64_t n = 0; n < N; n++) differ += f32_to_f16(out[k * N + n]) != want[n * K + k];
            if (differ) fprintf(stderr, "  %s %s: %lld of %lld weights differ\n", base, cpu_isa_name((cpu_isa_t)isa),
                                (long long)differ, (long long)(N * K));
            CHECK_EQ_INT(differ, 0);
        }
        restore_isa();
        free(w), free(packed), free(eye), free(out);
    }
    st_close(&a);
}

/* The packed size: 64-column panels, per group a 192-byte header and
 * ceil(G / 8) blocks of 256 bytes. */
/* q/k/v as one op (cpu_linears_awq_packed): each part's outputs have the
 * bits of its own call, at every level, for widths that leave a part's last
 * panel partial (so the job's panels cross parts mid-chunk) and T from a
 * decode row to past the avx512 tile. */
static void test_awq_linears_equal_separate_calls_at_every_level(void) {
    const int64_t K = 256, G = 64, Ns[3] = {200, 64, 72};
    void *packed[3];
    for (int j = 0; j < 3; j++) {
        int32_t *qw = sl_malloc((size_t)(K * Ns[j] / 8) * 4), *qz = sl_malloc((size_t)(K / G * Ns[j] / 8) * 4);
        uint16_t *sc = sl_malloc((size_t)(K / G * Ns[j]) * 2);
        rand_awq(qw, qz, sc, Ns[j], K, G);
        packed[j] = sl_malloc(cpu_awq_packed_bytes(Ns[j], K, G));
        cpu_awq_pack(packed[j], qw, qz, sc, Ns[j], K, G);
        free(qw), free(qz), free(sc);
    }
    static const int64_t Ts[] = {1, 3, 9};
    for (int isa = 0; isa < CPU_ISA_COUNT; isa++) {
        if (!use_isa((cpu_isa_t)isa)) continue;
        for (size_t ti = 0; ti < sizeof Ts / sizeof Ts[0]; ti++) {
            const int64_t T = Ts[ti];
            float *x = sl_malloc((size_t)(T * K) * sizeof *x), *want[3], *got[3];
            for (int64_t i = 0; i < T * K; i++) x[i] = rand_normal();
            cpu_linear_part_t parts[3];
            for (int j = 0; j < 3; j++) {
                want[j] = sl_malloc((size_t)(T * Ns[j]) * sizeof(float));
                got[j] = sl_malloc((size_t)(T * Ns[j]) * sizeof(float));
                memset(got[j], 0xff, (size_t)(T * Ns[j]) * sizeof(float));
                cpu_linear_awq_packed(want[j], x, packed[j], T, Ns[j], K, G);
                parts[j] = (cpu_linear_part_t){got[j], packed[j], Ns[j]};
            }
            cpu_linears_awq_packed(parts, 3, x, T, K, G);
            for (int j = 0; j < 3; j++) {
                if (memcmp(got[j], want[j], (size_t)(T * Ns[j]) * sizeof(float)) != 0) {
                    fprintf(stderr, "  %s T=%lld part %d: differs from its own call\n", cpu_isa_name((cpu_isa_t)isa),
                            (long long)T, j);
                    test_cur_failed = 1;
                }
                free(want[j]), free(got[j]);
            }
            free(x);
        }
    }
    for (int j = 0; j < 3; j++) free(packed[j]);
    restore_isa();
}

static void test_awq_packed_bytes(void) {
    CHECK_EQ_INT((long long)cpu_awq_packed_bytes(200, 384, 128), 4LL * 3 * (192 + 16 * 256));
    CHECK_EQ_INT((long long)cpu_awq_packed_bytes(8, 20, 10), 1LL * 2 * (192 + 2 * 256));
}

int main(void) {
    test_seed();
    printf("  this CPU: %s\n", cpu_isa_name(cpu_isa_detect()));
    RUN(test_awq_nibble_order_maps_to_known_columns);
    RUN(test_awq_dequantize_small_example_by_hand);
    RUN(test_awq_packed_bytes);
    RUN(test_awq_linear_matches_dequantized_reference_at_every_level);
    RUN(test_awq_linears_equal_separate_calls_at_every_level);
    RUN(test_awq_autoawq_golden_unpacks_bit_for_bit);
    return test_summary();
}
