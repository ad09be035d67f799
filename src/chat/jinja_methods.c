/* jinja_methods.c - Python methods templates call on values, and the globals.
 *
 * Strings: strip/lstrip/rstrip, split/rsplit/splitlines, startswith/endswith,
 * upper/lower/title/capitalize, replace, find/rfind/index/count, join, is*(),
 * removeprefix/removesuffix. Dicts: items/keys/values/get/copy. Lists: index/count.
 * The immutable sandbox forbids mutation: list.append, dict.update and friends give an
 * Undefined that raises jinja2's SecurityError message when called, as in transformers.
 * Globals: raise_exception, strftime_now, namespace, dict, range (capped at 100000
 * items like jinja2's sandbox; it returns a list, so it prints as one).
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

enum {
    M_STRIP, M_LSTRIP, M_RSTRIP, M_SPLIT, M_RSPLIT, M_SPLITLINES, M_STARTSWITH, M_ENDSWITH,
    M_UPPER, M_LOWER, M_TITLE, M_CAPITALIZE, M_CASEFOLD, M_REPLACE, M_FIND, M_RFIND, M_INDEX,
    M_RINDEX, M_COUNT, M_JOIN, M_ISDIGIT, M_ISALPHA, M_ISALNUM, M_ISSPACE, M_ISUPPER, M_ISLOWER,
    M_REMOVEPREFIX, M_REMOVESUFFIX, M_FORMAT, M_ITEMS, M_KEYS, M_VALUES, M_GET, M_COPY,
    M_LINDEX, M_LCOUNT, M_CYCLE,
    G_RAISE, G_STRFTIME, G_NAMESPACE, G_DICT, G_RANGE,
};

typedef struct {
    uint8_t type;
    const char *name;
    int id;
} method_t;

static const method_t METHODS[] = {
    {JV_STR, "strip", M_STRIP}, {JV_STR, "lstrip", M_LSTRIP}, {JV_STR, "rstrip", M_RSTRIP},
    {JV_STR, "split", M_SPLIT}, {JV_STR, "rsplit", M_RSPLIT}, {JV_STR, "splitlines", M_SPLITLINES},
    {JV_STR, "startswith", M_STARTSWITH}, {JV_STR, "endswith", M_ENDSWITH},
    {JV_STR, "upper", M_UPPER}, {JV_STR, "lower", M_LOWER}, {JV_STR, "title", M_TITLE},
    {JV_STR, "capitalize", M_CAPITALIZE}, {JV_STR, "casefold", M_CASEFOLD},
    {JV_STR, "replace", M_REPLACE}, {JV_STR, "find", M_FIND}, {JV_STR, "rfind", M_RFIND},
    {JV_STR, "index", M_INDEX}, {JV_STR, "rindex", M_RINDEX}, {JV_STR, "count", M_COUNT},
    {JV_STR, "join", M_JOIN}, {JV_STR, "isdigit", M_ISDIGIT}, {JV_STR, "isalpha", M_ISALPHA},
    {JV_STR, "isalnum", M_ISALNUM}, {JV_STR, "isspace", M_ISSPACE}, {JV_STR, "isupper", M_ISUPPER},
    {JV_STR, "islower", M_ISLOWER}, {JV_STR, "removeprefix", M_REMOVEPREFIX},
    {JV_STR, "removesuffix", M_REMOVESUFFIX}, {JV_STR, "format", M_FORMAT},
    {JV_DICT, "items", M_ITEMS}, {JV_DICT, "keys", M_KEYS}, {JV_DICT, "values", M_VALUES},
    {JV_DICT, "get", M_GET}, {JV_DICT, "copy", M_COPY},
    {JV_LIST, "index", M_LINDEX}, {JV_LIST, "count", M_LCOUNT}, {JV_LIST, "copy", M_COPY},
    {JV_LOOP, "cycle", M_CYCLE},
};

static const method_t UNSAFE[] = {
    {JV_LIST, "append", 0}, {JV_LIST, "extend", 0}, {JV_LIST, "insert", 0}, {JV_LIST, "pop", 0},
    {JV_LIST, "remove", 0}, {JV_LIST, "reverse", 0}, {JV_LIST, "sort", 0}, {JV_LIST, "clear", 0},
    {JV_DICT, "update", 0}, {JV_DICT, "pop", 0}, {JV_DICT, "popitem", 0},
    {JV_DICT, "setdefault", 0}, {JV_DICT, "clear", 0},
};

static jv_t make_func(jctx_t *c, int fn, jv_t self, const char *name) {
    jfunc_t *f = jx_obj_new(c, JV_FUNC, sizeof(jfunc_t));
    f->fn = fn;
    jv_incref(self);
    f->self = self;
    f->name = name;
    jv_t v = {.t = JV_FUNC};
    v.u.o = &f->h;
    return v;
}

bool jb_method(jctx_t *c, jv_t obj, const char *name, size_t len, jv_t *out) {
    bool tuple = obj.t == JV_LIST && jv_list(obj)->kind == JL_TUPLE;
    if (obj.t == JV_LIST && jv_list(obj)->kind == JL_GEN) return false;
    for (size_t i = 0; i < sizeof METHODS / sizeof *METHODS; i++) {
        const method_t *m = &METHODS[i];
        if (m->type == obj.t && strlen(m->name) == len && !memcmp(m->name, name, len)) {
            if (tuple && m->id == M_COPY) continue;
            *out = make_func(c, m->id, obj, m->name);
            return true;
        }
    }
    for (size_t i = 0; i < sizeof UNSAFE / sizeof *UNSAFE; i++) {
        const method_t *m = &UNSAFE[i];
        if (m->type == obj.t && !tuple && strlen(m->name) == len && !memcmp(m->name, name, len)) {
            *out = jx_undef_msg(c, true, "access to attribute '%s' of '%s' object is unsafe.", m->name,
                                jv_type_name(obj));
            return true;
        }
    }
    return false;
}

void jb_bind(jctx_t *c, const char *fname, const char *const *params, int n_params, int n_required,
             int n_args, const jv_t *args, int n_kw, const char **kw_names, const jv_t *kw_vals,
             jv_t *out) {
    if (n_args > n_params)
        jx_fail(c, CHAT_ERR_RENDER, "%s() takes at most %d argument%s (%d given)", fname, n_params,
                n_params == 1 ? "" : "s", n_args);
    for (int i = 0; i < n_params; i++) out[i] = i < n_args ? args[i] : jv_absent();
    for (int k = 0; k < n_kw; k++) {
        int j = -1;
        for (int i = 0; i < n_params; i++)
            if (!strcmp(params[i], kw_names[k])) j = i;
        if (j < 0) jx_fail(c, CHAT_ERR_RENDER, "%s() got an unexpected keyword argument '%s'", fname, kw_names[k]);
        if (j < n_args) jx_fail(c, CHAT_ERR_RENDER, "%s() got multiple values for argument '%s'", fname, kw_names[k]);
        out[j] = kw_vals[k];
    }
    for (int i = 0; i < n_required; i++)
        if (jv_is_absent(out[i]))
            jx_fail(c, CHAT_ERR_RENDER, "%s() missing required argument '%s'", fname, params[i]);
}

/* ---- calls ------------------------------------------------------------------------ */

