/* jinja_filters_seq.c - jinja2's filters over sequences and mappings: dictsort first
 * items join last length/count list map max min reject rejectattr reverse select
 * selectattr sort sum unique, and make_attrgetter (jb_attr_path) that several of them
 * and the tests share. map/select/reject/unique/items/reverse return one-shot iterators
 * in jinja2 (always true, no len()); here they are lists flagged as generators, so
 * those differences are kept. Names and parameters are bound in the table
 * (jinja_filters.c); the tests select/reject run, and the stable sort, in jinja_tests.c.
 */
#include <stdlib.h>
#include <string.h>

#include "jinja_filters.h"

/* ---- helpers ------------------------------------------------------------------------- */

static jv_t ignore_case(jctx_t *c, jv_t v) {
    if (v.t == JV_STR) return jb_case(c, v, JB_LOWER);
    jv_incref(v);
    return v;
}

/* make_attrgetter: "a.b.0" -> item lookups (digit parts as integers). */
jv_t jb_attr_path(jctx_t *c, jv_t item, jv_t attr, jv_t dflt) {
    jv_incref(item);
    if (attr.t == JV_INT) {
        jv_t r = jx_getitem(c, item, attr);
        jv_decref(c, item);
        return r;
    }
    if (attr.t != JV_STR) jx_fail(c, CHAT_ERR_RENDER, "attribute must be a string or an integer");
    jstr_t *a = jv_str(attr);
    size_t start = 0;
    for (size_t i = 0; i <= a->len; i++) {
        if (i < a->len && a->s[i] != '.') continue;
        bool digits = i > start;
        for (size_t k = start; k < i; k++)
            if (a->s[k] < '0' || a->s[k] > '9') digits = false;
        jv_t key;
        if (digits && i - start < 18) key = jv_int(strtoll(a->s + start, NULL, 10));
        else key = jx_str_new(c, a->s + start, i - start);
        jv_t next = jx_getitem(c, item, key);
        jv_decref(c, key);
        jv_decref(c, item);
        item = next;
        if (!jv_is_absent(dflt) && dflt.t != JV_NONE && item.t == JV_UNDEF) {
            jv_decref(c, item);
            jv_incref(dflt);
            item = dflt;
        }
        start = i + 1;
    }
    return item;
}

static jv_t gen_new(jctx_t *c, const char *name) {
    jv_t g = jx_list_new(c, JL_GEN, 0);
    jv_list(g)->gen_name = name;
    return g;
}

/* ---- mappings ------------------------------------------------------------------------ */

jv_t jf_dictsort(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    if (v.t != JV_DICT) jx_fail(c, CHAT_ERR_RENDER, "dictsort requires a mapping");
    int pos = 0;
    if (!jv_is_absent(p[1])) {
        if (p[1].t == JV_STR && !strcmp(jv_str(p[1])->s, "value")) pos = 1;
        else if (!(p[1].t == JV_STR && !strcmp(jv_str(p[1])->s, "key")))
            jx_fail(c, CHAT_ERR_RENDER, "You can only sort by either \"key\" or \"value\"");
    }
    bool cs = !jv_is_absent(p[0]) && jv_truthy(c, p[0]);
    jdict_t *d = jv_dict(v);
    jv_t items = jx_list_new(c, JL_LIST, d->n), keys = jx_list_new(c, JL_LIST, d->n);
    for (size_t i = 0; i < d->n; i++) {
        jv_t t = jx_list_new(c, JL_TUPLE, 2);
        jv_incref(d->k[i]);
        jv_incref(d->v[i]);
        jx_list_push(c, t, d->k[i]);
        jx_list_push(c, t, d->v[i]);
        jx_list_push(c, items, t);
        jv_t key = pos ? d->v[i] : d->k[i];
        if (cs) jv_incref(key);
        jx_list_push(c, keys, cs ? key : ignore_case(c, key));
    }
    jv_t r = jb_sorted_by(c, items, keys, !jv_is_absent(p[2]) && jv_truthy(c, p[2]));
    jv_decref(c, items);
    return r;
}

jv_t jf_items(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    jv_t r = gen_new(c, "do_items");
    if (v.t == JV_UNDEF) return r;
    if (v.t != JV_DICT) jx_fail(c, CHAT_ERR_RENDER, "Can only get item pairs from a mapping.");
    jdict_t *d = jv_dict(v);
    for (size_t i = 0; i < d->n; i++) {
        jv_t t = jx_list_new(c, JL_TUPLE, 2);
        jv_incref(d->k[i]);
        jv_incref(d->v[i]);
        jx_list_push(c, t, d->k[i]);
        jx_list_push(c, t, d->v[i]);
        jx_list_push(c, r, t);
    }
    return r;
}

/* ---- one item, or the count ------------------------------------------------------------ */

