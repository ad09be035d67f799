/* test_openai.c - the OpenAI protocol layer: request validation and response bytes.
 *
 * Most tests run on a fake byte tokenizer (one id per byte, id = byte + 3; 1 = <s>,
 * 2 = </s>), so token counts and logprob token strings are known exactly; the chat
 * template is the real one of models/tiny. Chat and completion tokenization are also
 * checked on the real tiny tokenizer. Expected bodies are written out by hand from
 * the vLLM shapes in the compatibility reference, never captured from our output.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "servelab/chat_template.h"
#include "servelab/openai.h"
#include "servelab/sampling_json.h"
#include "servelab/tokenizer.h"
#include "test.h"

/* ---- fixtures --------------------------------------------------------------------- */

static int fake_encode(void *user, const char *text, size_t len, bool add_special, int32_t **ids_out, sl_err_t *err) {
    (void)user;
    (void)err;
    int32_t *ids = malloc((len + 1) * sizeof *ids);
    int n = 0;
    if (add_special) ids[n++] = 1;
    for (size_t i = 0; i < len; i++) ids[n++] = (unsigned char)text[i] + 3;
    *ids_out = ids;
    return n;
}

static int fake_piece(void *user, int32_t id, char *buf, size_t cap) {
    (void)user;
    char tmp[8];
    int n;
    if (id == 1) n = snprintf(tmp, sizeof tmp, "<s>");
    else if (id == 2) n = snprintf(tmp, sizeof tmp, "</s>");
    else if (id >= 3 && id < 259) tmp[0] = (char)(id - 3), tmp[1] = 0, n = 1;
    else return -1;
    snprintf(buf, cap, "%s", tmp);
    if (n == 1 && cap > 1) buf[0] = tmp[0];
    return n;
}

static char *fake_decode(void *user, const int32_t *ids, size_t n, bool skip_special, size_t *len_out) {
    char *s = malloc(8 * n + 1), *p = s;
    for (size_t i = 0; i < n; i++) {
        if (skip_special && ids[i] < 3) continue;
        char buf[8];
        int k = fake_piece(user, ids[i], buf, sizeof buf);
        if (k > 0) memcpy(p, buf, (size_t)k), p += k;
    }
    *p = 0;
    if (len_out) *len_out = (size_t)(p - s);
    return s;
}

static const char *NAMES[] = {"tiny", "alias"};
static chat_template_t *TMPL;
static cJSON *SPECIAL;
static tokenizer_t *TOK;

static oai_ctx_t fake_ctx(int32_t max_model_len) {
    oai_ctx_t c = {0};
    c.tok = (oai_tok_t){NULL, fake_encode, fake_decode, fake_piece};
    c.chat_template = TMPL;
    c.special_tokens = SPECIAL;
    c.served_model_names = NAMES;
    c.n_served_model_names = 2;
    c.model_root = "models/tiny";
    c.max_model_len = max_model_len;
    c.max_logprobs = 20;
    c.vocab_size = 259;
    return c;
}

static oai_ctx_t tiny_ctx(void) {
    oai_ctx_t c = fake_ctx(2048);
    oai_tok_bind(&c.tok, TOK);
    c.vocab_size = tok_vocab_size(TOK);
    return c;
}

static int parse(const oai_ctx_t *ctx, oai_kind_t kind, const char *body, oai_request_t *r, oai_error_t *e) {
    memset(e, 0, sizeof *e);
    return oai_request_parse(ctx, kind, body, strlen(body), r, e);
}

/* Parses `body`, which must fail with exactly this status, type, param and message. */
#define CHECK_ERR(ctx, kind, body, st, ty, prm, msg)                                                  \
    do {                                                                                              \
        oai_request_t r_;                                                                             \
        oai_error_t e_;                                                                               \
        int rc_ = parse(ctx, kind, body, &r_, &e_);                                                   \
        CHECK_EQ_INT(rc_, -1);                                                                        \
        CHECK_EQ_INT(e_.status, st);                                                                  \
        if (rc_ == -1 && (strcmp(e_.type, ty) || strcmp(e_.param, prm) || strcmp(e_.message, msg))) {  \
            fprintf(stderr, "  %s:%d: %s\n    got      [%s] [%s] [%s]\n    expected [%s] [%s] [%s]\n", \
                    __FILE__, __LINE__, test_cur_name, e_.type, e_.param, e_.message, ty, prm, msg);  \
            test_cur_failed = 1;                                                                      \
        }                                                                                             \
        oai_request_free(&r_);                                                                        \
    } while (0)

#define CHECK_BAD(ctx, kind, body, prm, msg) CHECK_ERR(ctx, kind, body, 400, "BadRequestError", prm, msg)

#define CHECK_STR(got, want)                                                                          \
    do {                                                                                              \
        const char *g_ = (got), *w_ = (want);                                                         \
        if (!g_ || strcmp(g_, w_)) {                                                                  \
            fprintf(stderr, "  %s:%d: %s\n    got      %s\n    expected %s\n", __FILE__, __LINE__,    \
                    test_cur_name, g_ ? g_ : "(null)", w_);                                           \
            test_cur_failed = 1;                                                                      \
        }                                                                                             \
    } while (0)

/* ---- body checks --------------------------------------------------------------------- */

static void test_body_must_be_utf8_json_object(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"\xff\"}", "", "The request body is not valid UTF-8.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":", "", "The request body is not valid JSON (at byte 9).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\"} x", "", "The request body is not valid JSON (at byte 15).");
    CHECK_BAD(&c, OAI_COMPLETION, "[1,2]", "", "The request body must be a JSON object.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\\u0000b\"}", "",
              "The request body contains a NUL character (\\u0000), which is not supported.");
}

/* Parses `len` bytes of `body` (which may hold NULs) and expects a 400 with `msg`. */
static void expect_bad_bytes(const oai_ctx_t *c, oai_kind_t kind, const char *body, size_t len, const char *msg) {
    oai_request_t r;
    oai_error_t e;
    memset(&e, 0, sizeof e);
    int rc = oai_request_parse(c, kind, body, len, &r, &e);
    CHECK_EQ_INT(rc, -1);
    CHECK_EQ_INT(e.status, 400);
    if (rc == -1 && strcmp(e.message, msg)) {
        fprintf(stderr, "  got      [%s]\n  expected [%s]\n", e.message, msg);
        CHECK(!"message differs");
    }
    if (rc == 0) fprintf(stderr, "  accepted, prompt of %d tokens\n", r.prompts[0].n_ids);
    oai_request_free(&r);
}

/* RFC 8259: U+0000-U+001F must be escaped inside strings, and only space, \t, \n
 * and \r may stand between tokens. cJSON takes both; Python's json refuses them. */
static void test_raw_control_characters_are_invalid_json(void) {
    oai_ctx_t c = fake_ctx(64);
    static const char nul_in_prompt[] = "{\"prompt\":\"abc\0def\"}";
    expect_bad_bytes(&c, OAI_COMPLETION, nul_in_prompt, sizeof nul_in_prompt - 1,
                     "The request body is not valid JSON (at byte 14).");
    static const char nul_between[] = "{\0\"prompt\":\"a\"}";
    expect_bad_bytes(&c, OAI_COMPLETION, nul_between, sizeof nul_between - 1,
                     "The request body is not valid JSON (at byte 1).");
    static const char nul_in_chat[] = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\0there\"}]}";
    expect_bad_bytes(&c, OAI_CHAT, nul_in_chat, sizeof nul_in_chat - 1,
                     "The request body is not valid JSON (at byte 41).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\x01" "b\"}", "", "The request body is not valid JSON (at byte 12).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\nb\"}", "", "The request body is not valid JSON (at byte 12).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\tb\"}", "", "The request body is not valid JSON (at byte 12).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\x1f\"}", "", "The request body is not valid JSON (at byte 12).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"pro\x02mpt\":\"a\"}", "", "The request body is not valid JSON (at byte 5).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"\x1b\"]}", "",
              "The request body is not valid JSON (at byte 23).");
    /* a backslash does not make the raw byte after it valid */
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\\\x01\"}", "", "The request body is not valid JSON (at byte 13).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\x0b\"prompt\":\"a\"}", "", "The request body is not valid JSON (at byte 1).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\"\x0c}", "", "The request body is not valid JSON (at byte 13).");
    /* accepted: JSON's whitespace between tokens, escaped control characters, DEL */
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\r\n\t\"prompt\" :\n\"a\\u0001\\n\\t\\u001f\x7f\\\\\"\r\n}\n", &r, &e), 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].text_len == 7 && !memcmp(r.prompts[0].text, "a\x01\n\t\x1f\x7f\\", 7));
    CHECK_EQ_INT(r.prompts[0].n_ids, 8);
    oai_request_free(&r);
}

