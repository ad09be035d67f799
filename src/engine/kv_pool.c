/* kv_pool.c - block pool, LRU free queue and prefix-cache hash map (see kv_pool.h).
 *
 * Everything is O(1) per block: the free queue is an intrusive doubly-linked
 * list over the block array, the map is open addressing with linear probing
 * and backward-shift deletion (no tombstones, so lookups never degrade).
 *
 * Block hashes. vLLM hashes pickle((parent_hash, token_ids, extra_keys)); we
 * hash an unambiguous fixed layout of the same tuple (not pickle's bytes):
 *   parent    32 bytes: the parent block's kv_hash_t, KV_HASH_ROOT for block 0
 *   n         uint32 little-endian: the token count
 *   tokens    n x uint32 little-endian: the int32 ids (two's complement)
 *   n_extra   uint32 little-endian: the byte length of the extra keys, always
 *             0 today. vLLM's extra keys (LoRA id, multimodal input hashes,
 *             cache_salt) do not exist here; the field reserves their place,
 *             so adding them later cannot make two encodings alike.
 * sha256 is SHA-256 of those bytes (OpenSSL's EVP_Digest with the digest
 * fetched once: letting EVP look it up on every call costs more than the hash
 * itself); xxhash is xxh3_128 of them, its canonical big-endian 16 bytes then
 * 16 zero bytes, as vLLM's xxhash option is xxh3_128 of its bytes. The root is
 * fixed, 32 zero bytes: vLLM draws a random one per process (unless
 * PYTHONHASHSEED is set), a defence added when its block hash was Python's
 * builtin hash(), which could be made to collide; no property of SHA-256
 * rests on a secret root, and a fixed one keeps hashes reproducible (the unit
 * test checks them against digests computed independently).
 * Not offered: sha256_cbor and xxhash_cbor. They hash a CBOR encoding so that
 * programs in other languages (KV-event consumers, external KV stores) can
 * recompute vLLM's block hashes; servelab publishes no block hashes, so nobody
 * outside the process recomputes them, and the layout above is language-
 * independent already. The flag refuses them (src/cli/engine_args.c).
 */
#include "servelab/kv_pool.h"

#include <openssl/evp.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "servelab/core.h"

const kv_hash_t KV_HASH_ROOT = {{0}};

static const char *const hash_algo_names[] = {[KV_HASH_SHA256] = "sha256", [KV_HASH_XXHASH] = "xxhash"};

const char *kv_hash_algo_name(kv_hash_algo_t algo) {
    SL_ASSERT((unsigned)algo < sizeof hash_algo_names / sizeof hash_algo_names[0]);
    return hash_algo_names[algo];
}

int kv_hash_algo_parse(const char *name) {
    for (int i = 0; i < (int)(sizeof hash_algo_names / sizeof hash_algo_names[0]); i++)
        if (!strcmp(name, hash_algo_names[i])) return i;
    return -1;
}

/* Fetched once for the process and never freed (OpenSSL holds it until exit). */
static EVP_MD *sha256_md;
static pthread_once_t sha256_once = PTHREAD_ONCE_INIT;

static void sha256_fetch(void) { sha256_md = EVP_MD_fetch(NULL, "SHA2-256", NULL); }

static const EVP_MD *sha256(void) {
    pthread_once(&sha256_once, sha256_fetch);
    if (!sha256_md)
        sl_die("OpenSSL has no SHA-256 (EVP_MD_fetch \"SHA2-256\" failed), needed for prefix-caching block "
               "hashes. Hint: check OPENSSL_CONF and OPENSSL_MODULES, or run with --no-enable-prefix-caching");
    return sha256_md;
}

static void put_u32le(uint8_t *d, uint32_t v) {
    d[0] = (uint8_t)v;
    d[1] = (uint8_t)(v >> 8);
    d[2] = (uint8_t)(v >> 16);
    d[3] = (uint8_t)(v >> 24);
}

