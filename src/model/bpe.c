/* bpe.c - byte-level BPE encoding and decoding, as Hugging Face `tokenizers`.
 *
 * encode: added tokens (non-normalized ones, then normalized ones) cut the
 * text; each piece between them is split by the pre-tokenizers, mapped to
 * GPT-2's byte characters and merged. The merge loop is tokenizers' Word::
 * merge_all (a heap of (rank, position), stale entries checked by the merged
 * id, exactly as there) so that ties and odd vocabularies give the same ids.
 * decode: each id's bytes (precomputed at load), then from_utf8_lossy.
 * Loading lives in bpe_load.c.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "bpe_impl.h"
#include "servelab/utf8.h"

/* ---- the ByteLevel byte map ------------------------------------------------ */

static char byte_char_buf[256][3];
const char *bpe_byte_char[256];
static int16_t char_byte[324]; /* code point -> byte for the map's range, -1 elsewhere */
static pthread_once_t byte_map_once = PTHREAD_ONCE_INIT;

/* bytes_to_unicode() of GPT-2: printable Latin-1 bytes stand for themselves,
 * the others (controls, space, 0x7F-0xA0, 0xAD) for U+0100 onwards in order. */
static void byte_map_build(void) {
    int extra = 0;
    for (int c = 0; c < 324; c++) char_byte[c] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
        int cp = keep ? b : 256 + extra++;
        char *s = byte_char_buf[b];
        if (cp < 0x80) {
            s[0] = (char)cp, s[1] = 0;
        } else {
            s[0] = (char)(0xC0 | (cp >> 6)), s[1] = (char)(0x80 | (cp & 0x3F)), s[2] = 0;
        }
        bpe_byte_char[b] = s;
        char_byte[cp] = (int16_t)b;
    }
}

void bpe_byte_map_init(void) { pthread_once(&byte_map_once, byte_map_build); }

int bpe_char_byte(uint32_t cp) { return cp < 324 ? char_byte[cp] : -1; }

/* ---- string map -------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 1099511628211ull;
    return h;
}

static void strmap_grow(strmap_t *m) {
    size_t cap = m->mask ? (m->mask + 1) * 2 : 64;
    free(m->slot);
    m->slot = sl_malloc(cap * sizeof *m->slot);
    memset(m->slot, 0xFF, cap * sizeof *m->slot);
    m->mask = cap - 1;
    for (size_t i = 0; i < m->n; i++) {
        size_t h = hash_bytes(m->arena + m->ent[i].off, m->ent[i].len) & m->mask;
        while (m->slot[h] >= 0) h = (h + 1) & m->mask;
        m->slot[h] = (int32_t)i;
    }
}

static int32_t *strmap_find(const strmap_t *m, const char *s, size_t n) {
    if (!m->mask) return NULL;
    size_t h = hash_bytes(s, n) & m->mask;
    for (;; h = (h + 1) & m->mask) {
        int32_t i = m->slot[h];
        if (i < 0) return &m->slot[h];
        if (m->ent[i].len == n && !memcmp(m->arena + m->ent[i].off, s, n)) return &m->slot[h];
    }
}

/* Inserts or overwrites the id of `s`. */
void strmap_put(strmap_t *m, const char *s, size_t n, int32_t id) {
    int32_t *slot = strmap_find(m, s, n);
    if (slot && *slot >= 0) {
        m->ent[*slot].id = id;
        return;
    }
    if ((m->n + 1) * 2 > m->mask + 1) {
        strmap_grow(m);
        slot = strmap_find(m, s, n);
    }
    if (m->n == m->cap) m->ent = sl_realloc(m->ent, (m->cap = m->cap ? m->cap * 2 : 64) * sizeof *m->ent);
    if (m->arena_n + n + 1 > m->arena_cap)
        m->arena = sl_realloc(m->arena, m->arena_cap = (m->arena_n + n + 1) * 2);
    memcpy(m->arena + m->arena_n, s, n);
    m->arena[m->arena_n + n] = 0;
    m->ent[m->n] = (strent_t){(uint32_t)m->arena_n, (uint32_t)n, id};
    m->arena_n += n + 1;
    *slot = (int32_t)m->n++;
}

