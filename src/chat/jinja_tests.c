/* jinja_tests.c - jinja2's tests (`x is defined`, `n is divisibleby 3`, ...), the
 * select / reject / selectattr / rejectattr filters that run them, and the stable
 * sort the sort and dictsort filters share.
 *
 * defined undefined none boolean true false integer float number string mapping
 * iterable sequence callable sameas escaped lower upper even odd divisibleby in eq ne
 * lt le gt ge (and the aliases ==, equalto, lessthan, greaterthan, ...), filter, test,
 * with jinja2's definitions: `integer` excludes bools, `number` includes them, an
 * Undefined is iterable and a sequence, a generator is iterable but not a sequence.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

typedef struct {
    const char *name;
    int id;
} named_t;

enum {
    TS_DEFINED, TS_UNDEFINED, TS_NONE, TS_BOOLEAN, TS_TRUE, TS_FALSE, TS_INTEGER, TS_FLOAT, TS_NUMBER,
    TS_STRING, TS_MAPPING, TS_ITERABLE, TS_SEQUENCE, TS_CALLABLE, TS_SAMEAS, TS_ESCAPED, TS_LOWER, TS_UPPER,
    TS_EVEN, TS_ODD, TS_DIVISIBLEBY, TS_IN, TS_EQ, TS_NE, TS_LT, TS_LE, TS_GT, TS_GE, TS_FILTER, TS_TEST,
};
static const named_t TESTS[] = {
    {"defined", TS_DEFINED}, {"undefined", TS_UNDEFINED}, {"none", TS_NONE}, {"boolean", TS_BOOLEAN},
    {"true", TS_TRUE}, {"false", TS_FALSE}, {"integer", TS_INTEGER}, {"float", TS_FLOAT},
    {"number", TS_NUMBER}, {"string", TS_STRING}, {"mapping", TS_MAPPING}, {"iterable", TS_ITERABLE},
    {"sequence", TS_SEQUENCE}, {"callable", TS_CALLABLE}, {"sameas", TS_SAMEAS},
    {"escaped", TS_ESCAPED}, {"lower", TS_LOWER}, {"upper", TS_UPPER}, {"even", TS_EVEN},
    {"odd", TS_ODD}, {"divisibleby", TS_DIVISIBLEBY}, {"in", TS_IN}, {"eq", TS_EQ}, {"equalto", TS_EQ},
    {"==", TS_EQ}, {"ne", TS_NE}, {"!=", TS_NE}, {"lt", TS_LT}, {"lessthan", TS_LT}, {"<", TS_LT},
    {"le", TS_LE}, {"<=", TS_LE}, {"gt", TS_GT}, {"greaterthan", TS_GT}, {">", TS_GT}, {"ge", TS_GE},
    {">=", TS_GE}, {"filter", TS_FILTER}, {"test", TS_TEST},
};

static int lookup(const named_t *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return t[i].id;
    return -1;
}

int jb_test_id(const char *name) { return lookup(TESTS, sizeof TESTS / sizeof *TESTS, name); }

static bool run_test_by_name(jctx_t *c, jv_t name, jv_t v, int n_args, const jv_t *args) {
    if (name.t != JV_STR) jx_fail(c, CHAT_ERR_RENDER, "test name must be a string");
    int id = jb_test_id(jv_str(name)->s);
    if (id < 0) jx_fail(c, CHAT_ERR_RENDER, "No test named '%s'.", jv_str(name)->s);
    return jb_test(c, id, v, n_args, args);
}

/* select / reject / selectattr / rejectattr */
jv_t jb_select_reject(jctx_t *c, jv_t v, int n_args, const jv_t *args, bool reject, bool attr) {
    if (attr && n_args < 1) jx_fail(c, CHAT_ERR_RENDER, "Missing parameter for attribute name");
    int off = attr ? 1 : 0;
    jv_t it = jx_iterate(c, v);
    jv_t out = jx_list_new(c, JL_GEN, 0);
    jv_list(out)->gen_name = "select_or_reject";
    jlist_t *l = jv_list(it);
    for (size_t i = 0; i < l->n; i++) {
        jv_t x = attr ? jb_attr_path(c, l->v[i], args[0], jv_absent()) : (jv_incref(l->v[i]), l->v[i]);
        bool ok = n_args > off ? run_test_by_name(c, args[off], x, n_args - off - 1, args + off + 1)
                               : jv_truthy(c, x);
        jv_decref(c, x);
        if (ok != reject) {
            jv_incref(l->v[i]);
            jx_list_push(c, out, l->v[i]);
        }
        jx_step(c);
    }
    jv_decref(c, it);
    return out;
}

