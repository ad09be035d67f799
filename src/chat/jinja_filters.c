/* jinja_filters.c - jinja2's filters and tests, as jinja2 3.1 implements them.
 *
 * Filters: abs attr capitalize count d default dictsort e escape first float format
 * indent int items join last length list lower map max min reject rejectattr replace
 * reverse round safe select selectattr sort string sum title tojson trim unique upper.
 * tojson is transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False), not jinja2's HTML-safe one. map/select/reject/
 * unique/items/reverse return one-shot iterators in jinja2 (always true, no len());
 * here they are lists flagged as generators, so those differences are kept.
 * Tests and select/reject: jinja_tests.c.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

enum {
    F_ABS, F_ATTR, F_CAPITALIZE, F_DEFAULT, F_DICTSORT, F_ESCAPE, F_FIRST, F_FLOAT, F_FORMAT,
    F_INDENT, F_INT, F_ITEMS, F_JOIN, F_LAST, F_LENGTH, F_LIST, F_LOWER, F_MAP, F_MAX, F_MIN,
    F_REJECT, F_REJECTATTR, F_REPLACE, F_REVERSE, F_ROUND, F_SAFE, F_SELECT, F_SELECTATTR, F_SORT,
    F_STRING, F_SUM, F_TITLE, F_TOJSON, F_TRIM, F_UNIQUE, F_UPPER,
};

typedef struct {
    const char *name;
    int id;
} named_t;

static const named_t FILTERS[] = {
    {"abs", F_ABS}, {"attr", F_ATTR}, {"capitalize", F_CAPITALIZE}, {"count", F_LENGTH},
    {"d", F_DEFAULT}, {"default", F_DEFAULT}, {"dictsort", F_DICTSORT}, {"e", F_ESCAPE},
    {"escape", F_ESCAPE}, {"first", F_FIRST}, {"float", F_FLOAT}, {"format", F_FORMAT},
    {"indent", F_INDENT}, {"int", F_INT}, {"items", F_ITEMS}, {"join", F_JOIN}, {"last", F_LAST},
    {"length", F_LENGTH}, {"list", F_LIST}, {"lower", F_LOWER}, {"map", F_MAP}, {"max", F_MAX},
    {"min", F_MIN}, {"reject", F_REJECT}, {"rejectattr", F_REJECTATTR}, {"replace", F_REPLACE},
    {"reverse", F_REVERSE}, {"round", F_ROUND}, {"safe", F_SAFE}, {"select", F_SELECT},
    {"selectattr", F_SELECTATTR}, {"sort", F_SORT}, {"string", F_STRING}, {"sum", F_SUM},
    {"title", F_TITLE}, {"tojson", F_TOJSON}, {"trim", F_TRIM}, {"unique", F_UNIQUE},
    {"upper", F_UPPER},
};
static const char *const UNSUPPORTED_FILTERS[] = {
    "batch", "center", "filesizeformat", "forceescape", "groupby", "pprint", "random", "slice",
    "striptags", "truncate", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};

static int lookup(const named_t *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].id;
    return -1;
}

int jb_filter_id(const char *name) {
    int id = lookup(FILTERS, sizeof FILTERS / sizeof *FILTERS, name);
    if (id >= 0) return id;
    for (size_t i = 0; i < sizeof UNSUPPORTED_FILTERS / sizeof *UNSUPPORTED_FILTERS; i++)
        if (!strcmp(UNSUPPORTED_FILTERS[i], name)) return -2;
    return -1;
}

/* ---- helpers ---------------------------------------------------------------------- */

static jv_t ignore_case(jctx_t *c, jv_t v) {
    if (v.t == JV_STR) return jb_case(c, v, JB_LOWER);
    jv_incref(v);
    return v;
}