int32_t strmap_get(const strmap_t *m, const char *s, size_t n) {
    int32_t *slot = strmap_find(m, s, n);
    return slot && *slot >= 0 ? m->ent[*slot].id : -1;
}

void strmap_free(strmap_t *m) {
    free(m->slot);
    free(m->ent);
    free(m->arena);
    memset(m, 0, sizeof *m);
}

/* ---- growable buffers ----------------------------------------------------------- */

typedef struct {
    int32_t *p;
    size_t n, cap;
} ids_t;

static void ids_put(ids_t *v, int32_t id) {
    if (v->n == v->cap) v->p = sl_realloc(v->p, (v->cap = v->cap ? v->cap * 2 : 64) * sizeof *v->p);
    v->p[v->n++] = id;
}

typedef struct {
    char *p;
    size_t n, cap;
} buf_t;

static void buf_put(buf_t *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) b->p = sl_realloc(b->p, b->cap = (b->n + n + 1) * 2);
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

typedef struct {
    size_t start, end;
} span_t;

typedef struct {
    span_t *p;
    size_t n, cap;
} spans_t;

static void spans_put(spans_t *v, size_t start, size_t end) {
    if (v->n == v->cap) v->p = sl_realloc(v->p, (v->cap = v->cap ? v->cap * 2 : 16) * sizeof *v->p);
    v->p[v->n++] = (span_t){start, end};
}

/* ---- UTF-8 ---------------------------------------------------------------------- */

char *bpe_nfc(const char *s, size_t n, size_t *n_out) {
    utf8proc_uint8_t *out = NULL;
    utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)n, &out,
                                      UTF8PROC_STABLE | UTF8PROC_COMPOSE);
    SL_ASSERT(k >= 0); /* only valid UTF-8 gets here; the other failure is out of memory */
    *n_out = (size_t)k;
    return (char *)out;
}

/* Rust's char::is_whitespace (the White_Space property). */
static bool rust_is_ws(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
           c == 0x205F || c == 0x3000;
}

static uint32_t cp_at(const char *s, size_t n) {
    uint32_t cp = 0;
    size_t bad;
    utf8_decode((const uint8_t *)s, n, &cp, &bad);
    return cp;
}

/* Start of the code point that ends at s[i] (i > 0). */
static size_t cp_start_before(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80);
    return i;
}

