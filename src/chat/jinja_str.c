/* jinja_str.c - Python's str methods, as templates call them on message text.
 *
 * strip/lstrip/rstrip (Unicode whitespace, or a set of characters), split/rsplit
 * (whitespace runs or a separator, with maxsplit), splitlines, upper/lower/title/
 * capitalize (simple case mapping: Latin, Greek, Cyrillic, plus ß and İ), replace
 * (including the empty pattern), find/count by code point, startswith/endswith (str or
 * tuple), is*() predicates, "..." % args (%s %r %d %i %%) and str.format with plain
 * fields. Strings are UTF-8; indices and lengths count code points, as in Python.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* ---- string helpers ------------------------------------------------------------- */

jstr_t *jb_need_str(jctx_t *c, jv_t v, const char *what) {
    if (v.t == JV_UNDEF) jv_fail_undefined(c, v);
    if (v.t != JV_STR)
        jx_fail(c, CHAT_ERR_RENDER, "%s must be str, not %s", what, jv_type_name(v));
    return jv_str(v);
}

static bool in_chars(const jstr_t *chars, int cp) {
    if (!chars) return cp >= 0 && ju_isspace((uint32_t)cp);
    size_t i = 0;
    while (i < chars->len)
        if (ju_decode(chars->s, chars->len, &i) == cp) return true;
    return false;
}

jv_t jb_strip(jctx_t *c, jv_t s, jv_t chars, int which) {
    const jstr_t *set = NULL;
    if (!jv_is_absent(chars) && chars.t != JV_NONE) {
        if (chars.t != JV_STR) jx_fail(c, CHAT_ERR_RENDER, "strip arg must be None or str");
        set = jv_str(chars);
    }
    jstr_t *x = jv_str(s);
    size_t a = 0, b = x->len, i = 0;
    if (which & 1) {
        while (i < x->len) {
            size_t k = i;
            if (!in_chars(set, ju_decode(x->s, x->len, &k))) break;
            i = k;
        }
        a = i;
    }
    if (which & 2) {
        size_t keep = a;
        i = a;
        while (i < x->len) {
            int cp = ju_decode(x->s, x->len, &i);
            if (!in_chars(set, cp)) keep = i;
        }
        b = keep;
    }
    if (a == 0 && b == x->len) {
        jv_incref(s);
        return s;
    }
    return jx_str_new(c, x->s + a, b - a);
}

static void put_cp(jctx_t *c, jbuf_t *b, uint32_t cp) {
    char tmp[4];
    jx_buf_put(c, b, tmp, ju_encode(cp, tmp));
}

static void put_case(jctx_t *c, jbuf_t *b, uint32_t cp, bool upper, bool title) {
    if (upper && cp == 0xDF) { /* ß */
        jx_buf_put(c, b, title ? "Ss" : "SS", 2);
    } else if (!upper && cp == 0x130) { /* İ */
        jx_buf_put(c, b, "i\xcc\x87", 3);
    } else {
        put_cp(c, b, upper ? ju_upper(cp) : ju_lower(cp));
    }
}

jv_t jb_case(jctx_t *c, jv_t s, int how) {
    jstr_t *x = jv_str(s);
    jbuf_t *b = jx_buf_new(c);
    size_t i = 0;
    bool prev_cased = false, first = true;
    while (i < x->len) {
        int cp = ju_decode(x->s, x->len, &i);
        if (cp < 0) continue;
        uint32_t u = (uint32_t)cp;
        switch (how) {
        case JB_UPPER: put_case(c, b, u, true, false); break;
        case JB_LOWER: put_case(c, b, u, false, false); break;
        case JB_CAPITALIZE: put_case(c, b, u, first, first); break;
        case JB_TITLE:
            if (ju_iscased(u)) {
                put_case(c, b, u, !prev_cased, !prev_cased);
                prev_cased = true;
            } else {
                put_cp(c, b, u);
                prev_cased = false;
            }
            break;
        }
        first = false;
    }
    return jx_buf_take(c, b);
}

const char *jb_find_bytes(const char *h, size_t nh, const char *n, size_t nn) {
    if (nn == 0) return h;
    for (size_t i = 0; i + nn <= nh; i++)
        if (h[i] == n[0] && !memcmp(h + i, n, nn)) return h + i;
    return NULL;
}

