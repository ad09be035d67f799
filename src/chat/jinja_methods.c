/* jinja_methods.c - the Python methods templates call on values (str: strip split
 * splitlines startswith endswith upper lower title capitalize casefold replace find index
 * count join is*() removeprefix removesuffix format; dict: items keys values get copy;
 * list: index count copy; loop.cycle) and the globals (raise_exception strftime_now
 * namespace dict range; range is capped at 100000 items like jinja2's sandbox and returns
 * a list). One table (receiver type, name, parameters) holds both; jfunc_t.fn indexes it.
 * Mutating methods (list.append, dict.update, ...) give an Undefined that raises jinja2's
 * SecurityError message when called, as in transformers.
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jinja.h"

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

/* ---- methods and globals ------------------------------------------------------------- */

#define MAX_PARAMS 3 /* the most parameters a builtin binds by name */

/* A call's arguments. For a table entry that binds, jb_bind has checked the call
 * against the entry's parameters and put them in p[] before the builtin runs; the
 * others read the call as written. */
typedef struct {
    const char *name;     /* the method's or global's name, for error messages */
    jv_t p[MAX_PARAMS];   /* borrowed; jv_absent() for a parameter not passed */
    int n_args;
    const jv_t *args;
    int n_kw;
    const char **kw_names;
    const jv_t *kw_vals;
} call_args_t;

/* A builtin: `s` is the bound object (borrowed; none for a global); returns a new reference. */
typedef jv_t (*builtin_fn_t)(jctx_t *c, jv_t s, const call_args_t *a);

static jv_t m_strip(jctx_t *c, jv_t s, const call_args_t *a) { return jb_strip(c, s, a->p[0], 3); }
static jv_t m_lstrip(jctx_t *c, jv_t s, const call_args_t *a) { return jb_strip(c, s, a->p[0], 1); }
static jv_t m_rstrip(jctx_t *c, jv_t s, const call_args_t *a) { return jb_strip(c, s, a->p[0], 2); }

static jv_t split(jctx_t *c, jv_t s, const call_args_t *a, bool right) {
    return jb_split(c, s, a->p[0], jv_is_absent(a->p[1]) ? -1 : int_arg(c, a->p[1], "maxsplit"), right);
}

static jv_t m_split(jctx_t *c, jv_t s, const call_args_t *a) { return split(c, s, a, false); }
static jv_t m_rsplit(jctx_t *c, jv_t s, const call_args_t *a) { return split(c, s, a, true); }

static jv_t m_splitlines(jctx_t *c, jv_t s, const call_args_t *a) {
    return jb_splitlines(c, s, !jv_is_absent(a->p[0]) && jv_truthy(c, a->p[0]));
}

static jv_t m_startswith(jctx_t *c, jv_t s, const call_args_t *a) {
    return jv_bool(jb_affix(c, s, a->p[0], false));
}

static jv_t m_endswith(jctx_t *c, jv_t s, const call_args_t *a) {
    return jv_bool(jb_affix(c, s, a->p[0], true));
}

static jv_t m_upper(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return jb_case(c, s, JB_UPPER); }
static jv_t m_lower(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return jb_case(c, s, JB_LOWER); }
static jv_t m_title(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return jb_case(c, s, JB_TITLE); }
static jv_t m_capitalize(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)a;
    return jb_case(c, s, JB_CAPITALIZE);
}

static jv_t m_casefold(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return jb_case(c, s, JB_LOWER); }

static jv_t m_replace(jctx_t *c, jv_t s, const call_args_t *a) {
    return jb_replace(c, s, a->p[0], a->p[1], jv_is_absent(a->p[2]) ? -1 : int_arg(c, a->p[2], "count"));
}

