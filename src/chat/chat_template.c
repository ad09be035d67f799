/* chat_template.c - chat templates as vLLM + transformers use them: which template a
 * checkpoint has, the special-token variables, and rendering a conversation.
 *
 * The variables are those of transformers' apply_chat_template: messages (keys whose
 * value is null dropped; reasoning fields aliased as transformers 5 does), tools and
 * documents (none unless given), add_generation_prompt, the special tokens
 * (bos_token, eos_token, ...) and any extra kwargs. JSON numbers become ints when
 * they are integral (cJSON keeps no spelling, so 1.0 is the int 1 here) and floats
 * otherwise. The render itself runs in a context of its own whose objects are all
 * freed at the end, on success and on every error path (see jinja.h).
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"
#include "servelab/chat_template.h"

chat_limits_t chat_limits_default(void) {
    chat_limits_t l = {.max_output_bytes = 16u << 20,
                       .max_memory_bytes = 256u << 20,
                       .max_steps = 50000000,
                       .max_loop_iterations = 1000000,
                       .max_depth = 200};
    return l;
}

chat_template_t *chat_template_compile(const char *src, size_t len, sl_err_t *err) {
    if (!ju_valid(src, len)) {
        sl_fail(err, "chat template is not valid UTF-8");
        return NULL;
    }
    jarena_t *a = jarena_new();
    int n = 0;
    jtok_t *toks = jlex(a, src, len, &n, err);
    jnode_t *root = toks ? jparse(a, toks, n, err) : NULL;
    if (!root) {
        jarena_free(a);
        return NULL;
    }
    chat_template_t *t = sl_calloc(1, sizeof *t);
    t->root = root;
    t->arena = a;
    return t;
}

void chat_template_free(chat_template_t *t) {
    if (!t) return;
    jarena_free(t->arena);
    free(t);
}

/* ---- JSON -> values ------------------------------------------------------------ */

static jv_t from_json(jctx_t *c, const cJSON *j, int depth) {
    if (depth > 512) jx_fail(c, CHAT_ERR_INPUT, "JSON nested too deeply");
    if (cJSON_IsNull(j)) return jv_none();
    if (cJSON_IsBool(j)) return jv_bool(cJSON_IsTrue(j));
    if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        if (d == floor(d) && fabs(d) < 9.2e18) return jv_int((int64_t)d);
        return jv_float(d);
    }
    if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        if (!ju_valid(j->valuestring, n)) jx_fail(c, CHAT_ERR_INPUT, "a string in the request is not valid UTF-8");
        return jx_str_new(c, j->valuestring, n);
    }
    if (cJSON_IsArray(j)) {
        jv_t l = jx_list_new(c, JL_LIST, 0);
        for (const cJSON *e = j->child; e; e = e->next) jx_list_push(c, l, from_json(c, e, depth + 1));
        return l;
    }
    if (cJSON_IsObject(j)) {
        jv_t d = jx_dict_new(c, false);
        for (const cJSON *e = j->child; e; e = e->next) {
            const char *k = e->string ? e->string : "";
            if (!ju_valid(k, strlen(k))) jx_fail(c, CHAT_ERR_INPUT, "a key in the request is not valid UTF-8");
            jx_dict_set(c, d, jx_str_new(c, k, strlen(k)), from_json(c, e, depth + 1));
        }
        return d;
    }
    jx_fail(c, CHAT_ERR_INPUT, "unsupported JSON value");
}

/* One message as transformers hands it to the template. */
static jv_t message_value(jctx_t *c, const cJSON *m) {
    if (!cJSON_IsObject(m))
        jx_fail(c, CHAT_ERR_INPUT, "Chat messages should be dicts, but got a JSON %s.",
                cJSON_IsArray(m) ? "array" : cJSON_IsString(m) ? "string" : "scalar");
    static const char *const REASONING[] = {"reasoning_content", "thinking", "reasoning"};
    const cJSON *reasoning = NULL;
    for (int i = 0; i < 3 && !reasoning; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(m, REASONING[i]);
        if (r && !cJSON_IsNull(r)) reasoning = r;
    }
    jv_t d = jx_dict_new(c, false);
    if (reasoning) jx_dict_set(c, d, jx_str_new(c, "thinking", 8), from_json(c, reasoning, 1));
    for (const cJSON *e = m->child; e; e = e->next) {
        if (cJSON_IsNull(e)) continue; /* transformers drops keys whose value is None */
        const char *k = e->string ? e->string : "";
        if (!ju_valid(k, strlen(k))) jx_fail(c, CHAT_ERR_INPUT, "a key in the request is not valid UTF-8");
        jx_dict_set(c, d, jx_str_new(c, k, strlen(k)), from_json(c, e, 1));
    }
    if (reasoning) jx_dict_set(c, d, jx_str_new(c, "reasoning_content", 17), from_json(c, reasoning, 1));
    return d;
}

