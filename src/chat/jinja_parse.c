/* jinja_parse.c - tokens -> AST: the statements, with jinja2.parser's rules.
 *
 * if/elif/else, for (with an `if` filter, else, tuple targets), set (namespace
 * attributes, block set with filters), macro (defaults), with, filter, print,
 * break/continue (only inside a loop, as jinja2 enforces at compile time), and
 * transformers' {% generation %}. Tags jinja2 knows but this engine does not run
 * (include, extends, block, import, call, ...) are refused here with a clear message
 * instead of rendering something else. Expressions: jinja_parse_expr.c.
 */
#include "jinja_parser.h"

static bool check_target(parser_t *P, jnode_t *n) {
    if (P->failed || !n) return false;
    if (n->kind == N_NAME || n->kind == N_NSREF) {
        if (n->kind == N_NAME && (!strcmp(n->name, "true") || !strcmp(n->name, "false") ||
                                  !strcmp(n->name, "none")))
            return pfail(P, cur(P), "can't assign to '%s'", n->name) != NULL;
        return true;
    }
    if (n->kind == N_TUPLE) {
        for (int i = 0; i < n->n_items; i++)
            if (!n->items[i] || n->items[i]->kind != N_NAME)
                return pfail(P, cur(P), "can't assign to this target") != NULL;
        return true;
    }
    pfail(P, cur(P), "can't assign to '%s'", n->kind == N_CONST ? "const" : "expression");
    return false;
}

/* ---- statements ------------------------------------------------------------- */

static jnode_t *subparse(parser_t *P, const char *const *end, int n_end);

/* Parses a body that ends at one of `end`; leaves the parser on that end tag's name. */
static jnode_t *parse_statements(parser_t *P, const char *const *end, int n_end, bool drop_needle) {
    if (is_op(cur(P), ":")) adv(P);
    if (!expect_type(P, T_BLOCK_END, "end of statement block")) return NULL;
    jnode_t *body = subparse(P, end, n_end);
    if (P->failed) return NULL;
    if (drop_needle) adv(P);
    return body;
}

static jnode_t *parse_for(parser_t *P, const jtok_t *t) {
    jnode_t *n = node(P, N_FOR, t);
    n->a = jp_tuple(P, true, true, "in", false, false);
    if (!check_target(P, n->a)) return NULL;
    if (!is_name(cur(P), "in")) return pfail(P, cur(P), "expected token 'in'");
    adv(P);
    n->b = jp_tuple(P, false, false, "recursive", false, false);
    if (is_name(cur(P), "if")) {
        adv(P);
        n->items = jarena_alloc(P->a, sizeof(jnode_t *));
        n->items[0] = jp_expression(P, true);
        n->n_items = 1;
    }
    if (is_name(cur(P), "recursive")) return pfail(P, cur(P), "recursive loops are not supported");
    static const char *const end1[] = {"endfor", "else"};
    P->loop_depth++;
    n->c = parse_statements(P, end1, 2, false);
    P->loop_depth--;
    if (P->failed) return NULL;
    bool has_else = is_name(cur(P), "else");
    adv(P);
    if (has_else) {
        static const char *const end2[] = {"endfor"};
        n->d = parse_statements(P, end2, 1, true);
    }
    return n;
}

static jnode_t *parse_if(parser_t *P, const jtok_t *t) {
    jnode_t *n = node(P, N_IF, t);
    n->a = jp_tuple(P, false, false, NULL, false, false);
    static const char *const end[] = {"elif", "else", "endif"};
    n->b = parse_statements(P, end, 3, false);
    if (P->failed) return NULL;
    const jtok_t *tag = cur(P);
    adv(P);
    if (is_name(tag, "elif")) {
        n->c = parse_if(P, tag);
    } else if (is_name(tag, "else")) {
        static const char *const end2[] = {"endif"};
        n->c = parse_statements(P, end2, 1, true);
    }
    return n;
}

