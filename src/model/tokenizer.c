/* tokenizer.c - transformers' slow LlamaTokenizer, in C over sentencepiece.
 *
 * Encoding and decoding follow transformers 4.x LlamaTokenizer (tokenize,
 * _tokenize, convert_tokens_to_string, _decode) rule by rule, legacy quirks
 * included, except where it would print U+2581 (piece_decode); the rules are
 * spelled out above tok_encode and tok_decode. Each id's text is precomputed
 * at load, so the per-token paths (tok_piece_bytes, streaming) are a lookup.
 */
#include "servelab/tokenizer.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "servelab/utf8.h"
#include "sp_wrap.h"

#define TOK_SPACE "\xE2\x96\x81" /* U+2581, sentencepiece's space symbol */
#define TOK_FFFD "\xEF\xBF\xBD"  /* U+FFFD REPLACEMENT CHARACTER */
#define TOK_MAX_CONFIG_BYTES (64u << 20)
#define TOK_MAX_ADDED_ID (1 << 24)

/* Per-id flags. NAMED plays transformers' all_special_tokens: bos/eos/unk/pad,
 * additional_special_tokens, and (unlike the slow tokenizer, like the fast ones
 * and vLLM) every added token marked "special": true. */
enum {
    PF_SPECIAL = 1,    /* tok_is_special: control, unknown or NAMED */
    PF_NAMED = 2,      /* in all_special_tokens */
    PF_BREAK = 4,      /* decoded apart from its neighbours ("legacy added tokens") */
    PF_BYTE = 8,       /* <0xNN> byte-fallback piece */
    PF_CONTROL = 16,   /* sentencepiece control piece */
    PF_UNKNOWN = 32,   /* sentencepiece unknown piece */
    PF_SPACE = 64,     /* its token string starts with U+2581 */
    PF_HEAD_UNREG = 128 /* that string minus its U+2581 is no sentencepiece piece */
};

typedef struct {
    char *text; /* content, valid UTF-8 */
    size_t len;
    int32_t id;
    bool lstrip, rstrip, special;
} added_t;

struct tokenizer {
    sp_wrap_t *sp;
    bpe_t *bpe;      /* set instead of sp for a tokenizer.json (byte-level BPE) */
    int32_t n_vocab; /* V: sentencepiece pieces, then added tokens beyond them */
    int32_t n_sp;
    uint32_t *text_off; /* (V+1) offsets of each id's text in `arena` */
    char *arena;
    uint8_t *flags; /* (V) PF_* */
    int32_t bos_id, eos_id, unk_id, pad_id, space_id;
    bool add_bos, add_eos, legacy, add_prefix_space;
    bool strip_bos_ws; /* sentencepiece's decoder drops a leading space (see spdec_t) */
    bool removes_ws;   /* the normalizer has remove_extra_whitespaces */
    added_t *added;
    int n_added;
    uint8_t added_first[32]; /* bitmap of the first bytes of added tokens */
    size_t max_text_bytes;   /* longest non-byte id text */
};

/* ---- UTF-8 ---------------------------------------------------------------- */

/* Python's str.isspace(), which str.strip() uses for lstrip/rstrip. */
static bool py_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- growable buffers ----------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    bool fixed; /* p is the caller's buffer, sized to fit */
} sbuf_t;

static void sb_put(sbuf_t *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        SL_ASSERT(!b->fixed);
        b->cap = (b->n + n + 1) * 2;
        b->p = sl_realloc(b->p, b->cap);
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

typedef struct {
    int32_t *p;
    size_t n, cap;
} ivec_t;

static void iv_put(ivec_t *v, int32_t id) {
    if (v->n == v->cap) {
        v->cap = v->cap ? v->cap * 2 : 64;
        v->p = sl_realloc(v->p, v->cap * sizeof *v->p);
    }
    v->p[v->n++] = id;
}

/* ---- loading -------------------------------------------------------------- */

static added_t *added_find(tokenizer_t *tok, const char *text, size_t len) {
    for (added_t *a = tok->added; a < tok->added + tok->n_added; a++)
        if (a->len == len && !memcmp(a->text, text, len)) return a;
    return NULL;
}

static added_t *added_put(tokenizer_t *tok, const char *text, int32_t id) {
    tok->added = sl_realloc(tok->added, (size_t)(tok->n_added + 1) * sizeof *tok->added);
    tok->added[tok->n_added] = (added_t){.text = sl_strdup(text), .len = strlen(text), .id = id};
    return &tok->added[tok->n_added++];
}

/* A special-token setting: a string, {"content": ...}, or null. */
static const char *json_token_text(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    if (cJSON_IsObject(v)) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
        if (cJSON_IsString(c)) return c->valuestring;
    }
    return NULL;
}

