/* test_tokenizer.c - the tokenizer on a real sentencepiece model.
 *
 * Uses the committed tiny checkpoint (models/tiny: BPE, byte fallback, V 1024,
 * unk 0 / bos 1 / eos 2, legacy=false), or SERVELAB_TEST_TOKENIZER_DIR. Expected
 * strings for special tokens are transformers' LlamaTokenizer output on that
 * model (tools/check_tokenizer_hf.py checks many more). Config variants (legacy,
 * none, added tokens) are written to a temporary copy of the model.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdbool.h>
#include <unistd.h>

#include "servelab/tokenizer.h"
#include "test.h"

static tokenizer_t *tok;
static const char *model_dir;

static int encode(const tokenizer_t *t, const char *s, bool special, int32_t **ids) {
    sl_err_t err;
    int n = tok_encode(t, s, strlen(s), special, ids, &err);
    if (n < 0) fprintf(stderr, "  encode \"%s\": %s\n", s, err.msg);
    return n;
}

static int count_id(const int32_t *ids, int n, int32_t id) {
    int c = 0;
    for (int i = 0; i < n; i++) c += ids[i] == id;
    return c;
}

/* decode(encode(s)) with BOS added and skipped. */
static bool round_trips(const char *s) {
    int32_t *ids;
    int n = encode(tok, s, true, &ids);
    if (n < 0) return false;
    char *back = tok_decode(tok, ids, (size_t)n, true, NULL);
    bool ok = strcmp(back, s) == 0;
    if (!ok) fprintf(stderr, "  round trip: \"%s\" -> \"%s\"\n", s, back);
    free(back);
    free(ids);
    return ok;
}

/* The test's own strict UTF-8 check, independent of the tokenizer's. */
static bool utf8_ok(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i], need = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 9;
        if (need == 9 || c > 0xF4 || i + need >= n) return false;
        uint32_t cp = need ? c & (0x3F >> need) : c;
        for (uint32_t k = 1; k <= need; k++) {
            if ((s[i + k] & 0xC0) != 0x80) return false;
            cp = (cp << 6) | (s[i + k] & 0x3F);
        }
        if ((need == 2 && cp < 0x800) || (need == 3 && (cp < 0x10000 || cp > 0x10FFFF)) ||
            (cp >= 0xD800 && cp <= 0xDFFF))
            return false;
        i += need + 1;
    }
    return true;
}

/* The id of the byte-fallback piece <0xNN> (for NN >= 0x80 no other piece is that byte). */
static int32_t byte_id(uint8_t b) {
    char buf[8];
    for (int32_t id = 0; id < tok_vocab_size(tok); id++)
        if (tok_piece_bytes(tok, id, buf, sizeof buf) == 1 && (uint8_t)buf[0] == b) return id;
    return -1;
}

/* Streams ids and returns the concatenated output (caller frees); checks each
 * piece of output is valid UTF-8. */
static char *stream_all(const int32_t *ids, int n, bool skip) {
    tok_stream_t st;
    tok_stream_init(&st, skip);
    size_t cap = tok_stream_max_bytes(tok);
    char *out = calloc((size_t)n * cap + cap, 1), *piece = malloc(cap);
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        int k = tok_stream_push(tok, &st, ids[i], piece, cap);
        CHECK(k >= 0);
        if (k < 0) break;
        CHECK(utf8_ok(piece, (size_t)k));
        memcpy(out + len, piece, (size_t)k);
        len += (size_t)k;
    }
    int k = tok_stream_flush(&st, piece, cap);
    CHECK(k >= 0);
    if (k > 0) memcpy(out + len, piece, (size_t)k);
    free(piece);
    return out;
}

/* ---- config variants in a temporary copy of the model ---------------------- */

static char tmp_dir[64];

static tokenizer_t *variant_load(const char *config_json, sl_err_t *err) {
    char src[512], dst[600];
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/servelab_tok_XXXXXX");
    if (!mkdtemp(tmp_dir)) return NULL;
    snprintf(src, sizeof src, "%s/tokenizer.model", model_dir);
    size_t len;
    char *model = sl_read_file(src, 64u << 20, &len, err);
    if (!model) return NULL;
    snprintf(dst, sizeof dst, "%s/tokenizer.model", tmp_dir);
    CHECK(test_write_file(dst, model, len) == 0);
    free(model);
    if (config_json) {
        snprintf(dst, sizeof dst, "%s/tokenizer_config.json", tmp_dir);
        CHECK(test_write_file(dst, config_json, strlen(config_json)) == 0);
    }
    return tok_load(tmp_dir, err);
}

