/* test_bpe.c - byte-level BPE tokenizers against Hugging Face `tokenizers`.
 *
 * tests/data/bpe/<name>/ holds a tokenizer.json trained by tools/bpe-goldens
 * in one real checkpoint's configuration (smollm2: the real SmolLM2
 * tokenizer, rebuilt from its GGUF), and goldens.jsonl: strings with the
 * ids and decoded text the `tokenizers` package gave (add_special_tokens off,
 * and on for every 20th), and random id sequences with their decodes (bytes
 * that are not UTF-8, ids out of range). Each must match exactly through
 * tok_encode / tok_decode, and streaming detokenization must give the same
 * text without ever emitting half a UTF-8 character.
 */
#define _POSIX_C_SOURCE 200809L /* mkdtemp */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <unistd.h>

#include "bpe.h"
#include "servelab/tokenizer.h"
#include "test.h"

static bool ids_equal(const cJSON *arr, const int32_t *ids, int n) {
    if (!cJSON_IsArray(arr) || cJSON_GetArraySize(arr) != n) return false;
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) if ((int32_t)e->valuedouble != ids[i++]) return false;
    return true;
}

static int32_t *ids_of(const cJSON *arr, int *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) ids[i++] = (int32_t)e->valuedouble;
    return ids;
}

/* Whether s[0..n) is valid UTF-8 with no unfinished sequence. */
static bool utf8_complete(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        size_t k = c < 0x80 ? 1 : c >= 0xC2 && c < 0xE0 ? 2 : c >= 0xE0 && c < 0xF0 ? 3 : c >= 0xF0 && c < 0xF5 ? 4 : 0;
        if (!k || i + k > n) return false;
        for (size_t j = 1; j < k; j++)
            if (((uint8_t)s[i + j] & 0xC0) != 0x80) return false;
        i += k;
    }
    return true;
}

/* Streams `ids` one at a time; every piece must be complete UTF-8 and the
 * whole must equal `want`. */
static bool stream_matches(const tokenizer_t *tok, const int32_t *ids, int n, bool skip, const char *want,
                           size_t want_len) {
    size_t cap = tok_stream_max_bytes(tok), total = 0;
    char *piece = malloc(cap), *all = malloc(cap * ((size_t)n + 1) + 16);
    tok_stream_t st;
    tok_stream_init(&st, skip);
    bool ok = true;
    for (int i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= tok_vocab_size(tok)) continue; /* decode ignores these */
        int k = tok_stream_push(tok, &st, ids[i], piece, cap);
        if (k < 0 || !utf8_complete(piece, (size_t)k)) ok = false;
        if (k > 0) memcpy(all + total, piece, (size_t)k), total += (size_t)k;
    }
    int k = tok_stream_flush(&st, piece, cap);
    if (k > 0) memcpy(all + total, piece, (size_t)k), total += (size_t)k;
    ok = ok && total == want_len && !memcmp(all, want, total);
    free(piece);
    free(all);
    return ok;
}

/* A golden decode: the string under `key`, or the hex UTF-8 under key+"x"
 * (texts holding NUL). Malloc'd, its length in *len. */
static char *golden_text(const cJSON *row, const char *key, const char *dflt, size_t dflt_len, size_t *len) {
    char hex_key[8];
    snprintf(hex_key, sizeof hex_key, "%sx", key);
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(row, key);
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(row, hex_key);
    const char *src = cJSON_IsString(s) ? s->valuestring : dflt;
    size_t n = cJSON_IsString(s) ? strlen(src) : dflt_len;
    if (cJSON_IsString(x)) {
        n = strlen(x->valuestring) / 2;
        char *out = malloc(n + 1);
        for (size_t i = 0; i < n; i++) {
            unsigned v;
            sscanf(x->valuestring + 2 * i, "%2x", &v);
            out[i] = (char)v;
        }
        return *len = n, out;
    }
    char *out = malloc(n + 1);
    memcpy(out, src, n);
    return *len = n, out;
}

static bool decode_matches(const tokenizer_t *tok, const int32_t *ids, int n, bool skip, const char *want,
                           size_t want_len) {
    size_t len;
    char *got = tok_decode(tok, ids, (size_t)n, skip, &len);
    bool ok = len == want_len && !memcmp(got, want, len);
    free(got);
    return ok;
}