/* find/rfind (-1 when absent) and index/rindex (which fail then) */
static jv_t find(jctx_t *c, jv_t s, const call_args_t *a, bool right, bool must_find) {
    if (!jv_is_absent(a->p[1]) || !jv_is_absent(a->p[2]))
        jx_fail(c, CHAT_ERR_RENDER, "%s() with start/end is not supported", a->name);
    int64_t r = jb_find(c, s, a->p[0], right);
    if (r < 0 && must_find) jx_fail(c, CHAT_ERR_RENDER, "substring not found");
    return jv_int(r);
}

static jv_t m_find(jctx_t *c, jv_t s, const call_args_t *a) { return find(c, s, a, false, false); }
static jv_t m_rfind(jctx_t *c, jv_t s, const call_args_t *a) { return find(c, s, a, true, false); }
static jv_t m_index(jctx_t *c, jv_t s, const call_args_t *a) { return find(c, s, a, false, true); }
static jv_t m_rindex(jctx_t *c, jv_t s, const call_args_t *a) { return find(c, s, a, true, true); }

static jv_t m_count(jctx_t *c, jv_t s, const call_args_t *a) {
    jstr_t *x = jv_str(s), *n = jb_need_str(c, a->p[0], "count() argument");
    if (n->len == 0) return jv_int(jstr_nchars(x) + 1);
    int64_t k = 0;
    for (const char *q = x->s; (q = jb_find_bytes(q, (size_t)(x->s + x->len - q), n->s, n->len)); q += n->len) k++;
    return jv_int(k);
}

static jv_t m_join(jctx_t *c, jv_t s, const call_args_t *a) {
    jv_t it = jx_iterate(c, a->p[0]);
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

static jv_t m_isdigit(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)c, (void)a;
    return jv_bool(jb_str_pred(jv_str(s), JB_ISDIGIT));
}

static jv_t m_isalpha(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)c, (void)a;
    return jv_bool(jb_str_pred(jv_str(s), JB_ISALPHA));
}

static jv_t m_isalnum(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)c, (void)a;
    return jv_bool(jb_str_pred(jv_str(s), JB_ISALNUM));
}

static jv_t m_isspace(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)c, (void)a;
    return jv_bool(jb_str_pred(jv_str(s), JB_ISSPACE));
}

static jv_t m_isupper(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)c, (void)a;
    return jv_bool(jb_str_pred(jv_str(s), JB_ISUPPER));
}

static jv_t m_islower(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)c, (void)a;
    return jv_bool(jb_str_pred(jv_str(s), JB_ISLOWER));
}

static jv_t remove_affix(jctx_t *c, jv_t s, const call_args_t *a, bool suffix) {
    jstr_t *x = jv_str(s), *fix = jb_need_str(c, a->p[0], a->name);
    if (!jb_affix(c, s, a->p[0], suffix) || fix->len == 0) {
        jv_incref(s);
        return s;
    }
    return suffix ? jx_str_new(c, x->s, x->len - fix->len) : jx_str_new(c, x->s + fix->len, x->len - fix->len);
}

static jv_t m_removeprefix(jctx_t *c, jv_t s, const call_args_t *a) { return remove_affix(c, s, a, false); }
static jv_t m_removesuffix(jctx_t *c, jv_t s, const call_args_t *a) { return remove_affix(c, s, a, true); }

static jv_t m_format(jctx_t *c, jv_t s, const call_args_t *a) {
    return jb_str_dot_format(c, s, a->n_args, a->args, a->n_kw, a->kw_names, a->kw_vals);
}

static jv_t m_items(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return items_list(c, s, 0); }
static jv_t m_keys(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return items_list(c, s, 1); }
static jv_t m_values(jctx_t *c, jv_t s, const call_args_t *a) { (void)a; return items_list(c, s, 2); }

static jv_t m_get(jctx_t *c, jv_t s, const call_args_t *a) {
    static const char *const P_GET[] = {"key", "default"};
    jv_t p[2];
    if (a->n_kw) jx_fail(c, CHAT_ERR_RENDER, "get() takes no keyword arguments");
    jb_bind(c, a->name, P_GET, 2, 1, a->n_args, a->args, 0, NULL, NULL, p);
    jv_t v;
    if (jx_dict_get(c, s, p[0], &v)) {
        jv_incref(v);
        return v;
    }
    v = jv_is_absent(p[1]) ? jv_none() : p[1];
    jv_incref(v);
    return v;
}