/* "\u0000" decodes to U+0000, which vLLM keeps; here it is refused (see the
 * parser's header), never cut short: in the body and in tool-call arguments. */
static void test_nul_escapes_are_refused_everywhere(void) {
    oai_ctx_t c = fake_ctx(200);
    const char *msg = "The request body contains a NUL character (\\u0000), which is not supported.";
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"abc\\u0000def\"}", "", msg);
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\\u0000there\"}]}", "", msg);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"x\\u0000\"]}", "", msg);
    /* an escaped backslash before "u0000" is the text \u0000, not a NUL */
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\\\\u0000\"}", &r, &e), 0);
    CHECK_STR(r.prompts[0].text, "a\\u0000");
    oai_request_free(&r);
    /* tool-call arguments are JSON text inside a string: the same rules apply to them */
    CHECK_BAD(&c, OAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\","
              "\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\","
              "\"arguments\":\"{\\\"x\\\":\\\"y\\\\u0000z\\\"}\"}}]},{\"role\":\"user\",\"content\":\"c\"}]}",
              "messages[1].tool_calls",
              "messages[1].tool_calls: function.arguments contains a NUL character (\\u0000), which is not supported.");
    CHECK_BAD(&c, OAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\","
              "\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\","
              "\"arguments\":\"{\\\"x\\\":\\\"\\u0001\\\"}\"}}]},{\"role\":\"user\",\"content\":\"c\"}]}",
              "messages[1].tool_calls", "messages[1].tool_calls: function.arguments is not valid JSON");
    /* and, as json.loads, nothing but whitespace after the value */
    CHECK_BAD(&c, OAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\","
              "\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\","
              "\"arguments\":\"{} x\"}}]},{\"role\":\"user\",\"content\":\"c\"}]}",
              "messages[1].tool_calls", "messages[1].tool_calls: function.arguments is not valid JSON");
    CHECK_EQ_INT(parse(&c, OAI_CHAT,
                       "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"assistant\",\"content\":\"b\","
                       "\"tool_calls\":[{\"id\":\"t\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                       "\"arguments\":\"{\\\"x\\\":\\\"\\\\u0001\\\"}\"}}]},{\"role\":\"user\",\"content\":\"c\"}]}",
                       &r, &e),
                 0);
    oai_request_free(&r);
}

static void test_json_depth_limit(void) {
    oai_ctx_t c = fake_ctx(64);
    char body[512];
    /* depth 64 is accepted (an ignored field), depth 65 is not */
    for (int depth = 64; depth <= 65; depth++) {
        int n = snprintf(body, sizeof body, "{\"prompt\":\"a\",\"x\":");
        for (int i = 0; i < depth - 1; i++) body[n++] = '[';
        for (int i = 0; i < depth - 1; i++) body[n++] = ']';
        body[n++] = '}';
        body[n] = 0;
        oai_request_t r;
        oai_error_t e;
        int rc = parse(&c, OAI_COMPLETION, body, &r, &e);
        if (depth == 64) CHECK_EQ_INT(rc, 0);
        else CHECK(rc == -1 && !strcmp(e.message, "The request body is nested deeper than 64 levels."));
        oai_request_free(&r);
    }
}

static void test_duplicate_keys_keep_the_last(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":\"x\",\"temperature\":0.5,\"prompt\":\"bc\"}", &r, &e), 0);
    CHECK(r.params.temperature == 0.5f);
    CHECK_EQ_INT(r.prompts[0].n_ids, 3);
    oai_request_free(&r);
}

static void test_wrong_types_name_the_field(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":\"hot\"}", "temperature",
              "temperature: expected a number");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":\"yes\"}", "stream", "stream: expected true or false");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"model\":7}", "model", "model: expected a string");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":1.5}", "max_tokens",
              "max_tokens: expected an integer in [-2147483648, 2147483647]");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":\"hi\"}", "messages", "messages: expected a list of messages");
    CHECK_BAD(&c, OAI_CHAT, "{}", "messages", "messages: field required");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"content\":\"hi\"}]}", "messages[0].role", "messages[0].role: field required");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":3}", "logprobs",
              "logprobs: expected true or false");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":{\"a\":1}}", "prompt",
              "prompt: prompt must be a string, array of strings, array of tokens, or array of token arrays");
}

/* ---- vLLM's validators ------------------------------------------------------------------- */

static void test_unknown_model_is_404(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_ERR(&c, OAI_COMPLETION, "{\"model\":\"gpt-4\",\"prompt\":\"a\"}", 404, "NotFoundError", "model",
              "The model `gpt-4` does not exist.");
    CHECK_ERR(&c, OAI_CHAT, "{\"model\":\"x\",\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", 404,
              "NotFoundError", "model", "The model `x` does not exist.");
    const char *ok[] = {"{\"model\":\"tiny\",\"prompt\":\"a\"}", "{\"model\":\"alias\",\"prompt\":\"a\"}",
                        "{\"model\":\"\",\"prompt\":\"a\"}", "{\"model\":null,\"prompt\":\"a\"}"};
    for (int i = 0; i < 4; i++) {
        oai_request_t r;
        oai_error_t e;
        CHECK_EQ_INT(parse(&c, OAI_COMPLETION, ok[i], &r, &e), 0);
        oai_request_free(&r);
    }
}

static void test_logprobs_limit_messages(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":21}", "",
              "Requested sample logprobs of 21, which is greater than max allowed: 20");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":25}",
              "", "Requested sample logprobs of 25, which is greater than max allowed: 20");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_logprobs\":2}", "",
              "when using `top_logprobs`, `logprobs` must be set to true.");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":-1}",
              "", "`top_logprobs` must be a positive value.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":-1}", "", "`logprobs` must be a positive value.");
    c.max_logprobs = 5;
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6}", "",
              "Requested sample logprobs of 6, which is greater than max allowed: 5");
    /* range errors come before the limit, as SamplingParams runs before the engine check */
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":6,\"temperature\":-1}", "",
              "temperature must be non-negative, got -1.0.");
}

static void test_chat_logprobs_fields(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":3}", &r, &e), 0);
    CHECK(r.chat_logprobs && r.top_logprobs == 3 && r.params.logprobs == 3);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true}", &r, &e), 0);
    CHECK(r.chat_logprobs && r.top_logprobs == 0 && r.params.logprobs == 0);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":false}", &r, &e), 0);
    CHECK(!r.chat_logprobs && r.params.logprobs == -1);
    oai_request_free(&r);
}

