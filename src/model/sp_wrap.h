/* sp_wrap.h - a small C API over libsentencepiece (private to src/model).
 *
 * A loaded model holds two processors: the model as trained (normally with
 * add_dummy_prefix) and a copy with add_dummy_prefix forced off, which is what
 * transformers' non-legacy LlamaTokenizer encodes with. Nothing here throws:
 * every C++ exception is caught and turned into an error return.
 */
#ifndef SERVELAB_SP_WRAP_H
#define SERVELAB_SP_WRAP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct sp_wrap sp_wrap_t;

/* Piece types, numbered as sentencepiece_model.proto's SentencePiece.Type
 * (USER_DEFINED pieces report SP_PIECE_NORMAL: the public header cannot tell). */
typedef enum {
    SP_PIECE_NORMAL = 1,
    SP_PIECE_UNKNOWN = 2,
    SP_PIECE_CONTROL = 3,
    SP_PIECE_UNUSED = 5,
    SP_PIECE_BYTE = 6,
} sp_piece_type_t;

/* Loads a tokenizer.model file and builds the no-dummy-prefix twin. Returns
 * NULL with a message in `err` (err_cap bytes, may be 0) on failure. */
sp_wrap_t *sp_wrap_load(const char *path, char *err, size_t err_cap);
void sp_wrap_free(sp_wrap_t *sp);

int32_t sp_wrap_piece_count(const sp_wrap_t *sp);
int32_t sp_wrap_bos_id(const sp_wrap_t *sp); /* -1 if the model has none */
int32_t sp_wrap_eos_id(const sp_wrap_t *sp);
int32_t sp_wrap_unk_id(const sp_wrap_t *sp);
sp_piece_type_t sp_wrap_piece_type(const sp_wrap_t *sp, int32_t id);

/* The piece string of `id` (with U+2581 for spaces), NUL-terminated, owned by
 * `sp` and valid until sp_wrap_free(); its length in *len. NULL for an id out
 * of range. */
const char *sp_wrap_piece(const sp_wrap_t *sp, int32_t id, size_t *len);

/* The id of a piece string, or -1 if the vocabulary has no such piece
 * (unlike sentencepiece's PieceToId, which answers the unknown id). */
int32_t sp_wrap_piece_to_id(const sp_wrap_t *sp, const char *piece, size_t len);

/* Behaviour of the model's normalizer, detected by encoding probes at load:
 * whether it adds the dummy-prefix space, and whether it collapses runs of
 * spaces (remove_extra_whitespaces). Non-legacy encoding in tokenizer.c
 * assumes remove_extra_whitespaces is off, as it is for Llama and Mistral. */
bool sp_wrap_adds_dummy_prefix(const sp_wrap_t *sp);
bool sp_wrap_removes_extra_whitespaces(const sp_wrap_t *sp);

/* Encodes `len` bytes of UTF-8 `text` to ids, with the model's own dummy
 * prefix (`dummy_prefix` true) or without it. On success returns 0 and a
 * malloc'd array in *ids_out (caller frees; NULL when *n_out is 0). Returns -1
 * on failure, with nothing allocated. */
int sp_wrap_encode(const sp_wrap_t *sp, bool dummy_prefix, const char *text, size_t len,
                   int32_t **ids_out, size_t *n_out);

#ifdef __cplusplus
}
#endif

#endif