/* make_attrgetter: "a.b.0" -> item lookups (digit parts as integers). */
jv_t jb_attr_path(jctx_t *c, jv_t item, jv_t attr, jv_t dflt) {
    jv_incref(item);
    if (attr.t == JV_INT) {
        jv_t r = jx_getitem(c, item, attr);
        jv_decref(c, item);
        return r;
    }
    if (attr.t != JV_STR) jx_fail(c, CHAT_ERR_RENDER, "attribute must be a string or an integer");
    jstr_t *a = jv_str(attr);
    size_t start = 0;
    for (size_t i = 0; i <= a->len; i++) {
        if (i < a->len && a->s[i] != '.') continue;
        bool digits = i > start;
        for (size_t k = start; k < i; k++)
            if (a->s[k] < '0' || a->s[k] > '9') digits = false;
        jv_t key;
        if (digits && i - start < 18) key = jv_int(strtoll(a->s + start, NULL, 10));
        else key = jx_str_new(c, a->s + start, i - start);
        jv_t next = jx_getitem(c, item, key);
        jv_decref(c, key);
        jv_decref(c, item);
        item = next;
        if (!jv_is_absent(dflt) && dflt.t != JV_NONE && item.t == JV_UNDEF) {
            jv_decref(c, item);
            jv_incref(dflt);
            item = dflt;
        }
        start = i + 1;
    }
    return item;
}

static jv_t gen_new(jctx_t *c, const char *name) {
    jv_t g = jx_list_new(c, JL_GEN, 0);
    jv_list(g)->gen_name = name;
    return g;
}

static int64_t len_of(jctx_t *c, jv_t v) {
    switch (v.t) {
    case JV_UNDEF: return 0;
    case JV_STR: return jstr_nchars(jv_str(v));
    case JV_LIST:
        if (jv_list(v)->kind != JL_GEN) return (int64_t)jv_list(v)->n;
        break;
    case JV_DICT: return (int64_t)jv_dict(v)->n;
    default: break;
    }
    jx_fail(c, CHAT_ERR_RENDER, "object of type '%s' has no len()", jv_type_name(v));
}

static jv_t jinja_title(jctx_t *c, jv_t s) {
    /* jinja2: "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s\(\{\[\<]+)", s) if w) */
    jstr_t *x = jv_str(s);
    jbuf_t *b = jx_buf_new(c);
    size_t i = 0;
    bool word_start = true;
    while (i < x->len) {
        size_t a = i;
        int cp = ju_decode(x->s, x->len, &i);
        bool delim = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                     (cp >= 0 && ju_isspace((uint32_t)cp));
        if (delim) {
            jx_buf_put(c, b, x->s + a, i - a);
            word_start = true;
            continue;
        }
        jv_t one = jx_str_new(c, x->s + a, i - a);
        jv_t m = jb_case(c, one, word_start ? JB_UPPER : JB_LOWER);
        jx_buf_put(c, b, jv_str(m)->s, jv_str(m)->len);
        jv_decref(c, m);
        jv_decref(c, one);
        word_start = false;
    }
    return jx_buf_take(c, b);
}

static bool parse_py_int(const char *s, int base, int64_t *out) {
    while (*s && ju_isspace((unsigned char)*s)) s++;
    bool neg = false;
    if (*s == '+' || *s == '-') neg = *s++ == '-';
    if (base == 16 && s[0] == '0' && (s[1] | 32) == 'x') s += 2;
    else if (base == 8 && s[0] == '0' && (s[1] | 32) == 'o') s += 2;
    else if (base == 2 && s[0] == '0' && (s[1] | 32) == 'b') s += 2;
    int64_t v = 0;
    int n = 0;
    for (; *s; s++) {
        if (*s == '_' && n > 0 && s[1] && s[1] != '_') continue;
        int d = (*s >= '0' && *s <= '9') ? *s - '0' : ((*s | 32) >= 'a' && (*s | 32) <= 'z') ? (*s | 32) - 'a' + 10 : 99;
        if (d >= base) break;
        if (__builtin_mul_overflow(v, base, &v) || __builtin_add_overflow(v, d, &v)) return false;
        n++;
    }
    while (*s && ju_isspace((unsigned char)*s)) s++;
    if (*s || n == 0) return false;
    *out = neg ? -v : v;
    return true;
}