static void set_var(jctx_t *c, const char *name, jv_t v) { jx_scope_set(c, c->root, name, v); }

chat_err_kind_t chat_template_render(const chat_template_t *t, const chat_render_args_t *args,
                                     char **out, size_t *out_len, sl_err_t *err) {
    *out = NULL;
    if (out_len) *out_len = 0;
    if (!cJSON_IsArray(args->messages)) {
        sl_fail(err, "messages must be a JSON array");
        return CHAT_ERR_INPUT;
    }
    if (!args->messages->child) {
        sl_fail(err, "Cannot apply chat template to an empty conversation. Provide at least one message.");
        return CHAT_ERR_INPUT;
    }
    jctx_t *c = sl_calloc(1, sizeof *c);
    c->lim = args->limits ? *args->limits : chat_limits_default();
    if (setjmp(c->jb)) {
        chat_err_kind_t kind = c->err_kind;
        sl_fail(err, "%s", c->err);
        jx_sweep(c);
        free(c);
        return kind;
    }
    jx_root_scope(c);
    /* kwargs = {**special_tokens_map, **extra}, then the named arguments of render() */
    for (int pass = 0; pass < 2; pass++) {
        const cJSON *obj = pass ? args->extra : args->special_tokens;
        if (!obj) continue;
        if (!cJSON_IsObject(obj)) jx_fail(c, CHAT_ERR_INPUT, "template variables must be a JSON object");
        for (const cJSON *e = obj->child; e; e = e->next) {
            static const char *const RESERVED[] = {"messages", "tools", "documents", "add_generation_prompt"};
            for (int k = 0; k < 4; k++)
                if (e->string && !strcmp(e->string, RESERVED[k]))
                    jx_fail(c, CHAT_ERR_INPUT, "render() got multiple values for keyword argument '%s'", e->string);
            if (!e->string) continue;
            /* The scope keeps a pointer to the name: copy it into a string that is never
             * released before the render ends (the sweep frees it). */
            jv_t name = jx_str_new(c, e->string, strlen(e->string));
            set_var(c, jv_str(name)->s, from_json(c, e, 0));
        }
    }
    jv_t msgs = jx_list_new(c, JL_LIST, 0);
    for (const cJSON *m = args->messages->child; m; m = m->next) jx_list_push(c, msgs, message_value(c, m));
    set_var(c, "messages", msgs);
    set_var(c, "tools", args->tools && !cJSON_IsNull(args->tools) ? from_json(c, args->tools, 0) : jv_none());
    set_var(c, "documents", args->documents && !cJSON_IsNull(args->documents) ? from_json(c, args->documents, 0) : jv_none());
    set_var(c, "add_generation_prompt", jv_bool(args->add_generation_prompt));

    c->out = jx_buf_new(c);
    jx_exec_body(c, t->root);
    size_t n = c->out->len;
    char *s = sl_malloc(n + 1);
    if (n) memcpy(s, c->out->p, n);
    s[n] = '\0';
    jx_sweep(c);
    free(c);
    *out = s;
    if (out_len) *out_len = n;
    return CHAT_OK;
}

/* ---- template choice and special tokens ------------------------------------------ */

#define MAX_CONFIG_BYTES (64u << 20)

static cJSON *read_json(const char *path, sl_err_t *err) {
    size_t n;
    char *text = sl_read_file(path, MAX_CONFIG_BYTES, &n, err);
    if (!text) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, n);
    free(text);
    if (!j) sl_fail(err, "%s: not valid JSON", path);
    return j;
}

