/* kv_pool.h - the KV block pool and prefix cache (host bookkeeping only).
 *
 * vLLM V1's KVCacheManager, in C: blocks of block_size tokens, block 0 the
 * reserved null block, a doubly-linked free queue in LRU order (allocation
 * pops the head, freed blocks go to the tail, a request's blocks in reverse
 * order so its tail is evicted before its prefix), reference counts, and a
 * hash map from a full block's chained hash to the block. A freed block keeps
 * its hash, so a later request can reuse it, until allocation evicts it.
 * Hashes: h_i = H(h_{i-1}, tokens of block i), 64-bit; h_{-1} a fixed seed.
 * One difference from vLLM: a second block with the same hash (computed by
 * two requests at once) is not registered; it is simply freed uncached.
 * The device memory the block ids index is the backend's (model.h kv_cache_t).
 */
#ifndef SERVELAB_KV_POOL_H
#define SERVELAB_KV_POOL_H

#include <stdbool.h>
#include <stdint.h>

#define KV_NULL_BLOCK 0

typedef struct {
    int32_t ref_cnt;
    int32_t prev, next;     /* free queue links; -1 = none */
    bool in_free_queue;
    bool has_hash;
    uint64_t hash;
} kv_block_t;

typedef struct {
    int32_t n_blocks;       /* including the null block */
    int32_t block_size;
    bool enable_prefix_caching;
    kv_block_t *blocks;     /* (n_blocks) */
    int32_t free_head, free_tail, n_free;
    /* Open-addressing map hash -> block id (linear probing, backward-shift delete). */
    uint64_t *map_keys;
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
    uint64_t *hashes;       /* (n_hashed) chained hashes of those blocks */
} kv_seq_blocks_t;

void kv_pool_init(kv_pool_t *p, int32_t n_blocks, int32_t block_size, bool enable_prefix_caching);
void kv_pool_free(kv_pool_t *p);

/* Fraction of usable blocks (all but the null block) that are referenced;
 * cached-but-free blocks count as free, as in vLLM. */
double kv_pool_usage(const kv_pool_t *p);
int32_t kv_pool_n_free(const kv_pool_t *p);

/* Chained hash of one full block. */
uint64_t kv_block_hash(uint64_t parent, const int32_t *tokens, int32_t n);

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