static jnode_t *parse_set(parser_t *P, const jtok_t *t) {
    jnode_t *target = jp_tuple(P, true, true, NULL, false, true);
    if (!check_target(P, target)) return NULL;
    if (is_op(cur(P), "=")) {
        adv(P);
        jnode_t *n = node(P, N_SET, t);
        n->a = target;
        n->b = jp_tuple(P, false, true, NULL, false, false);
        return n;
    }
    jnode_t *n = node(P, N_SETBLOCK, t);
    n->a = target;
    n->c = jp_filter(P, NULL, false);
    static const char *const end[] = {"endset"};
    n->b = parse_statements(P, end, 1, true);
    return n;
}

static jnode_t *parse_macro(parser_t *P, const jtok_t *t) {
    jnode_t *n = node(P, N_MACRO, t);
    if (cur(P)->type != T_NAME) return pfail(P, cur(P), "expected token 'name'");
    n->name = tok_name(P, cur(P));
    adv(P);
    if (!expect_op(P, "(")) return NULL;
    nlist_t params = {0};
    bool have_default = false;
    while (!P->failed && !is_op(cur(P), ")")) {
        if (params.n && !expect_op(P, ",")) break;
        if (cur(P)->type != T_NAME) {
            pfail(P, cur(P), "expected token 'name'");
            break;
        }
        const char *pname = tok_name(P, cur(P));
        adv(P);
        jnode_t *def = NULL;
        if (is_op(cur(P), "=")) {
            adv(P);
            def = jp_expression(P, true);
            have_default = true;
        } else if (have_default) {
            pfail(P, cur(P), "non-default argument follows default argument");
            break;
        }
        nl_push(&params, def, pname);
    }
    expect_op(P, ")");
    n->names = nl_names(P, &params);
    n->items2 = nl_nodes(P, &params);
    n->n_names = params.n;
    nl_free(&params);
    if (P->failed) return NULL;
    static const char *const end[] = {"endmacro"};
    int saved = P->loop_depth;
    P->loop_depth = 0; /* a macro body is its own function: break cannot leave it */
    n->b = parse_statements(P, end, 1, true);
    P->loop_depth = saved;
    return n;
}

static jnode_t *parse_with(parser_t *P, const jtok_t *t) {
    jnode_t *n = node(P, N_WITH, t);
    nlist_t targets = {0}, values = {0};
    while (!P->failed && cur(P)->type != T_BLOCK_END) {
        if (targets.n && !expect_op(P, ",")) break;
        jnode_t *tg = jp_primary(P, false);
        if (!tg || tg->kind != N_NAME) {
            pfail(P, cur(P), "can't assign to this target");
            break;
        }
        nl_push(&targets, tg, NULL);
        if (!expect_op(P, "=")) break;
        nl_push(&values, jp_expression(P, true), NULL);
    }
    n->items = nl_nodes(P, &targets);
    n->items2 = nl_nodes(P, &values);
    n->n_items = targets.n;
    nl_free(&targets);
    nl_free(&values);
    if (P->failed) return NULL;
    static const char *const end[] = {"endwith"};
    n->b = parse_statements(P, end, 1, true);
    return n;
}