/* regex's \w for single_word: letters, digits, underscore (ASCII only here). */
static bool is_word_char(uint32_t c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

/* ---- the BPE model ------------------------------------------------------------- */

static bool pair_get(const bpe_t *bpe, int32_t a, int32_t b, uint32_t *rank, int32_t *id) {
    if (!bpe->pairs) return false;
    uint64_t key = (uint64_t)(uint32_t)a << 32 | (uint32_t)b;
    for (size_t h = (key * 0x9E3779B97F4A7C15ull >> 17) & bpe->pair_mask;; h = (h + 1) & bpe->pair_mask) {
        if (bpe->pairs[h].key == UINT64_MAX) return false;
        if (bpe->pairs[h].key == key) return *rank = bpe->pairs[h].rank, *id = bpe->pairs[h].id, true;
    }
}

typedef struct {
    int32_t id, prev, next;
    bool gone;
} sym_t;

typedef struct {
    uint32_t rank, pos;
    int32_t id;
} merge_t;

static bool merge_less(merge_t a, merge_t b) {
    return a.rank != b.rank ? a.rank < b.rank : a.pos < b.pos;
}

typedef struct {
    sym_t *sym;
    merge_t *heap;
    size_t sym_cap, heap_n, heap_cap;
    buf_t word; /* the byte-level string, for ignore_merges */
} scratch_t;

static void heap_push(scratch_t *w, merge_t m) {
    if (w->heap_n == w->heap_cap)
        w->heap = sl_realloc(w->heap, (w->heap_cap = w->heap_cap ? w->heap_cap * 2 : 64) * sizeof *w->heap);
    size_t i = w->heap_n++;
    while (i > 0 && merge_less(m, w->heap[(i - 1) / 2])) {
        w->heap[i] = w->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    w->heap[i] = m;
}

static merge_t heap_pop(scratch_t *w) {
    merge_t top = w->heap[0], last = w->heap[--w->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= w->heap_n) break;
        if (c + 1 < w->heap_n && merge_less(w->heap[c + 1], w->heap[c])) c++;
        if (!merge_less(w->heap[c], last)) break;
        w->heap[i] = w->heap[c];
        i = c;
    }
    if (w->heap_n) w->heap[i] = last;
    return top;
}

/* BPE of one pre-tokenized split of raw bytes (BPE::tokenize_with_cache). */
static void bpe_word(const bpe_t *bpe, const uint8_t *b, size_t n, scratch_t *w, ids_t *out) {
    if (bpe->ignore_merges) {
        w->word.n = 0;
        for (size_t i = 0; i < n; i++) buf_put(&w->word, bpe_byte_char[b[i]], strlen(bpe_byte_char[b[i]]));
        int32_t id = strmap_get(&bpe->vocab, w->word.p ? w->word.p : "", w->word.n);
        if (id >= 0) return ids_put(out, id);
    }
    if (n > w->sym_cap) w->sym = sl_realloc(w->sym, (w->sym_cap = n * 2) * sizeof *w->sym);
    int32_t n_sym = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = bpe->byte_id[b[i]];
        if (id < 0) id = bpe->unk_id; /* characters missing from the vocabulary */
        if (id < 0) continue;
        w->sym[n_sym] = (sym_t){id, n_sym - 1, -1, false};
        if (n_sym > 0) w->sym[n_sym - 1].next = n_sym;
        n_sym++;
    }
    w->heap_n = 0;
    for (int32_t i = 0; i + 1 < n_sym; i++) {
        merge_t m = {0, (uint32_t)i, 0};
        if (pair_get(bpe, w->sym[i].id, w->sym[i + 1].id, &m.rank, &m.id)) heap_push(w, m);
    }
    while (w->heap_n) {
        merge_t top = heap_pop(w);
        sym_t *cur = &w->sym[top.pos];
        if (cur->gone || cur->next < 0) continue;
        sym_t right = w->sym[cur->next];
        uint32_t rank;
        int32_t id;
        if (!pair_get(bpe, cur->id, right.id, &rank, &id) || id != top.id) continue; /* stale */
        w->sym[cur->next].gone = true;
        cur->id = top.id;
        cur->next = right.next;
        if (right.next >= 0) w->sym[right.next].prev = (int32_t)top.pos;
        if (cur->prev >= 0 && pair_get(bpe, w->sym[cur->prev].id, cur->id, &rank, &id))
            heap_push(w, (merge_t){rank, (uint32_t)cur->prev, id});
        if (cur->next >= 0 && pair_get(bpe, cur->id, w->sym[cur->next].id, &rank, &id))
            heap_push(w, (merge_t){rank, top.pos, id});
    }
    for (int32_t i = 0; i < n_sym; i++)
        if (!w->sym[i].gone) ids_put(out, w->sym[i].id);
}

/* ---- pre-tokenizers ------------------------------------------------------------ */

typedef struct {
    size_t start, end;
    bool match;
} piece_t;

typedef struct {
    piece_t *p;
    size_t n, cap;
} pieces_t;

