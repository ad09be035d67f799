/* bpe_impl.h - the insides of bpe_t, shared by bpe_load.c (tokenizer.json
 * parsing) and bpe.c (encoding, decoding). Nothing outside those two files
 * includes it.
 */
#ifndef SERVELAB_BPE_IMPL_H
#define SERVELAB_BPE_IMPL_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "bpe.h"

/* A string -> id hash map; keys live in the map's own arena. */
typedef struct {
    uint32_t off, len;
    int32_t id;
} strent_t;

typedef struct {
    int32_t *slot; /* (mask+1) index into ent, -1 when empty */
    size_t mask;
    strent_t *ent;
    size_t n, cap;
    char *arena;
    size_t arena_n, arena_cap;
} strmap_t;

/* (left id, right id) -> merge rank and merged id. */
typedef struct {
    uint64_t key; /* left << 32 | right, UINT64_MAX when empty */
    uint32_t rank;
    int32_t id;
} pairent_t;

typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } split_behavior_t;

/* One pre-tokenizer step over the splits. ByteLevel is a step with
 * add_prefix_space and the GPT-2 regex (when use_regex), always the last. */
typedef struct {
    pcre2_code *re; /* NULL: no split (ByteLevel with use_regex false) */
    split_behavior_t behavior;
    bool add_prefix_space;
} pretok_t;

typedef struct {
    char *text; /* content: the token's text in the vocabulary */
    size_t len;
    char *match; /* what is matched in the text: content, or its NFC when normalized */
    size_t match_len;
    int32_t id;
    bool single_word, lstrip, rstrip, normalized, special;
} bpe_added_t;

struct bpe {
    int32_t n_vocab;   /* V: one past the largest id */
    strmap_t vocab;    /* model vocabulary, byte-level strings */
    strmap_t added_by; /* added token contents */
    pairent_t *pairs;  /* open addressing, pair_mask+1 slots */
    size_t pair_mask;
    int32_t byte_id[256]; /* id of the one-character token of each byte, -1 if none */
    int32_t unk_id;
    bool ignore_merges;
    bool nfc; /* the normalizer is NFC (Qwen2): applied between non-normalized added tokens */
    pretok_t *pretok;
    int n_pretok;
    bpe_added_t *added;
    int n_added;
    uint8_t added_first[32]; /* bitmap of the first bytes of added tokens */
    int32_t *prefix_ids, *suffix_ids; /* TemplateProcessing "single" around the text */
    int n_prefix, n_suffix;
    uint32_t *text_off; /* (V+1) offsets of each id's decoded bytes in text */
    char *text;
    uint8_t *special; /* (V) 1 for special added tokens */
};

/* The GPT-2 byte <-> character map of ByteLevel: each byte's character, UTF-8. */
extern const char *bpe_byte_char[256];
void bpe_byte_map_init(void);
/* The byte a character stands for, or -1 for characters outside the map. */
int bpe_char_byte(uint32_t cp);

/* NFC of valid UTF-8 s[0..n): malloc'd, its length in *n_out. */
char *bpe_nfc(const char *s, size_t n, size_t *n_out);

void strmap_put(strmap_t *m, const char *s, size_t n, int32_t id);
int32_t strmap_get(const strmap_t *m, const char *s, size_t n);
void strmap_free(strmap_t *m);

#endif
