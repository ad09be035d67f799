/* sampler.h - choosing the next token from a row of logits.
 *
 * Temperature 0 is greedy (argmax, first index on ties, like torch.argmax).
 * Otherwise softmax(logits / T) is sampled with the request's own generator,
 * so a seeded request draws the same tokens whatever else is in the batch.
 */
#ifndef SERVELAB_SAMPLER_H
#define SERVELAB_SAMPLER_H

#include <stdint.h>

/* xoshiro256** seeded through splitmix64. */
typedef struct {
    uint64_t s[4];
} sl_rng_t;

void rng_seed(sl_rng_t *rng, uint64_t seed);
uint64_t rng_next(sl_rng_t *rng);
/* Uniform in [0, 1), 53 random bits. */
double rng_uniform(sl_rng_t *rng);

/* argmax over V logits. */
int32_t sampler_greedy(const float *logits, int64_t V);
/* Greedy when temperature <= 0, else a draw from softmax(logits / temperature). */
int32_t sampler_sample(const float *logits, int64_t V, float temperature, sl_rng_t *rng);
/* log_softmax(logits)[token], computed in double. */
double sampler_logprob(const float *logits, int64_t V, int32_t token);

#endif
