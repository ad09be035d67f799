/* jinja_print.c - how Python prints what a template computes, and the Unicode facts
 * Python's str methods need.
 *
 * str() and repr() as CPython writes them (quote choice, escapes, isprintable(), float
 * repr with the shortest round-trip digits), and json.dumps as transformers' tojson
 * calls it (ensure_ascii, indent, separators, sort_keys, NaN/Infinity). Unicode: UTF-8
 * decoding, str.isspace()'s full list, and simple case mapping for Latin, Greek and
 * Cyrillic (other scripts are caseless here, where Python would map them).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

static void put(jctx_t *c, jbuf_t *b, const char *s) { jx_buf_put(c, b, s, strlen(s)); }

/* ---- UTF-8 and Unicode ------------------------------------------------------- */

int ju_decode(const char *s, size_t len, size_t *i) {
    const unsigned char *p = (const unsigned char *)s;
    size_t k = *i;
    if (k >= len) return -1;
    unsigned c = p[k];
    int n;
    uint32_t cp;
    if (c < 0x80) {
        *i = k + 1;
        return (int)c;
    } else if ((c & 0xE0) == 0xC0) {
        n = 1;
        cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
        n = 2;
        cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
        n = 3;
        cp = c & 0x07;
    } else {
        *i = k + 1;
        return -1;
    }
    if (len - k <= (size_t)n) {
        *i = k + 1;
        return -1;
    }
    for (int j = 1; j <= n; j++) {
        unsigned cc = p[k + (size_t)j];
        if ((cc & 0xC0) != 0x80) {
            *i = k + 1;
            return -1;
        }
        cp = (cp << 6) | (cc & 0x3F);
    }
    static const uint32_t min_cp[4] = {0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
        *i = k + 1;
        return -1;
    }
    *i = k + (size_t)n + 1;
    return (int)cp;
}

size_t ju_encode(uint32_t cp, char *out) {
    unsigned char *o = (unsigned char *)out;
    if (cp < 0x80) {
        o[0] = (unsigned char)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (unsigned char)(0xC0 | (cp >> 6));
        o[1] = (unsigned char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (unsigned char)(0xE0 | (cp >> 12));
        o[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (unsigned char)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (unsigned char)(0xF0 | (cp >> 18));
    o[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (unsigned char)(0x80 | (cp & 0x3F));
    return 4;
}

bool ju_valid(const char *s, size_t len) {
    size_t i = 0;
    while (i < len)
        if (ju_decode(s, len, &i) < 0) return false;
    return true;
}

/* Python's str.isspace(): the complete list. */
bool ju_isspace(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Simple (one code point) case mapping for the scripts chat text mostly uses. */
uint32_t ju_upper(uint32_t c) {
    if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if ((c >= 0xE0 && c <= 0xFE && c != 0xF7)) return c - 32;
    if (c == 0xFF) return 0x178;
    if (c == 0xB5) return 0x39C;
    if (c >= 0x100 && c <= 0x17F) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c : c - 1;
        if (c == 0x131) return 'I';
        if (c == 0x17F) return 'S';
        if (c == 0x138 || c == 0x149) return c;
        return (c & 1) ? c - 1 : c;
    }
    if (c >= 0x3B1 && c <= 0x3C9 && c != 0x3C2) return c - 32;
    if (c == 0x3C2) return 0x3A3;
    if (c >= 0x3AC && c <= 0x3AF) return c == 0x3AC ? 0x386 : c - 37;
    if (c == 0x3CC) return 0x38C;
    if (c == 0x3CD || c == 0x3CE) return c - 63;
    if (c >= 0x430 && c <= 0x44F) return c - 32;
    if (c >= 0x450 && c <= 0x45F) return c - 80;
    if (c >= 0x460 && c <= 0x4FF && !(c >= 0x482 && c <= 0x489)) {
        if (c >= 0x4C1 && c <= 0x4CE) return (c & 1) ? c : c - 1;
        if (c == 0x4CF) return 0x4C0;
        return (c & 1) ? c - 1 : c;
    }
    return c;
}

uint32_t ju_lower(uint32_t c) {
    if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xC0 && c <= 0xDE && c != 0xD7) return c + 32;
    if (c == 0x178) return 0xFF;
    if (c >= 0x100 && c <= 0x17F) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17E)) return (c & 1) ? c + 1 : c;
        if (c == 0x130) return 'i';
        if (c == 0x138 || c == 0x149 || c == 0x17F || c == 0x131) return c;
        return (c & 1) ? c : c + 1;
    }
    if (c >= 0x391 && c <= 0x3A9 && c != 0x3A2) return c + 32;
    if (c == 0x386) return 0x3AC;
    if (c >= 0x388 && c <= 0x38A) return c + 37;
    if (c == 0x38C) return 0x3CC;
    if (c == 0x38E || c == 0x38F) return c + 63;
    if (c >= 0x410 && c <= 0x42F) return c + 32;
    if (c >= 0x400 && c <= 0x40F) return c + 80;
    if (c >= 0x460 && c <= 0x4FF && !(c >= 0x482 && c <= 0x489)) {
        if (c >= 0x4C1 && c <= 0x4CE) return (c & 1) ? c + 1 : c;
        if (c == 0x4C0) return 0x4CF;
        return (c & 1) ? c : c + 1;
    }
    return c;
}

