/* openai_request.c - request bodies of the OpenAI routes, validated as vLLM does.
 *
 * Order of checks, as in vLLM: bytes (UTF-8, JSON, depth, object), field types and
 * the request models' validators, the model name (404), chat rendering and
 * tokenization, context length, then SamplingParams' ranges and the engine front
 * end's logprobs limit. Fields vLLM accepts but this server cannot honour
 * (structured output, beam search, prompt logprobs, ...) are a 400 naming the
 * field rather than silently different output. Tokenization goes through the
 * context's callbacks so the whole path runs in the fuzz build without a tokenizer.
 * JSON is as strict as Python's: raw control characters (U+0000-U+001F) in strings
 * are invalid JSON, which cJSON would accept, so the raw body is scanned first
 * (oai_json_scan). An escaped "\u0000" is valid JSON and vLLM keeps it as a
 * character (its tokenizer encodes it like any other); here it is refused with its
 * own message, because cJSON and the chat template engine hold strings as
 * NUL-terminated C strings, and a 400 is better than a prompt silently cut at
 * the NUL.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai_internal.h"
#include "servelab/sampling_json.h"

/* ---- errors ---------------------------------------------------------------------- */

/* Bytes that do not form valid UTF-8 (a cut multi-byte character, a raw byte in
 * a message from below) become '?': error bodies must be valid JSON text. */
static void sanitize_utf8(char *s) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
        if (k <= n - i && utf8_valid(s + i, k)) {
            i += k;
        } else {
            s[i++] = '?';
        }
    }
}

static int error_v(oai_error_t *err, int status, const char *type, const char *param, const char *fmt,
                   va_list ap) {
    if (!err) return -1;
    err->status = status;
    err->type = type;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    int n = vsnprintf(err->message, sizeof err->message, fmt, ap);
    if (n >= (int)sizeof err->message) memcpy(err->message + sizeof err->message - 4, "...", 4);
    sanitize_utf8(err->message);
    sanitize_utf8(err->param);
    return -1;
}

int oai_error_set(oai_error_t *err, int status, const char *type, const char *param,
                  const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_v(err, status, type, param, fmt, ap);
    va_end(ap);
    return -1;
}

