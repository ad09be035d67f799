/* openai.h - the OpenAI protocol layer: request bodies in, response bytes out.
 *
 * Pure functions over bytes and engine events: no sockets, no threads, no engine.
 * Requests of POST /v1/chat/completions, /v1/completions, /tokenize and /detokenize
 * are parsed and validated as vLLM's OpenAI server does (same checks, same order,
 * same messages, same HTTP status) into an oai_request_t the HTTP layer submits;
 * responses (bodies, stream chunks, errors, /v1/models, /version, /tokenize) are
 * written with vLLM's field order and Python's number formatting.
 */
#ifndef SERVELAB_OPENAI_H
#define SERVELAB_OPENAI_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/chat_template.h"
#include "servelab/core.h"
#include "servelab/engine.h"
#include "servelab/sampling.h"

/* ---- context ------------------------------------------------------------------ */

/* The tokenizer as the protocol layer uses it: callbacks, so that request
 * validation can run (and be fuzzed) without sentencepiece. Same contracts as
 * tok_encode / tok_decode / tok_piece_bytes in tokenizer.h. */
typedef struct {
    void *user;
    int (*encode)(void *user, const char *text, size_t len, bool add_special_tokens,
                  int32_t **ids_out, sl_err_t *err);
    char *(*decode)(void *user, const int32_t *ids, size_t n, bool skip_special_tokens, size_t *len_out);
    int (*piece)(void *user, int32_t id, char *buf, size_t cap);
} oai_tok_t;

/* Defaults from generation_config.json (vLLM's --generation-config auto): a field
 * applies when its has_ flag is set; max_new_tokens caps the default max_tokens. */
typedef struct {
    bool has_temperature, has_top_p, has_top_k, has_min_p, has_repetition_penalty;
    double temperature, top_p, min_p, repetition_penalty; /* as the file's JSON numbers */
    int32_t top_k;
    int32_t max_new_tokens;          /* 0 = no cap */
} oai_gen_defaults_t;

typedef struct {
    oai_tok_t tok;
    const chat_template_t *chat_template; /* NULL: chat requests get CHAT_NO_TEMPLATE_MSG (400) */
    const cJSON *special_tokens;     /* bos_token, eos_token, ... for templates (may be NULL) */
    const char *const *served_model_names; /* [0] is the default and the name responses carry */
    int32_t n_served_model_names;    /* >= 1 */
    const char *model_root;          /* the model path, /v1/models "root" */
    int32_t max_model_len;
    int32_t max_logprobs;            /* --max-logprobs (20; values above 20 act as 20) */
    int32_t max_n;                   /* upper bound on n (ours; 0 = OAI_DEFAULT_MAX_N) */
    int32_t vocab_size;
    oai_gen_defaults_t gen;
} oai_ctx_t;

#define OAI_DEFAULT_MAX_N 128
#define OAI_MAX_JSON_DEPTH 64

/* Fills ctx->tok with tok_encode / tok_decode / tok_piece_bytes on `tok`
 * (borrowed; must outlive ctx). Not in the fuzz build. */
struct tokenizer;
void oai_tok_bind(oai_tok_t *out, const struct tokenizer *tok);

/* Reads MODEL_DIR/generation_config.json into `out` as vLLM's
 * get_diff_sampling_param() does (temperature, top_p, top_k, min_p,
 * repetition_penalty, max_new_tokens). A missing file leaves `out` empty and
 * returns 0; an unreadable or malformed one returns -1 with err set. */
int oai_gen_defaults_load(const char *model_dir, oai_gen_defaults_t *out, sl_err_t *err);

/* ---- errors ------------------------------------------------------------------- */

typedef struct {
    int status;                      /* HTTP status: 400, 404, ... */
    const char *type;                /* "BadRequestError", "NotFoundError", ... (static) */
    char message[1024];              /* vLLM's text; long user values are cut with "..." */
    char param[64];                  /* "" = null */
} oai_error_t;

/* Fills `err` and returns -1. `type` is a static string; `param` may be NULL. */
int oai_error_set(oai_error_t *err, int status, const char *type, const char *param,
                  const char *fmt, ...) __attribute__((format(printf, 5, 6)));

