/* jinja_value.c - the values a template computes with.
 *
 * Values are small tagged unions; strings, lists, dicts and the rest are refcounted
 * heap objects linked into their render's context, so whatever a failed render leaves
 * behind is swept at its end (and cycles through namespaces cannot leak). Frees are
 * iterative, so deeply nested data cannot overflow the stack. Dicts keep insertion
 * order and index themselves past 8 entries. Equality and ordering are Python's
 * (1 == 1.0 == True, [1] != (1,), str < int is a TypeError). Printing: jinja_print.c.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* ---- objects ------------------------------------------------------------------- */

static void charge(jctx_t *c, size_t n) {
    if (c->live_bytes + n > c->lim.max_memory_bytes || n > c->lim.max_memory_bytes)
        jx_fail(c, CHAT_ERR_LIMIT, "template rendering used more than %zu bytes of memory",
                c->lim.max_memory_bytes);
    c->live_bytes += n;
}

void jx_charge(jctx_t *c, jobj_t *o, ptrdiff_t delta) {
    if (delta > 0) charge(c, (size_t)delta);
    else c->live_bytes -= (size_t)(-delta);
    o->n_bytes = (size_t)((ptrdiff_t)o->n_bytes + delta);
}

void *jx_obj_new(jctx_t *c, uint8_t kind, size_t size) {
    charge(c, size);
    jobj_t *o = sl_calloc(1, size);
    o->rc = 1;
    o->kind = kind;
    o->n_bytes = size;
    o->next = c->objs;
    if (c->objs) c->objs->prev = o;
    c->objs = o;
    return o;
}

void jv_incref(jv_t v) {
    if (jv_is_obj(v) && v.u.o->rc >= 0) v.u.o->rc++;
}

static void free_children(jctx_t *c, jobj_t *o, bool decref) {
    switch (o->kind) {
    case JV_LIST: {
        jlist_t *l = (jlist_t *)o;
        if (decref)
            for (size_t i = 0; i < l->n; i++) jv_decref(c, l->v[i]);
        free(l->v);
        break;
    }
    case JV_DICT:
    case JV_NS: {
        jdict_t *d = (jdict_t *)o;
        if (decref)
            for (size_t i = 0; i < d->n; i++) {
                jv_decref(c, d->k[i]);
                jv_decref(c, d->v[i]);
            }
        free(d->k);
        free(d->v);
        free(d->idx);
        break;
    }
    case JV_FUNC:
        if (decref) jv_decref(c, ((jfunc_t *)o)->self);
        break;
    case JV_LOOP:
        if (decref) jv_decref(c, ((jloop_t *)o)->items);
        break;
    case JO_BUF:
        free(((jbuf_t *)o)->p);
        break;
    case JO_SCOPE:
        jx_scope_free_children(c, o, decref);
        break;
    default:
        break;
    }
}

void jx_obj_release(jctx_t *c, jobj_t *o) {
    if (o->prev) o->prev->next = o->next;
    else c->objs = o->next;
    if (o->next) o->next->prev = o->prev;
    c->live_bytes -= o->n_bytes;
    free_children(c, o, true);
    free(o);
}

void jv_decref(jctx_t *c, jv_t v) {
    if (!jv_is_obj(v)) return;
    jobj_t *o = v.u.o;
    if (o->rc <= 0 || --o->rc > 0) return;
    /* Pending frees are drained iteratively: freeing a deeply nested list cannot recurse. */
    if (c->n_pending == c->cap_pending) {
        c->cap_pending = c->cap_pending ? c->cap_pending * 2 : 64;
        c->pending = sl_realloc(c->pending, c->cap_pending * sizeof *c->pending);
    }
    c->pending[c->n_pending++] = o;
    if (c->draining) return;
    c->draining = true;
    while (c->n_pending > 0) jx_obj_release(c, c->pending[--c->n_pending]);
    c->draining = false;
}

void jx_sweep(jctx_t *c) {
    c->n_pending = 0;
    c->draining = false;
    while (c->objs) {
        jobj_t *o = c->objs;
        c->objs = o->next;
        free_children(c, o, false);
        free(o);
    }
    c->live_bytes = 0;
    free(c->pending);
    c->pending = NULL;
    c->cap_pending = 0;
}

/* ---- strings ------------------------------------------------------------------- */

jv_t jx_str_new(jctx_t *c, const char *s, size_t len) {
    if (len > c->lim.max_memory_bytes)
        jx_fail(c, CHAT_ERR_LIMIT, "template rendering used more than %zu bytes of memory",
                c->lim.max_memory_bytes);
    jstr_t *o = jx_obj_new(c, JV_STR, sizeof(jstr_t) + len + 1);
    o->len = len;
    o->nchars = -1;
    if (len && s) memcpy(o->s, s, len);
    o->s[len] = '\0';
    jv_t v = {.t = JV_STR};
    v.u.o = &o->h;
    return v;
}