static int bad_request(oai_error_t *err, const char *param, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int bad_request(oai_error_t *err, const char *param, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    error_v(err, 400, "BadRequestError", param, fmt, ap);
    va_end(ap);
    return -1;
}

int oai_bad_field(oai_error_t *err, const char *field, const char *fmt, ...) {
    char what[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    return oai_error_set(err, 400, "BadRequestError", field, "%s: %s", field, what);
}

/* ---- bytes to a JSON object -------------------------------------------------------- */

typedef struct {
    cJSON *item;
    int pos;
} keyed_t;

static int cmp_key_pos(const void *a, const void *b) {
    const keyed_t *x = a, *y = b;
    int c = strcmp(x->item->string, y->item->string);
    return c ? c : (x->pos > y->pos) - (x->pos < y->pos);
}

/* Python's json keeps the last of duplicate keys (at the first one's place);
 * cJSON's lookups find the first. Rewrites every object of the tree to Python's
 * result, by sorting rather than a quadratic scan (a body may hold 10^6 keys). */
static void dedupe_keys(cJSON *node) {
    if (cJSON_IsObject(node)) {
        int n = 0;
        for (cJSON *c = node->child; c; c = c->next) n++;
        if (n > 1) {
            keyed_t *v = sl_malloc((size_t)n * sizeof *v);
            int k = 0;
            for (cJSON *c = node->child; c; c = c->next, k++) v[k] = (keyed_t){c, k};
            qsort(v, (size_t)n, sizeof *v, cmp_key_pos);
            for (int i = 0; i < n;) {
                int j = i; /* v[i..j] share a key, in body order */
                while (j + 1 < n && !strcmp(v[j + 1].item->string, v[i].item->string)) j++;
                if (j > i) { /* a dict keeps the first key's place and the last value */
                    for (int k = i + 1; k < j; k++) cJSON_Delete(cJSON_DetachItemViaPointer(node, v[k].item));
                    cJSON *last = cJSON_DetachItemViaPointer(node, v[j].item);
                    cJSON_ReplaceItemViaPointer(node, v[i].item, last);
                }
                i = j + 1;
            }
            free(v);
        }
    }
    if (cJSON_IsObject(node) || cJSON_IsArray(node))
        for (cJSON *c = node->child; c; c = c->next) dedupe_keys(c);
}

static cJSON *parse_body(const char *body, size_t len, oai_error_t *err) {
    if (!utf8_valid(body, len)) {
        bad_request(err, NULL, "The request body is not valid UTF-8.");
        return NULL;
    }
    size_t at = 0;
    switch (oai_json_scan(body, len, OAI_MAX_JSON_DEPTH, &at)) {
    case OAI_JSON_OK: break;
    case OAI_JSON_TOO_DEEP:
        bad_request(err, NULL, "The request body is nested deeper than %d levels.", OAI_MAX_JSON_DEPTH);
        return NULL;
    case OAI_JSON_CONTROL_CHAR: /* what cJSON would say, had it been strict */
        bad_request(err, NULL, "The request body is not valid JSON (at byte %ld).", (long)at);
        return NULL;
    case OAI_JSON_NUL_ESCAPE:
        bad_request(err, NULL, "The request body contains a NUL character (\\u0000), which is not supported.");
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(body, len, &end, false);
    long off = -1;
    if (root && end) {
        size_t at = (size_t)(end - body);
        while (at < len && (body[at] == ' ' || body[at] == '\t' || body[at] == '\n' || body[at] == '\r')) at++;
        if (at < len) { /* trailing bytes after the value */
            cJSON_Delete(root);
            root = NULL;
            off = (long)at;
        }
    } else if (!root) { /* cJSON reports the failing position through `end` (its global is racy) */
        off = end && end >= body && end <= body + len ? (long)(end - body) : -1;
    }
    if (!root) {
        bad_request(err, NULL, "The request body is not valid JSON (at byte %ld).", off);
        return NULL;
    }
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        bad_request(err, NULL, "The request body must be a JSON object.");
        return NULL;
    }
    dedupe_keys(root);
    return root;
}

/* ---- typed fields ------------------------------------------------------------------------ */

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static int opt_bool(const cJSON *obj, const char *key, bool *out, oai_error_t *err) {
    const cJSON *v = field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsBool(v)) return oai_bad_field(err, key, "expected true or false");
    *out = cJSON_IsTrue(v);
    return 0;
}

/* *present tells null/absent apart from a value. */
static int opt_int(const cJSON *obj, const char *key, int64_t lo, int64_t hi, int64_t *out,
                   bool *present, oai_error_t *err) {
    const cJSON *v = field(obj, key);
    if (present) *present = v != NULL;
    if (!v) return 0;
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) ||
        !(v->valuedouble >= (double)lo && v->valuedouble <= (double)hi))
        return oai_bad_field(err, key, "expected an integer in [%lld, %lld]", (long long)lo, (long long)hi);
    *out = (int64_t)v->valuedouble;
    return 0;
}

static int opt_str(const cJSON *obj, const char *key, const char **out, oai_error_t *err) {
    const cJSON *v = field(obj, key);
    if (!v) return 0;
    if (!cJSON_IsString(v)) return oai_bad_field(err, key, "expected a string");
    *out = v->valuestring;
    return 0;
}

/* Python truthiness of a JSON value (for vLLM's `data.get(k)` checks). */
static bool truthy(const cJSON *v) {
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return false;
    if (cJSON_IsNumber(v)) return v->valuedouble != 0;
    if (cJSON_IsString(v)) return v->valuestring[0] != '\0';
    if (cJSON_IsArray(v) || cJSON_IsObject(v)) return v->child != NULL;
    return true;
}

/* ---- known fields ------------------------------------------------------------------------- */

