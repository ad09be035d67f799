/* rng.c - xoshiro256** (Blackman and Vigna) seeded through splitmix64 (see rng.h).
 *
 * Small, fast and with a 2^256 period; splitmix64 spreads any 64-bit seed,
 * 0 included, over the four state words so that none starts all zero.
 */
#include "servelab/rng.h"

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
