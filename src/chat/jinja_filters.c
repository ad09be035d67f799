/* jinja_filters.c - jinja2's filters, as jinja2 3.1 implements them: the table that
 * maps each name (aliases included) to its function and to the parameters jinja2
 * binds, the dispatch, and the filters on single values (abs attr default float int
 * round). String filters: jinja_filters_str.c; sequence filters: jinja_filters_seq.c;
 * tests: jinja_tests.c. The parser resolves a name to its index in the table once, so a
 * render calls a filter by indexing; binding arguments here, from the table, keeps
 * jinja2's argument errors in one place.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja_filters.h"

/* ---- filters on single values -------------------------------------------------------- */

static jv_t f_abs(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    if (v.t == JV_UNDEF) jv_fail_undefined(c, v);
    if (v.t == JV_INT) {
        if (v.u.i == INT64_MIN) jx_fail(c, CHAT_ERR_RENDER, "integer overflow");
        return jv_int(v.u.i < 0 ? -v.u.i : v.u.i);
    }
    if (v.t == JV_BOOL) return jv_int(v.u.b);
    if (v.t == JV_FLOAT) return jv_float(fabs(v.u.f));
    jx_fail(c, CHAT_ERR_RENDER, "bad operand type for abs(): '%s'", jv_type_name(v));
}

