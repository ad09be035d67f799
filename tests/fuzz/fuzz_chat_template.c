/* fuzz_chat_template.c - libFuzzer target for the chat-template engine.
 *
 * The input is a template, optionally followed by a NUL byte and a messages JSON
 * array (otherwise a fixed three-message conversation with a tool call is used).
 * Compile + render under tight limits must never crash, leak or hang; a successful
 * render must be valid UTF-8 (the tokenizer downstream requires it), and a failed
 * compile must say where. Seeds: corpus/chat_template/ (the real templates of
 * tests/chat_templates and small feature templates).
 */
#include <stdlib.h>
#include <string.h>

#include "servelab/chat_template.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *DEFAULT_MESSAGES =
    "[{\"role\":\"system\",\"content\":\"Be brief.\"},"
    "{\"role\":\"user\",\"content\":\"Hi \\\"there\\\"\\n\\u00e9\"},"
    "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[{\"id\":\"abcdefghi\",\"type\":\"function\","
    "\"function\":{\"name\":\"f\",\"arguments\":{\"x\":1.5,\"y\":[true,null]}}}]}]";

static bool valid_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        if (c < 0x80) {
            i++;
            continue;
        }
        size_t k = (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : 0;
        if (k == 0 || k >= n - i) return false; /* bad lead byte, or truncated */
        for (size_t j = 1; j <= k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return false;
        i += k + 1;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t tlen = nul ? (size_t)(nul - data) : size;
    sl_err_t err;
    chat_template_t *t = chat_template_compile((const char *)data, tlen, &err);
    if (!t) {
        if (strncmp(err.msg, "line ", 5) != 0 && strcmp(err.msg, "chat template is not valid UTF-8") != 0)
            abort();
        return 0;
    }
    char *json = NULL;
    if (nul) {
        size_t jlen = size - tlen - 1;
        json = malloc(jlen + 1);
        if (!json) abort();
        memcpy(json, nul + 1, jlen);
        json[jlen] = '\0';
    }
    cJSON *msgs = cJSON_Parse(json ? json : DEFAULT_MESSAGES);
    free(json);
    if (!msgs) msgs = cJSON_Parse(DEFAULT_MESSAGES);
    cJSON *tokens = cJSON_Parse("{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}");
    chat_limits_t lim = {.max_output_bytes = 1u << 20,
                         .max_memory_bytes = 32u << 20,
                         .max_steps = 200000,
                         .max_loop_iterations = 20000,
                         .max_depth = 100};
    for (int agp = 0; agp < 2; agp++) {
        chat_render_args_t a = {.messages = msgs, .add_generation_prompt = agp, .special_tokens = tokens,
                                .tools = cJSON_GetArrayItem(msgs, 2), .limits = &lim};
        char *out = NULL;
        size_t n = 0;
        chat_err_kind_t k = chat_template_render(t, &a, &out, &n, &err);
        if (k == CHAT_OK) {
            if (!out || out[n] != '\0' || !valid_utf8((const unsigned char *)out, n)) abort();
        } else if (out) {
            abort();
        }
        free(out);
    }
    cJSON_Delete(tokens);
    cJSON_Delete(msgs);
    chat_template_free(t);
    return 0;
}