static bool json_bool(const cJSON *root, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* Resolves a named special token (bos/eos/unk/pad) to an id, registering it as
 * an added special token as transformers does. -1 when it is not set or not in
 * the vocabulary (transformers would then grow the vocabulary; we cannot). */
static int32_t named_resolve(tokenizer_t *tok, const char *text, const char *what) {
    if (!text || !*text) return -1;
    added_t *a = added_find(tok, text, strlen(text));
    if (!a) {
        int32_t id = sp_wrap_piece_to_id(tok->sp, text, strlen(text));
        if (id < 0) {
            LOG_WARNING("tokenizer: %s \"%s\" is not in the vocabulary; ignored", what, text);
            return -1;
        }
        a = added_put(tok, text, id);
    }
    a->special = true;
    return a->id;
}

/* tokenizer_config.json's root object, or NULL with *err set. */
static cJSON *read_json_object(const char *path, sl_err_t *err) {
    char *json = sl_read_file(path, TOK_MAX_CONFIG_BYTES, NULL, err);
    if (!json) return NULL;
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        sl_fail(err, "%s: not a JSON object", path);
        return NULL;
    }
    return root;
}

static int config_parse(tokenizer_t *tok, const char *path, sl_err_t *err) {
    cJSON *root = read_json_object(path, err);
    if (!root) return -1;
    tok->add_bos = json_bool(root, "add_bos_token", true);
    tok->add_eos = json_bool(root, "add_eos_token", false);
    tok->legacy = json_bool(root, "legacy", true); /* absent/null: transformers warns, uses true */
    tok->add_prefix_space = json_bool(root, "add_prefix_space", true);

    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "added_tokens_decoder"), *e;
    if (!cJSON_IsObject(dec)) dec = NULL; /* cJSON_ArrayForEach(NULL) is a no-op */
    cJSON_ArrayForEach(e, dec) {
        char *end;
        long id = strtol(e->string, &end, 10);
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (*end || end == e->string || id < 0 || id > TOK_MAX_ADDED_ID || !cJSON_IsString(c) ||
            !c->valuestring[0]) {
            cJSON_Delete(root);
            return sl_fail(err, "%s: bad added_tokens_decoder entry \"%s\"", path, e->string);
        }
        size_t len = strlen(c->valuestring);
        if (utf8_invalid_at(c->valuestring, len) != len) {
            cJSON_Delete(root);
            return sl_fail(err, "%s: added token %ld is not valid UTF-8", path, id);
        }
        added_t *a = added_put(tok, c->valuestring, (int32_t)id);
        a->lstrip = json_bool(e, "lstrip", false);
        a->rstrip = json_bool(e, "rstrip", false);
        a->special = json_bool(e, "special", false);
    }
    const cJSON *extra = cJSON_GetObjectItemCaseSensitive(root, "additional_special_tokens");
    if (!cJSON_IsArray(extra)) extra = NULL;
    cJSON_ArrayForEach(e, extra) named_resolve(tok, json_token_text(e), "additional special token");

    /* Absent keys take LlamaTokenizer's defaults; null means "none". */
    const char *names[4] = {"bos_token", "eos_token", "unk_token", "pad_token"};
    const char *dflt[4] = {"<s>", "</s>", "<unk>", NULL};
    int32_t *ids[4] = {&tok->bos_id, &tok->eos_id, &tok->unk_id, &tok->pad_id};
    for (int i = 0; i < 4; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, names[i]);
        *ids[i] = named_resolve(tok, v ? json_token_text(v) : dflt[i], names[i]);
    }
    cJSON_Delete(root);
    return 0;
}

/* Without tokenizer_config.json: sentencepiece's own bos/eos/unk, legacy. */
static void config_default(tokenizer_t *tok) {
    tok->add_bos = true;
    tok->add_eos = false;
    tok->legacy = true;
    tok->add_prefix_space = true;
    int32_t sp_ids[3] = {sp_wrap_bos_id(tok->sp), sp_wrap_eos_id(tok->sp), sp_wrap_unk_id(tok->sp)};
    int32_t *ids[3] = {&tok->bos_id, &tok->eos_id, &tok->unk_id};
    for (int i = 0; i < 3; i++) {
        size_t n;
        const char *piece = sp_wrap_piece(tok->sp, sp_ids[i], &n);
        *ids[i] = piece ? named_resolve(tok, piece, "special token") : -1;
    }
    tok->pad_id = -1;
}

