/* openai_response.c - response bodies of the OpenAI routes, byte for byte as vLLM.
 *
 * Field order is the declaration order of vLLM's pydantic models (ChatCompletionResponse,
 * CompletionResponse, UsageInfo, ModelCard, ...), nulls included, compact separators.
 * Logprob token strings are the token's piece text (leading space kept, byte pieces
 * made valid UTF-8 with U+FFFD) and "bytes" its raw bytes, as OpenAI returns them.
 * The accumulator keeps each choice's text, tokens and (when asked) logprobs until
 * the request finishes; streaming lives in openai_stream.c.
 */
#include <stdlib.h>
#include <string.h>

#include "openai_internal.h"
#include "servelab/tokenizer.h"

/* ---- tokenizer binding -------------------------------------------------------------- */

static int bound_encode(void *user, const char *text, size_t len, bool add_special, int32_t **ids, sl_err_t *err) {
    return tok_encode(user, text, len, add_special, ids, err);
}
static char *bound_decode(void *user, const int32_t *ids, size_t n, bool skip_special, size_t *len_out) {
    return tok_decode(user, ids, n, skip_special, len_out);
}
static int bound_piece(void *user, int32_t id, char *buf, size_t cap) { return tok_piece_bytes(user, id, buf, cap); }

void oai_tok_bind(oai_tok_t *out, const struct tokenizer *tok) {
    out->user = (void *)tok;
    out->encode = bound_encode;
    out->decode = bound_decode;
    out->piece = bound_piece;
}

/* ---- errors ------------------------------------------------------------------------------ */

char *oai_error_body(const oai_error_t *err, size_t *len_out) {
    oai_sb_t b = {0};
    sb_puts(&b, "{\"error\":{\"message\":");
    sb_json_str(&b, err->message, strlen(err->message));
    sb_puts(&b, ",\"type\":");
    sb_json_str(&b, err->type ? err->type : "BadRequestError", strlen(err->type ? err->type : "BadRequestError"));
    sb_puts(&b, ",\"param\":");
    if (err->param[0]) sb_json_str(&b, err->param, strlen(err->param));
    else sb_puts(&b, "null");
    sb_printf(&b, ",\"code\":%d}}", err->status);
    return sb_take(&b, len_out);
}

/* ---- token strings and logprobs ------------------------------------------------------------- */

void oai_token_text(const oai_ctx_t *ctx, const oai_request_t *r, int32_t id, oai_sb_t *str, oai_sb_t *raw) {
    str->len = raw->len = 0;
    sb_put(str, "", 0);
    sb_put(raw, "", 0);
    if (r->tokens_as_ids) {
        sb_printf(str, "token_id:%d", id);
        sb_put(raw, str->buf, str->len);
        return;
    }
    char buf[256];
    int n = ctx->tok.piece ? ctx->tok.piece(ctx->tok.user, id, buf, sizeof buf) : -1;
    if (n < 0) return;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    sb_put(raw, buf, (size_t)n);
    /* Valid UTF-8 runs copied, each other byte becomes U+FFFD. */
    for (size_t i = 0; i < (size_t)n;) {
        size_t k = 1;
        while (k <= 4 && i + k <= (size_t)n && !utf8_valid(buf + i, k)) k++;
        if (k <= 4 && i + k <= (size_t)n) {
            sb_put(str, buf + i, k);
            i += k;
        } else {
            sb_puts(str, "\xEF\xBF\xBD");
            i++;
        }
    }
}

static void bytes_list(oai_sb_t *b, const oai_sb_t *raw) {
    sb_puts(b, "[");
    for (size_t i = 0; i < raw->len; i++) sb_printf(b, i ? ",%u" : "%u", (unsigned char)raw->buf[i]);
    sb_puts(b, "]");
}

static double clamp_lp(float lp) { return lp < -9999.0f ? -9999.0 : (double)lp; }

/* vLLM's per-position dict: the sampled token first, then the top ones, an id
 * already present keeping its place. Returns the count written to ids/lps. */