/* The error body {"error":{"message","type","param","code"}} (malloc'd,
 * NUL-terminated; *len_out its length if non-NULL). Also what a stream sends
 * as its error event before [DONE]. */
char *oai_error_body(const oai_error_t *err, size_t *len_out);

/* ---- requests ----------------------------------------------------------------- */

typedef enum { OAI_CHAT, OAI_COMPLETION, OAI_TOKENIZE, OAI_DETOKENIZE } oai_kind_t;

typedef struct {
    int32_t *ids;                    /* (n_ids) owned */
    int32_t n_ids;
    char *text;                      /* owned: completions: the prompt string, or the decode of
                                      * token prompts (echo); chat: the rendered template;
                                      * detokenize: the decoded text. NUL-terminated */
    size_t text_len;
    int32_t max_tokens;              /* this prompt's max_tokens after defaults and caps */
} oai_prompt_t;

typedef struct {
    oai_kind_t kind;
    char *model;                     /* as sent; NULL when absent (the default model) */
    int32_t n_prompts;               /* 1 except completions with a list of prompts */
    oai_prompt_t *prompts;           /* (n_prompts) owned */
    sampling_params_t params;        /* shared by every prompt; max_tokens: see prompts[i] */
    bool stream;
    bool include_usage;              /* stream_options.include_usage */
    bool continuous_usage_stats;     /* stream_options.continuous_usage_stats */
    bool echo;                       /* completions */
    bool chat_logprobs;              /* chat: logprobs=true (params.logprobs = top_logprobs) */
    int32_t top_logprobs;            /* chat: top_logprobs (0) */
    bool tokens_as_ids;              /* return_tokens_as_token_ids: logprob tokens as "token_id:N" */
    bool return_token_strs;          /* tokenize */
    char *request_id;                /* the body's "request_id", or NULL */
    int32_t n_ignored;
    char **ignored;                  /* (n_ignored) unknown top-level keys, in body order, unique */
} oai_request_t;

/* Parses and validates one request body (`len` untrusted bytes, need not be
 * NUL-terminated) for endpoint `kind`, in vLLM's order: UTF-8, JSON, depth <=
 * OAI_MAX_JSON_DEPTH, object; field types (400 naming the field); request-level
 * checks (stream_options without stream, top_logprobs without logprobs, ...);
 * model (404 "The model `x` does not exist."); chat template rendering and
 * tokenization; context length (vLLM ~0.10.2 messages); max_tokens defaults
 * (chat: max_model_len - prompt_len; completions: 16; both capped by
 * generation-config max_new_tokens and the context); sampling-parameter ranges
 * (vLLM's messages, e.g. "Requested sample logprobs of 21, which is greater
 * than max allowed: 20"). Duplicate keys keep the last value, as Python's json.
 * Returns 0 with `out` filled (free with oai_request_free), or -1 with `err`
 * set and `out` empty (oai_request_free is still safe). */
int oai_request_parse(const oai_ctx_t *ctx, oai_kind_t kind, const char *body, size_t len,
                      oai_request_t *out, oai_error_t *err);
void oai_request_free(oai_request_t *r);

/* The parameters to submit prompt `i` with: a shallow copy of r->params with
 * max_tokens = r->prompts[i].max_tokens (borrowing r's arrays; engine_submit
 * deep-copies). */
sampling_params_t oai_request_params(const oai_request_t *r, int32_t i);

/* vLLM's warning text for r->ignored, e.g. "The following fields were present
 * in the request but ignored: {'foo', 'bar'}" (the set as Python prints a set
 * of str). NULL when nothing was ignored; else malloc'd. */
char *oai_ignored_fields_message(const oai_request_t *r);

/* Writes the response id: "<prefix>-<x_request_id>" when the X-Request-Id
 * header is given (non-NULL, non-empty), else "<prefix>-<body request_id>"
 * when given, else "<prefix>-<32 hex of rand_hi, rand_lo>". `prefix` is
 * "chatcmpl" or "cmpl". Returns a malloc'd string. */
char *oai_response_id(const char *prefix, const char *x_request_id, const char *body_request_id,
                      uint64_t rand_hi, uint64_t rand_lo);

/* ---- non-streaming responses ------------------------------------------------------ */

