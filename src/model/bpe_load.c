/* bpe_load.c - reads a Hugging Face tokenizer.json into a bpe_t.
 *
 * Takes what GPT-2, Llama-3, Qwen2 and SmolLM files hold: the NFC normalizer, a BPE model
 * (vocab, merges as "a b" strings or ["a", "b"] pairs, ignore_merges), added
 * tokens, the ByteLevel / Split / Digits / Sequence pre-tokenizers, the
 * ByteLevel and TemplateProcessing post-processors and the ByteLevel decoder.
 * Anything else that would change the ids is refused with a message naming
 * it, rather than encoded differently from `tokenizers`.
 */
#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "bpe_impl.h"
#include "servelab/utf8.h"

#define BPE_MAX_ID (1 << 24)

/* The GPT-2 pattern ByteLevel splits with when use_regex is set. */
static const char GPT2_REGEX[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* An object's "type", for dispatch and for error messages (which stay one
 * line: a type with control characters is shown as "?"). */
static const char *type_of(const cJSON *o) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(o, "type");
    if (!cJSON_IsString(t)) return "";
    for (const char *c = t->valuestring; *c; c++)
        if ((uint8_t)*c < 0x20 || *c == 0x7F) return "?";
    return t->valuestring;
}

static bool jbool(const cJSON *o, const char *key, bool dflt) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

static bool is_set(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]) &&
           !(cJSON_IsNumber(v) && v->valuedouble == 0) && !cJSON_IsFalse(v);
}

/* NFC, or a Sequence of just NFC. */
static bool is_nfc(const cJSON *n) {
    if (!strcmp(type_of(n), "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        return cJSON_GetArraySize(list) == 1 && is_nfc(cJSON_GetArrayItem(list, 0));
    }
    return !strcmp(type_of(n), "NFC");
}

static int regex_add(bpe_t *bpe, const char *name, const char *pattern, bool literal,
                     split_behavior_t behavior, bool prefix_space, sl_err_t *err) {
    int code;
    PCRE2_SIZE at;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &code, &at, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return sl_fail(err, "%s: pre-tokenizer regex: %s at offset %zu", name, (char *)msg, (size_t)at);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* the interpreter is the fallback */
    bpe->pretok = sl_realloc(bpe->pretok, (size_t)(bpe->n_pretok + 1) * sizeof *bpe->pretok);
    bpe->pretok[bpe->n_pretok++] = (pretok_t){re, behavior, prefix_space};
    return 0;
}

static int pretok_parse(bpe_t *bpe, const cJSON *p, const char *name, bool *byte_level, sl_err_t *err) {
    const char *t = type_of(p);
    if (*byte_level) return sl_fail(err, "%s: a pre-tokenizer after ByteLevel is not supported", name);
    if (!strcmp(t, "Sequence")) {
        const cJSON *e, *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return sl_fail(err, "%s: Sequence without pretokenizers", name);
        cJSON_ArrayForEach(e, list) if (pretok_parse(bpe, e, name, byte_level, err)) return -1;
        return 0;
    }
    if (!strcmp(t, "ByteLevel")) {
        *byte_level = true;
        bool prefix = jbool(p, "add_prefix_space", true);
        if (!jbool(p, "use_regex", true)) {
            bpe->pretok = sl_realloc(bpe->pretok, (size_t)(bpe->n_pretok + 1) * sizeof *bpe->pretok);
            bpe->pretok[bpe->n_pretok++] = (pretok_t){NULL, SPLIT_ISOLATED, prefix};
            return 0;
        }
        return regex_add(bpe, name, GPT2_REGEX, false, SPLIT_ISOLATED, prefix, err);
    }
    if (!strcmp(t, "Digits"))
        return regex_add(bpe, name, jbool(p, "individual_digits", false) ? "\\p{N}" : "\\p{N}+", false,
                         SPLIT_ISOLATED, false, err);
    if (!strcmp(t, "Split")) {
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
        const cJSON *str = cJSON_GetObjectItemCaseSensitive(pat, "String");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext",
                                      "Contiguous"};
        int b = -1;
        for (int i = 0; i < 5 && cJSON_IsString(beh); i++)
            if (!strcmp(beh->valuestring, names[i])) b = i;
        if (b < 0) return sl_fail(err, "%s: Split with an unknown behavior", name);
        if (jbool(p, "invert", false)) return sl_fail(err, "%s: Split with invert is not supported", name);
        if (cJSON_IsString(re)) return regex_add(bpe, name, re->valuestring, false, b, false, err);
        if (cJSON_IsString(str) && str->valuestring[0])
            return regex_add(bpe, name, str->valuestring, true, b, false, err);
        return sl_fail(err, "%s: Split without a Regex or String pattern", name);
    }
    return sl_fail(err, "%s: pre-tokenizer \"%s\" is not supported", name, t);
}

