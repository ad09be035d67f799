/* jinja_parser.h - parser state and token helpers shared by jinja_parse.c
 * (statements) and jinja_parse_expr.c (expressions). Private to those two files. */
#ifndef SERVELAB_JINJA_PARSER_H
#define SERVELAB_JINJA_PARSER_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

#define MAX_NESTING 200 /* recursion guard: expression and block nesting */

typedef struct {
    jarena_t *a;
    const jtok_t *t;
    int n, i;
    sl_err_t *err;
    bool failed;
    int depth;
    int loop_depth;
    const char *tag_stack[MAX_NESTING];
    int n_tags;
} parser_t;

static inline const jtok_t *cur(parser_t *P) { return &P->t[P->i]; }
static inline const jtok_t *peek(parser_t *P, int k) {
    int j = P->i + k;
    return &P->t[j < P->n ? j : P->n - 1];
}
static inline void adv(parser_t *P) {
    if (P->i < P->n - 1) P->i++;
}

static inline __attribute__((format(printf, 3, 4))) void *pfail(parser_t *P, const jtok_t *t, const char *fmt, ...) {
    if (P->failed) return NULL;
    char msg[SL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    sl_fail(P->err, "line %d, column %d: %s", t->line, t->col, msg);
    P->failed = true;
    return NULL;
}

static inline bool is_op(const jtok_t *t, const char *op) { return t->type == T_OP && !strcmp(t->op, op); }
static inline bool is_name(const jtok_t *t, const char *name) {
    return t->type == T_NAME && t->len == strlen(name) && !memcmp(t->s, name, t->len);
}

static inline const char *describe(const jtok_t *t, char *buf, size_t cap) {
    switch (t->type) {
    case T_EOF: return "end of template";
    case T_DATA: return "template data / text";
    case T_VAR_BEGIN: return "begin of print statement";
    case T_VAR_END: return "end of print statement";
    case T_BLOCK_BEGIN: return "begin of statement block";
    case T_BLOCK_END: return "end of statement block";
    case T_STRING: return "string";
    case T_INT: return "integer";
    case T_FLOAT: return "float";
    case T_NAME: snprintf(buf, cap, "%.*s", (int)(t->len < 64 ? t->len : 64), t->s); return buf;
    default: return t->op;
    }
}

static inline bool expect_op(parser_t *P, const char *op) {
    if (P->failed) return false;
    if (!is_op(cur(P), op)) {
        char b[80];
        pfail(P, cur(P), "expected token '%s', got '%s'", op, describe(cur(P), b, sizeof b));
        return false;
    }
    adv(P);
    return true;
}

static inline bool expect_type(parser_t *P, jtok_type_t type, const char *what) {
    if (P->failed) return false;
    if (cur(P)->type != type) {
        char b[80];
        pfail(P, cur(P), "expected token '%s', got '%s'", what, describe(cur(P), b, sizeof b));
        return false;
    }
    adv(P);
    return true;
}

static inline jnode_t *node(parser_t *P, jnode_kind_t kind, const jtok_t *at) {
    jnode_t *n = jarena_alloc(P->a, sizeof *n);
    n->kind = (uint16_t)kind;
    n->line = at->line;
    n->col = at->col;
    return n;
}

static inline const char *tok_name(parser_t *P, const jtok_t *t) {
    char *s = jarena_alloc(P->a, t->len + 1);
    memcpy(s, t->s, t->len);
    return s;
}

/* Growable node lists while parsing; copied into the arena when done. */
typedef struct {
    jnode_t **v;
    const char **names;
    int n, cap;
} nlist_t;

static inline void nl_push(nlist_t *l, jnode_t *x, const char *name) {
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 8;
        l->v = sl_realloc(l->v, (size_t)l->cap * sizeof *l->v);
        l->names = sl_realloc(l->names, (size_t)l->cap * sizeof *l->names);
    }
    l->v[l->n] = x;
    l->names[l->n++] = name;
}
static inline jnode_t **nl_nodes(parser_t *P, nlist_t *l) {
    jnode_t **out = jarena_alloc(P->a, (size_t)(l->n + 1) * sizeof *out);
    if (l->n) memcpy(out, l->v, (size_t)l->n * sizeof *out);
    return out;
}
static inline const char **nl_names(parser_t *P, nlist_t *l) {
    const char **out = jarena_alloc(P->a, (size_t)(l->n + 1) * sizeof *out);
    if (l->n) memcpy(out, l->names, (size_t)l->n * sizeof *out);
    return out;
}
static inline void nl_free(nlist_t *l) {
    free(l->v);
    free(l->names);
}

static inline bool enter(parser_t *P) {
    if (++P->depth > MAX_NESTING) {
        pfail(P, cur(P), "template nested too deeply (more than %d levels)", MAX_NESTING);
        return false;
    }
    return true;
}
#define LEAVE(P, x) (P->depth--, (x))

/* Expressions (jinja_parse_expr.c), named after jinja2.parser's methods. */
jnode_t *jp_expression(parser_t *P, bool with_condexpr);
jnode_t *jp_tuple(parser_t *P, bool simplified, bool with_condexpr, const char *extra_end,
                  bool explicit_parens, bool with_ns);
jnode_t *jp_primary(parser_t *P, bool with_ns);
jnode_t *jp_filter(parser_t *P, jnode_t *n, bool start_inline);

#endif
