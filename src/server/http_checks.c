/* http_checks.c - the request head's bytes, read as vLLM reads them and checked.
 *
 * Header values come from libmicrohttpd as raw bytes; vLLM's Starlette decodes
 * them as latin-1, so a request id is turned into UTF-8 one byte per code point
 * and any header, however hostile, gives valid UTF-8 (and so valid JSON once
 * escaped). Log lines get a further escaped copy: no control character reaches
 * the log, whatever the id or the body's request_id holds. The framing check
 * covers what libmicrohttpd 0.9.75 lets through (docs/architecture.md, "HTTP
 * hardening"). API keys are compared as vLLM compares them: SHA-256 digests,
 * in constant time.
 */
#include "servelab/http_checks.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "servelab/core.h"
#include "servelab/utf8.h"

/* ---- request ids --------------------------------------------------------------------- */

char *http_latin1_to_utf8(const char *bytes, size_t n) {
    char *out = sl_malloc(2 * n + 1), *o = out;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)bytes[i];
        if (c < 0x80) {
            *o++ = (char)c;
        } else { /* U+0080..U+00FF: two bytes */
            *o++ = (char)(0xC0 | (c >> 6));
            *o++ = (char)(0x80 | (c & 0x3F));
        }
    }
    *o = '\0';
    return out;
}

char *http_log_escape(const char *s, size_t n) {
    char *out = sl_malloc(4 * n + 1), *o = out; /* "\xNN" is the longest form of one byte */
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; i < n;) {
        uint32_t cp = 0;
        int k = utf8_decode(u + i, n - i, &cp, NULL);
        size_t len = k > 0 ? (size_t)k : 0;
        if (len == 0) { /* not UTF-8: the byte itself */
            o += sprintf(o, "\\x%02x", u[i]);
            i++;
        } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F)) {
            o += sprintf(o, "\\x%02x", (unsigned)cp);
            i += len;
        } else if (cp == '\\') {
            *o++ = '\\';
            *o++ = '\\';
            i++;
        } else {
            memcpy(o, u + i, len);
            o += len;
            i += len;
        }
    }
    *o = '\0';
    return out;
}

bool http_request_id_echo_ok(const char *s) {
    size_t n = 0;
    for (const unsigned char *u = (const unsigned char *)s; *u; u++, n++)
        if ((*u < 0x20 && *u != '\t') || *u == 0x7F || n == HTTP_ECHO_ID_MAX_BYTES) return false;
    return true;
}

/* ---- framing -------------------------------------------------------------------------- */

/* RFC 9110 tchar: what a field name is made of. */
static bool is_tchar(unsigned char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c));
}

static bool is_token(const char *s) {
    if (!*s) return false;
    for (const unsigned char *u = (const unsigned char *)s; *u; u++)
        if (!is_tchar(*u)) return false;
    return true;
}

/* Length of `v` without trailing spaces and tabs (libmicrohttpd drops only the leading ones). */
static size_t trimmed_len(const char *v) {
    size_t n = strlen(v);
    while (n > 0 && (v[n - 1] == ' ' || v[n - 1] == '\t')) n--;
    return n;
}

static bool same_value(const char *a, const char *b) {
    size_t na = trimmed_len(a), nb = trimmed_len(b);
    return na == nb && memcmp(a, b, na) == 0;
}

const char *http_framing_error(const http_field_t *fields, size_t n) {
    const char *content_length = NULL, *transfer_encoding = NULL;
    int n_host = 0, n_te = 0;
    for (size_t i = 0; i < n; i++) {
        const char *name = fields[i].name, *value = fields[i].value ? fields[i].value : "";
        if (!name || !is_token(name))
            return "Invalid header field name (RFC 9112: no whitespace before the colon).";
        if (!strcasecmp(name, "Content-Length")) {
            if (content_length && !same_value(content_length, value))
                return "Conflicting Content-Length headers.";
            content_length = value;
        } else if (!strcasecmp(name, "Host")) {
            n_host++;
        } else if (!strcasecmp(name, "Transfer-Encoding")) {
            n_te++;
            transfer_encoding = value;
        }
    }
    if (n_host > 1) return "More than one Host header.";
    if (n_te > 0) {
        if (n_te > 1 || trimmed_len(transfer_encoding) != 7 || strncasecmp(transfer_encoding, "chunked", 7) != 0)
            return "Unsupported Transfer-Encoding: only one \"chunked\" is accepted.";
        if (content_length) return "Both Transfer-Encoding and Content-Length in one request.";
    }
    return NULL;
}

/* ---- API keys ------------------------------------------------------------------------- */

void http_key_digest(const char *key, size_t n, uint8_t out[HTTP_KEY_DIGEST_BYTES]) {
    unsigned len = 0;
    if (!EVP_Digest(key, n, out, &len, EVP_sha256(), NULL) || len != HTTP_KEY_DIGEST_BYTES)
        sl_die("SHA-256 (libcrypto) failed");
}

/* vLLM (AuthenticationMiddleware.verify_token): scheme, _, param =
 * header.partition(" "); scheme.lower() == "bearer"; then
 * secrets.compare_digest(sha256(param), each key's sha256), over every key. */
bool http_bearer_ok(const char *authorization, const uint8_t (*digests)[HTTP_KEY_DIGEST_BYTES], int n_keys) {
    if (!authorization || !*authorization) return false;
    const char *space = strchr(authorization, ' ');
    size_t scheme_len = space ? (size_t)(space - authorization) : strlen(authorization);
    if (scheme_len != 6 || strncasecmp(authorization, "bearer", 6) != 0) return false;
    const char *param = space ? space + 1 : "";
    size_t n = trimmed_len(param);
    char *text = http_latin1_to_utf8(param, n); /* the header as vLLM's str */
    uint8_t digest[HTTP_KEY_DIGEST_BYTES];
    http_key_digest(text, strlen(text), digest);
    free(text);
    int match = 0;
    for (int i = 0; i < n_keys; i++) match |= CRYPTO_memcmp(digest, digests[i], HTTP_KEY_DIGEST_BYTES) == 0;
    return match != 0;
}