/* TemplateProcessing's "single": the special tokens before and after $A. */
static int post_parse(bpe_t *bpe, const cJSON *p, const char *name, sl_err_t *err) {
    if (!p || cJSON_IsNull(p)) return 0;
    const char *t = type_of(p);
    if (!strcmp(t, "ByteLevel")) return 0; /* offsets only */
    if (!strcmp(t, "Sequence")) {
        const cJSON *e, *list = cJSON_GetObjectItemCaseSensitive(p, "processors");
        cJSON_ArrayForEach(e, list) if (post_parse(bpe, e, name, err)) return -1;
        return 0;
    }
    if (strcmp(t, "TemplateProcessing"))
        return sl_fail(err, "%s: post-processor \"%s\" is not supported", name, t);
    const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single"), *e;
    const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
    bool after = false;
    cJSON_ArrayForEach(e, single) {
        if (cJSON_GetObjectItemCaseSensitive(e, "Sequence")) {
            after = true;
            continue;
        }
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
        const cJSON *sid = cJSON_GetObjectItemCaseSensitive(st, "id");
        const cJSON *def = cJSON_IsString(sid) ? cJSON_GetObjectItemCaseSensitive(specials, sid->valuestring) : NULL;
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids"), *v;
        if (!cJSON_IsArray(ids)) return sl_fail(err, "%s: TemplateProcessing token without ids", name);
        cJSON_ArrayForEach(v, ids) {
            if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble >= BPE_MAX_ID)
                return sl_fail(err, "%s: TemplateProcessing id out of range", name);
            int32_t **arr = after ? &bpe->suffix_ids : &bpe->prefix_ids;
            int *n = after ? &bpe->n_suffix : &bpe->n_prefix;
            *arr = sl_realloc(*arr, (size_t)(*n + 1) * sizeof **arr);
            (*arr)[(*n)++] = (int32_t)v->valuedouble;
        }
    }
    return 0;
}

static int decoder_check(const cJSON *d, const char *name, sl_err_t *err) {
    const char *t = type_of(d);
    if (!strcmp(t, "Sequence")) { /* a Sequence of one ByteLevel is ByteLevel */
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(d, "decoders");
        if (cJSON_GetArraySize(list) == 1) return decoder_check(cJSON_GetArrayItem(list, 0), name, err);
    }
    if (!strcmp(t, "ByteLevel")) return 0;
    return sl_fail(err, "%s: decoder \"%s\" is not supported (ByteLevel is)", name, t);
}

/* One merge: "a b" or ["a", "b"]. */
static int merge_add(bpe_t *bpe, const cJSON *m, uint32_t rank, sl_err_t *err, const char *name) {
    char *buf = NULL;
    const char *a, *b;
    size_t na, nb;
    if (cJSON_IsString(m)) {
        const char *sp = strchr(m->valuestring, ' ');
        if (!sp || strchr(sp + 1, ' ')) return sl_fail(err, "%s: merge %u is not \"a b\"", name, rank);
        a = m->valuestring, na = (size_t)(sp - a), b = sp + 1, nb = strlen(b);
    } else if (cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
               cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
        a = cJSON_GetArrayItem(m, 0)->valuestring, na = strlen(a);
        b = cJSON_GetArrayItem(m, 1)->valuestring, nb = strlen(b);
    } else {
        return sl_fail(err, "%s: merge %u is not a pair of strings", name, rank);
    }
    buf = sl_malloc(na + nb + 1);
    memcpy(buf, a, na), memcpy(buf + na, b, nb);
    int32_t ia = strmap_get(&bpe->vocab, a, na), ib = strmap_get(&bpe->vocab, b, nb);
    int32_t id = strmap_get(&bpe->vocab, buf, na + nb);
    free(buf);
    if (ia < 0 || ib < 0 || id < 0)
        return sl_fail(err, "%s: merge %u names a token not in the vocabulary", name, rank);
    uint64_t key = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ib;
    size_t h = (key * 0x9E3779B97F4A7C15ull >> 17) & bpe->pair_mask;
    while (bpe->pairs[h].key != UINT64_MAX && bpe->pairs[h].key != key) h = (h + 1) & bpe->pair_mask;
    bpe->pairs[h] = (pairent_t){key, rank, id}; /* a repeated pair: the last one wins */
    return 0;
}