static void table_put(tokenizer_t *tok, sbuf_t *arena, int32_t id, const char *s, size_t n) {
    tok->text_off[id] = (uint32_t)arena->n;
    sb_put(arena, s, n);
}

/* Builds each id's text and flags. */
static void table_build(tokenizer_t *tok) {
    int32_t V = tok->n_sp;
    for (int i = 0; i < tok->n_added; i++)
        if (tok->added[i].id >= V) V = tok->added[i].id + 1;
    tok->n_vocab = V;
    tok->flags = sl_calloc((size_t)V, 1);
    tok->text_off = sl_calloc((size_t)V + 1, sizeof *tok->text_off);
    const added_t **by_id = sl_calloc((size_t)V, sizeof *by_id);
    for (int i = 0; i < tok->n_added; i++) by_id[tok->added[i].id] = &tok->added[i];

    sbuf_t arena = {0};
    for (int32_t id = 0; id < V; id++) {
        const added_t *a = by_id[id];
        uint8_t f = 0;
        if (id < tok->n_sp) {
            sp_piece_type_t t = sp_wrap_piece_type(tok->sp, id);
            f |= t == SP_PIECE_BYTE ? PF_BYTE : 0;
            f |= t == SP_PIECE_CONTROL ? PF_CONTROL | PF_SPECIAL : 0;
            f |= t == SP_PIECE_UNKNOWN ? PF_UNKNOWN | PF_SPECIAL : 0;
        }
        bool std = id == tok->bos_id || id == tok->eos_id || id == tok->unk_id || id == tok->pad_id;
        f |= a && (a->special || std) ? PF_NAMED | PF_SPECIAL : 0;
        /* transformers' _decode: non-special added tokens, and additional special
         * tokens beyond the sentencepiece vocabulary, are decoded on their own. */
        if (a && (!(f & PF_NAMED) || (id >= tok->n_sp && !std))) f |= PF_BREAK;
        if (a) {
            f |= (a->len >= 3 && !memcmp(a->text, TOK_SPACE, 3)) ? PF_SPACE : 0;
            table_put(tok, &arena, id, a->text, a->len);
        } else if (id >= tok->n_sp) {
            table_put(tok, &arena, id, "", 0); /* a gap in the added ids: no text */
        } else if (f & PF_BYTE) {
            size_t n;
            char byte = (char)strtol(sp_wrap_piece(tok->sp, id, &n) + 3, NULL, 16); /* <0xNN> */
            table_put(tok, &arena, id, &byte, 1);
        } else {
            size_t n;
            const char *piece = sp_wrap_piece(tok->sp, id, &n);
            if (n >= 3 && !memcmp(piece, TOK_SPACE, 3)) {
                f |= PF_SPACE;
                if (sp_wrap_piece_to_id(tok->sp, piece + 3, n - 3) < 0) f |= PF_HEAD_UNREG;
            }
            tok->text_off[id] = (uint32_t)arena.n;
            for (size_t i = 0; i < n;) { /* U+2581 -> ' ' */
                bool sym = i + 3 <= n && !memcmp(piece + i, TOK_SPACE, 3);
                sb_put(&arena, sym ? " " : piece + i, 1);
                i += sym ? 3 : 1;
            }
        }
        tok->flags[id] = f;
        size_t len = arena.n - tok->text_off[id];
        if (!(f & PF_BYTE) && len > tok->max_text_bytes) tok->max_text_bytes = len;
    }
    tok->text_off[V] = (uint32_t)arena.n;
    tok->arena = arena.p ? arena.p : sl_calloc(1, 1);
    free(by_id);
}

/* BOS/EOS of a BPE checkpoint: tokenizer_config.json's bos_token/eos_token;
 * without them, the post-processor's first token is the BOS. */
