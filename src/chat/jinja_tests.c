/* jinja_tests.c - jinja2's tests (`x is defined`, `n is divisibleby 3`, ...): defined
 * undefined none boolean true false integer float number string mapping iterable sequence
 * callable sameas escaped lower upper even odd divisibleby in eq ne lt le gt ge (with the
 * aliases ==, equalto, lessthan, greaterthan, ...) filter test, one small function each in
 * a table that also holds its arity. jinja2's definitions: `integer` excludes bools,
 * `number` includes them, an Undefined is iterable and a sequence, a generator is iterable
 * but not a sequence. Also here: the selection select/reject/selectattr/rejectattr make
 * with them, and the stable sort the sort and dictsort filters share.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

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

/* A test: `v` is the value tested (borrowed); args holds exactly the entry's n_args. */
typedef bool (*test_fn_t)(jctx_t *c, jv_t v, const jv_t *args);

static bool t_defined(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t != JV_UNDEF; }
static bool t_undefined(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_UNDEF; }
static bool t_none(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_NONE; }
static bool t_boolean(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_BOOL; }
static bool t_true(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_BOOL && v.u.b; }
static bool t_false(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_BOOL && !v.u.b; }
static bool t_integer(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_INT; }
static bool t_float(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_FLOAT; }
static bool t_string(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_STR; }
static bool t_mapping(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)args; return v.t == JV_DICT; }
static bool t_escaped(jctx_t *c, jv_t v, const jv_t *args) { (void)c, (void)v, (void)args; return false; }

static bool t_number(jctx_t *c, jv_t v, const jv_t *args) {
    (void)c, (void)args;
    return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
}

static bool t_iterable(jctx_t *c, jv_t v, const jv_t *args) {
    (void)c, (void)args;
    return v.t == JV_STR || v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF;
}

static bool t_sequence(jctx_t *c, jv_t v, const jv_t *args) {
    (void)c, (void)args;
    return v.t == JV_STR || (v.t == JV_LIST && jv_list(v)->kind != JL_GEN) || v.t == JV_DICT ||
           v.t == JV_UNDEF;
}

static bool t_callable(jctx_t *c, jv_t v, const jv_t *args) {
    (void)c, (void)args;
    return v.t == JV_FUNC || v.t == JV_UNDEF || v.t == JV_LOOP;
}

/* Python's `is`: what CPython would answer for values built the way templates build them. */
static bool t_sameas(jctx_t *c, jv_t v, const jv_t *args) {
    jv_t o = args[0];
    if (v.t != o.t) return false;
    if (v.t == JV_NONE || v.t == JV_UNDEF) return v.t == JV_NONE || v.u.o == o.u.o;
    if (v.t == JV_BOOL) return v.u.b == o.u.b;
    if (v.t == JV_INT) return v.u.i == o.u.i && v.u.i >= -5 && v.u.i <= 256;
    if (v.t == JV_FLOAT) return false;
    if (v.t == JV_STR) return jv_equal(c, v, o); /* CPython interns equal constants */
    return v.u.o == o.u.o;
}

/* jinja2's lower/upper: str(v) equals its lower (upper) case and differs from its upper
 * (lower) case, so a string without cased letters is neither. */
static bool is_case(jctx_t *c, jv_t v, bool lower) {
    jv_t s = jv_to_str(c, v);
    jv_t m = jb_case(c, s, lower ? JB_LOWER : JB_UPPER), o = jb_case(c, s, lower ? JB_UPPER : JB_LOWER);
    bool r = jv_equal(c, s, m) && !jv_equal(c, s, o);
    jv_decref(c, s);
    jv_decref(c, m);
    jv_decref(c, o);
    return r;
}

static bool t_lower(jctx_t *c, jv_t v, const jv_t *args) { (void)args; return is_case(c, v, true); }
static bool t_upper(jctx_t *c, jv_t v, const jv_t *args) { (void)args; return is_case(c, v, false); }

/* jinja2's even/odd: value % 2 == 0 / == 1 (so 2.5 is neither). */
static bool test_mod2(jctx_t *c, jv_t v, int64_t want) {
    jv_t m = jx_binop(c, OP_MOD, v, jv_int(2));
    return jv_equal(c, m, jv_int(want));
}