static void test_stream_options(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}", "stream_options",
              "Stream options can only be defined when `stream=True`.");
    CHECK_BAD(&c, OAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"stream\":false,\"stream_options\":{\"include_usage\":false}}",
              "stream_options", "Stream options can only be defined when `stream=True`.");
    oai_request_t r;
    oai_error_t e;
    /* an empty object is falsy in Python: no error, and nothing asked */
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream_options\":{}}", &r, &e), 0);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{}}", &r, &e), 0);
    CHECK(r.stream && r.include_usage && !r.continuous_usage_stats);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"continuous_usage_stats\":true}}", &r, &e), 0);
    CHECK(r.include_usage && r.continuous_usage_stats);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":false,\"continuous_usage_stats\":true}}", &r, &e), 0);
    CHECK(!r.include_usage && !r.continuous_usage_stats);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"stream\":true}", &r, &e), 0);
    CHECK(r.stream && !r.include_usage);
    oai_request_free(&r);
}

static void test_context_length_messages(void) {
    oai_ctx_t c = fake_ctx(16);
    /* 16 prompt tokens (add_special: <s> + 15 bytes) >= max_model_len 16 */
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"abcdefghijklmno\"}", "",
              "This model's maximum context length is 16 tokens. However, your request has 16 input tokens. "
              "Please reduce the length of the input messages.");
    /* completions: the default max_tokens 16 counts (P = 4) */
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"abc\"}", "",
              "'max_tokens' or 'max_completion_tokens' is too large: 16. This model's maximum context length is "
              "16 tokens and your request has 4 input tokens (16 > 16 - 4).");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":[5,6,7],\"max_tokens\":14}", "",
              "'max_tokens' or 'max_completion_tokens' is too large: 14. This model's maximum context length is "
              "16 tokens and your request has 3 input tokens (14 > 16 - 3).");
    oai_ctx_t c2 = fake_ctx(40);
    /* chat: "<s>[INST] a [/INST]" = 19 bytes, no special tokens added */
    CHECK_BAD(&c2, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":30}", "",
              "'max_tokens' or 'max_completion_tokens' is too large: 30. This model's maximum context length is "
              "40 tokens and your request has 19 input tokens (30 > 40 - 19).");
    char msg[400];
    snprintf(msg, sizeof msg, "This model's maximum context length is 40 tokens. However, your request has 40 input "
                              "tokens. Please reduce the length of the input messages.");
    CHECK_BAD(&c2, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"abcdefghijklmnopqrstuv\"}]}", "", msg);
}

static void test_max_tokens_defaults(void) {
    oai_ctx_t c = fake_ctx(100);
    oai_request_t r;
    oai_error_t e;
    const char *chat = "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]%s}";
    char body[256];
    struct {
        const char *extra;
        int want;
    } cases[] = {
        {"", 100 - 19},                                         /* max_model_len - prompt */
        {",\"max_tokens\":7", 7},
        {",\"max_completion_tokens\":5,\"max_tokens\":7", 5},
        {",\"max_completion_tokens\":0,\"max_tokens\":7", 7},  /* `0 or max_tokens` */
        {",\"max_completion_tokens\":null,\"max_tokens\":null", 81},
    };
    for (int i = 0; i < 5; i++) {
        snprintf(body, sizeof body, chat, cases[i].extra);
        CHECK_EQ_INT(parse(&c, OAI_CHAT, body, &r, &e), 0);
        CHECK_EQ_INT(r.prompts[0].max_tokens, cases[i].want);
        CHECK_EQ_INT(oai_request_params(&r, 0).max_tokens, cases[i].want);
        oai_request_free(&r);
    }
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\"}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 16);
    CHECK_EQ_INT(r.params.n, 1);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":null}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 98);
    oai_request_free(&r);
    /* generation_config.json's max_new_tokens caps the default, not an explicit value above it */
    c.gen.max_new_tokens = 10;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 10);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":50}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].max_tokens, 10);
    oai_request_free(&r);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":0}", "", "max_tokens must be at least 1, got 0.");
}

/* -1 is a value a client can send, not "absent": vLLM's SamplingParams refuses it. */
static void test_negative_one_max_tokens_is_refused_not_absent(void) {
    oai_ctx_t c = fake_ctx(100);
    const char *msg = "max_tokens must be at least 1, got -1.";
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":-1}", "", msg);
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":-1}", "", msg);
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":-1}",
              "", msg);
    /* `max_completion_tokens or max_tokens`: -1 is truthy, so it wins over a valid max_tokens */
    CHECK_BAD(&c, OAI_CHAT,
              "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_completion_tokens\":-1,\"max_tokens\":5}", "",
              msg);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":-2}", "", "max_tokens must be at least 1, got -2.");
    /* with generation_config's cap too: the cap never turns -1 into a length */
    c.gen.max_new_tokens = 10;
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":-1}", "", msg);
}

/* seed -1 is vLLM's "no seed" (SamplingParams.__post_init__); other values are seeds. */
static void test_seed_minus_one_means_no_seed(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"seed\":-1}", &r, &e), 0);
    CHECK(!r.params.has_seed);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"seed\":0}", &r, &e), 0);
    CHECK(r.params.has_seed && r.params.seed == 0);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"seed\":-2}", &r, &e), 0);
    CHECK(r.params.has_seed && r.params.seed == (uint64_t)-2);
    oai_request_free(&r);
}

/* The sampling reader's -1 is "no logprobs": a sent -1 must not read as that. */
static void test_sampling_json_refuses_negative_logprobs(void) {
    sampling_params_t p;
    sl_err_t err = {{0}};
    cJSON *j = cJSON_Parse("{\"logprobs\":-1}");
    sampling_params_default(&p);
    CHECK_EQ_INT(sampling_params_from_json(j, &p, &err), -1);
    CHECK_STR(err.msg, "logprobs must be non-negative, got -1.");
    sampling_params_free(&p);
    cJSON_Delete(j);
    j = cJSON_Parse("{\"logprobs\":0,\"seed\":-1}");
    sampling_params_default(&p);
    p.has_seed = true; /* a seed set before (a CLI default) is dropped by -1 */
    CHECK_EQ_INT(sampling_params_from_json(j, &p, &err), 0);
    CHECK(p.logprobs == 0 && !p.has_seed);
    sampling_params_free(&p);
    cJSON_Delete(j);
    oai_ctx_t c = fake_ctx(64);
    /* completions keep vLLM's request-level message, which comes first */
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":-1}", "", "`logprobs` must be a positive value.");
}

static void test_generation_config_defaults(void) {
    oai_ctx_t c = fake_ctx(100);
    c.gen.has_temperature = c.gen.has_top_k = true;
    c.gen.temperature = 0.6;
    c.gen.top_k = 20;
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\"}", &r, &e), 0);
    CHECK(r.params.temperature == 0.6 && r.params.top_k == 20 && r.params.top_p == 1.0);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":0,\"top_k\":null}", &r, &e), 0);
    CHECK(r.params.temperature == 0.0f && r.params.top_k == 20);
    oai_request_free(&r);
    /* the file itself */
    oai_gen_defaults_t g;
    sl_err_t err;
    CHECK_EQ_INT(oai_gen_defaults_load("models/tiny", &g, &err), 0);
    CHECK(!g.has_temperature && g.max_new_tokens == 0);
    mkdir("/tmp/test_openai_gc", 0755);
    const char *gc = "{\"temperature\":0.7,\"top_p\":0.9,\"top_k\":40,\"max_new_tokens\":256,\"do_sample\":true}";
    CHECK_EQ_INT(test_write_file("/tmp/test_openai_gc/generation_config.json", gc, strlen(gc)), 0);
    CHECK_EQ_INT(oai_gen_defaults_load("/tmp/test_openai_gc", &g, &err), 0);
    CHECK(g.has_temperature && g.temperature == 0.7 && g.has_top_p && g.top_p == 0.9 && g.has_top_k &&
          g.top_k == 40 && !g.has_min_p && g.max_new_tokens == 256);
    CHECK_EQ_INT(test_write_file("/tmp/test_openai_gc/generation_config.json", "{\"top_p\":\"x\"}", 13), 0);
    CHECK_EQ_INT(oai_gen_defaults_load("/tmp/test_openai_gc", &g, &err), -1);
}

