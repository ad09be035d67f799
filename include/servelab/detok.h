/* detok.h - incremental detokenization with stop strings, per sequence.
 *
 * Each generated token's text is appended to the sequence's output text.
 * Text deltas handed out are always complete UTF-8 and keep sentencepiece's
 * spaces (the first generated token's leading space included, as vLLM's
 * output does). When stop strings are set, a tail of the text that could still
 * be the beginning of a stop string is held back until it is resolved (not
 * with include_stop_str_in_output: that text is output either way); when a
 * stop string appears (anywhere in the new text, also across token
 * boundaries) the output ends there, without the stop string unless
 * include_stop_str_in_output. Special tokens are skipped when asked.
 * As in vLLM, the engine does not push the EOS / stop_token_ids token that
 * ended a sequence unless include_stop_str_in_output.
 */
#ifndef SERVELAB_DETOK_H
#define SERVELAB_DETOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/tokenizer.h"

struct detok_match;

typedef struct {
    const tokenizer_t *tok;
    tok_stream_t stream;
    char *const *stop;      /* borrowed from the request's sampling params */
    int32_t n_stop;
    size_t max_stop_len;
    bool include_stop;
    char *text;             /* all output text so far (incl. held back), NUL-terminated */
    size_t len, cap;
    size_t emitted;         /* bytes of `text` already handed out */
    bool stopped;           /* a stop string matched: the text is final */
    int32_t n_tokens;       /* tokens pushed */
    int32_t min_tokens;     /* stop strings count only once n_tokens > min_tokens */
    struct detok_match *match; /* (n_stop) owned: each stop string's matcher (detok.c) */
} detok_t;

void detok_init(detok_t *d, const tokenizer_t *tok, bool skip_special_tokens, char *const *stop,
                int32_t n_stop, bool include_stop_str_in_output);
void detok_free(detok_t *d);
/* vLLM's min_tokens for stop strings (default 0): none is looked for until
 * more than `min_tokens` tokens were pushed, and one that lies wholly in the
 * text of those first tokens never matches. Call right after detok_init. */
void detok_set_min_tokens(detok_t *d, int32_t min_tokens);

/* Appends token `id`. Returns the index of the stop string that matched, or
 * -1. On a match the text is final: `text`/`len` are cut to end before the
 * stop string (after it with include_stop_str_in_output). When several stop
 * strings occur in one token's text, the one that ends first wins (then the
 * lower index), as if the text were checked character by character, so the
 * result does not depend on how the text splits into tokens; vLLM takes the
 * first in list order instead. After the call, the new text that may be shown
 * is text[*delta_from .. *delta_to) (possibly empty); *delta_from is the
 * previous call's *delta_to. An id the tokenizer does not know (a model
 * vocabulary padded beyond it) adds no text. Pushing after a match adds
 * nothing and returns -1. */
int detok_push(detok_t *d, int32_t id, size_t *delta_from, size_t *delta_to);

/* Ends the stream for another reason (EOS, length, abort): releases the held
 * back text and any incomplete UTF-8 (as U+FFFD). Returns the delta range as
 * detok_push does (empty after a stop string matched). Memory is released by
 * detok_free. */
void detok_finish(detok_t *d, size_t *delta_from, size_t *delta_to);
/* The output text so far (held-back bytes included) and how much of it was
 * handed out; delta ranges from detok_push / detok_finish index it. */
static inline const char *detok_text(const detok_t *d) { return d->text; }
static inline size_t detok_emitted(const detok_t *d) { return d->emitted; }

#endif