/* Fields this server knows but cannot honour: a 400 instead of different output. */
static int check_unsupported(oai_kind_t kind, const cJSON *root, oai_error_t *err) {
    static const char *const never[] = {
        "allowed_token_ids", "guided_json", "guided_regex", "guided_choice", "guided_grammar",
        "structural_tag", "structured_outputs", "logits_processors", "prompt_embeds", "prompt_logprobs",
        NULL};
    for (int i = 0; never[i]; i++)
        if (field(root, never[i]))
            return bad_request(err, never[i], "`%s` is not supported by this server.", never[i]);
    const cJSON *v = field(root, "bad_words");
    if (v && truthy(v)) return bad_request(err, "bad_words", "`bad_words` is not supported by this server.");
    if (kind == OAI_COMPLETION && field(root, "suffix"))
        return bad_request(err, NULL, "suffix is not currently supported");
    int64_t best_of = 1;
    if (opt_int(root, "best_of", 1, INT32_MAX, &best_of, NULL, err)) return -1;
    if (best_of > 1) return bad_request(err, "best_of", "`best_of` is not supported by this server.");
    bool beam = false, echo = false;
    if (opt_bool(root, "use_beam_search", &beam, err)) return -1;
    if (beam) return bad_request(err, "use_beam_search", "Beam search is not supported by this server.");
    if (kind == OAI_CHAT) {
        if (opt_bool(root, "echo", &echo, err)) return -1;
        if (echo) return bad_request(err, "echo", "`echo` is not supported for chat by this server.");
    }
    v = field(root, "response_format");
    if (v) {
        const cJSON *t = cJSON_IsObject(v) ? cJSON_GetObjectItemCaseSensitive(v, "type") : NULL;
        if (!cJSON_IsString(t)) return oai_bad_field(err, "response_format", "expected an object with a \"type\"");
        if (strcmp(t->valuestring, "text"))
            return bad_request(err, "response_format",
                               "response_format of type \"%.64s\" is not supported by this server.",
                               t->valuestring);
    }
    int64_t prio = 0;
    if (opt_int(root, "priority", INT32_MIN, INT32_MAX, &prio, NULL, err)) return -1;
    if (prio != 0)
        return bad_request(err, NULL, "Got priority %lld but Priority scheduling is not enabled.", (long long)prio);
    return 0;
}

/* ---- model --------------------------------------------------------------------------------- */

static int check_model(const oai_ctx_t *ctx, const cJSON *root, oai_request_t *r, oai_error_t *err) {
    const char *model = NULL;
    if (opt_str(root, "model", &model, err)) return -1;
    if (!model) return 0;
    r->model = sl_strdup(model);
    if (!model[0]) return 0; /* vLLM: an empty name is the default model */
    for (int32_t i = 0; i < ctx->n_served_model_names; i++)
        if (!strcmp(model, ctx->served_model_names[i])) return 0;
    return oai_error_set(err, 404, "NotFoundError", "model", "The model `%s` does not exist.", model);
}

/* ---- prompts ------------------------------------------------------------------------------- */

static int encode(const oai_ctx_t *ctx, const char *text, size_t len, bool add_special, int32_t **ids,
                  oai_error_t *err) {
    sl_err_t e = {{0}};
    int n = ctx->tok.encode(ctx->tok.user, text, len, add_special, ids, &e);
    if (n < 0) {
        *ids = NULL;
        return bad_request(err, NULL, "%s", e.msg);
    }
    return n;
}

static void add_prompt(oai_request_t *r, int32_t *ids, int32_t n, char *text, size_t text_len) {
    r->prompts = sl_realloc(r->prompts, (size_t)(r->n_prompts + 1) * sizeof *r->prompts);
    oai_prompt_t *p = &r->prompts[r->n_prompts++];
    memset(p, 0, sizeof *p);
    p->ids = ids;
    p->n_ids = n;
    p->text = text;
    p->text_len = text_len;
}

