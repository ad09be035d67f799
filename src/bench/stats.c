/* stats.c - the numbers behind `bench serve`: draws from the seeded generator (rng.h), Gamma-distributed
 * arrivals, and numpy's mean/std/median/percentile.
 *
 * Arrivals follow vLLM's get_request(): i.i.d. Gamma gaps (shape = burstiness, scale =
 * 1/(rate*burstiness), so the mean gap is 1/rate whatever the burstiness), summed, then
 * rescaled so the last request is sent at exactly num_prompts/rate; ramp-up changes the
 * rate per request and skips the rescale. The generator is xoshiro256**, not numpy's
 * PCG64, so a --seed gives the same distribution as vLLM but not the same draws.
 * Percentiles are np.percentile's default (linear interpolation between closest ranks,
 * computed with numpy's _lerp so results agree to the last bit on the same inputs).
 */
#include <math.h>
#include <stdlib.h>

#include "bench.h"

int64_t bench_rng_range(bench_rng_t *r, int64_t lo, int64_t hi) {
    SL_ASSERT(lo <= hi);
    uint64_t span = (uint64_t)(hi - lo) + 1, x;
    if (span == 0) return (int64_t)rng_next(r); /* the full 64-bit range */
    uint64_t limit = UINT64_MAX - UINT64_MAX % span;  /* reject the biased tail */
    do x = rng_next(r);
    while (x >= limit);
    return lo + (int64_t)(x % span);
}

static double rng_normal(bench_rng_t *r) {
    double u1 = 1.0 - rng_uniform(r), u2 = rng_uniform(r); /* u1 in (0, 1] */
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2) /* 2 pi */;
}

double bench_rng_gamma(bench_rng_t *r, double shape, double scale) {
    SL_ASSERT(shape > 0 && scale > 0);
    if (shape < 1.0) { /* Gamma(a) = Gamma(a+1) * U^(1/a) */
        double u = 1.0 - rng_uniform(r);
        return bench_rng_gamma(r, shape + 1.0, scale) * pow(u, 1.0 / shape);
    }
    double d = shape - 1.0 / 3.0, c = 1.0 / sqrt(9.0 * d);
    for (;;) {
        double x = rng_normal(r), v = 1.0 + c * x;
        if (v <= 0.0) continue;
        v = v * v * v;
        double u = 1.0 - rng_uniform(r);
        if (u < 1.0 - 0.0331 * x * x * x * x) return d * v * scale;
        if (log(u) < 0.5 * x * x + d * (1.0 - v + log(v))) return d * v * scale;
    }
}

/* ---- numpy statistics ---------------------------------------------------------------------- */

double bench_mean(const double *x, int64_t n) {
    if (n <= 0) return 0.0;
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += x[i];
    return s / (double)n;
}

double bench_std(const double *x, int64_t n) {
    if (n <= 0) return 0.0;
    double m = bench_mean(x, n), s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (x[i] - m) * (x[i] - m);
    return sqrt(s / (double)n);
}

double bench_median(const double *sorted, int64_t n) {
    if (n <= 0) return 0.0;
    if (n % 2) return sorted[n / 2];
    return (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
}

/* numpy's _lerp: a + (b-a)*t, or b - (b-a)*(1-t) when t >= 0.5 (monotone near b). */
static double lerp(double a, double b, double t) {
    double d = b - a;
    return t >= 0.5 ? b - d * (1.0 - t) : a + d * t;
}

double bench_percentile(const double *sorted, int64_t n, double p) {
    if (n <= 0) return 0.0;
    double virt = (double)(n - 1) * (p / 100.0);
    double prev = floor(virt);
    int64_t lo = (int64_t)prev;
    if (lo < 0) lo = 0;
    if (lo > n - 1) lo = n - 1;
    int64_t hi = lo + 1 < n ? lo + 1 : n - 1;
    return lerp(sorted[lo], sorted[hi], virt - prev);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void bench_sort(double *x, int64_t n) {
    if (n > 1) qsort(x, (size_t)n, sizeof *x, cmp_double);
}

/* ---- arrivals ------------------------------------------------------------------------------- */

static double rate_at(const bench_arrival_cfg_t *c, int64_t i, int64_t n) {
    if (c->ramp == BENCH_RAMP_NONE) return c->rate;
    double progress = (double)i / (double)(n - 1 > 1 ? n - 1 : 1);
    if (c->ramp == BENCH_RAMP_LINEAR) return c->ramp_start_rps + (c->ramp_end_rps - c->ramp_start_rps) * progress;
    return c->ramp_start_rps * pow(c->ramp_end_rps / c->ramp_start_rps, progress);
}

void bench_arrivals(const bench_arrival_cfg_t *c, int64_t n, bench_rng_t *rng, double *delay_s, double *rates) {
    double t = 0.0;
    for (int64_t i = 0; i < n; i++) {
        double rate = rate_at(c, i, n), gap;
        if (rates) rates[i] = rate;
        if (isinf(rate)) gap = 0.0;
        else if (rate <= 0.0) gap = 0.0; /* a linear ramp starting at 0 rps: vLLM asserts; we send at once */
        else if (isinf(c->burstiness)) gap = 1.0 / rate;
        else gap = bench_rng_gamma(rng, c->burstiness, 1.0 / (rate * c->burstiness));
        t += gap;
        delay_s[i] = t;
    }
    if (c->ramp == BENCH_RAMP_NONE && n > 0 && delay_s[n - 1] != 0.0) {
        double f = ((double)n / c->rate) / delay_s[n - 1];
        for (int64_t i = 0; i < n; i++) delay_s[i] *= f;
    }
}
