/* jinja_access.c - what `x.attr`, `x[key]`, `x[a:b:c]`, `f(...)`, `for .. in x` and
 * `in` do, as jinja2's sandbox does them.
 *
 * `x.attr` tries the Python attribute first (methods, the loop's fields, a
 * namespace's attributes) and then the item; `x[key]` the item first, then the
 * attribute. A miss is an Undefined carrying jinja2's message ("'dict object' has no
 * attribute 'x'", "list object has no element 5"), raised only if the value is used.
 * Slices follow Python (negative indices, steps, code points for strings). Macro calls
 * get a fresh scope whose parent is the template's top level.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* ---- attribute and item access ------------------------------------------------ */

static const char *obj_type_repr(jv_t v) {
    switch (v.t) {
    case JV_NONE: return "None";
    case JV_NS: return "transformers.utils.chat_template_utils.TemplateNamespace object";
    case JV_LOOP: return "jinja2.runtime.LoopContext object";
    case JV_FUNC: return ((jfunc_t *)v.u.o)->macro ? "jinja2.runtime.Macro object" : "builtin_function_or_method object";
    case JV_LIST: {
        uint8_t k = jv_list(v)->kind;
        return k == JL_TUPLE ? "tuple object" : k == JL_GEN ? "generator object" : "list object";
    }
    case JV_DICT: return "dict object";
    case JV_STR: return "str object";
    case JV_INT: return "int object";
    case JV_FLOAT: return "float object";
    case JV_BOOL: return "bool object";
    default: return "object";
    }
}

static jv_t no_attr(jctx_t *c, jv_t obj, const char *name, size_t len) {
    return jx_undef_msg(c, false, "'%s' has no attribute '%.*s'", obj_type_repr(obj), (int)len, name);
}

static jv_t loop_attr(jctx_t *c, jv_t obj, const char *name, size_t len) {
    jloop_t *l = (jloop_t *)obj.u.o;
    jlist_t *items = jv_list(l->items);
#define IS(s) (len == strlen(s) && !memcmp(name, s, len))
    if (IS("index")) return jv_int(l->index0 + 1);
    if (IS("index0")) return jv_int(l->index0);
    if (IS("revindex")) return jv_int(l->length - l->index0);
    if (IS("revindex0")) return jv_int(l->length - l->index0 - 1);
    if (IS("first")) return jv_bool(l->index0 == 0);
    if (IS("last")) return jv_bool(l->index0 == l->length - 1);
    if (IS("length")) return jv_int(l->length);
    if (IS("depth")) return jv_int(1);
    if (IS("depth0")) return jv_int(0);
    if (IS("previtem") || IS("nextitem")) {
        int64_t j = l->index0 + (name[0] == 'p' ? -1 : 1);
        if (j < 0 || j >= (int64_t)items->n)
            return jx_undef_msg(c, false, "there is no %s item", name[0] == 'p' ? "previous" : "next");
        jv_incref(items->v[j]);
        return items->v[j];
    }
#undef IS
    jv_t m;
    if (jb_method(c, obj, name, len, &m)) return m;
    return no_attr(c, obj, name, len);
}

jv_t jx_getattr(jctx_t *c, jv_t obj, const char *name, size_t len) {
    if (obj.t == JV_UNDEF) jv_fail_undefined(c, obj);
    if (len > 0 && name[0] == '_')
        return jx_undef_msg(c, true, "access to attribute '%.*s' of '%s' object is unsafe.", (int)len,
                            name, jv_type_name(obj));
    jv_t m, v;
    switch (obj.t) {
    case JV_LOOP: return loop_attr(c, obj, name, len);
    case JV_NS: {
        jv_t key = jx_str_new(c, name, len);
        bool found = jx_dict_get(c, obj, key, &v);
        jv_decref(c, key);
        if (found) {
            jv_incref(v);
            return v;
        }
        return no_attr(c, obj, name, len);
    }
    case JV_DICT: {
        if (jb_method(c, obj, name, len, &m)) return m;
        jv_t key = jx_str_new(c, name, len);
        bool found = jx_dict_get(c, obj, key, &v);
        jv_decref(c, key);
        if (found) {
            jv_incref(v);
            return v;
        }
        return no_attr(c, obj, name, len);
    }
    default:
        if (jb_method(c, obj, name, len, &m)) return m;
        return no_attr(c, obj, name, len);
    }
}