static int add_text_prompt(const oai_ctx_t *ctx, oai_request_t *r, const char *text, size_t len,
                           bool add_special, oai_error_t *err) {
    int32_t *ids = NULL;
    int n = encode(ctx, text, len, add_special, &ids, err);
    if (n < 0) return -1;
    char *copy = sl_malloc(len + 1);
    memcpy(copy, text, len);
    copy[len] = '\0';
    add_prompt(r, ids, n, copy, len);
    return 0;
}

/* A JSON array of token ids; -1 (err set) on anything else. */
static int token_list(const oai_ctx_t *ctx, const cJSON *arr, const char *name, int32_t **out, int32_t *n_out,
                      oai_error_t *err) {
    int n = cJSON_GetArraySize(arr);
    int32_t *ids = sl_malloc((size_t)(n ? n : 1) * sizeof *ids);
    int k = 0;
    int64_t worst = -1; /* vLLM names the largest id when one is too large */
    bool bad = false;
    for (const cJSON *c = arr->child; c; c = c->next) {
        if (!cJSON_IsNumber(c) || c->valuedouble != floor(c->valuedouble) || fabs(c->valuedouble) > 2147483647.0) {
            free(ids);
            return oai_bad_field(err, name, "expected a list of integer token ids");
        }
        int32_t id = (int32_t)c->valuedouble;
        if (id < 0 || id >= ctx->vocab_size) {
            if (!bad || id > worst) worst = id;
            bad = true;
        }
        ids[k++] = id;
    }
    if (bad) {
        free(ids);
        return bad_request(err, NULL, "Token id %lld is out of vocabulary", (long long)worst);
    }
    *out = ids;
    *n_out = k;
    return 0;
}

/* The text of token ids (echo, /detokenize), NUL bytes included: *len is its length. */
static char *decode_ids(const oai_ctx_t *ctx, const int32_t *ids, int32_t n, size_t *len) {
    *len = 0;
    char *s = ctx->tok.decode ? ctx->tok.decode(ctx->tok.user, ids, (size_t)n, false, len) : NULL;
    if (!s) {
        s = sl_strdup("");
        *len = 0;
    }
    return s;
}

#define PROMPT_TYPE_MSG "prompt must be a string, array of strings, array of tokens, or array of token arrays"

static int completion_prompts(const oai_ctx_t *ctx, const cJSON *root, bool add_special, oai_request_t *r,
                              oai_error_t *err) {
    const cJSON *p = field(root, "prompt");
    if (!p) return bad_request(err, "prompt", "At least one of `prompt` or `prompt_embeds` must be set.");
    if (cJSON_IsString(p))
        return add_text_prompt(ctx, r, p->valuestring, strlen(p->valuestring), add_special, err);
    if (!cJSON_IsArray(p)) return oai_bad_field(err, "prompt", PROMPT_TYPE_MSG);
    if (!p->child) return bad_request(err, "prompt", "please provide at least one prompt");
    const cJSON *first = p->child;
    for (const cJSON *c = p->child; c; c = c->next)
        if ((cJSON_IsString(first) && !cJSON_IsString(c)) || (cJSON_IsArray(first) && !cJSON_IsArray(c)) ||
            (cJSON_IsNumber(first) && !cJSON_IsNumber(c)))
            return oai_bad_field(err, "prompt", PROMPT_TYPE_MSG);
    if (cJSON_IsString(first)) {
        for (const cJSON *c = p->child; c; c = c->next)
            if (add_text_prompt(ctx, r, c->valuestring, strlen(c->valuestring), add_special, err)) return -1;
        return 0;
    }
    if (cJSON_IsNumber(first) || cJSON_IsArray(first)) {
        if (cJSON_IsArray(first) && !first->child) return bad_request(err, "prompt", "please provide at least one prompt");
        for (const cJSON *c = cJSON_IsNumber(first) ? p : p->child; c; c = cJSON_IsNumber(first) ? NULL : c->next) {
            int32_t *ids = NULL, n = 0;
            if (token_list(ctx, c, "prompt", &ids, &n, err)) return -1;
            size_t tl = 0;
            char *text = decode_ids(ctx, ids, n, &tl);
            add_prompt(r, ids, n, text, tl);
        }
        return 0;
    }
    return oai_bad_field(err, "prompt", PROMPT_TYPE_MSG);
}

