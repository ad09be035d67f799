/* sampler.c - greedy and temperature sampling with per-request generators. */
#include "servelab/sampler.h"

#include <math.h>

#include "servelab/core.h"

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void rng_seed(sl_rng_t *rng, uint64_t seed) {
    for (int i = 0; i < 4; i++) rng->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t rng_next(sl_rng_t *rng) {
    uint64_t *s = rng->s, result = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

double rng_uniform(sl_rng_t *rng) { return (double)(rng_next(rng) >> 11) * 0x1.0p-53; }

int32_t sampler_greedy(const float *logits, int64_t V) {
    SL_ASSERT(V > 0);
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    return (int32_t)best;
}

int32_t sampler_sample(const float *logits, int64_t V, float temperature, sl_rng_t *rng) {
    if (temperature <= 0.0f) return sampler_greedy(logits, V);
    float mx = logits[sampler_greedy(logits, V)];
    double total = 0.0;
    for (int64_t i = 0; i < V; i++) total += exp((double)(logits[i] - mx) / temperature);
    double u = rng_uniform(rng) * total, run = 0.0;
    for (int64_t i = 0; i < V; i++) {
        run += exp((double)(logits[i] - mx) / temperature);
        if (u < run) return (int32_t)i;
    }
    return sampler_greedy(logits, V); /* u == total by rounding: the mode is as good as any */
}

double sampler_logprob(const float *logits, int64_t V, int32_t token) {
    SL_ASSERT(token >= 0 && token < V);
    double mx = logits[sampler_greedy(logits, V)], total = 0.0;
    for (int64_t i = 0; i < V; i++) total += exp((double)logits[i] - mx);
    return (double)logits[token] - mx - log(total);
}