void kv_block_hash(kv_hash_algo_t algo, const kv_hash_t *parent, const int32_t *tokens, int32_t n,
                   kv_hash_t *out) {
    SL_ASSERT(n >= 0 && n <= KV_MAX_BLOCK_SIZE);
    uint8_t buf[KV_HASH_BYTES + 4 + 4 * KV_MAX_BLOCK_SIZE + 4];
    size_t len = 0;
    memcpy(buf, parent->b, KV_HASH_BYTES); /* before *out is written: out may alias parent */
    len += KV_HASH_BYTES;
    put_u32le(buf + len, (uint32_t)n);
    len += 4;
    for (int32_t i = 0; i < n; i++, len += 4) put_u32le(buf + len, (uint32_t)tokens[i]);
    put_u32le(buf + len, 0); /* extra keys: none (see the top of the file) */
    len += 4;
    switch (algo) {
    case KV_HASH_SHA256:
        if (!EVP_Digest(buf, len, out->b, NULL, sha256(), NULL)) sl_die("OpenSSL: SHA-256 of a KV block failed");
        return;
    case KV_HASH_XXHASH: {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(buf, len));
        memcpy(out->b, c.digest, sizeof c.digest);
        memset(out->b + sizeof c.digest, 0, KV_HASH_BYTES - sizeof c.digest);
        return;
    }
    }
    SL_ASSERT(!"unknown kv_hash_algo_t");
}

static bool hash_eq(const kv_hash_t *a, const kv_hash_t *b) { return !memcmp(a->b, b->b, KV_HASH_BYTES); }

/* ---- free queue ------------------------------------------------------------ */

static void fq_remove(kv_pool_t *p, int32_t id) {
    kv_block_t *b = &p->blocks[id];
    SL_ASSERT(b->in_free_queue);
    if (b->prev >= 0) p->blocks[b->prev].next = b->next;
    else p->free_head = b->next;
    if (b->next >= 0) p->blocks[b->next].prev = b->prev;
    else p->free_tail = b->prev;
    b->prev = b->next = -1;
    b->in_free_queue = false;
    p->n_free--;
}

static void fq_push_tail(kv_pool_t *p, int32_t id) {
    kv_block_t *b = &p->blocks[id];
    SL_ASSERT(!b->in_free_queue && b->ref_cnt == 0);
    b->prev = p->free_tail;
    b->next = -1;
    if (p->free_tail >= 0) p->blocks[p->free_tail].next = id;
    else p->free_head = id;
    p->free_tail = id;
    b->in_free_queue = true;
    p->n_free++;
}

/* ---- hash map ---------------------------------------------------------------- */

/* The digest's first 8 bytes pick the slot (they are as uniform as the rest);
 * equality is always on all 32. */
static int64_t map_slot(const kv_pool_t *p, const kv_hash_t *key) {
    uint64_t x;
    memcpy(&x, key->b, sizeof x);
    return (int64_t)(x & (uint64_t)(p->map_cap - 1));
}

static int32_t map_get(const kv_pool_t *p, const kv_hash_t *key) {
    for (int64_t i = map_slot(p, key);; i = (i + 1) & (p->map_cap - 1)) {
        if (p->map_vals[i] < 0) return -1;
        if (hash_eq(&p->map_keys[i], key)) return p->map_vals[i];
    }
}

static void map_put(kv_pool_t *p, const kv_hash_t *key, int32_t val) {
    SL_ASSERT(p->map_count < p->map_cap / 2);
    int64_t i = map_slot(p, key);
    while (p->map_vals[i] >= 0) i = (i + 1) & (p->map_cap - 1);
    p->map_keys[i] = *key;
    p->map_vals[i] = val;
    p->map_count++;
}

static void map_del(kv_pool_t *p, const kv_hash_t *key) {
    int64_t mask = p->map_cap - 1, i = map_slot(p, key);
    while (p->map_vals[i] >= 0 && !hash_eq(&p->map_keys[i], key)) i = (i + 1) & mask;
    SL_ASSERT(p->map_vals[i] >= 0);
    /* Backward shift: move later entries of the probe run into the hole when
     * their home slot is not between the hole and their current slot. */
    for (int64_t j = (i + 1) & mask; p->map_vals[j] >= 0; j = (j + 1) & mask) {
        int64_t home = map_slot(p, &p->map_keys[j]);
        bool movable = (i <= j) ? (home <= i || home > j) : (home <= i && home > j);
        if (movable) {
            p->map_keys[i] = p->map_keys[j];
            p->map_vals[i] = p->map_vals[j];
            i = j;
        }
    }
    p->map_vals[i] = -1;
    p->map_count--;
}

/* ---- pool ---------------------------------------------------------------------- */

