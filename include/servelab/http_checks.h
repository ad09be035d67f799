/* http_checks.h - pure checks and encodings of the bytes a client puts in its
 * request head: the X-Request-Id header as vLLM reads it, log-safe text, the
 * framing headers (request smuggling), and the API-key check. No sockets and no libmicrohttpd: the server (src/server/http.c, routes.c)
 * calls them with the header values libmicrohttpd parsed; the unit tests and a
 * fuzz target call them directly. See docs/architecture.md, "HTTP hardening".
 */
#ifndef SERVELAB_HTTP_CHECKS_H
#define SERVELAB_HTTP_CHECKS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- request ids --------------------------------------------------------------------- */

/* A header value as Starlette (vLLM) reads it: each byte is the code point of
 * the same value (latin-1), so 0xFF becomes U+00FF, written here as UTF-8
 * ("\xC3\xBF"). The result is always valid UTF-8 and never longer than 2 * n
 * bytes; it keeps quotes, backslashes and control characters, which the JSON
 * writers escape. Returns a malloc'd, NUL-terminated string (never NULL). */
char *http_latin1_to_utf8(const char *bytes, size_t n);

/* `n` bytes of text made safe for one log line: backslash becomes "\\", C0
 * controls, DEL, C1 controls (U+0080..U+009F) and bytes that are not part of
 * valid UTF-8 become "\xNN"; other UTF-8 is kept. The result is valid UTF-8
 * with no control character. Returns a malloc'd, NUL-terminated string. */
char *http_log_escape(const char *s, size_t n);

/* True when the X-Request-Id header `s` may be echoed back as it came: a valid
 * field value (visible ASCII, bytes 0x80..0xFF, space, tab: RFC 9110) of at
 * most HTTP_ECHO_ID_MAX_BYTES bytes. A longer one is not echoed because
 * libmicrohttpd builds the response head in the connection's memory pool
 * (32 KiB), which the request head already fills: it would drop the response. */
enum { HTTP_ECHO_ID_MAX_BYTES = 4096 };
bool http_request_id_echo_ok(const char *s);

/* ---- framing -------------------------------------------------------------------------- */

typedef struct {
    const char *name;   /* as received (libmicrohttpd keeps the case) */
    const char *value;
} http_field_t;

/* The request-smuggling checks libmicrohttpd 0.9.75 does not make, over all of
 * a request's header fields in order (RFC 9112 sections 3.2, 5.1, 6.1, 6.3): a
 * field name that is not a token (whitespace before the colon), two
 * Content-Length fields that differ, more than one Host, a Transfer-Encoding
 * other than one "chunked", Transfer-Encoding together with Content-Length.
 * Returns NULL when the framing is unambiguous, else a static message for a 400. */
const char *http_framing_error(const http_field_t *fields, size_t n);

/* ---- API keys ------------------------------------------------------------------------- */

enum { HTTP_KEY_DIGEST_BYTES = 32 };

/* SHA-256 of `n` bytes of a configured key, computed once at startup. */
void http_key_digest(const char *key, size_t n, uint8_t out[HTTP_KEY_DIGEST_BYTES]);

/* vLLM's check of an Authorization header: the scheme (up to the first space)
 * is "bearer" in any case, and the SHA-256 of the rest (read as latin-1, like
 * the request id; trailing spaces and tabs dropped, as HTTP parsers drop them)
 * equals one of the n_keys digests. Every digest is compared in constant time
 * and all of them are compared, so the time taken does not depend on which
 * bytes of a key matched. NULL or "" is false. */
bool http_bearer_ok(const char *authorization, const uint8_t (*digests)[HTTP_KEY_DIGEST_BYTES], int n_keys);

#endif
