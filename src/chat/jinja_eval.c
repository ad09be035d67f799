/* jinja_eval.c - runs a template's AST: statements, expressions, operators, scopes.
 *
 * Semantics follow jinja2 under ImmutableSandboxedEnvironment with Python operators:
 * int/float arithmetic (64-bit ints; overflow is an error, not a bigint), chained
 * comparisons, `and`/`or` returning an operand. Scoping is jinja2's: each for-loop
 * iteration and each macro call gets a fresh scope, `{% set %}` inside them stays
 * there (namespace() is the way out); if/else share their enclosing scope. Every
 * statement and expression counts a step; loops count iterations; nesting counts
 * depth; all three, plus memory and output size, have hard limits.
 * Attribute/item access and calls: jinja_access.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

struct jscope {
    jobj_t h;
    jscope_t *parent;
    const char **names;
    jv_t *vals;
    size_t n, cap;
};

_Noreturn void jx_fail(jctx_t *c, chat_err_kind_t kind, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err, sizeof c->err, fmt, ap);
    va_end(ap);
    c->err_kind = kind;
    longjmp(c->jb, 1);
}

void jx_step(jctx_t *c) {
    if (++c->steps > c->lim.max_steps)
        jx_fail(c, CHAT_ERR_LIMIT, "template evaluation exceeded %lld steps",
                (long long)c->lim.max_steps);
}

/* ---- scopes ------------------------------------------------------------------ */

jscope_t *jx_scope_new(jctx_t *c, jscope_t *parent) {
    jscope_t *s = jx_obj_new(c, JO_SCOPE, sizeof(jscope_t));
    s->parent = parent;
    return s;
}

void jx_scope_free(jctx_t *c, jscope_t *s) { jx_obj_release(c, &s->h); }

void jx_scope_free_children(jctx_t *c, jobj_t *o, bool decref) {
    jscope_t *s = (jscope_t *)o;
    if (decref)
        for (size_t i = 0; i < s->n; i++) jv_decref(c, s->vals[i]);
    free(s->names);
    free(s->vals);
}

void jx_scope_set(jctx_t *c, jscope_t *s, const char *name, jv_t v) {
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->names[i], name)) {
            jv_decref(c, s->vals[i]);
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        jx_charge(c, &s->h, (ptrdiff_t)((cap - s->cap) * (sizeof(jv_t) + sizeof(char *))));
        s->names = sl_realloc(s->names, cap * sizeof *s->names);
        s->vals = sl_realloc(s->vals, cap * sizeof *s->vals);
        s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
}

static bool scope_get(jscope_t *s, const char *name, jv_t *out) {
    for (; s; s = s->parent)
        for (size_t i = 0; i < s->n; i++)
            if (!strcmp(s->names[i], name)) {
                *out = s->vals[i];
                return true;
            }
    return false;
}

/* ---- operators ---------------------------------------------------------------- */

static bool is_intlike(jv_t v) { return v.t == JV_INT || v.t == JV_BOOL; }
static int64_t ival(jv_t v) { return v.t == JV_BOOL ? v.u.b : v.u.i; }
static double fval(jv_t v) { return v.t == JV_FLOAT ? v.u.f : (double)ival(v); }
static bool is_number(jv_t v) { return is_intlike(v) || v.t == JV_FLOAT; }

static _Noreturn void overflow(jctx_t *c) {
    jx_fail(c, CHAT_ERR_RENDER, "integer overflow (integers are limited to 64 bits here)");
}

static const char *op_sym(int op) {
    static const char *s[] = {"+", "-", "*", "/", "//", "%", "** or pow()"};
    return s[op];
}

static _Noreturn void bad_operands(jctx_t *c, int op, jv_t a, jv_t b) {
    jx_fail(c, CHAT_ERR_RENDER, "unsupported operand type(s) for %s: '%s' and '%s'", op_sym(op),
            jv_type_name(a), jv_type_name(b));
}

