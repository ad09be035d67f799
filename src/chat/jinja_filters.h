/* jinja_filters.h - what the filter table (jinja_filters.c) and the filters it points
 * to (jinja_filters.c, jinja_filters_str.c, jinja_filters_seq.c) share. Private to
 * those three files; the rest of the engine calls jb_filter_id / jb_filter (jinja.h).
 */
#ifndef SERVELAB_JINJA_FILTERS_H
#define SERVELAB_JINJA_FILTERS_H

#include "jinja.h"

#define JF_MAX_PARAMS 4 /* the most parameters a filter binds by name (tojson) */

/* A filter's arguments. For a table entry with a bind_name, jb_bind has checked the
 * call against the entry's parameters and put them in p[] before the filter runs; a
 * filter without one reads the call as written. */
typedef struct {
    jv_t p[JF_MAX_PARAMS]; /* borrowed; jv_absent() for a parameter not passed */
    int n_args;
    const jv_t *args;
    int n_kw;
    const char **kw_names;
    const jv_t *kw_vals;
} jf_args_t;

/* A filter: `v` is the filtered value (borrowed); returns a new reference. */
typedef jv_t (*jf_fn_t)(jctx_t *c, jv_t v, const jf_args_t *a);

/* jinja_filters_str.c */
jv_t jf_capitalize(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_escape(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_format(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_indent(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_lower(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_replace(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_string(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_title(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_tojson(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_trim(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_upper(jctx_t *c, jv_t v, const jf_args_t *a);

/* jinja_filters_seq.c */
jv_t jf_dictsort(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_first(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_items(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_join(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_last(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_length(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_list(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_map(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_max(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_min(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_reject(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_rejectattr(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_reverse(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_select(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_selectattr(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_sort(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_sum(jctx_t *c, jv_t v, const jf_args_t *a);
jv_t jf_unique(jctx_t *c, jv_t v, const jf_args_t *a);

#endif
