/* openai_chat.c - chat messages to a prompt, and the small request-side helpers.
 *
 * Messages are rebuilt the way vLLM's chat_utils rebuilds them before calling
 * apply_chat_template with the "string" content format: {"role", "content"} with
 * text parts joined by "\n", plus tool_calls (arguments parsed from their JSON
 * string), tool_call_id and name where given; anything else is dropped. Non-text
 * parts (images, audio) are a 400: the models served here are text-only. Tools are
 * passed as vLLM's pydantic model_dump() writes them, nulls included.
 * Also here: which top-level fields each route knows (the rest are reported as
 * ignored, with vLLM's warning text), response ids, generation_config.json.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "openai_internal.h"
#include "servelab/sampling_json.h"

static int bad(oai_error_t *err, const char *param, const char *msg) {
    return oai_error_set(err, 400, "BadRequestError", param, "%s", msg);
}

/* ---- messages ---------------------------------------------------------------------- */

static bool is_text_part(const char *type) {
    return !strcmp(type, "text") || !strcmp(type, "input_text") || !strcmp(type, "output_text");
}

/* Joined text of a content value (string, null or list of parts) into sb. */
static int join_content(const cJSON *content, int mi, oai_sb_t *sb, oai_error_t *err) {
    char name[48];
    snprintf(name, sizeof name, "messages[%d].content", mi);
    if (!content || cJSON_IsNull(content)) return 0;
    if (cJSON_IsString(content)) {
        sb_puts(sb, content->valuestring);
        return 0;
    }
    if (!cJSON_IsArray(content)) return oai_bad_field(err, name, "expected a string or a list of content parts");
    bool first = true;
    int pi = 0;
    for (const cJSON *part = content->child; part; part = part->next, pi++) {
        const char *text = NULL;
        if (cJSON_IsString(part)) {
            text = part->valuestring;
        } else {
            const cJSON *type = cJSON_IsObject(part) ? cJSON_GetObjectItemCaseSensitive(part, "type") : NULL;
            if (!cJSON_IsString(type))
                return oai_bad_field(err, name, "part %d: expected an object with a string \"type\"", pi);
            const char *key = is_text_part(type->valuestring) ? "text"
                            : !strcmp(type->valuestring, "refusal") ? "refusal"
                            : !strcmp(type->valuestring, "thinking") ? "thinking" : NULL;
            if (!key)
                return oai_error_set(err, 400, "BadRequestError", name,
                                     "Content parts of type '%.64s' are not supported: this model takes text only.",
                                     type->valuestring);
            const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, key);
            if (!t || cJSON_IsNull(t)) continue; /* vLLM skips a part without content */
            if (!cJSON_IsString(t)) return oai_bad_field(err, name, "part %d: \"%s\" must be a string", pi, key);
            text = t->valuestring;
        }
        if (!first) sb_put(sb, "\n", 1);
        sb_puts(sb, text);
        first = false;
    }
    return 0;
}

/* True when [s, end) holds only JSON whitespace. */
static bool only_space(const char *s, const char *end) {
    for (; s < end; s++)
        if (*s != ' ' && *s != '\t' && *s != '\n' && *s != '\r') return false;
    return true;
}

/* Tool-call arguments arrive as JSON text; templates expect objects (vLLM parses them
 * with json.loads, which also refuses bytes after the value). */
