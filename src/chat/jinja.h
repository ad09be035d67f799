/* jinja.h - private interface of the chat-template engine (src/chat/jinja_*.c).
 *
 * lex (source -> tokens, with Jinja's whitespace rules), parse + parse_expr (tokens ->
 * AST), value + print (refcounted Python-like values; str(), repr(), json.dumps),
 * eval + access (statements, expressions, scopes, limits; attribute/item access,
 * calls), methods + str (Python methods, globals), filters + tests. Only
 * chat_template.c and the engine include this header.
 *
 * Errors during a render longjmp to the render's entry point (jx_fail). That is safe
 * because every object a render allocates is linked into the render context and
 * swept when the render ends, however it ends: a longjmp can never leak.
 */
#ifndef SERVELAB_JINJA_H
#define SERVELAB_JINJA_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/chat_template.h"
#include "servelab/core.h"

/* ---- values ------------------------------------------------------------- */

#define MAX_DATA_DEPTH 512 /* nesting of lists/dicts that printing and comparing walk */

typedef enum {
    JV_UNDEF, /* Jinja Undefined; u.o is NULL or a jstr_t with the message to raise on misuse */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* list, tuple, or a one-shot iterator (generator) */
    JV_DICT,
    JV_NS,   /* namespace(): a dict whose entries are attributes */
    JV_FUNC, /* builtin function, bound method or macro */
    JV_LOOP, /* the `loop` object of a for loop */
} jv_type_t;

typedef struct jobj jobj_t;
typedef struct {
    uint8_t t;   /* jv_type_t */
    uint8_t unsafe; /* JV_UNDEF only: raise SecurityError (not UndefinedError) on misuse */
    union {
        jobj_t *o; /* first, so that {.t = JV_UNDEF} has a NULL object */
        bool b;
        int64_t i;
        double f;
    } u;
} jv_t;

/* Every heap object starts with this header. rc < 0 marks an immortal object
 * (template constants), which is shared by concurrent renders and never freed by
 * them. Others live in their render's object list until rc drops to 0 or the
 * render ends. */
struct jobj {
    int32_t rc;
    uint8_t kind; /* jv_type_t of the value that holds it, or JO_SCOPE / JO_BUF */
    jobj_t *prev, *next;
    size_t n_bytes; /* accounted against the render's memory limit */
};
enum { JO_SCOPE = 100, JO_BUF };

typedef struct {
    jobj_t h;
    size_t len;     /* bytes, not counting the NUL */
    int64_t nchars; /* code points, -1 until computed */
    char s[];       /* UTF-8, NUL-terminated */
} jstr_t;

typedef enum { JL_LIST, JL_TUPLE, JL_GEN } jlist_kind_t;
typedef struct {
    jobj_t h;
    uint8_t kind; /* jlist_kind_t: a generator prints as one and has no len() */
    const char *gen_name; /* for repr of generators */
    size_t n, cap;
    jv_t *v;
} jlist_t;

typedef struct {
    jobj_t h;
    size_t n, cap;
    jv_t *k, *v;
    uint32_t *idx;  /* open-addressing index into k/v (slot = i + 1), built past 8 entries */
    size_t idx_cap;
} jdict_t;

typedef struct jnode jnode_t;
typedef struct {
    jobj_t h;
    int fn;             /* index into jinja_methods.c's table of builtins, or -1 for a macro */
    jv_t self;          /* bound object of a method */
    const jnode_t *macro;
    const char *name;
} jfunc_t;

typedef struct {
    jobj_t h;
    int64_t index0, length;
    jv_t items; /* the list being iterated (after the loop's `if` filter) */
} jloop_t;

typedef struct {
    jobj_t h;
    char *p;
    size_t len, cap;
} jbuf_t;

/* ---- AST ---------------------------------------------------------------- */

typedef enum {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG,
    N_POS, N_BINOP, N_AND, N_OR, N_COMPARE, N_CONCAT, N_COND, N_LIST, N_TUPLE, N_DICT,
    N_NSREF, /* assignment target ns.attr */
    /* statements */
    N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_MACRO, N_BREAK, N_CONTINUE,
    N_FILTERBLOCK, N_WITH, N_BODY,
} jnode_kind_t;

typedef enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW } jbinop_t;
typedef enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN } jcmp_t;