static int lp_entries(const sample_result_t *s, int32_t *ids, float *lps) {
    int n = 0;
    ids[n] = s->token;
    lps[n++] = s->logprob;
    for (int i = 0; i < s->n_top && i < SAMPLING_MAX_LOGPROBS; i++) {
        bool seen = false;
        for (int k = 0; k < n; k++) seen |= ids[k] == s->top_ids[i];
        if (seen) continue;
        ids[n] = s->top_ids[i];
        lps[n++] = s->top_logprobs[i];
    }
    return n;
}

void oai_chat_logprob_entry(oai_sb_t *b, const oai_ctx_t *ctx, const oai_request_t *r, const sample_result_t *s) {
    oai_sb_t str = {0}, raw = {0};
    int32_t ids[SAMPLING_MAX_LOGPROBS + 1];
    float lps[SAMPLING_MAX_LOGPROBS + 1];
    int n = lp_entries(s, ids, lps);
    oai_token_text(ctx, r, s->token, &str, &raw);
    sb_puts(b, "{\"token\":");
    sb_json_str(b, str.buf, str.len);
    sb_puts(b, ",\"logprob\":");
    sb_py_float(b, clamp_lp(s->logprob));
    sb_puts(b, ",\"bytes\":");
    bytes_list(b, &raw);
    sb_puts(b, ",\"top_logprobs\":[");
    for (int i = 0; i < n && i < r->top_logprobs; i++) {
        oai_token_text(ctx, r, ids[i], &str, &raw);
        sb_puts(b, i ? ",{\"token\":" : "{\"token\":");
        sb_json_str(b, str.buf, str.len);
        sb_puts(b, ",\"logprob\":");
        sb_py_float(b, clamp_lp(lps[i]));
        sb_puts(b, ",\"bytes\":");
        bytes_list(b, &raw);
        sb_puts(b, "}");
    }
    sb_puts(b, "]}");
    free(str.buf);
    free(raw.buf);
}

void oai_completion_logprobs(oai_sb_t *b, const oai_ctx_t *ctx, const oai_request_t *r,
                             const sample_result_t *s, int32_t n, int64_t text_offset) {
    oai_sb_t str = {0}, raw = {0};
    sb_puts(b, "{\"text_offset\":[");
    for (int32_t i = 0; i < n; i++) {
        sb_printf(b, i ? ",%lld" : "%lld", (long long)text_offset);
        oai_token_text(ctx, r, s[i].token, &str, &raw);
        text_offset += oai_utf8_chars(str.buf, str.len);
    }
    sb_puts(b, "],\"token_logprobs\":[");
    for (int32_t i = 0; i < n; i++) {
        if (i) sb_puts(b, ",");
        sb_py_float(b, clamp_lp(s[i].logprob));
    }
    sb_puts(b, "],\"tokens\":[");
    for (int32_t i = 0; i < n; i++) {
        oai_token_text(ctx, r, s[i].token, &str, &raw);
        if (i) sb_puts(b, ",");
        sb_json_str(b, str.buf, str.len);
    }
    sb_puts(b, "],\"top_logprobs\":[");
    for (int32_t i = 0; i < n; i++) {
        int32_t ids[SAMPLING_MAX_LOGPROBS + 1];
        float lps[SAMPLING_MAX_LOGPROBS + 1];
        int k = lp_entries(&s[i], ids, lps);
        if (k > r->params.logprobs + 1) k = r->params.logprobs + 1;
        /* A dict keyed by token text: a repeated text keeps its place, takes the later value. */
        char *keys[SAMPLING_MAX_LOGPROBS + 1];
        size_t key_len[SAMPLING_MAX_LOGPROBS + 1];
        int nk = 0;
        for (int j = 0; j < k; j++) {
            oai_token_text(ctx, r, ids[j], &str, &raw);
            int at = -1;
            for (int q = 0; q < nk; q++)
                if (key_len[q] == str.len && !memcmp(keys[q], str.buf, str.len)) at = q;
            if (at >= 0) {
                lps[at] = lps[j];
                continue;
            }
            keys[nk] = sl_malloc(str.len + 1);
            memcpy(keys[nk], str.buf, str.len + 1);
            key_len[nk] = str.len;
            lps[nk++] = lps[j];
        }
        sb_puts(b, i ? ",{" : "{");
        for (int q = 0; q < nk; q++) {
            if (q) sb_puts(b, ",");
            sb_json_str(b, keys[q], key_len[q]);
            sb_puts(b, ":");
            sb_py_float(b, clamp_lp(lps[q]));
            free(keys[q]);
        }
        sb_puts(b, "}");
    }
    sb_puts(b, "]}");
    free(str.buf);
    free(raw.buf);
}