/* Sampling ranges are checked on the JSON number as parsed (a double), with vLLM's
 * messages, so a value just outside a range is refused even when float32 rounds it in. */
static void test_sampling_ranges_use_the_number_as_sent(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"top_p\":1.0000000000000002}", "",
              "top_p must be in (0, 1], got 1.0000000000000002.");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"top_p\":1.0000000000000002}",
              "", "top_p must be in (0, 1], got 1.0000000000000002.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"min_p\":1.0000000000000002}", "",
              "min_p must be in [0, 1], got 1.0000000000000002.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"min_p\":-1e-50}", "", "min_p must be in [0, 1], got -1e-50.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":-1e-50}", "",
              "temperature must be non-negative, got -1e-50.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"presence_penalty\":2.0000000000000004}", "",
              "presence_penalty must be in [-2, 2], got 2.0000000000000004.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"frequency_penalty\":-2.0000000000000004}", "",
              "frequency_penalty must be in [-2, 2], got -2.0000000000000004.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"repetition_penalty\":-1e-50}", "",
              "repetition_penalty must be greater than zero, got -1e-50.");
    /* JSON's 1e400 is Python's inf: SamplingParams names it */
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"top_p\":1e400}", "", "top_p must be in (0, 1], got inf.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"temperature\":1e400}", "",
              "temperature must be a finite number, got inf.");
    oai_request_t r;
    oai_error_t e;
    /* in range as sent, though float32 rounds it to 0 */
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"top_p\":1e-50,\"temperature\":1e-50}", &r, &e), 0);
    CHECK(r.params.top_p == 1e-50 && r.params.temperature == 1e-50);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"top_p\":1,\"min_p\":0,\"presence_penalty\":-2,"
                                           "\"frequency_penalty\":2,\"repetition_penalty\":2.5,\"temperature\":0}", &r, &e),
                 0);
    oai_request_free(&r);
}

static void test_n_bounds(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"n\":0}", "", "n must be at least 1, got 0.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"n\":129}", "n", "n must be at most 128, got 129.");
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"n\":128}", &r, &e), 0);
    CHECK_EQ_INT(r.params.n, 128);
    oai_request_free(&r);
}

static void test_unsupported_fields_are_refused(void) {
    oai_ctx_t c = fake_ctx(64);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"suffix\":\"z\"}", "", "suffix is not currently supported");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"guided_json\":{}}", "guided_json",
              "`guided_json` is not supported by this server.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":true,\"logprobs\":1}", "echo",
              "`echo` with `logprobs` needs prompt logprobs, which this server does not compute.");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"priority\":3}", "",
              "Got priority 3 but Priority scheduling is not enabled.");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"json_object\"}}",
              "response_format", "response_format of type \"json_object\" is not supported by this server.");
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":{\"type\":\"text\"},\"bad_words\":[]}", &r, &e), 0);
    oai_request_free(&r);
}

static void test_ignored_fields_message(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"foo\":1,\"top_k\":3,\"it's\":2,\"a\\nb\":3,\"foo\":4}", &r, &e), 0);
    CHECK_EQ_INT(r.n_ignored, 3);
    char *m = oai_ignored_fields_message(&r);
    CHECK_STR(m, "The following fields were present in the request but ignored: {'foo', \"it's\", 'a\\nb'}");
    free(m);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"echo\":false,\"user\":\"u\"}", &r, &e), 0);
    CHECK(r.n_ignored == 0 && oai_ignored_fields_message(&r) == NULL);
    oai_request_free(&r);
    /* a chat field on /v1/completions is ignored, a sampling field on /tokenize too */
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"messages\":[]}", &r, &e), 0);
    CHECK(r.n_ignored == 1 && !strcmp(r.ignored[0], "messages"));
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_TOKENIZE, "{\"prompt\":\"a\",\"temperature\":1}", &r, &e), 0);
    CHECK(r.n_ignored == 1 && !strcmp(r.ignored[0], "temperature"));
    oai_request_free(&r);
}

/* ---- prompts ----------------------------------------------------------------------------- */

static void test_completion_prompt_forms(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"ab\"}", &r, &e), 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.prompts[0].ids[0] == 1 && r.prompts[0].ids[1] == 'a' + 3);
    CHECK_STR(r.prompts[0].text, "ab");
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[\"ab\",\"c\"],\"add_special_tokens\":false}", &r, &e), 0);
    CHECK(r.n_prompts == 2 && r.prompts[0].n_ids == 2 && r.prompts[1].n_ids == 1 && r.prompts[1].ids[0] == 'c' + 3);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[1,100,101]}", &r, &e), 0);
    CHECK(r.n_prompts == 1 && r.prompts[0].n_ids == 3 && r.prompts[0].ids[2] == 101);
    CHECK_STR(r.prompts[0].text, "<s>ab"); /* decoded with special tokens, for echo */
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[[100],[101,102]]}", &r, &e), 0);
    CHECK(r.n_prompts == 2 && r.prompts[1].n_ids == 2 && r.prompts[1].ids[1] == 102);
    oai_request_free(&r);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":[]}", "prompt", "please provide at least one prompt");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":[[]]}", "prompt", "please provide at least one prompt");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":[[5],[]]}", "", "The decoder prompt cannot be empty");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":[\"a\",1]}", "prompt",
              "prompt: prompt must be a string, array of strings, array of tokens, or array of token arrays");
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":[5,300,1000]}", "", "Token id 1000 is out of vocabulary");
    CHECK_BAD(&c, OAI_COMPLETION, "{}", "prompt", "At least one of `prompt` or `prompt_embeds` must be set.");
}

/* A decoded prompt may hold a NUL byte (the byte-fallback piece <0x00>): echo and
 * /detokenize get all of it, not the text up to the NUL (fake tokenizer: id 3 = byte 0). */
static void test_decoded_prompt_text_keeps_nul_bytes(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[1,3,100],\"echo\":true}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].text_len, 5);
    CHECK(r.prompts[0].text_len == 5 && !memcmp(r.prompts[0].text, "<s>\0a", 5));
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_DETOKENIZE, "{\"tokens\":[100,3,101]}", &r, &e), 0);
    char *body = oai_detokenize_body(&r, NULL);
    CHECK_STR(body, "{\"prompt\":\"a\\u0000b\"}");
    free(body);
    oai_request_free(&r);
}

static void test_truncate_prompt_tokens(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"abcdef\",\"truncate_prompt_tokens\":3}", &r, &e), 0);
    CHECK(r.prompts[0].n_ids == 3 && r.prompts[0].ids[0] == 1 && r.prompts[0].ids[1] == 'e' + 3);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[10,11,12,13],\"truncate_prompt_tokens\":2}", &r, &e), 0);
    CHECK(r.prompts[0].n_ids == 2 && r.prompts[0].ids[0] == 12);
    oai_request_free(&r);
    CHECK_BAD(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"truncate_prompt_tokens\":65}", "",
              "truncate_prompt_tokens value (65) is greater than max_model_len (64). Please, select a smaller "
              "truncation size.");
}