/* Byte offset of code point `k` in s (s->nchars known). */
static size_t cp_offset(const jstr_t *s, int64_t k) {
    if ((int64_t)s->len == s->nchars) return (size_t)k;
    size_t i = 0;
    for (int64_t seen = 0; i < s->len; i++)
        if (((unsigned char)s->s[i] & 0xC0) != 0x80 && seen++ == k) return i;
    return s->len;
}

static jv_t no_element(jctx_t *c, jv_t obj, jv_t key) {
    jbuf_t *b = jx_buf_new(c);
    jv_write_repr(c, b, key);
    jv_t u = jx_undef_msg(c, false, "%s has no element %.200s", obj_type_repr(obj), b->p ? b->p : "");
    jx_obj_release(c, &b->h);
    return u;
}

static bool slice_index(jv_t v, int64_t *out) {
    if (v.t == JV_INT) *out = v.u.i;
    else if (v.t == JV_BOOL) *out = v.u.b;
    else return false;
    return true;
}

jv_t jx_slice(jctx_t *c, jv_t obj, const jnode_t *sl) {
    jv_t parts[3];
    for (int k = 0; k < 3; k++) {
        const jnode_t *e = k == 0 ? sl->a : k == 1 ? sl->b : sl->c;
        parts[k] = e ? jx_eval(c, e) : jv_none();
    }
    int64_t idx[3] = {0, 0, 1};
    bool given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = parts[k].t != JV_NONE;
        if (given[k] && !slice_index(parts[k], &idx[k])) {
            for (int j = 0; j < 3; j++) jv_decref(c, parts[j]);
            return jx_undef_msg(c, false, "%s has no element slice(...)", obj_type_repr(obj));
        }
    }
    for (int j = 0; j < 3; j++) jv_decref(c, parts[j]);
    if (obj.t == JV_UNDEF) jv_fail_undefined(c, obj);
    bool is_str = obj.t == JV_STR;
    if (!is_str && !(obj.t == JV_LIST && jv_list(obj)->kind != JL_GEN))
        return jx_undef_msg(c, false, "%s has no element slice(...)", obj_type_repr(obj));
    if (idx[2] == 0) jx_fail(c, CHAT_ERR_RENDER, "slice step cannot be zero");
    int64_t len = is_str ? jstr_nchars(jv_str(obj)) : (int64_t)jv_list(obj)->n;
    int64_t step = idx[2], start, stop;
    int64_t lower = step < 0 ? -1 : 0, upper = step < 0 ? len - 1 : len;
    if (!given[0]) start = step < 0 ? upper : lower;
    else {
        start = idx[0];
        if (start < 0) { start += len; if (start < 0) start = lower; }
        else if (start > upper) start = upper;
    }
    if (!given[1]) stop = step < 0 ? lower : upper;
    else {
        stop = idx[1];
        if (stop < 0) { stop += len; if (stop < 0) stop = lower; }
        else if (stop > upper) stop = upper;
    }
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
    if (is_str) {
        jstr_t *s = jv_str(obj);
        if (step == 1) {
            size_t a = cp_offset(s, start), b = cp_offset(s, start + count);
            return jx_str_new(c, s->s + a, b - a);
        }
        jbuf_t *b = jx_buf_new(c);
        for (int64_t k = 0, i = start; k < count; k++, i += step) {
            size_t a = cp_offset(s, i), e = a + 1;
            while (e < s->len && ((unsigned char)s->s[e] & 0xC0) == 0x80) e++;
            jx_buf_put(c, b, s->s + a, e - a);
            jx_step(c);
        }
        return jx_buf_take(c, b);
    }
    jlist_t *l = jv_list(obj);
    jv_t out = jx_list_new(c, l->kind, (size_t)count);
    for (int64_t k = 0, i = start; k < count; k++, i += step) {
        jv_incref(l->v[i]);
        jx_list_push(c, out, l->v[i]);
    }
    return out;
}

