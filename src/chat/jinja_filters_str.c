/* jinja_filters_str.c - jinja2's filters that make a string: capitalize lower upper
 * title string/safe escape format indent replace trim tojson. Each converts its value
 * with str() first, as jinja2 does (tojson serializes it instead). tojson is
 * transformers' override: json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False), not jinja2's HTML-safe one. Names and parameters
 * are bound in the table (jinja_filters.c); Python's str methods these reuse live in
 * jinja_str.c.
 */
#include <string.h>

#include "jinja_filters.h"

/* ---- case ---------------------------------------------------------------------------- */

static jv_t jinja_title(jctx_t *c, jv_t s) {
    /* jinja2: "".join(w[0].upper() + w[1:].lower() for w in re.split(r"([-\s\(\{\[\<]+)", s) if w) */
    jstr_t *x = jv_str(s);
    jbuf_t *b = jx_buf_new(c);
    size_t i = 0;
    bool word_start = true;
    while (i < x->len) {
        size_t a = i;
        int cp = ju_decode(x->s, x->len, &i);
        bool delim = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' ||
                     (cp >= 0 && ju_isspace((uint32_t)cp));
        if (delim) {
            jx_buf_put(c, b, x->s + a, i - a);
            word_start = true;
            continue;
        }
        jv_t one = jx_str_new(c, x->s + a, i - a);
        jv_t m = jb_case(c, one, word_start ? JB_UPPER : JB_LOWER);
        jx_buf_put(c, b, jv_str(m)->s, jv_str(m)->len);
        jv_decref(c, m);
        jv_decref(c, one);
        word_start = false;
    }
    return jx_buf_take(c, b);
}

/* str(v) through jb_case (how: JB_UPPER, JB_LOWER, JB_CAPITALIZE) */
static jv_t case_of_str(jctx_t *c, jv_t v, int how) {
    jv_t s = jv_to_str(c, v);
    jv_t r = jb_case(c, s, how);
    jv_decref(c, s);
    return r;
}

jv_t jf_capitalize(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    return case_of_str(c, v, JB_CAPITALIZE);
}

jv_t jf_lower(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    return case_of_str(c, v, JB_LOWER);
}

jv_t jf_upper(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    return case_of_str(c, v, JB_UPPER);
}

jv_t jf_title(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    jv_t s = jv_to_str(c, v);
    jv_t r = jinja_title(c, s);
    jv_decref(c, s);
    return r;
}

/* ---- conversion and escaping --------------------------------------------------------- */

jv_t jf_string(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    return jv_to_str(c, v);
}

static void html_escape(jctx_t *c, jbuf_t *b, jv_t s) {
    jstr_t *x = jv_str(s);
    for (size_t i = 0; i < x->len; i++) {
        const char *r = NULL;
        switch (x->s[i]) {
        case '&': r = "&amp;"; break;
        case '<': r = "&lt;"; break;
        case '>': r = "&gt;"; break;
        case '"': r = "&#34;"; break;
        case '\'': r = "&#39;"; break;
        }
        if (r) jx_buf_put(c, b, r, strlen(r));
        else jx_buf_put(c, b, x->s + i, 1);
    }
}

jv_t jf_escape(jctx_t *c, jv_t v, const jf_args_t *a) {
    (void)a;
    jv_t s = jv_to_str(c, v);
    jbuf_t *b = jx_buf_new(c);
    html_escape(c, b, s);
    jv_decref(c, s);
    return jx_buf_take(c, b);
}

/* "fmt" % args, the arguments as a tuple */
jv_t jf_format(jctx_t *c, jv_t v, const jf_args_t *a) {
    if (a->n_kw) jx_fail(c, CHAT_ERR_RENDER, "format filter with keyword arguments is not supported");
    jv_t s = jv_to_str(c, v);
    jv_t t = jx_list_new(c, JL_TUPLE, (size_t)a->n_args);
    for (int i = 0; i < a->n_args; i++) {
        jv_incref(a->args[i]);
        jx_list_push(c, t, a->args[i]);
    }
    jv_t r = jb_str_format(c, s, t);
    jv_decref(c, t);
    jv_decref(c, s);
    return r;
}

/* ---- editing ------------------------------------------------------------------------- */