static int bpe_config(tokenizer_t *tok, const char *model_dir, sl_err_t *err) {
    char path[4096];
    tok->bos_id = bpe_template_bos(tok->bpe);
    tok->eos_id = tok->unk_id = tok->pad_id = -1;
    if (sl_path_join(path, sizeof path, model_dir, "tokenizer_config.json") != 0 ||
        !sl_file_exists(path))
        return 0;
    cJSON *root = read_json_object(path, err);
    if (!root) return -1;
    const char *names[2] = {"bos_token", "eos_token"};
    int32_t *ids[2] = {&tok->bos_id, &tok->eos_id};
    for (int i = 0; i < 2; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(root, names[i]);
        const char *text = v ? json_token_text(v) : NULL;
        if (!text) continue;
        *ids[i] = bpe_token_id(tok->bpe, text, strlen(text));
        if (*ids[i] < 0) LOG_WARNING("tokenizer: %s \"%s\" is not in the vocabulary; ignored", names[i], text);
    }
    cJSON_Delete(root);
    return 0;
}

/* A checkpoint with tokenizer.json and no tokenizer.model: byte-level BPE.
 * The per-id table holds the ByteLevel decoder's bytes of each id. */
static tokenizer_t *bpe_tok_load(const char *model_dir, const char *path, sl_err_t *err) {
    size_t len;
    char *json = sl_read_file(path, TOK_MAX_CONFIG_BYTES, &len, err);
    if (!json) return NULL;
    tokenizer_t *tok = sl_calloc(1, sizeof *tok);
    tok->bpe = bpe_load(json, len, path, err);
    free(json);
    if (!tok->bpe || bpe_config(tok, model_dir, err) != 0) {
        tok_free(tok);
        return NULL;
    }
    int32_t V = tok->n_vocab = bpe_vocab_size(tok->bpe);
    tok->flags = sl_calloc((size_t)V, 1);
    tok->text_off = sl_calloc((size_t)V + 1, sizeof *tok->text_off);
    sbuf_t arena = {0};
    for (int32_t id = 0; id < V; id++) {
        size_t n;
        const char *s = bpe_id_bytes(tok->bpe, id, &n);
        table_put(tok, &arena, id, s, n);
        if (bpe_is_special(tok->bpe, id)) tok->flags[id] = PF_SPECIAL | PF_NAMED;
        if (n > tok->max_text_bytes) tok->max_text_bytes = n;
    }
    tok->text_off[V] = (uint32_t)arena.n;
    tok->arena = arena.p ? arena.p : sl_calloc(1, 1);
    return tok;
}

tokenizer_t *tok_load(const char *model_dir, sl_err_t *err) {
    char path[4096], sp_err[SL_ERR_LEN];
    if (sl_path_join(path, sizeof path, model_dir, "tokenizer.model") != 0) {
        sl_fail(err, "%s: path too long", model_dir);
        return NULL;
    }
    if (!sl_file_exists(path)) {
        char json_path[4096];
        if (sl_path_join(json_path, sizeof json_path, model_dir, "tokenizer.json") == 0 &&
            sl_file_exists(json_path))
            return bpe_tok_load(model_dir, json_path, err);
        sl_fail(err, "%s: not found, nor tokenizer.json (a sentencepiece or byte-level BPE tokenizer "
                "is required)", path);
        return NULL;
    }
    tokenizer_t *tok = sl_calloc(1, sizeof *tok);
    if (!(tok->sp = sp_wrap_load(path, sp_err, sizeof sp_err))) {
        sl_fail(err, "%s: %s", path, sp_err);
        tok_free(tok);
        return NULL;
    }
    tok->n_sp = sp_wrap_piece_count(tok->sp);
    tok->space_id = sp_wrap_piece_to_id(tok->sp, TOK_SPACE, 3);
    if (sl_path_join(path, sizeof path, model_dir, "tokenizer_config.json") != 0 ||
        !sl_file_exists(path)) {
        config_default(tok);
    } else if (config_parse(tok, path, err) != 0) {
        tok_free(tok);
        return NULL;
    }
    bool removes_ws = tok->removes_ws = sp_wrap_removes_extra_whitespaces(tok->sp);
    if (!tok->legacy && removes_ws)
        LOG_WARNING("tokenizer: %s collapses extra whitespace; non-legacy encoding assumes it "
                    "does not and may differ from transformers", model_dir);
    /* The non-legacy processor has add_dummy_prefix off (spdec_t). */
    tok->strip_bos_ws = removes_ws || (tok->legacy && sp_wrap_adds_dummy_prefix(tok->sp));
    for (int i = 0; i < tok->n_added; i++) {
        uint8_t c = (uint8_t)tok->added[i].text[0];
        tok->added_first[c >> 3] |= (uint8_t)(1u << (c & 7));
    }
    table_build(tok);
    return tok;
}