static jv_t repeat(jctx_t *c, jv_t seq, int64_t times) {
    if (times < 0) times = 0;
    if (seq.t == JV_STR) {
        jstr_t *s = jv_str(seq);
        if (s->len && (uint64_t)times > c->lim.max_memory_bytes / s->len)
            jx_fail(c, CHAT_ERR_LIMIT, "template rendering used more than %zu bytes of memory",
                    c->lim.max_memory_bytes);
        jv_t out = jx_str_new(c, NULL, s->len * (size_t)times);
        for (int64_t k = 0; k < times; k++) memcpy(jv_str(out)->s + (size_t)k * s->len, s->s, s->len);
        return out;
    }
    jlist_t *l = jv_list(seq);
    if (l->n && (uint64_t)times > c->lim.max_memory_bytes / (l->n * sizeof(jv_t)))
        jx_fail(c, CHAT_ERR_LIMIT, "template rendering used more than %zu bytes of memory",
                c->lim.max_memory_bytes);
    jv_t out = jx_list_new(c, l->kind, l->n * (size_t)times);
    for (int64_t k = 0; k < times; k++)
        for (size_t i = 0; i < l->n; i++) {
            jv_incref(l->v[i]);
            jx_list_push(c, out, l->v[i]);
        }
    return out;
}

jv_t jx_binop(jctx_t *c, int op, jv_t a, jv_t b) {
    if (a.t == JV_UNDEF) jv_fail_undefined(c, a);
    if (b.t == JV_UNDEF) jv_fail_undefined(c, b);
    int64_t r;
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = ival(a), y = ival(b);
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &r)) overflow(c); return jv_int(r);
        case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) overflow(c); return jv_int(r);
        case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) overflow(c); return jv_int(r);
        case OP_DIV:
            if (y == 0) jx_fail(c, CHAT_ERR_RENDER, "division by zero");
            return jv_float((double)x / (double)y);
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0)
                jx_fail(c, CHAT_ERR_RENDER, op == OP_MOD ? "integer modulo by zero"
                                                         : "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_MOD) return jv_int(0);
                overflow(c);
            }
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) {
                q -= 1;
                m += y;
            }
            return jv_int(op == OP_MOD ? m : q);
        }
        case OP_POW:
            if (y < 0) {
                if (x == 0) jx_fail(c, CHAT_ERR_RENDER, "0.0 cannot be raised to a negative power");
                return jv_float(pow((double)x, (double)y));
            }
            if (x == 0 || x == 1) return jv_int(y == 0 ? 1 : x);
            if (x == -1) return jv_int((y % 2) ? -1 : 1);
            r = 1;
            for (int64_t k = 0; k < y; k++) /* |x| >= 2: overflows within 64 rounds */
                if (__builtin_mul_overflow(r, x, &r)) overflow(c);
            return jv_int(r);
        }
    }
    if (is_number(a) && is_number(b)) {
        double x = fval(a), y = fval(b);
        switch (op) {
        case OP_ADD: return jv_float(x + y);
        case OP_SUB: return jv_float(x - y);
        case OP_MUL: return jv_float(x * y);
        case OP_DIV:
            if (y == 0) jx_fail(c, CHAT_ERR_RENDER, "float division by zero");
            return jv_float(x / y);
        case OP_FLOORDIV:
            if (y == 0) jx_fail(c, CHAT_ERR_RENDER, "float floor division by zero");
            return jv_float(floor(x / y));
        case OP_MOD: {
            if (y == 0) jx_fail(c, CHAT_ERR_RENDER, "float modulo");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            else if (m == 0) m = copysign(0.0, y);
            return jv_float(m);
        }
        case OP_POW:
            if (x == 0 && y < 0) jx_fail(c, CHAT_ERR_RENDER, "0.0 cannot be raised to a negative power");
            if (x < 0 && y != floor(y))
                jx_fail(c, CHAT_ERR_RENDER, "complex results are not supported");
            return jv_float(pow(x, y));
        }
    }
    if (op == OP_ADD) {
        if (a.t == JV_STR && b.t == JV_STR)
            return jx_str_cat(c, jv_str(a)->s, jv_str(a)->len, jv_str(b)->s, jv_str(b)->len);
        if (a.t == JV_LIST && b.t == JV_LIST && jv_list(a)->kind == jv_list(b)->kind &&
            jv_list(a)->kind != JL_GEN) {
            jlist_t *x = jv_list(a), *y = jv_list(b);
            jv_t out = jx_list_new(c, x->kind, x->n + y->n);
            for (size_t i = 0; i < x->n; i++) { jv_incref(x->v[i]); jx_list_push(c, out, x->v[i]); }
            for (size_t i = 0; i < y->n; i++) { jv_incref(y->v[i]); jx_list_push(c, out, y->v[i]); }
            return out;
        }
        if (a.t == JV_STR || (a.t == JV_LIST && jv_list(a)->kind != JL_GEN))
            jx_fail(c, CHAT_ERR_RENDER, "can only concatenate %s (not \"%s\") to %s", jv_type_name(a),
                    jv_type_name(b), jv_type_name(a));
    }
    if (op == OP_MUL) {
        bool seq_a = a.t == JV_STR || (a.t == JV_LIST && jv_list(a)->kind != JL_GEN);
        bool seq_b = b.t == JV_STR || (b.t == JV_LIST && jv_list(b)->kind != JL_GEN);
        if (seq_a && is_intlike(b)) return repeat(c, a, ival(b));
        if (seq_b && is_intlike(a)) return repeat(c, b, ival(a));
        if (seq_a || seq_b)
            jx_fail(c, CHAT_ERR_RENDER, "can't multiply sequence by non-int of type '%s'",
                    jv_type_name(seq_a ? b : a));
    }
    if (op == OP_MOD && a.t == JV_STR) return jb_str_format(c, a, b);
    bad_operands(c, op, a, b);
}

