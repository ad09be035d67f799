/* test_rng.c - the seeded generator: a request's draws depend only on its seed. */
#include "servelab/rng.h"
#include "test.h"

static void test_same_seed_gives_same_draws(void) {
    sl_rng_t a, b, c;
    rng_seed(&a, 123);
    rng_seed(&b, 123);
    rng_seed(&c, 124);
    int same = 1, differs = 0;
    for (int k = 0; k < 64; k++) {
        double x = rng_uniform(&a), y = rng_uniform(&b);
        same &= x == y;
        differs |= x != rng_uniform(&c);
    }
    CHECK(same);
    CHECK(differs);
}

int main(void) {
    test_seed();
    RUN(test_same_seed_gives_same_draws);
    return test_summary();
}