static void variant_remove(void) {
    char p[600];
    snprintf(p, sizeof p, "%s/tokenizer.model", tmp_dir);
    unlink(p);
    snprintf(p, sizeof p, "%s/tokenizer_config.json", tmp_dir);
    unlink(p);
    rmdir(tmp_dir);
}

/* ---- tests ------------------------------------------------------------------ */

static void test_load_reads_config_ids(void) {
    CHECK_EQ_INT(tok_vocab_size(tok), 1024);
    CHECK_EQ_INT(tok_bos_id(tok), 1);
    CHECK_EQ_INT(tok_eos_id(tok), 2);
    CHECK(tok_is_special(tok, 0) && tok_is_special(tok, 1) && tok_is_special(tok, 2));
    CHECK(!tok_is_special(tok, 3) && !tok_is_special(tok, 500));
    CHECK(!tok_is_special(tok, -1) && !tok_is_special(tok, 1024));
    CHECK(tok_stream_max_bytes(tok) <= 64);
}

static void test_round_trip_ascii(void) {
    CHECK(round_trips("Hello world"));
    CHECK(round_trips("The quick brown fox jumps over the lazy dog."));
    CHECK(round_trips("x=y+1; (a,b) 3.14 1234567890 #!~`"));
}

static void test_round_trip_spaces(void) {
    const char *s[] = {" leading", "   three leading", "trailing ", "trailing   ",
                       "a  b   c", " ", "   ", "\t tab", "nbsp\xC2\xA0here"};
    for (size_t i = 0; i < sizeof s / sizeof *s; i++) CHECK(round_trips(s[i]));
}

static void test_round_trip_newlines(void) {
    CHECK(round_trips("line one\nline two\n\nthree"));
    CHECK(round_trips("\n"));
    CHECK(round_trips("\n\nx\n"));
    CHECK(round_trips("crlf\r\nend\r\n"));
}

static void test_round_trip_multibyte_utf8(void) {
    CHECK(round_trips("caf\xC3\xA9 na\xC3\xAFve r\xC3\xA9sum\xC3\xA9")); /* café naïve résumé */
    CHECK(round_trips("\xC3\xBC" "ber Stra\xC3\x9F" "e"));                 /* über Straße */
    CHECK(round_trips("\xCE\x96\xCE\xB5\xCF\x8D\xCF\x82 \xCE\xB8\xCE\xB5\xCF\x8C\xCF\x82"));
    CHECK(round_trips("\xE6\x97\xA5\xE6\x9C\xAC\xE8\xAA\x9E"));           /* 日本語 */
    CHECK(round_trips("\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 text"));      /* 한국어 */
}

static void test_round_trip_emoji_byte_fallback(void) {
    CHECK(round_trips("\xF0\x9F\x98\x80"));                               /* 😀 */
    CHECK(round_trips("emoji \xF0\x9F\x98\x80 and \xF0\x9F\x8E\x89\xF0\x9F\x8E\x89"));
    CHECK(round_trips("\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7"));  /* ZWJ sequence */
}

static void test_round_trip_mixed(void) {
    CHECK(round_trips("mixed: caf\xC3\xA9 \xF0\x9F\x98\x80 \xE6\x97\xA5 ok\n  end "));
    CHECK(round_trips("  {\"k\": [1, 2]}\t\xE2\x82\xAC 5\n"));
}

static void test_bos_added_exactly_once(void) {
    int32_t *ids;
    int n = encode(tok, "Hello", true, &ids);
    CHECK(n >= 2);
    CHECK_EQ_INT(ids[0], 1);
    CHECK_EQ_INT(count_id(ids, n, 1), 1);
    CHECK_EQ_INT(count_id(ids, n, 2), 0); /* add_eos_token is false */
    free(ids);
    n = encode(tok, "Hello", false, &ids);
    CHECK_EQ_INT(count_id(ids, n, 1), 0);
    free(ids);
    n = encode(tok, "", true, &ids);
    CHECK_EQ_INT(n, 1);
    CHECK_EQ_INT(ids[0], 1);
    free(ids);
    n = encode(tok, "", false, &ids);
    CHECK_EQ_INT(n, 0);
    CHECK(ids != NULL);
    free(ids);
}

static void test_special_tokens_in_text_become_ids(void) {
    int32_t *ids;
    int n = encode(tok, "a</s>b", true, &ids);
    CHECK_EQ_INT(count_id(ids, n, 2), 1);
    CHECK_EQ_INT(count_id(ids, n, 1), 1);
    char *s = tok_decode(tok, ids, (size_t)n, false, NULL);
    CHECK(strcmp(s, "<s> a</s>b") == 0); /* transformers' decode */
    free(s);
    s = tok_decode(tok, ids, (size_t)n, true, NULL);
    CHECK(strcmp(s, "ab") == 0);
    free(s);
    free(ids);
    n = encode(tok, "x<s>y<unk>", false, &ids);
    CHECK_EQ_INT(count_id(ids, n, 1), 1);
    CHECK_EQ_INT(ids[n - 1], 0);
    free(ids);
}