static bool compare(jctx_t *c, int op, jv_t a, jv_t b) {
    static const char *sym[] = {"==", "!=", "<", "<=", ">", ">="};
    switch (op) {
    case CMP_EQ: return jv_equal(c, a, b);
    case CMP_NE: return !jv_equal(c, a, b);
    case CMP_IN: return jx_contains(c, b, a);
    case CMP_NOTIN: return !jx_contains(c, b, a);
    default: {
        int r = jv_compare(c, a, b, sym[op]);
        if (r == 2) return false; /* nan */
        return op == CMP_LT ? r < 0 : op == CMP_LE ? r <= 0 : op == CMP_GT ? r > 0 : r >= 0;
    }
    }
}

/* Evaluates call arguments into caller-provided arrays (at most 32 of each). */
#define MAX_ARGS 32
static void eval_args(jctx_t *c, const jnode_t *n, jv_t *args, jv_t *kw) {
    if (n->n_items > MAX_ARGS || n->n_names > MAX_ARGS)
        jx_fail(c, CHAT_ERR_RENDER, "too many arguments (at most %d)", MAX_ARGS);
    for (int i = 0; i < n->n_items; i++) args[i] = jx_eval(c, n->items[i]);
    for (int i = 0; i < n->n_names; i++) kw[i] = jx_eval(c, n->items2[i]);
}
static void drop_args(jctx_t *c, const jnode_t *n, jv_t *args, jv_t *kw) {
    for (int i = 0; i < n->n_items; i++) jv_decref(c, args[i]);
    for (int i = 0; i < n->n_names; i++) jv_decref(c, kw[i]);
}

/* Applies a filter chain (innermost node has a == NULL) to `input` (borrowed). */
static jv_t apply_filters(jctx_t *c, const jnode_t *f, jv_t input) {
    jv_t v;
    if (f->a) v = apply_filters(c, f->a, input);
    else {
        jv_incref(input);
        v = input;
    }
    jv_t args[MAX_ARGS], kw[MAX_ARGS];
    eval_args(c, f, args, kw);
    jv_t r = jb_filter(c, f->op, v, f->n_items, args, f->n_names, f->names, kw);
    drop_args(c, f, args, kw);
    jv_decref(c, v);
    return r;
}