jv_t jf_indent(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    jv_t ind;
    if (!jv_is_absent(p[0]) && p[0].t == JV_STR) {
        ind = p[0];
        jv_incref(ind);
    } else {
        int64_t w = jv_is_absent(p[0]) ? 4 : p[0].t == JV_INT ? p[0].u.i : p[0].t == JV_BOOL ? p[0].u.b : -1;
        if (w < 0 && !jv_is_absent(p[0]) && p[0].t != JV_INT)
            jx_fail(c, CHAT_ERR_RENDER, "can't multiply sequence by non-int of type '%s'", jv_type_name(p[0]));
        jv_t sp = jx_str_new(c, " ", 1);
        ind = jx_binop(c, OP_MUL, sp, jv_int(w));
        jv_decref(c, sp);
    }
    jv_t s = jv_to_str(c, v);
    jv_t s2 = jx_str_cat(c, jv_str(s)->s, jv_str(s)->len, "\n", 1); /* jinja2's splitlines quirk */
    jv_decref(c, s);
    jv_t lines = jb_splitlines(c, s2, false);
    jv_decref(c, s2);
    jlist_t *l = jv_list(lines);
    bool blank = !jv_is_absent(p[2]) && jv_truthy(c, p[2]);
    jbuf_t *b = jx_buf_new(c);
    jstr_t *is = jv_str(ind);
    if (!jv_is_absent(p[1]) && jv_truthy(c, p[1])) jx_buf_put(c, b, is->s, is->len);
    for (size_t i = 0; i < l->n; i++) {
        jstr_t *line = jv_str(l->v[i]);
        if (i) {
            jx_buf_put(c, b, "\n", 1);
            if (blank || line->len) jx_buf_put(c, b, is->s, is->len);
        }
        jx_buf_put(c, b, line->s, line->len);
    }
    jv_decref(c, lines);
    jv_decref(c, ind);
    return jx_buf_take(c, b);
}

jv_t jf_replace(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    jv_t s = jv_to_str(c, v);
    jv_t o = jv_to_str(c, p[0]), n = jv_to_str(c, p[1]);
    int64_t cnt = -1;
    if (!jv_is_absent(p[2]) && p[2].t != JV_NONE) {
        if (p[2].t != JV_INT) jx_fail(c, CHAT_ERR_RENDER, "'%s' object cannot be interpreted as an integer", jv_type_name(p[2]));
        cnt = p[2].u.i;
    }
    jv_t r = jb_replace(c, s, o, n, cnt);
    jv_decref(c, s);
    jv_decref(c, o);
    jv_decref(c, n);
    return r;
}

jv_t jf_trim(jctx_t *c, jv_t v, const jf_args_t *a) {
    jv_t s = jv_to_str(c, v);
    jv_t r = jb_strip(c, s, a->p[0], 3);
    jv_decref(c, s);
    return r;
}

/* ---- tojson -------------------------------------------------------------------------- */

jv_t jf_tojson(jctx_t *c, jv_t v, const jf_args_t *a) {
    const jv_t *p = a->p;
    jjson_opts_t o = {.ensure_ascii = !jv_is_absent(p[0]) && jv_truthy(c, p[0]),
                      .sort_keys = !jv_is_absent(p[3]) && jv_truthy(c, p[3])};
    jv_t ind = jv_none();
    if (!jv_is_absent(p[1]) && p[1].t != JV_NONE) {
        if (p[1].t == JV_STR) {
            ind = p[1];
            jv_incref(ind);
        } else if (p[1].t == JV_INT || p[1].t == JV_BOOL) {
            jv_t sp = jx_str_new(c, " ", 1);
            ind = jx_binop(c, OP_MUL, sp, p[1]);
            jv_decref(c, sp);
        } else {
            jx_fail(c, CHAT_ERR_RENDER, "tojson: indent must be an int or a string");
        }
        o.indent = jv_str(ind)->s;
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (!jv_is_absent(p[2]) && p[2].t != JV_NONE) {
        jv_t sep = jx_iterate(c, p[2]);
        if (jv_list(sep)->n != 2 || jv_list(sep)->v[0].t != JV_STR || jv_list(sep)->v[1].t != JV_STR)
            jx_fail(c, CHAT_ERR_RENDER, "tojson: separators must be a pair of strings");
        o.item_sep = jv_str(jv_list(sep)->v[0])->s;
        o.key_sep = jv_str(jv_list(sep)->v[1])->s;
        jbuf_t *b = jx_buf_new(c);
        jv_write_json(c, b, v, &o, 0);
        jv_decref(c, sep);
        jv_decref(c, ind);
        return jx_buf_take(c, b);
    }
    jbuf_t *b = jx_buf_new(c);
    jv_write_json(c, b, v, &o, 0);
    jv_decref(c, ind);
    return jx_buf_take(c, b);
}
