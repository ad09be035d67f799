/* test_sampler.c - greedy, temperature sampling and logprobs against their definitions. */
#include <math.h>

#include "servelab/sampler.h"
#include "test.h"

static void test_greedy_takes_first_maximum(void) {
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, 1.9f, -INFINITY};
    CHECK_EQ_INT(sampler_greedy(l, 6), 1);
    sl_rng_t rng;
    rng_seed(&rng, 1);
    CHECK_EQ_INT(sampler_sample(l, 6, 0.0f, &rng), 1); /* temperature 0 is greedy */
}

static void test_logprob_is_log_softmax(void) {
    float l[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    double z = exp(1.0) + exp(2.0) + exp(3.0) + exp(4.0);
    for (int i = 0; i < 4; i++) CHECK(fabs(sampler_logprob(l, 4, i) - (l[i] - log(z))) < 1e-12);
}

static void test_sampling_frequencies_follow_softmax_over_temperature(void) {
    float l[4] = {0.0f, 1.0f, 2.0f, -1.0f};
    float T = 0.7f;
    double p[4], z = 0;
    for (int i = 0; i < 4; i++) z += p[i] = exp(l[i] / T);
    int counts[4] = {0};
    sl_rng_t rng;
    rng_seed(&rng, 42);
    int n = 200000;
    for (int k = 0; k < n; k++) counts[sampler_sample(l, 4, T, &rng)]++;
    for (int i = 0; i < 4; i++) {
        double expect = p[i] / z, got = (double)counts[i] / n;
        double sd = sqrt(expect * (1 - expect) / n);
        printf("  token %d: expected %.4f got %.4f (%.1f sd)\n", i, expect, got, fabs(got - expect) / sd);
        CHECK(fabs(got - expect) < 5 * sd);
    }
}

static void test_same_seed_gives_same_draws(void) {
    float l[16];
    for (int i = 0; i < 16; i++) l[i] = (float)(i % 5);
    sl_rng_t a, b, c;
    rng_seed(&a, 123);
    rng_seed(&b, 123);
    rng_seed(&c, 124);
    int same = 1, differs = 0;
    for (int k = 0; k < 64; k++) {
        int x = sampler_sample(l, 16, 1.0f, &a), y = sampler_sample(l, 16, 1.0f, &b);
        same &= x == y;
        differs |= x != sampler_sample(l, 16, 1.0f, &c);
    }
    CHECK(same);
    CHECK(differs);
}

int main(void) {
    test_seed();
    RUN(test_greedy_takes_first_maximum);
    RUN(test_logprob_is_log_softmax);
    RUN(test_sampling_frequencies_follow_softmax_over_temperature);
    RUN(test_same_seed_gives_same_draws);
    return test_summary();
}
