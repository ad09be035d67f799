/* sampler.h - choosing the next token from a row of logits.
 *
 * Temperature 0 is greedy (argmax, first index on ties, like torch.argmax).
 * Otherwise softmax(logits / T) is sampled with the request's own generator,
 * so a seeded request draws the same tokens whatever else is in the batch.
 */
#ifndef SERVELAB_SAMPLER_H
#define SERVELAB_SAMPLER_H

#include <stdint.h>

#include "servelab/rng.h"

/* argmax over V logits. */
int32_t sampler_greedy(const float *logits, int64_t V);
/* Greedy when temperature <= 0, else a draw from softmax(logits / temperature). */
int32_t sampler_sample(const float *logits, int64_t V, float temperature, sl_rng_t *rng);
/* log_softmax(logits)[token], computed in double. */
double sampler_logprob(const float *logits, int64_t V, int32_t token);

#endif