static bool parse_py_float(const char *s, double *out) {
    char buf[128];
    size_t n = 0;
    while (*s && ju_isspace((unsigned char)*s)) s++;
    for (; *s && n + 1 < sizeof buf; s++)
        if (*s != '_') buf[n++] = *s;
    while (n && ju_isspace((unsigned char)buf[n - 1])) n--;
    buf[n] = '\0';
    if (n == 0) return false;
    char *end;
    double v = strtod(buf, &end);
    if (*end) return false;
    if ((buf[0] | 32) == '0' && (buf[1] | 32) == 'x') return false; /* float('0x1p3') is an error */
    *out = v;
    return true;
}

static void html_escape(jctx_t *c, jbuf_t *b, jv_t s) {
    jstr_t *x = jv_str(s);
    for (size_t i = 0; i < x->len; i++) {
        const char *r = NULL;
        switch (x->s[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        }
        if (r) jx_buf_put(c, b, r, strlen(r));
        else jx_buf_put(c, b, x->s + i, 1);
    }
}

/* ---- filters ------------------------------------------------------------------------ */

#define BIND(name, params, n, req)                                                               \
    jb_bind(c, name, params, n, req, n_args, args, n_kw, kw_names, kw_vals, p)

jv_t jb_filter(jctx_t *c, int id, jv_t v, int n_args, const jv_t *args, int n_kw,
               const char **kw_names, const jv_t *kw_vals) {
    jv_t p[4], s, r;
    switch (id) {
    case F_ABS:
        BIND("abs", NULL, 0, 0);
        if (v.t == JV_UNDEF) jv_fail_undefined(c, v);
        if (v.t == JV_INT) {
            if (v.u.i == INT64_MIN) jx_fail(c, CHAT_ERR_RENDER, "integer overflow");
            return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
        jx_fail(c, CHAT_ERR_RENDER, "bad operand type for abs(): '%s'", jv_type_name(v));
    case F_ATTR: {
        static const char *const P[] = {"name"};
        BIND("attr", P, 1, 1);
        s = jv_to_str(c, p[0]);
        if (v.t == JV_DICT || v.t == JV_LIST || v.t == JV_STR) {
            if (!jb_method(c, v, jv_str(s)->s, jv_str(s)->len, &r))
                r = jx_undef_msg(c, false, "'%s object' has no attribute '%s'", jv_type_name(v), jv_str(s)->s);
        } else if (v.t == JV_UNDEF) {
            r = jx_undef_msg(c, false, "'%s' is undefined", jv_str(s)->s);
        } else {
            r = jx_getattr(c, v, jv_str(s)->s, jv_str(s)->len);
        }
        jv_decref(c, s);
        return r;
    }
    case F_CAPITALIZE:
    case F_UPPER:
    case F_LOWER:
    case F_TITLE:
        BIND("filter", NULL, 0, 0);
        s = jv_to_str(c, v);
        r = id == F_TITLE ? jinja_title(c, s) : jb_case(c, s, id == F_UPPER ? JB_UPPER : id == F_LOWER ? JB_LOWER : JB_CAPITALIZE);
        jv_decref(c, s);
        return r;
    case F_DEFAULT: {
        static const char *const P[] = {"default_value", "boolean"};
        BIND("default", P, 2, 0);
        bool use = v.t == JV_UNDEF || (!jv_is_absent(p[1]) && jv_truthy(c, p[1]) && !jv_truthy(c, v));
        if (!use) {
            jv_incref(v);
            return v;
        }
        if (jv_is_absent(p[0])) return jx_str_new(c, "", 0);
        jv_incref(p[0]);
        return p[0];
    }
    case F_DICTSORT: {
        static const char *const P[] = {"case_sensitive", "by", "reverse"};
        BIND("dictsort", P, 3, 0);
        if (v.t != JV_DICT) jx_fail(c, CHAT_ERR_RENDER, "dictsort requires a mapping");
        int pos = 0;
        if (!jv_is_absent(p[1])) {
            if (p[1].t == JV_STR && !strcmp(jv_str(p[1])->s, "value")) pos = 1;
            else if (!(p[1].t == JV_STR && !strcmp(jv_str(p[1])->s, "key")))
                jx_fail(c, CHAT_ERR_RENDER, "You can only sort by either \"key\" or \"value\"");
        }
        bool cs = !jv_is_absent(p[0]) && jv_truthy(c, p[0]);
        jdict_t *d = jv_dict(v);
        jv_t items = jx_list_new(c, JL_LIST, d->n), keys = jx_list_new(c, JL_LIST, d->n);
        for (size_t i = 0; i < d->n; i++) {
            jv_t t = jx_list_new(c, JL_TUPLE, 2);
            jv_incref(d->k[i]);
            jv_incref(d->v[i]);
            jx_list_push(c, t, d->k[i]);
            jx_list_push(c, t, d->v[i]);
            jx_list_push(c, items, t);
            jv_t key = pos ? d->v[i] : d->k[i];
            if (cs) jv_incref(key);
            jx_list_push(c, keys, cs ? key : ignore_case(c, key));
        }
        r = jb_sorted_by(c, items, keys, !jv_is_absent(p[2]) && jv_truthy(c, p[2]));
        jv_decref(c, items);
        return r;
    }
    case F_ESCAPE: {
        BIND("escape", NULL, 0, 0);
        s = jv_to_str(c, v);
        jbuf_t *b = jx_buf_new(c);
        html_escape(c, b, s);
        jv_decref(c, s);
        return jx_buf_take(c, b);
    }
    case F_FIRST:
    case F_LAST: {
        BIND(id == F_FIRST ? "first" : "last", NULL, 0, 0);
        if (id == F_LAST && !(v.t == JV_STR || v.t == JV_DICT || v.t == JV_UNDEF ||
                              (v.t == JV_LIST && jv_list(v)->kind != JL_GEN)))
            jx_fail(c, CHAT_ERR_RENDER, "'%s' object is not reversible", jv_type_name(v));
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        if (l->n == 0) r = jx_undef_msg(c, false, "No %s item, sequence was empty.", id == F_FIRST ? "first" : "last");
        else {
            r = l->v[id == F_FIRST ? 0 : l->n - 1];
            jv_incref(r);
        }
        jv_decref(c, it);
        return r;
    }
    case F_FLOAT: {
        static const char *const P[] = {"default"};
        BIND("float", P, 1, 0);
        double f;
        if (v.t == JV_FLOAT) return v;
        if (v.t == JV_INT || v.t == JV_BOOL) return jv_float(v.t == JV_INT ? (double)v.u.i : v.u.b);
        if (v.t == JV_STR && parse_py_float(jv_str(v)->s, &f)) return jv_float(f);
        if (jv_is_absent(p[0])) return jv_float(0.0);
        jv_incref(p[0]);
        return p[0];
    }
    case F_INT: {
        static const char *const P[] = {"default", "base"};
        BIND("int", P, 2, 0);
        int64_t i;
        double f;
        int base = jv_is_absent(p[1]) ? 10 : (int)(p[1].t == JV_INT ? p[1].u.i : 10);
        if (v.t == JV_INT) return v;
        if (v.t == JV_BOOL) return jv_int(v.u.b);
        if (v.t == JV_FLOAT && isfinite(v.u.f) && fabs(v.u.f) < 9.2e18) return jv_int((int64_t)v.u.f);
        if (v.t == JV_STR) {
            if (parse_py_int(jv_str(v)->s, base, &i)) return jv_int(i);
            if (parse_py_float(jv_str(v)->s, &f) && isfinite(f) && fabs(f) < 9.2e18) return jv_int((int64_t)f);
        }
        if (jv_is_absent(p[0])) return jv_int(0);
        jv_incref(p[0]);
        return p[0];
    }
    case F_FORMAT: {
        if (n_kw) jx_fail(c, CHAT_ERR_RENDER, "format filter with keyword arguments is not supported");
        s = jv_to_str(c, v);
        jv_t t = jx_list_new(c, JL_TUPLE, (size_t)n_args);
        for (int i = 0; i < n_args; i++) {
            jv_incref(args[i]);
            jx_list_push(c, t, args[i]);
        }
        r = jb_str_format(c, s, t);
        jv_decref(c, t);
        jv_decref(c, s);
        return r;
    }
    case F_INDENT: {
        static const char *const P[] = {"width", "first", "blank"};
        BIND("indent", P, 3, 0);
        jv_t ind;
        if (!jv_is_absent(p[0]) && p[0].t == JV_STR) {
            ind = p[0];
            jv_incref(ind);
        } else {
            int64_t w = jv_is_absent(p[0]) ? 4 : p[0].t == JV_INT ? p[0].u.i : p[0].t == JV_BOOL ? p[0].u.b : -1;
            if (w < 0 && !jv_is_absent(p[0]) && p[0].t != JV_INT)
                jx_fail(c, CHAT_ERR_RENDER, "can't multiply sequence by non-int of type '%s'", jv_type_name(p[0]));
            jv_t sp = jx_str_new(c, " ", 1);
            ind = jx_binop(c, OP_MUL, sp, jv_int(w));
            jv_decref(c, sp);
        }
        s = jv_to_str(c, v);
        jv_t s2 = jx_str_cat(c, jv_str(s)->s, jv_str(s)->len, "\n", 1); /* jinja2's splitlines quirk */
        jv_decref(c, s);
        jv_t lines = jb_splitlines(c, s2, false);
        jv_decref(c, s2);
        jlist_t *l = jv_list(lines);
        bool blank = !jv_is_absent(p[2]) && jv_truthy(c, p[2]);
        jbuf_t *b = jx_buf_new(c);
        jstr_t *is = jv_str(ind);
        if (!jv_is_absent(p[1]) && jv_truthy(c, p[1])) jx_buf_put(c, b, is->s, is->len);
        for (size_t i = 0; i < l->n; i++) {
            jstr_t *line = jv_str(l->v[i]);
            if (i) {
                jx_buf_put(c, b, "\n", 1);
                if (blank || line->len) jx_buf_put(c, b, is->s, is->len);
            }
            jx_buf_put(c, b, line->s, line->len);
        }
        jv_decref(c, lines);
        jv_decref(c, ind);
        return jx_buf_take(c, b);
    }
    case F_ITEMS: {
        BIND("items", NULL, 0, 0);
        r = gen_new(c, "do_items");
        if (v.t == JV_UNDEF) return r;
        if (v.t != JV_DICT) jx_fail(c, CHAT_ERR_RENDER, "Can only get item pairs from a mapping.");
        jdict_t *d = jv_dict(v);
        for (size_t i = 0; i < d->n; i++) {
            jv_t t = jx_list_new(c, JL_TUPLE, 2);
            jv_incref(d->k[i]);
            jv_incref(d->v[i]);
            jx_list_push(c, t, d->k[i]);
            jx_list_push(c, t, d->v[i]);
            jx_list_push(c, r, t);
        }
        return r;
    }
    case F_JOIN: {
        static const char *const P[] = {"d", "attribute"};
        BIND("join", P, 2, 0);
        jv_t sep = jv_is_absent(p[0]) ? jx_str_new(c, "", 0) : jv_to_str(c, p[0]);
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        jbuf_t *b = jx_buf_new(c);
        for (size_t i = 0; i < l->n; i++) {
            if (i) jx_buf_put(c, b, jv_str(sep)->s, jv_str(sep)->len);
            if (!jv_is_absent(p[1]) && p[1].t != JV_NONE) {
                jv_t x = jb_attr_path(c, l->v[i], p[1], jv_absent());
                jv_write_str(c, b, x);
                jv_decref(c, x);
            } else {
                jv_write_str(c, b, l->v[i]);
            }
        }
        jv_decref(c, it);
        jv_decref(c, sep);
        return jx_buf_take(c, b);
    }
    case F_LENGTH:
        BIND("length", NULL, 0, 0);
        return jv_int(len_of(c, v));
    case F_LIST: {
        BIND("list", NULL, 0, 0);
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        r = jx_list_new(c, JL_LIST, l->n);
        for (size_t i = 0; i < l->n; i++) {
            jv_incref(l->v[i]);
            jx_list_push(c, r, l->v[i]);
        }
        jv_decref(c, it);
        return r;
    }
    case F_MAP: {
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        r = gen_new(c, "sync_do_map");
        int attr_kw = -1, dflt_kw = -1;
        for (int k = 0; k < n_kw; k++) {
            if (!strcmp(kw_names[k], "attribute")) attr_kw = k;
            else if (!strcmp(kw_names[k], "default")) dflt_kw = k;
        }
        if (n_args == 0 && attr_kw >= 0) {
            for (int k = 0; k < n_kw; k++)
                if (k != attr_kw && k != dflt_kw)
                    jx_fail(c, CHAT_ERR_RENDER, "Unexpected keyword argument '%s'", kw_names[k]);
            for (size_t i = 0; i < l->n; i++)
                jx_list_push(c, r, jb_attr_path(c, l->v[i], kw_vals[attr_kw], dflt_kw >= 0 ? kw_vals[dflt_kw] : jv_absent()));
        } else {
            if (n_args == 0) jx_fail(c, CHAT_ERR_RENDER, "map requires a filter argument");
            if (args[0].t != JV_STR) jx_fail(c, CHAT_ERR_RENDER, "map filter name must be a string");
            int fid = jb_filter_id(jv_str(args[0])->s);
            if (fid < 0) jx_fail(c, CHAT_ERR_RENDER, "No filter named '%s'.", jv_str(args[0])->s);
            for (size_t i = 0; i < l->n; i++) {
                jx_step(c);
                jx_list_push(c, r, jb_filter(c, fid, l->v[i], n_args - 1, args + 1, n_kw, kw_names, kw_vals));
            }
        }
        jv_decref(c, it);
        return r;
    }
    case F_MAX:
    case F_MIN: {
        static const char *const P[] = {"case_sensitive", "attribute"};
        BIND(id == F_MAX ? "max" : "min", P, 2, 0);
        bool cs = !jv_is_absent(p[0]) && jv_truthy(c, p[0]);
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        r = jx_undef_msg(c, false, "No aggregated item, sequence was empty.");
        jv_t best_key = jv_none();
        for (size_t i = 0; i < l->n; i++) {
            jv_t k = (!jv_is_absent(p[1]) && p[1].t != JV_NONE) ? jb_attr_path(c, l->v[i], p[1], jv_absent())
                                                                 : (jv_incref(l->v[i]), l->v[i]);
            if (!cs) {
                jv_t lk = ignore_case(c, k);
                jv_decref(c, k);
                k = lk;
            }
            int cmp = i ? jv_compare(c, k, best_key, id == F_MAX ? ">" : "<") : 0;
            if (i == 0 || (id == F_MAX ? cmp > 0 : cmp < 0)) {
                jv_decref(c, best_key);
                best_key = k;
                jv_decref(c, r);
                r = l->v[i];
                jv_incref(r);
            } else {
                jv_decref(c, k);
            }
        }
        jv_decref(c, best_key);
        jv_decref(c, it);
        return r;
    }
    case F_REJECT:
    case F_SELECT:
    case F_REJECTATTR:
    case F_SELECTATTR:
        if (n_kw) jx_fail(c, CHAT_ERR_RENDER, "keyword arguments to select/reject are not supported");
        return jb_select_reject(c, v, n_args, args, id == F_REJECT || id == F_REJECTATTR,
                             id == F_SELECTATTR || id == F_REJECTATTR);
    case F_REPLACE: {
        static const char *const P[] = {"old", "new", "count"};
        BIND("replace", P, 3, 2);
        s = jv_to_str(c, v);
        jv_t o = jv_to_str(c, p[0]), n = jv_to_str(c, p[1]);
        int64_t cnt = -1;
        if (!jv_is_absent(p[2]) && p[2].t != JV_NONE) {
            if (p[2].t != JV_INT) jx_fail(c, CHAT_ERR_RENDER, "'%s' object cannot be interpreted as an integer", jv_type_name(p[2]));
            cnt = p[2].u.i;
        }
        r = jb_replace(c, s, o, n, cnt);
        jv_decref(c, s);
        jv_decref(c, o);
        jv_decref(c, n);
        return r;
    }
    case F_REVERSE: {
        BIND("reverse", NULL, 0, 0);
        if (v.t == JV_STR) {
            jv_t it = jx_iterate(c, v);
            jlist_t *l = jv_list(it);
            jbuf_t *b = jx_buf_new(c);
            for (size_t i = l->n; i-- > 0;) jx_buf_put(c, b, jv_str(l->v[i])->s, jv_str(l->v[i])->len);
            jv_decref(c, it);
            return jx_buf_take(c, b);
        }
        if (!(v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF))
            jx_fail(c, CHAT_ERR_RENDER, "argument must be iterable");
        bool was_gen = v.t == JV_LIST && jv_list(v)->kind == JL_GEN;
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        r = was_gen ? jx_list_new(c, JL_LIST, l->n)
                    : gen_new(c, v.t == JV_DICT ? "dict_reversekeyiterator" : "list_reverseiterator");
        for (size_t i = l->n; i-- > 0;) {
            jv_incref(l->v[i]);
            jx_list_push(c, r, l->v[i]);
        }
        jv_decref(c, it);
        return r;
    }
    case F_ROUND: {
        static const char *const P[] = {"precision", "method"};
        BIND("round", P, 2, 0);
        int64_t prec = jv_is_absent(p[0]) ? 0 : p[0].t == JV_INT ? p[0].u.i : 0;
        const char *method = (!jv_is_absent(p[1]) && p[1].t == JV_STR) ? jv_str(p[1])->s : "common";
        if (strcmp(method, "common") && strcmp(method, "ceil") && strcmp(method, "floor"))
            jx_fail(c, CHAT_ERR_RENDER, "method must be common, ceil or floor");
        if (v.t != JV_INT && v.t != JV_BOOL && v.t != JV_FLOAT)
            jx_fail(c, CHAT_ERR_RENDER, "type %s doesn't define __round__ method", jv_type_name(v));
        if (prec < -20 || prec > 20) jx_fail(c, CHAT_ERR_RENDER, "round precision out of range");
        double x = v.t == JV_FLOAT ? v.u.f : (double)(v.t == JV_INT ? v.u.i : v.u.b);
        if (strcmp(method, "common")) {
            double m = pow(10, (double)prec);
            return jv_float((method[0] == 'c' ? ceil(x * m) : floor(x * m)) / m);
        }
        if (v.t != JV_FLOAT && prec >= 0) return v.t == JV_BOOL ? jv_int(v.u.b) : v;
        if (prec >= 0) {
            char buf[400];
            snprintf(buf, sizeof buf, "%.*f", (int)prec, x);
            return jv_float(strtod(buf, NULL));
        }
        double m = pow(10, (double)-prec);
        double q = x / m, rq = nearbyint(q);
        return v.t == JV_FLOAT ? jv_float(rq * m) : jv_int((int64_t)(rq * m));
    }
    case F_SAFE:
    case F_STRING:
        BIND("string", NULL, 0, 0);
        return jv_to_str(c, v);
    case F_SORT: {
        static const char *const P[] = {"reverse", "case_sensitive", "attribute"};
        BIND("sort", P, 3, 0);
        bool cs = !jv_is_absent(p[1]) && jv_truthy(c, p[1]);
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        jv_t keys = jx_list_new(c, JL_LIST, l->n);
        for (size_t i = 0; i < l->n; i++) {
            jv_t k;
            if (!jv_is_absent(p[2]) && p[2].t != JV_NONE) {
                if (p[2].t == JV_STR && strchr(jv_str(p[2])->s, ','))
                    jx_fail(c, CHAT_ERR_RENDER, "sort by several attributes is not supported");
                k = jb_attr_path(c, l->v[i], p[2], jv_absent());
            } else {
                k = l->v[i];
                jv_incref(k);
            }
            if (!cs) {
                jv_t lk = ignore_case(c, k);
                jv_decref(c, k);
                k = lk;
            }
            jx_list_push(c, keys, k);
        }
        r = jb_sorted_by(c, it, keys, !jv_is_absent(p[0]) && jv_truthy(c, p[0]));
        jv_decref(c, it);
        return r;
    }
    case F_SUM: {
        static const char *const P[] = {"attribute", "start"};
        BIND("sum", P, 2, 0);
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        r = jv_is_absent(p[1]) ? jv_int(0) : p[1];
        jv_incref(r);
        for (size_t i = 0; i < l->n; i++) {
            jv_t x = (!jv_is_absent(p[0]) && p[0].t != JV_NONE) ? jb_attr_path(c, l->v[i], p[0], jv_absent())
                                                                 : (jv_incref(l->v[i]), l->v[i]);
            jv_t nr = jx_binop(c, OP_ADD, r, x);
            jv_decref(c, r);
            jv_decref(c, x);
            r = nr;
        }
        jv_decref(c, it);
        return r;
    }
    case F_TOJSON: {
        static const char *const P[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
        BIND("tojson", P, 4, 0);
        jjson_opts_t o = {.ensure_ascii = !jv_is_absent(p[0]) && jv_truthy(c, p[0]),
                          .sort_keys = !jv_is_absent(p[3]) && jv_truthy(c, p[3])};
        jv_t ind = jv_none();
        if (!jv_is_absent(p[1]) && p[1].t != JV_NONE) {
            if (p[1].t == JV_STR) {
                ind = p[1];
                jv_incref(ind);
            } else if (p[1].t == JV_INT || p[1].t == JV_BOOL) {
                jv_t sp = jx_str_new(c, " ", 1);
                ind = jx_binop(c, OP_MUL, sp, p[1]);
                jv_decref(c, sp);
            } else {
                jx_fail(c, CHAT_ERR_RENDER, "tojson: indent must be an int or a string");
            }
            o.indent = jv_str(ind)->s;
        }
        o.item_sep = o.indent ? "," : ", ";
        o.key_sep = ": ";
        if (!jv_is_absent(p[2]) && p[2].t != JV_NONE) {
            jv_t sep = jx_iterate(c, p[2]);
            if (jv_list(sep)->n != 2 || jv_list(sep)->v[0].t != JV_STR || jv_list(sep)->v[1].t != JV_STR)
                jx_fail(c, CHAT_ERR_RENDER, "tojson: separators must be a pair of strings");
            o.item_sep = jv_str(jv_list(sep)->v[0])->s;
            o.key_sep = jv_str(jv_list(sep)->v[1])->s;
            jbuf_t *b = jx_buf_new(c);
            jv_write_json(c, b, v, &o, 0);
            jv_decref(c, sep);
            jv_decref(c, ind);
            return jx_buf_take(c, b);
        }
        jbuf_t *b = jx_buf_new(c);
        jv_write_json(c, b, v, &o, 0);
        jv_decref(c, ind);
        return jx_buf_take(c, b);
    }
    case F_TRIM: {
        static const char *const P[] = {"chars"};
        BIND("trim", P, 1, 0);
        s = jv_to_str(c, v);
        r = jb_strip(c, s, p[0], 3);
        jv_decref(c, s);
        return r;
    }
    case F_UNIQUE: {
        static const char *const P[] = {"case_sensitive", "attribute"};
        BIND("unique", P, 2, 0);
        bool cs = !jv_is_absent(p[0]) && jv_truthy(c, p[0]);
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        jv_t seen = jx_dict_new(c, false);
        r = gen_new(c, "sync_do_unique");
        for (size_t i = 0; i < l->n; i++) {
            jv_t k = (!jv_is_absent(p[1]) && p[1].t != JV_NONE) ? jb_attr_path(c, l->v[i], p[1], jv_absent())
                                                                 : (jv_incref(l->v[i]), l->v[i]);
            if (!cs) {
                jv_t lk = ignore_case(c, k);
                jv_decref(c, k);
                k = lk;
            }
            jv_t dummy;
            if (jx_dict_get(c, seen, k, &dummy)) {
                jv_decref(c, k);
                continue;
            }
            jx_dict_set(c, seen, k, jv_none());
            jv_incref(l->v[i]);
            jx_list_push(c, r, l->v[i]);
        }
        jv_decref(c, seen);
        jv_decref(c, it);
        return r;
    }
    }
    jx_fail(c, CHAT_ERR_RENDER, "internal error: unknown filter");
}