struct jnode {
    uint16_t kind; /* jnode_kind_t */
    uint16_t op;   /* jbinop_t / jcmp_t list (N_COMPARE uses ops[]) / builtin id (N_FILTER, N_TEST) */
    int line, col;
    jnode_t *a, *b, *c, *d; /* children; meaning per kind (see jinja_parse.c) */
    jnode_t **items;        /* list/tuple/dict keys/call args/body statements */
    int n_items;
    jnode_t **items2; /* dict values, keyword-argument values, macro defaults */
    const char **names; /* keyword-argument names, macro parameter names */
    int n_names;
    uint8_t *ops;  /* N_COMPARE: one jcmp_t per operand in items */
    const char *name;
    jv_t val;      /* N_CONST (immortal), N_DATA (a string) */
};

/* A compiled template: the AST and every constant live in one arena. */
struct chat_template {
    jnode_t *root; /* N_BODY */
    struct jarena *arena;
};

/* ---- arena (parse time) ------------------------------------------------- */

typedef struct jarena jarena_t;
jarena_t *jarena_new(void);
void jarena_free(jarena_t *a);
void *jarena_alloc(jarena_t *a, size_t n); /* zeroed, 16-byte aligned */
/* An immortal string constant in the arena. */
jv_t jarena_str(jarena_t *a, const char *s, size_t len);

/* ---- lexer -------------------------------------------------------------- */

typedef enum {
    T_EOF, T_DATA, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STRING,
    T_INT, T_FLOAT, T_OP,
} jtok_type_t;

typedef struct {
    uint8_t type;
    char op[3];     /* T_OP: the operator text */
    int line, col;
    const char *s;  /* T_DATA, T_STRING, T_NAME: decoded text in the arena */
    size_t len;
    int64_t i;
    double f;
} jtok_t;

/* Tokenizes `src` (len bytes, valid UTF-8) as Jinja does with trim_blocks and
 * lstrip_blocks on. Returns the token array (in the arena) ending with T_EOF, or
 * NULL with "line L, column C: message" in err. */
jtok_t *jlex(jarena_t *a, const char *src, size_t len, int *n_out, sl_err_t *err);

/* ---- parser ------------------------------------------------------------- */

jnode_t *jparse(jarena_t *a, const jtok_t *toks, int n, sl_err_t *err);

/* ---- render context ----------------------------------------------------- */

typedef struct jscope jscope_t;

typedef struct jctx {
    jmp_buf jb;
    char err[SL_ERR_LEN];
    chat_err_kind_t err_kind;
    jobj_t *objs; /* every live object of this render */
    size_t live_bytes;
    chat_limits_t lim;
    int64_t steps, iters;
    int depth;
    jscope_t *root, *cur;
    jbuf_t *out;  /* where output goes now */
    int loop_depth;
    int ctl;      /* pending break (1) / continue (2) */
    jobj_t **pending; /* objects whose refcount reached 0, freed iteratively */
    size_t n_pending, cap_pending;
    bool draining;
} jctx_t;