static void pieces_put(pieces_t *v, size_t start, size_t end, bool match) {
    if (v->n == v->cap) v->p = sl_realloc(v->p, (v->cap = v->cap ? v->cap * 2 : 16) * sizeof *v->p);
    v->p[v->n++] = (piece_t){start, end, match};
}

/* One split through one step (tokenizers' NormalizedString::split with a
 * pattern: matches and the gaps between them, then the behaviour's folding). */
static void pretok_split(const pretok_t *pt, buf_t *wb, span_t sp, pcre2_match_data *md, pieces_t *tmp,
                         spans_t *out, int *failed) {
    if (pt->add_prefix_space && (sp.end == sp.start || wb->p[sp.start] != ' ')) {
        size_t n = sp.end - sp.start, at = wb->n;
        if (at + n + 2 > wb->cap) wb->p = sl_realloc(wb->p, wb->cap = (at + n + 2) * 2);
        wb->p[at] = ' '; /* the copy goes at the end: offsets of other splits stay valid */
        memcpy(wb->p + at + 1, wb->p + sp.start, n);
        wb->n = at + 1 + n;
        wb->p[wb->n] = 0;
        sp = (span_t){at, at + 1 + n};
    }
    if (!pt->re) {
        if (sp.end > sp.start) spans_put(out, sp.start, sp.end);
        return;
    }
    tmp->n = 0;
    const char *s = wb->p + sp.start;
    size_t n = sp.end - sp.start, off = 0, prev = 0;
    while (off <= n) {
        int rc = pcre2_match(pt->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0 && rc != PCRE2_ERROR_NOMATCH) /* JIT stack exhausted: the interpreter uses the heap */
            rc = pcre2_match(pt->re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) { /* a match or memory limit: refuse rather than split differently */
            *failed = rc;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (me == ms) { /* an empty match splits nothing: step one character on */
            if (ms >= n) break;
            size_t k = ms + 1;
            while (k < n && ((uint8_t)s[k] & 0xC0) == 0x80) k++;
            off = k;
            continue;
        }
        if (prev < ms) pieces_put(tmp, prev, ms, false);
        pieces_put(tmp, ms, me, true);
        prev = off = me;
    }
    if (prev < n) pieces_put(tmp, prev, n, false);
    /* Fold by behaviour; `acc` is the tail of `out` this split produced. */
    size_t base = out->n;
    bool prev_match = false;
    if (pt->behavior == SPLIT_MERGED_NEXT) { /* tokenizers folds from the right */
        for (size_t i = tmp->n; i-- > 0;) {
            piece_t p = tmp->p[i];
            if (p.match && !prev_match && out->n > base) out->p[out->n - 1].start = p.start;
            else spans_put(out, p.start, p.end);
            prev_match = p.match;
        }
        for (size_t i = base, j = out->n - 1; i < j; i++, j--) {
            span_t t = out->p[i];
            out->p[i] = out->p[j], out->p[j] = t;
        }
    } else {
        for (size_t i = 0; i < tmp->n; i++) {
            piece_t p = tmp->p[i];
            switch (pt->behavior) {
            case SPLIT_REMOVED:
                if (!p.match) spans_put(out, p.start, p.end);
                break;
            case SPLIT_MERGED_PREV:
                if (p.match && !prev_match && out->n > base) out->p[out->n - 1].end = p.end;
                else spans_put(out, p.start, p.end);
                break;
            case SPLIT_CONTIGUOUS:
                if (p.match == prev_match && out->n > base) out->p[out->n - 1].end = p.end;
                else spans_put(out, p.start, p.end);
                break;
            default:
                spans_put(out, p.start, p.end);
            }
            prev_match = p.match;
        }
    }
    for (size_t i = base; i < out->n; i++) out->p[i].start += sp.start, out->p[i].end += sp.start;
    size_t k = base; /* empty splits vanish */
    for (size_t i = base; i < out->n; i++)
        if (out->p[i].end > out->p[i].start) out->p[k++] = out->p[i];
    out->n = k;
}

typedef struct {
    const bpe_t *bpe;
    ids_t ids;
    scratch_t scratch;
    buf_t wb;
    spans_t a, b;
    pieces_t tmp;
    pcre2_match_data *md;
    int failed; /* a PCRE2 error code, 0 if none */
} enc_t;

/* Text between added tokens: pre-tokenize, then BPE each split. */
static void encode_plain(enc_t *e, const char *s, size_t n) {
    if (!n) return;
    e->wb.n = 0;
    buf_put(&e->wb, s, n);
    e->a.n = 0;
    spans_put(&e->a, 0, n);
    for (int k = 0; k < e->bpe->n_pretok; k++) {
        e->b.n = 0;
        for (size_t i = 0; i < e->a.n; i++)
            pretok_split(&e->bpe->pretok[k], &e->wb, e->a.p[i], e->md, &e->tmp, &e->b, &e->failed);
        spans_t t = e->a;
        e->a = e->b, e->b = t;
    }
    for (size_t i = 0; i < e->a.n; i++)
        bpe_word(e->bpe, (const uint8_t *)e->wb.p + e->a.p[i].start, e->a.p[i].end - e->a.p[i].start,
                 &e->scratch, &e->ids);
}

/* The longest added token of this pass starting at s[i], or NULL. */
static const bpe_added_t *added_at(const bpe_t *bpe, const char *s, size_t i, size_t n, bool normalized) {
    uint8_t c = (uint8_t)s[i];
    if (!(bpe->added_first[c >> 3] & (1u << (c & 7)))) return NULL;
    const bpe_added_t *best = NULL;
    for (const bpe_added_t *a = bpe->added; a < bpe->added + bpe->n_added; a++)
        if (a->normalized == normalized && a->match_len && a->match_len <= n - i && (!best || a->match_len > best->match_len) &&
            !memcmp(s + i, a->match, a->match_len))
            best = a;
    return best;
}

static void encode_added_pass(enc_t *e, const char *s, size_t n, int pass);

/* AddedVocabulary::find_matches over s[0..n) for one pass (0: tokens with
 * normalized false, 1: normalized true); the gaps go to the next pass. */
static void encode_added(enc_t *e, const char *s, size_t n, int pass) {
    if (pass == 2) return encode_plain(e, s, n);
    if (pass == 1 && e->bpe->nfc && n) { /* the normalizer runs on what pass 0 left */
        char *norm = bpe_nfc(s, n, &n);
        encode_added_pass(e, norm, n, 1);
        free(norm);
        return;
    }
    encode_added_pass(e, s, n, pass);
}

static void encode_added_pass(enc_t *e, const char *s, size_t n, int pass) {
    size_t done = 0; /* start_offset: the end of the last token taken */
    for (size_t i = 0; i < n;) {
        const bpe_added_t *a = added_at(e->bpe, s, i, n, pass == 1);
        if (!a) {
            i++;
            continue;
        }
        size_t start = i, stop = i + a->match_len;
        i = stop; /* the matcher goes on after the match, whatever is done with it */
        if (a->single_word) {
            bool left = start == 0 || !is_word_char(cp_at(s + cp_start_before(s, start), n));
            bool right = stop == n || !is_word_char(cp_at(s + stop, n - stop));
            if (!left || !right) continue;
        }
        if (a->lstrip) {
            size_t k = start;
            while (k > 0) {
                size_t j = cp_start_before(s, k);
                if (!rust_is_ws(cp_at(s + j, n - j))) break;
                k = j;
            }
            start = k > done ? k : done;
        }
        if (a->rstrip) {
            while (stop < n) {
                uint32_t cp;
                size_t bad;
                int k = utf8_decode((const uint8_t *)s + stop, n - stop, &cp, &bad);
                if (k <= 0 || !rust_is_ws(cp)) break;
                stop += (size_t)k;
            }
        }
        if (done < start) encode_added(e, s + done, start - done, pass + 1);
        ids_put(&e->ids, a->id);
        done = stop;
        if (i < stop) i = stop;
    }
    if (done < n) encode_added(e, s + done, n - done, pass + 1);
}

int bpe_encode(const bpe_t *bpe, const char *text, size_t len, bool add_special_tokens,
               int32_t **ids_out, size_t *n_out, sl_err_t *err) {
    *ids_out = NULL, *n_out = 0;
    if (!utf8_valid(text, len)) return sl_fail(err, "text is not valid UTF-8");
    enc_t e = {.bpe = bpe};
    e.md = pcre2_match_data_create(1, NULL);
    if (!e.md) return sl_fail(err, "out of memory (PCRE2 match data)");
    if (add_special_tokens)
        for (int i = 0; i < bpe->n_prefix; i++) ids_put(&e.ids, bpe->prefix_ids[i]);
    encode_added(&e, text, len, 0);
    if (add_special_tokens)
        for (int i = 0; i < bpe->n_suffix; i++) ids_put(&e.ids, bpe->suffix_ids[i]);
    pcre2_match_data_free(e.md);
    if (e.failed) {
        PCRE2_UCHAR msg[120];
        pcre2_get_error_message(e.failed, msg, sizeof msg);
        sl_fail(err, "pre-tokenizer regex failed on this text: %s", (char *)msg);
        free(e.ids.p);
        e.ids = (ids_t){0};
    }
    free(e.scratch.sym);
    free(e.scratch.heap);
    free(e.scratch.word.p);
    free(e.wb.p);
    free(e.a.p);
    free(e.b.p);
    free(e.tmp.p);
    if (e.failed) return -1;
    *ids_out = e.ids.p ? e.ids.p : sl_malloc(sizeof(int32_t));
    *n_out = e.ids.n;
    return 0;
}

/* ---- decoding -------------------------------------------------------------------- */

int32_t bpe_vocab_size(const bpe_t *bpe) { return bpe->n_vocab; }

const char *bpe_id_bytes(const bpe_t *bpe, int32_t id, size_t *len) {
    if (id < 0 || id >= bpe->n_vocab) return *len = 0, NULL;
    *len = bpe->text_off[id + 1] - bpe->text_off[id];
    return bpe->text + bpe->text_off[id];
}

bool bpe_is_special(const bpe_t *bpe, int32_t id) {
    return id >= 0 && id < bpe->n_vocab && bpe->special[id];
}

int32_t bpe_token_id(const bpe_t *bpe, const char *s, size_t n) {
    int32_t id = strmap_get(&bpe->added_by, s, n);
    return id >= 0 ? id : strmap_get(&bpe->vocab, s, n);
}

int32_t bpe_template_bos(const bpe_t *bpe) { return bpe->n_prefix ? bpe->prefix_ids[0] : -1; }

char *bpe_decode(const bpe_t *bpe, const int32_t *ids, size_t n, bool skip_special_tokens,
                 size_t *len_out) {
    buf_t raw = {0}, out = {0};
    for (size_t k = 0; k < n; k++) {
        size_t len;
        const char *s = bpe_id_bytes(bpe, ids[k], &len);
        if (!s || (skip_special_tokens && bpe->special[ids[k]])) continue;
        buf_put(&raw, s, len);
    }
    buf_put(&out, "", 0);
    for (size_t i = 0; i < raw.n;) {
        uint32_t cp;
        size_t bad;
        int k = utf8_decode((const uint8_t *)raw.p + i, raw.n - i, &cp, &bad);
        if (k > 0) {
            buf_put(&out, raw.p + i, (size_t)k);
            i += (size_t)k;
        } else {
            buf_put(&out, "\xEF\xBF\xBD", 3);
            i += bad;
        }
    }
    free(raw.p);
    if (len_out) *len_out = out.n;
    return out.p;
}
