/* test_kv_pool.c - the block pool and prefix cache against a simple model.
 *
 * The property test runs thousands of random operations (admit with prefix
 * lookup, grow, free, fail when full) on a small pool and after each checks
 * the pool's own invariants (kv_pool_check) plus a model kept here: every
 * block's reference count equals the number of live sequences holding it, no
 * block is both free and held, and a prefix hit only ever returns blocks whose
 * recorded content is exactly the looked-up tokens. Named tests pin the vLLM
 * behaviours: LRU eviction order, reverse-order freeing, last token computed.
 */
#include "servelab/kv_pool.h"
#include "test.h"

#define B 4
#define MAX_SEQS 24
#define MAX_TOK 96

typedef struct {
    bool live;
    int32_t tokens[MAX_TOK];
    int32_t n_tokens;
    kv_seq_blocks_t blocks;
} model_seq_t;

static int32_t content[512][B]; /* tokens written into each block, as the model knows them */
static bool content_valid[512];

static void record_content(model_seq_t *s, int32_t n_known) {
    for (int32_t i = 0; i < s->blocks.n; i++) {
        int32_t id = s->blocks.ids[i];
        if ((i + 1) * B <= n_known) {
            memcpy(content[id], s->tokens + i * B, sizeof content[id]);
            content_valid[id] = true;
        }
    }
}

static void check_model(const kv_pool_t *p, model_seq_t *seqs) {
    kv_pool_check(p);
    int32_t refs[512] = {0};
    for (int s = 0; s < MAX_SEQS; s++)
        if (seqs[s].live)
            for (int32_t i = 0; i < seqs[s].blocks.n; i++) refs[seqs[s].blocks.ids[i]]++;
    for (int32_t id = 1; id < p->n_blocks; id++) {
        if (refs[id] != p->blocks[id].ref_cnt) {
            CHECK(refs[id] == p->blocks[id].ref_cnt);
            return;
        }
        CHECK(!(refs[id] > 0 && p->blocks[id].in_free_queue));
    }
}

static void test_random_operations_keep_pool_and_model_consistent(void) {
    for (int round = 0; round < 20; round++) {
        kv_pool_t p;
        int32_t n_blocks = 8 + (int32_t)(test_rng() % 56);
        kv_pool_init(&p, n_blocks, B, round % 4 != 3);
        model_seq_t seqs[MAX_SEQS];
        memset(seqs, 0, sizeof seqs);
        memset(content_valid, 0, sizeof content_valid);
        int64_t n_hit_blocks = 0, n_fail = 0;
        for (int op = 0; op < 2000; op++) {
            int s = (int)(test_rng() % MAX_SEQS);
            model_seq_t *q = &seqs[s];
            uint64_t r = test_rng() % 10;
            if (!q->live) {
                /* Admit: a prompt sharing a prefix with a few templates. */
                q->n_tokens = 1 + (int32_t)(test_rng() % 40);
                int32_t tmpl = (int32_t)(test_rng() % 3), shared = (int32_t)(test_rng() % (q->n_tokens + 1));
                for (int32_t i = 0; i < q->n_tokens; i++)
                    q->tokens[i] = i < shared ? tmpl * 1000 + i : (int32_t)(test_rng() % 5);
                int32_t hit[MAX_TOK / B];
                int32_t n_hit = kv_lookup_prefix(&p, q->tokens, q->n_tokens, hit, MAX_TOK / B);
                CHECK(n_hit * B <= q->n_tokens - 1);
                for (int32_t i = 0; i < n_hit; i++) {
                    CHECK(content_valid[hit[i]]);
                    CHECK(!memcmp(content[hit[i]], q->tokens + i * B, sizeof content[0]));
                }
                n_hit_blocks += n_hit;
                int32_t before = kv_pool_n_free(&p);
                if (kv_allocate(&p, &q->blocks, q->tokens, q->n_tokens, q->n_tokens, hit, n_hit)) {
                    q->live = true;
                    record_content(q, q->n_tokens);
                } else {
                    CHECK_EQ_INT(kv_pool_n_free(&p), before);
                    CHECK_EQ_INT(q->blocks.n, 0);
                    n_fail++;
                }
            } else if (r < 6 && q->n_tokens < MAX_TOK) {
                /* Decode: one more token. */
                q->tokens[q->n_tokens++] = (int32_t)(test_rng() % 5);
                if (kv_allocate(&p, &q->blocks, q->tokens, q->n_tokens, q->n_tokens, NULL, 0)) {
                    record_content(q, q->n_tokens);
                } else { /* preempted: freed, as the scheduler would */
                    kv_free_seq(&p, &q->blocks);
                    q->live = false;
                    n_fail++;
                }
            } else {
                kv_free_seq(&p, &q->blocks);
                q->live = false;
            }
            check_model(&p, seqs);
            if (test_cur_failed) break;
        }
        for (int s = 0; s < MAX_SEQS; s++) {
            if (seqs[s].live) kv_free_seq(&p, &seqs[s].blocks);
            kv_seq_blocks_free(&seqs[s].blocks);
        }
        kv_pool_check(&p);
        CHECK(kv_pool_usage(&p) == 0.0);
        if (round == 0 || test_cur_failed)
            printf("  round %d: %d blocks, %lld hit blocks, %lld failed allocations\n", round,
                   n_blocks, (long long)n_hit_blocks, (long long)n_fail);
        kv_pool_free(&p);
        if (test_cur_failed) break;
    }
}