/* The id whose piece is exactly these bytes, or -1. */
static int32_t id_of_piece(const char *bytes, size_t n) {
    char b[16];
    for (int32_t id = 0; id < tok_vocab_size(tok); id++)
        if (tok_piece_bytes(tok, id, b, sizeof b) == (int)n && !memcmp(b, bytes, n)) return id;
    return -1;
}

/* The byte-fallback piece <0x00> decodes to a NUL byte, which the length counts. */
static void test_decode_length_counts_nul_bytes(void) {
    int32_t ids[3] = {id_of_piece("a", 1), id_of_piece("\0", 1), id_of_piece("b", 1)};
    CHECK(ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0);
    size_t len = 0;
    char *s = tok_decode(tok, ids, 3, true, &len);
    CHECK_EQ_INT(len, 3);
    CHECK(len == 3 && !memcmp(s, "a\0b", 3));
    free(s);
}

static void test_text_starting_with_bos_gets_no_prefix(void) {
    int32_t *a, *b;
    int na = encode(tok, "<s>Hello", false, &a);
    int nb = encode(tok, "a</s>Hello", false, &b); /* "Hello" after a special token */
    CHECK(na >= 2 && nb >= 3);
    CHECK_EQ_INT(a[0], 1);
    CHECK_EQ_INT(b[1], 2);
    CHECK_EQ_INT(na - 1, nb - 2);
    for (int i = 1; i < na && na - 1 == nb - 2; i++) CHECK_EQ_INT(a[i], b[i + 1]);
    char buf[64];
    CHECK(tok_piece_bytes(tok, a[1], buf, sizeof buf) > 0 && buf[0] == 'H');
    free(a);
    free(b);
}

static void test_spiece_underline_in_text_is_a_space(void) {
    int32_t *a, *b;
    int na = encode(tok, "a\xE2\x96\x81" "b", false, &a), nb = encode(tok, "a b", false, &b);
    CHECK_EQ_INT(na, nb);
    CHECK(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    free(a);
    free(b);
}

static void test_invalid_utf8_rejected(void) {
    const char *bad[] = {"\xFF", "ok\xC3", "\xC0\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                         "a\200b", "\xE2\x82"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        int32_t *ids = (int32_t *)&ids;
        sl_err_t err = {{0}};
        CHECK_EQ_INT(tok_encode(tok, bad[i], strlen(bad[i]), true, &ids, &err), -1);
        CHECK(ids == NULL);
        CHECK_STR_CONTAINS(err.msg, "UTF-8");
    }
}

static void test_piece_bytes_of_byte_and_word_pieces(void) {
    char buf[64];
    int32_t f0 = byte_id(0xF0);
    CHECK(f0 >= 0);
    CHECK_EQ_INT(tok_piece_bytes(tok, f0, buf, sizeof buf), 1);
    CHECK((uint8_t)buf[0] == 0xF0);
    int32_t *ids;
    int n = encode(tok, "the", false, &ids);
    CHECK_EQ_INT(n, 1); /* "▁the" is one piece of the tiny vocabulary */
    CHECK_EQ_INT(tok_piece_bytes(tok, ids[0], buf, sizeof buf), 4);
    CHECK(strcmp(buf, " the") == 0);
    CHECK_EQ_INT(tok_piece_bytes(tok, ids[0], buf, 3), 4); /* truncated, NUL-terminated */
    CHECK(strcmp(buf, " t") == 0);
    free(ids);
    CHECK_EQ_INT(tok_piece_bytes(tok, 2, buf, sizeof buf), 4);
    CHECK(strcmp(buf, "</s>") == 0);
    CHECK_EQ_INT(tok_piece_bytes(tok, 1024, buf, sizeof buf), -1);
    CHECK_EQ_INT(tok_piece_bytes(tok, -1, buf, sizeof buf), -1);
}

static void test_stream_holds_back_incomplete_utf8(void) {
    int32_t ids[4] = {byte_id(0xF0), byte_id(0x9F), byte_id(0x98), byte_id(0x80)};
    tok_stream_t st;
    tok_stream_init(&st, true);
    char out[64];
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(tok_stream_push(tok, &st, ids[i], out, sizeof out), 0);
        CHECK(out[0] == '\0');
    }
    CHECK_EQ_INT(tok_stream_push(tok, &st, ids[3], out, sizeof out), 4);
    CHECK(strcmp(out, "\xF0\x9F\x98\x80") == 0);
    CHECK_EQ_INT(tok_stream_flush(&st, out, sizeof out), 0);
}