static void test_chat_renders_and_tokenizes_on_tiny(void) {
    oai_ctx_t c = tiny_ctx();
    oai_request_t r;
    oai_error_t e;
    int rc = parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},"
                                 "{\"role\":\"user\",\"content\":\"Hello there\",\"name\":null}],\"model\":\"tiny\"}", &r, &e);
    CHECK_EQ_INT(rc, 0);
    if (rc) fprintf(stderr, "  %s\n", e.message);
    if (rc) return;
    CHECK_STR(r.prompts[0].text, "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHello there [/INST]");
    /* one BOS, from the template's text, none added by the tokenizer (add_special_tokens=false) */
    CHECK_EQ_INT(r.prompts[0].ids[0], tok_bos_id(TOK));
    CHECK(r.prompts[0].ids[1] != tok_bos_id(TOK));
    int32_t *ids = NULL;
    sl_err_t err;
    int n = tok_encode(TOK, r.prompts[0].text, r.prompts[0].text_len, false, &ids, &err);
    CHECK_EQ_INT(n, r.prompts[0].n_ids);
    CHECK(n > 0 && !memcmp(ids, r.prompts[0].ids, (size_t)n * sizeof *ids));
    CHECK_EQ_INT(r.prompts[0].max_tokens, 2048 - n);
    free(ids);
    oai_request_free(&r);
    /* completions add the BOS themselves */
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"Hello there\"}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].ids[0], tok_bos_id(TOK));
    CHECK(r.prompts[0].ids[1] != tok_bos_id(TOK));
    oai_request_free(&r);
}

static void test_chat_content_parts_and_messages(void) {
    oai_ctx_t c = fake_ctx(200);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"one\"},"
                                     "\"two\",{\"type\":\"text\",\"text\":null},{\"type\":\"input_text\",\"text\":\"three\"}]}]}", &r, &e), 0);
    CHECK_STR(r.prompts[0].text, "<s>[INST] one\ntwo\nthree [/INST]");
    oai_request_free(&r);
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\",\"image_url\":{\"url\":\"x\"}}]}]}",
              "messages[0].content", "Content parts of type 'image_url' are not supported: this model takes text only.");
    /* the template's own exception is the message */
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"content\":\"a\"}]}", "",
              "Conversation roles must alternate user/assistant/user/assistant/...");
    /* null content is "" */
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":null}]}", &r, &e), 0);
    CHECK_STR(r.prompts[0].text, "<s>[INST]  [/INST]");
    oai_request_free(&r);
}

static void test_chat_template_options(void) {
    oai_ctx_t c = fake_ctx(200);
    oai_request_t r;
    oai_error_t e;
    const char *conv = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"Sure \"}]%s}";
    char body[300];
    snprintf(body, sizeof body, conv, ",\"continue_final_message\":true,\"add_generation_prompt\":false");
    CHECK_EQ_INT(parse(&c, OAI_CHAT, body, &r, &e), 0);
    /* the render keeps the message's trailing space ("Sure </s>"), so the cut keeps it too */
    CHECK_STR(r.prompts[0].text, "<s>[INST] hi [/INST] Sure ");
    oai_request_free(&r);
    snprintf(body, sizeof body, conv, ",\"continue_final_message\":true,\"add_generation_prompt\":false,"
                                      "\"messages\":[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\" So  \"}]");
    CHECK_EQ_INT(parse(&c, OAI_CHAT, body, &r, &e), 0);
    /* leading space in the message: cut right after the stripped text */
    CHECK_STR(r.prompts[0].text, "<s>[INST] hi [/INST] So");
    oai_request_free(&r);
    snprintf(body, sizeof body, conv, ",\"continue_final_message\":true");
    CHECK_BAD(&c, OAI_CHAT, body, "", "Cannot set both `continue_final_message` and `add_generation_prompt` to True.");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"chat_template\":\"{{ x }}\"}", "",
              "Chat template is passed with request, but --trust-request-chat-template is not set. Refused request "
              "with untrusted chat template.");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}",
              "", "\"auto\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set");
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":\"auto\"}", "",
              "When using `tool_choice`, `tools` must be set.");
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tool_choice\":\"none\","
                                     "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]}", &r, &e), 0);
    oai_request_free(&r);
    c.chat_template = NULL;
    CHECK_BAD(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}]}", "", CHAT_NO_TEMPLATE_MSG);
}

static void test_tokenize_and_detokenize(void) {
    oai_ctx_t c = tiny_ctx();
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_TOKENIZE, "{\"model\":\"tiny\",\"prompt\":\"Hello\",\"return_token_strs\":true}", &r, &e), 0);
    char *body = oai_tokenize_body(&c, &r, NULL);
    /* the ids themselves are the tokenizer's; the shape and the BOS string are ours to check */
    CHECK(body && !strncmp(body, "{\"count\":", 9));
    CHECK_STR_CONTAINS(body, ",\"max_model_len\":2048,\"tokens\":[1,");
    CHECK_STR_CONTAINS(body, "],\"token_strs\":[\"<s>\",\"\xE2\x96\x81");
    free(body);
    oai_request_free(&r);

    oai_ctx_t f = fake_ctx(64);
    CHECK_EQ_INT(parse(&f, OAI_TOKENIZE, "{\"prompt\":\"ab\"}", &r, &e), 0);
    body = oai_tokenize_body(&f, &r, NULL);
    CHECK_STR(body, "{\"count\":3,\"max_model_len\":64,\"tokens\":[1,100,101],\"token_strs\":null}");
    free(body);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&f, OAI_TOKENIZE, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"add_generation_prompt\":true}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].n_ids, 19);
    oai_request_free(&r);
    CHECK_EQ_INT(parse(&f, OAI_DETOKENIZE, "{\"model\":\"tiny\",\"tokens\":[1,100,13]}", &r, &e), 0);
    body = oai_detokenize_body(&r, NULL);
    CHECK_STR(body, "{\"prompt\":\"<s>a\\n\"}");
    free(body);
    oai_request_free(&r);
    CHECK_BAD(&f, OAI_DETOKENIZE, "{\"tokens\":[1,-5]}", "", "Token id -5 is out of vocabulary");
    CHECK_BAD(&f, OAI_DETOKENIZE, "{\"tokens\":\"x\"}", "tokens", "tokens: expected a list of integer token ids");
}

static void test_response_ids(void) {
    char *id = oai_response_id("chatcmpl", NULL, NULL, 0x0123456789abcdefull, 0xfedcba9876543210ull);
    /* uuid4().hex: version nibble 4, variant 10xx */
    CHECK_STR(id, "chatcmpl-0123456789ab4defbedcba9876543210");
    free(id);
    id = oai_response_id("cmpl", "my-req", "body-id", 1, 2);
    CHECK_STR(id, "cmpl-my-req");
    free(id);
    id = oai_response_id("cmpl", "", "body-id", 1, 2);
    CHECK_STR(id, "cmpl-body-id");
    free(id);
}

/* ---- response bodies --------------------------------------------------------------------------- */

static engine_output_t ev(int32_t index, int32_t token, const char *text, finish_reason_t fin) {
    engine_output_t o;
    memset(&o, 0, sizeof o);
    o.index = index;
    o.n_new = token >= 0 ? 1 : 0;
    o.token = token;
    o.text = (char *)text;
    o.text_len = strlen(text);
    o.finish = fin;
    o.stop_index = o.stop_token = -1;
    return o;
}

static void test_error_body_bytes(void) {
    oai_error_t e;
    oai_error_set(&e, 400, "BadRequestError", NULL, "Requested sample logprobs of %d, which is greater than max allowed: %d", 21, 20);
    char *b = oai_error_body(&e, NULL);
    CHECK_STR(b, "{\"error\":{\"message\":\"Requested sample logprobs of 21, which is greater than max allowed: 20\","
                 "\"type\":\"BadRequestError\",\"param\":null,\"code\":400}}");
    free(b);
    oai_error_set(&e, 404, "NotFoundError", "model", "The model `%s` does not exist.", "a\"b");
    size_t len = 0;
    b = oai_error_body(&e, &len);
    CHECK_STR(b, "{\"error\":{\"message\":\"The model `a\\\"b` does not exist.\",\"type\":\"NotFoundError\","
                 "\"param\":\"model\",\"code\":404}}");
    CHECK_EQ_INT(len, strlen(b));
    free(b);
}

