/* test_lab_engine.c - the pure pieces of the lab's engine faults: kv_leak's
 * held blocks in the pool (out of the free queue, kept in the prefix cache,
 * back with no residue), logit_noise's seeded Gaussian rows, oom's message in
 * PyTorch's wording, and the self-clearing of engine_stall and cold_start
 * (faults_expire keeps a setting made meanwhile). The engine's use of them is
 * driven end to end by tests/e2e/test_lab.py.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/kv_pool.h"
#include "servelab/lab.h"
#include "servelab/model_runner.h"
#include "test.h"

static void test_held_block_leaves_the_free_pool_until_released(void) {
    kv_pool_t p;
    enum { B = 4 };
    kv_pool_init(&p, 8, B, true, KV_HASH_XXHASH);
    int32_t idle = kv_pool_n_free(&p), t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    kv_seq_blocks_t a = {0};
    CHECK(kv_allocate(&p, &a, t, 12, 12, NULL, 0));
    CHECK_EQ_INT(a.n, 3);
    int32_t held = a.ids[2];
    kv_block_hold(&p, held);
    kv_free_seq(&p, &a);
    CHECK_EQ_INT(kv_pool_n_free(&p), idle - 1); /* the held block is not free: usage shows it */
    kv_pool_check(&p);
    /* Still in the prefix cache: a request with the same tokens shares it. */
    int32_t hit[4];
    CHECK_EQ_INT(kv_lookup_prefix(&p, t, 12, hit, 4), 2);
    kv_seq_blocks_t b = {0};
    int32_t t2[13];
    memcpy(t2, t, sizeof t);
    t2[12] = 13;
    int32_t n_hit = kv_lookup_prefix(&p, t2, 13, hit, 4);
    CHECK_EQ_INT(n_hit, 3);
    CHECK(kv_allocate(&p, &b, t2, 13, 13, hit, n_hit));
    kv_block_release(&p, held); /* b still holds it */
    CHECK(p.blocks[held].ref_cnt == 1 && !p.blocks[held].in_free_queue);
    kv_free_seq(&p, &b);
    CHECK_EQ_INT(kv_pool_n_free(&p), idle); /* no residue */
    kv_pool_check(&p);
    kv_seq_blocks_free(&a);
    kv_seq_blocks_free(&b);
    kv_pool_free(&p);
}

static void test_noise_is_seeded_gaussian(void) {
    enum { V = 200000 };
    float *x = calloc(V, sizeof *x), *y = calloc(V, sizeof *y), *z = calloc(V, sizeof *z);
    logit_noise_row(x, V, 2.5, 42);
    logit_noise_row(y, V, 2.5, 42);
    logit_noise_row(z, V, 2.5, 43);
    CHECK(!memcmp(x, y, V * sizeof *x)); /* the same seed: the same noise */
    CHECK(memcmp(x, z, V * sizeof *x) != 0);
    double s = 0, s2 = 0;
    for (int i = 0; i < V; i++) s += x[i], s2 += (double)x[i] * x[i];
    double mean = s / V, sd = sqrt(s2 / V - mean * mean);
    CHECK(fabs(mean) < 0.03 && fabs(sd - 2.5) < 0.03);
    free(x);
    free(y);
    free(z);
}

static void test_noise_seed_follows_seed_and_tokens(void) {
    int32_t a[] = {5, 6, 7}, b[] = {5, 6, 8};
    uint64_t h = logit_noise_seed(7, a, 3);
    CHECK(h == logit_noise_seed(7, a, 3));
    CHECK(h != logit_noise_seed(8, a, 3)); /* another --seed */
    CHECK(h != logit_noise_seed(7, b, 3)); /* another token */
    CHECK(h != logit_noise_seed(7, a, 2)); /* another position */
}

static void test_oom_message_is_pytorchs(void) {
    char m[1024];
    int64_t gib = (int64_t)1 << 30;
    fault_oom_message(m, sizeof m, (int64_t)(1.53 * (double)gib), (int64_t)(79.15 * (double)gib));
    CHECK_STR_CONTAINS(m, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.53 GiB. "
                          "GPU 0 has a total capacity of 79.15 GiB of which 522.24 MiB is free.");
    CHECK_STR_CONTAINS(m, "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True");
    fault_oom_message(m, sizeof m, 1000, gib);
    CHECK_STR_CONTAINS(m, "Tried to allocate 1000 bytes.");
    fault_oom_message(m, sizeof m, 224 * 1024, gib);
    CHECK_STR_CONTAINS(m, "Tried to allocate 224.00 KiB.");
}

static void test_expire_keeps_a_newer_setting(void) {
    faults_t *f = faults_new(1);
    fault_spec_t s;
    char err[256];
    CHECK(fault_parse_spec("cold_start:steps=2", &s, err, sizeof err) == 0);
    faults_set(f, &s);
    uint64_t first;
    CHECK(faults_get(f, FAULT_COLD_START, NULL, &first, NULL));
    faults_set(f, &s); /* set again meanwhile */
    CHECK(!faults_expire(f, FAULT_COLD_START, first, "its steps ran out"));
    CHECK(faults_mask(f) & FAULT_BIT(FAULT_COLD_START));
    uint64_t second;
    CHECK(faults_get(f, FAULT_COLD_START, NULL, &second, NULL) && second == first + 1);
    CHECK(faults_expire(f, FAULT_COLD_START, second, "its steps ran out"));
    CHECK(!(faults_mask(f) & FAULT_BIT(FAULT_COLD_START)));
    CHECK(!faults_expire(f, FAULT_COLD_START, second, "its steps ran out")); /* already off */
    faults_free(f);
}

int main(void) {
    RUN(test_held_block_leaves_the_free_pool_until_released);
    RUN(test_noise_is_seeded_gaussian);
    RUN(test_noise_seed_follows_seed_and_tokens);
    RUN(test_oom_message_is_pytorchs);
    RUN(test_expire_keeps_a_newer_setting);
    return test_summary();
}