jv_t jx_getitem(jctx_t *c, jv_t obj, jv_t key) {
    if (obj.t == JV_UNDEF) jv_fail_undefined(c, obj);
    int64_t i;
    jv_t v;
    switch (obj.t) {
    case JV_LIST:
        if (jv_list(obj)->kind == JL_GEN) break;
        if (slice_index(key, &i)) {
            jlist_t *l = jv_list(obj);
            if (i < 0) i += (int64_t)l->n;
            if (i < 0 || i >= (int64_t)l->n) return no_element(c, obj, key);
            jv_incref(l->v[i]);
            return l->v[i];
        }
        break;
    case JV_STR:
        if (slice_index(key, &i)) {
            jstr_t *s = jv_str(obj);
            int64_t n = jstr_nchars(s);
            if (i < 0) i += n;
            if (i < 0 || i >= n) return no_element(c, obj, key);
            size_t a = cp_offset(s, i), e = a + 1;
            while (e < s->len && ((unsigned char)s->s[e] & 0xC0) == 0x80) e++;
            return jx_str_new(c, s->s + a, e - a);
        }
        break;
    case JV_DICT:
        if (key.t == JV_STR || key.t == JV_INT || key.t == JV_BOOL || key.t == JV_FLOAT ||
            key.t == JV_NONE || (key.t == JV_LIST && jv_list(key)->kind == JL_TUPLE)) {
            if (jx_dict_get(c, obj, key, &v)) {
                jv_incref(v);
                return v;
            }
        }
        break;
    default:
        break;
    }
    if (key.t == JV_STR) {
        if (obj.t == JV_NS || obj.t == JV_LOOP) return jx_getattr(c, obj, jv_str(key)->s, jv_str(key)->len);
        if (jb_method(c, obj, jv_str(key)->s, jv_str(key)->len, &v)) return v;
        return no_attr(c, obj, jv_str(key)->s, jv_str(key)->len);
    }
    return no_element(c, obj, key);
}

/* ---- calls ------------------------------------------------------------------- */

static jv_t call_macro(jctx_t *c, const jfunc_t *f, int n_args, const jv_t *args, int n_kw,
                       const char **kw_names, const jv_t *kw_vals) {
    const jnode_t *m = f->macro;
    if (n_args > m->n_names)
        jx_fail(c, CHAT_ERR_RENDER, "macro '%s' takes not more than %d argument(s)", m->name, m->n_names);
    if (++c->depth > c->lim.max_depth)
        jx_fail(c, CHAT_ERR_LIMIT, "templates nested more than %d calls deep", c->lim.max_depth);
    jscope_t *saved = c->cur;
    jscope_t *s = jx_scope_new(c, c->root);
    c->cur = s;
    for (int k = 0; k < n_kw; k++) {
        int p = -1;
        for (int j = 0; j < m->n_names; j++)
            if (!strcmp(m->names[j], kw_names[k])) p = j;
        if (p < 0) jx_fail(c, CHAT_ERR_RENDER, "macro '%s' takes no keyword argument '%s'", m->name, kw_names[k]);
        if (p < n_args) jx_fail(c, CHAT_ERR_RENDER, "macro '%s' got multiple values for argument '%s'", m->name, kw_names[k]);
    }
    for (int j = 0; j < m->n_names; j++) {
        jv_t v = jv_undef();
        bool have = false;
        if (j < n_args) {
            v = args[j];
            have = true;
        }
        for (int k = 0; k < n_kw && !have; k++)
            if (!strcmp(m->names[j], kw_names[k])) {
                v = kw_vals[k];
                have = true;
            }
        if (have) jv_incref(v);
        else if (m->items2[j]) v = jx_eval(c, m->items2[j]);
        else v = jx_undef_msg(c, false, "parameter '%s' was not provided", m->names[j]);
        jx_scope_set(c, s, m->names[j], v);
    }
    jbuf_t *saved_out = c->out;
    jbuf_t *buf = jx_buf_new(c);
    c->out = buf;
    int saved_loop = c->loop_depth;
    c->loop_depth = 0;
    jx_exec_body(c, m->b);
    c->loop_depth = saved_loop;
    c->out = saved_out;
    c->cur = saved;
    jx_scope_free(c, s);
    c->depth--;
    return jx_buf_take(c, buf);
}

