/* kv_pool.h - the KV block pool and prefix cache (host bookkeeping only).
 *
 * vLLM V1's KVCacheManager, in C: blocks of block_size tokens, block 0 the
 * reserved null block, a doubly-linked free queue in LRU order (allocation
 * pops the head, freed blocks go to the tail, a request's blocks in reverse
 * order so its tail is evicted before its prefix), reference counts, and a
 * hash map from a full block's chained hash to the block. A freed block keeps
 * its hash, so a later request can reuse it, until allocation evicts it.
 * Hashes: h_i = H(h_{i-1}, tokens of block i, extra keys), H SHA-256 (vLLM's
 * --prefix-caching-hash-algo sha256, its default) or xxh3_128, h_{-1} a fixed
 * root; the map and the sequences keep the full digest and a hit needs every
 * byte of it to match, so a block is only shared by prompts with the same
 * prefix (a 64-bit hash here once could be made to collide, CVE-2025-25183's
 * class of bug). One difference from vLLM: a second block with the same hash
 * (computed by two requests at once) is not registered; it is freed uncached.
 * The device memory the block ids index is the backend's (model.h kv_cache_t).
 */
#ifndef SERVELAB_KV_POOL_H
#define SERVELAB_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#define KV_NULL_BLOCK 0
#define KV_HASH_BYTES 32
#define KV_MAX_BLOCK_SIZE 256   /* a block's hashed bytes fit one stack buffer */

/* --prefix-caching-hash-algo. Zero is the default, so a zeroed config gets it. */
typedef enum {
    KV_HASH_SHA256 = 0,     /* SHA-256, 32 bytes */
    KV_HASH_XXHASH,         /* xxh3_128, 16 bytes: faster, not collision-resistant against crafted prompts */
} kv_hash_algo_t;

/* A block hash: the digest, zero-padded to 32 bytes (xxhash). Compared in full. */
typedef struct {
    uint8_t b[KV_HASH_BYTES];
} kv_hash_t;

typedef struct {
    int32_t ref_cnt;
    int32_t prev, next;     /* free queue links; -1 = none */
    bool in_free_queue;
    bool has_hash;
    kv_hash_t hash;
} kv_block_t;

typedef struct {
    int32_t n_blocks;       /* including the null block */
    int32_t block_size;
    bool enable_prefix_caching;
    kv_hash_algo_t hash_algo;
    kv_block_t *blocks;     /* (n_blocks) */
    int32_t free_head, free_tail, n_free;
    /* Open-addressing map hash -> block id (linear probing, backward-shift delete);
     * the slot comes from a key's first 8 bytes, a match needs all 32. */
    kv_hash_t *map_keys;
    int32_t *map_vals;      /* -1 = empty slot */
    int64_t map_cap;        /* power of two */
    int64_t map_count;
    /* Prefix-cache counters, in tokens (vllm:prefix_cache_queries/hits_total). */
    int64_t queries, hits;
    int64_t lookups;        /* requests looked up (vLLM's PrefixCacheStats.requests) */
} kv_pool_t;

/* The blocks a sequence holds, in order, and how many of them are hashed. */
typedef struct {
    int32_t *ids;
    int32_t n, cap;
    int32_t n_hashed;       /* leading full blocks registered in the cache */
    kv_hash_t *hashes;      /* (n_hashed) chained hashes of those blocks */
} kv_seq_blocks_t;

/* block_size <= KV_MAX_BLOCK_SIZE. The first use of SHA-256 fetches it from
 * OpenSSL; if that fails (a broken OpenSSL configuration), the process exits
 * with one line. */
void kv_pool_init(kv_pool_t *p, int32_t n_blocks, int32_t block_size, bool enable_prefix_caching,
                  kv_hash_algo_t hash_algo);
void kv_pool_free(kv_pool_t *p);

/* Fraction of usable blocks (all but the null block) that are referenced;
 * cached-but-free blocks count as free, as in vLLM. */
double kv_pool_usage(const kv_pool_t *p);
int32_t kv_pool_n_free(const kv_pool_t *p);

/* The flag's name of an algorithm ("sha256", "xxhash"), as vLLM spells it;
 * kv_hash_algo_parse is its inverse, -1 for any other string. */
const char *kv_hash_algo_name(kv_hash_algo_t algo);
int kv_hash_algo_parse(const char *name);

/* The parent of a sequence's first block. */
extern const kv_hash_t KV_HASH_ROOT;

/* Chained hash of one full block of n <= KV_MAX_BLOCK_SIZE tokens: writes
 * H(parent, tokens) to *out, which may be parent itself (kv_pool.c gives the
 * exact bytes hashed). Thread-safe. */
void kv_block_hash(kv_hash_algo_t algo, const kv_hash_t *parent, const int32_t *tokens, int32_t n,
                   kv_hash_t *out);

/* Longest run of cached full blocks for `tokens`, limited to n_tokens - 1
 * tokens (the last token is always computed). Writes up to `max_out` block
 * ids to `out` (not yet referenced) and returns the number of blocks; adds
 * n_tokens to the queries counter and the hit tokens to the hits counter.
 * Returns 0 without counting when prefix caching is off. */
int32_t kv_lookup_prefix(kv_pool_t *p, const int32_t *tokens, int32_t n_tokens, int32_t *out,
                         int32_t max_out);

/* Gives `seq` the blocks it needs to hold `n_total_tokens` tokens, first
 * taking the `n_hit` cached blocks `hit` found by kv_lookup_prefix (only when
 * seq holds no blocks yet). Fails (false) without changing anything when the
 * free queue cannot provide them. Then registers the hashes of every full
 * block among the first `n_known_tokens` tokens of `tokens` (the tokens whose
 * KV will have been computed after this step). */
bool kv_allocate(kv_pool_t *p, kv_seq_blocks_t *seq, const int32_t *tokens, int32_t n_known_tokens,
                 int32_t n_total_tokens, const int32_t *hit, int32_t n_hit);
/* The step that was to compute seq's tokens from n_valid_tokens on failed:
 * the blocks past the full ones among the first n_valid_tokens leave the
 * prefix cache (their hashes were registered at allocation, their contents
 * were never written), so no later request reuses them. */
void kv_forget_uncomputed(kv_pool_t *p, kv_seq_blocks_t *seq, int32_t n_valid_tokens);

/* Releases all of seq's blocks, last block first. */
void kv_free_seq(kv_pool_t *p, kv_seq_blocks_t *seq);
void kv_seq_blocks_free(kv_seq_blocks_t *seq);

/* One more reference to block id, which some sequence holds (ref_cnt > 0),
 * and its release: a held block stays out of the free queue (never
 * evicted, its prefix-cache entry kept) until the last reference goes.
 * The lab's kv_leak holds blocks of finished requests this way. */
void kv_block_hold(kv_pool_t *p, int32_t id);
void kv_block_release(kv_pool_t *p, int32_t id);

/* The prefix cache's counters, in tokens and requests (vLLM's
 * PrefixCacheStats: queries, hits, requests looked up). */
typedef struct {
    int64_t queries, hits, lookups;
} kv_prefix_stats_t;
static inline kv_prefix_stats_t kv_pool_prefix_stats(const kv_pool_t *p) {
    return (kv_prefix_stats_t){.queries = p->queries, .hits = p->hits, .lookups = p->lookups};
}
static inline int32_t kv_pool_n_blocks(const kv_pool_t *p) { return p->n_blocks; }

/* Checks every invariant (ref counts vs free queue, map vs block hashes,
 * counts); aborts on a violation. For tests. */
void kv_pool_check(const kv_pool_t *p);

#endif
