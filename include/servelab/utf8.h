/* utf8.h - strict UTF-8: the one decoder the tokenizers, the request parsers
 * and the header checks share.
 *
 * Strict as Python's and Rust's decoders are: no overlong forms, no
 * surrogates (U+D800..U+DFFF), nothing above U+10FFFF. Where a sequence is
 * invalid, *bad is the length of its maximal invalid subpart: the bytes that
 * Rust's String::from_utf8_lossy (Hugging Face tokenizers) and Python's
 * errors="replace" turn into one U+FFFD.
 */
#ifndef SERVELAB_UTF8_H
#define SERVELAB_UTF8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Decodes the sequence at s[0..n), n >= 1. Returns its length (1 to 4) with
 * the code point in *cp; 0 when s[0..n) is a valid but unfinished prefix of
 * a sequence (more bytes could complete it), with *bad = n; -1 when s starts
 * no valid sequence, with *bad = the maximal invalid subpart (>= 1). `bad`
 * may be NULL; *cp is left alone unless a sequence is returned. */
int utf8_decode(const uint8_t *s, size_t n, uint32_t *cp, size_t *bad);

/* Whether s[0..n) is valid UTF-8 throughout. */
bool utf8_valid(const char *s, size_t n);

/* The offset of the first byte of s[0..n) that starts no valid (or only an
 * unfinished) sequence; n when all is valid. */
size_t utf8_invalid_at(const char *s, size_t n);

#endif
