/* test_kv_pool.c - the block pool and prefix cache against a simple model.
 *
 * The property test runs thousands of random operations (admit with prefix
 * lookup, grow, free, fail when full) on a small pool and after each checks
 * the pool's own invariants (kv_pool_check) plus a model kept here: every
 * block's reference count equals the number of live sequences holding it, no
 * block is both free and held, and a prefix hit only ever returns blocks whose
 * recorded content is exactly the looked-up tokens. Named tests pin the vLLM
 * behaviours: LRU eviction order, reverse-order freeing, last token computed;
 * and the block hash: known answers for both algorithms, every digest byte
 * compared, and two prompts whose blocks the old 64-bit hash confused.
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
        kv_pool_init(&p, n_blocks, B, round % 4 != 3, round % 2 ? KV_HASH_XXHASH : KV_HASH_SHA256);
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
    kv_pool_init(&p, 16, B, true, KV_HASH_SHA256);
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
    kv_pool_init(&p, 5, B, true, KV_HASH_SHA256); /* 4 usable blocks */
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
    kv_pool_init(&p, 8, B, false, KV_HASH_SHA256);
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

/* ---- block hashes ------------------------------------------------------------ */

static void hash_hex(const kv_hash_t *h, char out[2 * KV_HASH_BYTES + 1]) {
    for (int i = 0; i < KV_HASH_BYTES; i++) snprintf(out + 2 * i, 3, "%02x", h->b[i]);
}

/* The expected digests were computed apart from this code, with Python over the
 * byte layout kv_pool.c describes (parent, u32le count, u32le ids, u32le 0):
 *   python3 -c 'import hashlib, struct, xxhash
 *   enc = lambda p, t: p + struct.pack("<I", len(t)) + struct.pack("<%di" % len(t), *t) + struct.pack("<I", 0)
 *   s0 = hashlib.sha256(enc(bytes(32), [1, 2, 300, 70000])).digest()
 *   x0 = xxhash.xxh3_128_digest(enc(bytes(32), [1, 2, 300, 70000])) + bytes(16)
 *   print(s0.hex(), hashlib.sha256(enc(s0, [5, 6, 7, -1])).hexdigest())
 *   print(x0.hex(), (xxhash.xxh3_128_digest(enc(x0, [5, 6, 7, -1])) + bytes(16)).hex())'
 * (hashlib from CPython 3.11, xxhash 4.1.0 from PyPI, which bundles libxxhash 0.8.4). */
static void test_block_hash_known_answers(void) {
    static const struct {
        kv_hash_algo_t algo;
        const char *block0, *block1;
    } cases[] = {
        {KV_HASH_SHA256, "c60e98d2dc433e7d33040eb50716f304487d93131d284130b55b31f1e275d25f",
         "eac59c2bcd4bcfd6e6d0f479616df15e0e20f108ac0ad292f5df3e147a2cb151"},
        {KV_HASH_XXHASH, "d9cf560b864751f0e36f0ac48c98547a00000000000000000000000000000000",
         "1a8a031752cabf0f10d0cab893c9450000000000000000000000000000000000"},
    };
    int32_t t0[4] = {1, 2, 300, 70000}, t1[4] = {5, 6, 7, -1};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        kv_hash_t h0, h1;
        char hex[2 * KV_HASH_BYTES + 1];
        kv_block_hash(cases[c].algo, &KV_HASH_ROOT, t0, 4, &h0);
        hash_hex(&h0, hex);
        CHECK(!strcmp(hex, cases[c].block0));
        kv_block_hash(cases[c].algo, &h0, t1, 4, &h1);
        hash_hex(&h1, hex);
        CHECK(!strcmp(hex, cases[c].block1));
        if (test_cur_failed) printf("  %s: got %s\n", kv_hash_algo_name(cases[c].algo), hex);
        /* In place (out == parent), as kv_lookup_prefix chains them. */
        kv_block_hash(cases[c].algo, &h0, t1, 4, &h0);
        CHECK(!memcmp(&h0, &h1, sizeof h0));
    }
    CHECK(!strcmp(kv_hash_algo_name(KV_HASH_SHA256), "sha256"));
    CHECK_EQ_INT(kv_hash_algo_parse("xxhash"), KV_HASH_XXHASH);
    CHECK_EQ_INT(kv_hash_algo_parse("sha256_cbor"), -1);
}

/* A registered block's digest, changed in one byte past the 8 that pick its
 * map slot (in the map and in the block alike, so the pool stays consistent),
 * no longer matches the prompt's own hash: a hit compares every byte. */
static void test_prefix_hit_compares_every_digest_byte(void) {
    kv_pool_t p;
    kv_pool_init(&p, 8, B, true, KV_HASH_SHA256);
    int32_t t[5] = {1, 2, 3, 4, 5}, hit[1];
    kv_seq_blocks_t a = {0};
    CHECK(kv_allocate(&p, &a, t, 5, 5, NULL, 0));
    int64_t slot = -1;
    for (int64_t i = 0; i < p.map_cap; i++)
        if (p.map_vals[i] == a.ids[0]) slot = i;
    CHECK(slot >= 0);
    for (int k = 8; k < KV_HASH_BYTES && slot >= 0; k++) {
        p.map_keys[slot].b[k] ^= 0x80;
        p.blocks[a.ids[0]].hash.b[k] ^= 0x80;
        kv_pool_check(&p);
        CHECK_EQ_INT(kv_lookup_prefix(&p, t, 5, hit, 1), 0);
        p.map_keys[slot].b[k] ^= 0x80;
        p.blocks[a.ids[0]].hash.b[k] ^= 0x80;
        CHECK_EQ_INT(kv_lookup_prefix(&p, t, 5, hit, 1), 1);
    }
    kv_free_seq(&p, &a);
    kv_seq_blocks_free(&a);
    kv_pool_check(&p);
    kv_pool_free(&p);
}

