/* test_http_checks.c - the request head's bytes (src/server/http_checks.c).
 *
 * Request ids: every byte of an X-Request-Id header becomes the code point of
 * the same value, as vLLM's Starlette reads headers, so the id is valid UTF-8
 * and its JSON is valid whatever the header holds; the log form has no control
 * character; only short, valid field values are echoed. A seeded property test
 * runs random header bytes through the id, the JSON writer and the log form.
 * Framing: each ambiguity RFC 9112 calls a 400 that libmicrohttpd 0.9.75 lets
 * through is refused, and plain heads pass. API keys: vLLM's rules (scheme in
 * any case, the key after the first space, read as latin-1).
 */
#include <cjson/cJSON.h>

#include "servelab/http_checks.h"
#include "servelab/openai.h"
#include "stub_tokenizer.h"
#include "test.h"

static bool has_control(const char *s) {
    for (const unsigned char *u = (const unsigned char *)s; *u; u++)
        if (*u < 0x20 || *u == 0x7F || (u[0] == 0xC2 && u[1] >= 0x80 && u[1] <= 0x9F)) return true;
    return false;
}

static void test_request_id_bytes_become_latin1_code_points(void) {
    char *s = http_latin1_to_utf8("a\xff\xe9\x80z", 5);
    CHECK(!strcmp(s, "a\xc3\xbf\xc3\xa9\xc2\x80z")); /* U+00FF U+00E9 U+0080 */
    free(s);
    s = http_latin1_to_utf8("\xc3\xa9", 2); /* UTF-8 "é" sent raw reads as "Ã©", as in vLLM */
    CHECK(!strcmp(s, "\xc3\x83\xc2\xa9"));
    free(s);
    s = http_latin1_to_utf8("", 0);
    CHECK(!strcmp(s, ""));
    free(s);
}

static void test_request_id_keeps_quotes_backslashes_and_controls(void) {
    char *s = http_latin1_to_utf8("q\"b\\c\x01\t", 7);
    CHECK(!strcmp(s, "q\"b\\c\x01\t")); /* escaping is the JSON writer's job */
    free(s);
}

/* The "id" of `json` parsed back by cJSON (malloc'd), or NULL when `json` is not
 * valid JSON or UTF-8 or has no string id. */
static char *parsed_id(const char *json, size_t len) {
    if (!json || !stub_utf8_valid(json)) return NULL;
    cJSON *root = cJSON_ParseWithLength(json, len);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(root, "id");
    char *back = cJSON_IsString(id) ? sl_strdup(id->valuestring) : NULL;
    cJSON_Delete(root);
    return back;
}

/* True when `id` comes back unchanged from both places the server writes it: a
 * non-streaming response body and an SSE chunk (the include_usage event). */
static bool id_survives_json(const char *id) {
    static const char *names[] = {"tiny"};
    oai_ctx_t ctx = {.tok = {NULL, stub_encode, stub_decode, NULL}, .served_model_names = names,
                     .n_served_model_names = 1, .max_model_len = 64, .max_logprobs = 20, .vocab_size = STUB_VOCAB};
    static const char body[] =
        "{\"prompt\":\"x\",\"max_tokens\":1,\"stream\":true,\"stream_options\":{\"include_usage\":true}}";
    oai_request_t req;
    oai_error_t e;
    if (oai_request_parse(&ctx, OAI_COMPLETION, body, sizeof body - 1, &req, &e)) return false;
    oai_acc_t *acc = oai_acc_new(&req);
    oai_stream_t *st = oai_stream_new(&ctx, &req, id, 0);
    size_t len_full, len_chunk;
    char *full = oai_acc_body(acc, &ctx, id, 0, &len_full);
    char *chunk = oai_stream_usage(st, &len_chunk);
    char *a = parsed_id(full, len_full), *b = parsed_id(chunk, len_chunk);
    bool ok = a && b && !strcmp(a, id) && !strcmp(b, id);
    free(a), free(b), free(full), free(chunk);
    oai_stream_free(st);
    oai_acc_free(acc);
    oai_request_free(&req);
    return ok;
}

static void test_hostile_request_id_gives_valid_json_with_the_same_id(void) {
    const char raw[] = "\xff\xfe\"}\\u0000\\\x01\x1f\x7f\x9b<end>";
    char *u = http_latin1_to_utf8(raw, sizeof raw - 1);
    char *id = oai_response_id("chatcmpl", u, NULL, 1, 2);
    CHECK(stub_utf8_valid(id));
    CHECK(id_survives_json(id));
    free(id);
    free(u);
}

