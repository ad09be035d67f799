/* kbench_check.c - the bench's inputs and comparisons: tiled random patterns
 * (kbench.h), dtype round trips, and kernels/check.h's generator, fill and
 * kt_close, the rule the GPU parity tests use too, so a benchmark validates
 * with exactly the tests' tolerance.
 *
 * The only file of the bench that includes check.h: the bench's generator
 * has one state, here, seeded once.
 */
#include <string.h>

#include "check.h"
#include "kbench.h"

static uint64_t kb_rng_state;

static uint64_t kb_rng(void) { return kt_rng_next(&kb_rng_state); }

void kb_seed(void) { kb_rng_state = kt_seed_from_env(); }

uint64_t kb_rand_below(uint64_t n) { return n ? kb_rng() % n : 0; }

void kb_pattern_init(kb_pattern_t *p, float lo, float hi, sl_dtype_t dt) {
    p->v = malloc((size_t)KB_PERIOD * sizeof(float));
    if (!p->v) abort();
    kt_fill_with(kb_rng, p->v, KB_PERIOD, lo, hi, dt);
}

void kb_pattern_free(kb_pattern_t *p) {
    free(p->v);
    p->v = NULL;
}

void kb_pattern_read(float *host, int64_t first, int64_t n, const kb_pattern_t *p, int64_t offset) {
    int64_t j = (first + offset) % KB_PERIOD;
    for (int64_t i = 0; i < n; i++) {
        host[i] = p->v[j];
        if (++j == KB_PERIOD) j = 0;
    }
}

void kb_fill(kb_ctx_t *c, void *dev, int64_t n, sl_dtype_t dt, const kb_pattern_t *p, int64_t offset) {
    if (n <= 0) return;
    const size_t es = kt_size(dt);
    int64_t first = n < KB_PERIOD ? n : KB_PERIOD;
    float *f = malloc((size_t)first * sizeof(float));
    void *raw = malloc((size_t)first * es);
    if (!f || !raw) abort();
    kb_pattern_read(f, 0, first, p, offset);
    dtype_from_f32(raw, f, dt, first);
    KB_CUDA(cudaMemcpyAsync(dev, raw, (size_t)first * es, cudaMemcpyHostToDevice, c->stream));
    /* Doubling copies: the filled prefix is always a multiple of the period long. */
    for (int64_t filled = first; filled < n;) {
        int64_t chunk = n - filled < filled ? n - filled : filled;
        KB_CUDA(cudaMemcpyAsync((char *)dev + (size_t)filled * es, dev, (size_t)chunk * es, cudaMemcpyDeviceToDevice,
                                c->stream));
        filled += chunk;
    }
    KB_CUDA(cudaStreamSynchronize(c->stream));
    free(f), free(raw);
}

void kb_download(float *host, const void *dev, int64_t first, int64_t n, sl_dtype_t dt) {
    if (n <= 0) return;
    const size_t es = kt_size(dt);
    void *raw = malloc((size_t)n * es);
    if (!raw) abort();
    KB_CUDA(cudaDeviceSynchronize());
    KB_CUDA(cudaMemcpy(raw, (const char *)dev + (size_t)first * es, (size_t)n * es, cudaMemcpyDeviceToHost));
    dtype_to_f32(host, raw, dt, n);
    free(raw);
}

void kb_round(float *x, int64_t n, sl_dtype_t dt) {
    if (dt == DTYPE_F32 || n <= 0) return;
    void *tmp = malloc((size_t)n * 2);
    if (!tmp) abort();
    dtype_from_f32(tmp, x, dt, n);
    dtype_to_f32(x, tmp, dt, n);
    free(tmp);
}

void *kb_host_dt(const float *x, int64_t n, sl_dtype_t dt) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * kt_size(dt));
    if (!p) abort();
    dtype_from_f32(p, x, dt, n);
    return p;
}

int kb_close(const char *what, const float *got, const float *want, int64_t n, sl_dtype_t dt, double ulps,
             double floor_frac) {
    return kt_close(what, got, want, n, dt, ulps, floor_frac);
}

double kb_eps(sl_dtype_t dt) { return kt_eps(dt); }

int kb_sample_rows(int64_t n, int64_t rows[4]) {
    const int64_t cand[4] = {0, n / 3, 2 * n / 3, n - 1};
    int k = 0;
    for (int i = 0; i < 4; i++) {
        if (cand[i] < 0 || cand[i] >= n) continue;
        int dup = 0;
        for (int j = 0; j < k; j++) dup |= rows[j] == cand[i];
        if (!dup) rows[k++] = cand[i];
    }
    return k;
}