void kv_pool_init(kv_pool_t *p, int32_t n_blocks, int32_t block_size, bool enable_prefix_caching,
                  kv_hash_algo_t hash_algo) {
    SL_ASSERT(n_blocks >= 2 && block_size >= 1 && block_size <= KV_MAX_BLOCK_SIZE);
    SL_ASSERT(hash_algo == KV_HASH_SHA256 || hash_algo == KV_HASH_XXHASH);
    if (enable_prefix_caching && hash_algo == KV_HASH_SHA256) sha256(); /* fail at startup, not mid-request */
    memset(p, 0, sizeof *p);
    p->n_blocks = n_blocks;
    p->block_size = block_size;
    p->enable_prefix_caching = enable_prefix_caching;
    p->hash_algo = hash_algo;
    p->blocks = sl_calloc((size_t)n_blocks, sizeof *p->blocks);
    p->free_head = p->free_tail = -1;
    for (int32_t i = 0; i < n_blocks; i++) p->blocks[i].prev = p->blocks[i].next = -1;
    p->blocks[KV_NULL_BLOCK].ref_cnt = 1; /* never allocated, never freed */
    for (int32_t i = 1; i < n_blocks; i++) fq_push_tail(p, i);
    p->map_cap = 16;
    while (p->map_cap < 2 * (int64_t)n_blocks + 2) p->map_cap *= 2;
    p->map_keys = sl_calloc((size_t)p->map_cap, sizeof *p->map_keys);
    p->map_vals = sl_malloc((size_t)p->map_cap * sizeof *p->map_vals);
    for (int64_t i = 0; i < p->map_cap; i++) p->map_vals[i] = -1;
}

void kv_pool_free(kv_pool_t *p) {
    free(p->blocks);
    free(p->map_keys);
    free(p->map_vals);
    memset(p, 0, sizeof *p);
}

int32_t kv_pool_n_free(const kv_pool_t *p) { return p->n_free; }

double kv_pool_usage(const kv_pool_t *p) {
    return 1.0 - (double)p->n_free / (double)(p->n_blocks - 1);
}

int32_t kv_lookup_prefix(kv_pool_t *p, const int32_t *tokens, int32_t n_tokens, int32_t *out,
                         int32_t max_out) {
    if (!p->enable_prefix_caching) return 0;
    int32_t B = p->block_size, max_blocks = (n_tokens - 1) / B, n = 0;
    if (max_blocks > max_out) max_blocks = max_out;
    kv_hash_t h = KV_HASH_ROOT;
    while (n < max_blocks) {
        kv_block_hash(p->hash_algo, &h, tokens + (int64_t)n * B, B, &h);
        int32_t id = map_get(p, &h);
        if (id < 0) break;
        out[n++] = id;
    }
    p->lookups++;
    p->queries += n_tokens;
    p->hits += (int64_t)n * B;
    return n;
}

static void seq_push(kv_seq_blocks_t *s, int32_t id) {
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 8;
        s->ids = sl_realloc(s->ids, (size_t)s->cap * sizeof *s->ids);
        s->hashes = sl_realloc(s->hashes, (size_t)s->cap * sizeof *s->hashes);
    }
    s->ids[s->n++] = id;
}

