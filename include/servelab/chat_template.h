/* chat_template.h - Hugging Face chat templates: a Jinja2 subset, rendered exactly as
 * transformers' apply_chat_template renders it.
 *
 * transformers renders with jinja2's ImmutableSandboxedEnvironment(trim_blocks=True,
 * lstrip_blocks=True) plus loopcontrols ({% break %}, {% continue %}) and its
 * {% generation %} tag, the globals raise_exception, strftime_now, namespace and dict,
 * and a tojson filter that is Python's json.dumps(ensure_ascii=False). This engine
 * reproduces that byte for byte for the constructs chat templates use: Python
 * truthiness, str()/repr() of values, int/float arithmetic, slicing, string methods,
 * Jinja's scoping, whitespace control and Undefined. What it does not do (includes,
 * extends, blocks, call blocks, big integers, ...) is listed in README.md; such a
 * template fails at compile time with a clear message rather than rendering wrong.
 *
 * A compiled template is read-only: many threads may render it at once. Every render
 * runs under limits (output size, memory, steps, loop iterations, call depth), so a
 * hostile template or conversation fails with CHAT_ERR_LIMIT instead of hanging.
 */
#ifndef SERVELAB_CHAT_TEMPLATE_H
#define SERVELAB_CHAT_TEMPLATE_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/core.h"

typedef struct chat_template chat_template_t;

typedef enum {
    CHAT_OK = 0,
    CHAT_ERR_SYNTAX, /* the template does not compile: "line L, column C: ..." */
    CHAT_ERR_RAISED, /* the template called raise_exception(msg); the message is msg */
    CHAT_ERR_RENDER, /* a runtime error (TypeError, UndefinedError, ...) with Jinja's message */
    CHAT_ERR_LIMIT,  /* a resource limit was hit */
    CHAT_ERR_INPUT,  /* bad render arguments (messages not an array of objects, bad UTF-8) */
} chat_err_kind_t;

typedef struct {
    size_t max_output_bytes;     /* any one rendered text (the prompt, a macro's output) */
    size_t max_memory_bytes;     /* values alive at once */
    int64_t max_steps;           /* expression and statement evaluations */
    int64_t max_loop_iterations; /* for-loop iterations, all loops together */
    int max_depth;               /* nested evaluation: macro calls, expression nesting */
} chat_limits_t;

/* 16 MiB output, 256 MiB memory, 50M steps, 1M iterations, depth 200: far above what
 * any real template needs on a 128K-token conversation, low enough to fail fast. */
chat_limits_t chat_limits_default(void);

/* Compiles template source (UTF-8; `len` bytes). Returns NULL with
 * "line L, column C: message" in err for a syntax error, an unknown filter or test,
 * or a construct this engine does not support. Caller frees with chat_template_free. */
chat_template_t *chat_template_compile(const char *src, size_t len, sl_err_t *err);
void chat_template_free(chat_template_t *t);

typedef struct {
    const cJSON *messages;       /* array of message objects (required) */
    bool add_generation_prompt;
    const cJSON *tools;          /* NULL: the template sees `tools` = none */
    const cJSON *documents;      /* NULL: none */
    const cJSON *special_tokens; /* object: bos_token, eos_token, ... -> string (may be NULL) */
    const cJSON *extra;          /* object of extra variables (chat_template_kwargs), may be NULL */
    const chat_limits_t *limits; /* NULL: chat_limits_default() */
} chat_render_args_t;

/* Renders `t`. On CHAT_OK *out is a malloc'd NUL-terminated string of *out_len bytes
 * (caller frees). Otherwise *out is NULL and err holds the message: for
 * CHAT_ERR_RAISED exactly the template's text, which the server returns as a 400.
 * Message keys whose value is null are dropped first, as transformers does. Never
 * crashes or leaks on any input. */
chat_err_kind_t chat_template_render(const chat_template_t *t, const chat_render_args_t *args,
                                     char **out, size_t *out_len, sl_err_t *err);

/* vLLM's message when a chat request meets a checkpoint without a template. */
#define CHAT_NO_TEMPLATE_MSG                                                                   \
    "As of transformers v4.44, default chat template is no longer allowed, so you must "      \
    "provide a chat template if the tokenizer does not define one."

/* Finds the template text to use for MODEL_DIR, as vLLM + transformers do:
 *   - `override` (--chat-template) if given: the contents of that file if it can be
 *     opened; otherwise, if it contains none of '{', '}', '\n', it was meant as a path
 *     and that is an error ("The supplied chat template (X) looks like a file path, but
 *     it failed to be opened. Reason: ..."); otherwise it is the template text itself;
 *   - else MODEL_DIR/chat_template.jinja if present (it takes priority in transformers);
 *   - else tokenizer_config.json's "chat_template": a string, or a list of
 *     {"name", "template"} from which "default" is taken.
 * Returns 0 with a malloc'd string in *text_out; 1 when there is no template
 * (err = CHAT_NO_TEMPLATE_MSG); -1 on any other error (err says what and where). */
int chat_template_source(const char *model_dir, const char *override, char **text_out,
                         sl_err_t *err);

/* The special-token variables transformers passes to templates (bos_token, eos_token,
 * unk_token, sep_token, pad_token, cls_token, mask_token; those that are set), read
 * from MODEL_DIR/tokenizer_config.json, where a token may be a string or an object
 * {"content": ...}. As in transformers, special_tokens_map.json overrides them when the
 * config has no added_tokens_decoder. Returns a new cJSON object (caller deletes), or
 * NULL with err set when the config cannot be read. */
cJSON *chat_special_tokens_load(const char *model_dir, sl_err_t *err);

#endif