static int model_parse(bpe_t *bpe, const cJSON *m, const char *name, sl_err_t *err) {
    if (!cJSON_IsObject(m) || (cJSON_GetObjectItemCaseSensitive(m, "type") && strcmp(type_of(m), "BPE")))
        return sl_fail(err, "%s: model \"%s\" is not supported (BPE is)", name, type_of(m));
    static const char *refused[] = {"continuing_subword_prefix", "end_of_word_suffix", "byte_fallback",
                                    "dropout", "fuse_unk"};
    for (int i = 0; i < 5; i++)
        if (is_set(m, refused[i])) return sl_fail(err, "%s: BPE with %s is not supported", name, refused[i]);
    bpe->ignore_merges = jbool(m, "ignore_merges", false);
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(m, "vocab"), *e;
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(m, "merges");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges))
        return sl_fail(err, "%s: BPE model without vocab or merges", name);
    cJSON_ArrayForEach(e, vocab) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= BPE_MAX_ID ||
            e->valuedouble != (int32_t)e->valuedouble)
            return sl_fail(err, "%s: vocab entry with a bad id", name);
        int32_t id = (int32_t)e->valuedouble;
        strmap_put(&bpe->vocab, e->string, strlen(e->string), id);
        if (id >= bpe->n_vocab) bpe->n_vocab = id + 1;
    }
    size_t n_merges = (size_t)cJSON_GetArraySize(merges), cap = 16;
    while (cap < n_merges * 2) cap *= 2;
    bpe->pairs = sl_malloc(cap * sizeof *bpe->pairs);
    memset(bpe->pairs, 0xFF, cap * sizeof *bpe->pairs);
    bpe->pair_mask = cap - 1;
    uint32_t rank = 0;
    cJSON_ArrayForEach(e, merges) if (merge_add(bpe, e, rank++, err, name)) return -1;
    const cJSON *unk = cJSON_GetObjectItemCaseSensitive(m, "unk_token");
    bpe->unk_id = cJSON_IsString(unk) ? strmap_get(&bpe->vocab, unk->valuestring, strlen(unk->valuestring)) : -1;
    for (int b = 0; b < 256; b++)
        bpe->byte_id[b] = strmap_get(&bpe->vocab, bpe_byte_char[b], strlen(bpe_byte_char[b]));
    return 0;
}

static int added_parse(bpe_t *bpe, const cJSON *list, const char *name, sl_err_t *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= BPE_MAX_ID ||
            !cJSON_IsString(c) || !c->valuestring[0])
            return sl_fail(err, "%s: bad added token", name);
        bpe->added = sl_realloc(bpe->added, (size_t)(bpe->n_added + 1) * sizeof *bpe->added);
        bpe_added_t *a = &bpe->added[bpe->n_added++];
        *a = (bpe_added_t){.text = sl_strdup(c->valuestring), .len = strlen(c->valuestring),
                           .id = (int32_t)id->valuedouble};
        a->single_word = jbool(e, "single_word", false);
        a->lstrip = jbool(e, "lstrip", false);
        a->rstrip = jbool(e, "rstrip", false);
        a->special = jbool(e, "special", false);
        a->normalized = jbool(e, "normalized", !a->special);
        if (!utf8_valid(a->text, a->len)) return sl_fail(err, "%s: added token %d is not UTF-8", name, a->id);
        a->match = a->text, a->match_len = a->len;
        if (a->normalized && bpe->nfc) /* matched in normalized text: normalized too */
            a->match = bpe_nfc(a->text, a->len, &a->match_len);
        strmap_put(&bpe->added_by, a->text, a->len, a->id);
        if (a->match != a->text) strmap_put(&bpe->added_by, a->match, a->match_len, a->id);
        if (a->match_len) bpe->added_first[(uint8_t)a->match[0] >> 3] |= (uint8_t)(1u << ((uint8_t)a->match[0] & 7));
        if (a->id >= bpe->n_vocab) bpe->n_vocab = a->id + 1;
    }
    return 0;
}

/* The ByteLevel decoder's bytes for a token string: each character's byte,
 * or the string's own UTF-8 if any character is outside the map. */
static void token_bytes(const char *s, size_t n, char *out, size_t *n_out) {
    size_t k = 0;
    for (size_t i = 0; i < n;) {
        uint8_t c = (uint8_t)s[i];
        uint32_t cp;
        int len = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (len == 1) cp = c;
        else if (len == 2 && i + 1 < n) cp = (uint32_t)(c & 0x1F) << 6 | ((uint8_t)s[i + 1] & 0x3F);
        else cp = UINT32_MAX;
        int b = bpe_char_byte(cp);
        if (b < 0) {
            memcpy(out, s, n);
            *n_out = n;
            return;
        }
        out[k++] = (char)b;
        i += (size_t)len;
    }
    *n_out = k;
}