/* Checks every golden of tests/data/bpe/<name>; returns how many rows matched. */
static int check_goldens(const char *name) {
    char dir[256], path[300];
    snprintf(dir, sizeof dir, "tests/data/bpe/%s", name);
    snprintf(path, sizeof path, "%s/goldens.jsonl", dir);
    sl_err_t err;
    tokenizer_t *tok = tok_load(dir, &err);
    if (!tok) fprintf(stderr, "  %s: %s\n", dir, err.msg);
    CHECK(tok != NULL);
    char *text = sl_read_file(path, 64u << 20, NULL, &err);
    CHECK(text != NULL);
    if (!tok || !text) return free(text), tok_free(tok), 0;
    int n_rows = 0, n_ok = 0, n_reported = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(row, "t");
        const cJSON *dec = cJSON_GetObjectItemCaseSensitive(row, "dec");
        if (!cJSON_IsString(t) && !cJSON_IsArray(dec)) { /* the header line */
            cJSON_Delete(row);
            continue;
        }
        n_rows++;
        bool ok = true;
        int n;
        int32_t *ids;
        if (cJSON_IsString(t)) {
            const cJSON *want = cJSON_GetObjectItemCaseSensitive(row, "ids");
            const cJSON *want_sp = cJSON_GetObjectItemCaseSensitive(row, "ids_sp");
            n = tok_encode(tok, t->valuestring, strlen(t->valuestring), false, &ids, &err);
            ok = n >= 0 && ids_equal(want, ids, n);
            free(ids);
            if (want_sp) {
                n = tok_encode(tok, t->valuestring, strlen(t->valuestring), true, &ids, &err);
                ok = ok && n >= 0 && ids_equal(want_sp, ids, n);
                free(ids);
            }
            ids = ids_of(want, &n);
        } else {
            ids = ids_of(dec, &n);
        }
        size_t n_d, n_ds;
        const char *t_text = cJSON_IsString(t) ? t->valuestring : "";
        char *want_d = golden_text(row, "d", t_text, strlen(t_text), &n_d);
        char *want_ds = golden_text(row, "ds", want_d, n_d, &n_ds);
        ok = ok && decode_matches(tok, ids, n, false, want_d, n_d) &&
             decode_matches(tok, ids, n, true, want_ds, n_ds) && stream_matches(tok, ids, n, false, want_d, n_d) &&
             stream_matches(tok, ids, n, true, want_ds, n_ds);
        free(want_d);
        free(want_ds);
        free(ids);
        if (ok) n_ok++;
        else if (n_reported++ < 5) fprintf(stderr, "  %s: mismatch on %s\n", name, line);
        cJSON_Delete(row);
    }
    printf("  %s: %d of %d goldens match tokenizers\n", name, n_ok, n_rows);
    CHECK(n_rows >= 2000);
    CHECK_EQ_INT(n_ok, n_rows);
    free(text);
    tok_free(tok);
    return n_ok;
}

static void test_gpt2_bytelevel_matches_tokenizers(void) { check_goldens("gpt2"); }
static void test_llama3_split_ignore_merges_template_matches_tokenizers(void) { check_goldens("llama3"); }
static void test_smollm_digits_bytelevel_matches_tokenizers(void) { check_goldens("smollm"); }
static void test_prefix_space_lstrip_rstrip_matches_tokenizers(void) { check_goldens("prefix"); }

static void test_qwen2_nfc_split_matches_tokenizers(void) { check_goldens("qwen2"); }

/* The real SmolLM2-135M-Instruct tokenizer (vocab 49152), rebuilt from its GGUF. */
static void test_smollm2_real_vocabulary_matches_tokenizers(void) { check_goldens("smollm2"); }

static void test_bos_eos_come_from_tokenizer_config(void) {
    sl_err_t err;
    tokenizer_t *tok = tok_load("tests/data/bpe/smollm", &err);
    CHECK(tok != NULL);
    if (!tok) return;
    CHECK_EQ_INT(tok_bos_id(tok), 1); /* <|im_start|> */
    CHECK_EQ_INT(tok_eos_id(tok), 2); /* <|im_end|> */
    CHECK(tok_is_special(tok, 2));
    CHECK(!tok_is_special(tok, 100));
    char buf[32];
    CHECK_EQ_INT(tok_piece_bytes(tok, 2, buf, sizeof buf), 10);
    CHECK(!strcmp(buf, "<|im_end|>"));
    tok_free(tok);
}

static void test_special_tokens_inside_text_become_their_ids(void) {
    sl_err_t err;
    tokenizer_t *tok = tok_load("tests/data/bpe/smollm", &err);
    CHECK(tok != NULL);
    if (!tok) return;
    const char *s = "<|im_start|>user\nhi<|im_end|>";
    int32_t *ids;
    int n = tok_encode(tok, s, strlen(s), false, &ids, &err);
    CHECK(n >= 3);
    if (n >= 3) CHECK(ids[0] == 1 && ids[n - 1] == 2);
    char *back = tok_decode(tok, ids, (size_t)n, true, NULL);
    CHECK(!strcmp(back, "user\nhi"));
    free(back);
    free(ids);
    tok_free(tok);
}