static jv_t f_attr(jctx_t *c, jv_t v, const jf_args_t *a) {
    jv_t r, s = jv_to_str(c, a->p[0]);
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

static jv_t f_default(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    bool use = v.t == JV_UNDEF || (!jv_is_absent(p[1]) && jv_truthy(c, p[1]) && !jv_truthy(c, v));
    if (!use) {
        jv_incref(v);
        return v;
    }
    if (jv_is_absent(p[0])) return jx_str_new(c, "", 0);
    jv_incref(p[0]);
    return p[0];
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

static jv_t f_float(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)c;
    double f;
    if (v.t == JV_FLOAT) return v;
    if (v.t == JV_INT || v.t == JV_BOOL) return jv_float(v.t == JV_INT ? (double)v.u.i : v.u.b);
    if (v.t == JV_STR && parse_py_float(jv_str(v)->s, &f)) return jv_float(f);
    if (jv_is_absent(a->p[0])) return jv_float(0.0);
    jv_incref(a->p[0]);
    return a->p[0];
}

static jv_t f_int(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)c;
    const jv_t *p = a->p;
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

static jv_t f_round(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
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

/* ---- the table ----------------------------------------------------------------------- */

typedef struct {
    const char *name; /* as templates spell it */
    jf_fn_t fn;
    /* The name jinja2's argument errors use (an alias reports its target's name; the
     * case filters say "filter"), or NULL for a filter that reads its arguments as
     * written: format, map and select/reject take any number of them. */
    const char *bind_name;
    const char *const *params; /* parameter names, in positional order */
    int n_params, n_required;  /* the first n_required parameters must be passed */
} filter_t;

#define BINDS(bind_name, params, n_required)                                                     \
    bind_name, params, (int)(sizeof params / sizeof *params), n_required
#define BINDS_NONE(bind_name) bind_name, NULL, 0, 0
#define RAW_ARGS NULL, NULL, 0, 0

static const char *const P_ATTR[] = {"name"};
static const char *const P_DEFAULT[] = {"default_value", "boolean"};
static const char *const P_DICTSORT[] = {"case_sensitive", "by", "reverse"};
static const char *const P_FLOAT[] = {"default"};
static const char *const P_INT[] = {"default", "base"};
static const char *const P_INDENT[] = {"width", "first", "blank"};
static const char *const P_JOIN[] = {"d", "attribute"};
static const char *const P_MINMAX[] = {"case_sensitive", "attribute"};
static const char *const P_REPLACE[] = {"old", "new", "count"};
static const char *const P_ROUND[] = {"precision", "method"};
static const char *const P_SORT[] = {"reverse", "case_sensitive", "attribute"};
static const char *const P_SUM[] = {"attribute", "start"};
static const char *const P_TOJSON[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
static const char *const P_TRIM[] = {"chars"};
static const char *const P_UNIQUE[] = {"case_sensitive", "attribute"};

static const filter_t FILTERS[] = {
    {"abs", f_abs, BINDS_NONE("abs")},
    {"attr", f_attr, BINDS("attr", P_ATTR, 1)},
    {"capitalize", jf_capitalize, BINDS_NONE("filter")},
    {"count", jf_length, BINDS_NONE("length")},
    {"d", f_default, BINDS("default", P_DEFAULT, 0)},
    {"default", f_default, BINDS("default", P_DEFAULT, 0)},
    {"dictsort", jf_dictsort, BINDS("dictsort", P_DICTSORT, 0)},
    {"e", jf_escape, BINDS_NONE("escape")},
    {"escape", jf_escape, BINDS_NONE("escape")},
    {"first", jf_first, BINDS_NONE("first")},
    {"float", f_float, BINDS("float", P_FLOAT, 0)},
    {"format", jf_format, RAW_ARGS},
    {"indent", jf_indent, BINDS("indent", P_INDENT, 0)},
    {"int", f_int, BINDS("int", P_INT, 0)},
    {"items", jf_items, BINDS_NONE("items")},
    {"join", jf_join, BINDS("join", P_JOIN, 0)},
    {"last", jf_last, BINDS_NONE("last")},
    {"length", jf_length, BINDS_NONE("length")},
    {"list", jf_list, BINDS_NONE("list")},
    {"lower", jf_lower, BINDS_NONE("filter")},
    {"map", jf_map, RAW_ARGS},
    {"max", jf_max, BINDS("max", P_MINMAX, 0)},
    {"min", jf_min, BINDS("min", P_MINMAX, 0)},
    {"reject", jf_reject, RAW_ARGS},
    {"rejectattr", jf_rejectattr, RAW_ARGS},
    {"replace", jf_replace, BINDS("replace", P_REPLACE, 2)},
    {"reverse", jf_reverse, BINDS_NONE("reverse")},
    {"round", f_round, BINDS("round", P_ROUND, 0)},
    {"safe", jf_string, BINDS_NONE("string")},
    {"select", jf_select, RAW_ARGS},
    {"selectattr", jf_selectattr, RAW_ARGS},
    {"sort", jf_sort, BINDS("sort", P_SORT, 0)},
    {"string", jf_string, BINDS_NONE("string")},
    {"sum", jf_sum, BINDS("sum", P_SUM, 0)},
    {"title", jf_title, BINDS_NONE("filter")},
    {"tojson", jf_tojson, BINDS("tojson", P_TOJSON, 0)},
    {"trim", jf_trim, BINDS("trim", P_TRIM, 0)},
    {"unique", jf_unique, BINDS("unique", P_UNIQUE, 0)},
    {"upper", jf_upper, BINDS_NONE("filter")},
};
#define N_FILTERS ((int)(sizeof FILTERS / sizeof *FILTERS))

static const char *const UNSUPPORTED_FILTERS[] = {
    "batch", "center", "filesizeformat", "forceescape", "groupby", "pprint", "random", "slice",
    "striptags", "truncate", "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr"};

int jb_filter_id(const char *name) {
    for (int i = 0; i < N_FILTERS; i++)
        if (!strcmp(FILTERS[i].name, name)) return i;
    for (size_t i = 0; i < sizeof UNSUPPORTED_FILTERS / sizeof *UNSUPPORTED_FILTERS; i++)
        if (!strcmp(UNSUPPORTED_FILTERS[i], name)) return -2;
    return -1;
}

jv_t jb_filter(jctx_t *c, int id, jv_t v, int n_args, const jv_t *args, int n_kw,
               const char **kw_names, const jv_t *kw_vals) {
    if (id < 0 || id >= N_FILTERS) jx_fail(c, CHAT_ERR_RENDER, "internal error: unknown filter");
    const filter_t *f = &FILTERS[id];
    SL_ASSERT(f->n_params <= JF_MAX_PARAMS);
    jf_args_t a = {.n_args = n_args, .args = args, .n_kw = n_kw, .kw_names = kw_names, .kw_vals = kw_vals};
    if (f->bind_name)
        jb_bind(c, f->bind_name, f->params, f->n_params, f->n_required, n_args, args, n_kw, kw_names,
                kw_vals, a.p);
    return f->fn(c, v, &a);
}