int chat_template_source(const char *model_dir, const char *override, char **text_out, sl_err_t *err) {
    *text_out = NULL;
    char path[4096];
    if (override) {
        size_t n;
        sl_err_t ferr;
        FILE *f = fopen(override, "rb");
        int open_errno = errno;
        if (f) {
            fclose(f);
            char *text = sl_read_file(override, MAX_CONFIG_BYTES, &n, &ferr);
            if (!text) return sl_fail(err, "%s", ferr.msg);
            *text_out = text;
            return 0;
        }
        if (!strpbrk(override, "{}\n"))
            return sl_fail(err,
                           "The supplied chat template (%s) looks like a file path, but it failed to "
                           "be opened. Reason: [Errno %d] %s: '%s'",
                           override, open_errno, strerror(open_errno), override);
        *text_out = sl_strdup(override);
        return 0;
    }
    if (sl_path_join(path, sizeof path, model_dir, "chat_template.jinja") == 0 && sl_file_exists(path)) {
        size_t n;
        char *text = sl_read_file(path, MAX_CONFIG_BYTES, &n, err);
        if (!text) return -1;
        *text_out = text;
        return 0;
    }
    if (sl_path_join(path, sizeof path, model_dir, "tokenizer_config.json"))
        return sl_fail(err, "%s: path too long", model_dir);
    if (!sl_file_exists(path)) {
        sl_fail(err, CHAT_NO_TEMPLATE_MSG);
        return 1;
    }
    cJSON *cfg = read_json(path, err);
    if (!cfg) return -1;
    const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    int rc = 0;
    if (cJSON_IsString(ct)) {
        *text_out = sl_strdup(ct->valuestring);
    } else if (cJSON_IsArray(ct)) {
        const cJSON *e;
        char names[512] = "";
        cJSON_ArrayForEach(e, ct) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(e, "name");
            const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(e, "template");
            if (!cJSON_IsString(name) || !cJSON_IsString(tmpl)) continue;
            size_t m = strlen(names);
            snprintf(names + m, sizeof names - m, "%s'%s'", m ? ", " : "", name->valuestring);
            if (!strcmp(name->valuestring, "default")) *text_out = sl_strdup(tmpl->valuestring);
        }
        if (!*text_out)
            rc = sl_fail(err,
                         "This model has multiple chat templates with no default specified! Please "
                         "either pass a chat template or the name of the template you wish to use to "
                         "the `chat_template` argument. Available template names are [%s].", names);
    } else if (ct && !cJSON_IsNull(ct)) {
        rc = sl_fail(err, "%s: chat_template must be a string or a list of {name, template}", path);
    } else {
        sl_fail(err, CHAT_NO_TEMPLATE_MSG);
        rc = 1;
    }
    cJSON_Delete(cfg);
    return rc;
}

static const char *const SPECIAL_TOKENS[] = {"bos_token", "eos_token", "unk_token", "sep_token",
                                             "pad_token", "cls_token", "mask_token"};

static void take_tokens(cJSON *out, const cJSON *src) {
    for (size_t i = 0; i < sizeof SPECIAL_TOKENS / sizeof *SPECIAL_TOKENS; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(src, SPECIAL_TOKENS[i]);
        if (cJSON_IsObject(v)) v = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (!v) continue;
        cJSON_DeleteItemFromObjectCaseSensitive(out, SPECIAL_TOKENS[i]);
        if (cJSON_IsString(v)) cJSON_AddStringToObject(out, SPECIAL_TOKENS[i], v->valuestring);
    }
}

cJSON *chat_special_tokens_load(const char *model_dir, sl_err_t *err) {
    char path[4096];
    cJSON *out = cJSON_CreateObject();
    if (sl_path_join(path, sizeof path, model_dir, "tokenizer_config.json")) {
        cJSON_Delete(out);
        sl_fail(err, "%s: path too long", model_dir);
        return NULL;
    }
    bool has_decoder = false;
    if (sl_file_exists(path)) {
        cJSON *cfg = read_json(path, err);
        if (!cfg) {
            cJSON_Delete(out);
            return NULL;
        }
        take_tokens(out, cfg);
        has_decoder = cJSON_GetObjectItemCaseSensitive(cfg, "added_tokens_decoder") != NULL;
        cJSON_Delete(cfg);
    }
    if (!has_decoder && !sl_path_join(path, sizeof path, model_dir, "special_tokens_map.json") &&
        sl_file_exists(path)) {
        cJSON *map = read_json(path, err);
        if (!map) {
            cJSON_Delete(out);
            return NULL;
        }
        take_tokens(out, map);
        cJSON_Delete(map);
    }
    return out;
}