static void test_chat_body_bytes(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"model\":\"alias\"}", &r, &e), 0);
    CHECK_EQ_INT(r.prompts[0].n_ids, 23);
    oai_acc_t *a = oai_acc_new(&r);
    engine_output_t o1 = ev(0, 'H' + 3, "H", FINISH_NONE), o2 = ev(0, 'i' + 3, "i\n\"", FINISH_NONE),
                    o3 = ev(0, 2, "", FINISH_STOP);
    oai_acc_add(a, 0, &o1);
    oai_acc_add(a, 0, &o2);
    oai_acc_add(a, 0, &o3);
    char *b = oai_acc_body(a, &c, "chatcmpl-abc", 1700000000, NULL);
    CHECK_STR(b, "{\"id\":\"chatcmpl-abc\",\"object\":\"chat.completion\",\"created\":1700000000,\"model\":\"tiny\","
                 "\"choices\":[{\"index\":0,\"message\":{\"role\":\"assistant\",\"content\":\"Hi\\n\\\"\",\"refusal\":null,"
                 "\"annotations\":null,\"audio\":null,\"function_call\":null,\"tool_calls\":[],\"reasoning_content\":null},"
                 "\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":null}],\"service_tier\":null,"
                 "\"system_fingerprint\":null,\"usage\":{\"prompt_tokens\":23,\"total_tokens\":26,\"completion_tokens\":3,"
                 "\"prompt_tokens_details\":null},\"prompt_logprobs\":null,\"kv_transfer_params\":null}");
    free(b);
    oai_acc_free(a);
    oai_request_free(&r);
}

static void test_completion_body_bytes_n2_stop_reasons_echo(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"Q:\",\"n\":2,\"stop\":[\"\\n\",\"END\"],\"stop_token_ids\":[7],"
                                           "\"echo\":true,\"max_tokens\":3}", &r, &e), 0);
    oai_acc_t *a = oai_acc_new(&r);
    engine_output_t x1 = ev(1, 'a' + 3, "a", FINISH_NONE), y1 = ev(0, 'b' + 3, "b", FINISH_NONE);
    engine_output_t x2 = ev(1, 'E' + 3, "", FINISH_STOP), y2 = ev(0, 7, "", FINISH_STOP);
    x2.stop_index = 1;
    y2.stop_token = 7;
    oai_acc_add(a, 0, &x1);
    oai_acc_add(a, 0, &y1);
    oai_acc_add(a, 0, &x2);
    oai_acc_add(a, 0, &y2);
    char *b = oai_acc_body(a, &c, "cmpl-1", 5, NULL);
    CHECK_STR(b, "{\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":5,\"model\":\"tiny\",\"choices\":["
                 "{\"index\":0,\"text\":\"Q:b\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":7,\"prompt_logprobs\":null},"
                 "{\"index\":1,\"text\":\"Q:a\",\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\"END\",\"prompt_logprobs\":null}],"
                 "\"service_tier\":null,\"system_fingerprint\":null,\"usage\":{\"prompt_tokens\":3,\"total_tokens\":7,"
                 "\"completion_tokens\":4,\"prompt_tokens_details\":null},\"kv_transfer_params\":null}");
    free(b);
    oai_acc_free(a);
    oai_request_free(&r);
}

static void test_usage_sums_prompts_and_choices(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[[5,6],[7,8,9]],\"n\":2,\"max_tokens\":2}", &r, &e), 0);
    oai_acc_t *a = oai_acc_new(&r);
    for (int p = 0; p < 2; p++)
        for (int i = 0; i < 2; i++) {
            engine_output_t o = ev(i, 'x' + 3, "x", FINISH_NONE), f = ev(i, 'y' + 3, "y", FINISH_LENGTH);
            oai_acc_add(a, p, &o);
            oai_acc_add(a, p, &f);
        }
    char *b = oai_acc_body(a, &c, "cmpl-u", 1, NULL);
    CHECK_STR_CONTAINS(b, "\"usage\":{\"prompt_tokens\":5,\"total_tokens\":13,\"completion_tokens\":8,");
    CHECK_STR_CONTAINS(b, "{\"index\":3,\"text\":\"xy\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null,");
    free(b);
    oai_acc_free(a);
    oai_request_free(&r);
}

static sample_result_t lp_result(int32_t token, float lp, int n_top, const int32_t *ids, const float *lps) {
    sample_result_t s;
    memset(&s, 0, sizeof s);
    s.token = token;
    s.logprob = lp;
    s.n_top = n_top;
    for (int i = 0; i < n_top; i++) s.top_ids[i] = ids[i], s.top_logprobs[i] = lps[i];
    return s;
}

static void test_chat_logprobs_body(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true,\"top_logprobs\":2}", &r, &e), 0);
    oai_acc_t *a = oai_acc_new(&r);
    int32_t ids1[2] = {'H' + 3, 'A' + 3};
    float lps1[2] = {-0.5f, -1.25f};
    engine_output_t o = ev(0, 'H' + 3, "H", FINISH_NONE);
    o.logprobs = lp_result('H' + 3, -0.5f, 2, ids1, lps1);
    oai_acc_add(a, 0, &o);
    /* sampled token outside the top 2: it leads the list, as in vLLM's dict */
    int32_t ids2[2] = {'x' + 3, 'y' + 3};
    float lps2[2] = {-1e-05f, -20000.0f};
    engine_output_t o2 = ev(0, 0xE2 + 3, "", FINISH_LENGTH);
    o2.logprobs = lp_result(0xE2 + 3, -3.0f, 2, ids2, lps2);
    oai_acc_add(a, 0, &o2);
    char *b = oai_acc_body(a, &c, "chatcmpl-l", 1, NULL);
    CHECK_STR_CONTAINS(b, "\"logprobs\":{\"content\":[{\"token\":\"H\",\"logprob\":-0.5,\"bytes\":[72],\"top_logprobs\":["
                          "{\"token\":\"H\",\"logprob\":-0.5,\"bytes\":[72]},{\"token\":\"A\",\"logprob\":-1.25,\"bytes\":[65]}]},"
                          "{\"token\":\"\xEF\xBF\xBD\",\"logprob\":-3.0,\"bytes\":[226],\"top_logprobs\":["
                          "{\"token\":\"\xEF\xBF\xBD\",\"logprob\":-3.0,\"bytes\":[226]},"
                          "{\"token\":\"x\",\"logprob\":-9.999999747378752e-06,\"bytes\":[120]}]}]},"
                          "\"finish_reason\":\"length\"");
    free(b);
    oai_acc_free(a);
    oai_request_free(&r);
}

static void test_completion_logprobs_body(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":1,\"max_tokens\":2}", &r, &e), 0);
    oai_acc_t *a = oai_acc_new(&r);
    int32_t ids[3] = {'b' + 3, 'c' + 3, 'd' + 3};
    float lps[3] = {-0.25f, -2.0f, -3.0f};
    engine_output_t o = ev(0, 'c' + 3, "c", FINISH_NONE);
    o.logprobs = lp_result('c' + 3, -2.0f, 1, ids, lps);
    oai_acc_add(a, 0, &o);
    engine_output_t o2 = ev(0, 'b' + 3, "b", FINISH_LENGTH);
    o2.logprobs = lp_result('b' + 3, -0.25f, 1, ids, lps);
    oai_acc_add(a, 0, &o2);
    char *b = oai_acc_body(a, &c, "cmpl-l", 1, NULL);
    CHECK_STR_CONTAINS(b, "{\"index\":0,\"text\":\"cb\",\"logprobs\":{\"text_offset\":[0,1],\"token_logprobs\":[-2.0,-0.25],"
                          "\"tokens\":[\"c\",\"b\"],\"top_logprobs\":[{\"c\":-2.0,\"b\":-0.25},{\"b\":-0.25}]},"
                          "\"finish_reason\":\"length\",\"stop_reason\":null,\"prompt_logprobs\":null}");
    free(b);
    oai_acc_free(a);
    oai_request_free(&r);
}

