/* openai_internal.h - helpers shared by the openai_*.c files (not a public API).
 *
 * A growable byte buffer with the JSON writers the response builders need:
 * strings escaped as Python's json.dumps(ensure_ascii=False) escapes them, and
 * floats written as Python's repr(float) (what vLLM's JSON carries), plus the
 * chat-message normalisation and rendering the request parser calls.
 */
#ifndef SERVELAB_OPENAI_INTERNAL_H
#define SERVELAB_OPENAI_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/openai.h"
#include "servelab/utf8.h"

typedef struct {
    char *buf;
    size_t len, cap;
} oai_sb_t;

void sb_put(oai_sb_t *b, const char *s, size_t n);
void sb_puts(oai_sb_t *b, const char *s);
void sb_printf(oai_sb_t *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal, quotes included. */
void sb_json_str(oai_sb_t *b, const char *s, size_t n);
/* A float as Python's json.dumps writes it: repr(x) ("-0.5", "-9999.0", "1e-05"). */
void sb_py_float(oai_sb_t *b, double x);
/* Hands the buffer over (NUL-terminated; never NULL) and resets b. */
char *sb_take(oai_sb_t *b, size_t *len_out);

/* What oai_json_scan found first. */
typedef enum {
    OAI_JSON_OK,
    OAI_JSON_TOO_DEEP,     /* more than max_depth nested arrays/objects */
    OAI_JSON_CONTROL_CHAR, /* a raw byte 0x00-0x1F in a string, or between tokens other than \t \n \r */
    OAI_JSON_NUL_ESCAPE,   /* "\u0000" in a string */
} oai_json_scan_t;

/* One pass over `n` bytes of raw JSON text before cJSON parses it, tracking only
 * whether a byte lies inside a string literal (a backslash takes the next byte
 * with it). It is not a parser: it finds what cJSON, being lenient, would accept
 * or mangle. A raw control byte is invalid JSON (RFC 8259) that cJSON keeps in
 * the string (a NUL then cuts it) or skips as space; "\u0000" would become a NUL
 * inside a C string; and nesting deeper than `max_depth` would make cJSON recurse
 * that deep. On anything but OAI_JSON_OK, *at is the offending byte's offset
 * (the backslash of "\u0000"). */
oai_json_scan_t oai_json_scan(const char *s, size_t n, int max_depth, size_t *at);

/* Builds the prompt text of a chat request (`body` already type-checked at the
 * top level) as vLLM does: messages normalised (content parts joined with "\n",
 * null fields dropped, tool-call arguments parsed), rendered with the template
 * and the request's add_generation_prompt / continue_final_message / tools /
 * documents / chat_template_kwargs; `chat_completion` adds the tool_choice
 * checks of /v1/chat/completions. Returns 0 with a malloc'd *text_out
 * (*len_out bytes), or -1 with err set. */
int oai_chat_render(const oai_ctx_t *ctx, const cJSON *body, bool chat_completion, char **text_out,
                    size_t *len_out, oai_error_t *err);

/* Appends to r->ignored the top-level keys of `root` that the route's vLLM request
 * model does not declare (/tokenize: the chat model when `messages` is sent). */
void oai_collect_ignored(oai_kind_t kind, bool tokenize_chat, const cJSON *root, oai_request_t *r);

/* 400 BadRequestError naming `field` ("field: what"), for type errors. */
int oai_bad_field(oai_error_t *err, const char *field, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* ---- response pieces shared by openai_response.c and openai_stream.c ---- */

/* The token's text for logprobs into `str` (valid UTF-8) and its raw bytes into
 * `raw` (both reset first); "token_id:N" with return_tokens_as_token_ids. */
void oai_token_text(const oai_ctx_t *ctx, const oai_request_t *r, int32_t id, oai_sb_t *str, oai_sb_t *raw);
/* One chat logprobs "content" entry {"token","logprob","bytes","top_logprobs"}. */
void oai_chat_logprob_entry(oai_sb_t *b, const oai_ctx_t *ctx, const oai_request_t *r, const sample_result_t *s);
/* A completions logprobs object for n positions; offsets start at text_offset. */
void oai_completion_logprobs(oai_sb_t *b, const oai_ctx_t *ctx, const oai_request_t *r,
                             const sample_result_t *s, int32_t n, int64_t text_offset);
/* stop_reason: the matched stop string, the stop token id, or null. */
void oai_stop_reason(oai_sb_t *b, const oai_request_t *r, int32_t stop_index, int32_t stop_token);
/* {"id":..,"object":..,"created":..,"model":.. (no closing brace). */
void oai_response_head(oai_sb_t *b, const oai_ctx_t *ctx, const char *id, const char *object, int64_t created);
/* UsageInfo in field order; `details` adds "prompt_tokens_details":null. */
void oai_usage(oai_sb_t *b, int64_t prompt, int64_t completion, bool details);

/* Python's len() of a UTF-8 string: its code points. */
int64_t oai_utf8_chars(const char *s, size_t n);

#endif