/* dict.copy and list.copy (tuples have no copy) */
static jv_t m_copy(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)a;
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

/* list.index(x) (index = true) or list.count(x) */
static jv_t list_find(jctx_t *c, jv_t s, const call_args_t *a, bool index) {
    jlist_t *l = jv_list(s);
    int64_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        if (jv_equal(c, l->v[i], a->p[0])) {
            if (index) return jv_int((int64_t)i);
            k++;
        }
    if (index) jx_fail(c, CHAT_ERR_RENDER, "list.index(x): x not in list");
    return jv_int(k);
}

static jv_t m_list_index(jctx_t *c, jv_t s, const call_args_t *a) { return list_find(c, s, a, true); }
static jv_t m_list_count(jctx_t *c, jv_t s, const call_args_t *a) { return list_find(c, s, a, false); }

static jv_t m_cycle(jctx_t *c, jv_t s, const call_args_t *a) {
    if (a->n_kw) jx_fail(c, CHAT_ERR_RENDER, "cycle() takes no keyword arguments");
    if (a->n_args == 0) jx_fail(c, CHAT_ERR_RENDER, "no items for cycling given");
    jv_t v = a->args[((jloop_t *)s.u.o)->index0 % a->n_args];
    jv_incref(v);
    return v;
}

static jv_t g_raise_exception(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)s;
    jv_t m = jv_to_str(c, a->p[0]);
    jx_fail(c, CHAT_ERR_RAISED, "%s", jv_str(m)->s);
}

static jv_t g_strftime_now(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)s;
    jstr_t *fmt = jb_need_str(c, a->p[0], "strftime() argument 1");
    time_t now = time(NULL);
    struct tm tmv;
    localtime_r(&now, &tmv);
    char out[512];
    size_t n = fmt->len ? strftime(out, sizeof out, fmt->s, &tmv) : 0;
    if (n == 0 && fmt->len) jx_fail(c, CHAT_ERR_RENDER, "strftime_now: format too long or invalid");
    return jx_str_new(c, out, n);
}

static jv_t g_namespace(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)s;
    jv_t d = jx_dict_new(c, true);
    fill_dict(c, d, a->n_args, a->args, a->n_kw, a->kw_names, a->kw_vals, true);
    return d;
}

static jv_t g_dict(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)s;
    jv_t d = jx_dict_new(c, false);
    fill_dict(c, d, a->n_args, a->args, a->n_kw, a->kw_names, a->kw_vals, false);
    return d;
}