jv_t jx_str_cat(jctx_t *c, const char *a, size_t na, const char *b, size_t nb) {
    if (na + nb > c->lim.max_memory_bytes)
        jx_fail(c, CHAT_ERR_LIMIT, "template rendering used more than %zu bytes of memory",
                c->lim.max_memory_bytes);
    jv_t v = jx_str_new(c, NULL, na + nb);
    jstr_t *s = jv_str(v);
    if (na) memcpy(s->s, a, na);
    if (nb) memcpy(s->s + na, b, nb);
    return v;
}

int64_t jstr_nchars(jstr_t *s) {
    if (s->nchars < 0) {
        int64_t n = 0;
        for (size_t i = 0; i < s->len; i++) n += ((unsigned char)s->s[i] & 0xC0) != 0x80;
        s->nchars = n;
    }
    return s->nchars;
}

jv_t jx_undef_msg(jctx_t *c, bool unsafe, const char *fmt, ...) {
    char msg[SL_ERR_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    jv_t s = jx_str_new(c, msg, strlen(msg));
    jv_t u = {.t = JV_UNDEF, .unsafe = unsafe};
    u.u.o = s.u.o;
    return u;
}

void jv_fail_undefined(jctx_t *c, jv_t u) {
    if (u.t == JV_UNDEF && u.u.o)
        jx_fail(c, CHAT_ERR_RENDER, "%s", ((jstr_t *)u.u.o)->s);
    jx_fail(c, CHAT_ERR_RENDER, "value is undefined");
}

/* ---- buffers ------------------------------------------------------------------- */

jbuf_t *jx_buf_new(jctx_t *c) { return jx_obj_new(c, JO_BUF, sizeof(jbuf_t)); }

void jx_buf_put(jctx_t *c, jbuf_t *b, const char *s, size_t n) {
    if (n == 0) return;
    if (b->len + n > c->lim.max_output_bytes)
        jx_fail(c, CHAT_ERR_LIMIT, "rendered text longer than %zu bytes", c->lim.max_output_bytes);
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        jx_charge(c, &b->h, (ptrdiff_t)(cap - b->cap));
        b->p = sl_realloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

jv_t jx_buf_take(jctx_t *c, jbuf_t *b) {
    jv_t v = jx_str_new(c, b->p ? b->p : "", b->len);
    jx_obj_release(c, &b->h);
    return v;
}

/* ---- lists and dicts ----------------------------------------------------------- */

jv_t jx_list_new(jctx_t *c, jlist_kind_t kind, size_t cap) {
    jlist_t *l = jx_obj_new(c, JV_LIST, sizeof(jlist_t));
    l->kind = (uint8_t)kind;
    if (cap) {
        jx_charge(c, &l->h, (ptrdiff_t)(cap * sizeof(jv_t)));
        l->v = sl_malloc(cap * sizeof(jv_t));
        l->cap = cap;
    }
    jv_t v = {.t = JV_LIST};
    v.u.o = &l->h;
    return v;
}

void jx_list_push(jctx_t *c, jv_t list, jv_t item) {
    jlist_t *l = jv_list(list);
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 4;
        jx_charge(c, &l->h, (ptrdiff_t)((cap - l->cap) * sizeof(jv_t)));
        l->v = sl_realloc(l->v, cap * sizeof(jv_t));
        l->cap = cap;
    }
    l->v[l->n++] = item;
}

jv_t jx_dict_new(jctx_t *c, bool ns) {
    jdict_t *d = jx_obj_new(c, ns ? JV_NS : JV_DICT, sizeof(jdict_t));
    jv_t v = {.t = (uint8_t)(ns ? JV_NS : JV_DICT)};
    v.u.o = &d->h;
    return v;
}

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
}

static uint64_t jv_hash(jctx_t *c, jv_t k, int depth) {
    switch (k.t) {
    case JV_STR: {
        uint64_t h = 1469598103934665603ULL;
        jstr_t *s = jv_str(k);
        for (size_t i = 0; i < s->len; i++) h = (h ^ (unsigned char)s->s[i]) * 1099511628211ULL;
        return h;
    }
    case JV_BOOL: return mix((uint64_t)k.u.b);
    case JV_INT: return mix((uint64_t)k.u.i);
    case JV_FLOAT:
        if (k.u.f == floor(k.u.f) && fabs(k.u.f) < 9.2e18) return mix((uint64_t)(int64_t)k.u.f);
        return mix((uint64_t)(k.u.f * 1e6));
    case JV_NONE: return 0x9e3779b97f4a7c15ULL;
    case JV_LIST:
        if (jv_list(k)->kind == JL_TUPLE && depth < MAX_DATA_DEPTH) {
            uint64_t h = 7;
            for (size_t i = 0; i < jv_list(k)->n; i++) h = mix(h ^ jv_hash(c, jv_list(k)->v[i], depth + 1));
            return h;
        }
        break;
    default: break;
    }
    jx_fail(c, CHAT_ERR_RENDER, "unhashable type: '%s'", jv_type_name(k));
}

