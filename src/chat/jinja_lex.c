/* jinja_lex.c - template source -> tokens, following jinja2's lexer rule for rule.
 *
 * Whitespace handling is where templates most often differ from transformers, so this
 * mirrors jinja2.lexer exactly: newlines are normalized to "\n" and one trailing newline
 * is dropped (keep_trailing_newline=False); "{%-"/"{{-"/"{#-" strip the whitespace before
 * the tag, "-%}"/"-}}"/"-#}" the whitespace after; trim_blocks drops the first newline
 * after a block or comment tag; lstrip_blocks drops spaces and tabs between the start of
 * a line and a block or comment tag ("{%+" opts out). Block ends are only recognized
 * when brackets inside the tag are balanced, as in jinja2. Also here: the parse arena.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* ---- arena ---------------------------------------------------------------- */

typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jchunk_t;

struct jarena {
    jchunk_t *head;
};

jarena_t *jarena_new(void) { return sl_calloc(1, sizeof(jarena_t)); }

void jarena_free(jarena_t *a) {
    if (!a) return;
    for (jchunk_t *c = a->head, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(a);
}

void *jarena_alloc(jarena_t *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (!a->head || a->head->cap - a->head->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        jchunk_t *c = sl_malloc(sizeof(jchunk_t) + cap);
        c->used = 0;
        c->cap = cap;
        c->next = a->head;
        a->head = c;
    }
    void *p = a->head->data + a->head->used;
    a->head->used += n;
    memset(p, 0, n);
    return p;
}

jv_t jarena_str(jarena_t *a, const char *s, size_t len) {
    jstr_t *o = jarena_alloc(a, sizeof(jstr_t) + len + 1);
    o->h.rc = -1;
    o->h.kind = JV_STR;
    o->len = len;
    if (len) memcpy(o->s, s, len);
    o->s[len] = '\0';
    /* Counted now: constants are shared by concurrent renders, which must not write them. */
    for (size_t i = 0; i < len; i++) o->nchars += ((unsigned char)s[i] & 0xC0) != 0x80;
    jv_t v = {.t = JV_STR};
    v.u.o = &o->h;
    return v;
}

/* ---- lexer state ------------------------------------------------------------ */

typedef struct {
    jarena_t *a;
    const char *src;
    size_t len, pos;
    jtok_t *toks;
    int n, cap;
    sl_err_t *err;
    bool failed;
    bool line_starting;
    size_t track_pos; /* line/col are known up to here */
    int track_line, track_col;
    char balance[256];
    int n_balance;
} lexer_t;

static void track_to(lexer_t *L, size_t pos, int *line, int *col) {
    if (pos < L->track_pos) { /* only error paths go back; restart from the top */
        L->track_pos = 0;
        L->track_line = 1;
        L->track_col = 1;
    }
    while (L->track_pos < pos) {
        unsigned char ch = (unsigned char)L->src[L->track_pos++];
        if (ch == '\n') {
            L->track_line++;
            L->track_col = 1;
        } else if ((ch & 0xC0) != 0x80) {
            L->track_col++;
        }
    }
    *line = L->track_line;
    *col = L->track_col;
}

static bool lex_fail(lexer_t *L, size_t pos, const char *fmt, ...) {
    int line, col;
    track_to(L, pos, &line, &col);
    char msg[SL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_fail(L->err, "line %d, column %d: %s", line, col, msg);
    L->failed = true;
    return false;
}

static jtok_t *emit(lexer_t *L, jtok_type_t type, size_t pos) {
    if (L->n == L->cap) {
        L->cap = L->cap ? L->cap * 2 : 256;
        L->toks = sl_realloc(L->toks, (size_t)L->cap * sizeof(jtok_t));
    }
    jtok_t *t = &L->toks[L->n++];
    memset(t, 0, sizeof *t);
    t->type = (uint8_t)type;
    track_to(L, pos, &t->line, &t->col);
    return t;
}

static void emit_data(lexer_t *L, size_t pos, const char *s, size_t n) {
    if (n == 0) return;
    jtok_t *t = emit(L, T_DATA, pos);
    jv_t v = jarena_str(L->a, s, n);
    t->s = jv_str(v)->s;
    t->len = n;
}

/* Length of the whitespace run (Python str.isspace code points) at s[i..end). */
static size_t ws_run(const char *s, size_t i, size_t end) {
    size_t j = i;
    while (j < end) {
        size_t k = j;
        int cp = ju_decode(s, end, &k);
        if (cp < 0 || !ju_isspace((uint32_t)cp)) break;
        j = k;
    }
    return j - i;
}

/* Length of s[0..n) without its trailing whitespace (str.rstrip()). */
static size_t rstrip_len(const char *s, size_t n) {
    size_t i = 0, keep = 0;
    while (i < n) {
        int cp = ju_decode(s, n, &i);
        if (cp < 0 || !ju_isspace((uint32_t)cp)) keep = i;
    }
    return keep;
}

static bool at(const lexer_t *L, size_t pos, const char *lit) {
    size_t n = strlen(lit);
    return pos + n <= L->len && memcmp(L->src + pos, lit, n) == 0;
}

/* The text before a tag, after "-" stripping or lstrip_blocks (jinja2's OptionalLStrip). */
static size_t tag_prefix_len(lexer_t *L, const char *text, size_t n, char sign, bool lstrip_ok) {
    if (sign == '-') return rstrip_len(text, n);
    if (sign == '+' || !lstrip_ok) return n;
    size_t l_pos = n;
    while (l_pos > 0 && text[l_pos - 1] != '\n') l_pos--;
    if (l_pos > 0 || L->line_starting) {
        size_t w = ws_run(text, l_pos, n);
        if (w > 0 && l_pos + w == n) return l_pos;
    }
    return n;
}

/* Decodes a string literal body as Python's
 * body.encode("ascii", "backslashreplace").decode("unicode-escape") does. */
static bool decode_string(lexer_t *L, size_t pos, const char *s, size_t n, const char **out,
                          size_t *out_len) {
    char *buf = jarena_alloc(L->a, n * 2 + 16);
    size_t o = 0, i = 0;
    while (i < n) {
        if (s[i] != '\\') {
            buf[o++] = s[i++];
            continue;
        }
        i++;
        if (i >= n) return lex_fail(L, pos, "\\ at end of string");
        unsigned char e = (unsigned char)s[i];
        if (e >= 0x80) {
            /* backslashreplace turned the character into \xhh / \uhhhh / \Uhhhhhhhh, and
             * the backslash before it escaped that escape's own backslash. */
            size_t k = i;
            int cp = ju_decode(s, n, &k);
            if (cp < 0) return lex_fail(L, pos, "invalid UTF-8 in string literal");
            char esc[16];
            int m = cp < 0x100     ? snprintf(esc, sizeof esc, "x%02x", cp)
                    : cp < 0x10000 ? snprintf(esc, sizeof esc, "u%04x", cp)
                                   : snprintf(esc, sizeof esc, "U%08x", cp);
            buf[o++] = '\\';
            memcpy(buf + o, esc, (size_t)m);
            o += (size_t)m;
            i = k;
            continue;
        }
        i++;
        uint32_t cp;
        int digits = 0;
        switch (e) {
        case '\n': continue; /* line continuation */
        case '\\': buf[o++] = '\\'; continue;
        case '\'': buf[o++] = '\''; continue;
        case '"': buf[o++] = '"'; continue;
        case 'a': buf[o++] = '\a'; continue;
        case 'b': buf[o++] = '\b'; continue;
        case 'f': buf[o++] = '\f'; continue;
        case 'n': buf[o++] = '\n'; continue;
        case 'r': buf[o++] = '\r'; continue;
        case 't': buf[o++] = '\t'; continue;
        case 'v': buf[o++] = '\v'; continue;
        case 'x': digits = 2; break;
        case 'u': digits = 4; break;
        case 'U': digits = 8; break;
        case 'N': return lex_fail(L, pos, "\\N{...} escapes are not supported");
        default:
            if (e >= '0' && e <= '7') {
                cp = e - '0';
                for (int k = 0; k < 2 && i < n && s[i] >= '0' && s[i] <= '7'; k++)
                    cp = cp * 8 + (uint32_t)(s[i++] - '0');
                o += ju_encode(cp, buf + o);
                continue;
            }
            buf[o++] = '\\'; /* unknown escape: kept as is */
            buf[o++] = (char)e;
            continue;
        }
        cp = 0;
        for (int k = 0; k < digits; k++) {
            char h = i < n ? s[i] : 0;
            int d = (h >= '0' && h <= '9') ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10 : -1;
            if (d < 0)
                return lex_fail(L, pos, "truncated \\%cXX escape", e);
            cp = cp * 16 + (uint32_t)d;
            i++;
        }
        if (cp > 0x10FFFF) return lex_fail(L, pos, "illegal Unicode character");
        if (cp >= 0xD800 && cp <= 0xDFFF)
            return lex_fail(L, pos, "surrogate code points are not supported in strings");
        o += ju_encode(cp, buf + o);
    }
    buf[o] = '\0';
    *out = buf;
    *out_len = o;
    return true;
}

static bool is_digit(char ch) { return ch >= '0' && ch <= '9'; }

/* (\d+_)*\d+ : digits with single underscores between them. */
static size_t digit_run(const lexer_t *L, size_t p) {
    size_t q = p;
    if (q >= L->len || !is_digit(L->src[q])) return 0;
    while (q < L->len) {
        if (is_digit(L->src[q])) q++;
        else if (L->src[q] == '_' && q + 1 < L->len && is_digit(L->src[q + 1])) q++;
        else break;
    }
    return q - p;
}

static bool lex_number(lexer_t *L, size_t *pos) {
    size_t p = *pos;
    const char *s = L->src;
    size_t d = digit_run(L, p);
    if (d == 0) return false;
    /* float: (?<!\.) mantissa (( \.frac )? e[+-]?exp | \.frac) */
    if (p == 0 || s[p - 1] != '.') {
        size_t q = p + d, frac = 0, exp = 0;
        if (q < L->len && s[q] == '.') frac = digit_run(L, q + 1);
        size_t e = q + (frac ? frac + 1 : 0);
        if (e < L->len && (s[e] == 'e' || s[e] == 'E')) {
            size_t f = e + 1;
            if (f < L->len && (s[f] == '+' || s[f] == '-')) f++;
            size_t x = digit_run(L, f);
            if (x) exp = f + x - e;
        }
        if (frac || exp) {
            size_t end = q + (frac ? frac + 1 : 0) + exp;
            char buf[128];
            size_t m = 0;
            for (size_t i = p; i < end && m + 1 < sizeof buf; i++)
                if (s[i] != '_') buf[m++] = s[i];
            buf[m] = '\0';
            jtok_t *t = emit(L, T_FLOAT, p);
            t->f = strtod(buf, NULL);
            *pos = end;
            return true;
        }
    }
    /* integer: 0b / 0o / 0x / decimal */
    int base = 10;
    size_t q = p, start;
    if (s[p] == '0' && p + 1 < L->len && strchr("bBoOxX", s[p + 1]) && s[p + 1] != '\0') {
        char k = (char)(s[p + 1] | 0x20);
        base = k == 'b' ? 2 : k == 'o' ? 8 : 16;
        q = p + 2;
    }
    start = q;
    uint64_t v = 0;
    bool overflow = false;
    size_t n_digits = 0;
    while (q < L->len) {
        char ch = s[q];
        int dv = is_digit(ch) ? ch - '0' : (ch >= 'a' && ch <= 'f') ? ch - 'a' + 10
                 : (ch >= 'A' && ch <= 'F') ? ch - 'A' + 10 : -1;
        if (ch == '_' && q + 1 < L->len) {
            char nx = s[q + 1];
            int nv = is_digit(nx) ? nx - '0' : (nx >= 'a' && nx <= 'f') ? nx - 'a' + 10
                     : (nx >= 'A' && nx <= 'F') ? nx - 'A' + 10 : -1;
            if (nv >= 0 && nv < base && (base != 10 || n_digits > 0)) {
                q++;
                continue;
            }
            break;
        }
        if (dv < 0 || dv >= base) break;
        if (base == 10 && n_digits > 0 && s[start] == '0' && dv != 0) break; /* 0(_?0)* */
        if (v > (UINT64_MAX - (uint64_t)dv) / (uint64_t)base) overflow = true;
        v = v * (uint64_t)base + (uint64_t)dv;
        n_digits++;
        q++;
    }
    if (base != 10 && n_digits == 0) { /* "0x" alone: just the 0 */
        q = p + 1;
        v = 0;
    }
    if (overflow || v > (uint64_t)INT64_MAX)
        return lex_fail(L, p, "integer literal too large (integers are limited to 64 bits)");
    jtok_t *t = emit(L, T_INT, p);
    t->i = (int64_t)v;
    *pos = q;
    return true;
}

static const char *const OPERATORS[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*",
                                        "%", "~", "[", "]", "(", ")", "{", "}", ">", "<", "=",
                                        ".", ":", "|", ",", ";"};

/* Tokens inside {{ }} or {% %} until the end tag. */
static bool lex_tag(lexer_t *L, bool block) {
    const char *s = L->src;
    L->n_balance = 0;
    for (;;) {
        size_t p = L->pos;
        if (L->n_balance == 0) {
            if (block && at(L, p, "+%}")) {
                emit(L, T_BLOCK_END, p);
                L->pos = p + 3;
                L->line_starting = false;
                return true;
            }
            if (at(L, p, block ? "-%}" : "-}}")) {
                emit(L, block ? T_BLOCK_END : T_VAR_END, p);
                size_t q = p + 3;
                q += ws_run(s, q, L->len);
                L->line_starting = s[q - 1] == '\n';
                L->pos = q;
                return true;
            }
            if (at(L, p, block ? "%}" : "}}")) {
                emit(L, block ? T_BLOCK_END : T_VAR_END, p);
                size_t q = p + 2;
                if (block && q < L->len && s[q] == '\n') q++; /* trim_blocks */
                L->line_starting = s[q - 1] == '\n';
                L->pos = q;
                return true;
            }
        }
        size_t w = ws_run(s, p, L->len);
        if (w) {
            L->pos += w;
            continue;
        }
        if (p >= L->len) return true; /* unterminated tag: the parser reports it at EOF */
        char ch = s[p];
        if (is_digit(ch)) {
            if (!lex_number(L, &L->pos)) return false;
            continue;
        }
        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_') {
            size_t q = p;
            while (q < L->len && ((s[q] >= 'a' && s[q] <= 'z') || (s[q] >= 'A' && s[q] <= 'Z') ||
                                  is_digit(s[q]) || s[q] == '_'))
                q++;
            jtok_t *t = emit(L, T_NAME, p);
            jv_t v = jarena_str(L->a, s + p, q - p);
            t->s = jv_str(v)->s;
            t->len = q - p;
            L->pos = q;
            continue;
        }
        if (ch == '\'' || ch == '"') {
            size_t q = p + 1;
            while (q < L->len && s[q] != ch) q += s[q] == '\\' ? 2 : 1;
            if (q < L->len) {
                jtok_t *t = emit(L, T_STRING, p);
                if (!decode_string(L, p, s + p + 1, q - p - 1, &t->s, &t->len)) return false;
                L->pos = q + 1;
                continue;
            }
            return lex_fail(L, p, "unexpected char %s", ch == '\'' ? "\"'\"" : "'\"'");
        }
        const char *op = NULL;
        for (size_t k = 0; k < sizeof OPERATORS / sizeof *OPERATORS; k++)
            if (at(L, p, OPERATORS[k])) {
                op = OPERATORS[k];
                break;
            }
        if (!op) {
            if ((unsigned char)ch >= 0x80) return lex_fail(L, p, "unexpected character");
            return lex_fail(L, p, "unexpected char '%c'", ch);
        }
        if (op[1] == '\0' && strchr("([{", op[0])) {
            if (L->n_balance == (int)sizeof L->balance) return lex_fail(L, p, "brackets nested too deeply");
            L->balance[L->n_balance++] = op[0] == '(' ? ')' : op[0] == '[' ? ']' : '}';
        } else if (op[1] == '\0' && strchr(")]}", op[0])) {
            if (L->n_balance == 0) return lex_fail(L, p, "unexpected '%c'", op[0]);
            char want = L->balance[--L->n_balance];
            if (want != op[0]) return lex_fail(L, p, "unexpected '%c', expected '%c'", op[0], want);
        }
        jtok_t *t = emit(L, T_OP, p);
        memcpy(t->op, op, strlen(op));
        L->pos = p + strlen(op);
    }
}

/* {% raw %} ... {% endraw %}: the text in between is data. `p` is at "{%". */
static bool raw_begin_len(const lexer_t *L, size_t p, size_t *end) {
    size_t q = p + 2;
    if (q < L->len && (L->src[q] == '-' || L->src[q] == '+')) q++;
    q += ws_run(L->src, q, L->len);
    if (!at(L, q, "raw")) return false;
    q += 3;
    q += ws_run(L->src, q, L->len);
    if (at(L, q, "-%}")) {
        q += 3;
        q += ws_run(L->src, q, L->len);
    } else if (at(L, q, "%}")) {
        q += 2;
    } else {
        return false;
    }
    *end = q;
    return true;
}

static bool lex_raw(lexer_t *L, size_t body) {
    const char *s = L->src;
    for (size_t p = body; p + 1 < L->len; p++) {
        if (s[p] != '{' || s[p + 1] != '%') continue;
        size_t q = p + 2;
        char sign = 0;
        if (q < L->len && (s[q] == '-' || s[q] == '+')) sign = s[q++];
        q += ws_run(s, q, L->len);
        if (!at(L, q, "endraw")) continue;
        q += 6;
        q += ws_run(s, q, L->len);
        size_t end;
        if (at(L, q, "+%}")) end = q + 3;
        else if (at(L, q, "-%}")) end = q + 3 + ws_run(s, q + 3, L->len);
        else if (at(L, q, "%}")) end = q + 2 + (q + 2 < L->len && s[q + 2] == '\n');
        else continue;
        emit_data(L, body, s + body, tag_prefix_len(L, s + body, p - body, sign, true));
        L->line_starting = s[end - 1] == '\n';
        L->pos = end;
        return true;
    }
    return lex_fail(L, body, "Missing end of raw directive");
}

jtok_t *jlex(jarena_t *a, const char *src_in, size_t len_in, int *n_out, sl_err_t *err) {
    /* Normalize \r\n and \r to \n; drop one trailing newline. */
    char *src = jarena_alloc(a, len_in + 1);
    size_t len = 0;
    for (size_t i = 0; i < len_in; i++) {
        if (src_in[i] == '\r') {
            src[len++] = '\n';
            if (i + 1 < len_in && src_in[i + 1] == '\n') i++;
        } else {
            src[len++] = src_in[i];
        }
    }
    if (len > 0 && src[len - 1] == '\n') len--;
    src[len] = '\0';

    lexer_t L = {.a = a, .src = src, .len = len, .err = err, .line_starting = true,
                 .track_line = 1, .track_col = 1};
    while (L.pos < len && !L.failed) {
        size_t p = L.pos;
        while (p + 1 < len && !(src[p] == '{' && (src[p + 1] == '{' || src[p + 1] == '%' ||
                                                  src[p + 1] == '#')))
            p++;
        if (p + 1 >= len) {
            emit_data(&L, L.pos, src + L.pos, len - L.pos);
            L.pos = len;
            break;
        }
        char kind = src[p + 1];
        char sign = (p + 2 < len && (src[p + 2] == '-' || src[p + 2] == '+')) ? src[p + 2] : 0;
        size_t raw_end = 0;
        bool raw = kind == '%' && raw_begin_len(&L, p, &raw_end);
        emit_data(&L, L.pos, src + L.pos, tag_prefix_len(&L, src + L.pos, p - L.pos, sign, kind != '{'));
        size_t body = p + 2 + (sign ? 1 : 0);
        if (raw) {
            L.line_starting = src[raw_end - 1] == '\n';
            lex_raw(&L, raw_end);
        } else if (kind == '#') {
            size_t q = body;
            while (q + 1 < len && !(src[q] == '#' && src[q + 1] == '}')) q++;
            if (q + 1 >= len) {
                lex_fail(&L, p, "Missing end of comment tag");
                break;
            }
            size_t end = q + 2;
            if (q > body && src[q - 1] == '-') end += ws_run(src, end, len);
            else if (!(q > body && src[q - 1] == '+') && end < len && src[end] == '\n') end++;
            L.line_starting = src[end - 1] == '\n';
            L.pos = end;
        } else {
            emit(&L, kind == '%' ? T_BLOCK_BEGIN : T_VAR_BEGIN, p);
            L.pos = body;
            L.line_starting = false;
            lex_tag(&L, kind == '%');
        }
    }
    if (L.failed) {
        free(L.toks);
        return NULL;
    }
    emit(&L, T_EOF, len);
    jtok_t *out = jarena_alloc(a, (size_t)L.n * sizeof(jtok_t));
    memcpy(out, L.toks, (size_t)L.n * sizeof(jtok_t));
    free(L.toks);
    *n_out = L.n;
    return out;
}
