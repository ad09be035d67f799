/* test_detok.c - streamed text and stop strings on a real tokenizer.
 *
 * Uses the committed tiny checkpoint's sentencepiece tokenizer (models/tiny:
 * V 1024, byte fallback, bos 1 / eos 2). Byte pieces (<0x61> is "a") build
 * any text one byte per token; real pieces (" time", " wor") put a stop
 * string inside one token. A random test checks every delta against a
 * reference that looks for stop strings in the whole text at once.
 */
#include <stdbool.h>

#include "servelab/detok.h"
#include "test.h"

static tokenizer_t *tok;

static int encode(const char *s, int32_t **ids) {
    sl_err_t err;
    int n = tok_encode(tok, s, strlen(s), false, ids, &err);
    if (n < 0) fprintf(stderr, "  encode \"%s\": %s\n", s, err.msg);
    return n;
}

/* The id of a piece whose bytes are exactly `s`. */
static int32_t piece_id(const char *s) {
    char buf[64];
    for (int32_t id = 3; id < tok_vocab_size(tok); id++)
        if (tok_piece_bytes(tok, id, buf, sizeof buf) == (int)strlen(s) && memcmp(buf, s, strlen(s)) == 0)
            return id;
    return -1;
}

/* Ids of one single-byte piece per byte of `s`. */
static int bytes_to_ids(const char *s, int32_t *ids) {
    int n = 0;
    for (; s[n]; n++) {
        char one[2] = {s[n], 0};
        ids[n] = piece_id(one);
        SL_ASSERT(ids[n] >= 0);
    }
    return n;
}

static bool utf8_ok(const char *str, size_t n) {
    const uint8_t *s = (const uint8_t *)str;
    for (size_t i = 0; i < n;) {
        uint32_t c = s[i], need = c < 0x80 ? 0 : c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 ? 1 : 9;
        if (need == 9 || c > 0xF4 || i + need >= n) return false;
        for (uint32_t k = 1; k <= need; k++)
            if ((s[i + k] & 0xC0) != 0x80) return false;
        i += need + 1;
    }
    return true;
}

/* What the engine does with one sequence: push tokens until a stop string
 * matches, finish otherwise; collect the deltas and check each one. */
typedef struct {
    char text[4096];   /* the deltas joined */
    int stop;          /* stop string index, or -1 */
    int n_pushed;      /* tokens pushed before it ended */
    bool deltas_ok;    /* contiguous, valid UTF-8, held text a prefix of a stop string */
} result_t;

typedef struct {
    char **stop;
    int n_stop;
    bool include, skip_special;
    int min_tokens;
    bool no_finish; /* leave the stream open (to look at what is held) */
} opts_t;

static void take(result_t *r, const detok_t *d, size_t from, size_t to, size_t *expect_from) {
    size_t have = strlen(r->text);
    bool ok = from == *expect_from && to >= from && to <= d->len && utf8_ok(d->text + from, to - from) &&
              have + (to - from) < sizeof r->text;
    if (!ok) fprintf(stderr, "  bad delta [%zu, %zu) after %zu\n", from, to, *expect_from);
    r->deltas_ok &= ok;
    if (ok) memcpy(r->text + have, d->text + from, to - from), r->text[have + to - from] = '\0';
    *expect_from = to;
}

/* The held-back text must be (a proper prefix of) some stop string. */
static bool held_is_stop_prefix(const detok_t *d, const opts_t *o) {
    size_t held = d->len - d->emitted;
    if (held == 0) return true;
    if (o->include) return false; /* nothing is held then */
    for (int i = 0; i < o->n_stop; i++)
        if (strlen(o->stop[i]) > held && memcmp(o->stop[i], d->text + d->emitted, held) == 0) return true;
    return false;
}