static ptrdiff_t dict_find(jctx_t *c, jdict_t *d, jv_t k) {
    if (!d->idx) {
        for (size_t i = 0; i < d->n; i++)
            if (d->k[i].t == k.t && k.t == JV_STR
                    ? (jv_str(d->k[i])->len == jv_str(k)->len &&
                       !memcmp(jv_str(d->k[i])->s, jv_str(k)->s, jv_str(k)->len))
                    : jv_equal(c, d->k[i], k))
                return (ptrdiff_t)i;
        return -1;
    }
    size_t mask = d->idx_cap - 1;
    for (size_t s = jv_hash(c, k, 0) & mask;; s = (s + 1) & mask) {
        uint32_t e = d->idx[s];
        if (!e) return -1;
        if (jv_equal(c, d->k[e - 1], k)) return (ptrdiff_t)(e - 1);
    }
}

static void dict_reindex(jctx_t *c, jdict_t *d) {
    size_t cap = 16;
    while (cap < d->n * 2 + 2) cap *= 2;
    jx_charge(c, &d->h, (ptrdiff_t)((cap - d->idx_cap) * sizeof(uint32_t)));
    free(d->idx);
    d->idx = sl_calloc(cap, sizeof(uint32_t));
    d->idx_cap = cap;
    for (size_t i = 0; i < d->n; i++) {
        size_t s = jv_hash(c, d->k[i], 0) & (cap - 1);
        while (d->idx[s]) s = (s + 1) & (cap - 1);
        d->idx[s] = (uint32_t)(i + 1);
    }
}

void jx_dict_set(jctx_t *c, jv_t dv, jv_t k, jv_t v) {
    jdict_t *d = jv_dict(dv);
    jv_hash(c, k, 0); /* fails for unhashable keys */
    ptrdiff_t i = dict_find(c, d, k);
    if (i >= 0) {
        jv_decref(c, d->v[i]);
        d->v[i] = v;
        jv_decref(c, k);
        return;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? d->cap * 2 : 4;
        jx_charge(c, &d->h, (ptrdiff_t)((cap - d->cap) * 2 * sizeof(jv_t)));
        d->k = sl_realloc(d->k, cap * sizeof(jv_t));
        d->v = sl_realloc(d->v, cap * sizeof(jv_t));
        d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n] = v;
    d->n++;
    if (d->n > 8 && (!d->idx || d->n * 2 + 2 > d->idx_cap)) {
        dict_reindex(c, d);
    } else if (d->idx) {
        size_t s = jv_hash(c, k, 0) & (d->idx_cap - 1);
        while (d->idx[s]) s = (s + 1) & (d->idx_cap - 1);
        d->idx[s] = (uint32_t)d->n;
    }
}

bool jx_dict_get(jctx_t *c, jv_t dv, jv_t k, jv_t *out) {
    jdict_t *d = jv_dict(dv);
    if (k.t != JV_STR && k.t != JV_INT && k.t != JV_BOOL && k.t != JV_FLOAT && k.t != JV_NONE)
        jv_hash(c, k, 0);
    ptrdiff_t i = dict_find(c, d, k);
    if (i < 0) return false;
    *out = d->v[i];
    return true;
}

bool jx_dict_get_cstr(jv_t dv, const char *k, jv_t *out) {
    jdict_t *d = jv_dict(dv);
    size_t n = strlen(k);
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].t == JV_STR && jv_str(d->k[i])->len == n && !memcmp(jv_str(d->k[i])->s, k, n)) {
            *out = d->v[i];
            return true;
        }
    return false;
}

/* ---- semantics ---------------------------------------------------------------- */

const char *jv_type_name(jv_t v) {
    switch (v.t) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: {
        uint8_t k = jv_list(v)->kind;
        return k == JL_TUPLE ? "tuple" : k == JL_GEN ? "generator" : "list";
    }
    case JV_DICT: return "dict";
    case JV_NS: return "TemplateNamespace";
    case JV_FUNC: return ((jfunc_t *)v.u.o)->macro ? "Macro" : "builtin_function_or_method";
    case JV_LOOP: return "LoopContext";
    }
    return "object";
}