static void test_prefix_hit_recomputes_last_token(void) {
    kv_pool_t p;
    kv_pool_init(&p, 16, B, true);
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, hit[4];
    kv_seq_blocks_t a = {0}, b = {0};
    CHECK(kv_allocate(&p, &a, t, 8, 8, NULL, 0));
    /* Exactly two full blocks: only the first may be reused, so the last token is computed. */
    CHECK_EQ_INT(kv_lookup_prefix(&p, t, 8, hit, 4), 1);
    CHECK_EQ_INT(hit[0], a.ids[0]);
    CHECK_EQ_INT(kv_lookup_prefix(&p, t, 9, hit, 4), 2);
    CHECK_EQ_INT(p.queries, 17);
    CHECK_EQ_INT(p.hits, 12);
    CHECK(kv_allocate(&p, &b, t, 8, 8, hit, 1));
    CHECK_EQ_INT(p.blocks[a.ids[0]].ref_cnt, 2);
    kv_free_seq(&p, &a);
    kv_free_seq(&p, &b);
    kv_seq_blocks_free(&a);
    kv_seq_blocks_free(&b);
    kv_pool_check(&p);
    kv_pool_free(&p);
}

static void test_freed_blocks_stay_cached_until_evicted_lru(void) {
    kv_pool_t p;
    kv_pool_init(&p, 5, B, true); /* 4 usable blocks */
    int32_t x[9] = {1, 1, 1, 1, 2, 2, 2, 2, 9}, y[8] = {7, 7, 7, 7, 8, 8, 8, 8}, hit[4];
    kv_seq_blocks_t a = {0}, b = {0}, c = {0};
    CHECK(kv_allocate(&p, &a, x, 9, 9, NULL, 0)); /* 3 blocks: 2 full (hashed) + 1 partial */
    kv_free_seq(&p, &a);
    CHECK(kv_pool_usage(&p) == 0.0);
    /* Still cached after the free. */
    CHECK_EQ_INT(kv_lookup_prefix(&p, x, 9, hit, 4), 2);
    /* Freed in reverse order: the queue is [untouched, partial, block 2, block 1]
     * so a 2-block allocation takes the untouched block and the partial one,
     * and both cached blocks survive. */
    CHECK(kv_allocate(&p, &b, y, 0, 8, NULL, 0));
    CHECK_EQ_INT(kv_lookup_prefix(&p, x, 9, hit, 4), 2);
    /* One more block evicts the LRU cached block, which is the tail of x's prefix. */
    CHECK(kv_allocate(&p, &c, y, 0, 4, NULL, 0));
    CHECK_EQ_INT(kv_lookup_prefix(&p, x, 9, hit, 4), 1);
    CHECK(!kv_allocate(&p, &c, y, 0, 12, NULL, 0)); /* pool of 4 cannot hold 5 */
    kv_free_seq(&p, &b);
    kv_free_seq(&p, &c);
    kv_seq_blocks_free(&a);
    kv_seq_blocks_free(&b);
    kv_seq_blocks_free(&c);
    kv_pool_check(&p);
    kv_pool_free(&p);
}

static void test_prefix_caching_off_never_hits(void) {
    kv_pool_t p;
    kv_pool_init(&p, 8, B, false);
    int32_t t[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9}, hit[4];
    kv_seq_blocks_t a = {0};
    CHECK(kv_allocate(&p, &a, t, 9, 9, NULL, 0));
    CHECK_EQ_INT(kv_lookup_prefix(&p, t, 9, hit, 4), 0);
    CHECK_EQ_INT(p.queries, 0);
    CHECK_EQ_INT(p.map_count, 0);
    kv_free_seq(&p, &a);
    kv_seq_blocks_free(&a);
    kv_pool_free(&p);
}

int main(void) {
    test_seed();
    RUN(test_random_operations_keep_pool_and_model_consistent);
    RUN(test_prefix_hit_recomputes_last_token);
    RUN(test_freed_blocks_stay_cached_until_evicted_lru);
    RUN(test_prefix_caching_off_never_hits);
    return test_summary();
}