/* truncate_prompt_tokens: the last k tokens, keeping the tokenizer's leading special
 * tokens of a text prompt (what a left-truncating HF tokenizer does). */
static int truncate_prompts(const oai_ctx_t *ctx, const cJSON *root, bool text_prompts, bool add_special,
                            oai_request_t *r, oai_error_t *err) {
    int64_t k = 0;
    bool present = false;
    if (opt_int(root, "truncate_prompt_tokens", -1, INT32_MAX, &k, &present, err)) return -1;
    if (!present) return 0;
    if (k == 0) return bad_request(err, NULL, "truncate_prompt_tokens must be an integer >= 1 or -1, got 0");
    if (k == -1) k = ctx->max_model_len;
    if (k > ctx->max_model_len)
        return bad_request(err, NULL,
                           "truncate_prompt_tokens value (%lld) is greater than max_model_len (%d). Please, "
                           "select a smaller truncation size.",
                           (long long)k, ctx->max_model_len);
    int32_t n_special = 0;
    if (text_prompts && add_special) {
        int32_t *sp = NULL;
        int n = encode(ctx, "", 0, true, &sp, err);
        free(sp);
        if (n < 0) return -1;
        n_special = n < k ? n : 0;
    }
    for (int32_t i = 0; i < r->n_prompts; i++) {
        oai_prompt_t *p = &r->prompts[i];
        if (p->n_ids <= k) continue;
        int32_t keep = (int32_t)k - n_special;
        memmove(p->ids + n_special, p->ids + p->n_ids - keep, (size_t)keep * sizeof *p->ids);
        p->n_ids = (int32_t)k;
    }
    return 0;
}

/* ---- sampling and lengths ---------------------------------------------------------------------- */

static void apply_gen_defaults(const oai_gen_defaults_t *g, sampling_params_t *p) {
    if (g->has_temperature) p->temperature = g->temperature;
    if (g->has_top_p) p->top_p = g->top_p;
    if (g->has_top_k) p->top_k = g->top_k;
    if (g->has_min_p) p->min_p = g->min_p;
    if (g->has_repetition_penalty) p->repetition_penalty = g->repetition_penalty;
}

/* sampling_json's "field: what" message as a 400 naming the field. */
static int sampling_type_error(const sl_err_t *e, oai_error_t *err) {
    char param[64];
    const char *colon = strstr(e->msg, ": ");
    size_t n = colon ? (size_t)(colon - e->msg) : 0;
    if (n >= sizeof param) n = 0;
    memcpy(param, e->msg, n);
    param[n] = '\0';
    return oai_error_set(err, 400, "BadRequestError", n ? param : NULL, "%s", e->msg);
}

/* The max_tokens a request asked for: vLLM's `max_completion_tokens or max_tokens` for
 * chat (0 is falsy there), max_tokens for completions (absent: 16; an explicit null:
 * None). Whatever integer a client sends is kept as sent, -1 included (SamplingParams
 * refuses it later), so None is its own flag rather than a value a client can send. */
typedef struct {
    bool given;    /* false: None (the context decides) */
    int64_t value; /* as sent when given */
} req_max_tokens_t;

static int requested_max_tokens(oai_kind_t kind, const cJSON *root, req_max_tokens_t *out, oai_error_t *err) {
    int64_t mt = 0, mct = 0;
    bool has_mt = false, has_mct = false;
    if (opt_int(root, "max_tokens", INT32_MIN, INT32_MAX, &mt, &has_mt, err)) return -1;
    if (kind == OAI_CHAT) {
        if (opt_int(root, "max_completion_tokens", INT32_MIN, INT32_MAX, &mct, &has_mct, err)) return -1;
        if (has_mct && mct != 0) *out = (req_max_tokens_t){true, mct};
        else *out = (req_max_tokens_t){has_mt, mt};
        return 0;
    }
    /* Completions: absent = 16; an explicit null = None. */
    bool sent = cJSON_GetObjectItemCaseSensitive(root, "max_tokens") != NULL;
    *out = has_mt ? (req_max_tokens_t){true, mt} : (req_max_tokens_t){!sent, 16};
    return 0;
}