jv_t jx_eval(jctx_t *c, const jnode_t *n) {
    jx_step(c);
    if (++c->depth > c->lim.max_depth)
        jx_fail(c, CHAT_ERR_LIMIT, "template expressions nested more than %d deep", c->lim.max_depth);
    jv_t r, a, b;
    jv_t args[MAX_ARGS], kw[MAX_ARGS];
    switch (n->kind) {
    case N_CONST: r = n->val; break;
    case N_NAME:
        if (scope_get(c->cur, n->name, &r)) jv_incref(r);
        else r = jx_undef_msg(c, false, "'%s' is undefined", n->name);
        break;
    case N_GETATTR:
        a = jx_eval(c, n->a);
        r = jx_getattr(c, a, n->name, strlen(n->name));
        jv_decref(c, a);
        break;
    case N_GETITEM:
        a = jx_eval(c, n->a);
        if (n->b->kind == N_SLICE) {
            r = jx_slice(c, a, n->b);
        } else {
            b = jx_eval(c, n->b);
            r = jx_getitem(c, a, b);
            jv_decref(c, b);
        }
        jv_decref(c, a);
        break;
    case N_CALL:
        a = jx_eval(c, n->a);
        eval_args(c, n, args, kw);
        r = jx_call(c, a, n->n_items, args, n->n_names, n->names, kw);
        drop_args(c, n, args, kw);
        jv_decref(c, a);
        break;
    case N_FILTER:
        a = jx_eval(c, n->a);
        eval_args(c, n, args, kw);
        r = jb_filter(c, n->op, a, n->n_items, args, n->n_names, n->names, kw);
        drop_args(c, n, args, kw);
        jv_decref(c, a);
        break;
    case N_TEST:
        a = jx_eval(c, n->a);
        eval_args(c, n, args, kw);
        r = jv_bool(jb_test(c, n->op, a, n->n_items, args));
        drop_args(c, n, args, kw);
        jv_decref(c, a);
        break;
    case N_NOT:
        a = jx_eval(c, n->a);
        r = jv_bool(!jv_truthy(c, a));
        jv_decref(c, a);
        break;
    case N_NEG:
    case N_POS:
        a = jx_eval(c, n->a);
        if (a.t == JV_UNDEF) jv_fail_undefined(c, a);
        if (is_intlike(a)) {
            if (n->kind == N_NEG && ival(a) == INT64_MIN) overflow(c);
            r = jv_int(n->kind == N_NEG ? -ival(a) : ival(a));
        } else if (a.t == JV_FLOAT) {
            r = jv_float(n->kind == N_NEG ? -a.u.f : a.u.f);
        } else {
            jx_fail(c, CHAT_ERR_RENDER, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                    jv_type_name(a));
        }
        jv_decref(c, a);
        break;
    case N_BINOP:
        a = jx_eval(c, n->a);
        b = jx_eval(c, n->b);
        r = jx_binop(c, n->op, a, b);
        jv_decref(c, a);
        jv_decref(c, b);
        break;
    case N_AND:
    case N_OR:
        a = jx_eval(c, n->a);
        if (jv_truthy(c, a) == (n->kind == N_OR)) {
            r = a;
        } else {
            jv_decref(c, a);
            r = jx_eval(c, n->b);
        }
        break;
    case N_COMPARE: {
        a = jx_eval(c, n->a);
        r = jv_bool(true);
        for (int i = 0; i < n->n_items; i++) {
            b = jx_eval(c, n->items[i]);
            bool ok = compare(c, n->ops[i], a, b);
            jv_decref(c, a);
            a = b;
            if (!ok) {
                r = jv_bool(false);
                break;
            }
        }
        jv_decref(c, a);
        break;
    }
    case N_CONCAT: {
        jbuf_t *buf = jx_buf_new(c);
        for (int i = 0; i < n->n_items; i++) {
            a = jx_eval(c, n->items[i]);
            jv_write_str(c, buf, a);
            jv_decref(c, a);
        }
        r = jx_buf_take(c, buf);
        break;
    }
    case N_COND:
        a = jx_eval(c, n->a);
        if (jv_truthy(c, a)) r = jx_eval(c, n->b);
        else if (n->c) r = jx_eval(c, n->c);
        else r = jx_undef_msg(c, false, "the inline if-expression on line %d evaluated to false and no else section was defined.", n->line);
        jv_decref(c, a);
        break;
    case N_LIST:
    case N_TUPLE:
        r = jx_list_new(c, n->kind == N_LIST ? JL_LIST : JL_TUPLE, (size_t)n->n_items);
        for (int i = 0; i < n->n_items; i++) jx_list_push(c, r, jx_eval(c, n->items[i]));
        break;
    case N_DICT:
        r = jx_dict_new(c, false);
        for (int i = 0; i < n->n_items; i++) {
            a = jx_eval(c, n->items[i]);
            b = jx_eval(c, n->items2[i]);
            jx_dict_set(c, r, a, b);
        }
        break;
    default:
        jx_fail(c, CHAT_ERR_RENDER, "internal error: not an expression");
    }
    c->depth--;
    return r;
}

