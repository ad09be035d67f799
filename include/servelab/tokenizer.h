/* tokenizer.h - sentencepiece tokenizers of Hugging Face Llama checkpoints.
 *
 * Loads MODEL_DIR/tokenizer.model (sentencepiece) and tokenizer_config.json
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
 * on failure. */
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
 * decode(ids, skip_special_tokens) does: the dummy-prefix space of the first
 * piece is dropped. Invalid byte sequences become U+FFFD. */
char *tok_decode(const tokenizer_t *tok, const int32_t *ids, size_t n, bool skip_special_tokens);

/* The raw bytes a piece stands for: U+2581 becomes ' ', <0xNN> becomes the
 * byte NN, special tokens are their text. Returns the byte count (may exceed
 * `cap`, in which case the output is truncated), or -1 for an id out of range. */
int tok_piece_bytes(const tokenizer_t *tok, int32_t id, char *buf, size_t cap);

/* Incremental decoder for streaming: push generated ids one at a time and get
 * back only text that is complete UTF-8. Spaces are kept, including the one in
 * front of the first generated token (the text continues a prompt). */
typedef struct {
    char pending[8];     /* bytes of an incomplete UTF-8 sequence */
    int n_pending;
    bool skip_special_tokens;
} tok_stream_t;

void tok_stream_init(tok_stream_t *s, bool skip_special_tokens);
/* Appends the text `id` completes to `out` (at most cap-1 bytes plus NUL;
 * 64 bytes always suffice for one piece) and returns its length. */
int tok_stream_push(const tokenizer_t *tok, tok_stream_t *s, int32_t id, char *out, size_t cap);
/* Emits what is left at the end of a stream: an incomplete sequence becomes
 * U+FFFD. Returns its length. */
int tok_stream_flush(tok_stream_t *s, char *out, size_t cap);

#endif