bool kv_allocate(kv_pool_t *p, kv_seq_blocks_t *seq, const int32_t *tokens, int32_t n_known_tokens,
                 int32_t n_total_tokens, const int32_t *hit, int32_t n_hit) {
    int32_t B = p->block_size;
    SL_ASSERT(n_hit == 0 || seq->n == 0);
    int32_t need = (n_total_tokens + B - 1) / B - seq->n - n_hit;
    if (need < 0) need = 0;
    /* Hit blocks nobody references sit in the free queue: taking them makes
     * them unavailable for the new blocks. */
    int32_t free_hits = 0;
    for (int32_t i = 0; i < n_hit; i++) free_hits += p->blocks[hit[i]].ref_cnt == 0;
    if (need > p->n_free - free_hits) return false;

    for (int32_t i = 0; i < n_hit; i++) {
        kv_block_t *b = &p->blocks[hit[i]];
        SL_ASSERT(b->has_hash);
        if (b->ref_cnt == 0) fq_remove(p, hit[i]);
        b->ref_cnt++;
        seq_push(seq, hit[i]);
        seq->hashes[seq->n_hashed++] = b->hash;
    }
    for (int32_t i = 0; i < need; i++) {
        int32_t id = p->free_head;
        kv_block_t *b = &p->blocks[id];
        fq_remove(p, id);
        if (b->has_hash) { /* evict: the LRU cached block */
            if (map_get(p, &b->hash) == id) map_del(p, &b->hash);
            b->has_hash = false;
        }
        b->ref_cnt = 1;
        seq_push(seq, id);
    }
    if (!p->enable_prefix_caching) return true;
    int32_t n_full = n_known_tokens / B;
    if (n_full > seq->n) n_full = seq->n;
    for (int32_t i = seq->n_hashed; i < n_full; i++) {
        kv_hash_t *h = &seq->hashes[i];
        kv_block_hash(p->hash_algo, i ? &seq->hashes[i - 1] : &KV_HASH_ROOT, tokens + (int64_t)i * B, B, h);
        kv_block_t *b = &p->blocks[seq->ids[i]];
        if (!b->has_hash && map_get(p, h) < 0) {
            b->has_hash = true;
            b->hash = *h;
            map_put(p, h, seq->ids[i]);
        }
    }
    if (n_full > seq->n_hashed) seq->n_hashed = n_full;
    return true;
}

void kv_forget_uncomputed(kv_pool_t *p, kv_seq_blocks_t *seq, int32_t n_valid_tokens) {
    int32_t keep = n_valid_tokens / p->block_size;
    for (int32_t i = keep; i < seq->n_hashed; i++) {
        int32_t id = seq->ids[i];
        kv_block_t *b = &p->blocks[id];
        /* Only the block that registered the hash holds it (kv_allocate). */
        if (b->has_hash && hash_eq(&b->hash, &seq->hashes[i]) && map_get(p, &b->hash) == id) {
            map_del(p, &b->hash);
            b->has_hash = false;
        }
    }
    if (seq->n_hashed > keep) seq->n_hashed = keep;
}

void kv_free_seq(kv_pool_t *p, kv_seq_blocks_t *seq) {
    for (int32_t i = seq->n - 1; i >= 0; i--) {
        kv_block_t *b = &p->blocks[seq->ids[i]];
        SL_ASSERT(b->ref_cnt > 0);
        if (--b->ref_cnt == 0) fq_push_tail(p, seq->ids[i]);
    }
    seq->n = 0;
    seq->n_hashed = 0;
}

void kv_block_hold(kv_pool_t *p, int32_t id) {
    SL_ASSERT(id > KV_NULL_BLOCK && id < p->n_blocks && p->blocks[id].ref_cnt > 0);
    p->blocks[id].ref_cnt++;
}

void kv_block_release(kv_pool_t *p, int32_t id) {
    kv_block_t *b = &p->blocks[id];
    SL_ASSERT(id > KV_NULL_BLOCK && id < p->n_blocks && b->ref_cnt > 0);
    if (--b->ref_cnt == 0) fq_push_tail(p, id);
}

void kv_seq_blocks_free(kv_seq_blocks_t *seq) {
    free(seq->ids);
    free(seq->hashes);
    memset(seq, 0, sizeof *seq);
}

void kv_pool_check(const kv_pool_t *p) {
    int32_t n_free = 0, n_hashed = 0;
    SL_ASSERT(p->blocks[KV_NULL_BLOCK].ref_cnt == 1 && !p->blocks[KV_NULL_BLOCK].in_free_queue);
    for (int32_t id = p->free_head, prev = -1; id >= 0; prev = id, id = p->blocks[id].next) {
        SL_ASSERT(p->blocks[id].in_free_queue && p->blocks[id].prev == prev);
        SL_ASSERT(p->blocks[id].ref_cnt == 0);
        SL_ASSERT(++n_free <= p->n_blocks);
    }
    SL_ASSERT(n_free == p->n_free);
    for (int32_t i = 1; i < p->n_blocks; i++) {
        const kv_block_t *b = &p->blocks[i];
        SL_ASSERT(b->ref_cnt >= 0);
        SL_ASSERT((b->ref_cnt == 0) == b->in_free_queue);
        if (b->has_hash) {
            n_hashed++;
            SL_ASSERT(map_get(p, &b->hash) == i);
        }
    }
    SL_ASSERT(n_hashed == p->map_count);
}