bool ju_iscased(uint32_t c) {
    return ju_upper(c) != c || ju_lower(c) != c || c == 0xDF || c == 0x138 || c == 0x149;
}
/* ---- printing ------------------------------------------------------------------ */

void jv_write_float(char *out, size_t cap, double f) {
    if (isnan(f)) {
        snprintf(out, cap, "nan");
        return;
    }
    if (isinf(f)) {
        snprintf(out, cap, f < 0 ? "-inf" : "inf");
        return;
    }
    if (f == 0) {
        snprintf(out, cap, signbit(f) ? "-0.0" : "0.0");
        return;
    }
    char buf[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(buf, sizeof buf, "%.*e", p - 1, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* buf = [-]d[.ddd]e[+-]XX */
    char digits[24];
    int nd = 0, exp10;
    const char *q = buf;
    bool neg = *q == '-';
    if (neg) q++;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    exp10 = atoi(q + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char o[64];
    size_t k = 0;
    if (neg) o[k++] = '-';
    if (exp10 < -4 || exp10 >= 16) {
        o[k++] = digits[0];
        if (nd > 1) {
            o[k++] = '.';
            for (int i = 1; i < nd; i++) o[k++] = digits[i];
        }
        k += (size_t)snprintf(o + k, sizeof o - k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    } else if (exp10 >= 0) {
        for (int i = 0; i <= exp10; i++) o[k++] = i < nd ? digits[i] : '0';
        o[k++] = '.';
        if (nd > exp10 + 1)
            for (int i = exp10 + 1; i < nd; i++) o[k++] = digits[i];
        else
            o[k++] = '0';
    } else {
        o[k++] = '0';
        o[k++] = '.';
        for (int i = 0; i < -exp10 - 1; i++) o[k++] = '0';
        for (int i = 0; i < nd; i++) o[k++] = digits[i];
    }
    o[k] = '\0';
    snprintf(out, cap, "%s", o);
}

/* CPython's str.isprintable() for the code points that matter in chat text. */
static bool printable(uint32_t c) {
    if (c < 0x20 || c == 0x7F) return false;
    if (c < 0x7F) return true;
    if (c <= 0xA0 || c == 0xAD) return false;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200F) || (c >= 0x2028 && c <= 0x202F) ||
        (c >= 0x205F && c <= 0x206F) || c == 0x3000 || c == 0xFEFF || (c >= 0xFFF9 && c <= 0xFFFB) ||
        c == 0xFFFE || c == 0xFFFF || (c >= 0xE000 && c <= 0xF8FF) || c >= 0xF0000 ||
        (c >= 0xE0000 && c <= 0xE007F) || c == 0x180E || c == 0x061C || (c >= 0x0600 && c <= 0x0605) ||
        c == 0x06DD || c == 0x070F || c == 0x0378 || c == 0x0379)
        return false;
    return true;
}

static void write_str_repr(jctx_t *c, jbuf_t *b, const char *s, size_t n) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    jx_buf_put(c, b, &q, 1);
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        int cp = ju_decode(s, n, &i);
        char esc[16];
        if (cp == q || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            jx_buf_put(c, b, esc, 2);
        } else if (cp == '\t') {
            put(c, b, "\\t");
        } else if (cp == '\n') {
            put(c, b, "\\n");
        } else if (cp == '\r') {
            put(c, b, "\\r");
        } else if (cp >= 0 && !printable((uint32_t)cp)) {
            snprintf(esc, sizeof esc, cp < 0x100 ? "\\x%02x" : cp < 0x10000 ? "\\u%04x" : "\\U%08x", cp);
            put(c, b, esc);
        } else {
            jx_buf_put(c, b, s + start, i - start);
        }
    }
    jx_buf_put(c, b, &q, 1);
}

static void write_repr_d(jctx_t *c, jbuf_t *b, jv_t v, int depth);

