/* rng.h - the seeded random generator: xoshiro256** seeded through splitmix64.
 *
 * Each request owns one (request_t.rng), seeded from its own seed, so a
 * seeded request draws the same numbers whatever else is in its batch; the
 * sampler takes its draws from it (rng_uniform). Plain C, no engine types.
 */
#ifndef SERVELAB_RNG_H
#define SERVELAB_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} sl_rng_t;

/* Sets the state from `seed` (any value, 0 included) through splitmix64. */
void rng_seed(sl_rng_t *rng, uint64_t seed);
/* The next 64 random bits; advances the state once. */
uint64_t rng_next(sl_rng_t *rng);
/* Uniform in [0, 1), 53 random bits (one rng_next). */
double rng_uniform(sl_rng_t *rng);

#endif