void oai_stop_reason(oai_sb_t *b, const oai_request_t *r, int32_t stop_index, int32_t stop_token) {
    if (stop_index >= 0 && stop_index < r->params.n_stop)
        sb_json_str(b, r->params.stop[stop_index], strlen(r->params.stop[stop_index]));
    else if (stop_token >= 0)
        sb_printf(b, "%d", stop_token);
    else
        sb_puts(b, "null");
}

void oai_response_head(oai_sb_t *b, const oai_ctx_t *ctx, const char *id, const char *object, int64_t created) {
    sb_puts(b, "{\"id\":");
    sb_json_str(b, id, strlen(id));
    sb_printf(b, ",\"object\":\"%s\",\"created\":%lld,\"model\":", object, (long long)created);
    const char *model = ctx->served_model_names[0];
    sb_json_str(b, model, strlen(model));
}

/* ---- the accumulator ---------------------------------------------------------------------------- */

typedef struct {
    oai_sb_t text;
    sample_result_t *lps;         /* (n_tokens) when logprobs were asked for */
    int32_t n_tokens, cap;
    finish_reason_t finish;
    int32_t stop_index, stop_token;
} acc_choice_t;

struct oai_acc {
    const oai_request_t *req;
    int32_t n_choices;
    acc_choice_t *ch;
};

oai_acc_t *oai_acc_new(const oai_request_t *req) {
    oai_acc_t *a = sl_calloc(1, sizeof *a);
    a->req = req;
    a->n_choices = req->n_prompts * req->params.n;
    a->ch = sl_calloc((size_t)(a->n_choices ? a->n_choices : 1), sizeof *a->ch);
    for (int32_t i = 0; i < a->n_choices; i++) a->ch[i].stop_index = a->ch[i].stop_token = -1;
    return a;
}

void oai_acc_add(oai_acc_t *a, int32_t prompt_idx, const engine_output_t *o) {
    int32_t i = prompt_idx * a->req->params.n + o->index;
    SL_ASSERT(i >= 0 && i < a->n_choices);
    acc_choice_t *c = &a->ch[i];
    sb_put(&c->text, o->text ? o->text : "", o->text ? o->text_len : 0);
    if (o->n_new > 0) {
        if (a->req->params.logprobs >= 0) {
            if (c->n_tokens == c->cap) {
                c->cap = c->cap ? 2 * c->cap : 16;
                c->lps = sl_realloc(c->lps, (size_t)c->cap * sizeof *c->lps);
            }
            c->lps[c->n_tokens] = o->logprobs;
            c->lps[c->n_tokens].token = o->token;
        }
        c->n_tokens++;
    }
    if (o->finish != FINISH_NONE) {
        c->finish = o->finish;
        c->stop_index = o->stop_index;
        c->stop_token = o->stop_token;
    }
}

static void usage_obj(oai_sb_t *b, int64_t prompt, int64_t completion, bool details) {
    sb_printf(b, "{\"prompt_tokens\":%lld,\"total_tokens\":%lld,\"completion_tokens\":%lld", (long long)prompt,
              (long long)(prompt + completion), (long long)completion);
    sb_puts(b, details ? ",\"prompt_tokens_details\":null}" : "}");
}

void oai_usage(oai_sb_t *b, int64_t prompt, int64_t completion, bool details) { usage_obj(b, prompt, completion, details); }