static void test_invalid_utf8_text_is_refused(void) {
    sl_err_t err;
    tokenizer_t *tok = tok_load("tests/data/bpe/gpt2", &err);
    CHECK(tok != NULL);
    if (!tok) return;
    int32_t *ids;
    CHECK_EQ_INT(tok_encode(tok, "a\xC3(", 3, false, &ids, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "UTF-8");
    tok_free(tok);
}

/* Partial UTF-8 at the end of a stream is one U+FFFD, as from_utf8_lossy. */
static void test_stream_flush_gives_one_replacement_per_partial_sequence(void) {
    sl_err_t err;
    tokenizer_t *tok = tok_load("tests/data/bpe/gpt2", &err);
    CHECK(tok != NULL);
    if (!tok) return;
    int32_t lead = -1; /* the token of the lone byte 0xE2 */
    for (int32_t id = 0; id < tok_vocab_size(tok) && lead < 0; id++) {
        char b[8];
        if (tok_piece_bytes(tok, id, b, sizeof b) == 1 && (uint8_t)b[0] == 0xE2) lead = id;
    }
    CHECK(lead >= 0);
    tok_stream_t st;
    tok_stream_init(&st, false);
    char out[256];
    CHECK_EQ_INT(tok_stream_push(tok, &st, lead, out, sizeof out), 0);
    CHECK_EQ_INT(tok_stream_flush(&st, out, sizeof out), 3);
    CHECK(!strcmp(out, "\xEF\xBF\xBD"));
    tok_free(tok);
}

/* Copies `src` to dir/name. */
static bool copy_file(const char *src, const char *dir, const char *name) {
    sl_err_t err;
    size_t n;
    char *data = sl_read_file(src, 64u << 20, &n, &err), path[256];
    if (!data) return false;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    bool ok = f && fwrite(data, 1, n, f) == n;
    if (f) fclose(f);
    free(data);
    return ok;
}

/* tokenizer.model wins when both files are there; tokenizer.json alone is BPE. */
static void test_tokenizer_model_wins_over_tokenizer_json(void) {
    char dir[] = "/tmp/servelab_bpe_XXXXXX", path[256];
    CHECK(mkdtemp(dir) != NULL);
    CHECK(copy_file("tests/data/bpe/gpt2/tokenizer.json", dir, "tokenizer.json"));
    sl_err_t err;
    tokenizer_t *tok = tok_load(dir, &err);
    CHECK(tok && tok_vocab_size(tok) == 1200);
    tok_free(tok);
    CHECK(copy_file("models/tiny/tokenizer.model", dir, "tokenizer.model"));
    tok = tok_load(dir, &err);
    CHECK(tok && tok_vocab_size(tok) != 1200); /* sentencepiece's vocabulary */
    tok_free(tok);
    const char *names[] = {"tokenizer.json", "tokenizer.model"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        unlink(path);
    }
    CHECK(!tok_load(dir, &err));
    CHECK_STR_CONTAINS(err.msg, "nor tokenizer.json");
    rmdir(dir);
}

static const char MINI[] =
    "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[\"a b\"]},"
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
    "\"decoder\":{\"type\":\"ByteLevel\"}%s}";

static bpe_t *mini(const char *extra, sl_err_t *err) {
    char json[1024];
    snprintf(json, sizeof json, MINI, extra);
    return bpe_load(json, strlen(json), "t.json", err);
}

static void test_unsupported_tokenizer_json_is_refused_with_its_name(void) {
    sl_err_t err;
    bpe_t *b = mini("", &err);
    CHECK(b != NULL);
    bpe_free(b);
    CHECK(!mini(",\"normalizer\":{\"type\":\"NFKC\"}", &err));
    CHECK_STR_CONTAINS(err.msg, "normalizer \"NFKC\"");
    char json[] = "{\"model\":{\"type\":\"WordPiece\",\"vocab\":{}}}";
    CHECK(!bpe_load(json, strlen(json), "t.json", &err));
    CHECK_STR_CONTAINS(err.msg, "WordPiece");
    char bad_merge[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a z\"]},"
                       "\"pre_tokenizer\":{\"type\":\"ByteLevel\"},\"decoder\":{\"type\":\"ByteLevel\"}}";
    CHECK(!bpe_load(bad_merge, strlen(bad_merge), "t.json", &err));
    CHECK_STR_CONTAINS(err.msg, "merge 0");
    CHECK(!bpe_load("{", 1, "t.json", &err));
    CHECK_STR_CONTAINS(err.msg, "t.json: ");
}

static void test_merges_apply_by_rank(void) {
    sl_err_t err;
    bpe_t *b = mini("", &err);
    CHECK(b != NULL);
    if (!b) return;
    int32_t *ids;
    size_t n;
    CHECK_EQ_INT(bpe_encode(b, "abab", 4, false, &ids, &n, &err), 0);
    CHECK(n == 2 && ids[0] == 2 && ids[1] == 2);
    free(ids);
    bpe_free(b);
}

int main(void) {
    RUN(test_gpt2_bytelevel_matches_tokenizers);
    RUN(test_llama3_split_ignore_merges_template_matches_tokenizers);
    RUN(test_smollm_digits_bytelevel_matches_tokenizers);
    RUN(test_prefix_space_lstrip_rstrip_matches_tokenizers);
    RUN(test_qwen2_nfc_split_matches_tokenizers);
    RUN(test_smollm2_real_vocabulary_matches_tokenizers);
    RUN(test_bos_eos_come_from_tokenizer_config);
    RUN(test_tokenizer_model_wins_over_tokenizer_json);
    RUN(test_special_tokens_inside_text_become_their_ids);
    RUN(test_invalid_utf8_text_is_refused);
    RUN(test_stream_flush_gives_one_replacement_per_partial_sequence);
    RUN(test_unsupported_tokenizer_json_is_refused_with_its_name);
    RUN(test_merges_apply_by_rank);
    return test_summary();
}
