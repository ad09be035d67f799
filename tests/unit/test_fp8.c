/* test_fp8.c - the fp8 KV cache's conversions (src/core/dtype.c): OCP E4M3FN and
 * E5M2 as NVIDIA's cvt.rn.satfinite, which vLLM's fp8 KV cache uses.
 *
 * Checked against the formats' definitions rather than a copy of the code:
 * every one of the 256 codes decodes to its value and encodes back to itself
 * (NaN codes to a NaN code), the values are ordered as the codes, a value
 * between two neighbours rounds to the nearer (a tie to the even code), and
 * for many random floats the encoding is the nearest code found by a search
 * over all 256, saturating past the largest finite value. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "servelab/dtype.h"
#include "test.h"

typedef struct {
    sl_dtype_t dt;
    const char *name;
    uint8_t (*enc)(float);
    float (*dec)(uint8_t);
    float max;         /* the largest finite value */
    uint8_t max_code;  /* its code */
} fmt_t;

static const fmt_t FMTS[] = {
    {DTYPE_F8_E4M3, "e4m3", f32_to_fp8_e4m3, fp8_e4m3_to_f32, 448.0f, 0x7e},
    {DTYPE_F8_E5M2, "e5m2", f32_to_fp8_e5m2, fp8_e5m2_to_f32, 57344.0f, 0x7b},
};

static float from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* The nearest finite code by search (ties: the even code), saturating past max. */
static uint8_t nearest(const fmt_t *f, float x) {
    float a = fabsf(x);
    uint8_t sign = signbit(x) ? 0x80 : 0;
    if (a >= f->max) return sign | f->max_code;
    int best = 0;
    double bd = INFINITY;
    for (int c = 0; c <= f->max_code; c++) {
        double d = fabs((double)f->dec((uint8_t)c) - (double)a);
        if (d < bd || (d == bd && !(c & 1))) best = c, bd = d;
    }
    return sign | (uint8_t)best;
}

static void test_every_code_round_trips(void) {
    for (size_t i = 0; i < sizeof FMTS / sizeof FMTS[0]; i++) {
        const fmt_t *f = &FMTS[i];
        const float *table = fp8_table(f->dt);
        int bad = 0;
        for (int c = 0; c < 256; c++) {
            float v = f->dec((uint8_t)c);
            bad += !(table[c] == v || (isnan(table[c]) && isnan(v)));
            if (isnan(v)) bad += (f->enc(v) & 0x7f) != 0x7f; /* NaN stays NaN */
            else if (isinf(v)) bad += f->enc(v) != ((c & 0x80) | f->max_code); /* satfinite */
            else bad += f->enc(v) != c;
            uint8_t back;
            dtype_from_f32(&back, &v, f->dt, 1);
            float again;
            dtype_to_f32(&again, &back, f->dt, 1);
            bad += !(again == v || isnan(v) || isinf(v));
        }
        if (bad) fprintf(stderr, "  %s: %d code(s) do not round-trip\n", f->name, bad);
        CHECK(bad == 0);
        CHECK(f->dec(f->max_code) == f->max);
        CHECK(f->dec(1) == (f->dt == DTYPE_F8_E4M3 ? ldexpf(1, -9) : ldexpf(1, -16))); /* smallest subnormal */
    }
}

static void test_codes_are_ordered_and_neighbours_round_to_nearest_even(void) {
    for (size_t i = 0; i < sizeof FMTS / sizeof FMTS[0]; i++) {
        const fmt_t *f = &FMTS[i];
        int bad = 0;
        for (int c = 0; c < f->max_code; c++) {
            float lo = f->dec((uint8_t)c), hi = f->dec((uint8_t)(c + 1));
            bad += !(lo < hi);
            double mid = ((double)lo + hi) / 2; /* exact in float: fp8 neighbours differ by a power of two */
            uint8_t tie = f->enc((float)mid), want = (uint8_t)(c & 1 ? c + 1 : c);
            bad += tie != want;
            bad += f->enc(nextafterf((float)mid, 0.0f)) != c;        /* just below: down */
            bad += f->enc(nextafterf((float)mid, INFINITY)) != c + 1; /* just above: up */
            bad += f->enc(-(float)mid) != (0x80 | want);             /* the sign does not change it */
        }
        if (bad) fprintf(stderr, "  %s: %d rounding error(s) between neighbours\n", f->name, bad);
        CHECK(bad == 0);
    }
}

static void test_random_floats_take_the_nearest_code(void) {
    for (size_t i = 0; i < sizeof FMTS / sizeof FMTS[0]; i++) {
        const fmt_t *f = &FMTS[i];
        int bad = 0;
        for (int n = 0; n < 200000; n++) {
            /* Exponents 2^-30 .. 2^30 with random mantissas: subnormals, normals, saturation. */
            uint32_t r = (uint32_t)test_rng();
            float x = from_bits((r & 0x807fffffu) | ((uint32_t)(97 + (r >> 8) % 61) << 23));
            if (f->enc(x) != nearest(f, x)) {
                if (bad++ < 3)
                    fprintf(stderr, "  %s: %.9g encodes as 0x%02x, the nearest is 0x%02x\n", f->name, x, f->enc(x),
                            nearest(f, x));
            }
        }
        CHECK(bad == 0);
        CHECK(f->enc(INFINITY) == f->max_code && f->enc(-INFINITY) == (0x80 | f->max_code));
        CHECK((f->enc(NAN) & 0x7f) == 0x7f && isnan(f->dec(f->enc(NAN))));
        CHECK_EQ_INT(f->enc(-NAN), 0x7f); /* canonical, as NVIDIA's cvt: the CUDA cache's code */
        CHECK(f->enc(0.0f) == 0x00 && f->enc(-0.0f) == 0x80);
        CHECK(f->enc(from_bits(1)) == 0x00); /* the smallest f32 subnormal rounds to zero */
    }
}

int main(void) {
    test_seed();
    RUN(test_every_code_round_trips);
    RUN(test_codes_are_ordered_and_neighbours_round_to_nearest_even);
    RUN(test_random_floats_take_the_nearest_code);
    return test_summary();
}