char *oai_acc_body(const oai_acc_t *a, const oai_ctx_t *ctx, const char *id, int64_t created, size_t *len_out) {
    const oai_request_t *r = a->req;
    bool chat = r->kind == OAI_CHAT;
    oai_sb_t b = {0};
    oai_response_head(&b, ctx, id, chat ? "chat.completion" : "text_completion", created);
    sb_puts(&b, ",\"choices\":[");
    int64_t prompt_tokens = 0, completion_tokens = 0;
    for (int32_t p = 0; p < r->n_prompts; p++) prompt_tokens += r->prompts[p].n_ids;
    for (int32_t i = 0; i < a->n_choices; i++) {
        const acc_choice_t *c = &a->ch[i];
        const oai_prompt_t *pr = &r->prompts[i / r->params.n];
        completion_tokens += c->n_tokens;
        sb_printf(&b, "%s{\"index\":%d,", i ? "," : "", i);
        if (chat) {
            sb_puts(&b, "\"message\":{\"role\":\"assistant\",\"content\":");
            sb_json_str(&b, c->text.buf ? c->text.buf : "", c->text.len);
            sb_puts(&b, ",\"refusal\":null,\"annotations\":null,\"audio\":null,\"function_call\":null,"
                        "\"tool_calls\":[],\"reasoning_content\":null},\"logprobs\":");
            if (r->chat_logprobs) {
                sb_puts(&b, "{\"content\":[");
                for (int32_t t = 0; t < c->n_tokens; t++) {
                    if (t) sb_puts(&b, ",");
                    oai_chat_logprob_entry(&b, ctx, r, &c->lps[t]);
                }
                sb_puts(&b, "]}");
            } else {
                sb_puts(&b, "null");
            }
        } else {
            sb_puts(&b, "\"text\":");
            oai_sb_t text = {0};
            if (r->echo) sb_put(&text, pr->text, pr->text_len);
            sb_put(&text, c->text.buf ? c->text.buf : "", c->text.len);
            sb_json_str(&b, text.buf, text.len);
            free(text.buf);
            sb_puts(&b, ",\"logprobs\":");
            if (r->params.logprobs >= 0) oai_completion_logprobs(&b, ctx, r, c->lps, c->n_tokens, 0);
            else sb_puts(&b, "null");
        }
        const char *fin = finish_reason_str(c->finish);
        if (fin) sb_printf(&b, ",\"finish_reason\":\"%s\",\"stop_reason\":", fin);
        else sb_puts(&b, chat ? ",\"finish_reason\":\"stop\",\"stop_reason\":" : ",\"finish_reason\":null,\"stop_reason\":");
        oai_stop_reason(&b, r, c->stop_index, c->stop_token);
        sb_puts(&b, chat ? "}" : ",\"prompt_logprobs\":null}");
    }
    sb_puts(&b, "],\"service_tier\":null,\"system_fingerprint\":null,\"usage\":");
    usage_obj(&b, prompt_tokens, completion_tokens, true);
    sb_puts(&b, chat ? ",\"prompt_logprobs\":null,\"kv_transfer_params\":null}" : ",\"kv_transfer_params\":null}");
    return sb_take(&b, len_out);
}

void oai_acc_free(oai_acc_t *a) {
    if (!a) return;
    for (int32_t i = 0; i < a->n_choices; i++) {
        free(a->ch[i].text.buf);
        free(a->ch[i].lps);
    }
    free(a->ch);
    free(a);
}

/* ---- other bodies --------------------------------------------------------------------------------- */