static void test_ten_kilobyte_request_id_is_kept_whole(void) {
    char *raw = malloc(10240);
    for (int i = 0; i < 10240; i++) raw[i] = (char)(0x80 + i % 128);
    char *u = http_latin1_to_utf8(raw, 10240);
    CHECK_EQ_INT(strlen(u), 20480);
    CHECK(stub_utf8_valid(u));
    char *id = oai_response_id("cmpl", u, NULL, 1, 2);
    CHECK(id_survives_json(id));
    free(id);
    free(u);
    free(raw);
}

static void test_log_form_escapes_controls_backslash_and_bad_utf8(void) {
    static const char in[] = "a\\b\x01\n\x7f\xc2\x9b\xff\xc3\xa9z";
    char *s = http_log_escape(in, sizeof in - 1);
    CHECK(!strcmp(s, "a\\\\b\\x01\\x0a\\x7f\\x9b\\xff\xc3\xa9z")); /* é kept, C1 U+009B escaped */
    free(s);
    s = http_log_escape("\xe2\x82", 2); /* a truncated sequence */
    CHECK(!strcmp(s, "\\xe2\\x82"));
    free(s);
    s = http_log_escape("\xed\xa0\x80\xf0\x9f\x98\x80", 7); /* a surrogate, then U+1F600 */
    CHECK(!strcmp(s, "\\xed\\xa0\\x80\xf0\x9f\x98\x80"));
    free(s);
}

static void test_echo_only_short_valid_field_values(void) {
    CHECK(http_request_id_echo_ok("my-req-7"));
    CHECK(http_request_id_echo_ok("a b\t\xff\"\\"));
    CHECK(!http_request_id_echo_ok("a\x01"));
    CHECK(!http_request_id_echo_ok("a\x7f"));
    char *big = malloc(HTTP_ECHO_ID_MAX_BYTES + 2);
    memset(big, 'x', HTTP_ECHO_ID_MAX_BYTES);
    big[HTTP_ECHO_ID_MAX_BYTES] = '\0';
    CHECK(http_request_id_echo_ok(big));
    big[HTTP_ECHO_ID_MAX_BYTES] = 'x';
    big[HTTP_ECHO_ID_MAX_BYTES + 1] = '\0';
    CHECK(!http_request_id_echo_ok(big));
    free(big);
}

static void test_random_header_bytes_give_valid_ids_json_and_logs(void) {
    char raw[64];
    for (int iter = 0; iter < 2000; iter++) {
        size_t n = test_rng() % sizeof raw;
        for (size_t i = 0; i < n; i++) raw[i] = (char)(1 + test_rng() % 255); /* a header holds no NUL */
        char *u = http_latin1_to_utf8(raw, n);
        char *id = oai_response_id("cmpl", u, NULL, 1, 2);
        char *log = http_log_escape(id, strlen(id));
        bool ok = stub_utf8_valid(id) && id_survives_json(id) && stub_utf8_valid(log) && !has_control(log);
        if (!ok) {
            fprintf(stderr, "  iteration %d fails\n", iter);
            CHECK(ok);
        }
        free(log);
        free(id);
        free(u);
        if (!ok) break;
    }
}

/* ---- framing ---- */

#define FIELDS(...) ((const http_field_t[]){__VA_ARGS__}), sizeof((const http_field_t[]){__VA_ARGS__}) / sizeof(http_field_t)

static void test_plain_request_heads_pass(void) {
    CHECK(!http_framing_error(FIELDS({"Host", "x"}, {"Content-Length", "5"}, {"Content-Type", "application/json"})));
    CHECK(!http_framing_error(FIELDS({"host", "x"}, {"transfer-encoding", "Chunked "})));
    CHECK(!http_framing_error(NULL, 0));
}

static void test_conflicting_content_lengths_are_refused(void) {
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Host", "x"}, {"Content-Length", "5"}, {"content-length", "50"})),
                       "Content-Length");
    CHECK(!http_framing_error(FIELDS({"Content-Length", "5"}, {"Content-Length", "5 "}))); /* RFC 9112 6.3: the same value */
}

static void test_whitespace_before_the_colon_is_refused(void) {
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Host", "x"}, {"Content-Length ", "5"})), "header field name");
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Trans fer", "x"})), "header field name");
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"", "x"})), "header field name");
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"X\x80", "x"})), "header field name");
}