/* Context length and the final max_tokens of each prompt (vLLM's _validate_input
 * then get_max_tokens: the smallest of the room left, the request's value and the
 * generation config's cap; a value below 1 stays for SamplingParams to refuse). */
static int check_lengths(const oai_ctx_t *ctx, oai_request_t *r, req_max_tokens_t req, oai_error_t *err) {
    int32_t L = ctx->max_model_len;
    for (int32_t i = 0; i < r->n_prompts; i++) {
        oai_prompt_t *p = &r->prompts[i];
        int32_t P = p->n_ids;
        if (P == 0) return bad_request(err, NULL, "The decoder prompt cannot be empty");
        if (P >= L)
            return bad_request(err, NULL,
                               "This model's maximum context length is %d tokens. However, your request has %d "
                               "input tokens. Please reduce the length of the input messages.",
                               L, P);
        if (req.given && (int64_t)P + req.value > L)
            return bad_request(err, NULL,
                               "'max_tokens' or 'max_completion_tokens' is too large: %lld. This model's maximum "
                               "context length is %d tokens and your request has %d input tokens (%lld > %d - %d).",
                               (long long)req.value, L, P, (long long)req.value, L, P);
        int64_t m = L - P;
        if (req.given && req.value < m) m = req.value;
        if (ctx->gen.max_new_tokens > 0 && ctx->gen.max_new_tokens < m) m = ctx->gen.max_new_tokens;
        p->max_tokens = (int32_t)m;
    }
    return 0;
}

static int validate_sampling(const oai_ctx_t *ctx, oai_request_t *r, oai_error_t *err) {
    int32_t max_lp = ctx->max_logprobs > 0 && ctx->max_logprobs < SAMPLING_MAX_LOGPROBS ? ctx->max_logprobs
                                                                                        : SAMPLING_MAX_LOGPROBS;
    int32_t max_n = ctx->max_n > 0 ? ctx->max_n : OAI_DEFAULT_MAX_N;
    for (int32_t i = 0; i < r->n_prompts; i++) {
        sampling_params_t p = oai_request_params(r, i);
        /* The range checks come first (SamplingParams), the limit after (engine front end). */
        int32_t lp = p.logprobs;
        if (lp > max_lp) p.logprobs = -1;
        sl_err_t e = {{0}};
        if (sampling_params_validate(&p, ctx->vocab_size, &e)) return bad_request(err, NULL, "%s", e.msg);
        if (lp > max_lp)
            return bad_request(err, NULL, "Requested sample logprobs of %d, which is greater than max allowed: %d",
                               lp, max_lp);
        if (p.n > max_n) return bad_request(err, "n", "n must be at most %d, got %d.", max_n, p.n);
    }
    return 0;
}

/* ---- the generation endpoints -------------------------------------------------------------------- */

static int parse_stream_fields(const cJSON *root, oai_request_t *r, oai_error_t *err) {
    if (opt_bool(root, "stream", &r->stream, err)) return -1;
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(root, "stream_options");
    if (truthy(so) && !truthy(cJSON_GetObjectItemCaseSensitive(root, "stream")))
        return bad_request(err, "stream_options", "Stream options can only be defined when `stream=True`.");
    if (!so || cJSON_IsNull(so)) return 0;
    if (!cJSON_IsObject(so)) return oai_bad_field(err, "stream_options", "expected an object");
    /* StreamOptions.include_usage defaults to True once the object is sent. */
    const cJSON *iu = cJSON_GetObjectItemCaseSensitive(so, "include_usage");
    if (iu && !cJSON_IsNull(iu) && !cJSON_IsBool(iu))
        return oai_bad_field(err, "stream_options.include_usage", "expected true or false");
    const cJSON *cu = cJSON_GetObjectItemCaseSensitive(so, "continuous_usage_stats");
    if (cu && !cJSON_IsNull(cu) && !cJSON_IsBool(cu))
        return oai_bad_field(err, "stream_options.continuous_usage_stats", "expected true or false");
    r->include_usage = r->stream && (!iu || cJSON_IsTrue(iu));
    r->continuous_usage_stats = r->include_usage && cJSON_IsTrue(cu);
    return 0;
}