char *oai_models_body(const oai_ctx_t *ctx, int64_t created, const char *perm_hex, size_t *len_out) {
    oai_sb_t b = {0};
    sb_puts(&b, "{\"object\":\"list\",\"data\":[");
    for (int32_t i = 0; i < ctx->n_served_model_names; i++) {
        const char *name = ctx->served_model_names[i];
        const char *root = ctx->model_root ? ctx->model_root : name;
        sb_puts(&b, i ? ",{\"id\":" : "{\"id\":");
        sb_json_str(&b, name, strlen(name));
        sb_printf(&b, ",\"object\":\"model\",\"created\":%lld,\"owned_by\":\"vllm\",\"root\":", (long long)created);
        sb_json_str(&b, root, strlen(root));
        sb_printf(&b, ",\"parent\":null,\"max_model_len\":%d,\"permission\":[{\"id\":\"modelperm-", ctx->max_model_len);
        /* One permission id per card, as vLLM makes a fresh one for each. */
        size_t hl = strlen(perm_hex);
        sb_put(&b, perm_hex, hl > 4 && i ? hl - 4 : hl);
        if (hl > 4 && i) sb_printf(&b, "%04x", (unsigned)(strtoul(perm_hex + hl - 4, NULL, 16) ^ (unsigned)i) & 0xFFFFu);
        sb_printf(&b, "\",\"object\":\"model_permission\",\"created\":%lld,\"allow_create_engine\":false,"
                      "\"allow_sampling\":true,\"allow_logprobs\":true,\"allow_search_indices\":false,"
                      "\"allow_view\":true,\"allow_fine_tuning\":false,\"organization\":\"*\",\"group\":null,"
                      "\"is_blocking\":false}]}",
                  (long long)created);
    }
    sb_puts(&b, "]}");
    return sb_take(&b, len_out);
}

char *oai_version_body(const char *version, size_t *len_out) {
    oai_sb_t b = {0};
    sb_puts(&b, "{\"version\":");
    sb_json_str(&b, version, strlen(version));
    sb_puts(&b, "}");
    return sb_take(&b, len_out);
}

/* convert_ids_to_tokens() text: sentencepiece writes a space as U+2581 and a
 * byte-fallback piece as <0xNN>. Written as plain text into `b`. */
static void raw_piece(oai_sb_t *b, const oai_ctx_t *ctx, int32_t id) {
    char buf[256];
    int n = ctx->tok.piece ? ctx->tok.piece(ctx->tok.user, id, buf, sizeof buf) : -1;
    if (n < 0) n = 0;
    if ((size_t)n >= sizeof buf) n = sizeof buf - 1;
    unsigned char c0 = (unsigned char)buf[0];
    if (n == 1 && (c0 < 0x20 || c0 >= 0x80)) {
        sb_printf(b, "<0x%02X>", c0);
        return;
    }
    size_t start = b->len;
    for (int i = 0; i < n; i++) {
        if (buf[i] == ' ') sb_puts(b, "\xE2\x96\x81");
        else sb_put(b, buf + i, 1);
    }
    if (!utf8_valid(b->buf ? b->buf + start : "", b->len - start)) {
        b->len = start;
        sb_puts(b, "\xEF\xBF\xBD");
    }
}

char *oai_tokenize_body(const oai_ctx_t *ctx, const oai_request_t *r, size_t *len_out) {
    SL_ASSERT(r->n_prompts == 1);
    const oai_prompt_t *p = &r->prompts[0];
    oai_sb_t b = {0};
    sb_printf(&b, "{\"count\":%d,\"max_model_len\":%d,\"tokens\":[", p->n_ids, ctx->max_model_len);
    for (int32_t i = 0; i < p->n_ids; i++) sb_printf(&b, i ? ",%d" : "%d", p->ids[i]);
    sb_puts(&b, "],\"token_strs\":");
    if (r->return_token_strs) {
        sb_puts(&b, "[");
        for (int32_t i = 0; i < p->n_ids; i++) {
            if (i) sb_puts(&b, ",");
            oai_sb_t one = {0};
            raw_piece(&one, ctx, p->ids[i]);
            sb_json_str(&b, one.buf ? one.buf : "", one.len);
            free(one.buf);
        }
        sb_puts(&b, "]");
    } else {
        sb_puts(&b, "null");
    }
    sb_puts(&b, "}");
    return sb_take(&b, len_out);
}

char *oai_detokenize_body(const oai_request_t *r, size_t *len_out) {
    SL_ASSERT(r->n_prompts == 1);
    oai_sb_t b = {0};
    sb_puts(&b, "{\"prompt\":");
    sb_json_str(&b, r->prompts[0].text, r->prompts[0].text_len);
    sb_puts(&b, "}");
    return sb_take(&b, len_out);
}