static void write_dict_body(jctx_t *c, jbuf_t *b, jdict_t *d, int depth) {
    put(c, b, "{");
    for (size_t i = 0; i < d->n; i++) {
        if (i) put(c, b, ", ");
        write_repr_d(c, b, d->k[i], depth + 1);
        put(c, b, ": ");
        write_repr_d(c, b, d->v[i], depth + 1);
    }
    put(c, b, "}");
}

static void write_repr_d(jctx_t *c, jbuf_t *b, jv_t v, int depth) {
    if (depth > MAX_DATA_DEPTH) jx_fail(c, CHAT_ERR_LIMIT, "data nested too deeply to print");
    char tmp[64];
    switch (v.t) {
    case JV_UNDEF: put(c, b, "Undefined"); return;
    case JV_STR: write_str_repr(c, b, jv_str(v)->s, jv_str(v)->len); return;
    case JV_LIST: {
        jlist_t *l = jv_list(v);
        if (l->kind == JL_GEN) {
            snprintf(tmp, sizeof tmp, "<generator object %s>", l->gen_name ? l->gen_name : "<genexpr>");
            put(c, b, tmp);
            return;
        }
        put(c, b, l->kind == JL_TUPLE ? "(" : "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) put(c, b, ", ");
            write_repr_d(c, b, l->v[i], depth + 1);
        }
        put(c, b, l->kind == JL_TUPLE ? (l->n == 1 ? ",)" : ")") : "]");
        return;
    }
    case JV_DICT: write_dict_body(c, b, jv_dict(v), depth); return;
    case JV_NS:
        put(c, b, "<Namespace ");
        write_dict_body(c, b, jv_dict(v), depth);
        put(c, b, ">");
        return;
    case JV_FUNC: {
        jfunc_t *f = (jfunc_t *)v.u.o;
        snprintf(tmp, sizeof tmp, f->macro ? "<Macro '%.40s'>" : "<built-in method %.40s>",
                 f->name ? f->name : "?");
        put(c, b, tmp);
        return;
    }
    case JV_LOOP: {
        jloop_t *l = (jloop_t *)v.u.o;
        snprintf(tmp, sizeof tmp, "<LoopContext %lld/%lld>", (long long)l->index0 + 1,
                 (long long)l->length);
        put(c, b, tmp);
        return;
    }
    default: jv_write_str(c, b, v); return;
    }
}

void jv_write_repr(jctx_t *c, jbuf_t *b, jv_t v) { write_repr_d(c, b, v, 0); }

void jv_write_str(jctx_t *c, jbuf_t *b, jv_t v) {
    char tmp[64];
    switch (v.t) {
    case JV_UNDEF: return;
    case JV_NONE: put(c, b, "None"); return;
    case JV_BOOL: put(c, b, v.u.b ? "True" : "False"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); put(c, b, tmp); return;
    case JV_FLOAT: jv_write_float(tmp, sizeof tmp, v.u.f); put(c, b, tmp); return;
    case JV_STR: jx_buf_put(c, b, jv_str(v)->s, jv_str(v)->len); return;
    default: jv_write_repr(c, b, v); return;
    }
}

jv_t jv_to_str(jctx_t *c, jv_t v) {
    if (v.t == JV_STR) {
        jv_incref(v);
        return v;
    }
    jbuf_t *b = jx_buf_new(c);
    jv_write_str(c, b, v);
    return jx_buf_take(c, b);
}

/* ---- json.dumps ------------------------------------------------------------------ */

static void json_str(jctx_t *c, jbuf_t *b, const char *s, size_t n, bool ascii) {
    put(c, b, "\"");
    size_t i = 0;
    while (i < n) {
        size_t start = i;
        int cp = ju_decode(s, n, &i);
        char esc[16];
        switch (cp) {
        case '"': put(c, b, "\\\""); continue;
        case '\\': put(c, b, "\\\\"); continue;
        case '\n': put(c, b, "\\n"); continue;
        case '\r': put(c, b, "\\r"); continue;
        case '\t': put(c, b, "\\t"); continue;
        case '\b': put(c, b, "\\b"); continue;
        case '\f': put(c, b, "\\f"); continue;
        default: break;
        }
        if (cp < 0x20 || (ascii && cp > 0x7E)) {
            if (cp > 0xFFFF) {
                uint32_t u = (uint32_t)cp - 0x10000;
                snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (u >> 10), 0xDC00 + (u & 0x3FF));
            } else {
                snprintf(esc, sizeof esc, "\\u%04x", (unsigned)cp);
            }
            put(c, b, esc);
        } else {
            jx_buf_put(c, b, s + start, i - start);
        }
    }
    put(c, b, "\"");
}