bool jv_truthy(jctx_t *c, jv_t v) {
    (void)c;
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return false;
    case JV_BOOL: return v.u.b;
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0.0;
    case JV_STR: return jv_str(v)->len > 0;
    case JV_LIST: return jv_list(v)->kind == JL_GEN || jv_list(v)->n > 0;
    case JV_DICT: return jv_dict(v)->n > 0;
    default: return true;
    }
}

static bool is_num(jv_t v) { return v.t == JV_BOOL || v.t == JV_INT || v.t == JV_FLOAT; }
static int64_t as_i(jv_t v) { return v.t == JV_BOOL ? v.u.b : v.u.i; }

/* Exact comparison of an integer with a double, as Python does. 2 = unordered (nan). */
static int cmp_int_float(int64_t i, double f) {
    if (isnan(f)) return 2;
    if (f >= 9.3e18) return -1;
    if (f < -9.3e18) return 1;
    double fl = floor(f);
    int64_t fi = (int64_t)fl;
    if (i < fi) return -1;
    if (i > fi) return 1;
    return f > fl ? -1 : 0;
}

static int num_cmp(jv_t a, jv_t b) {
    if (a.t != JV_FLOAT && b.t != JV_FLOAT) {
        int64_t x = as_i(a), y = as_i(b);
        return x < y ? -1 : x > y;
    }
    if (a.t == JV_FLOAT && b.t == JV_FLOAT) {
        if (isnan(a.u.f) || isnan(b.u.f)) return 2;
        return a.u.f < b.u.f ? -1 : a.u.f > b.u.f;
    }
    if (a.t == JV_FLOAT) {
        int r = cmp_int_float(as_i(b), a.u.f);
        return r == 2 ? 2 : -r;
    }
    return cmp_int_float(as_i(a), b.u.f);
}

static bool equal_d(jctx_t *c, jv_t a, jv_t b, int depth) {
    if (depth > MAX_DATA_DEPTH) jx_fail(c, CHAT_ERR_LIMIT, "data nested too deeply to compare");
    if (is_num(a) && is_num(b)) return num_cmp(a, b) == 0;
    if (a.t != b.t) return false;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return true;
    case JV_STR:
        return jv_str(a)->len == jv_str(b)->len && !memcmp(jv_str(a)->s, jv_str(b)->s, jv_str(a)->len);
    case JV_LIST: {
        jlist_t *x = jv_list(a), *y = jv_list(b);
        if (x == y) return true;
        if (x->kind != y->kind || x->kind == JL_GEN || x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++)
            if (!equal_d(c, x->v[i], y->v[i], depth + 1)) return false;
        return true;
    }
    case JV_DICT: {
        jdict_t *x = jv_dict(a), *y = jv_dict(b);
        if (x == y) return true;
        if (x->n != y->n) return false;
        for (size_t i = 0; i < x->n; i++) {
            jv_t other;
            if (!jx_dict_get(c, b, x->k[i], &other) || !equal_d(c, x->v[i], other, depth + 1))
                return false;
        }
        return true;
    }
    default: return a.u.o == b.u.o;
    }
}

bool jv_equal(jctx_t *c, jv_t a, jv_t b) { return equal_d(c, a, b, 0); }

int jv_compare(jctx_t *c, jv_t a, jv_t b, const char *op) {
    if (a.t == JV_UNDEF) jv_fail_undefined(c, a);
    if (b.t == JV_UNDEF) jv_fail_undefined(c, b);
    if (is_num(a) && is_num(b)) return num_cmp(a, b);
    if (a.t == JV_STR && b.t == JV_STR) {
        jstr_t *x = jv_str(a), *y = jv_str(b);
        size_t n = x->len < y->len ? x->len : y->len;
        int r = memcmp(x->s, y->s, n);
        if (r) return r < 0 ? -1 : 1;
        return x->len < y->len ? -1 : x->len > y->len;
    }
    if (a.t == JV_LIST && b.t == JV_LIST && jv_list(a)->kind == jv_list(b)->kind &&
        jv_list(a)->kind != JL_GEN) {
        jlist_t *x = jv_list(a), *y = jv_list(b);
        for (size_t i = 0; i < x->n && i < y->n; i++) {
            if (jv_equal(c, x->v[i], y->v[i])) continue;
            return jv_compare(c, x->v[i], y->v[i], op);
        }
        return x->n < y->n ? -1 : x->n > y->n;
    }
    jx_fail(c, CHAT_ERR_RENDER, "'%s' not supported between instances of '%s' and '%s'", op,
            jv_type_name(a), jv_type_name(b));
}
