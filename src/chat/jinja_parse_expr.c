/* jinja_parse_expr.c - expressions, with jinja2.parser's grammar and precedence.
 *
 * Precedence, loosest first: `x if c else y`, or, and, not, comparisons (chained, with
 * in / not in), + -, ~, * / // %, **, unary - +, then postfix (.attr [item] (call))
 * followed by |filter and `is test`. Unknown filters and tests are compile errors, as
 * in jinja2 ("No filter named 'x'."); jinja2 filters this engine does not implement are
 * refused with a message saying so. Every recursive rule counts nesting depth, so a
 * hostile template cannot overflow the stack.
 */
#include "jinja_parser.h"

/* ---- expressions ----------------------------------------------------------- */

static jnode_t *parse_unary(parser_t *P, bool with_filter);
static jnode_t *parse_postfix(parser_t *P, jnode_t *n);
static jnode_t *parse_filter_expr(parser_t *P, jnode_t *n);

static void parse_call_args(parser_t *P, jnode_t *n) {
    const jtok_t *open = cur(P);
    if (!expect_op(P, "(")) return;
    nlist_t args = {0}, kw = {0};
    bool need_comma = false;
    while (!P->failed && !is_op(cur(P), ")")) {
        if (need_comma) {
            if (!expect_op(P, ",")) break;
            if (is_op(cur(P), ")")) break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**")) {
            pfail(P, cur(P), "*args and **kwargs in calls are not supported");
            break;
        }
        if (cur(P)->type == T_NAME && is_op(peek(P, 1), "=")) {
            const char *key = tok_name(P, cur(P));
            adv(P);
            adv(P);
            jnode_t *v = jp_expression(P, true);
            nl_push(&kw, v, key);
        } else {
            if (kw.n) {
                pfail(P, open, "invalid syntax for function call expression");
                break;
            }
            nl_push(&args, jp_expression(P, true), NULL);
        }
        need_comma = true;
    }
    expect_op(P, ")");
    n->items = nl_nodes(P, &args);
    n->n_items = args.n;
    n->items2 = nl_nodes(P, &kw);
    n->names = nl_names(P, &kw);
    n->n_names = kw.n;
    nl_free(&args);
    nl_free(&kw);
}

jnode_t *jp_filter(parser_t *P, jnode_t *n, bool start_inline) {
    while (!P->failed && (is_op(cur(P), "|") || start_inline)) {
        if (!start_inline) adv(P);
        start_inline = false;
        const jtok_t *t = cur(P);
        if (t->type != T_NAME) return pfail(P, t, "expected token 'name', got '%s'", t->op);
        jnode_t *f = node(P, N_FILTER, t);
        f->name = tok_name(P, t);
        adv(P);
        if (is_op(cur(P), ".")) return pfail(P, cur(P), "dotted filter names are not supported");
        int id = jb_filter_id(f->name);
        if (id == -1) return pfail(P, t, "No filter named '%s'.", f->name);
        if (id == -2) return pfail(P, t, "the '%s' filter is not supported", f->name);
        f->op = (uint16_t)id;
        f->a = n;
        if (is_op(cur(P), "(")) parse_call_args(P, f);
        n = f;
    }
    return n;
}

static jnode_t *parse_test(parser_t *P, jnode_t *n) {
    const jtok_t *is = cur(P);
    adv(P);
    bool negated = false;
    if (is_name(cur(P), "not")) {
        adv(P);
        negated = true;
    }
    const jtok_t *t = cur(P);
    if (t->type != T_NAME) return pfail(P, t, "expected token 'name'");
    jnode_t *x = node(P, N_TEST, is);
    x->name = tok_name(P, t);
    adv(P);
    if (is_op(cur(P), ".")) return pfail(P, cur(P), "dotted test names are not supported");
    int id = jb_test_id(x->name);
    if (id == -1) return pfail(P, t, "No test named '%s'.", x->name);
    if (id == -2) return pfail(P, t, "the '%s' test is not supported", x->name);
    x->op = (uint16_t)id;
    x->a = n;
    const jtok_t *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, x);
    } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
                c->type == T_FLOAT || is_op(c, "(") || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return pfail(P, c, "You cannot chain multiple tests with is");
        jnode_t *arg = parse_postfix(P, jp_primary(P, false));
        x->items = jarena_alloc(P->a, sizeof(jnode_t *));
        x->items[0] = arg;
        x->n_items = 1;
    }
    if (negated) {
        jnode_t *nn = node(P, N_NOT, is);
        nn->a = x;
        return nn;
    }
    return x;
}