static int parse_generation(const oai_ctx_t *ctx, oai_kind_t kind, cJSON *root, oai_request_t *r,
                            oai_error_t *err) {
    /* Types of our own fields, then the sampling ones. */
    const char *str = NULL;
    if (opt_str(root, "request_id", &str, err)) return -1;
    if (str) r->request_id = sl_strdup(str);
    if (opt_str(root, "user", &str, err)) return -1;
    bool add_special = kind == OAI_COMPLETION, unused = false;
    if (opt_bool(root, "add_special_tokens", &add_special, err) ||
        opt_bool(root, "spaces_between_special_tokens", &unused, err) ||
        opt_bool(root, "return_tokens_as_token_ids", &r->tokens_as_ids, err))
        return -1;
    if (parse_stream_fields(root, r, err)) return -1;

    sampling_params_default(&r->params);
    apply_gen_defaults(&ctx->gen, &r->params);
    /* CompletionRequest's check_logprobs runs on the raw body, before the fields are read. */
    const cJSON *lp_in = kind == OAI_COMPLETION ? field(root, "logprobs") : NULL;
    if (cJSON_IsNumber(lp_in) && lp_in->valuedouble < 0)
        return bad_request(err, NULL, "`logprobs` must be a positive value.");
    /* Chat's logprobs is a bool: keep it away from the int field of SamplingParams. */
    cJSON *chat_lp = kind == OAI_CHAT ? cJSON_DetachItemFromObjectCaseSensitive(root, "logprobs") : NULL;
    sl_err_t e = {{0}};
    int rc = sampling_params_from_json(root, &r->params, &e);
    if (chat_lp) cJSON_AddItemToObject(root, "logprobs", chat_lp);
    if (rc) return sampling_type_error(&e, err);

    req_max_tokens_t req_max;
    if (requested_max_tokens(kind, root, &req_max, err)) return -1;
    if (kind == OAI_CHAT) {
        bool lp = false;
        if (opt_bool(root, "logprobs", &lp, err)) return -1;
        int64_t top = 0;
        bool has_top = false;
        if (opt_int(root, "top_logprobs", INT32_MIN, INT32_MAX, &top, &has_top, err)) return -1;
        if (has_top && top < 0) return bad_request(err, NULL, "`top_logprobs` must be a positive value.");
        if (has_top && top > 0 && !lp)
            return bad_request(err, NULL, "when using `top_logprobs`, `logprobs` must be set to true.");
        /* top_logprobs: null with logprobs: true asks for none, as in vLLM. */
        bool explicit_null = cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(root, "top_logprobs"));
        r->chat_logprobs = lp && !explicit_null;
        r->top_logprobs = (int32_t)top;
        r->params.logprobs = r->chat_logprobs ? (int32_t)top : -1;
    } else {
        if (opt_bool(root, "echo", &r->echo, err)) return -1;
        if (r->echo && r->params.logprobs >= 0)
            return bad_request(err, "echo", "`echo` with `logprobs` needs prompt logprobs, which this server "
                                            "does not compute.");
    }
    if (check_unsupported(kind, root, err)) return -1;
    if (check_model(ctx, root, r, err)) return -1;

    if (kind == OAI_CHAT) {
        char *text = NULL;
        size_t len = 0;
        if (oai_chat_render(ctx, root, true, &text, &len, err)) return -1;
        int32_t *ids = NULL;
        int n = encode(ctx, text, len, add_special, &ids, err);
        if (n < 0) {
            free(text);
            return -1;
        }
        add_prompt(r, ids, n, text, len);
        if (truncate_prompts(ctx, root, true, add_special, r, err)) return -1;
    } else {
        if (completion_prompts(ctx, root, add_special, r, err)) return -1;
        bool text_prompts = cJSON_IsString(field(root, "prompt")) ||
                            cJSON_IsString(cJSON_GetArrayItem(field(root, "prompt"), 0));
        if (truncate_prompts(ctx, root, text_prompts, add_special, r, err)) return -1;
    }
    if (check_lengths(ctx, r, req_max, err)) return -1;
    return validate_sampling(ctx, r, err);
}