static int parse_tool_arguments(cJSON *tool_calls, int mi, oai_error_t *err) {
    char name[48];
    snprintf(name, sizeof name, "messages[%d].tool_calls", mi);
    for (cJSON *tc = tool_calls->child; tc; tc = tc->next) {
        cJSON *fn = cJSON_IsObject(tc) ? cJSON_GetObjectItemCaseSensitive(tc, "function") : NULL;
        cJSON *args = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "arguments") : NULL;
        if (!cJSON_IsString(args)) continue;
        /* JSON text inside a string: the body's rules apply to it (parse_body, openai_request.c) */
        size_t n = strlen(args->valuestring), at = 0;
        oai_json_scan_t scan = oai_json_scan(args->valuestring, n, OAI_MAX_JSON_DEPTH, &at);
        if (scan == OAI_JSON_NUL_ESCAPE)
            return oai_bad_field(err, name, "function.arguments contains a NUL character (\\u0000), which is not "
                                            "supported.");
        const char *end = NULL;
        cJSON *parsed = scan == OAI_JSON_OK ? cJSON_ParseWithLengthOpts(args->valuestring, n, &end, false) : NULL;
        if (parsed && !only_space(end, args->valuestring + n)) {
            cJSON_Delete(parsed);
            parsed = NULL;
        }
        if (!parsed) return oai_bad_field(err, name, "function.arguments is not valid JSON");
        cJSON_ReplaceItemViaPointer(fn, args, parsed);
    }
    return 0;
}

static cJSON *normalize_messages(const cJSON *messages, char **last_content, oai_error_t *err) {
    if (!messages || cJSON_IsNull(messages)) {
        oai_bad_field(err, "messages", "field required");
        return NULL;
    }
    if (!cJSON_IsArray(messages)) {
        oai_bad_field(err, "messages", "expected a list of messages");
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    int mi = 0;
    for (const cJSON *m = messages->child; m; m = m->next, mi++) {
        char name[48];
        snprintf(name, sizeof name, "messages[%d]", mi);
        if (!cJSON_IsObject(m)) goto fail_type;
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsString(role)) {
            snprintf(name, sizeof name, "messages[%d].role", mi);
            oai_bad_field(err, name, role && !cJSON_IsNull(role) ? "expected a string" : "field required");
            goto fail;
        }
        oai_sb_t sb = {0};
        if (join_content(cJSON_GetObjectItemCaseSensitive(m, "content"), mi, &sb, err)) {
            free(sb.buf);
            goto fail;
        }
        size_t len = 0;
        char *text = sb_take(&sb, &len);
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(out, o);
        cJSON_AddStringToObject(o, "role", role->valuestring);
        cJSON_AddStringToObject(o, "content", text);
        free(*last_content);
        *last_content = text;
        const cJSON *tc = cJSON_GetObjectItemCaseSensitive(m, "tool_calls");
        if (!strcmp(role->valuestring, "assistant") && tc && !cJSON_IsNull(tc)) {
            if (!cJSON_IsArray(tc)) {
                snprintf(name, sizeof name, "messages[%d].tool_calls", mi);
                oai_bad_field(err, name, "expected a list");
                goto fail;
            }
            cJSON *copy = cJSON_Duplicate(tc, true);
            cJSON_AddItemToObject(o, "tool_calls", copy);
            if (parse_tool_arguments(copy, mi, err)) goto fail;
        }
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(m, "tool_call_id");
        if (!strcmp(role->valuestring, "tool") && id && !cJSON_IsNull(id))
            cJSON_AddItemToObject(o, "tool_call_id", cJSON_Duplicate(id, true));
        const cJSON *nm = cJSON_GetObjectItemCaseSensitive(m, "name");
        if (cJSON_IsString(nm)) cJSON_AddStringToObject(o, "name", nm->valuestring);
    }
    return out;
fail_type:
    oai_bad_field(err, "messages", "message %d: expected an object", mi);
fail:
    cJSON_Delete(out);
    return NULL;
}

/* ---- tools ------------------------------------------------------------------------------ */