static jnode_t *parse_subscribed(parser_t *P) {
    const jtok_t *t = cur(P);
    jnode_t *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), ":")) {
        adv(P);
    } else {
        jnode_t *e = jp_expression(P, true);
        if (!is_op(cur(P), ":")) return e;
        adv(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ","))
        parts[1] = jp_expression(P, true);
    if (is_op(cur(P), ":")) {
        adv(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ",")) parts[2] = jp_expression(P, true);
    }
    jnode_t *s = node(P, N_SLICE, t);
    s->a = parts[0];
    s->b = parts[1];
    s->c = parts[2];
    return s;
}

static jnode_t *parse_postfix(parser_t *P, jnode_t *n) {
    while (!P->failed && n) {
        const jtok_t *t = cur(P);
        if (is_op(t, ".")) {
            adv(P);
            const jtok_t *at = cur(P);
            if (at->type == T_NAME) {
                jnode_t *g = node(P, N_GETATTR, t);
                g->a = n;
                g->name = tok_name(P, at);
                adv(P);
                n = g;
            } else if (at->type == T_INT) {
                jnode_t *g = node(P, N_GETITEM, t);
                g->a = n;
                g->b = node(P, N_CONST, at);
                g->b->val = jv_int(at->i);
                adv(P);
                n = g;
            } else {
                return pfail(P, at, "expected name or number");
            }
        } else if (is_op(t, "[")) {
            adv(P);
            nlist_t args = {0};
            while (!P->failed && !is_op(cur(P), "]")) {
                if (args.n && !expect_op(P, ",")) break;
                nl_push(&args, parse_subscribed(P), NULL);
            }
            expect_op(P, "]");
            jnode_t *g = node(P, N_GETITEM, t);
            g->a = n;
            if (args.n == 1) {
                g->b = args.v[0];
            } else {
                g->b = node(P, N_TUPLE, t);
                g->b->items = nl_nodes(P, &args);
                g->b->n_items = args.n;
            }
            nl_free(&args);
            n = g;
        } else if (is_op(t, "(")) {
            jnode_t *c = node(P, N_CALL, t);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static jnode_t *parse_filter_expr(parser_t *P, jnode_t *n) {
    while (!P->failed && n) {
        const jtok_t *t = cur(P);
        if (is_op(t, "|")) {
            n = jp_filter(P, n, false);
        } else if (is_name(t, "is")) {
            n = parse_test(P, n);
        } else if (is_op(t, "(")) {
            jnode_t *c = node(P, N_CALL, t);
            c->a = n;
            parse_call_args(P, c);
            n = c;
        } else {
            break;
        }
    }
    return n;
}

static jnode_t *parse_list_or_dict(parser_t *P, bool dict) {
    const jtok_t *t = cur(P);
    adv(P);
    const char *close = dict ? "}" : "]";
    nlist_t keys = {0}, vals = {0};
    while (!P->failed && !is_op(cur(P), close)) {
        if (keys.n && !expect_op(P, ",")) break;
        if (is_op(cur(P), close)) break;
        jnode_t *k = jp_expression(P, true);
        nl_push(&keys, k, NULL);
        if (dict) {
            if (!expect_op(P, ":")) break;
            nl_push(&vals, jp_expression(P, true), NULL);
        }
    }
    expect_op(P, close);
    jnode_t *n = node(P, dict ? N_DICT : N_LIST, t);
    n->items = nl_nodes(P, &keys);
    n->n_items = keys.n;
    n->items2 = nl_nodes(P, &vals);
    nl_free(&keys);
    nl_free(&vals);
    return n;
}

jnode_t *jp_primary(parser_t *P, bool with_ns) {
    if (P->failed || !enter(P)) return NULL;
    const jtok_t *t = cur(P);
    jnode_t *n;
    if (t->type == T_NAME) {
        adv(P);
        if (is_name(t, "true") || is_name(t, "True") || is_name(t, "false") || is_name(t, "False")) {
            n = node(P, N_CONST, t);
            n->val = jv_bool(t->s[0] == 't' || t->s[0] == 'T');
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n = node(P, N_CONST, t);
            n->val = jv_none();
        } else if (with_ns && is_op(cur(P), ".")) {
            adv(P);
            const jtok_t *at = cur(P);
            if (at->type != T_NAME) return LEAVE(P, pfail(P, at, "expected token 'name'"));
            n = node(P, N_NSREF, t);
            n->name = tok_name(P, t);
            n->names = jarena_alloc(P->a, sizeof(char *));
            n->names[0] = tok_name(P, at);
            n->n_names = 1;
            adv(P);
        } else {
            n = node(P, N_NAME, t);
            n->name = tok_name(P, t);
        }
    } else if (t->type == T_STRING) {
        size_t total = 0;
        int k = 0;
        while (peek(P, k)->type == T_STRING) total += peek(P, k++)->len;
        char *buf = jarena_alloc(P->a, total + 1);
        size_t o = 0;
        while (cur(P)->type == T_STRING) {
            memcpy(buf + o, cur(P)->s, cur(P)->len);
            o += cur(P)->len;
            adv(P);
        }
        n = node(P, N_CONST, t);
        n->val = jarena_str(P->a, buf, o);
    } else if (t->type == T_INT || t->type == T_FLOAT) {
        adv(P);
        n = node(P, N_CONST, t);
        n->val = t->type == T_INT ? jv_int(t->i) : jv_float(t->f);
    } else if (is_op(t, "(")) {
        adv(P);
        n = jp_tuple(P, false, true, NULL, true, false);
        expect_op(P, ")");
    } else if (is_op(t, "[")) {
        n = parse_list_or_dict(P, false);
    } else if (is_op(t, "{")) {
        n = parse_list_or_dict(P, true);
    } else {
        char b[80];
        return LEAVE(P, pfail(P, t, "unexpected '%s'", describe(t, b, sizeof b)));
    }
    return LEAVE(P, P->failed ? NULL : n);
}

static jnode_t *parse_unary(parser_t *P, bool with_filter) {
    if (P->failed || !enter(P)) return NULL;
    const jtok_t *t = cur(P);
    jnode_t *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        adv(P);
        n = node(P, t->op[0] == '-' ? N_NEG : N_POS, t);
        n->a = parse_unary(P, false);
    } else {
        n = jp_primary(P, false);
    }
    n = parse_postfix(P, n);
    if (with_filter) n = parse_filter_expr(P, n);
    return LEAVE(P, n);
}

static jnode_t *binop(parser_t *P, const jtok_t *t, jnode_kind_t kind, int op, jnode_t *a, jnode_t *b) {
    jnode_t *n = node(P, kind, t);
    n->op = (uint16_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode_t *parse_pow(parser_t *P) {
    jnode_t *l = parse_unary(P, true);
    while (!P->failed && is_op(cur(P), "**")) {
        const jtok_t *t = cur(P);
        adv(P);
        l = binop(P, t, N_BINOP, OP_POW, l, parse_unary(P, true));
    }
    return l;
}

static jnode_t *parse_math2(parser_t *P) {
    jnode_t *l = parse_pow(P);
    for (;;) {
        const jtok_t *t = cur(P);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV
                 : is_op(t, "%") ? OP_MOD : -1;
        if (op < 0 || P->failed) return l;
        adv(P);
        l = binop(P, t, N_BINOP, op, l, parse_pow(P));
    }
}

static jnode_t *parse_concat(parser_t *P) {
    const jtok_t *t = cur(P);
    jnode_t *first = parse_math2(P);
    if (!is_op(cur(P), "~")) return first;
    nlist_t l = {0};
    nl_push(&l, first, NULL);
    while (!P->failed && is_op(cur(P), "~")) {
        adv(P);
        nl_push(&l, parse_math2(P), NULL);
    }
    jnode_t *n = node(P, N_CONCAT, t);
    n->items = nl_nodes(P, &l);
    n->n_items = l.n;
    nl_free(&l);
    return n;
}

static jnode_t *parse_math1(parser_t *P) {
    jnode_t *l = parse_concat(P);
    while (!P->failed && (is_op(cur(P), "+") || is_op(cur(P), "-"))) {
        const jtok_t *t = cur(P);
        adv(P);
        l = binop(P, t, N_BINOP, t->op[0] == '+' ? OP_ADD : OP_SUB, l, parse_concat(P));
    }
    return l;
}

static jnode_t *parse_compare(parser_t *P) {
    const jtok_t *t0 = cur(P);
    jnode_t *first = parse_math1(P);
    nlist_t operands = {0};
    uint8_t ops[64];
    for (;;) {
        if (P->failed) break;
        const jtok_t *t = cur(P);
        int op = is_op(t, "==") ? CMP_EQ : is_op(t, "!=") ? CMP_NE : is_op(t, "<") ? CMP_LT
                 : is_op(t, "<=") ? CMP_LE : is_op(t, ">") ? CMP_GT : is_op(t, ">=") ? CMP_GE : -1;
        if (op >= 0) {
            adv(P);
        } else if (is_name(t, "in")) {
            adv(P);
            op = CMP_IN;
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            adv(P);
            adv(P);
            op = CMP_NOTIN;
        } else {
            break;
        }
        if (operands.n == (int)sizeof ops) {
            pfail(P, t, "too many chained comparisons");
            break;
        }
        ops[operands.n] = (uint8_t)op;
        nl_push(&operands, parse_math1(P), NULL);
    }
    if (operands.n == 0) {
        nl_free(&operands);
        return first;
    }
    jnode_t *n = node(P, N_COMPARE, t0);
    n->a = first;
    n->items = nl_nodes(P, &operands);
    n->n_items = operands.n;
    n->ops = jarena_alloc(P->a, (size_t)operands.n);
    memcpy(n->ops, ops, (size_t)operands.n);
    nl_free(&operands);
    return n;
}

static jnode_t *parse_not(parser_t *P) {
    if (P->failed || !enter(P)) return NULL;
    if (is_name(cur(P), "not")) {
        const jtok_t *t = cur(P);
        adv(P);
        jnode_t *n = node(P, N_NOT, t);
        n->a = parse_not(P);
        return LEAVE(P, n);
    }
    return LEAVE(P, parse_compare(P));
}

static jnode_t *parse_and(parser_t *P) {
    jnode_t *l = parse_not(P);
    while (!P->failed && is_name(cur(P), "and")) {
        const jtok_t *t = cur(P);
        adv(P);
        l = binop(P, t, N_AND, 0, l, parse_not(P));
    }
    return l;
}

static jnode_t *parse_or(parser_t *P) {
    jnode_t *l = parse_and(P);
    while (!P->failed && is_name(cur(P), "or")) {
        const jtok_t *t = cur(P);
        adv(P);
        l = binop(P, t, N_OR, 0, l, parse_and(P));
    }
    return l;
}

static jnode_t *parse_condexpr(parser_t *P) {
    if (P->failed || !enter(P)) return NULL;
    jnode_t *e1 = parse_or(P);
    while (!P->failed && is_name(cur(P), "if")) {
        const jtok_t *t = cur(P);
        adv(P);
        jnode_t *c = node(P, N_COND, t);
        c->a = parse_or(P);
        c->b = e1;
        if (is_name(cur(P), "else")) {
            adv(P);
            c->c = parse_condexpr(P);
        }
        e1 = c;
    }
    return LEAVE(P, e1);
}

jnode_t *jp_expression(parser_t *P, bool with_condexpr) {
    return with_condexpr ? parse_condexpr(P) : parse_or(P);
}

static bool is_tuple_end(parser_t *P, const char *extra_end) {
    const jtok_t *t = cur(P);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || is_op(t, ")")) return true;
    return extra_end && is_name(t, extra_end);
}

jnode_t *jp_tuple(parser_t *P, bool simplified, bool with_condexpr,
                            const char *extra_end, bool explicit_parens, bool with_ns) {
    const jtok_t *t = cur(P);
    nlist_t items = {0};
    bool is_tuple = false;
    while (!P->failed) {
        if (items.n && !expect_op(P, ",")) break;
        if (is_tuple_end(P, extra_end)) break;
        jnode_t *e = simplified ? jp_primary(P, with_ns) : jp_expression(P, with_condexpr);
        nl_push(&items, e, NULL);
        if (is_op(cur(P), ",")) is_tuple = true;
        else break;
    }
    jnode_t *n = NULL;
    if (!is_tuple && items.n) {
        n = items.v[0];
    } else if (!is_tuple && !explicit_parens) {
        char b[80];
        if (!P->failed) pfail(P, cur(P), "Expected an expression, got '%s'", describe(cur(P), b, sizeof b));
    } else {
        n = node(P, N_TUPLE, t);
        n->items = nl_nodes(P, &items);
        n->n_items = items.n;
    }
    nl_free(&items);
    return P->failed ? NULL : n;
}