/* Stable merge sort of indices by key (keys compared with Python's <). */
static void sort_keys(jctx_t *c, jv_t *keys, size_t *idx, size_t *tmp, size_t n, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    sort_keys(c, keys, idx, tmp, h, reverse);
    sort_keys(c, keys, idx + h, tmp, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = jv_compare(c, keys[idx[j]], keys[idx[i]], "<");
        bool take_right = reverse ? r > 0 : r < 0;
        tmp[k++] = take_right ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* Sorts `items` (a list, borrowed) by keys (owned, consumed) into a new list. */
jv_t jb_sorted_by(jctx_t *c, jv_t items, jv_t keys, bool reverse) {
    jlist_t *l = jv_list(items);
    if (l->n == 0) {
        jv_decref(c, keys);
        return jx_list_new(c, JL_LIST, 0);
    }
    jbuf_t *b = jx_buf_new(c);
    for (size_t i = 0; i < l->n; i++) jx_buf_put(c, b, (const char *)&i, sizeof i);
    for (size_t i = 0; i < l->n; i++) jx_buf_put(c, b, (const char *)&i, sizeof i);
    size_t *idx = (size_t *)(void *)b->p;
    sort_keys(c, jv_list(keys)->v, idx, idx + l->n, l->n, reverse);
    jv_t out = jx_list_new(c, JL_LIST, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jv_incref(l->v[idx[i]]);
        jx_list_push(c, out, l->v[idx[i]]);
    }
    jx_obj_release(c, &b->h);
    jv_decref(c, keys);
    return out;
}

/* ---- tests ------------------------------------------------------------------------- */

/* jinja2's even/odd: value % 2 == 0 / == 1 (so 2.5 is neither). */
static bool test_mod2(jctx_t *c, jv_t v, int64_t want) {
    jv_t m = jx_binop(c, OP_MOD, v, jv_int(2));
    return jv_equal(c, m, jv_int(want));
}

bool jb_test(jctx_t *c, int id, jv_t v, int n_args, const jv_t *args) {
    static const int8_t N_ARGS[TS_TEST + 1] = {
        [TS_SAMEAS] = 1, [TS_DIVISIBLEBY] = 1, [TS_IN] = 1, [TS_EQ] = 1, [TS_NE] = 1,
        [TS_LT] = 1, [TS_LE] = 1, [TS_GT] = 1, [TS_GE] = 1};
    if (n_args != N_ARGS[id])
        jx_fail(c, CHAT_ERR_RENDER, "test takes %d argument%s but %d were given", N_ARGS[id],
                N_ARGS[id] == 1 ? "" : "s", n_args);
    switch (id) {
    case TS_DEFINED: return v.t != JV_UNDEF;
    case TS_UNDEFINED: return v.t == JV_UNDEF;
    case TS_NONE: return v.t == JV_NONE;
    case TS_BOOLEAN: return v.t == JV_BOOL;
    case TS_TRUE: return v.t == JV_BOOL && v.u.b;
    case TS_FALSE: return v.t == JV_BOOL && !v.u.b;
    case TS_INTEGER: return v.t == JV_INT;
    case TS_FLOAT: return v.t == JV_FLOAT;
    case TS_NUMBER: return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    case TS_STRING: return v.t == JV_STR;
    case TS_MAPPING: return v.t == JV_DICT;
    case TS_ITERABLE: return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
    case TS_SEQUENCE:
        return v.t == JV_STR || (v.t == JV_LIST && jv_list(v)->kind != JL_GEN) || v.t == JV_DICT ||
               v.t == JV_UNDEF;
    case TS_CALLABLE: return v.t == JV_FUNC || v.t == JV_UNDEF || v.t == JV_LOOP;
    case TS_SAMEAS: {
        jv_t o = args[0];
        if (v.t != o.t) return false;
        if (v.t == JV_NONE || v.t == JV_UNDEF) return v.t == JV_NONE || v.u.o == o.u.o;
        if (v.t == JV_BOOL) return v.u.b == o.u.b;
        if (v.t == JV_INT) return v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
        if (v.t == JV_FLOAT) return false;
        if (v.t == JV_STR) return jv_equal(c, v, o); /* CPython interns equal constants */
        return v.u.o == o.u.o;
    }
    case TS_ESCAPED: return false;
    case TS_LOWER:
    case TS_UPPER: {
        jv_t s = jv_to_str(c, v);
        jv_t m = jb_case(c, s, id == TS_LOWER ? JB_LOWER : JB_UPPER), o = jb_case(c, s, id == TS_LOWER ? JB_UPPER : JB_LOWER);
        bool r = jv_equal(c, s, m) && !jv_equal(c, s, o);
        jv_decref(c, s);
        jv_decref(c, m);
        jv_decref(c, o);
        return r;
    }
    case TS_EVEN: return test_mod2(c, v, 0);
    case TS_ODD: return test_mod2(c, v, 1);
    case TS_DIVISIBLEBY: {
        jv_t m = jx_binop(c, OP_MOD, v, args[0]);
        bool r = m.t == JV_FLOAT ? m.u.f == 0 : m.u.i == 0;
        return r;
    }
    case TS_IN: return jx_contains(c, args[0], v);
    case TS_EQ: return jv_equal(c, v, args[0]);
    case TS_NE: return !jv_equal(c, v, args[0]);
    case TS_LT: return jv_compare(c, v, args[0], "<") == -1;
    case TS_LE: { int r = jv_compare(c, v, args[0], "<="); return r == -1 || r == 0; }
    case TS_GT: return jv_compare(c, v, args[0], ">") == 1;
    case TS_GE: { int r = jv_compare(c, v, args[0], ">="); return r == 1 || r == 0; }
    case TS_FILTER: return v.t == JV_STR && jb_filter_id(jv_str(v)->s) >= 0;
    case TS_TEST: return v.t == JV_STR && jb_test_id(jv_str(v)->s) >= 0;
    }
    jx_fail(c, CHAT_ERR_RENDER, "internal error: unknown test");
}