static result_t run(const int32_t *ids, int n, const opts_t *o, detok_t *d_out) {
    result_t r = {.stop = -1, .deltas_ok = true};
    detok_t d;
    detok_init(&d, tok, o->skip_special, o->stop, o->n_stop, o->include);
    detok_set_min_tokens(&d, o->min_tokens);
    size_t from, to, expect_from = 0;
    for (int i = 0; i < n && r.stop < 0; i++) {
        r.stop = detok_push(&d, ids[i], &from, &to);
        r.n_pushed = i + 1;
        take(&r, &d, from, to, &expect_from);
        if (r.stop < 0 && !held_is_stop_prefix(&d, o)) {
            fprintf(stderr, "  held back \"%s\" is no stop string's prefix\n", d.text + d.emitted);
            r.deltas_ok = false;
        }
    }
    if (r.stop < 0 && !o->no_finish) {
        detok_finish(&d, &from, &to);
        take(&r, &d, from, to, &expect_from);
    }
    if (r.stop >= 0 || !o->no_finish) r.deltas_ok &= strcmp(r.text, d.text) == 0 && strlen(d.text) == d.len;
    if (d_out)
        *d_out = d;
    else
        detok_free(&d);
    return r;
}

static result_t run_text(const char *s, const opts_t *o) {
    int32_t *ids;
    int n = encode(s, &ids);
    result_t r = run(ids, n, o, NULL);
    free(ids);
    return r;
}

static result_t run_bytes(const char *s, const opts_t *o) {
    int32_t ids[256];
    return run(ids, bytes_to_ids(s, ids), o, NULL);
}

#define EXPECT_TEXT(r, want)                                                                  \
    do {                                                                                      \
        if (strcmp((r).text, (want)) != 0) fprintf(stderr, "  got \"%s\" want \"%s\"\n", (r).text, (want)); \
        CHECK(strcmp((r).text, (want)) == 0);                                                 \
        CHECK((r).deltas_ok);                                                                 \
    } while (0)

/* ---- text ---------------------------------------------------------------------- */

static void test_deltas_concatenate_to_the_decoded_text(void) {
    const char *texts[] = {"Hello world, the quick brown fox.", "Once upon a time\nthere was a little girl",
                           "café 😀 naïve", "tabs\tand  two spaces", "日本語のテキスト"};
    opts_t o = {0};
    for (size_t t = 0; t < sizeof texts / sizeof texts[0]; t++) {
        int32_t *ids;
        int n = encode(texts[t], &ids);
        result_t r = run(ids, n, &o, NULL);
        char *dec = tok_decode(tok, ids, (size_t)n, true, NULL);
        /* The stream keeps the first piece's leading space; decode drops it. */
        bool first_space = r.text[0] == ' ' && dec[0] != ' ';
        if (strcmp(r.text + first_space, dec) != 0) fprintf(stderr, "  \"%s\" vs \"%s\"\n", r.text, dec);
        CHECK(strcmp(r.text + first_space, dec) == 0);
        CHECK(r.deltas_ok);
        CHECK_EQ_INT(r.stop, -1);
        free(dec);
        free(ids);
    }
}

static void test_byte_fallback_emoji_waits_for_its_last_byte(void) {
    const uint8_t emoji[4] = {0xF0, 0x9F, 0x98, 0x80}; /* U+1F600 */
    detok_t d;
    detok_init(&d, tok, true, NULL, 0, false);
    size_t from, to;
    for (int i = 0; i < 4; i++) {
        char one[2] = {(char)emoji[i], 0};
        CHECK_EQ_INT(detok_push(&d, piece_id(one), &from, &to), -1);
        CHECK_EQ_INT(to - from, i < 3 ? 0 : 4);
    }
    CHECK(memcmp(d.text + from, emoji, 4) == 0);
    detok_free(&d);
}