/* ---- streaming ------------------------------------------------------------------------------------ */

static void check_chunks(const oai_chunks_t *got, const char *const *want, int n) {
    CHECK_EQ_INT(got->n, n);
    for (int i = 0; i < n && i < got->n; i++) {
        CHECK_STR(got->json[i], want[i]);
        CHECK_EQ_INT(got->len[i], strlen(got->json[i]));
    }
}

static void test_chat_stream_sequence(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"stream\":true,"
                                     "\"stream_options\":{\"include_usage\":true},\"stop\":[\"!\"]}", &r, &e), 0);
    oai_stream_t *s = oai_stream_new(&c, &r, "chatcmpl-s", 7);
    oai_chunks_t out = {0};
    engine_output_t o1 = ev(0, 'H' + 3, "H", FINISH_NONE), o2 = ev(0, 'i' + 3, "i", FINISH_NONE),
                    o3 = ev(0, '!' + 3, "", FINISH_STOP);
    o3.stop_index = 0;
    CHECK_EQ_INT(oai_stream_event(s, 0, &o1, &out), 2);
    CHECK_EQ_INT(oai_stream_event(s, 0, &o2, &out), 1);
    CHECK_EQ_INT(oai_stream_event(s, 0, &o3, &out), 1);
#define HEAD "{\"id\":\"chatcmpl-s\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"tiny\","
    const char *want[] = {
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}",
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"H\"},\"logprobs\":null,\"finish_reason\":null}]}",
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"i\"},\"logprobs\":null,\"finish_reason\":null}]}",
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\"!\"}]}",
    };
    check_chunks(&out, want, 4);
    char *u = oai_stream_usage(s, NULL);
    CHECK_STR(u, HEAD "\"choices\":[],\"usage\":{\"prompt_tokens\":23,\"total_tokens\":26,\"completion_tokens\":3}}");
    free(u);
    oai_chunks_free(&out);
    oai_stream_free(s);
    oai_request_free(&r);
}

static void test_chat_stream_n2_continuous_usage(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"stream\":true,\"n\":2,"
                                     "\"stream_options\":{\"continuous_usage_stats\":true}}", &r, &e), 0);
    oai_stream_t *s = oai_stream_new(&c, &r, "chatcmpl-n", 7);
    oai_chunks_t out = {0};
    engine_output_t o1 = ev(1, 'x' + 3, "x", FINISH_LENGTH);
    CHECK_EQ_INT(oai_stream_event(s, 0, &o1, &out), 3);
#define HEADN "{\"id\":\"chatcmpl-n\",\"object\":\"chat.completion.chunk\",\"created\":7,\"model\":\"tiny\","
    const char *want[] = {
        HEADN "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],"
              "\"usage\":{\"prompt_tokens\":23,\"total_tokens\":23,\"completion_tokens\":0}}",
        HEADN "\"choices\":[{\"index\":1,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}],"
              "\"usage\":{\"prompt_tokens\":23,\"total_tokens\":23,\"completion_tokens\":0}}",
        HEADN "\"choices\":[{\"index\":1,\"delta\":{\"content\":\"x\"},\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],"
              "\"usage\":{\"prompt_tokens\":23,\"total_tokens\":24,\"completion_tokens\":1}}",
    };
    check_chunks(&out, want, 3);
    /* an abort of the other choice before any token says nothing */
    oai_chunks_clear(&out);
    engine_output_t ab = ev(0, -1, "", FINISH_ABORT);
    CHECK_EQ_INT(oai_stream_event(s, 0, &ab, &out), 0);
    char *u = oai_stream_usage(s, NULL);
    CHECK_STR(u, HEADN "\"choices\":[],\"usage\":{\"prompt_tokens\":23,\"total_tokens\":24,\"completion_tokens\":1}}");
    free(u);
    oai_chunks_free(&out);
    oai_stream_free(s);
    oai_request_free(&r);
}

static void test_completion_stream_sequence(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"Q\",\"stream\":true,\"echo\":true,\"max_tokens\":2}", &r, &e), 0);
    oai_stream_t *s = oai_stream_new(&c, &r, "cmpl-s", 9);
    oai_chunks_t out = {0};
    engine_output_t o1 = ev(0, 'A' + 3, "A", FINISH_NONE), o2 = ev(0, 'B' + 3, "B", FINISH_LENGTH);
    CHECK_EQ_INT(oai_stream_event(s, 0, &o1, &out), 1);
    CHECK_EQ_INT(oai_stream_event(s, 0, &o2, &out), 1);
    const char *want[] = {
        "{\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
        "\"text\":\"QA\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}",
        "{\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
        "\"text\":\"B\",\"logprobs\":null,\"finish_reason\":\"length\",\"stop_reason\":null}],\"usage\":null}",
    };
    check_chunks(&out, want, 2);
    CHECK(oai_stream_usage(s, NULL) == NULL);
    oai_chunks_free(&out);
    oai_stream_free(s);
    oai_request_free(&r);
}

/* The lab's stream_coalesce: every 2 tokens one event with the texts joined, the
 * finishing batch with its finish_reason, usage unchanged; flush sends a batch
 * left by a choice that ended without a finishing event. */
static void test_stream_coalesce_joins_events(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hello\"}],\"stream\":true,"
                                     "\"stream_options\":{\"include_usage\":true},\"stop\":[\"!\"]}", &r, &e), 0);
    oai_stream_t *s = oai_stream_new(&c, &r, "chatcmpl-s", 7);
    oai_stream_set_coalesce(s, 2);
    oai_chunks_t out = {0};
    engine_output_t o1 = ev(0, 'H' + 3, "H", FINISH_NONE), o2 = ev(0, 'i' + 3, "i", FINISH_NONE),
                    o3 = ev(0, '!' + 3, "", FINISH_STOP);
    o3.stop_index = 0;
    CHECK_EQ_INT(oai_stream_event(s, 0, &o1, &out), 1); /* the role event; H is held */
    CHECK_EQ_INT(oai_stream_event(s, 0, &o2, &out), 1);
    CHECK_EQ_INT(oai_stream_event(s, 0, &o3, &out), 1);
    const char *want[] = {
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}",
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hi\"},\"logprobs\":null,\"finish_reason\":null}]}",
        HEAD "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\"},\"logprobs\":null,\"finish_reason\":\"stop\",\"stop_reason\":\"!\"}]}",
    };
    check_chunks(&out, want, 3);
    CHECK_EQ_INT(oai_stream_take_coalesced(s), 1);
    CHECK_EQ_INT(oai_stream_take_coalesced(s), 0);
    char *u = oai_stream_usage(s, NULL);
    CHECK_STR(u, HEAD "\"choices\":[],\"usage\":{\"prompt_tokens\":23,\"total_tokens\":26,\"completion_tokens\":3}}");
    free(u);
    oai_chunks_free(&out);
    oai_stream_free(s);
    oai_request_free(&r);

    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":\"Q\",\"stream\":true,\"echo\":true,\"max_tokens\":4}", &r, &e), 0);
    s = oai_stream_new(&c, &r, "cmpl-s", 9);
    oai_stream_set_coalesce(s, 2);
    engine_output_t a = ev(0, 'A' + 3, "A", FINISH_NONE), b = ev(0, 'B' + 3, "B", FINISH_NONE),
                    d = ev(0, 'C' + 3, "C", FINISH_NONE);
    CHECK_EQ_INT(oai_stream_event(s, 0, &a, &out), 0);
    CHECK_EQ_INT(oai_stream_event(s, 0, &b, &out), 1);
    CHECK_EQ_INT(oai_stream_event(s, 0, &d, &out), 0);
    oai_stream_flush(s, &out);
    const char *want2[] = {
        "{\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
        "\"text\":\"QAB\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}",
        "{\"id\":\"cmpl-s\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[{\"index\":0,"
        "\"text\":\"C\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}",
    };
    check_chunks(&out, want2, 2);
    CHECK_EQ_INT(oai_stream_take_coalesced(s), 1);
    oai_chunks_free(&out);
    oai_stream_free(s);
    oai_request_free(&r);
}