jv_t jb_replace(jctx_t *c, jv_t s, jv_t old, jv_t repl, int64_t count) {
    jstr_t *x = jv_str(s), *o = jb_need_str(c, old, "replace() argument 1"),
           *r = jb_need_str(c, repl, "replace() argument 2");
    jbuf_t *b = jx_buf_new(c);
    if (o->len == 0) { /* insert `repl` before every character and at the end */
        size_t i = 0;
        int64_t done = 0;
        while (i <= x->len) {
            if (count < 0 || done < count) {
                jx_buf_put(c, b, r->s, r->len);
                done++;
            }
            if (i == x->len) break;
            size_t a = i;
            ju_decode(x->s, x->len, &i);
            jx_buf_put(c, b, x->s + a, i - a);
        }
        return jx_buf_take(c, b);
    }
    const char *p = x->s, *end = x->s + x->len;
    int64_t done = 0;
    while (count < 0 || done < count) {
        const char *q = jb_find_bytes(p, (size_t)(end - p), o->s, o->len);
        if (!q) break;
        jx_buf_put(c, b, p, (size_t)(q - p));
        jx_buf_put(c, b, r->s, r->len);
        p = q + o->len;
        done++;
        jx_step(c);
    }
    jx_buf_put(c, b, p, (size_t)(end - p));
    return jx_buf_take(c, b);
}

/* str.split / str.rsplit */
jv_t jb_split(jctx_t *c, jv_t s, jv_t sep, int64_t maxsplit, bool right) {
    jstr_t *x = jv_str(s);
    jv_t out = jx_list_new(c, JL_LIST, 0);
    if (jv_is_absent(sep) || sep.t == JV_NONE) {
        /* runs of whitespace; no empty strings */
        size_t n = x->len;
        /* word spans as (start, end) pairs, in a render-owned buffer so that a failure
         * further down cannot leak them */
        jbuf_t *spans = jx_buf_new(c);
        size_t m = 0, i = 0;
        while (i < n) {
            size_t k = i;
            int cp = ju_decode(x->s, n, &k);
            if (cp >= 0 && ju_isspace((uint32_t)cp)) {
                i = k;
                continue;
            }
            size_t se[2] = {i, 0};
            while (i < n) {
                k = i;
                cp = ju_decode(x->s, n, &k);
                if (cp >= 0 && ju_isspace((uint32_t)cp)) break;
                i = k;
            }
            se[1] = i;
            jx_buf_put(c, spans, (const char *)se, sizeof se);
            m++;
        }
        const size_t *sp = (const size_t *)(const void *)spans->p;
#define STARTS(k) sp[2 * (k)]
#define ENDS(k) sp[2 * (k) + 1]
        /* With maxsplit, the remainder keeps its inner and outer whitespace on the far side. */
        size_t lim = maxsplit < 0 ? m : (size_t)maxsplit;
        if (m <= lim) {
            for (size_t k = 0; k < m; k++) jx_list_push(c, out, jx_str_new(c, x->s + STARTS(k), ENDS(k) - STARTS(k)));
        } else if (!right) {
            for (size_t k = 0; k < lim; k++) jx_list_push(c, out, jx_str_new(c, x->s + STARTS(k), ENDS(k) - STARTS(k)));
            jx_list_push(c, out, jx_str_new(c, x->s + STARTS(lim), n - STARTS(lim)));
        } else {
            jx_list_push(c, out, jx_str_new(c, x->s, ENDS(m - lim - 1)));
            for (size_t k = m - lim; k < m; k++) jx_list_push(c, out, jx_str_new(c, x->s + STARTS(k), ENDS(k) - STARTS(k)));
        }
#undef STARTS
#undef ENDS
        jx_obj_release(c, &spans->h);
        return out;
    }
    jstr_t *d = jb_need_str(c, sep, "separator");
    if (d->len == 0) jx_fail(c, CHAT_ERR_RENDER, "empty separator");
    if (!right) {
        const char *p = x->s, *end = x->s + x->len;
        int64_t done = 0;
        while (maxsplit < 0 || done < maxsplit) {
            const char *q = jb_find_bytes(p, (size_t)(end - p), d->s, d->len);
            if (!q) break;
            jx_list_push(c, out, jx_str_new(c, p, (size_t)(q - p)));
            p = q + d->len;
            done++;
            jx_step(c);
        }
        jx_list_push(c, out, jx_str_new(c, p, (size_t)(end - p)));
        return out;
    }
    /* rsplit: collect from the right, then reverse */
    jv_t rev = jx_list_new(c, JL_LIST, 0);
    size_t e = x->len;
    int64_t done = 0;
    while (maxsplit < 0 || done < maxsplit) {
        size_t found = SIZE_MAX;
        for (size_t i = e >= d->len ? e - d->len + 1 : 0; i-- > 0;)
            if (!memcmp(x->s + i, d->s, d->len)) {
                found = i;
                break;
            }
        if (found == SIZE_MAX) break;
        jx_list_push(c, rev, jx_str_new(c, x->s + found + d->len, e - found - d->len));
        e = found;
        done++;
        jx_step(c);
    }
    jx_list_push(c, rev, jx_str_new(c, x->s, e));
    jlist_t *r = jv_list(rev);
    for (size_t i = r->n; i-- > 0;) {
        jv_incref(r->v[i]);
        jx_list_push(c, out, r->v[i]);
    }
    jv_decref(c, rev);
    return out;
}

