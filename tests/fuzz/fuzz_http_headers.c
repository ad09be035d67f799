/* fuzz_http_headers.c - libFuzzer target for request-head values the server reads
 * (src/server/http_checks.c) and where they end up.
 *
 * The first byte picks the path (modulo 3), the rest is its text (a NUL ends
 * it, as libmicrohttpd ends a value there). 0, X-Request-Id: the value read as latin-1 becomes the response id,
 * which is written into a non-streaming body and an SSE chunk by the real
 * writers (a completions request parsed with a stub tokenizer); both must parse
 * as JSON (cJSON) and give the id back unchanged, the id must be valid UTF-8,
 * and its log form must be valid UTF-8 with no control character. 1, framing:
 * "name:value" lines through http_framing_error. 2, Authorization: accepted
 * exactly when vLLM would accept it. Invariants: never crash or leak. Seeds: corpus/http_headers/.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "servelab/http_checks.h"
#include "servelab/openai.h"
#include "servelab/request.h"
#include "stub_tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* openai_response.c binds the real tokenizer (oai_tok_bind), which this target
 * never calls, and names finish reasons with the engine's finish_reason_str:
 * these satisfy the linker without sentencepiece and the engine. */
const char *finish_reason_str(finish_reason_t f) {
    (void)f;
    return "length";
}
int tok_encode(const tokenizer_t *t, const char *text, size_t len, bool add_special, int32_t **ids_out,
               sl_err_t *err) {
    (void)t, (void)text, (void)len, (void)add_special, (void)ids_out, (void)err;
    abort();
}
char *tok_decode(const tokenizer_t *t, const int32_t *ids, size_t n, bool skip_special, size_t *len_out) {
    (void)t, (void)ids, (void)n, (void)skip_special, (void)len_out;
    abort();
}
int tok_piece_bytes(const tokenizer_t *t, int32_t id, char *buf, size_t cap) {
    (void)t, (void)id, (void)buf, (void)cap;
    abort();
}

/* Aborts unless `json` parses and its "id" is exactly `id`. */
static void expect_id(const char *json, size_t len, const char *id) {
    if (!json || !stub_utf8_valid(json)) abort();
    cJSON *root = cJSON_ParseWithLength(json, len);
    const cJSON *got = cJSON_GetObjectItemCaseSensitive(root, "id");
    if (!cJSON_IsString(got) || strcmp(got->valuestring, id) != 0) abort();
    cJSON_Delete(root);
}

static void fuzz_request_id(const char *value, size_t n) {
    static const char *names[] = {"tiny"};
    static const char body[] =
        "{\"prompt\":\"x\",\"max_tokens\":1,\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
    oai_ctx_t ctx = {.tok = {NULL, stub_encode, stub_decode, NULL}, .served_model_names = names,
                     .n_served_model_names = 1, .max_model_len = 64, .max_logprobs = 20, .vocab_size = STUB_VOCAB};
    oai_request_t req;
    oai_error_t e;
    if (oai_request_parse(&ctx, OAI_COMPLETION, body, sizeof body - 1, &req, &e)) abort();

    char *u = http_latin1_to_utf8(value, n);
    char *id = oai_response_id("chatcmpl", u, NULL, 1, 2);
    if (!stub_utf8_valid(id)) abort();
    oai_acc_t *acc = oai_acc_new(&req);
    size_t len;
    char *full = oai_acc_body(acc, &ctx, id, 0, &len);
    expect_id(full, len, id);
    oai_stream_t *st = oai_stream_new(&ctx, &req, id, 0);
    char *chunk = oai_stream_usage(st, &len);
    expect_id(chunk, len, id);
    char *log = http_log_escape(id, strlen(id));
    if (!stub_utf8_valid(log)) abort();
    for (const unsigned char *c = (const unsigned char *)log; *c; c++)
        if (*c < 0x20 || *c == 0x7F || (c[0] == 0xC2 && c[1] >= 0x80 && c[1] <= 0x9F)) abort();
    (void)http_request_id_echo_ok(value);
    free(log);
    free(chunk);
    oai_stream_free(st);
    free(full);
    oai_acc_free(acc);
    free(id);
    free(u);
    oai_request_free(&req);
}

/* "name:value" lines; a line without a colon is a name with an empty value. */
static void fuzz_framing(char *text) {
    http_field_t fields[64];
    size_t n = 0;
    for (char *line = text; line && n < 64;) {
        char *next = strchr(line, '\n');
        if (next) *next++ = '\0';
        char *colon = strchr(line, ':');
        if (colon) *colon = '\0';
        fields[n++] = (http_field_t){line, colon ? colon + 1 : ""};
        line = next;
    }
    const char *why = http_framing_error(fields, n);
    if (why && !why[0]) abort();
}

/* An Authorization header against two keys: accepted exactly when the scheme
 * is "bearer" in any case and the rest, without trailing blanks and read as
 * latin-1, is one of the keys. */
static void fuzz_authorization(const char *value) {
    static const char *keys[] = {"test-key-123", "caf\xc3\xa9"};
    uint8_t digests[2][HTTP_KEY_DIGEST_BYTES];
    for (int i = 0; i < 2; i++) http_key_digest(keys[i], strlen(keys[i]), digests[i]);
    bool ok = http_bearer_ok(value, (const uint8_t(*)[HTTP_KEY_DIGEST_BYTES])digests, 2);
    bool want = false;
    if (!strncasecmp(value, "bearer ", 7)) {
        size_t n = strlen(value + 7);
        while (n > 0 && (value[7 + n - 1] == ' ' || value[7 + n - 1] == '\t')) n--;
        char *text = http_latin1_to_utf8(value + 7, n);
        want = !strcmp(text, keys[0]) || !strcmp(text, keys[1]);
        free(text);
    }
    if (ok != want) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    char *value = malloc(size);
    memcpy(value, data + 1, size - 1);
    value[size - 1] = '\0';
    switch (data[0] % 3) {
    case 0: fuzz_request_id(value, strlen(value)); break;
    case 1: fuzz_framing(value); break;
    case 2: fuzz_authorization(value); break;
    }
    free(value);
    return 0;
}