static void test_completion_stream_logprobs_and_usage(void) {
    oai_ctx_t c = fake_ctx(64);
    oai_request_t r;
    oai_error_t e;
    CHECK_EQ_INT(parse(&c, OAI_COMPLETION, "{\"prompt\":[[5],[6,7]],\"stream\":true,\"logprobs\":0,\"max_tokens\":2,"
                                           "\"stream_options\":{\"include_usage\":true,\"continuous_usage_stats\":true}}", &r, &e), 0);
    oai_stream_t *s = oai_stream_new(&c, &r, "cmpl-p", 9);
    oai_chunks_t out = {0};
    engine_output_t o1 = ev(0, 0xC3 + 3, "", FINISH_NONE), o2 = ev(0, 0xA9 + 3, "\xC3\xA9", FINISH_LENGTH);
    o1.logprobs.logprob = -1.5f;
    o2.logprobs.logprob = -0.125f;
    CHECK_EQ_INT(oai_stream_event(s, 1, &o1, &out), 1);
    CHECK_EQ_INT(oai_stream_event(s, 1, &o2, &out), 1);
    const char *want[] = {
        "{\"id\":\"cmpl-p\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[{\"index\":1,"
        "\"text\":\"\",\"logprobs\":{\"text_offset\":[0],\"token_logprobs\":[-1.5],\"tokens\":[\"\xEF\xBF\xBD\"],"
        "\"top_logprobs\":[{\"\xEF\xBF\xBD\":-1.5}]},\"finish_reason\":null,\"stop_reason\":null}],"
        "\"usage\":{\"prompt_tokens\":2,\"total_tokens\":3,\"completion_tokens\":1,\"prompt_tokens_details\":null}}",
        "{\"id\":\"cmpl-p\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[{\"index\":1,"
        "\"text\":\"\xC3\xA9\",\"logprobs\":{\"text_offset\":[0],\"token_logprobs\":[-0.125],\"tokens\":[\"\xEF\xBF\xBD\"],"
        "\"top_logprobs\":[{\"\xEF\xBF\xBD\":-0.125}]},\"finish_reason\":\"length\",\"stop_reason\":null}],"
        "\"usage\":{\"prompt_tokens\":2,\"total_tokens\":4,\"completion_tokens\":2,\"prompt_tokens_details\":null}}",
    };
    check_chunks(&out, want, 2);
    char *u = oai_stream_usage(s, NULL);
    CHECK_STR(u, "{\"id\":\"cmpl-p\",\"object\":\"text_completion\",\"created\":9,\"model\":\"tiny\",\"choices\":[],"
                 "\"usage\":{\"prompt_tokens\":3,\"total_tokens\":5,\"completion_tokens\":2}}");
    free(u);
    oai_chunks_free(&out);
    oai_stream_free(s);
    oai_request_free(&r);
}

static void test_models_and_version_bodies(void) {
    oai_ctx_t c = fake_ctx(2048);
    c.n_served_model_names = 1;
    char *b = oai_models_body(&c, 1700000000, "0123456789abcdef0123456789abcdef", NULL);
    CHECK_STR(b, "{\"object\":\"list\",\"data\":[{\"id\":\"tiny\",\"object\":\"model\",\"created\":1700000000,"
                 "\"owned_by\":\"vllm\",\"root\":\"models/tiny\",\"parent\":null,\"max_model_len\":2048,\"permission\":[{"
                 "\"id\":\"modelperm-0123456789abcdef0123456789abcdef\",\"object\":\"model_permission\",\"created\":1700000000,"
                 "\"allow_create_engine\":false,\"allow_sampling\":true,\"allow_logprobs\":true,\"allow_search_indices\":false,"
                 "\"allow_view\":true,\"allow_fine_tuning\":false,\"organization\":\"*\",\"group\":null,\"is_blocking\":false}]}]}");
    free(b);
    c.n_served_model_names = 2;
    b = oai_models_body(&c, 1, "0123456789abcdef0123456789abcdef", NULL);
    CHECK_STR_CONTAINS(b, "{\"id\":\"alias\",\"object\":\"model\",\"created\":1,\"owned_by\":\"vllm\",\"root\":\"models/tiny\"");
    CHECK_STR_CONTAINS(b, "\"modelperm-0123456789abcdef0123456789abcdee\"");
    free(b);
    b = oai_version_body("0.10.2", NULL);
    CHECK_STR(b, "{\"version\":\"0.10.2\"}");
    free(b);
}

int main(void) {
    sl_err_t err;
    size_t len = 0;
    char *src = NULL;
    if (chat_template_source("models/tiny", NULL, &src, &err) != 0) {
        fprintf(stderr, "cannot read the tiny template: %s\n", err.msg);
        return 1;
    }
    TMPL = chat_template_compile(src, strlen(src), &err);
    free(src);
    (void)len;
    SPECIAL = chat_special_tokens_load("models/tiny", &err);
    TOK = tok_load("models/tiny", &err);
    if (!TMPL || !SPECIAL || !TOK) {
        fprintf(stderr, "cannot load models/tiny: %s\n", err.msg);
        return 1;
    }
    RUN(test_body_must_be_utf8_json_object);
    RUN(test_raw_control_characters_are_invalid_json);
    RUN(test_nul_escapes_are_refused_everywhere);
    RUN(test_json_depth_limit);
    RUN(test_duplicate_keys_keep_the_last);
    RUN(test_wrong_types_name_the_field);
    RUN(test_unknown_model_is_404);
    RUN(test_logprobs_limit_messages);
    RUN(test_chat_logprobs_fields);
    RUN(test_stream_options);
    RUN(test_context_length_messages);
    RUN(test_max_tokens_defaults);
    RUN(test_negative_one_max_tokens_is_refused_not_absent);
    RUN(test_seed_minus_one_means_no_seed);
    RUN(test_sampling_json_refuses_negative_logprobs);
    RUN(test_generation_config_defaults);
    RUN(test_sampling_ranges_use_the_number_as_sent);
    RUN(test_n_bounds);
    RUN(test_unsupported_fields_are_refused);
    RUN(test_ignored_fields_message);
    RUN(test_completion_prompt_forms);
    RUN(test_decoded_prompt_text_keeps_nul_bytes);
    RUN(test_truncate_prompt_tokens);
    RUN(test_chat_renders_and_tokenizes_on_tiny);
    RUN(test_chat_content_parts_and_messages);
    RUN(test_chat_template_options);
    RUN(test_tokenize_and_detokenize);
    RUN(test_response_ids);
    RUN(test_error_body_bytes);
    RUN(test_chat_body_bytes);
    RUN(test_completion_body_bytes_n2_stop_reasons_echo);
    RUN(test_usage_sums_prompts_and_choices);
    RUN(test_chat_logprobs_body);
    RUN(test_completion_logprobs_body);
    RUN(test_chat_stream_sequence);
    RUN(test_chat_stream_n2_continuous_usage);
    RUN(test_completion_stream_sequence);
    RUN(test_stream_coalesce_joins_events);
    RUN(test_completion_stream_logprobs_and_usage);
    RUN(test_models_and_version_bodies);
    tok_free(TOK);
    cJSON_Delete(SPECIAL);
    chat_template_free(TMPL);
    return test_summary();
}