void tok_free(tokenizer_t *tok) {
    if (!tok) return;
    if (tok->sp) sp_wrap_free(tok->sp);
    bpe_free(tok->bpe);
    for (int i = 0; i < tok->n_added; i++) free(tok->added[i].text);
    free(tok->added);
    free(tok->text_off);
    free(tok->arena);
    free(tok->flags);
    free(tok);
}

int32_t tok_vocab_size(const tokenizer_t *tok) { return tok->n_vocab; }
int32_t tok_bos_id(const tokenizer_t *tok) { return tok->bos_id; }
int32_t tok_eos_id(const tokenizer_t *tok) { return tok->eos_id; }

bool tok_is_special(const tokenizer_t *tok, int32_t id) {
    return id >= 0 && id < tok->n_vocab && (tok->flags[id] & PF_SPECIAL);
}

static const char *id_text(const tokenizer_t *tok, int32_t id, size_t *len) {
    *len = tok->text_off[id + 1] - tok->text_off[id];
    return tok->arena + tok->text_off[id];
}

/* ---- encoding ------------------------------------------------------------- */

/* The longest added token at text[i..n), or NULL. */
static const added_t *added_match(const tokenizer_t *tok, const char *text, size_t i, size_t n) {
    uint8_t c = (uint8_t)text[i];
    if (!(tok->added_first[c >> 3] & (1u << (c & 7)))) return NULL;
    const added_t *best = NULL;
    for (int k = 0; k < tok->n_added; k++) {
        const added_t *a = &tok->added[k];
        if (a->len <= n - i && (!best || a->len > best->len) && !memcmp(text + i, a->text, a->len))
            best = a;
    }
    return best;
}

typedef struct {
    size_t start, end;    /* byte range in the text */
    const added_t *added; /* NULL for text to give to sentencepiece */
} chunk_t;

static size_t skip_space_left(const char *s, size_t start, size_t end) {
    uint32_t cp;
    while (start < end) {
        int k = utf8_decode((const uint8_t *)s + start, end - start, &cp, NULL);
        if (k <= 0 || !py_isspace(cp)) break;
        start += (size_t)k;
    }
    return start;
}

static size_t skip_space_right(const char *s, size_t start, size_t end) {
    uint32_t cp;
    size_t last = start; /* end of the last non-space character */
    for (size_t i = start; i < end;) {
        int k = utf8_decode((const uint8_t *)s + i, end - i, &cp, NULL);
        if (k <= 0) k = 1;
        i += (size_t)k;
        if (!py_isspace(cp)) last = i;
    }
    return last;
}

/* Splits text on added tokens (leftmost, then longest, as transformers' Trie)
 * and applies their lstrip/rstrip to the neighbouring text. */
static size_t text_split(const tokenizer_t *tok, const char *text, size_t n, chunk_t **out) {
    size_t n_chunks = 0, cap = 8, last = 0;
    chunk_t *c = sl_malloc(cap * sizeof *c);
    for (size_t i = 0; i < n;) {
        const added_t *a = added_match(tok, text, i, n);
        if (!a) {
            i++;
            continue;
        }
        if (n_chunks + 2 > cap) c = sl_realloc(c, (cap *= 2) * sizeof *c);
        if (i > last) c[n_chunks++] = (chunk_t){last, i, NULL};
        c[n_chunks++] = (chunk_t){i, i + a->len, a};
        i = last = i + a->len;
    }
    if (n_chunks + 1 > cap) c = sl_realloc(c, (cap + 1) * sizeof *c);
    if (n > last) c[n_chunks++] = (chunk_t){last, n, NULL};
    for (size_t k = 0; k < n_chunks; k++) {
        if (!c[k].added) continue;
        if (c[k].added->rstrip && k + 1 < n_chunks && !c[k + 1].added)
            c[k + 1].start = skip_space_left(text, c[k + 1].start, c[k + 1].end);
        if (c[k].added->lstrip && k > 0 && !c[k - 1].added)
            c[k - 1].end = skip_space_right(text, c[k - 1].start, c[k - 1].end);
    }
    *out = c;
    return n_chunks;
}