static jv_t first_or_last(jctx_t *c, jv_t v, bool last) {
    if (last && !(v.t == JV_STR || v.t == JV_DICT || v.t == JV_UNDEF ||
                  (v.t == JV_LIST && jv_list(v)->kind != JL_GEN)))
        jx_fail(c, CHAT_ERR_RENDER, "'%s' object is not reversible", jv_type_name(v));
    jv_t it = jx_iterate(c, v), r;
    jlist_t *l = jv_list(it);
    if (l->n == 0) r = jx_undef_msg(c, false, "No %s item, sequence was empty.", last ? "last" : "first");
    else {
        r = l->v[last ? l->n - 1 : 0];
        jv_incref(r);
    }
    jv_decref(c, it);
    return r;
}

jv_t jf_first(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    return first_or_last(c, v, false);
}

jv_t jf_last(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    return first_or_last(c, v, true);
}

jv_t jf_length(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    switch (v.t) {
    case JV_UNDEF: return jv_int(0);
    case JV_STR: return jv_int(jstr_nchars(jv_str(v)));
    case JV_LIST:
        if (jv_list(v)->kind != JL_GEN) return jv_int((int64_t)jv_list(v)->n);
        break;
    case JV_DICT: return jv_int((int64_t)jv_dict(v)->n);
    default: break;
    }
    jx_fail(c, CHAT_ERR_RENDER, "object of type '%s' has no len()", jv_type_name(v));
}

/* max (max = true) or min: the first item whose key is largest (smallest) */
static jv_t extremum(jctx_t *c, jv_t v, const jf_args_t *a, bool max) {
    const jv_t *p = a->p;
    bool cs = !jv_is_absent(p[0]) && jv_truthy(c, p[0]);
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t r = jx_undef_msg(c, false, "No aggregated item, sequence was empty.");
    jv_t best_key = jv_none();
    for (size_t i = 0; i < l->n; i++) {
        jv_t k = (!jv_is_absent(p[1]) && p[1].t != JV_NONE) ? jb_attr_path(c, l->v[i], p[1], jv_absent())
                                                             : (jv_incref(l->v[i]), l->v[i]);
        if (!cs) {
            jv_t lk = ignore_case(c, k);
            jv_decref(c, k);
            k = lk;
        }
        int cmp = i ? jv_compare(c, k, best_key, max ? ">" : "<") : 0;
        if (i == 0 || (max ? cmp > 0 : cmp < 0)) {
            jv_decref(c, best_key);
            best_key = k;
            jv_decref(c, r);
            r = l->v[i];
            jv_incref(r);
        } else {
            jv_decref(c, k);
        }
    }
    jv_decref(c, best_key);
    jv_decref(c, it);
    return r;
}

jv_t jf_max(jctx_t *c, jv_t v, const jf_args_t *a) { return extremum(c, v, a, true); }
jv_t jf_min(jctx_t *c, jv_t v, const jf_args_t *a) { return extremum(c, v, a, false); }

jv_t jf_sum(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t r = jv_is_absent(p[1]) ? jv_int(0) : p[1];
    jv_incref(r);
    for (size_t i = 0; i < l->n; i++) {
        jv_t x = (!jv_is_absent(p[0]) && p[0].t != JV_NONE) ? jb_attr_path(c, l->v[i], p[0], jv_absent())
                                                             : (jv_incref(l->v[i]), l->v[i]);
        jv_t nr = jx_binop(c, OP_ADD, r, x);
        jv_decref(c, r);
        jv_decref(c, x);
        r = nr;
    }
    jv_decref(c, it);
    return r;
}

/* ---- whole sequences ------------------------------------------------------------------- */

jv_t jf_join(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    jv_t sep = jv_is_absent(p[0]) ? jx_str_new(c, "", 0) : jv_to_str(c, p[0]);
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jbuf_t *b = jx_buf_new(c);
    for (size_t i = 0; i < l->n; i++) {
        if (i) jx_buf_put(c, b, jv_str(sep)->s, jv_str(sep)->len);
        if (!jv_is_absent(p[1]) && p[1].t != JV_NONE) {
            jv_t x = jb_attr_path(c, l->v[i], p[1], jv_absent());
            jv_write_str(c, b, x);
            jv_decref(c, x);
        } else {
            jv_write_str(c, b, l->v[i]);
        }
    }
    jv_decref(c, it);
    jv_decref(c, sep);
    return jx_buf_take(c, b);
}

jv_t jf_list(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t r = jx_list_new(c, JL_LIST, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jv_incref(l->v[i]);
        jx_list_push(c, r, l->v[i]);
    }
    jv_decref(c, it);
    return r;
}