static jnode_t *parse_statement(parser_t *P) {
    const jtok_t *t = cur(P);
    if (t->type != T_NAME) return pfail(P, t, "tag name expected");
    if (P->n_tags >= MAX_NESTING) return pfail(P, t, "template nested too deeply");
    P->tag_stack[P->n_tags++] = tok_name(P, t);
    adv(P);
    jnode_t *n = NULL;
    if (is_name(t, "for")) {
        n = parse_for(P, t);
    } else if (is_name(t, "if")) {
        n = parse_if(P, t);
    } else if (is_name(t, "set")) {
        n = parse_set(P, t);
    } else if (is_name(t, "macro")) {
        n = parse_macro(P, t);
    } else if (is_name(t, "with")) {
        n = parse_with(P, t);
    } else if (is_name(t, "filter")) {
        n = node(P, N_FILTERBLOCK, t);
        n->c = jp_filter(P, NULL, true);
        static const char *const end[] = {"endfilter"};
        if (!P->failed) n->b = parse_statements(P, end, 1, true);
    } else if (is_name(t, "generation")) {
        /* transformers' AssistantTracker: the body renders as is */
        static const char *const end[] = {"endgeneration"};
        n = parse_statements(P, end, 1, true);
    } else if (is_name(t, "print")) {
        nlist_t items = {0};
        while (!P->failed && cur(P)->type != T_BLOCK_END) {
            if (items.n && !expect_op(P, ",")) break;
            jnode_t *o = node(P, N_OUTPUT, cur(P));
            o->a = jp_expression(P, true);
            nl_push(&items, o, NULL);
        }
        n = node(P, N_BODY, t);
        n->items = nl_nodes(P, &items);
        n->n_items = items.n;
        nl_free(&items);
    } else if (is_name(t, "break") || is_name(t, "continue")) {
        if (P->loop_depth == 0) {
            P->n_tags--;
            return pfail(P, t, "'%s' outside loop", t->s[0] == 'b' ? "break" : "continue");
        }
        n = node(P, t->s[0] == 'b' ? N_BREAK : N_CONTINUE, t);
    } else if (is_name(t, "block") || is_name(t, "extends") || is_name(t, "include") ||
               is_name(t, "import") || is_name(t, "from") || is_name(t, "call") ||
               is_name(t, "autoescape")) {
        P->n_tags--;
        return pfail(P, t, "'%.*s' tags are not supported by this template engine", (int)t->len, t->s);
    } else {
        P->n_tags--;
        char b[80];
        return pfail(P, t, "Encountered unknown tag '%s'.", describe(t, b, sizeof b));
    }
    P->n_tags--;
    if (P->failed) return NULL;
    expect_type(P, T_BLOCK_END, "end of statement block");
    return P->failed ? NULL : n;
}

static jnode_t *subparse(parser_t *P, const char *const *end, int n_end) {
    const jtok_t *t0 = cur(P);
    nlist_t body = {0};
    if (!enter(P)) return NULL;
    while (!P->failed) {
        const jtok_t *t = cur(P);
        if (t->type == T_EOF) {
            if (n_end > 0) {
                char want[160] = "";
                for (int k = 0; k < n_end; k++) {
                    size_t m = strlen(want);
                    snprintf(want + m, sizeof want - m, "%s'%s'", k ? " or " : "", end[k]);
                }
                pfail(P, t, "Unexpected end of template. Jinja was looking for the following "
                            "tags: %s. The innermost block that needs to be closed is '%s'.",
                      want, P->n_tags ? P->tag_stack[P->n_tags - 1] : "?");
            }
            break;
        }
        if (t->type == T_DATA) {
            jnode_t *d = node(P, N_DATA, t);
            d->val = jarena_str(P->a, t->s, t->len);
            nl_push(&body, d, NULL);
            adv(P);
        } else if (t->type == T_VAR_BEGIN) {
            adv(P);
            jnode_t *o = node(P, N_OUTPUT, t);
            o->a = jp_tuple(P, false, true, NULL, false, false);
            nl_push(&body, o, NULL);
            expect_type(P, T_VAR_END, "end of print statement");
        } else if (t->type == T_BLOCK_BEGIN) {
            adv(P);
            bool at_end = false;
            for (int k = 0; k < n_end; k++)
                if (is_name(cur(P), end[k])) at_end = true;
            if (at_end) break;
            jnode_t *s = parse_statement(P);
            if (s) nl_push(&body, s, NULL);
        } else {
            char b[80];
            pfail(P, t, "unexpected '%s'", describe(t, b, sizeof b));
        }
    }
    jnode_t *n = node(P, N_BODY, t0);
    n->items = nl_nodes(P, &body);
    n->n_items = body.n;
    nl_free(&body);
    P->depth--;
    return P->failed ? NULL : n;
}

jnode_t *jparse(jarena_t *a, const jtok_t *toks, int n, sl_err_t *err) {
    parser_t P = {.a = a, .t = toks, .n = n, .err = err};
    jnode_t *root = subparse(&P, NULL, 0);
    if (!P.failed && cur(&P)->type != T_EOF) {
        char b[80];
        pfail(&P, cur(&P), "unexpected '%s'", describe(cur(&P), b, sizeof b));
    }
    return P.failed ? NULL : root;
}
