/* detok.c - a sequence's output text, its streamed deltas and its stop strings.
 *
 * What: tok_stream turns each token into complete UTF-8, appended to one
 * growing buffer; each stop string has a Knuth-Morris-Pratt matcher fed the
 * new bytes, so finding stop strings and the tail to hold back costs amortized
 * O(1) per byte and stop string, however long the text or the stop strings.
 * Not here: EOS and stop_token_ids (the engine's), spaces_between_special_tokens.
 * Why: the same results as vLLM's window search (stop strings ending in the
 * new text), but holding back only a suffix that really begins a stop string
 * (vLLM holds a fixed max_stop_len - 1 characters), so text is shown sooner.
 */
#include "servelab/detok.h"

#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"

/* `state` is the length of the longest suffix of the text that is a prefix of
 * the stop string (== len: the text ends with it). */
struct detok_match {
    const char *s;
    size_t len;
    size_t state;
    size_t *border; /* (len + 1) longest proper prefix of s[0, k) that is also its suffix */
};

static void reserve(detok_t *d, size_t need) {
    if (need <= d->cap) return;
    size_t cap = d->cap * 2;
    if (cap < need) cap = need;
    d->text = sl_realloc(d->text, cap);
    d->cap = cap;
}

void detok_init(detok_t *d, const tokenizer_t *tok, bool skip_special_tokens, char *const *stop,
                int32_t n_stop, bool include_stop_str_in_output) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    tok_stream_init(&d->stream, skip_special_tokens);
    d->stop = stop;
    d->n_stop = n_stop;
    d->include_stop = include_stop_str_in_output;
    /* One more, zeroed, ends the array: detok_free needs no count. */
    if (n_stop > 0) d->match = sl_calloc((size_t)n_stop + 1, sizeof *d->match);
    for (int32_t i = 0; i < n_stop; i++) {
        struct detok_match *m = &d->match[i];
        m->s = stop[i];
        m->len = strlen(stop[i]);
        SL_ASSERT(m->len > 0); /* sampling_params_validate refuses empty stop strings */
        if (m->len > d->max_stop_len) d->max_stop_len = m->len;
        m->border = sl_malloc((m->len + 1) * sizeof *m->border);
        m->border[0] = m->border[1] = 0;
        for (size_t j = 1, k = 0; j < m->len; j++) {
            while (k > 0 && m->s[j] != m->s[k]) k = m->border[k];
            if (m->s[j] == m->s[k]) k++;
            m->border[j + 1] = k;
        }
    }
    d->cap = 4 * tok_stream_max_bytes(tok);
    d->text = sl_malloc(d->cap);
    d->text[0] = '\0';
}

void detok_set_min_tokens(detok_t *d, int32_t min_tokens) { d->min_tokens = min_tokens; }

void detok_free(detok_t *d) {
    for (struct detok_match *m = d->match; m && m->s; m++) free(m->border);
    free(d->match);
    free(d->text);
    memset(d, 0, sizeof *d);
}

/* Feeds one byte of text to a matcher. */
static void match_step(struct detok_match *m, char c) {
    size_t st = m->state == m->len ? m->border[m->len] : m->state;
    while (st > 0 && m->s[st] != c) st = m->border[st];
    m->state = st + (m->s[st] == c);
}

/* Bytes at the end of the text not yet handed out that must wait: the longest
 * suffix that is a proper prefix of some stop string. A stop string completed
 * by later bytes starts inside it, so everything before can be shown now. */
static size_t held_back(const detok_t *d) {
    if (d->include_stop) return 0; /* text before and in a stop string is output anyway */
    size_t held = 0;
    for (int32_t i = 0; i < d->n_stop; i++) {
        const struct detok_match *m = &d->match[i];
        /* A whole (ignored, within min_tokens) match: its longest proper
         * prefix at the end is its longest border. */
        size_t k = m->state == m->len ? m->border[m->len] : m->state;
        if (k > held) held = k;
    }
    size_t avail = d->len - d->emitted;
    return held < avail ? held : avail;
}

int detok_push(detok_t *d, int32_t id, size_t *delta_from, size_t *delta_to) {
    *delta_from = *delta_to = d->emitted;
    if (d->stopped) return -1;
    d->n_tokens++;
    reserve(d, d->len + tok_stream_max_bytes(d->tok) + 1);
    int n = tok_stream_push(d->tok, &d->stream, id, d->text + d->len, d->cap - d->len);
    if (n <= 0) {
        d->text[d->len] = '\0'; /* an unknown id (n < 0) adds nothing, like an incomplete sequence */
        return -1;
    }
    size_t old_len = d->len;
    d->len += (size_t)n;

    /* Byte by byte, so the stop string that ends first wins (then the lower
     * index): a match ending in this token's text may have started in older
     * text, as with vLLM's window of len(stop) - 1 bytes before the new text;
     * one ending in older text was either found then or, within min_tokens,
     * must not count (vLLM moves its window past that text). */
    int hit = -1;
    bool check = d->n_tokens > d->min_tokens;
    for (size_t p = old_len; p < d->len && hit < 0; p++) {
        for (int32_t i = 0; i < d->n_stop; i++) {
            struct detok_match *m = &d->match[i];
            match_step(m, d->text[p]);
            if (check && m->state == m->len) {
                size_t end = p + 1, cut = d->include_stop ? end : end - m->len;
                SL_ASSERT(cut >= d->emitted); /* held_back() kept every possible start */
                d->len = cut;
                d->text[cut] = '\0';
                d->stopped = true;
                hit = i;
                break;
            }
        }
    }
    size_t show = d->stopped ? d->len : d->len - held_back(d);
    /* Never show half a character (stop strings are validated UTF-8, so a
     * held-back suffix starts on a character; this is a guard). */
    while (show > d->emitted && show < d->len && ((unsigned char)d->text[show] & 0xC0) == 0x80) show--;
    *delta_to = show;
    d->emitted = show;
    return hit;
}

void detok_finish(detok_t *d, size_t *delta_from, size_t *delta_to) {
    *delta_from = d->emitted;
    if (!d->stopped) {
        reserve(d, d->len + 3 * sizeof d->stream.pending + 1);
        int n = tok_stream_flush(&d->stream, d->text + d->len, d->cap - d->len);
        SL_ASSERT(n >= 0);
        d->len += (size_t)n;
    }
    d->emitted = d->len;
    *delta_to = d->len;
}
