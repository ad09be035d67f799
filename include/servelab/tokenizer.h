/* tokenizer.h - the tokenizers of Hugging Face checkpoints: sentencepiece
 * (Llama, Mistral) and byte-level BPE from tokenizer.json (GPT-2, Llama-3,
 * Qwen2, SmolLM), behind one interface.
 *
 * A checkpoint with tokenizer.model gets sentencepiece; one with only
 * tokenizer.json gets byte-level BPE (src/model/bpe.h), which encodes and
 * decodes as the `tokenizers` package: added tokens matched first, its
 * pre-tokenizers, merges by rank, the post-processor's template for
 * add_special_tokens, bos/eos from tokenizer_config.json, special = added
 * tokens marked "special"; invalid UTF-8 in decoded text becomes one U+FFFD
 * per maximal invalid subsequence (Rust's from_utf8_lossy).
 *
 * Sentencepiece: loads MODEL_DIR/tokenizer.model and tokenizer_config.json
 * (add_bos_token, add_eos_token, legacy, added_tokens_decoder, bos/eos/unk).
 * Encoding behaves as transformers' LlamaTokenizer: added/special tokens that
 * appear in the text (e.g. "</s>" rendered by a chat template) become their
 * ids, honouring their lstrip/rstrip flags; the text between them is encoded
 * by sentencepiece. With legacy=false (the default of current checkpoints)
 * only the start of the text gets sentencepiece's dummy-prefix space; with
 * legacy=true every piece of text between special tokens gets one.
 * Decoding keeps the spaces sentencepiece encodes as U+2581 and turns
 * byte-fallback pieces (<0xE2>) back into bytes; the streaming decoder only
 * ever emits complete UTF-8.
 */
#ifndef SERVELAB_TOKENIZER_H
#define SERVELAB_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/core.h"

typedef struct tokenizer tokenizer_t;

/* Loads the tokenizer of a checkpoint directory. NULL with a message in `err`
 * on failure. A loaded tokenizer is read-only: every function below may run
 * on it from many threads at once. */
tokenizer_t *tok_load(const char *model_dir, sl_err_t *err);
void tok_free(tokenizer_t *tok);

int32_t tok_vocab_size(const tokenizer_t *tok);
int32_t tok_bos_id(const tokenizer_t *tok); /* -1 if none */
int32_t tok_eos_id(const tokenizer_t *tok); /* -1 if none */
/* True for control, unknown and added special tokens (skipped by
 * skip_special_tokens when decoding). */
bool tok_is_special(const tokenizer_t *tok, int32_t id);

/* Encodes `len` bytes of `text`. With `add_special_tokens` the checkpoint's
 * policy applies (add_bos_token / add_eos_token). Returns the number of ids
 * written to *ids_out (malloc'd; caller frees), or -1 with `err` set (e.g.
 * text that is not valid UTF-8). */
int tok_encode(const tokenizer_t *tok, const char *text, size_t len, bool add_special_tokens,
               int32_t **ids_out, sl_err_t *err);

/* Decodes ids to a malloc'd NUL-terminated string, as transformers'
 * decode(ids, skip_special_tokens) does (clean_up_tokenization_spaces and
 * spaces_between_special_tokens off): the dummy-prefix space of the first
 * piece is dropped. Each byte that starts no valid UTF-8 sequence becomes
 * U+FFFD (sentencepiece's rule). Ids out of range are ignored. The text may
 * hold NUL bytes (the byte piece <0x00>): *len_out (if non-NULL) is its
 * length in bytes. */
char *tok_decode(const tokenizer_t *tok, const int32_t *ids, size_t n, bool skip_special_tokens,
                 size_t *len_out);

/* The raw bytes a piece stands for: U+2581 becomes ' ', <0xNN> becomes the
 * byte NN, special tokens are their text. Copies at most cap-1 bytes plus a
 * NUL (like snprintf) and returns the full byte count (>= cap means the copy
 * was truncated), or -1 for an id out of range. */
int tok_piece_bytes(const tokenizer_t *tok, int32_t id, char *buf, size_t cap);

/* Incremental decoder for streaming: push generated ids one at a time and get
 * back only text that is complete UTF-8. Spaces are kept, including the one in
 * front of the first generated token (the text continues a prompt). The
 * concatenated output is the bytes of tok_piece_bytes() for each kept id,
 * sanitized exactly as tok_decode() sanitizes them; with skip_special_tokens,
 * control, unknown and special added tokens are kept out. */
typedef struct {
    char pending[8];     /* bytes of an incomplete UTF-8 sequence */
    int n_pending;
    bool skip_special_tokens;
    bool merge_invalid;  /* BPE: an unfinished sequence is flushed as one U+FFFD */
} tok_stream_t;

void tok_stream_init(tok_stream_t *s, bool skip_special_tokens);
/* A buffer of this many bytes always holds one tok_stream_push() output; it
 * is at most 64 for vocabularies whose pieces are at most 16 characters (the
 * sentencepiece default, Llama, Mistral) and special tokens of <= 54 bytes. */
size_t tok_stream_max_bytes(const tokenizer_t *tok);
/* Writes the text `id` completes to `out` (NUL-terminated) and returns its
 * length (0 while a UTF-8 sequence is incomplete). Returns -1, consuming
 * nothing, for an id out of range or when `cap` might be too small for this
 * id (tok_stream_max_bytes() never is). */
int tok_stream_push(const tokenizer_t *tok, tok_stream_t *s, int32_t id, char *out, size_t cap);
/* Emits what is left at the end of a stream: each byte of an incomplete
 * sequence becomes U+FFFD (for BPE the whole sequence one), as in tok_decode(). Returns its length, or -1,
 * consuming nothing, if `cap` is too small (10 bytes always suffice). */
int tok_stream_flush(tok_stream_t *s, char *out, size_t cap);

#endif
