/* sampler.c - greedy and temperature sampling with per-request generators (rng.h). */
#include "servelab/sampler.h"

#include <math.h>

#include "servelab/core.h"

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
