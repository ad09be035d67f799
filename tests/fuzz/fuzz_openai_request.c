/* fuzz_openai_request.c - libFuzzer target for request body -> engine request.
 *
 * The first input byte picks the route (low 2 bits: chat, completions, tokenize,
 * detokenize), whether a chat template is configured (bit 2) and max_model_len
 * (bits 3-7); the rest is the body. The tokenizer is a stub (one id per byte), so
 * the whole oai_request_parse path runs without sentencepiece, the chat template
 * being the real one of models/tiny. Invariants: never crash or leak; a success
 * is a request the engine would accept (ids in vocabulary, prompt + max_tokens
 * within max_model_len, sampling params valid) from a body without a raw control
 * byte that JSON forbids everywhere (anything below 0x20 but \t, \n, \r; a NUL
 * above all); a failure is a 400/404 with a UTF-8 message. Seeds:
 * corpus/openai_request/ (ctrl_* hold raw control bytes and NULs).
 */
#include <stdlib.h>
#include <string.h>

#include "servelab/openai.h"
#include "stub_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *TINY_TEMPLATE =
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set system_message = "
    "messages[0]['content'] %}{% else %}{% set loop_messages = messages %}{% set system_message = false %}{% endif "
    "%}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ "
    "raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{% if "
    "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + system_message + "
    "'\\n<</SYS>>\\n\\n' + message['content'] %}{% else %}{% set content = message['content'] %}{% endif %}{% if "
    "message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% elif "
    "message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}";

/* True when the body holds a byte below 0x20 that JSON allows nowhere, in or
 * out of strings (the raw-body scan must have refused it). */
static bool has_forbidden_control(const uint8_t *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (b[i] < 0x20 && b[i] != '\t' && b[i] != '\n' && b[i] != '\r') return true;
    return false;
}

static chat_template_t *tmpl;
static cJSON *special;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (!tmpl) {
        sl_err_t e;
        tmpl = chat_template_compile(TINY_TEMPLATE, strlen(TINY_TEMPLATE), &e);
        special = cJSON_Parse("{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\",\"unk_token\":\"<unk>\"}");
        if (!tmpl || !special) abort();
    }
    static const char *names[] = {"tiny", "alias"};
    oai_ctx_t ctx = {0};
    ctx.tok = (oai_tok_t){NULL, stub_encode, stub_decode, NULL};
    ctx.chat_template = (data[0] & 4) ? NULL : tmpl;
    ctx.special_tokens = special;
    ctx.served_model_names = names;
    ctx.n_served_model_names = 2;
    ctx.max_model_len = 8 + 16 * (data[0] >> 3);
    ctx.max_logprobs = 20;
    ctx.vocab_size = STUB_VOCAB;
    ctx.gen.max_new_tokens = (data[0] & 8) ? 5 : 0;
    oai_kind_t kind = (oai_kind_t)(data[0] & 3);

    oai_request_t r;
    oai_error_t err;
    memset(&err, 0, sizeof err);
    int rc = oai_request_parse(&ctx, kind, (const char *)data + 1, size - 1, &r, &err);
    if (rc != 0) {
        if (rc != -1 || (err.status != 400 && err.status != 404) || !err.type || !err.message[0] ||
            !stub_utf8_valid(err.message) || !stub_utf8_valid(err.param) || r.n_prompts != 0)
            abort();
        oai_request_free(&r);
        return 0;
    }
    if (r.n_prompts < 1 || r.kind != kind || has_forbidden_control(data + 1, size - 1)) abort();
    for (int32_t i = 0; i < r.n_prompts; i++) {
        const oai_prompt_t *p = &r.prompts[i];
        for (int32_t k = 0; k < p->n_ids; k++)
            if (p->ids[k] < 0 || p->ids[k] >= STUB_VOCAB) abort();
        if (!p->text || strlen(p->text) > p->text_len) abort();
        if (kind == OAI_CHAT || kind == OAI_COMPLETION) {
            if (p->n_ids < 1 || p->max_tokens < 1 || p->n_ids + p->max_tokens > ctx.max_model_len) abort();
            sampling_params_t sp = oai_request_params(&r, i);
            sl_err_t e;
            if (sampling_params_validate(&sp, STUB_VOCAB, &e) != 0) abort();
            if (sp.n < 1 || sp.n > OAI_DEFAULT_MAX_N || sp.logprobs > 20) abort();
        }
    }
    if (r.continuous_usage_stats && !r.include_usage) abort();
    if ((r.include_usage || r.continuous_usage_stats) && !r.stream) abort();
    char *msg = oai_ignored_fields_message(&r);
    if ((msg == NULL) != (r.n_ignored == 0)) abort();
    free(msg);
    oai_request_free(&r);
    return 0;
}