static jv_t items_list(jctx_t *c, jv_t d, int which) { /* 0 items, 1 keys, 2 values */
    jdict_t *x = jv_dict(d);
    jv_t out = jx_list_new(c, JL_LIST, x->n);
    for (size_t i = 0; i < x->n; i++) {
        if (which == 0) {
            jv_t t = jx_list_new(c, JL_TUPLE, 2);
            jv_incref(x->k[i]);
            jv_incref(x->v[i]);
            jx_list_push(c, t, x->k[i]);
            jx_list_push(c, t, x->v[i]);
            jx_list_push(c, out, t);
        } else {
            jv_t v = which == 1 ? x->k[i] : x->v[i];
            jv_incref(v);
            jx_list_push(c, out, v);
        }
    }
    return out;
}

/* dict(*args, **kwargs) as Python builds it, into `d`. */
static void fill_dict(jctx_t *c, jv_t d, int n_args, const jv_t *args, int n_kw, const char **kw_names,
                      const jv_t *kw_vals, bool ns) {
    if (n_args > 1) jx_fail(c, CHAT_ERR_RENDER, "dict expected at most 1 argument, got %d", n_args);
    if (n_args == 1) {
        jv_t a = args[0];
        if (a.t == JV_DICT || a.t == JV_NS) {
            jdict_t *x = jv_dict(a);
            for (size_t i = 0; i < x->n; i++) {
                if (ns && x->k[i].t == JV_STR && jv_str(x->k[i])->s[0] == '_')
                    jx_fail(c, CHAT_ERR_RENDER, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. Please rename the attribute.", jv_str(x->k[i])->s);
                jv_incref(x->k[i]);
                jv_incref(x->v[i]);
                jx_dict_set(c, d, x->k[i], x->v[i]);
            }
        } else {
            jv_t it = jx_iterate(c, a);
            jlist_t *l = jv_list(it);
            for (size_t i = 0; i < l->n; i++) {
                jv_t pair = jx_iterate(c, l->v[i]);
                if (jv_list(pair)->n != 2)
                    jx_fail(c, CHAT_ERR_RENDER, "dictionary update sequence element #%zu has length %zu; 2 is required", i, jv_list(pair)->n);
                jv_t k = jv_list(pair)->v[0], v = jv_list(pair)->v[1];
                if (ns && k.t == JV_STR && jv_str(k)->s[0] == '_')
                    jx_fail(c, CHAT_ERR_RENDER, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. Please rename the attribute.", jv_str(k)->s);
                jv_incref(k);
                jv_incref(v);
                jx_dict_set(c, d, k, v);
                jv_decref(c, pair);
            }
            jv_decref(c, it);
        }
    }
    for (int k = 0; k < n_kw; k++) {
        if (ns && kw_names[k][0] == '_')
            jx_fail(c, CHAT_ERR_RENDER, "Chat templates cannot store underscore-prefixed attributes on a namespace, but got '%s'. Please rename the attribute.", kw_names[k]);
        jv_incref(kw_vals[k]);
        jx_dict_set(c, d, jx_str_new(c, kw_names[k], strlen(kw_names[k])), kw_vals[k]);
    }
}

static int64_t int_arg(jctx_t *c, jv_t v, const char *what) {
    if (v.t == JV_INT) return v.u.i;
    if (v.t == JV_BOOL) return v.u.b;
    if (v.t == JV_UNDEF) jv_fail_undefined(c, v);
    jx_fail(c, CHAT_ERR_RENDER, "'%s' object cannot be interpreted as an integer (%s)", jv_type_name(v), what);
}

jv_t jb_call_builtin(jctx_t *c, const jfunc_t *f, int n_args, const jv_t *args, int n_kw,
                     const char **kw_names, const jv_t *kw_vals) {
    jv_t s = f->self, p[4];
    static const char *const P_CHARS[] = {"chars"}, *const P_SPLIT[] = {"sep", "maxsplit"},
                             *const P_KEEP[] = {"keepends"}, *const P_AFFIX[] = {"prefix", "start", "end"},
                             *const P_REPL[] = {"old", "new", "count"}, *const P_SUB[] = {"sub", "start", "end"},
                             *const P_ONE[] = {"x"}, *const P_GET[] = {"key", "default"},
                             *const P_MSG[] = {"message"}, *const P_FMT[] = {"format"};
    switch (f->fn) {
    case M_STRIP:
    case M_LSTRIP:
    case M_RSTRIP:
        jb_bind(c, f->name, P_CHARS, 1, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        return jb_strip(c, s, p[0], f->fn == M_STRIP ? 3 : f->fn == M_LSTRIP ? 1 : 2);
    case M_SPLIT:
    case M_RSPLIT:
        jb_bind(c, f->name, P_SPLIT, 2, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        return jb_split(c, s, p[0], jv_is_absent(p[1]) ? -1 : int_arg(c, p[1], "maxsplit"), f->fn == M_RSPLIT);
    case M_SPLITLINES:
        jb_bind(c, f->name, P_KEEP, 1, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        return jb_splitlines(c, s, !jv_is_absent(p[0]) && jv_truthy(c, p[0]));
    case M_STARTSWITH:
    case M_ENDSWITH:
        jb_bind(c, f->name, P_AFFIX, 1, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        return jv_bool(jb_affix(c, s, p[0], f->fn == M_ENDSWITH));
    case M_UPPER:
    case M_LOWER:
    case M_TITLE:
    case M_CAPITALIZE:
    case M_CASEFOLD:
        jb_bind(c, f->name, NULL, 0, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        return jb_case(c, s, f->fn == M_UPPER ? JB_UPPER : f->fn == M_TITLE ? JB_TITLE
                             : f->fn == M_CAPITALIZE ? JB_CAPITALIZE : JB_LOWER);
    case M_REPLACE:
        jb_bind(c, f->name, P_REPL, 3, 2, n_args, args, n_kw, kw_names, kw_vals, p);
        return jb_replace(c, s, p[0], p[1], jv_is_absent(p[2]) ? -1 : int_arg(c, p[2], "count"));
    case M_FIND:
    case M_RFIND:
    case M_INDEX:
    case M_RINDEX: {
        jb_bind(c, f->name, P_SUB, 3, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        if (!jv_is_absent(p[1]) || !jv_is_absent(p[2]))
            jx_fail(c, CHAT_ERR_RENDER, "%s() with start/end is not supported", f->name);
        int64_t r = jb_find(c, s, p[0], f->fn == M_RFIND || f->fn == M_RINDEX);
        if (r < 0 && (f->fn == M_INDEX || f->fn == M_RINDEX)) jx_fail(c, CHAT_ERR_RENDER, "substring not found");
        return jv_int(r);
    }
    case M_COUNT: {
        jb_bind(c, f->name, P_SUB, 3, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        jstr_t *x = jv_str(s), *n = jb_need_str(c, p[0], "count() argument");
        if (n->len == 0) return jv_int(jstr_nchars(x) + 1);
        int64_t k = 0;
        for (const char *q = x->s; (q = jb_find_bytes(q, (size_t)(x->s + x->len - q), n->s, n->len)); q += n->len) k++;
        return jv_int(k);
    }
    case M_JOIN: {
        jb_bind(c, f->name, P_ONE, 1, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        jv_t it = jx_iterate(c, p[0]);
        jlist_t *l = jv_list(it);
        jbuf_t *b = jx_buf_new(c);
        for (size_t i = 0; i < l->n; i++) {
            if (l->v[i].t != JV_STR)
                jx_fail(c, CHAT_ERR_RENDER, "sequence item %zu: expected str instance, %s found", i, jv_type_name(l->v[i]));
            if (i) jx_buf_put(c, b, jv_str(s)->s, jv_str(s)->len);
            jx_buf_put(c, b, jv_str(l->v[i])->s, jv_str(l->v[i])->len);
        }
        jv_decref(c, it);
        return jx_buf_take(c, b);
    }
    case M_ISDIGIT:
    case M_ISALPHA:
    case M_ISALNUM:
    case M_ISSPACE:
    case M_ISUPPER:
    case M_ISLOWER:
        jb_bind(c, f->name, NULL, 0, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        return jv_bool(jb_str_pred(jv_str(s), JB_ISDIGIT + (f->fn - M_ISDIGIT)));
    case M_REMOVEPREFIX:
    case M_REMOVESUFFIX: {
        jb_bind(c, f->name, P_ONE, 1, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        jstr_t *x = jv_str(s), *a = jb_need_str(c, p[0], f->name);
        if (!jb_affix(c, s, p[0], f->fn == M_REMOVESUFFIX) || a->len == 0) {
            jv_incref(s);
            return s;
        }
        return f->fn == M_REMOVEPREFIX ? jx_str_new(c, x->s + a->len, x->len - a->len)
                                       : jx_str_new(c, x->s, x->len - a->len);
    }
    case M_FORMAT: return jb_str_dot_format(c, s, n_args, args, n_kw, kw_names, kw_vals);
    case M_ITEMS:
    case M_KEYS:
    case M_VALUES:
        jb_bind(c, f->name, NULL, 0, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        return items_list(c, s, f->fn == M_ITEMS ? 0 : f->fn == M_KEYS ? 1 : 2);
    case M_GET: {
        if (n_kw) jx_fail(c, CHAT_ERR_RENDER, "get() takes no keyword arguments");
        jb_bind(c, f->name, P_GET, 2, 1, n_args, args, 0, NULL, NULL, p);
        jv_t v;
        if (jx_dict_get(c, s, p[0], &v)) {
            jv_incref(v);
            return v;
        }
        v = jv_is_absent(p[1]) ? jv_none() : p[1];
        jv_incref(v);
        return v;
    }
    case M_COPY: {
        jb_bind(c, f->name, NULL, 0, 0, n_args, args, n_kw, kw_names, kw_vals, p);
        if (s.t == JV_DICT) {
            jv_t d = jx_dict_new(c, false);
            fill_dict(c, d, 1, &s, 0, NULL, NULL, false);
            return d;
        }
        jlist_t *l = jv_list(s);
        jv_t out = jx_list_new(c, JL_LIST, l->n);
        for (size_t i = 0; i < l->n; i++) {
            jv_incref(l->v[i]);
            jx_list_push(c, out, l->v[i]);
        }
        return out;
    }
    case M_LINDEX:
    case M_LCOUNT: {
        jb_bind(c, f->name, P_ONE, 1, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        jlist_t *l = jv_list(s);
        int64_t k = 0;
        for (size_t i = 0; i < l->n; i++)
            if (jv_equal(c, l->v[i], p[0])) {
                if (f->fn == M_LINDEX) return jv_int((int64_t)i);
                k++;
            }
        if (f->fn == M_LINDEX) jx_fail(c, CHAT_ERR_RENDER, "list.index(x): x not in list");
        return jv_int(k);
    }
    case M_CYCLE: {
        if (n_kw) jx_fail(c, CHAT_ERR_RENDER, "cycle() takes no keyword arguments");
        if (n_args == 0) jx_fail(c, CHAT_ERR_RENDER, "no items for cycling given");
        jv_t v = args[((jloop_t *)s.u.o)->index0 % n_args];
        jv_incref(v);
        return v;
    }
    case G_RAISE: {
        jb_bind(c, "raise_exception", P_MSG, 1, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        jv_t m = jv_to_str(c, p[0]);
        jx_fail(c, CHAT_ERR_RAISED, "%s", jv_str(m)->s);
    }
    case G_STRFTIME: {
        jb_bind(c, "strftime_now", P_FMT, 1, 1, n_args, args, n_kw, kw_names, kw_vals, p);
        jstr_t *fmt = jb_need_str(c, p[0], "strftime() argument 1");
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char out[512];
        size_t n = fmt->len ? strftime(out, sizeof out, fmt->s, &tmv) : 0;
        if (n == 0 && fmt->len) jx_fail(c, CHAT_ERR_RENDER, "strftime_now: format too long or invalid");
        return jx_str_new(c, out, n);
    }
    case G_NAMESPACE:
    case G_DICT: {
        jv_t d = jx_dict_new(c, f->fn == G_NAMESPACE);
        fill_dict(c, d, n_args, args, n_kw, kw_names, kw_vals, f->fn == G_NAMESPACE);
        return d;
    }
    case G_RANGE: {
        if (n_kw) jx_fail(c, CHAT_ERR_RENDER, "range() takes no keyword arguments");
        if (n_args < 1 || n_args > 3)
            jx_fail(c, CHAT_ERR_RENDER, "range expected at least 1 argument, got %d", n_args);
        int64_t a = 0, b, st = 1;
        if (n_args == 1) b = int_arg(c, args[0], "range");
        else {
            a = int_arg(c, args[0], "range");
            b = int_arg(c, args[1], "range");
            if (n_args == 3) st = int_arg(c, args[2], "range");
        }
        if (st == 0) jx_fail(c, CHAT_ERR_RENDER, "range() arg 3 must not be zero");
        __int128 cnt = 0;
        if (st > 0 && a < b) cnt = ((__int128)b - a - 1) / st + 1;
        if (st < 0 && a > b) cnt = ((__int128)a - b - 1) / (-(__int128)st) + 1;
        if (cnt > 100000)
            jx_fail(c, CHAT_ERR_RENDER, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
        jv_t out = jx_list_new(c, JL_LIST, (size_t)cnt);
        for (int64_t k = 0; k < (int64_t)cnt; k++) jx_list_push(c, out, jv_int(a + k * st));
        return out;
    }
    }
    jx_fail(c, CHAT_ERR_RENDER, "internal error: unknown builtin");
}

void jb_define_globals(jctx_t *c, jscope_t *s) {
    static const struct {
        const char *name;
        int id;
    } G[] = {{"raise_exception", G_RAISE}, {"strftime_now", G_STRFTIME}, {"namespace", G_NAMESPACE},
             {"dict", G_DICT}, {"range", G_RANGE}};
    for (size_t i = 0; i < sizeof G / sizeof *G; i++)
        jx_scope_set(c, s, G[i].name, make_func(c, G[i].id, jv_none(), G[i].name));
}