static void table_build(bpe_t *bpe) {
    int32_t V = bpe->n_vocab;
    const char **str = sl_calloc((size_t)V, sizeof *str);
    uint32_t *len = sl_calloc((size_t)V, sizeof *len);
    for (size_t i = 0; i < bpe->vocab.n; i++) {
        str[bpe->vocab.ent[i].id] = bpe->vocab.arena + bpe->vocab.ent[i].off;
        len[bpe->vocab.ent[i].id] = bpe->vocab.ent[i].len;
    }
    bpe->special = sl_calloc((size_t)V, 1);
    for (int i = 0; i < bpe->n_added; i++) { /* id_to_token asks the added tokens first */
        bpe_added_t *a = &bpe->added[i]; /* tokenizers gives a normalized token its normalized text */
        str[a->id] = a->match, len[a->id] = (uint32_t)a->match_len;
    }
    for (int i = 0; i < bpe->n_added; i++) { /* skip_special_tokens goes by the token's text */
        const bpe_added_t *a = &bpe->added[i];
        if (!a->special) continue;
        bpe->special[a->id] = 1;
        int32_t vid = strmap_get(&bpe->vocab, a->match, a->match_len);
        if (vid >= 0 && len[vid] == a->match_len && !memcmp(str[vid], a->match, a->match_len)) bpe->special[vid] = 1;
    }
    size_t total = 0;
    for (int32_t id = 0; id < V; id++) total += len[id];
    bpe->text = sl_malloc(total + 1);
    bpe->text_off = sl_malloc(((size_t)V + 1) * sizeof *bpe->text_off);
    size_t at = 0;
    for (int32_t id = 0; id < V; id++) {
        bpe->text_off[id] = (uint32_t)at;
        size_t n = 0;
        if (str[id]) token_bytes(str[id], len[id], bpe->text + at, &n);
        at += n;
    }
    bpe->text_off[V] = (uint32_t)at;
    free(str);
    free(len);
}

bpe_t *bpe_load(const char *json, size_t len, const char *name, sl_err_t *err) {
    bpe_byte_map_init();
    cJSON *root = cJSON_ParseWithLength(json, len);
    bpe_t *bpe = sl_calloc(1, sizeof *bpe);
    bpe->unk_id = -1;
    bool byte_level = false;
    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *dec = cJSON_GetObjectItemCaseSensitive(root, "decoder");
    int rc = 0;
    if (!cJSON_IsObject(root)) rc = sl_fail(err, "%s: not a JSON object", name);
    else if (norm && !cJSON_IsNull(norm) && !(bpe->nfc = is_nfc(norm)))
        rc = sl_fail(err, "%s: normalizer \"%s\" is not supported (NFC is)", name, type_of(norm));
    else if (model_parse(bpe, cJSON_GetObjectItemCaseSensitive(root, "model"), name, err) ||
             added_parse(bpe, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"), name, err) ||
             (pre && !cJSON_IsNull(pre) && pretok_parse(bpe, pre, name, &byte_level, err)) ||
             post_parse(bpe, cJSON_GetObjectItemCaseSensitive(root, "post_processor"), name, err) ||
             decoder_check(dec, name, err))
        rc = -1;
    else if (!byte_level)
        rc = sl_fail(err, "%s: no ByteLevel pre-tokenizer (only byte-level BPE is supported)", name);
    for (int i = 0; rc == 0 && i < bpe->n_prefix + bpe->n_suffix; i++) {
        int32_t id = i < bpe->n_prefix ? bpe->prefix_ids[i] : bpe->suffix_ids[i - bpe->n_prefix];
        if (id >= bpe->n_vocab) rc = sl_fail(err, "%s: post-processor id %d beyond the vocabulary", name, id);
    }
    cJSON_Delete(root);
    if (rc == 0 && bpe->n_vocab == 0) rc = sl_fail(err, "%s: empty vocabulary", name);
    if (rc != 0) {
        bpe_free(bpe);
        return NULL;
    }
    table_build(bpe);
    return bpe;
}

void bpe_free(bpe_t *bpe) {
    if (!bpe) return;
    strmap_free(&bpe->vocab);
    strmap_free(&bpe->added_by);
    free(bpe->pairs);
    for (int i = 0; i < bpe->n_pretok; i++) pcre2_code_free(bpe->pretok[i].re);
    free(bpe->pretok);
    for (int i = 0; i < bpe->n_added; i++) {
        if (bpe->added[i].match != bpe->added[i].text) free(bpe->added[i].match);
        free(bpe->added[i].text);
    }
    free(bpe->added);
    free(bpe->prefix_ids);
    free(bpe->suffix_ids);
    free(bpe->text_off);
    free(bpe->text);
    free(bpe->special);
    free(bpe);
}