static cJSON *normalize_tools(const cJSON *tools, oai_error_t *err) {
    if (!cJSON_IsArray(tools)) {
        oai_bad_field(err, "tools", "expected a list of tools");
        return NULL;
    }
    cJSON *out = cJSON_CreateArray();
    int i = 0;
    for (const cJSON *t = tools->child; t; t = t->next, i++) {
        const cJSON *type = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "type") : NULL;
        const cJSON *fn = cJSON_IsObject(t) ? cJSON_GetObjectItemCaseSensitive(t, "function") : NULL;
        const cJSON *name = cJSON_IsObject(fn) ? cJSON_GetObjectItemCaseSensitive(fn, "name") : NULL;
        if ((type && !cJSON_IsNull(type) && !(cJSON_IsString(type) && !strcmp(type->valuestring, "function"))) ||
            !cJSON_IsString(name)) {
            oai_bad_field(err, "tools", "tool %d: expected {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
            cJSON_Delete(out);
            return NULL;
        }
        const cJSON *desc = cJSON_GetObjectItemCaseSensitive(fn, "description");
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        cJSON *o = cJSON_CreateObject(), *f = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "type", "function");
        cJSON_AddItemToObject(o, "function", f);
        cJSON_AddStringToObject(f, "name", name->valuestring);
        cJSON_AddItemToObject(f, "description", cJSON_IsString(desc) ? cJSON_Duplicate(desc, true) : cJSON_CreateNull());
        cJSON_AddItemToObject(f, "parameters", cJSON_IsObject(params) ? cJSON_Duplicate(params, true) : cJSON_CreateNull());
        cJSON_AddItemToArray(out, o);
    }
    return out;
}

/* vLLM's tool_choice validation; this server has no tool parser and no structured
 * output, so only "none" (and no tools at all) can be served. */