jv_t jx_call(jctx_t *c, jv_t fn, int n_args, const jv_t *args, int n_kw, const char **kw_names,
             const jv_t *kw_vals) {
    if (fn.t == JV_UNDEF) jv_fail_undefined(c, fn);
    if (fn.t != JV_FUNC) jx_fail(c, CHAT_ERR_RENDER, "'%s' object is not callable", jv_type_name(fn));
    const jfunc_t *f = (const jfunc_t *)fn.u.o;
    if (f->macro) return call_macro(c, f, n_args, args, n_kw, kw_names, kw_vals);
    return jb_call_builtin(c, f, n_args, args, n_kw, kw_names, kw_vals);
}

jv_t jx_iterate(jctx_t *c, jv_t v) {
    switch (v.t) {
    case JV_LIST: jv_incref(v); return v;
    case JV_UNDEF: return jx_list_new(c, JL_LIST, 0);
    case JV_STR: {
        jstr_t *s = jv_str(v);
        jv_t out = jx_list_new(c, JL_LIST, (size_t)jstr_nchars(s));
        size_t i = 0;
        while (i < s->len) {
            size_t a = i;
            i++;
            while (i < s->len && ((unsigned char)s->s[i] & 0xC0) == 0x80) i++;
            jx_list_push(c, out, jx_str_new(c, s->s + a, i - a));
        }
        return out;
    }
    case JV_DICT: {
        jdict_t *d = jv_dict(v);
        jv_t out = jx_list_new(c, JL_LIST, d->n);
        for (size_t i = 0; i < d->n; i++) {
            jv_incref(d->k[i]);
            jx_list_push(c, out, d->k[i]);
        }
        return out;
    }
    default:
        jx_fail(c, CHAT_ERR_RENDER, "'%s' object is not iterable", jv_type_name(v));
    }
}

bool jx_contains(jctx_t *c, jv_t container, jv_t item) {
    switch (container.t) {
    case JV_STR: {
        if (item.t == JV_UNDEF) jv_fail_undefined(c, item);
        if (item.t != JV_STR)
            jx_fail(c, CHAT_ERR_RENDER, "'in <string>' requires string as left operand, not %s", jv_type_name(item));
        jstr_t *h = jv_str(container), *n = jv_str(item);
        if (n->len == 0) return true;
        if (n->len > h->len) return false;
        for (size_t i = 0; i + n->len <= h->len; i++)
            if (h->s[i] == n->s[0] && !memcmp(h->s + i, n->s, n->len)) return true;
        return false;
    }
    case JV_LIST:
        for (size_t i = 0; i < jv_list(container)->n; i++)
            if (jv_equal(c, jv_list(container)->v[i], item)) return true;
        return false;
    case JV_DICT: {
        jv_t v;
        return jx_dict_get(c, container, item, &v);
    }
    case JV_UNDEF: return false;
    default:
        jx_fail(c, CHAT_ERR_RENDER, "argument of type '%s' is not iterable", jv_type_name(container));
    }
}