/* Encoding rules (transformers LlamaTokenizer.tokenize / _tokenize):
 *  - the text is split on added tokens' contents, leftmost-longest; a token
 *    with rstrip eats the whitespace (Python str.isspace) to its right, one
 *    with lstrip the whitespace to its left; chunks left empty vanish;
 *  - legacy=true: every text chunk is encoded with the model's own processor,
 *    so each gets a dummy-prefix space;
 *  - legacy=false: U+2581 in the text becomes ' ', then "▁" is put in front of
 *    the whole text (if add_prefix_space, the default) before splitting, and
 *    chunks are encoded without dummy prefix. If that leaves a lone "▁" token
 *    right before a special token (text starting with "<s>"), it is dropped.
 *    transformers encodes chunks that start with a space as "<unk>"+chunk and
 *    cuts the "<unk>" pieces off; with remove_extra_whitespaces off (Llama,
 *    Mistral) that is the plain encoding, which is what we do;
 *  - add_special_tokens: BOS first if add_bos_token, EOS last if add_eos_token.
 * Added tokens whose content starts with U+2581 or has single_word set are
 * not given transformers' special treatment. */
int tok_encode(const tokenizer_t *tok, const char *text, size_t len, bool add_special_tokens,
               int32_t **ids_out, sl_err_t *err) {
    *ids_out = NULL;
    size_t bad = utf8_invalid_at(text, len);
    if (bad != len) return sl_fail(err, "text is not valid UTF-8 (at byte %zu)", bad);
    if (tok->bpe) {
        size_t n;
        if (bpe_encode(tok->bpe, text, len, add_special_tokens, ids_out, &n, err) != 0) return -1;
        if (n > INT_MAX) {
            free(*ids_out);
            *ids_out = NULL;
            return sl_fail(err, "text is too long: %zu tokens", n);
        }
        return (int)n;
    }
    ivec_t ids = {0};
    if (add_special_tokens && tok->add_bos && tok->bos_id >= 0) iv_put(&ids, tok->bos_id);
    char *buf = NULL;
    const char *src = text;
    size_t n = len;
    if (!tok->legacy && len > 0) {
        sbuf_t b = {0};
        if (tok->add_prefix_space) sb_put(&b, TOK_SPACE, 3);
        for (size_t i = 0; i < len;) {
            bool sym = i + 3 <= len && !memcmp(text + i, TOK_SPACE, 3);
            sb_put(&b, sym ? " " : text + i, 1);
            i += sym ? 3 : 1;
        }
        src = buf = b.p;
        n = b.n;
    }
    chunk_t *chunks;
    size_t n_chunks = text_split(tok, src, n, &chunks);
    int rc = 0;
    for (size_t k = 0; k < n_chunks && rc == 0; k++) {
        if (chunks[k].added) {
            iv_put(&ids, chunks[k].added->id);
            continue;
        }
        if (chunks[k].end <= chunks[k].start) continue;
        int32_t *piece_ids;
        size_t n_pieces;
        rc = sp_wrap_encode(tok->sp, tok->legacy, src + chunks[k].start,
                            chunks[k].end - chunks[k].start, &piece_ids, &n_pieces);
        /* transformers drops a lone "▁" that precedes a special token */
        if (!tok->legacy && k == 0 && n_pieces == 1 && piece_ids[0] == tok->space_id &&
            n_chunks > 1 && chunks[1].added && (tok->flags[chunks[1].added->id] & PF_NAMED))
            n_pieces = 0;
        for (size_t j = 0; rc == 0 && j < n_pieces; j++) iv_put(&ids, piece_ids[j]);
        free(piece_ids);
    }
    free(chunks);
    free(buf);
    if (rc != 0) {
        free(ids.p);
        return sl_fail(err, "sentencepiece failed to encode the text");
    }
    if (add_special_tokens && tok->add_eos && tok->eos_id >= 0) iv_put(&ids, tok->eos_id);
    if (ids.n > INT_MAX) {
        free(ids.p);
        return sl_fail(err, "text too long: %zu tokens", ids.n);
    }
    *ids_out = ids.p ? ids.p : sl_malloc(sizeof(int32_t));
    return (int)ids.n;
}

/* ---- decoding ------------------------------------------------------------- */

/* Appends `raw` to `out`, each byte that starts no valid UTF-8 sequence
 * replaced by U+FFFD (sentencepiece's rule), or with `merge` each maximal
 * invalid subpart (Rust's from_utf8_lossy, the BPE decoder's rule). With
 * `hold`, a valid but unfinished sequence at the end is not emitted; its
 * length is returned. */
