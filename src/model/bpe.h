/* bpe.h - byte-level BPE tokenizers from Hugging Face tokenizer.json (private to src/model).
 *
 * Encodes and decodes as the `tokenizers` package does for GPT-2, Llama-3,
 * Qwen2 and SmolLM checkpoints: added tokens are matched first (leftmost-
 * longest, with their single_word / lstrip / rstrip flags; non-normalized
 * ones, then normalized ones in the NFC-normalized rest when the normalizer is
 * NFC, by utf8proc), the text between them goes through the pre-tokenizers (Split with a regex or string, Digits, ByteLevel
 * with the GPT-2 regex, Sequence; ByteLevel last), then the BPE model (merges
 * by rank, ignore_merges). The post-processor's TemplateProcessing adds its
 * special tokens around the ids when asked. Decoding is the ByteLevel
 * decoder's, with Rust's from_utf8_lossy for bytes that are not UTF-8.
 * Regexes are PCRE2's (UTF + UCP), standing in for tokenizers' Oniguruma.
 * Not supported, refused at load: normalizers other than NFC, other models
 * and decoders, byte_fallback, subword prefixes/suffixes, dropout, fuse_unk.
 * single_word's word characters are ASCII letters, digits and '_' here.
 */
#ifndef SERVELAB_BPE_H
#define SERVELAB_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/core.h"

typedef struct bpe bpe_t;

/* Parses the text of a tokenizer.json (`len` bytes, NUL-terminated); `name`
 * prefixes error messages. NULL with a one-line message in `err` on failure.
 * A loaded tokenizer is read-only and may be used from many threads. */
bpe_t *bpe_load(const char *json, size_t len, const char *name, sl_err_t *err);
void bpe_free(bpe_t *bpe);

/* V: one past the largest id of the vocabulary and the added tokens. */
int32_t bpe_vocab_size(const bpe_t *bpe);
/* The bytes the ByteLevel decoder gives `id` (owned by `bpe`); an id that
 * names no token has none. NULL for an id out of range. */
const char *bpe_id_bytes(const bpe_t *bpe, int32_t id, size_t *len);
/* Whether `id` is an added token marked "special" (skip_special_tokens). */
bool bpe_is_special(const bpe_t *bpe, int32_t id);
/* The id of an added token's content, else of a vocabulary token; -1 if none. */
int32_t bpe_token_id(const bpe_t *bpe, const char *s, size_t n);
/* The first id the post-processor puts before the text, -1 if none. */
int32_t bpe_template_bos(const bpe_t *bpe);

/* Encodes `len` bytes of valid UTF-8. With `add_special_tokens` the
 * post-processor's template ids are added. Returns 0 and a malloc'd array in
 * *ids_out (caller frees; never NULL) of *n_out ids; -1 with `err` set and
 * nothing allocated for text that is not UTF-8, or when a pre-tokenizer regex
 * hits PCRE2's match or memory limit (never a silently different split). */
int bpe_encode(const bpe_t *bpe, const char *text, size_t len, bool add_special_tokens,
               int32_t **ids_out, size_t *n_out, sl_err_t *err);

/* Decodes as tokenizers' decode(ids, skip_special_tokens): the bytes of each
 * id, then every maximal invalid UTF-8 subsequence becomes one U+FFFD. Ids
 * out of range are ignored. Returns a malloc'd NUL-terminated string of
 * *len_out bytes (it may hold NUL bytes). */
char *bpe_decode(const bpe_t *bpe, const int32_t *ids, size_t n, bool skip_special_tokens,
                 size_t *len_out);

#endif