static bool t_even(jctx_t *c, jv_t v, const jv_t *args) { (void)args; return test_mod2(c, v, 0); }
static bool t_odd(jctx_t *c, jv_t v, const jv_t *args) { (void)args; return test_mod2(c, v, 1); }

static bool t_divisibleby(jctx_t *c, jv_t v, const jv_t *args) {
    jv_t m = jx_binop(c, OP_MOD, v, args[0]);
    bool r = m.t == JV_FLOAT ? m.u.f == 0 : m.u.i == 0;
    return r;
}

static bool t_in(jctx_t *c, jv_t v, const jv_t *args) { return jx_contains(c, args[0], v); }
static bool t_eq(jctx_t *c, jv_t v, const jv_t *args) { return jv_equal(c, v, args[0]); }
static bool t_ne(jctx_t *c, jv_t v, const jv_t *args) { return !jv_equal(c, v, args[0]); }
static bool t_lt(jctx_t *c, jv_t v, const jv_t *args) { return jv_compare(c, v, args[0], "<") == -1; }
static bool t_gt(jctx_t *c, jv_t v, const jv_t *args) { return jv_compare(c, v, args[0], ">") == 1; }

static bool t_le(jctx_t *c, jv_t v, const jv_t *args) {
    int r = jv_compare(c, v, args[0], "<=");
    return r == -1 || r == 0;
}

static bool t_ge(jctx_t *c, jv_t v, const jv_t *args) {
    int r = jv_compare(c, v, args[0], ">=");
    return r == 1 || r == 0;
}

static bool t_filter(jctx_t *c, jv_t v, const jv_t *args) {
    (void)c, (void)args;
    return v.t == JV_STR && jb_filter_id(jv_str(v)->s) >= 0;
}

static bool t_test(jctx_t *c, jv_t v, const jv_t *args) {
    (void)c, (void)args;
    return v.t == JV_STR && jb_test_id(jv_str(v)->s) >= 0;
}

/* Every test, aliases included; jb_test_id gives the index the parser stores. */
static const struct {
    const char *name;
    test_fn_t fn;
    int n_args; /* arguments after the tested value: exactly this many */
} TESTS[] = {
    {"defined", t_defined, 0}, {"undefined", t_undefined, 0}, {"none", t_none, 0},
    {"boolean", t_boolean, 0}, {"true", t_true, 0}, {"false", t_false, 0}, {"integer", t_integer, 0},
    {"float", t_float, 0}, {"number", t_number, 0}, {"string", t_string, 0},
    {"mapping", t_mapping, 0}, {"iterable", t_iterable, 0}, {"sequence", t_sequence, 0},
    {"callable", t_callable, 0}, {"sameas", t_sameas, 1}, {"escaped", t_escaped, 0},
    {"lower", t_lower, 0}, {"upper", t_upper, 0}, {"even", t_even, 0}, {"odd", t_odd, 0},
    {"divisibleby", t_divisibleby, 1}, {"in", t_in, 1},
    {"eq", t_eq, 1}, {"equalto", t_eq, 1}, {"==", t_eq, 1},
    {"ne", t_ne, 1}, {"!=", t_ne, 1},
    {"lt", t_lt, 1}, {"lessthan", t_lt, 1}, {"<", t_lt, 1},
    {"le", t_le, 1}, {"<=", t_le, 1},
    {"gt", t_gt, 1}, {"greaterthan", t_gt, 1}, {">", t_gt, 1},
    {"ge", t_ge, 1}, {">=", t_ge, 1},
    {"filter", t_filter, 0}, {"test", t_test, 0},
};
#define N_TESTS ((int)(sizeof TESTS / sizeof *TESTS))

int jb_test_id(const char *name) {
    for (int i = 0; i < N_TESTS; i++)
        if (!strcmp(TESTS[i].name, name)) return i;
    return -1;
}

bool jb_test(jctx_t *c, int id, jv_t v, int n_args, const jv_t *args) {
    if (id < 0 || id >= N_TESTS) jx_fail(c, CHAT_ERR_RENDER, "internal error: unknown test");
    int want = TESTS[id].n_args;
    if (n_args != want)
        jx_fail(c, CHAT_ERR_RENDER, "test takes %d argument%s but %d were given", want,
                want == 1 ? "" : "s", n_args);
    return TESTS[id].fn(c, v, args);
}