static void test_finish_turns_incomplete_utf8_into_replacement_chars(void) {
    detok_t d;
    detok_init(&d, tok, true, NULL, 0, false);
    size_t from, to;
    detok_push(&d, piece_id("a"), &from, &to);
    detok_push(&d, piece_id("\xF0"), &from, &to);
    detok_push(&d, piece_id("\x9F"), &from, &to);
    CHECK_EQ_INT(to - from, 0);
    detok_finish(&d, &from, &to);
    CHECK(strcmp(d.text + from, "\xEF\xBF\xBD\xEF\xBF\xBD") == 0);
    CHECK_EQ_INT(from, 1);
    detok_finish(&d, &from, &to); /* again: nothing more */
    CHECK_EQ_INT(to - from, 0);
    detok_free(&d);
}

static void test_skip_special_tokens_drops_bos_and_eos(void) {
    int32_t ids[3] = {1, piece_id(" He"), 2};
    opts_t o = {.skip_special = true};
    EXPECT_TEXT(run(ids, 3, &o, NULL), " He");
    o.skip_special = false;
    EXPECT_TEXT(run(ids, 3, &o, NULL), "<s> He</s>");
}

static void test_unknown_id_adds_no_text(void) {
    int32_t ids[3] = {piece_id("a"), 5000, piece_id("b")};
    opts_t o = {0};
    EXPECT_TEXT(run(ids, 3, &o, NULL), "ab");
}

static void test_long_stream_grows_the_buffer(void) {
    detok_t d;
    char *stop[1] = {"xyz"};
    detok_init(&d, tok, true, stop, 1, false);
    size_t from, to, total = 0;
    int32_t a = piece_id("a"), wor = piece_id(" wor");
    for (int i = 0; i < 20000; i++) {
        CHECK(detok_push(&d, i % 3 ? a : wor, &from, &to) == -1);
        total += to - from;
    }
    CHECK_EQ_INT(d.len, 20000 / 3 * 4 + 1 * 4 + 20000 - (20000 / 3 + 1));
    CHECK_EQ_INT(total, d.len);
    detok_free(&d);
}

/* ---- stop strings ---------------------------------------------------------------- */

static void test_stop_string_inside_one_token(void) {
    char *stop[1] = {"im"};
    opts_t o = {.stop = stop, .n_stop = 1};
    result_t r = run_text("Once upon a time there was", &o); /* ... " a" " time" ... */
    EXPECT_TEXT(r, " Once upon a t");
    CHECK_EQ_INT(r.stop, 0);
    CHECK_EQ_INT(r.n_pushed, 6); /* " On" "ce" " up" "on" " a" " time" */
}

static void test_stop_string_split_across_tokens(void) {
    char *stop[1] = {"llo w"}; /* " He" "ll" "o" " wor" "ld" */
    opts_t o = {.stop = stop, .n_stop = 1};
    result_t r = run_text("Hello world", &o);
    EXPECT_TEXT(r, " He");
    CHECK_EQ_INT(r.stop, 0);
    CHECK_EQ_INT(r.n_pushed, 4);
}

static void test_stop_string_in_the_first_token(void) {
    char *stop[1] = {"He"};
    opts_t o = {.stop = stop, .n_stop = 1};
    result_t r = run_text("Hello world", &o);
    EXPECT_TEXT(r, " ");
    CHECK_EQ_INT(r.n_pushed, 1);
    char *stop2[1] = {" He"};
    o.stop = stop2;
    r = run_text("Hello world", &o);
    EXPECT_TEXT(r, "");
    CHECK_EQ_INT(r.stop, 0);
}

static void test_include_stop_str_keeps_it_and_drops_the_rest_of_the_token(void) {
    char *stop[1] = {"wo"}; /* in " wor": the "r" goes */
    opts_t o = {.stop = stop, .n_stop = 1, .include = true};
    result_t r = run_text("Hello world", &o);
    EXPECT_TEXT(r, " Hello wo");
    CHECK_EQ_INT(r.stop, 0);
}