static int check_tool_choice(const cJSON *body, oai_error_t *err) {
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(body, "tools");
    bool has_tools = tools && !cJSON_IsNull(tools);
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(body, "tool_choice");
    const char *choice = tc ? (cJSON_IsString(tc) ? tc->valuestring : cJSON_IsNull(tc) ? NULL : "") : has_tools && tools->child ? "auto" : NULL;
    if (tc && !cJSON_IsNull(tc) && !cJSON_IsString(tc) && !cJSON_IsObject(tc))
        return oai_bad_field(err, "tool_choice", "expected a string or an object");
    if (!choice || !strcmp(choice, "none")) return 0;
    if (!has_tools) return bad(err, NULL, "When using `tool_choice`, `tools` must be set.");
    if (cJSON_IsString(tc) && strcmp(choice, "auto") && strcmp(choice, "required"))
        return oai_error_set(err, 400, "BadRequestError", NULL,
                             "Invalid value for `tool_choice`: %.64s! Only named tools, \"none\", \"auto\" or "
                             "\"required\" are supported.", choice);
    if (!strcmp(choice, "auto"))
        return bad(err, NULL, "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
    if (!strcmp(choice, "required") && cJSON_IsArray(tools) && !tools->child) return 0; /* acts as "none" */
    return bad(err, "tool_choice", "Named and \"required\" tool_choice need structured output, which this server "
                                   "does not support.");
}

/* ---- rendering ---------------------------------------------------------------------------- */

static bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

/* transformers' continue_final_message: cut the render right after the final
 * message's text, so generation continues it. */
static int cut_at_final_message(char *text, size_t *len, const char *final, oai_error_t *err) {
    size_t fl = strlen(final), a = 0, b = fl;
    while (a < fl && is_space(final[a])) a++;
    while (b > a && is_space(final[b - 1])) b--;
    size_t sl = b - a, loc = 0;
    bool found = false;
    for (size_t i = *len - (sl <= *len ? sl : *len) + 1; i-- > 0;) /* rindex(final.strip()) */
        if (i + sl <= *len && !memcmp(text + i, final + a, sl)) {
            loc = i;
            found = true;
            break;
        }
    if (!found)
        return bad(err, NULL, "continue_final_message is set but the final message does not appear in the chat "
                              "after applying the chat template! This can happen if the chat template deletes "
                              "portions of the final message. Please verify the chat template and final message "
                              "in your chat to ensure they are compatible.");
    /* rendered[loc : loc + len(final.lstrip())] == final: the template kept the
     * message's trailing spaces, so keep them too; else stop after the stripped text. */
    bool kept = a == 0 && loc + fl <= *len && !memcmp(text + loc, final, fl);
    size_t end = kept ? loc + fl : loc + sl;
    text[end] = '\0';
    *len = end;
    return 0;
}

int oai_chat_render(const oai_ctx_t *ctx, const cJSON *body, bool chat_completion, char **text_out,
                    size_t *len_out, oai_error_t *err) {
    *text_out = NULL;
    *len_out = 0;
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(body, "chat_template");
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) return oai_bad_field(err, "chat_template", "expected a string");
        return bad(err, NULL, "Chat template is passed with request, but --trust-request-chat-template is not set. "
                              "Refused request with untrusted chat template.");
    }
    bool add_gen = true, cont = false;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(body, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw) && !cJSON_IsObject(kw))
        return oai_bad_field(err, "chat_template_kwargs", "expected an object");
    if (kw && cJSON_IsNull(kw)) kw = NULL;
    const char *bools[2] = {"add_generation_prompt", "continue_final_message"};
    bool *dst[2] = {&add_gen, &cont};
    for (int i = 0; i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(body, bools[i]);
        if (v && !cJSON_IsNull(v) && !cJSON_IsBool(v)) return oai_bad_field(err, bools[i], "expected true or false");
        if (cJSON_IsBool(v)) *dst[i] = cJSON_IsTrue(v);
    }
    if (add_gen && cont)
        return bad(err, NULL, "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    /* chat_template_kwargs are applied last and may override both (vLLM merges them so). */
    for (int i = 0; kw && i < 2; i++) {
        v = cJSON_GetObjectItemCaseSensitive(kw, bools[i]);
        if (cJSON_IsBool(v)) *dst[i] = cJSON_IsTrue(v);
    }
    const cJSON *docs = cJSON_GetObjectItemCaseSensitive(body, "documents");
    if (docs && !cJSON_IsNull(docs) && !cJSON_IsArray(docs)) return oai_bad_field(err, "documents", "expected a list");
    const cJSON *tools_in = cJSON_GetObjectItemCaseSensitive(body, "tools");
    if (chat_completion && check_tool_choice(body, err)) return -1;
    if (!ctx->chat_template) return bad(err, NULL, CHAT_NO_TEMPLATE_MSG);

    char *last = NULL;
    cJSON *messages = normalize_messages(cJSON_GetObjectItemCaseSensitive(body, "messages"), &last, err);
    if (!messages) {
        free(last);
        return -1;
    }
    cJSON *tools = NULL, *extra = NULL;
    int rc = -1;
    if (tools_in && !cJSON_IsNull(tools_in) && !(tools = normalize_tools(tools_in, err))) goto out;
    if (kw) { /* the variables the template gets on top; ours are set explicitly */
        extra = cJSON_Duplicate(kw, true);
        static const char *const reserved[] = {"messages", "tools", "documents", "add_generation_prompt",
                                               "continue_final_message", "chat_template", "tokenize", NULL};
        for (int i = 0; reserved[i]; i++) cJSON_DeleteItemFromObjectCaseSensitive(extra, reserved[i]);
    }
    chat_render_args_t args = {
        .messages = messages,
        .add_generation_prompt = add_gen,
        .tools = tools,
        .documents = docs && !cJSON_IsNull(docs) ? docs : NULL,
        .special_tokens = ctx->special_tokens,
        .extra = extra,
        .limits = NULL,
    };
    sl_err_t e = {{0}};
    char *text = NULL;
    size_t len = 0;
    if (chat_template_render(ctx->chat_template, &args, &text, &len, &e) != CHAT_OK) {
        bad(err, NULL, e.msg);
        goto out;
    }
    if (cont && messages->child && cut_at_final_message(text, &len, last ? last : "", err)) {
        free(text);
        goto out;
    }
    *text_out = text;
    *len_out = len;
    rc = 0;
out:
    free(last);
    cJSON_Delete(messages);
    cJSON_Delete(tools);
    cJSON_Delete(extra);
    return rc;
}