_Noreturn void jx_fail(jctx_t *c, chat_err_kind_t kind, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
void jx_step(jctx_t *c); /* counts one evaluation step, fails past the limit */

/* ---- values API (jinja_value.c) ----------------------------------------- */

static inline jv_t jv_undef(void) { jv_t v = {.t = JV_UNDEF}; return v; }
static inline jv_t jv_none(void) { jv_t v = {.t = JV_NONE}; return v; }
static inline jv_t jv_bool(bool b) { jv_t v = {.t = JV_BOOL}; v.u.b = b; return v; }
static inline jv_t jv_int(int64_t i) { jv_t v = {.t = JV_INT}; v.u.i = i; return v; }
static inline jv_t jv_float(double f) { jv_t v = {.t = JV_FLOAT}; v.u.f = f; return v; }
static inline bool jv_is_obj(jv_t v) {
    return (v.t >= JV_STR || v.t == JV_UNDEF) && v.u.o != NULL;
}
static inline jstr_t *jv_str(jv_t v) { return (jstr_t *)v.u.o; }
static inline jlist_t *jv_list(jv_t v) { return (jlist_t *)v.u.o; }
static inline jdict_t *jv_dict(jv_t v) { return (jdict_t *)v.u.o; }

void *jx_obj_new(jctx_t *c, uint8_t kind, size_t size); /* tracked, rc = 1 */
void jx_charge(jctx_t *c, jobj_t *o, ptrdiff_t delta);  /* adjust an object's accounted size */
void jv_incref(jv_t v);
void jv_decref(jctx_t *c, jv_t v);
void jx_obj_release(jctx_t *c, jobj_t *o);
/* Frees every object still alive (end of render, or after a failure). */
void jx_sweep(jctx_t *c);

jv_t jx_str_new(jctx_t *c, const char *s, size_t len);
jv_t jx_str_cat(jctx_t *c, const char *a, size_t na, const char *b, size_t nb);
jv_t jx_undef_msg(jctx_t *c, bool unsafe, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
int64_t jstr_nchars(jstr_t *s);

jv_t jx_list_new(jctx_t *c, jlist_kind_t kind, size_t cap);
void jx_list_push(jctx_t *c, jv_t list, jv_t item); /* takes the reference */
jv_t jx_dict_new(jctx_t *c, bool ns);
void jx_dict_set(jctx_t *c, jv_t d, jv_t k, jv_t v);            /* takes both references */
bool jx_dict_get(jctx_t *c, jv_t d, jv_t k, jv_t *out);          /* borrowed */
bool jx_dict_get_cstr(jv_t d, const char *k, jv_t *out);         /* borrowed */

jbuf_t *jx_buf_new(jctx_t *c);
void jx_buf_put(jctx_t *c, jbuf_t *b, const char *s, size_t n);
jv_t jx_buf_take(jctx_t *c, jbuf_t *b); /* string of the contents; frees the buffer */

const char *jv_type_name(jv_t v); /* Python's type name: 'str', 'int', 'NoneType', ... */
bool jv_truthy(jctx_t *c, jv_t v);
bool jv_equal(jctx_t *c, jv_t a, jv_t b);
int jv_compare(jctx_t *c, jv_t a, jv_t b, const char *op); /* <0, 0, >0; fails on mismatch */
void jv_fail_undefined(jctx_t *c, jv_t u);                     /* raise what misusing `u` raises */
void jv_write_str(jctx_t *c, jbuf_t *b, jv_t v);               /* Python str() */
void jv_write_repr(jctx_t *c, jbuf_t *b, jv_t v);              /* Python repr() */
jv_t jv_to_str(jctx_t *c, jv_t v);                             /* new reference */
void jv_write_float(char *out, size_t cap, double f);          /* Python repr(float) */

typedef struct {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: compact */
    const char *item_sep, *key_sep;
} jjson_opts_t;
void jv_write_json(jctx_t *c, jbuf_t *b, jv_t v, const jjson_opts_t *o, int depth);

/* UTF-8 helpers */
int ju_decode(const char *s, size_t len, size_t *i); /* next code point at s[*i], advances */
size_t ju_encode(uint32_t cp, char *out);
bool ju_valid(const char *s, size_t len);
bool ju_isspace(uint32_t cp);
uint32_t ju_upper(uint32_t cp);
uint32_t ju_lower(uint32_t cp);
bool ju_iscased(uint32_t cp);

/* ---- eval / builtins ---------------------------------------------------- */

jv_t jx_eval(jctx_t *c, const jnode_t *n);
void jx_exec_body(jctx_t *c, const jnode_t *body);
jv_t jx_getattr(jctx_t *c, jv_t obj, const char *name, size_t len); /* both borrowed -> new */
jv_t jx_getitem(jctx_t *c, jv_t obj, jv_t key);
jv_t jx_call(jctx_t *c, jv_t fn, int n_args, const jv_t *args, int n_kw, const char **kw_names,
             const jv_t *kw_vals);
jv_t jx_iterate(jctx_t *c, jv_t v); /* a list (new ref) of what `for x in v` visits */
bool jx_contains(jctx_t *c, jv_t container, jv_t item);
jv_t jx_binop(jctx_t *c, int op, jv_t a, jv_t b); /* Python a <op> b (jbinop_t), borrowed -> new */

/* Filters and tests are resolved at parse time to an index into their table. */
int jb_filter_id(const char *name);  /* -1 unknown, -2 known to Jinja but unsupported */
int jb_test_id(const char *name);    /* -1 unknown */
jv_t jb_filter(jctx_t *c, int id, jv_t v, int n_args, const jv_t *args, int n_kw,
               const char **kw_names, const jv_t *kw_vals);
bool jb_test(jctx_t *c, int id, jv_t v, int n_args, const jv_t *args);
/* select/reject (attr = false) and selectattr/rejectattr (attr = true) over `v`. */
jv_t jb_select_reject(jctx_t *c, jv_t v, int n_args, const jv_t *args, bool reject, bool attr);
/* Sorts `items` (a list, borrowed) by `keys` (a list, consumed) with Python's stable
 * sort and `<`; returns a new list. */
jv_t jb_sorted_by(jctx_t *c, jv_t items, jv_t keys, bool reverse);
/* jinja2's make_attrgetter: item lookups along "a.b.0"; `dflt` replaces an Undefined. */
jv_t jb_attr_path(jctx_t *c, jv_t item, jv_t attr, jv_t dflt);
/* Looks up a method `name` of `obj`: a bound method (new ref), or JV_UNDEF when `obj`
 * has no such attribute; mutating methods give an unsafe undefined. */
bool jb_method(jctx_t *c, jv_t obj, const char *name, size_t len, jv_t *out);
jv_t jb_call_builtin(jctx_t *c, const jfunc_t *f, int n_args, const jv_t *args, int n_kw,
                     const char **kw_names, const jv_t *kw_vals);
/* Globals every render sees (raise_exception, strftime_now, namespace, dict, range). */
void jb_define_globals(jctx_t *c, jscope_t *s);
void jx_scope_set(jctx_t *c, jscope_t *s, const char *name, jv_t v); /* takes the reference */
void jx_scope_free_children(jctx_t *c, jobj_t *scope, bool decref);
jscope_t *jx_scope_new(jctx_t *c, jscope_t *parent);
void jx_scope_free(jctx_t *c, jscope_t *s);
jv_t jx_slice(jctx_t *c, jv_t obj, const jnode_t *slice); /* obj[a:b:c]; slice is an N_SLICE */
/* Creates the root scope (with the globals) and makes it current. */
jscope_t *jx_root_scope(jctx_t *c);
jv_t jb_str_format(jctx_t *c, jv_t fmt, jv_t args); /* "..." % args */

/* String helpers shared by methods and filters (jinja_str.c). `s` must be a str. */
enum { JB_UPPER, JB_LOWER, JB_TITLE, JB_CAPITALIZE };
jv_t jb_strip(jctx_t *c, jv_t s, jv_t chars, int which); /* which: 1 left, 2 right, 3 both */
jv_t jb_case(jctx_t *c, jv_t s, int how);
jv_t jb_replace(jctx_t *c, jv_t s, jv_t old, jv_t repl, int64_t count);
jv_t jb_splitlines(jctx_t *c, jv_t s, bool keepends);
jv_t jb_split(jctx_t *c, jv_t s, jv_t sep, int64_t maxsplit, bool right); /* sep absent/none: whitespace */
int64_t jb_find(jctx_t *c, jv_t s, jv_t sub, bool right);                /* code point index or -1 */
bool jb_affix(jctx_t *c, jv_t s, jv_t prefix, bool end);                  /* startswith / endswith */
enum { JB_ISDIGIT, JB_ISALPHA, JB_ISALNUM, JB_ISSPACE, JB_ISUPPER, JB_ISLOWER };
bool jb_str_pred(jstr_t *s, int which);
jstr_t *jb_need_str(jctx_t *c, jv_t v, const char *what); /* fails unless v is a str */
const char *jb_find_bytes(const char *h, size_t nh, const char *n, size_t nn);
jv_t jb_str_dot_format(jctx_t *c, jv_t fmt, int n_args, const jv_t *args, int n_kw,
                       const char **kw_names, const jv_t *kw_vals);

/* Binds call arguments to parameter names as Python does. out[i] is a borrowed value,
 * or jv_absent() for a parameter that was not passed. Fails with a TypeError for too
 * many arguments, unknown keywords, or missing required parameters. */
static inline jv_t jv_absent(void) { jv_t v = {.t = JV_UNDEF, .unsafe = 2}; return v; }
static inline bool jv_is_absent(jv_t v) { return v.t == JV_UNDEF && v.unsafe == 2; }
void jb_bind(jctx_t *c, const char *fname, const char *const *params, int n_params, int n_required,
             int n_args, const jv_t *args, int n_kw, const char **kw_names, const jv_t *kw_vals,
             jv_t *out);

#endif