/* Collects engine events of one request (all its prompts and choices) into the
 * final body. Choice index = prompt_idx * n + event index, as vLLM. */
typedef struct oai_acc oai_acc_t;

/* `req` is borrowed and must outlive the accumulator. */
oai_acc_t *oai_acc_new(const oai_request_t *req);
/* Adds one event of prompt `prompt_idx` (the event is not kept; free it after). */
void oai_acc_add(oai_acc_t *a, int32_t prompt_idx, const engine_output_t *o);
/* The chat.completion / text_completion body. `id` and `created` (unix seconds)
 * as given; the model field is ctx->served_model_names[0]. Returns malloc'd
 * JSON (*len_out its length if non-NULL). */
char *oai_acc_body(const oai_acc_t *a, const oai_ctx_t *ctx, const char *id, int64_t created,
                   size_t *len_out);
void oai_acc_free(oai_acc_t *a);

/* ---- streaming ---------------------------------------------------------------------- */

/* A list of JSON strings, one per SSE event (without "data: " framing). */
typedef struct {
    int32_t n, cap;
    char **json;                     /* (n) owned, NUL-terminated */
    size_t *len;                     /* (n) */
} oai_chunks_t;

void oai_chunks_clear(oai_chunks_t *c);  /* frees the strings, keeps capacity */
void oai_chunks_free(oai_chunks_t *c);   /* frees everything; leaves c empty */

typedef struct oai_stream oai_stream_t;

/* State of one streamed request. `req` and `ctx` are borrowed; `id` is copied. */
oai_stream_t *oai_stream_new(const oai_ctx_t *ctx, const oai_request_t *req, const char *id,
                             int64_t created);
/* Appends to `out` the events vLLM sends for this engine event: for chat, on
 * the very first event of the request, one role event per choice
 * ({"role":"assistant","content":""}); then the content/text event, unless the
 * event carries nothing (no text, no token, and the choice has no token yet);
 * the event that finishes a choice carries finish_reason and stop_reason. With
 * continuous_usage_stats every event carries usage. Returns how many were
 * appended. */
int oai_stream_event(oai_stream_t *s, int32_t prompt_idx, const engine_output_t *o,
                     oai_chunks_t *out);
/* The include_usage event ("choices":[] and the totals), or NULL when the
 * request did not ask for it. Malloc'd. */
char *oai_stream_usage(const oai_stream_t *s, size_t *len_out);
/* The lab's stream_coalesce (docs/lab.md): from now on each choice's engine
 * events are buffered and sent as one content event (their texts
 * concatenated into one delta/text) every `tokens` tokens, and when the
 * choice finishes. A request that asks for logprobs is not coalesced (its
 * per-token entries do not merge into one delta). tokens < 2: off. */
void oai_stream_set_coalesce(oai_stream_t *s, int32_t tokens);
/* Appends the events still buffered by coalescing (a choice that ended
 * without a finishing event); call before the usage event. */
void oai_stream_flush(oai_stream_t *s, oai_chunks_t *out);
/* Engine events merged away by coalescing since the last call (events in
 * minus events out); resets the count. */
int64_t oai_stream_take_coalesced(oai_stream_t *s);
void oai_stream_free(oai_stream_t *s);

/* ---- other bodies --------------------------------------------------------------------- */

/* GET /v1/models: one entry per served name. `perm_hex` (e.g. 32 hex chars)
 * forms each "modelperm-<hex>" id. Malloc'd. */
char *oai_models_body(const oai_ctx_t *ctx, int64_t created, const char *perm_hex, size_t *len_out);
/* GET /version: {"version":"<version>"}. Malloc'd. */
char *oai_version_body(const char *version, size_t *len_out);
/* POST /tokenize: {"count","max_model_len","tokens","token_strs"} for a parsed
 * OAI_TOKENIZE request (token_strs null unless return_token_strs). Malloc'd. */
char *oai_tokenize_body(const oai_ctx_t *ctx, const oai_request_t *r, size_t *len_out);
/* POST /detokenize: {"prompt":"..."} for a parsed OAI_DETOKENIZE request. Malloc'd. */
char *oai_detokenize_body(const oai_request_t *r, size_t *len_out);

#endif