static void test_stream_replaces_invalid_bytes_like_decode(void) {
    int32_t *a_ids;
    CHECK_EQ_INT(encode(tok, "A", false, &a_ids), 1);
    int32_t ids[4] = {byte_id(0xE2), a_ids[0], byte_id(0xF0), byte_id(0x9F)};
    free(a_ids);
    char *s = stream_all(ids, 4, true);
    char *d = tok_decode(tok, ids, 4, true, NULL);
    /* E2 then " A": E2 is cut short; the trailing F0 9F never completes. */
    CHECK(strcmp(s, "\xEF\xBF\xBD A\xEF\xBF\xBD\xEF\xBF\xBD") == 0);
    CHECK(strcmp(d, "\xEF\xBF\xBD A\xEF\xBF\xBD\xEF\xBF\xBD") == 0);
    free(s);
    free(d);
}

static void test_stream_concatenates_to_decode_with_leading_space(void) {
    const char *pool[] = {"the", " ", "  ", "\n", "caf\xC3\xA9", "\xE6\x97\xA5",
                          "\xF0\x9F\x98\x80", "7", "42", ".", "\xCE\xB8", "a", "</s>", "<s>"};
    char text[512];
    for (int iter = 0; iter < 200; iter++) {
        size_t len = 0;
        int parts = 1 + (int)(test_rng() % 12);
        for (int p = 0; p < parts; p++) {
            const char *s = pool[test_rng() % (sizeof pool / sizeof *pool)];
            memcpy(text + len, s, strlen(s));
            len += strlen(s);
        }
        text[len] = '\0';
        int32_t *ids;
        int n = encode(tok, text, true, &ids);
        if (n < 0) continue;
        char *streamed = stream_all(ids, n, true);
        char *decoded = tok_decode(tok, ids, (size_t)n, true, NULL);
        /* The first kept piece carries the dummy-prefix space that decode drops. */
        bool first_spaced = streamed[0] == ' ';
        bool ok = strcmp(streamed + first_spaced, decoded) == 0 &&
                  (first_spaced || decoded[0] == streamed[0]);
        if (!ok)
            fprintf(stderr, "  \"%s\": stream \"%s\" decode \"%s\"\n", text, streamed, decoded);
        CHECK(ok);
        free(streamed);
        free(decoded);
        free(ids);
    }
}

static void test_stream_keeps_first_space(void) {
    int32_t *ids;
    int n = encode(tok, "Hello world", true, &ids);
    char *s = stream_all(ids, n, true);
    CHECK(strcmp(s, " Hello world") == 0);
    free(s);
    s = stream_all(ids, n, false);
    CHECK(strcmp(s, "<s> Hello world") == 0);
    free(s);
    free(ids);
}

static void test_stream_small_buffer_consumes_nothing(void) {
    tok_stream_t st;
    tok_stream_init(&st, false);
    char out[64];
    CHECK_EQ_INT(tok_stream_push(tok, &st, byte_id(0xF0), out, sizeof out), 0);
    CHECK_EQ_INT(tok_stream_push(tok, &st, byte_id(0x9F), out, 3), -1);
    CHECK_EQ_INT(st.n_pending, 1);
    CHECK_EQ_INT(tok_stream_push(tok, &st, 5000, out, sizeof out), -1);
    CHECK_EQ_INT(tok_stream_flush(&st, out, 2), -1);
    CHECK_EQ_INT(tok_stream_flush(&st, out, sizeof out), 3);
    CHECK(strcmp(out, "\xEF\xBF\xBD") == 0);
}

static const char *legacy_config =
    "{\"add_bos_token\": true, \"legacy\": true, \"bos_token\": \"<s>\","
    " \"eos_token\": {\"content\": \"</s>\", \"special\": true}, \"unk_token\": \"<unk>\"}";