/* ---- small helpers ---------------------------------------------------------------------- */

/* The fields of vLLM's request models (beyond the sampling ones of sampling_json.c). */
static const char *const GEN_KEYS[] = {
    "model", "stream", "stream_options", "user", "best_of", "use_beam_search", "length_penalty",
    "spaces_between_special_tokens", "truncate_prompt_tokens", "prompt_logprobs", "allowed_token_ids",
    "bad_words", "echo", "add_special_tokens", "response_format", "guided_json", "guided_regex",
    "guided_choice", "guided_grammar", "structural_tag", "guided_decoding_backend",
    "guided_whitespace_pattern", "structured_outputs", "priority", "request_id", "logits_processors",
    "return_tokens_as_token_ids", "return_token_ids", "cache_salt", "kv_transfer_params", "vllm_xargs",
    NULL};
static const char *const CHAT_KEYS[] = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "reasoning_effort", "include_reasoning", "add_generation_prompt", "continue_final_message",
    "documents", "chat_template", "chat_template_kwargs", "mm_processor_kwargs", NULL};
static const char *const COMPLETION_KEYS[] = {"prompt", "suffix", "prompt_embeds", NULL};
static const char *const TOKENIZE_PROMPT_KEYS[] = {"model", "prompt", "add_special_tokens",
                                                   "return_token_strs", NULL};
static const char *const TOKENIZE_CHAT_KEYS[] = {
    "model", "messages", "add_generation_prompt", "return_token_strs", "continue_final_message",
    "add_special_tokens", "chat_template", "chat_template_kwargs", "mm_processor_kwargs", "tools", NULL};
static const char *const DETOKENIZE_KEYS[] = {"model", "tokens", NULL};

static bool in_list(const char *const *list, const char *key) {
    for (; *list; list++)
        if (!strcmp(*list, key)) return true;
    return false;
}

static bool is_known(oai_kind_t kind, bool tokenize_chat, const char *key) {
    switch (kind) {
    case OAI_CHAT:
        return sampling_json_is_known_key(key) || in_list(GEN_KEYS, key) || in_list(CHAT_KEYS, key);
    case OAI_COMPLETION:
        return sampling_json_is_known_key(key) || in_list(GEN_KEYS, key) || in_list(COMPLETION_KEYS, key);
    case OAI_TOKENIZE:
        return in_list(tokenize_chat ? TOKENIZE_CHAT_KEYS : TOKENIZE_PROMPT_KEYS, key);
    case OAI_DETOKENIZE:
        return in_list(DETOKENIZE_KEYS, key);
    }
    return false;
}

void oai_collect_ignored(oai_kind_t kind, bool tokenize_chat, const cJSON *root, oai_request_t *r) {
    for (const cJSON *c = root->child; c; c = c->next) {
        if (is_known(kind, tokenize_chat, c->string)) continue;
        r->ignored = sl_realloc(r->ignored, (size_t)(r->n_ignored + 1) * sizeof *r->ignored);
        r->ignored[r->n_ignored++] = sl_strdup(c->string);
    }
}

/* Python's repr() of a str, close enough for log lines: quote choice, backslash
 * escapes, \xNN for control characters and the invisible Latin-1 ones. */
static void py_repr(oai_sb_t *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    sb_put(b, &q, 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\\' || c == (unsigned char)q) {
            sb_put(b, "\\", 1);
            sb_put(b, (const char *)&c, 1);
        } else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f) sb_printf(b, "\\x%02x", c);
        else if (c == 0xC2 && i + 1 < n && ((unsigned char)s[i + 1] <= 0xA0 || (unsigned char)s[i + 1] == 0xAD)) {
            sb_printf(b, "\\x%02x", (unsigned char)s[i + 1]); /* U+0080..U+00A0, U+00AD */
            i++;
        } else sb_put(b, (const char *)&c, 1);
    }
    sb_put(b, &q, 1);
}