/* ---- tokenize / detokenize ------------------------------------------------------------------------ */

static int parse_tokenize(const oai_ctx_t *ctx, cJSON *root, oai_request_t *r, oai_error_t *err) {
    bool chat = cJSON_GetObjectItemCaseSensitive(root, "messages") != NULL;
    bool add_special = !chat;
    if (opt_bool(root, "add_special_tokens", &add_special, err) ||
        opt_bool(root, "return_token_strs", &r->return_token_strs, err))
        return -1;
    if (check_model(ctx, root, r, err)) return -1;
    if (chat) {
        char *text = NULL;
        size_t len = 0;
        if (oai_chat_render(ctx, root, false, &text, &len, err)) return -1;
        int32_t *ids = NULL;
        int n = encode(ctx, text, len, add_special, &ids, err);
        if (n < 0) {
            free(text);
            return -1;
        }
        add_prompt(r, ids, n, text, len);
        return 0;
    }
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(root, "prompt");
    if (!p) return oai_bad_field(err, "prompt", "field required");
    if (!cJSON_IsString(p)) return oai_bad_field(err, "prompt", "expected a string");
    return add_text_prompt(ctx, r, p->valuestring, strlen(p->valuestring), add_special, err);
}

static int parse_detokenize(const oai_ctx_t *ctx, cJSON *root, oai_request_t *r, oai_error_t *err) {
    if (check_model(ctx, root, r, err)) return -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(root, "tokens");
    if (!t) return oai_bad_field(err, "tokens", "field required");
    if (!cJSON_IsArray(t)) return oai_bad_field(err, "tokens", "expected a list of integer token ids");
    int32_t *ids = NULL, n = 0;
    if (token_list(ctx, t, "tokens", &ids, &n, err)) return -1;
    size_t len = 0;
    char *text = decode_ids(ctx, ids, n, &len);
    add_prompt(r, ids, n, text, len);
    return 0;
}

/* ---- entry points ------------------------------------------------------------------------------------ */

int oai_request_parse(const oai_ctx_t *ctx, oai_kind_t kind, const char *body, size_t len,
                      oai_request_t *out, oai_error_t *err) {
    memset(out, 0, sizeof *out);
    out->kind = kind;
    sampling_params_default(&out->params);
    cJSON *root = parse_body(body, len, err);
    if (!root) return -1;
    int rc;
    if (kind == OAI_CHAT || kind == OAI_COMPLETION) rc = parse_generation(ctx, kind, root, out, err);
    else if (kind == OAI_TOKENIZE) rc = parse_tokenize(ctx, root, out, err);
    else rc = parse_detokenize(ctx, root, out, err);
    if (rc == 0) oai_collect_ignored(kind, cJSON_GetObjectItemCaseSensitive(root, "messages") != NULL, root, out);
    cJSON_Delete(root);
    if (rc) {
        oai_request_free(out);
        out->kind = kind;
    }
    return rc;
}

void oai_request_free(oai_request_t *r) {
    for (int32_t i = 0; i < r->n_prompts; i++) {
        free(r->prompts[i].ids);
        free(r->prompts[i].text);
    }
    free(r->prompts);
    for (int32_t i = 0; i < r->n_ignored; i++) free(r->ignored[i]);
    free(r->ignored);
    free(r->model);
    free(r->request_id);
    sampling_params_free(&r->params);
    memset(r, 0, sizeof *r);
}

sampling_params_t oai_request_params(const oai_request_t *r, int32_t i) {
    SL_ASSERT(i >= 0 && i < r->n_prompts);
    sampling_params_t p = r->params;
    p.max_tokens = r->prompts[i].max_tokens;
    return p;
}