/* legacy: every chunk between special tokens gets sentencepiece's dummy prefix. */
static void test_legacy_config_prefixes_every_chunk(void) {
    sl_err_t err;
    tokenizer_t *leg = variant_load(legacy_config, &err);
    CHECK(leg != NULL);
    if (!leg) {
        variant_remove();
        return;
    }
    int32_t *ids;
    int n = encode(leg, "a</s>b", true, &ids);
    char buf[64];
    CHECK(n >= 4 && ids[0] == 1);
    CHECK(tok_piece_bytes(leg, ids[n - 1], buf, sizeof buf) == 2 && strcmp(buf, " b") == 0);
    char *s = tok_decode(leg, ids, (size_t)n, false, NULL);
    CHECK(strcmp(s, "<s> a</s>b") == 0); /* transformers' legacy decode */
    free(s);
    free(ids);
    n = encode(tok, "a</s>b", true, &ids); /* non-legacy: no space before "b" */
    CHECK(tok_piece_bytes(tok, ids[n - 1], buf, sizeof buf) == 1 && strcmp(buf, "b") == 0);
    free(ids);
    tok_free(leg);
    variant_remove();
}

static void test_missing_config_uses_sentencepiece_ids(void) {
    sl_err_t err;
    tokenizer_t *t = variant_load(NULL, &err);
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ_INT(tok_bos_id(t), 1);
        CHECK_EQ_INT(tok_eos_id(t), 2);
        int32_t *ids;
        int n = encode(t, "x</s>", true, &ids);
        CHECK(n >= 3 && ids[0] == 1 && ids[n - 1] == 2);
        free(ids);
        tok_free(t);
    }
    variant_remove();
}

static void test_added_tokens_strip_and_decode(void) {
    const char *cfg =
        "{\"legacy\": false, \"added_tokens_decoder\": {"
        " \"1024\": {\"content\": \"<|im_end|>\", \"lstrip\": true, \"rstrip\": true,"
        " \"special\": true},"
        " \"1025\": {\"content\": \"[TOOL]\", \"special\": false}}}";
    sl_err_t err;
    tokenizer_t *t = variant_load(cfg, &err);
    CHECK(t != NULL);
    if (!t) {
        variant_remove();
        return;
    }
    CHECK_EQ_INT(tok_vocab_size(t), 1026);
    CHECK(tok_is_special(t, 1024) && !tok_is_special(t, 1025));
    int32_t *a, *b;
    int na = encode(t, "a \n<|im_end|>  b", false, &a), nb = encode(t, "a<|im_end|>b", false, &b);
    CHECK(na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0);
    CHECK_EQ_INT(count_id(a, na, 1024), 1);
    char *s = tok_decode(t, a, (size_t)na, true, NULL);
    CHECK(strcmp(s, "ab") == 0);
    free(s);
    free(a);
    free(b);
    na = encode(t, "x [TOOL] y", true, &a);
    CHECK_EQ_INT(count_id(a, na, 1025), 1);
    s = tok_decode(t, a, (size_t)na, true, NULL);
    CHECK(strcmp(s, "x [TOOL]y") == 0); /* transformers decodes around it, each run stripped */
    free(s);
    free(a);
    tok_free(t);
    variant_remove();
}

static void test_bad_config_fails_with_message(void) {
    sl_err_t err = {{0}};
    CHECK(variant_load("{not json", &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "tokenizer_config.json");
    variant_remove();
    CHECK(tok_load("/nonexistent/model", &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "tokenizer.model");
}

int main(void) {
    test_seed();
    model_dir = getenv("SERVELAB_TEST_TOKENIZER_DIR");
    if (!model_dir) model_dir = "models/tiny";
    sl_err_t err;
    tok = tok_load(model_dir, &err);
    if (!tok) {
        fprintf(stderr, "cannot load the test tokenizer: %s\n", err.msg);
        return 1;
    }
    RUN(test_load_reads_config_ids);
    RUN(test_round_trip_ascii);
    RUN(test_round_trip_spaces);
    RUN(test_round_trip_newlines);
    RUN(test_round_trip_multibyte_utf8);
    RUN(test_round_trip_emoji_byte_fallback);
    RUN(test_round_trip_mixed);
    RUN(test_bos_added_exactly_once);
    RUN(test_special_tokens_in_text_become_ids);
    RUN(test_decode_length_counts_nul_bytes);
    RUN(test_text_starting_with_bos_gets_no_prefix);
    RUN(test_spiece_underline_in_text_is_a_space);
    RUN(test_invalid_utf8_rejected);
    RUN(test_piece_bytes_of_byte_and_word_pieces);
    RUN(test_stream_holds_back_incomplete_utf8);
    RUN(test_stream_replaces_invalid_bytes_like_decode);
    RUN(test_stream_concatenates_to_decode_with_leading_space);
    RUN(test_stream_keeps_first_space);
    RUN(test_stream_small_buffer_consumes_nothing);
    RUN(test_legacy_config_prefixes_every_chunk);
    RUN(test_missing_config_uses_sentencepiece_ids);
    RUN(test_added_tokens_strip_and_decode);
    RUN(test_bad_config_fails_with_message);
    tok_free(tok);
    return test_summary();
}