static jv_t g_range(jctx_t *c, jv_t s, const call_args_t *a) {
    (void)s;
    int n_args = a->n_args;
    const jv_t *args = a->args;
    if (a->n_kw) jx_fail(c, CHAT_ERR_RENDER, "range() takes no keyword arguments");
    if (n_args < 1 || n_args > 3)
        jx_fail(c, CHAT_ERR_RENDER, "range expected at least 1 argument, got %d", n_args);
    int64_t lo = 0, hi, st = 1;
    if (n_args == 1) hi = int_arg(c, args[0], "range");
    else {
        lo = int_arg(c, args[0], "range");
        hi = int_arg(c, args[1], "range");
        if (n_args == 3) st = int_arg(c, args[2], "range");
    }
    if (st == 0) jx_fail(c, CHAT_ERR_RENDER, "range() arg 3 must not be zero");
    __int128 cnt = 0;
    if (st > 0 && lo < hi) cnt = ((__int128)hi - lo - 1) / st + 1;
    if (st < 0 && lo > hi) cnt = ((__int128)lo - hi - 1) / (-(__int128)st) + 1;
    if (cnt > 100000)
        jx_fail(c, CHAT_ERR_RENDER, "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
    jv_t out = jx_list_new(c, JL_LIST, (size_t)cnt);
    for (int64_t k = 0; k < (int64_t)cnt; k++) jx_list_push(c, out, jv_int(lo + k * st));
    return out;
}

/* ---- the table ----------------------------------------------------------------------- */

#define GLOBAL 0xff /* builtin_t.type of a global function: no value has this type */

typedef struct {
    uint8_t type;     /* jv_type_t of the values that have this method, or GLOBAL */
    const char *name;
    builtin_fn_t fn;
    bool binds;       /* false: fn reads the call's arguments as written */
    const char *const *params; /* parameter names, in positional order */
    int n_params, n_required;  /* the first n_required parameters must be passed */
} builtin_t;

#define BINDS(params, n_required) true, params, (int)(sizeof params / sizeof *params), n_required
#define BINDS_NONE true, NULL, 0, 0
#define RAW_ARGS false, NULL, 0, 0

static const char *const P_CHARS[] = {"chars"}, *const P_SPLIT[] = {"sep", "maxsplit"},
                         *const P_KEEP[] = {"keepends"}, *const P_AFFIX[] = {"prefix"},
                         *const P_REPL[] = {"old", "new", "count"}, *const P_SUB[] = {"sub", "start", "end"},
                         *const P_ONE[] = {"x"}, *const P_MSG[] = {"message"}, *const P_FMT[] = {"format"};

static const builtin_t BUILTINS[] = {
    {JV_STR, "strip", m_strip, BINDS(P_CHARS, 0)},
    {JV_STR, "lstrip", m_lstrip, BINDS(P_CHARS, 0)},
    {JV_STR, "rstrip", m_rstrip, BINDS(P_CHARS, 0)},
    {JV_STR, "split", m_split, BINDS(P_SPLIT, 0)},
    {JV_STR, "rsplit", m_rsplit, BINDS(P_SPLIT, 0)},
    {JV_STR, "splitlines", m_splitlines, BINDS(P_KEEP, 0)},
    {JV_STR, "startswith", m_startswith, BINDS(P_AFFIX, 1)}, /* start, end: unsupported */
    {JV_STR, "endswith", m_endswith, BINDS(P_AFFIX, 1)},
    {JV_STR, "upper", m_upper, BINDS_NONE},
    {JV_STR, "lower", m_lower, BINDS_NONE},
    {JV_STR, "title", m_title, BINDS_NONE},
    {JV_STR, "capitalize", m_capitalize, BINDS_NONE},
    {JV_STR, "casefold", m_casefold, BINDS_NONE},
    {JV_STR, "replace", m_replace, BINDS(P_REPL, 2)},
    {JV_STR, "find", m_find, BINDS(P_SUB, 1)},
    {JV_STR, "rfind", m_rfind, BINDS(P_SUB, 1)},
    {JV_STR, "index", m_index, BINDS(P_SUB, 1)},
    {JV_STR, "rindex", m_rindex, BINDS(P_SUB, 1)},
    {JV_STR, "count", m_count, BINDS(P_SUB, 1)},
    {JV_STR, "join", m_join, BINDS(P_ONE, 1)},
    {JV_STR, "isdigit", m_isdigit, BINDS_NONE},
    {JV_STR, "isalpha", m_isalpha, BINDS_NONE},
    {JV_STR, "isalnum", m_isalnum, BINDS_NONE},
    {JV_STR, "isspace", m_isspace, BINDS_NONE},
    {JV_STR, "isupper", m_isupper, BINDS_NONE},
    {JV_STR, "islower", m_islower, BINDS_NONE},
    {JV_STR, "removeprefix", m_removeprefix, BINDS(P_ONE, 1)},
    {JV_STR, "removesuffix", m_removesuffix, BINDS(P_ONE, 1)},
    {JV_STR, "format", m_format, RAW_ARGS},
    {JV_DICT, "items", m_items, BINDS_NONE},
    {JV_DICT, "keys", m_keys, BINDS_NONE},
    {JV_DICT, "values", m_values, BINDS_NONE},
    {JV_DICT, "get", m_get, RAW_ARGS}, /* positional only: binds itself */
    {JV_DICT, "copy", m_copy, BINDS_NONE},
    {JV_LIST, "index", m_list_index, BINDS(P_ONE, 1)},
    {JV_LIST, "count", m_list_count, BINDS(P_ONE, 1)},
    {JV_LIST, "copy", m_copy, BINDS_NONE},
    {JV_LOOP, "cycle", m_cycle, RAW_ARGS},
    {GLOBAL, "raise_exception", g_raise_exception, BINDS(P_MSG, 1)},
    {GLOBAL, "strftime_now", g_strftime_now, BINDS(P_FMT, 1)},
    {GLOBAL, "namespace", g_namespace, RAW_ARGS},
    {GLOBAL, "dict", g_dict, RAW_ARGS},
    {GLOBAL, "range", g_range, RAW_ARGS},
};
#define N_BUILTINS ((int)(sizeof BUILTINS / sizeof *BUILTINS))

/* Mutating methods: the sandbox makes them unsafe (tuples have none of them). */
static const struct {
    uint8_t type;
    const char *name;
} UNSAFE[] = {
    {JV_LIST, "append"}, {JV_LIST, "extend"}, {JV_LIST, "insert"}, {JV_LIST, "pop"},
    {JV_LIST, "remove"}, {JV_LIST, "reverse"}, {JV_LIST, "sort"}, {JV_LIST, "clear"},
    {JV_DICT, "update"}, {JV_DICT, "pop"}, {JV_DICT, "popitem"},
    {JV_DICT, "setdefault"}, {JV_DICT, "clear"},
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
    for (int i = 0; i < N_BUILTINS; i++) {
        const builtin_t *m = &BUILTINS[i];
        if (m->type == obj.t && strlen(m->name) == len && !memcmp(m->name, name, len)) {
            if (tuple && m->fn == m_copy) continue;
            *out = make_func(c, i, obj, m->name);
            return true;
        }
    }
    for (size_t i = 0; i < sizeof UNSAFE / sizeof *UNSAFE; i++) {
        if (UNSAFE[i].type == obj.t && !tuple && strlen(UNSAFE[i].name) == len &&
            !memcmp(UNSAFE[i].name, name, len)) {
            *out = jx_undef_msg(c, true, "access to attribute '%s' of '%s' object is unsafe.", UNSAFE[i].name,
                                jv_type_name(obj));
            return true;
        }
    }
    return false;
}

jv_t jb_call_builtin(jctx_t *c, const jfunc_t *f, int n_args, const jv_t *args, int n_kw,
                     const char **kw_names, const jv_t *kw_vals) {
    if (f->fn < 0 || f->fn >= N_BUILTINS) jx_fail(c, CHAT_ERR_RENDER, "internal error: unknown builtin");
    const builtin_t *b = &BUILTINS[f->fn];
    SL_ASSERT(b->n_params <= MAX_PARAMS);
    call_args_t a = {
        .name = f->name, .n_args = n_args, .args = args, .n_kw = n_kw, .kw_names = kw_names, .kw_vals = kw_vals};
    if (b->binds)
        jb_bind(c, f->name, b->params, b->n_params, b->n_required, n_args, args, n_kw, kw_names, kw_vals, a.p);
    return b->fn(c, f->self, &a);
}

void jb_define_globals(jctx_t *c, jscope_t *s) {
    for (int i = 0; i < N_BUILTINS; i++)
        if (BUILTINS[i].type == GLOBAL)
            jx_scope_set(c, s, BUILTINS[i].name, make_func(c, i, jv_none(), BUILTINS[i].name));
}