static size_t utf8_sanitize(sbuf_t *out, const char *raw, size_t n, bool hold, bool merge) {
    uint32_t cp;
    size_t bad;
    for (size_t i = 0; i < n;) {
        int k = utf8_decode((const uint8_t *)raw + i, n - i, &cp, &bad);
        if (k == 0 && hold) return n - i;
        if (k <= 0) {
            sb_put(out, TOK_FFFD, 3);
            i += merge ? bad : 1;
        } else {
            sb_put(out, raw + i, (size_t)k);
            i += (size_t)k;
        }
    }
    return 0;
}

/* The state of one sentencepiece Decode() call (sentencepiece_processor.cc):
 * while `bos_ws`, a piece's leading space is dropped (only when the normalizer
 * adds a dummy prefix or removes extra whitespace); it ends once a piece had
 * its space dropped (`seen`; never with remove_extra_whitespaces, which drops
 * every leading space) or the text is no longer `empty`. */
typedef struct {
    bool bos_ws, seen, empty;
} spdec_t;

static spdec_t spdec_start(const tokenizer_t *tok) {
    return (spdec_t){tok->strip_bos_ws, false, true};
}

/* One piece of a Decode() call. `head_cut`: transformers already cut the
 * leading U+2581 of this, the run's first token, and hands sentencepiece the
 * rest as a piece string. If that is no piece ("▁▁▁" of "▁▁▁▁"), sentencepiece
 * prints it verbatim, U+2581 included, so transformers 4.x decodes "   " to
 * "▁▁▁". We print spaces there: our one deliberate deviation. */
static void piece_decode(const tokenizer_t *tok, sbuf_t *raw, int32_t id, bool head_cut,
                         spdec_t *d) {
    uint8_t f = tok->flags[id];
    size_t n;
    const char *s = id_text(tok, id, &n);
    if (f & PF_CONTROL) return; /* invisible */
    if (f & PF_BYTE) {
        sb_put(raw, s, n);
        d->empty = false;
        return;
    }
    if (d->seen || !d->empty) d->bos_ws = false;
    d->seen = false;
    if (f & PF_UNKNOWN) {
        s = " \xE2\x81\x87 ", n = 5; /* " ⁇ ", sentencepiece's unknown surface */
    } else if (head_cut) {
        s++, n--;
    }
    if (!(f & PF_UNKNOWN) && !(head_cut && (f & PF_HEAD_UNREG)) && d->bos_ws && n > 0 &&
        s[0] == ' ') {
        s++, n--;
        d->seen = !tok->removes_ws;
    }
    sb_put(raw, s, n);
    d->empty = d->empty && n == 0;
}

/* Decoding rules (transformers _decode with spaces_between_special_tokens and
 * clean_up_tokenization_spaces off, then LlamaTokenizer.convert_tokens_to_string):
 *  - skip_special_tokens drops the NAMED tokens (bos/eos/unk/pad, special added);
 *  - non-special added tokens print their content and split the rest into
 *    runs, each decoded on its own as follows;
 *  - the first token of a run loses its leading U+2581 (add_prefix_space, the
 *    default): "▁Hello▁world" -> "Hello world", for legacy true and false;
 *  - special tokens print their content; if the run starts with one, a space
 *    goes before its second token when that lacks a leading U+2581;
 *  - pieces between special tokens go through sentencepiece's decoder. With
 *    legacy=true (dummy prefix on) it drops the leading space of its first
 *    non-control piece, and a space goes in front of the pieces' text when a
 *    special token ends them: "<s>▁a</s>▁b" -> "<s> a</s>b";
 *  - U+2581 -> ' ', byte pieces -> bytes, invalid UTF-8 -> U+FFFD per byte.
 * Ids out of range are ignored. */