static void test_include_stop_str_holds_nothing_back(void) {
    char *stop[1] = {"abc"};
    int32_t ids[3];
    bytes_to_ids("xab", ids);
    opts_t o = {.stop = stop, .n_stop = 1, .include = true, .no_finish = true};
    EXPECT_TEXT(run(ids, 3, &o, NULL), "xab");
}

static void test_shorter_stop_string_completing_first_wins(void) {
    char *stop[2] = {"abc", "ab"};
    opts_t o = {.stop = stop, .n_stop = 2};
    result_t r = run_bytes("xabcd", &o);
    EXPECT_TEXT(r, "x");
    CHECK_EQ_INT(r.stop, 1);
    CHECK_EQ_INT(r.n_pushed, 3);
    /* The longer one wins when it completes first. */
    char *stop2[2] = {"ab", "xa"};
    o.stop = stop2;
    r = run_bytes("xabcd", &o);
    EXPECT_TEXT(r, "");
    CHECK_EQ_INT(r.stop, 1);
}

static void test_within_one_token_the_stop_ending_first_wins(void) {
    /* " there": "the" ends before "here" (vLLM would take "here", first listed). */
    char *stop[2] = {"here", "the"};
    opts_t o = {.stop = stop, .n_stop = 2};
    int32_t ids[1] = {piece_id(" there")};
    CHECK(ids[0] >= 0);
    result_t r = run(ids, 1, &o, NULL);
    EXPECT_TEXT(r, " ");
    CHECK_EQ_INT(r.stop, 1);
    /* Ending together: the lower index. */
    char *stop2[2] = {"re", "ere"};
    o.stop = stop2;
    r = run(ids, 1, &o, NULL);
    EXPECT_TEXT(r, " the");
    CHECK_EQ_INT(r.stop, 0);
}

static void test_held_back_prefix_is_released_when_no_stop_follows(void) {
    char *stop[1] = {"abc"};
    detok_t d;
    detok_init(&d, tok, true, stop, 1, false);
    const char *in = "xabd", *want[4] = {"x", "", "", "abd"};
    size_t from, to;
    for (int i = 0; i < 4; i++) {
        char one[2] = {in[i], 0};
        CHECK_EQ_INT(detok_push(&d, piece_id(one), &from, &to), -1);
        CHECK(to - from == strlen(want[i]) && memcmp(d.text + from, want[i], to - from) == 0);
    }
    detok_free(&d);
}

static void test_held_back_overlapping_prefix_follows_the_longest(void) {
    /* "aab" with stop "aac": after "aa" both a's wait; "b" releases them. */
    char *stop[1] = {"aac"};
    opts_t o = {.stop = stop, .n_stop = 1, .no_finish = true};
    detok_t d;
    int32_t ids[4];
    bytes_to_ids("aaab", ids);
    result_t r = run(ids, 3, &o, &d);
    EXPECT_TEXT(r, "a"); /* "aa" may still become "aac" */
    detok_free(&d);
    r = run(ids, 4, &o, NULL);
    EXPECT_TEXT(r, "aaab");
    r = run_bytes("aaac", &(opts_t){.stop = stop, .n_stop = 1});
    EXPECT_TEXT(r, "a");
    CHECK_EQ_INT(r.stop, 0);
}

static void test_finish_releases_held_text(void) {
    char *stop[1] = {"abc"};
    opts_t o = {.stop = stop, .n_stop = 1};
    result_t r = run_bytes("xab", &o);
    EXPECT_TEXT(r, "xab");
    CHECK_EQ_INT(r.stop, -1);
}

static void test_min_tokens_ignores_stop_strings_in_early_text(void) {
    /* vLLM looks for stop strings only once more than min_tokens tokens exist,
     * and never again in the text of those first tokens. */
    char *stop[1] = {"ab"};
    opts_t o = {.stop = stop, .n_stop = 1, .min_tokens = 3};
    result_t r = run_bytes("abcd", &o);
    EXPECT_TEXT(r, "abcd");
    CHECK_EQ_INT(r.stop, -1);
    char *stop_a[1] = {"a"};
    o = (opts_t){.stop = stop_a, .n_stop = 1, .min_tokens = 1};
    r = run_bytes("aab", &o);
    EXPECT_TEXT(r, "a");
    CHECK_EQ_INT(r.stop, 0);
    CHECK_EQ_INT(r.n_pushed, 2);
}