static bool is_linebreak(int cp) {
    return cp == '\n' || cp == '\r' || cp == 0x0B || cp == 0x0C || cp == 0x1C || cp == 0x1D ||
           cp == 0x1E || cp == 0x85 || cp == 0x2028 || cp == 0x2029;
}

jv_t jb_splitlines(jctx_t *c, jv_t s, bool keepends) {
    jstr_t *x = jv_str(s);
    jv_t out = jx_list_new(c, JL_LIST, 0);
    size_t i = 0, a = 0;
    while (i < x->len) {
        size_t k = i;
        int cp = ju_decode(x->s, x->len, &k);
        if (is_linebreak(cp)) {
            size_t e = k;
            if (cp == '\r' && e < x->len && x->s[e] == '\n') e++;
            jx_list_push(c, out, jx_str_new(c, x->s + a, (keepends ? e : i) - a));
            a = i = e;
        } else {
            i = k;
        }
    }
    if (a < x->len) jx_list_push(c, out, jx_str_new(c, x->s + a, x->len - a));
    return out;
}

/* Code point index of byte offset `off`. */
static int64_t cp_index(const jstr_t *s, size_t off) {
    int64_t n = 0;
    for (size_t i = 0; i < off; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
    return n;
}

int64_t jb_find(jctx_t *c, jv_t s, jv_t sub, bool right) {
    jstr_t *x = jv_str(s), *n = jb_need_str(c, sub, "find() argument");
    if (!right) {
        const char *q = jb_find_bytes(x->s, x->len, n->s, n->len);
        return q ? cp_index(x, (size_t)(q - x->s)) : -1;
    }
    if (n->len > x->len) return -1;
    for (size_t i = x->len - n->len + 1; i-- > 0;)
        if (!memcmp(x->s + i, n->s, n->len)) return cp_index(x, i);
    return -1;
}

bool jb_str_pred(jstr_t *x, int id) {
    if (x->len == 0) return false;
    size_t i = 0;
    bool any_cased = false;
    while (i < x->len) {
        int cp = ju_decode(x->s, x->len, &i);
        uint32_t u = (uint32_t)cp;
        bool digit = cp >= '0' && cp <= '9';
        bool alpha = (cp < 0x80 && ((cp | 32) >= 'a' && (cp | 32) <= 'z')) || (cp >= 0x80 && ju_iscased(u));
        switch (id) {
        case JB_ISDIGIT: if (!digit) return false; break;
        case JB_ISALPHA: if (!alpha) return false; break;
        case JB_ISALNUM: if (!alpha && !digit) return false; break;
        case JB_ISSPACE: if (!ju_isspace(u)) return false; break;
        case JB_ISUPPER:
            if (ju_lower(u) != u) any_cased = true;
            else if (ju_upper(u) != u) return false;
            break;
        case JB_ISLOWER:
            if (ju_upper(u) != u) any_cased = true;
            else if (ju_lower(u) != u) return false;
            break;
        }
    }
    return (id == JB_ISUPPER || id == JB_ISLOWER) ? any_cased : true;
}

bool jb_affix(jctx_t *c, jv_t s, jv_t arg, bool end) {
    jstr_t *x = jv_str(s);
    if (arg.t == JV_LIST && jv_list(arg)->kind == JL_TUPLE) {
        for (size_t i = 0; i < jv_list(arg)->n; i++)
            if (jb_affix(c, s, jv_list(arg)->v[i], end)) return true;
        return false;
    }
    if (arg.t == JV_UNDEF) jv_fail_undefined(c, arg);
    if (arg.t != JV_STR)
        jx_fail(c, CHAT_ERR_RENDER, "%s first arg must be str or a tuple of str, not %s",
                end ? "endswith" : "startswith", jv_type_name(arg));
    jstr_t *p = jv_str(arg);
    if (p->len > x->len) return false;
    return !memcmp(end ? x->s + x->len - p->len : x->s, p->s, p->len);
}

/* ---- "..." % args --------------------------------------------------------------- */

jv_t jb_str_format(jctx_t *c, jv_t fmt, jv_t args) {
    jstr_t *f = jv_str(fmt);
    const jv_t *argv = &args;
    size_t argc = 1, used = 0;
    if (args.t == JV_LIST && jv_list(args)->kind == JL_TUPLE) {
        argv = jv_list(args)->v;
        argc = jv_list(args)->n;
    }
    bool mapping = args.t == JV_DICT;
    jbuf_t *b = jx_buf_new(c);
    for (size_t i = 0; i < f->len; i++) {
        if (f->s[i] != '%') {
            jx_buf_put(c, b, f->s + i, 1);
            continue;
        }
        if (++i >= f->len) jx_fail(c, CHAT_ERR_RENDER, "incomplete format");
        char conv = f->s[i];
        if (conv == '%') {
            jx_buf_put(c, b, "%", 1);
            continue;
        }
        if (!strchr("srdi", conv))
            jx_fail(c, CHAT_ERR_RENDER, "unsupported format character '%c' in %% formatting", conv);
        if (mapping) jx_fail(c, CHAT_ERR_RENDER, "format requires a mapping");
        if (used >= argc) jx_fail(c, CHAT_ERR_RENDER, "not enough arguments for format string");
        jv_t a = argv[used++];
        if (conv == 's') jv_write_str(c, b, a);
        else if (conv == 'r') jv_write_repr(c, b, a);
        else {
            if (a.t == JV_FLOAT) a = jv_int((int64_t)a.u.f);
            if (a.t != JV_INT && a.t != JV_BOOL)
                jx_fail(c, CHAT_ERR_RENDER, "%%%c format: a real number is required, not %s", conv, jv_type_name(a));
            jv_write_str(c, b, jv_int(a.t == JV_BOOL ? a.u.b : a.u.i));
        }
    }
    if (used < argc && !mapping)
        jx_fail(c, CHAT_ERR_RENDER, "not all arguments converted during string formatting");
    return jx_buf_take(c, b);
}

/* str.format with plain fields: {} {0} {name}, optional !s / !r, no format specs. */
jv_t jb_str_dot_format(jctx_t *c, jv_t fmt, int n_args, const jv_t *args, int n_kw,
                           const char **kw_names, const jv_t *kw_vals) {
    jstr_t *f = jv_str(fmt);
    jbuf_t *b = jx_buf_new(c);
    int auto_idx = 0;
    for (size_t i = 0; i < f->len; i++) {
        char ch = f->s[i];
        if ((ch == '{' || ch == '}') && i + 1 < f->len && f->s[i + 1] == ch) {
            jx_buf_put(c, b, &ch, 1);
            i++;
            continue;
        }
        if (ch == '}') jx_fail(c, CHAT_ERR_RENDER, "Single '}' encountered in format string");
        if (ch != '{') {
            jx_buf_put(c, b, &ch, 1);
            continue;
        }
        size_t e = i + 1;
        while (e < f->len && f->s[e] != '}') e++;
        if (e >= f->len) jx_fail(c, CHAT_ERR_RENDER, "Single '{' encountered in format string");
        size_t a = i + 1, end = e;
        char conv = 's';
        for (size_t k = a; k < e; k++) {
            if (f->s[k] == ':') jx_fail(c, CHAT_ERR_RENDER, "format specs in str.format() are not supported");
            if (f->s[k] == '!') {
                if (k + 2 != e || (f->s[k + 1] != 's' && f->s[k + 1] != 'r'))
                    jx_fail(c, CHAT_ERR_RENDER, "unsupported conversion in str.format()");
                conv = f->s[k + 1];
                end = k;
                break;
            }
            if (f->s[k] == '.' || f->s[k] == '[')
                jx_fail(c, CHAT_ERR_RENDER, "attribute or item access in str.format() is not supported");
        }
        jv_t v = jv_undef();
        bool found = false;
        if (end == a) {
            if (auto_idx < n_args) { v = args[auto_idx]; found = true; }
            auto_idx++;
        } else if (f->s[a] >= '0' && f->s[a] <= '9') {
            long k = strtol(f->s + a, NULL, 10);
            if (k < n_args) { v = args[k]; found = true; }
        } else {
            for (int k = 0; k < n_kw; k++)
                if (strlen(kw_names[k]) == end - a && !memcmp(kw_names[k], f->s + a, end - a)) {
                    v = kw_vals[k];
                    found = true;
                }
            if (!found) jx_fail(c, CHAT_ERR_RENDER, "'%.*s'", (int)(end - a), f->s + a);
        }
        if (!found) jx_fail(c, CHAT_ERR_RENDER, "Replacement index %d out of range for positional args tuple", auto_idx - 1);
        if (conv == 'r') jv_write_repr(c, b, v);
        else jv_write_str(c, b, v);
        i = e;
    }
    return jx_buf_take(c, b);
}