/* The block hash kv_pool.c used before SHA-256, kept here only to show what
 * it allowed: murmur3's fmix64 chained over the tokens, 64 bits. Each step is
 * invertible (xor-shifts by 33, odd multipliers), so it can be run backwards. */
#define OLD_SEED 0x5e4ce1ab00000001ull
#define OLD_TOKEN_MUL 0x100000001b3ull

static uint64_t old_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static uint64_t old_block_hash(uint64_t parent, const int32_t *tokens, int32_t n) {
    uint64_t h = old_mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int32_t i = 0; i < n; i++) h = old_mix64(h ^ ((uint64_t)(uint32_t)tokens[i] * OLD_TOKEN_MUL + (uint64_t)i));
    return old_mix64(h ^ (uint64_t)n);
}

/* c^-1 mod 2^64 for odd c (Newton's iteration doubles the correct bits). */
static uint64_t inverse_mod_2_64(uint64_t c) {
    uint64_t x = c; /* right to 3 bits: c * c = 1 mod 8 */
    for (int i = 0; i < 5; i++) x *= 2 - c * x;
    return x;
}

static uint64_t old_unmix64(uint64_t x) {
    x ^= x >> 33; /* a shift by 33 >= 32 is its own inverse */
    x *= inverse_mod_2_64(0xc4ceb9fe1a85ec53ull);
    x ^= x >> 33;
    x *= inverse_mod_2_64(0xff51afd7ed558ccdull);
    x ^= x >> 33;
    return x;
}

/* Solves for the last token of an n-token block whose first n - 1 tokens are
 * `head`, so that the block hashes to `target` under `parent`; false when the
 * solution is not a 32-bit token. Only the token's 32 bits are free while the
 * state is 64, so about one head in 2^32 has a solution. */
static bool old_solve_last_token(uint64_t parent, const int32_t *head, int32_t n, uint64_t target, int32_t *tok) {
    uint64_t h = old_mix64(parent ^ 0x9e3779b97f4a7c15ull);
    for (int32_t i = 0; i < n - 1; i++) h = old_mix64(h ^ ((uint64_t)(uint32_t)head[i] * OLD_TOKEN_MUL + (uint64_t)i));
    uint64_t before_last = old_unmix64(target) ^ (uint64_t)n; /* the state after all n tokens */
    uint64_t v = old_unmix64(before_last) ^ h;                /* = last * OLD_TOKEN_MUL + (n - 1) */
    uint64_t last = (v - (uint64_t)(n - 1)) * inverse_mod_2_64(OLD_TOKEN_MUL);
    if (last >> 32) return false;
    *tok = (int32_t)(uint32_t)last;
    return true;
}

/* Two prompts whose first blocks differ but had the same old 64-bit hash: the
 * old pool served A's KV to B. B's last token is solved here by running the old
 * hash backwards from A's hash; its third token, 1389646126, was found offline
 * by that solve over third tokens 0, 1, 2, ... (with 5, 7 first) until the
 * solution fit in 31 bits (about 2^33 tries, a minute of one core); tokens 5
 * and 6 give one with a negative token. Keyed on SHA-256 (or xxh3_128), B does
 * not hit A's block, and A still does. */
static void test_old_64bit_hash_collision_shares_no_block(void) {
    int32_t a[B + 1] = {1, 2, 3, 4, 9}, b[B + 1] = {5, 7, 1389646126, 0, 9};
    uint64_t target = old_block_hash(OLD_SEED, a, B);
    CHECK(old_solve_last_token(OLD_SEED, b, B, target, &b[B - 1]));
    CHECK_EQ_INT(b[B - 1], 1391057889);
    CHECK(memcmp(a, b, B * sizeof a[0]) != 0);
    CHECK(old_block_hash(OLD_SEED, b, B) == target); /* the old map: B hits A's block */
    printf("  old hash of both first blocks: %016llx\n", (unsigned long long)target);

    for (int algo = KV_HASH_SHA256; algo <= KV_HASH_XXHASH; algo++) {
        kv_pool_t p;
        kv_pool_init(&p, 8, B, true, (kv_hash_algo_t)algo);
        kv_seq_blocks_t sa = {0};
        int32_t hit[2];
        CHECK(kv_allocate(&p, &sa, a, B + 1, B + 1, NULL, 0));
        CHECK_EQ_INT(kv_lookup_prefix(&p, b, B + 1, hit, 2), 0);
        CHECK_EQ_INT(kv_lookup_prefix(&p, a, B + 1, hit, 2), 1);
        CHECK_EQ_INT(hit[0], sa.ids[0]);
        kv_free_seq(&p, &sa);
        kv_seq_blocks_free(&sa);
        kv_pool_check(&p);
        kv_pool_free(&p);
    }
}

int main(void) {
    test_seed();
    RUN(test_random_operations_keep_pool_and_model_consistent);
    RUN(test_prefix_hit_recomputes_last_token);
    RUN(test_freed_blocks_stay_cached_until_evicted_lru);
    RUN(test_prefix_caching_off_never_hits);
    RUN(test_block_hash_known_answers);
    RUN(test_prefix_hit_compares_every_digest_byte);
    RUN(test_old_64bit_hash_collision_shares_no_block);
    return test_summary();
}