static void test_min_tokens_stop_string_across_the_boundary_matches(void) {
    char *stop[1] = {"ab"};
    opts_t o = {.stop = stop, .n_stop = 1, .min_tokens = 2};
    result_t r = run_bytes("xabc", &o);
    EXPECT_TEXT(r, "x");
    CHECK_EQ_INT(r.stop, 0);
    CHECK_EQ_INT(r.n_pushed, 3);
    /* A whole early match that overlaps a later one: "aa" in "xaa" is ignored, then "a" completes "aa" again. */
    char *stop_aa[1] = {"aa"};
    o = (opts_t){.stop = stop_aa, .n_stop = 1, .min_tokens = 3};
    r = run_bytes("xaaa", &o);
    EXPECT_TEXT(r, "xa");
    CHECK_EQ_INT(r.stop, 0);
}

static void test_push_after_stop_adds_nothing(void) {
    char *stop[1] = {"b"};
    detok_t d;
    detok_init(&d, tok, true, stop, 1, false);
    size_t from, to;
    detok_push(&d, piece_id("a"), &from, &to);
    CHECK_EQ_INT(detok_push(&d, piece_id("b"), &from, &to), 0);
    CHECK(d.stopped);
    CHECK_EQ_INT(detok_push(&d, piece_id("c"), &from, &to), -1);
    CHECK(from == to && d.len == 1 && strcmp(d.text, "a") == 0);
    detok_finish(&d, &from, &to);
    CHECK(from == to && d.len == 1);
    detok_free(&d);
}

/* ---- random streams against a whole-text reference --------------------------- */