/* map(attribute=..., default=...) or map('filter', args...) */
jv_t jf_map(jctx_t *c, jv_t v, const jf_args_t *a) {
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t r = gen_new(c, "sync_do_map");
    int attr_kw = -1, dflt_kw = -1;
    for (int k = 0; k < a->n_kw; k++) {
        if (!strcmp(a->kw_names[k], "attribute")) attr_kw = k;
        else if (!strcmp(a->kw_names[k], "default")) dflt_kw = k;
    }
    if (a->n_args == 0 && attr_kw >= 0) {
        for (int k = 0; k < a->n_kw; k++)
            if (k != attr_kw && k != dflt_kw)
                jx_fail(c, CHAT_ERR_RENDER, "Unexpected keyword argument '%s'", a->kw_names[k]);
        jv_t dflt = dflt_kw >= 0 ? a->kw_vals[dflt_kw] : jv_absent();
        for (size_t i = 0; i < l->n; i++) jx_list_push(c, r, jb_attr_path(c, l->v[i], a->kw_vals[attr_kw], dflt));
    } else {
        if (a->n_args == 0) jx_fail(c, CHAT_ERR_RENDER, "map requires a filter argument");
        if (a->args[0].t != JV_STR) jx_fail(c, CHAT_ERR_RENDER, "map filter name must be a string");
        int fid = jb_filter_id(jv_str(a->args[0])->s);
        if (fid < 0) jx_fail(c, CHAT_ERR_RENDER, "No filter named '%s'.", jv_str(a->args[0])->s);
        for (size_t i = 0; i < l->n; i++) {
            jx_step(c);
            jx_list_push(c, r, jb_filter(c, fid, l->v[i], a->n_args - 1, a->args + 1, a->n_kw, a->kw_names,
                                         a->kw_vals));
        }
    }
    jv_decref(c, it);
    return r;
}

static jv_t select_reject(jctx_t *c, jv_t v, const jf_args_t *a, bool reject, bool attr) {
    if (a->n_kw) jx_fail(c, CHAT_ERR_RENDER, "keyword arguments to select/reject are not supported");
    return jb_select_reject(c, v, a->n_args, a->args, reject, attr);
}

jv_t jf_select(jctx_t *c, jv_t v, const jf_args_t *a) { return select_reject(c, v, a, false, false); }
jv_t jf_reject(jctx_t *c, jv_t v, const jf_args_t *a) { return select_reject(c, v, a, true, false); }
jv_t jf_selectattr(jctx_t *c, jv_t v, const jf_args_t *a) { return select_reject(c, v, a, false, true); }
jv_t jf_rejectattr(jctx_t *c, jv_t v, const jf_args_t *a) { return select_reject(c, v, a, true, true); }

jv_t jf_reverse(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    if (v.t == JV_STR) {
        jv_t it = jx_iterate(c, v);
        jlist_t *l = jv_list(it);
        jbuf_t *b = jx_buf_new(c);
        for (size_t i = l->n; i-- > 0;) jx_buf_put(c, b, jv_str(l->v[i])->s, jv_str(l->v[i])->len);
        jv_decref(c, it);
        return jx_buf_take(c, b);
    }
    if (!(v.t == JV_LIST || v.t == JV_DICT || v.t == JV_UNDEF))
        jx_fail(c, CHAT_ERR_RENDER, "argument must be iterable");
    bool was_gen = v.t == JV_LIST && jv_list(v)->kind == JL_GEN;
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t r = was_gen ? jx_list_new(c, JL_LIST, l->n)
                     : gen_new(c, v.t == JV_DICT ? "dict_reversekeyiterator" : "list_reverseiterator");
    for (size_t i = l->n; i-- > 0;) {
        jv_incref(l->v[i]);
        jx_list_push(c, r, l->v[i]);
    }
    jv_decref(c, it);
    return r;
}

jv_t jf_sort(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    bool cs = !jv_is_absent(p[1]) && jv_truthy(c, p[1]);
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t keys = jx_list_new(c, JL_LIST, l->n);
    for (size_t i = 0; i < l->n; i++) {
        jv_t k;
        if (!jv_is_absent(p[2]) && p[2].t != JV_NONE) {
            if (p[2].t == JV_STR && strchr(jv_str(p[2])->s, ','))
                jx_fail(c, CHAT_ERR_RENDER, "sort by several attributes is not supported");
            k = jb_attr_path(c, l->v[i], p[2], jv_absent());
        } else {
            k = l->v[i];
            jv_incref(k);
        }
        if (!cs) {
            jv_t lk = ignore_case(c, k);
            jv_decref(c, k);
            k = lk;
        }
        jx_list_push(c, keys, k);
    }
    jv_t r = jb_sorted_by(c, it, keys, !jv_is_absent(p[0]) && jv_truthy(c, p[0]));
    jv_decref(c, it);
    return r;
}

jv_t jf_unique(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    bool cs = !jv_is_absent(p[0]) && jv_truthy(c, p[0]);
    jv_t it = jx_iterate(c, v);
    jlist_t *l = jv_list(it);
    jv_t seen = jx_dict_new(c, false);
    jv_t r = gen_new(c, "sync_do_unique");
    for (size_t i = 0; i < l->n; i++) {
        jv_t k = (!jv_is_absent(p[1]) && p[1].t != JV_NONE) ? jb_attr_path(c, l->v[i], p[1], jv_absent())
                                                             : (jv_incref(l->v[i]), l->v[i]);
        if (!cs) {
            jv_t lk = ignore_case(c, k);
            jv_decref(c, k);
            k = lk;
        }
        jv_t dummy;
        if (jx_dict_get(c, seen, k, &dummy)) {
            jv_decref(c, k);
            continue;
        }
        jx_dict_set(c, seen, k, jv_none());
        jv_incref(l->v[i]);
        jx_list_push(c, r, l->v[i]);
    }
    jv_decref(c, seen);
    jv_decref(c, it);
    return r;
}