static void json_newline(jctx_t *c, jbuf_t *b, const jjson_opts_t *o, int level) {
    put(c, b, "\n");
    for (int i = 0; i < level; i++) put(c, b, o->indent);
}

/* A dict key as json.dumps converts it. */
static jv_t json_key(jctx_t *c, jv_t k) {
    char tmp[64];
    switch (k.t) {
    case JV_STR: jv_incref(k); return k;
    case JV_BOOL: return jx_str_new(c, k.u.b ? "true" : "false", k.u.b ? 4 : 5);
    case JV_NONE: return jx_str_new(c, "null", 4);
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)k.u.i); return jx_str_new(c, tmp, strlen(tmp));
    case JV_FLOAT:
        if (isnan(k.u.f)) return jx_str_new(c, "NaN", 3);
        if (isinf(k.u.f)) return k.u.f > 0 ? jx_str_new(c, "Infinity", 8) : jx_str_new(c, "-Infinity", 9);
        jv_write_float(tmp, sizeof tmp, k.u.f);
        return jx_str_new(c, tmp, strlen(tmp));
    default:
        jx_fail(c, CHAT_ERR_RENDER, "keys must be str, int, float, bool or None, not %s", jv_type_name(k));
    }
}

static int cmp_keys(jctx_t *c, jv_t a, jv_t b) {
    bool sa = a.t == JV_STR, sb = b.t == JV_STR;
    if (sa != sb || (!sa && (a.t == JV_NONE || b.t == JV_NONE)))
        jx_fail(c, CHAT_ERR_RENDER, "'<' not supported between instances of '%s' and '%s'",
                jv_type_name(a), jv_type_name(b));
    return jv_compare(c, a, b, "<");
}

void jv_write_json(jctx_t *c, jbuf_t *b, jv_t v, const jjson_opts_t *o, int depth) {
    if (depth > MAX_DATA_DEPTH) jx_fail(c, CHAT_ERR_LIMIT, "data nested too deeply for tojson");
    char tmp[64];
    switch (v.t) {
    case JV_NONE: put(c, b, "null"); return;
    case JV_BOOL: put(c, b, v.u.b ? "true" : "false"); return;
    case JV_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v.u.i); put(c, b, tmp); return;
    case JV_FLOAT:
        if (isnan(v.u.f)) put(c, b, "NaN");
        else if (isinf(v.u.f)) put(c, b, v.u.f > 0 ? "Infinity" : "-Infinity");
        else {
            jv_write_float(tmp, sizeof tmp, v.u.f);
            put(c, b, tmp);
        }
        return;
    case JV_STR: json_str(c, b, jv_str(v)->s, jv_str(v)->len, o->ensure_ascii); return;
    case JV_LIST: {
        jlist_t *l = jv_list(v);
        if (l->kind == JL_GEN) break;
        if (l->n == 0) {
            put(c, b, "[]");
            return;
        }
        put(c, b, "[");
        for (size_t i = 0; i < l->n; i++) {
            if (i) put(c, b, o->item_sep);
            if (o->indent) json_newline(c, b, o, depth + 1);
            jv_write_json(c, b, l->v[i], o, depth + 1);
        }
        if (o->indent) json_newline(c, b, o, depth);
        put(c, b, "]");
        return;
    }
    case JV_DICT: {
        jdict_t *d = jv_dict(v);
        if (d->n == 0) {
            put(c, b, "{}");
            return;
        }
        jbuf_t *ob = jx_buf_new(c); /* holds the visiting order */
        for (size_t i = 0; i < d->n; i++) jx_buf_put(c, ob, (const char *)&i, sizeof i);
        size_t *order = (size_t *)(void *)ob->p;
        if (o->sort_keys) /* insertion sort: stable, and key counts are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && cmp_keys(c, d->k[order[j - 1]], d->k[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1];
                    order[j - 1] = t;
                }
        put(c, b, "{");
        for (size_t i = 0; i < d->n; i++) {
            if (i) put(c, b, o->item_sep);
            if (o->indent) json_newline(c, b, o, depth + 1);
            jv_t key = json_key(c, d->k[order[i]]);
            json_str(c, b, jv_str(key)->s, jv_str(key)->len, o->ensure_ascii);
            jv_decref(c, key);
            put(c, b, o->key_sep);
            jv_write_json(c, b, d->v[order[i]], o, depth + 1);
        }
        if (o->indent) json_newline(c, b, o, depth);
        put(c, b, "}");
        jx_obj_release(c, &ob->h);
        return;
    }
    default: break;
    }
    jx_fail(c, CHAT_ERR_RENDER, "Object of type %s is not JSON serializable", jv_type_name(v));
}