char *tok_decode(const tokenizer_t *tok, const int32_t *ids, size_t n, bool skip_special_tokens,
                 size_t *len_out) {
    if (tok->bpe) return bpe_decode(tok->bpe, ids, n, skip_special_tokens, len_out);
    sbuf_t raw = {0}, out = {0};
    size_t run_i = 0;     /* position in the current run */
    size_t seg_start = 0; /* where the text of the current sentencepiece Decode() starts */
    bool prev_named = false;
    spdec_t d = spdec_start(tok);
    for (size_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        if (id < 0 || id >= tok->n_vocab) continue;
        uint8_t f = tok->flags[id];
        size_t len;
        const char *s = id_text(tok, id, &len);
        if (skip_special_tokens && (f & PF_NAMED)) continue;
        if (f & PF_BREAK) {
            sb_put(&raw, s, len);
            run_i = 0, prev_named = false, d = spdec_start(tok), seg_start = raw.n;
            continue;
        }
        if (f & PF_NAMED) {
            if (!prev_named && run_i != 0 && tok->legacy) { /* before the segment's text */
                sb_put(&raw, " ", 1);
                memmove(raw.p + seg_start + 1, raw.p + seg_start, raw.n - 1 - seg_start);
                raw.p[seg_start] = ' ';
            }
            sb_put(&raw, s, len);
            prev_named = true, d = spdec_start(tok), seg_start = raw.n;
        } else {
            if (prev_named && run_i == 1 && tok->add_prefix_space && !(f & PF_SPACE))
                sb_put(&raw, " ", 1);
            bool head_cut = run_i == 0 && tok->add_prefix_space && (f & PF_SPACE);
            piece_decode(tok, &raw, id, head_cut, &d);
            prev_named = false;
        }
        run_i++;
    }
    sb_put(&out, "", 0);
    utf8_sanitize(&out, raw.p, raw.n, false, false);
    free(raw.p);
    if (len_out) *len_out = out.n;
    return out.p;
}

int tok_piece_bytes(const tokenizer_t *tok, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= tok->n_vocab) return -1;
    size_t n;
    const char *s = id_text(tok, id, &n);
    if (cap) {
        size_t m = n < cap - 1 ? n : cap - 1;
        memcpy(buf, s, m);
        buf[m] = '\0';
    }
    return (int)n;
}

/* ---- streaming ------------------------------------------------------------ */

size_t tok_stream_max_bytes(const tokenizer_t *tok) {
    /* 3 held bytes may each become U+FFFD, then the piece (a lone byte may too;
     * every byte of a BPE piece may). */
    if (tok->bpe) return 9 + 3 * (tok->max_text_bytes > 1 ? tok->max_text_bytes : 1) + 1;
    return 9 + (tok->max_text_bytes > 3 ? tok->max_text_bytes : 3) + 1;
}

void tok_stream_init(tok_stream_t *s, bool skip_special_tokens) {
    memset(s, 0, sizeof *s);
    s->skip_special_tokens = skip_special_tokens;
}

int tok_stream_push(const tokenizer_t *tok, tok_stream_t *s, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= tok->n_vocab || cap == 0) return -1;
    out[0] = '\0';
    if (s->skip_special_tokens && (tok->flags[id] & PF_SPECIAL)) return 0;
    size_t len;
    const char *text = id_text(tok, id, &len);
    /* Held bytes may become U+FFFD; the piece is valid UTF-8 unless a byte
     * (sentencepiece) or any BPE piece (each of its bytes may be invalid). */
    size_t need = 3 * (size_t)s->n_pending + ((tok->flags[id] & PF_BYTE) ? 3 : tok->bpe ? 3 * len : len) + 1;
    if (cap < need) return -1;
    char local[128];
    sbuf_t joined = {local, 0, sizeof local, true};
    if ((size_t)s->n_pending + len + 1 > sizeof local) joined = (sbuf_t){0};
    sb_put(&joined, s->pending, (size_t)s->n_pending);
    sb_put(&joined, text, len);
    sbuf_t o = {out, 0, cap, true};
    s->merge_invalid = tok->bpe != NULL;
    size_t held = utf8_sanitize(&o, joined.p, joined.n, true, s->merge_invalid);
    SL_ASSERT(held < sizeof s->pending);
    memcpy(s->pending, joined.p + joined.n - held, held);
    s->n_pending = (int)held;
    if (joined.p != local) free(joined.p);
    return (int)o.n;
}

int tok_stream_flush(tok_stream_t *s, char *out, size_t cap) {
    if (cap < 3 * (size_t)s->n_pending + 1) return -1;
    int n = 0;
    for (int i = 0; i < s->n_pending; i++, n += 3) memcpy(out + n, TOK_FFFD, 3);
    if (s->merge_invalid && n) n = 3; /* held bytes are one valid prefix: one U+FFFD */
    out[n] = '\0';
    s->n_pending = 0;
    return n;
}