/* ---- statements ---------------------------------------------------------------- */

static void assign(jctx_t *c, const jnode_t *target, jv_t v) {
    if (target->kind == N_NAME) {
        jx_scope_set(c, c->cur, target->name, v);
    } else if (target->kind == N_NSREF) {
        jv_t ns;
        if (!scope_get(c->cur, target->name, &ns) || ns.t != JV_NS) {
            jv_decref(c, v);
            jx_fail(c, CHAT_ERR_RENDER, "cannot assign attribute on non-namespace object");
        }
        const char *attr = target->names[0];
        if (attr[0] == '_')
            jx_fail(c, CHAT_ERR_RENDER,
                    "Chat templates cannot store underscore-prefixed attributes on a namespace, but "
                    "got '%s'. Please rename the attribute.", attr);
        jx_dict_set(c, ns, jx_str_new(c, attr, strlen(attr)), v);
    } else { /* tuple of names */
        jv_t items = jx_iterate(c, v);
        jv_decref(c, v);
        jlist_t *l = jv_list(items);
        if ((int)l->n < target->n_items || l->n > (size_t)target->n_items) {
            size_t got = l->n;
            jv_decref(c, items);
            if ((int)got < target->n_items)
                jx_fail(c, CHAT_ERR_RENDER, "not enough values to unpack (expected %d, got %zu)", target->n_items, got);
            jx_fail(c, CHAT_ERR_RENDER, "too many values to unpack (expected %d)", target->n_items);
        }
        for (int i = 0; i < target->n_items; i++) {
            jv_incref(l->v[i]);
            jx_scope_set(c, c->cur, target->items[i]->name, l->v[i]);
        }
        jv_decref(c, items);
    }
}

static jv_t capture(jctx_t *c, const jnode_t *body) {
    jbuf_t *saved = c->out;
    jbuf_t *buf = jx_buf_new(c);
    c->out = buf;
    jx_exec_body(c, body);
    c->out = saved;
    return jx_buf_take(c, buf);
}

static void exec_for(jctx_t *c, const jnode_t *n) {
    jv_t it = jx_eval(c, n->b);
    jv_t all = jx_iterate(c, it);
    jv_decref(c, it);
    jv_t items = all;
    if (n->n_items) { /* `for x in xs if cond`: filter first, so loop.length counts what is left */
        items = jx_list_new(c, JL_LIST, 0);
        jlist_t *l = jv_list(all);
        for (size_t i = 0; i < l->n; i++) {
            jscope_t *s = jx_scope_new(c, c->cur);
            c->cur = s;
            jv_incref(l->v[i]);
            assign(c, n->a, l->v[i]);
            jv_t t = jx_eval(c, n->items[0]);
            bool keep = jv_truthy(c, t);
            jv_decref(c, t);
            c->cur = s->parent;
            jx_obj_release(c, &s->h);
            if (keep) {
                jv_incref(l->v[i]);
                jx_list_push(c, items, l->v[i]);
            }
        }
        jv_decref(c, all);
    }
    jlist_t *l = jv_list(items);
    if (l->n == 0) {
        jv_decref(c, items);
        if (n->d) jx_exec_body(c, n->d);
        return;
    }
    jloop_t *lp = jx_obj_new(c, JV_LOOP, sizeof(jloop_t));
    lp->items = items; /* the loop object owns the list now */
    lp->length = (int64_t)l->n;
    jv_t loopv = {.t = JV_LOOP};
    loopv.u.o = &lp->h;
    c->loop_depth++;
    for (size_t i = 0; i < l->n; i++) {
        if (++c->iters > c->lim.max_loop_iterations)
            jx_fail(c, CHAT_ERR_LIMIT, "template loops exceeded %lld iterations",
                    (long long)c->lim.max_loop_iterations);
        lp->index0 = (int64_t)i;
        jscope_t *s = jx_scope_new(c, c->cur);
        c->cur = s;
        jv_incref(l->v[i]);
        assign(c, n->a, l->v[i]);
        jv_incref(loopv);
        jx_scope_set(c, s, "loop", loopv);
        jx_exec_body(c, n->c);
        c->cur = s->parent;
        jx_obj_release(c, &s->h);
        int ctl = c->ctl;
        c->ctl = 0;
        if (ctl == 1) break;
    }
    c->loop_depth--;
    jv_decref(c, loopv);
}