static void test_more_than_one_host_is_refused(void) {
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Host", "a"}, {"HOST", "b"})), "Host");
}

static void test_transfer_encoding_other_than_one_chunked_is_refused(void) {
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Transfer-Encoding", "gzip"})), "Transfer-Encoding");
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Transfer-Encoding", "gzip, chunked"})), "Transfer-Encoding");
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Transfer-Encoding", "chunked"}, {"Transfer-Encoding", "chunked"})),
                       "Transfer-Encoding");
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Transfer-Encoding", "xchunked"})), "Transfer-Encoding");
}

static void test_transfer_encoding_with_content_length_is_refused(void) {
    CHECK_STR_CONTAINS(http_framing_error(FIELDS({"Content-Length", "5"}, {"Transfer-Encoding", "chunked"})),
                       "Both Transfer-Encoding and Content-Length");
}

/* ---- API keys ---- */

static uint8_t KEYS[3][HTTP_KEY_DIGEST_BYTES];

static void keys_init(void) {
    http_key_digest("test-key-123", 12, KEYS[0]);
    http_key_digest("second", 6, KEYS[1]);
    http_key_digest("caf\xc3\xa9", 5, KEYS[2]); /* "café" as given on the command line */
}

static void test_bearer_scheme_in_any_case_is_accepted(void) {
    keys_init();
    CHECK(http_bearer_ok("Bearer test-key-123", KEYS, 3));
    CHECK(http_bearer_ok("bearer test-key-123", KEYS, 3));
    CHECK(http_bearer_ok("BEARER test-key-123", KEYS, 3));
    CHECK(http_bearer_ok("bEaReR second", KEYS, 3));
}

static void test_wrong_scheme_or_key_is_refused(void) {
    keys_init();
    CHECK(!http_bearer_ok("Basic test-key-123", KEYS, 3));
    CHECK(!http_bearer_ok("Bearertest-key-123", KEYS, 3));
    CHECK(!http_bearer_ok("Bearer  test-key-123", KEYS, 3)); /* vLLM: the key is all after the first space */
    CHECK(!http_bearer_ok("Bearer test-key-12", KEYS, 3));
    CHECK(!http_bearer_ok("Bearer test-key-1234", KEYS, 3));
    CHECK(!http_bearer_ok("Bearer TEST-KEY-123", KEYS, 3));
    CHECK(!http_bearer_ok("Bearer", KEYS, 3));
    CHECK(!http_bearer_ok("", KEYS, 3));
    CHECK(!http_bearer_ok(NULL, KEYS, 3));
    CHECK(!http_bearer_ok("Bearer test-key-123", KEYS, 0));
}

static void test_bearer_key_matches_any_configured_key(void) {
    keys_init();
    CHECK(http_bearer_ok("Bearer second", KEYS, 3));
    CHECK(http_bearer_ok("Bearer test-key-123 \t", KEYS, 3)); /* trailing whitespace is not the field's */
}

static void test_bearer_key_bytes_are_read_as_latin1(void) {
    keys_init();
    CHECK(http_bearer_ok("Bearer caf\xe9", KEYS, 3));          /* latin-1 "é", as vLLM decodes it */
    CHECK(!http_bearer_ok("Bearer caf\xc3\xa9", KEYS, 3));    /* raw UTF-8 reads as "cafÃ©" in vLLM too */
}

int main(void) {
    test_seed();
    RUN(test_request_id_bytes_become_latin1_code_points);
    RUN(test_request_id_keeps_quotes_backslashes_and_controls);
    RUN(test_hostile_request_id_gives_valid_json_with_the_same_id);
    RUN(test_ten_kilobyte_request_id_is_kept_whole);
    RUN(test_log_form_escapes_controls_backslash_and_bad_utf8);
    RUN(test_echo_only_short_valid_field_values);
    RUN(test_random_header_bytes_give_valid_ids_json_and_logs);
    RUN(test_plain_request_heads_pass);
    RUN(test_conflicting_content_lengths_are_refused);
    RUN(test_whitespace_before_the_colon_is_refused);
    RUN(test_more_than_one_host_is_refused);
    RUN(test_transfer_encoding_other_than_one_chunked_is_refused);
    RUN(test_transfer_encoding_with_content_length_is_refused);
    RUN(test_bearer_scheme_in_any_case_is_accepted);
    RUN(test_wrong_scheme_or_key_is_refused);
    RUN(test_bearer_key_matches_any_configured_key);
    RUN(test_bearer_key_bytes_are_read_as_latin1);
    return test_summary();
}