char *oai_ignored_fields_message(const oai_request_t *r) {
    if (r->n_ignored == 0) return NULL;
    oai_sb_t b = {0};
    sb_puts(&b, "The following fields were present in the request but ignored: {");
    for (int32_t i = 0; i < r->n_ignored; i++) {
        if (b.len > 8192) { /* ours: a log line stays a line */
            sb_puts(&b, ", ...");
            break;
        }
        if (i) sb_puts(&b, ", ");
        size_t n = strlen(r->ignored[i]);
        py_repr(&b, r->ignored[i], n < 256 ? n : 256);
    }
    sb_puts(&b, "}");
    return sb_take(&b, NULL);
}

char *oai_response_id(const char *prefix, const char *x_request_id, const char *body_request_id,
                      uint64_t rand_hi, uint64_t rand_lo) {
    oai_sb_t b = {0};
    sb_puts(&b, prefix);
    sb_puts(&b, "-");
    if (x_request_id && x_request_id[0]) {
        sb_puts(&b, x_request_id);
    } else if (body_request_id && body_request_id[0]) {
        sb_puts(&b, body_request_id);
    } else {
        /* uuid4().hex, as vLLM's random_uuid(): version 4, RFC 4122 variant. */
        rand_hi = (rand_hi & ~0xF000ull) | 0x4000ull;
        rand_lo = (rand_lo & ~(0xC000ull << 48)) | (0x8000ull << 48);
        sb_printf(&b, "%016llx%016llx", (unsigned long long)rand_hi, (unsigned long long)rand_lo);
    }
    return sb_take(&b, NULL);
}

int oai_gen_defaults_load(const char *model_dir, oai_gen_defaults_t *out, sl_err_t *err) {
    memset(out, 0, sizeof *out);
    char path[4096];
    if (sl_path_join(path, sizeof path, model_dir, "generation_config.json"))
        return sl_fail(err, "%s: path too long", model_dir);
    if (!sl_file_exists(path)) return 0;
    size_t len = 0;
    char *text = sl_read_file(path, 1 << 20, &len, err);
    if (!text) return -1;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return sl_fail(err, "%s: not a JSON object", path);
    }
    struct {
        const char *key;
        bool *has;
        double *val;
    } floats[] = {{"temperature", &out->has_temperature, &out->temperature},
                  {"top_p", &out->has_top_p, &out->top_p},
                  {"min_p", &out->has_min_p, &out->min_p},
                  {"repetition_penalty", &out->has_repetition_penalty, &out->repetition_penalty}};
    int rc = 0;
    for (size_t i = 0; i < sizeof floats / sizeof floats[0] && !rc; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, floats[i].key);
        if (!v || cJSON_IsNull(v)) continue;
        if (!cJSON_IsNumber(v)) rc = sl_fail(err, "%s: %s is not a number", path, floats[i].key);
        *floats[i].has = true;
        *floats[i].val = v->valuedouble;
    }
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, "top_k");
    if (!rc && v && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v)) rc = sl_fail(err, "%s: top_k is not a number", path);
        out->has_top_k = true;
        out->top_k = (int32_t)v->valuedouble;
    }
    v = cJSON_GetObjectItemCaseSensitive(root, "max_new_tokens");
    if (!rc && v && !cJSON_IsNull(v)) {
        if (!cJSON_IsNumber(v) || v->valuedouble < 1) rc = sl_fail(err, "%s: max_new_tokens is not a positive integer", path);
        else out->max_new_tokens = v->valuedouble > INT32_MAX ? INT32_MAX : (int32_t)v->valuedouble;
    }
    cJSON_Delete(root);
    if (rc) memset(out, 0, sizeof *out);
    return rc;
}