static void exec_stmt(jctx_t *c, const jnode_t *n) {
    jx_step(c);
    jv_t v;
    switch (n->kind) {
    case N_DATA: jx_buf_put(c, c->out, jv_str(n->val)->s, jv_str(n->val)->len); break;
    case N_OUTPUT:
        v = jx_eval(c, n->a);
        jv_write_str(c, c->out, v);
        jv_decref(c, v);
        break;
    case N_IF: {
        const jnode_t *x = n;
        for (;;) {
            v = jx_eval(c, x->a);
            bool t = jv_truthy(c, v);
            jv_decref(c, v);
            if (t) {
                jx_exec_body(c, x->b);
                break;
            }
            if (!x->c) break;
            if (x->c->kind != N_IF) {
                jx_exec_body(c, x->c);
                break;
            }
            x = x->c;
        }
        break;
    }
    case N_FOR: exec_for(c, n); break;
    case N_SET: assign(c, n->a, jx_eval(c, n->b)); break;
    case N_SETBLOCK:
        v = capture(c, n->b);
        if (n->c) {
            jv_t f = apply_filters(c, n->c, v);
            jv_decref(c, v);
            v = f;
        }
        assign(c, n->a, v);
        break;
    case N_FILTERBLOCK: {
        jv_t body = capture(c, n->b);
        v = apply_filters(c, n->c, body);
        jv_decref(c, body);
        jv_write_str(c, c->out, v);
        jv_decref(c, v);
        break;
    }
    case N_MACRO: {
        jfunc_t *f = jx_obj_new(c, JV_FUNC, sizeof(jfunc_t));
        f->fn = -1;
        f->macro = n;
        f->name = n->name;
        jv_t fv = {.t = JV_FUNC};
        fv.u.o = &f->h;
        jx_scope_set(c, c->cur, n->name, fv);
        break;
    }
    case N_WITH: {
        jscope_t *s = jx_scope_new(c, c->cur);
        for (int i = 0; i < n->n_items; i++) jx_scope_set(c, s, n->items[i]->name, jx_eval(c, n->items2[i]));
        c->cur = s;
        jx_exec_body(c, n->b);
        c->cur = s->parent;
        jx_obj_release(c, &s->h);
        break;
    }
    case N_BREAK: c->ctl = 1; break;
    case N_CONTINUE: c->ctl = 2; break;
    case N_BODY: jx_exec_body(c, n); break;
    default: jx_fail(c, CHAT_ERR_RENDER, "internal error: not a statement");
    }
}

void jx_exec_body(jctx_t *c, const jnode_t *body) {
    if (!body) return;
    if (++c->depth > c->lim.max_depth)
        jx_fail(c, CHAT_ERR_LIMIT, "template blocks nested more than %d deep", c->lim.max_depth);
    for (int i = 0; i < body->n_items && !c->ctl; i++) exec_stmt(c, body->items[i]);
    c->depth--;
}

/* ---- entry ---------------------------------------------------------------------- */

jscope_t *jx_root_scope(jctx_t *c) {
    jscope_t *s = jx_scope_new(c, NULL);
    c->root = c->cur = s;
    jb_define_globals(c, s);
    return s;
}