static void test_random_streams_match_whole_text_reference(void) {
    int32_t *pool;
    int n_pool = encode("The cat sat on the mat. A dog ran after the cat, and the cat ran up a tree! "
                        "Über naïve café ☕ 😀 dogs.\nThen there was silence.",
                        &pool);
    size_t cap = tok_stream_max_bytes(tok);
    int failures = 0, stopped = 0;
    for (int trial = 0; trial < 400; trial++) {
        int32_t ids[48];
        int n = 8 + (int)(test_rng() % 40);
        for (int i = 0; i < n; i++) {
            char b[8];
            do /* any piece but <0x00>: the test joins deltas as C strings */
                ids[i] = test_rng() % 4 ? pool[test_rng() % (uint64_t)n_pool]
                                        : 3 + (int32_t)(test_rng() % (uint64_t)(tok_vocab_size(tok) - 3));
            while (tok_piece_bytes(tok, ids[i], b, sizeof b) == 1 && b[0] == '\0');
        }
        /* The whole text and where each token's text ends. */
        char full[48 * 80] = {0}, piece[128];
        size_t ends[48], len = 0;
        tok_stream_t st;
        tok_stream_init(&st, true);
        for (int i = 0; i < n; i++) {
            int k = tok_stream_push(tok, &st, ids[i], piece, cap);
            memcpy(full + len, piece, (size_t)k);
            ends[i] = len += (size_t)k;
        }
        size_t body = len;
        len += (size_t)tok_stream_flush(&st, full + len, sizeof full - len);
        /* Stop strings: pieces of the text (UTF-8 aligned) and a few fixed ones. */
        char stops[3][16], *sp[3];
        int n_stop = 1 + (int)(test_rng() % 3);
        for (int s = 0; s < n_stop; s++) {
            sp[s] = stops[s];
            if (body == 0 || test_rng() % 5 == 0) {
                snprintf(stops[s], sizeof stops[s], "%s", (const char *[]){"cat", "e", "  ", "t t"}[test_rng() % 4]);
                continue;
            }
            size_t a = test_rng() % body, m = 1 + test_rng() % 6;
            while (a > 0 && (full[a] & 0xC0) == 0x80) a--;
            size_t b = a + m < body ? a + m : body;
            while (b < body && (full[b] & 0xC0) == 0x80) b++;
            if (b - a >= sizeof stops[s]) b = a + 1;
            while (b < body && (full[b] & 0xC0) == 0x80) b++;
            memcpy(stops[s], full + a, b - a);
            stops[s][b - a] = '\0';
        }
        opts_t o = {.stop = sp, .n_stop = n_stop, .include = test_rng() % 2,
                    .min_tokens = (int)(test_rng() % 4), .skip_special = true};
        /* Reference: the first end position, in a token past min_tokens, where a stop string ends. */
        int want_stop = -1, want_pushed = n;
        size_t want_len = len;
        for (size_t e = 1; e <= body && want_stop < 0; e++) {
            int k = 0;
            while (ends[k] < e) k++;
            if (k + 1 <= o.min_tokens) continue;
            for (int s = 0; s < n_stop && want_stop < 0; s++) {
                size_t m = strlen(sp[s]);
                if (m <= e && memcmp(full + e - m, sp[s], m) == 0) {
                    want_stop = s, want_pushed = k + 1;
                    want_len = o.include ? e : e - m;
                }
            }
        }
        result_t r = run(ids, n, &o, NULL);
        bool ok = r.deltas_ok && r.stop == want_stop && r.n_pushed == want_pushed &&
                  strlen(r.text) == want_len && memcmp(r.text, full, want_len) == 0;
        if (!ok && failures++ < 3)
            fprintf(stderr, "  trial %d: stop %d/%d pushed %d/%d text \"%s\" want %zu bytes of \"%s\"\n", trial,
                    r.stop, want_stop, r.n_pushed, want_pushed, r.text, want_len, full);
        CHECK(ok);
        stopped += want_stop >= 0;
    }
    printf("  400 random streams, %d ended by a stop string, %d mismatches\n", stopped, failures);
    free(pool);
}

int main(void) {
    test_seed();
    const char *dir = getenv("SERVELAB_TEST_TOKENIZER_DIR");
    sl_err_t err;
    tok = tok_load(dir ? dir : "models/tiny", &err);
    if (!tok) {
        fprintf(stderr, "cannot load the tokenizer: %s\n", err.msg);
        return 1;
    }
    RUN(test_deltas_concatenate_to_the_decoded_text);
    RUN(test_byte_fallback_emoji_waits_for_its_last_byte);
    RUN(test_finish_turns_incomplete_utf8_into_replacement_chars);
    RUN(test_skip_special_tokens_drops_bos_and_eos);
    RUN(test_unknown_id_adds_no_text);
    RUN(test_long_stream_grows_the_buffer);
    RUN(test_stop_string_inside_one_token);
    RUN(test_stop_string_split_across_tokens);
    RUN(test_stop_string_in_the_first_token);
    RUN(test_include_stop_str_keeps_it_and_drops_the_rest_of_the_token);
    RUN(test_include_stop_str_holds_nothing_back);
    RUN(test_shorter_stop_string_completing_first_wins);
    RUN(test_within_one_token_the_stop_ending_first_wins);
    RUN(test_held_back_prefix_is_released_when_no_stop_follows);
    RUN(test_held_back_overlapping_prefix_follows_the_longest);
    RUN(test_finish_releases_held_text);
    RUN(test_min_tokens_ignores_stop_strings_in_early_text);
    RUN(test_min_tokens_stop_string_across_the_boundary_matches);
    RUN(test_push_after_stop_adds_nothing);
    RUN(test_random_streams_match_whole_text_reference);
    tok_free(tok);
    return test_summary();
}
