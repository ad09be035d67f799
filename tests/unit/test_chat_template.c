/* test_chat_template.c - the chat-template engine against transformers' renders.
 *
 * The corpus test renders every (template, conversation, add_generation_prompt) case
 * of tests/chat_templates/expected.json (made by make_expected.py with jinja2 set up
 * as transformers sets it up, cross-checked against transformers itself) and
 * compares byte for byte; templates that reject a conversation must fail with the
 * template's own message. The other tests pin down the Jinja and Python semantics the
 * corpus relies on, the error reporting, the resource limits and template selection.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "servelab/chat_template.h"
#include "test.h"

/* Renders `src` with `messages_json` (NULL: one user message) and the given limits.
 * Returns the output (caller frees) or NULL with *kind and err set. */
static char *render_ex(const char *src, const char *messages_json, bool agp, const char *extra_json,
                       const chat_limits_t *lim, chat_err_kind_t *kind, sl_err_t *err) {
    chat_template_t *t = chat_template_compile(src, strlen(src), err);
    if (!t) {
        if (kind) *kind = CHAT_ERR_SYNTAX;
        return NULL;
    }
    cJSON *msgs = cJSON_Parse(messages_json ? messages_json : "[{\"role\":\"user\",\"content\":\"hi\"}]");
    cJSON *tokens = cJSON_Parse("{\"bos_token\":\"<s>\",\"eos_token\":\"</s>\"}");
    cJSON *extra = extra_json ? cJSON_Parse(extra_json) : NULL;
    chat_render_args_t a = {.messages = msgs, .add_generation_prompt = agp, .special_tokens = tokens,
                            .extra = extra, .limits = lim};
    char *out = NULL;
    chat_err_kind_t k = chat_template_render(t, &a, &out, NULL, err);
    if (kind) *kind = k;
    cJSON_Delete(msgs);
    cJSON_Delete(tokens);
    cJSON_Delete(extra);
    chat_template_free(t);
    return out;
}

static char *render(const char *src) {
    sl_err_t err;
    chat_err_kind_t k;
    char *out = render_ex(src, NULL, true, NULL, NULL, &k, &err);
    if (!out) fprintf(stderr, "  render failed (%d): %s\n", (int)k, err.msg);
    return out;
}

#define CHECK_RENDER(src, expected)                                                              \
    do {                                                                                         \
        char *o_ = render(src);                                                                  \
        if (!o_ || strcmp(o_, expected)) {                                                       \
            fprintf(stderr, "  %s:%d: %s\n    template %s\n    got      [%s]\n    expected [%s]\n", \
                    __FILE__, __LINE__, test_cur_name, src, o_ ? o_ : "(error)", expected);     \
            test_cur_failed = 1;                                                                 \
        }                                                                                        \
        free(o_);                                                                                \
    } while (0)

#define CHECK_FAILS(src, msgs, want_kind, want_msg)                                              \
    do {                                                                                         \
        sl_err_t e_;                                                                             \
        chat_err_kind_t k_;                                                                      \
        char *o_ = render_ex(src, msgs, true, NULL, NULL, &k_, &e_);                             \
        CHECK(o_ == NULL);                                                                       \
        free(o_);                                                                                \
        CHECK_EQ_INT(k_, want_kind);                                                             \
        if (!o_) CHECK_STR_CONTAINS(e_.msg, want_msg);                                           \
    } while (0)

/* ---- the corpus ------------------------------------------------------------------ */

static void test_corpus_renders_byte_identical_to_transformers(void) {
    sl_err_t err;
    size_t n;
    char *text = sl_read_file("tests/chat_templates/expected.json", 64u << 20, &n, &err);
    CHECK(text != NULL);
    if (!text) return;
    cJSON *root = cJSON_Parse(text);
    free(text);
    CHECK(root != NULL);
    const cJSON *cases = cJSON_GetObjectItem(root, "cases"), *c;
    int n_cases = 0, n_match = 0, n_rejected = 0;
    cJSON_ArrayForEach(c, cases) {
        n_cases++;
        char path[512];
        snprintf(path, sizeof path, "tests/chat_templates/%s", cJSON_GetObjectItem(c, "file")->valuestring);
        size_t len;
        char *src = sl_read_file(path, 1 << 20, &len, &err);
        CHECK(src != NULL);
        if (!src) continue;
        chat_template_t *t = chat_template_compile(src, len, &err);
        free(src);
        if (!t) {
            fprintf(stderr, "  %s: %s\n", path, err.msg);
            test_cur_failed = 1;
            continue;
        }
        const cJSON *tools = cJSON_GetObjectItem(c, "tools");
        chat_render_args_t a = {.messages = cJSON_GetObjectItem(c, "messages"),
                                .add_generation_prompt = cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                                .special_tokens = cJSON_GetObjectItem(c, "special_tokens"),
                                .tools = cJSON_IsNull(tools) ? NULL : tools};
        char *out = NULL;
        size_t out_len = 0;
        chat_err_kind_t k = chat_template_render(t, &a, &out, &out_len, &err);
        const cJSON *want = cJSON_GetObjectItem(c, "output");
        bool ok;
        if (want) {
            ok = k == CHAT_OK && out_len == strlen(want->valuestring) && !memcmp(out, want->valuestring, out_len);
        } else {
            const char *want_kind = cJSON_GetObjectItem(c, "error_kind")->valuestring;
            const char *want_err = cJSON_GetObjectItem(c, "error")->valuestring;
            ok = k == (!strcmp(want_kind, "raised") ? CHAT_ERR_RAISED : CHAT_ERR_RENDER) && !strcmp(err.msg, want_err);
            n_rejected += ok;
        }
        if (ok) {
            n_match++;
        } else {
            fprintf(stderr, "  MISMATCH %s / %s / add_generation_prompt=%d\n    got      [%s]\n    expected [%s]\n",
                    cJSON_GetObjectItem(c, "template")->valuestring,
                    cJSON_GetObjectItem(c, "conversation")->valuestring, cJSON_IsTrue(cJSON_GetObjectItem(c, "add_generation_prompt")),
                    k == CHAT_OK ? out : err.msg,
                    want ? want->valuestring : cJSON_GetObjectItem(c, "error")->valuestring);
            test_cur_failed = 1;
        }
        free(out);
        chat_template_free(t);
    }
    printf("  corpus: %d/%d (template, conversation) renders match byte for byte (%d rejected with the template's message)\n",
           n_match, n_cases, n_rejected);
    CHECK(n_cases >= 200);
    cJSON_Delete(root);
}

/* ---- semantics ---------------------------------------------------------------------- */

static void test_whitespace_control_matches_trim_and_lstrip_blocks(void) {
    CHECK_RENDER("a\n  {% if true %}\n  b\n  {% endif %}\nc", "a\n  b\nc");
    CHECK_RENDER("x  {%- if true -%}  y  {%- endif %}", "xy");
    CHECK_RENDER("{{ 'a' }}  {% if true %}b{% endif %}", "a  b");
    CHECK_RENDER("  {%+ if true %}b{% endif %}", "  b");
    CHECK_RENDER("{# comment #}\nx{#- c -#}  y", "xy");
    CHECK_RENDER("line\n", "line"); /* one trailing newline is dropped */
    CHECK_RENDER("a\r\nb", "a\nb");
    CHECK_RENDER("{% raw %}{{ x }}{% endraw %}", "{{ x }}");
}

static void test_python_printing_of_values(void) {
    CHECK_RENDER("{{ 1.0 }} {{ 1e16 }} {{ 1.5e-5 }} {{ 0.1 + 0.2 }} {{ 7 / 2 }} {{ -7 // 2 }} {{ -7 % 3 }}",
                 "1.0 1e+16 1.5e-05 0.30000000000000004 3.5 -4 2");
    CHECK_RENDER("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': (1,)} }}",
                 "None True [1, 'a', None] {'k': (1,)}");
    CHECK_RENDER("{{ [\"it's\", 'a\\nb', '\\u00e9'] }}", "[\"it's\", 'a\\nb', 'é']");
    CHECK_RENDER("{{ undefined_thing }}|{{ 'a' ~ none ~ 1 }}", "|aNone1");
}

static void test_tojson_is_python_json_dumps(void) {
    CHECK_RENDER("{{ {'a': [1, 2.5, true, none], 'é': 'x\"\\n'} | tojson }}",
                 "{\"a\": [1, 2.5, true, null], \"é\": \"x\\\"\\n\"}");
    CHECK_RENDER("{{ {'b': 1, 'a': {}} | tojson(indent=2, sort_keys=true) }}",
                 "{\n  \"a\": {},\n  \"b\": 1\n}");
    CHECK_RENDER("{{ 'é😀' | tojson(ensure_ascii=true) }}", "\"\\u00e9\\ud83d\\ude00\"");
    CHECK_RENDER("{{ [1, 2] | tojson(separators=(',', ':')) }}", "[1,2]");
}

static void test_scoping_follows_jinja(void) {
    /* loop bodies get a fresh scope per iteration; set inside does not leak */
    CHECK_RENDER("{% set x = 0 %}{% for i in range(2) %}{{ x }}{% set x = i + 5 %}{{ x }}{% endfor %}{{ x }}",
                 "05060");
    CHECK_RENDER("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}",
                 "3");
    CHECK_RENDER("{% if true %}{% set y = 1 %}{% endif %}{{ y }}", "1");
    CHECK_RENDER("{% macro m(a, b=2) %}{{ a }}{{ b }}{{ z }}{% endmacro %}{% set z = 9 %}{{ m(1) }}{{ m(b=3, a=4) }}",
                 "129439");
}

static void test_loops_and_loop_variables(void) {
    CHECK_RENDER("{% for i in 'ab' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                 "{{ loop.last }}{{ loop.length }}{{ loop.cycle('x', 'y') }}{{ loop.previtem }}|{% endfor %}",
                 "102TrueFalse2x|211FalseTrue2ya|");
    CHECK_RENDER("{% for i in range(10) if i is odd %}{% if i > 5 %}{% break %}{% endif %}"
                 "{% if i == 3 %}{% continue %}{% endif %}{{ i }}/{{ loop.length }} {% endfor %}", "1/5 5/5 ");
    CHECK_RENDER("{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% else %}none{% endfor %}"
                 "{% for x in [] %}x{% else %}empty{% endfor %}", "a=1empty");
}

static void test_python_string_methods_and_filters(void) {
    CHECK_RENDER("{{ '  a b  '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ ' a  b '.split() }}|{{ 'a,b'.split(',') }}",
                 "a b|a|['a', 'b']|['a', 'b']");
    CHECK_RENDER("{{ 'Hi'.upper() }}{{ 'Hi'.lower() }}{{ \"they're\".title() }}{{ 'ab'.startswith('a') }}"
                 "{{ 'abab'.replace('b', 'c', 1) }}",
                 "HIhiThey'ReTrueacab");
    CHECK_RENDER("{{ 'héllo'[1:3] }}{{ 'abc'[::-1] }}{{ [1, 2, 3][-2:] }}{{ 'héllo' | length }}",
                 "élcba[2, 3]5");
    CHECK_RENDER("{{ ['b', 'A', 'a'] | sort }}{{ [1, 2, 3] | select('odd') | list }}"
                 "{{ [{'r': 'u'}, {'r': 's'}] | map(attribute='r') | join(',') }}",
                 "['A', 'a', 'b'][1, 3]u,s");
    CHECK_RENDER("{{ 'hello world' | title }}{{ 'a\\nb' | indent(2, first=true) }}{{ '3.7' | int }}"
                 "{{ x | default('d') }}",
                 "Hello World  a\n  b3d");
}

/* One use of each filter, test and method the checks above and the corpus leave out, so a
 * mistake in any of them fails a test. Expected values: jinja2 3.1.6 in the environment
 * tests/chat_templates/make_expected.py sets up. */
static void test_each_filter_test_and_method_renders_as_jinja2(void) {
    CHECK_RENDER("{{ -3|abs }} {{ 2.5|abs }} {{ 2.567|round(2) }} {{ 2.1|round(method='ceil') }} "
                 "{{ 7|round(-1) }} {{ '1.5'|float }} {{ 'x'|float(7) }} [{{ {'a': 1}|attr('a') }}] "
                 "{{ 'ab'|attr('upper') is callable }}",
                 "3 2.5 2.57 3.0 10 1.5 7 [] True");
    CHECK_RENDER("{{ 'aXb'|upper }} {{ 'aXb'|lower }} {{ 'aXB b'|capitalize }} {{ '<a&\"\\'>'|e }} "
                 "{{ '&'|escape }} {{ 'a-b-c'|replace('-', '+', 1) }} {{ '%s=%d'|format('n', 3) }} "
                 "{{ 1|safe }} {{ none|d('x') }}",
                 "AXB axb Axb b &lt;a&amp;&#34;&#39;&gt; &amp; a+b-c n=3 1 None");
    CHECK_RENDER("{{ [3, 1, 3, 2]|unique|list }} {{ ['a', 'A']|unique|list }} {{ [1, 2, 3]|reverse|list }} "
                 "{{ 'abc'|reverse }} {{ [1, 2, 3]|reject('odd')|list }} "
                 "{{ [{'a': 1}, {'a': 0}]|rejectattr('a')|list }}",
                 "[3, 1, 2] ['a'] [3, 2, 1] cba [2] [{'a': 0}]");
    CHECK_RENDER("{{ [1, 2, 3]|sum }} {{ [{'n': 2}, {'n': 5}]|sum(attribute='n', start=1) }} "
                 "{{ ['b', 'A', 'c']|min }} {{ ['b', 'A', 'c']|max }} {{ [{'n': 2}, {'n': 5}]|max(attribute='n') }} "
                 "{{ [1, 2, 3]|first }} {{ [1, 2, 3]|last }} {{ 'abc'|count }}",
                 "6 8 A c {'n': 5} 1 3 3");
    CHECK_RENDER("{{ {'b': 1, 'a': 2}|items|list }} {{ {'b': 1, 'a': 2}|dictsort }} "
                 "{{ {'b': 1, 'a': 2}|dictsort(by='value', reverse=true) }}",
                 "[('b', 1), ('a', 2)] [('a', 2), ('b', 1)] [('a', 2), ('b', 1)]");
    CHECK_RENDER("{{ [x is undefined, true is boolean, true is true, false is false, 1 is integer, 1.0 is float, "
                 "true is number, 'a' is sequence, none is callable, 1 is sameas 1, 'a' is escaped] }}",
                 "[True, True, True, True, True, True, True, True, False, True, False]");
    CHECK_RENDER("{{ ['ab' is lower, 'AB' is upper, 2 is even, 14 is divisibleby 7, 1 is in [1], 1 is ne 2, "
                 "1 is lt 2, 1 is le 1, 2 is gt 1, 2 is ge 3, 'upper' is filter, 'odd' is test] }}",
                 "[True, True, True, True, True, True, True, True, True, False, True, True]");
    CHECK_RENDER("{{ [1, 2, 3]|select('==', 2)|list }}{{ [1, 2, 3]|select('equalto', 2)|list }}"
                 "{{ [1, 2, 3]|select('!=', 2)|list }}{{ [1, 2, 3]|select('lessthan', 2)|list }}"
                 "{{ [1, 2, 3]|select('<=', 2)|list }}{{ [1, 2, 3]|select('greaterthan', 2)|list }}"
                 "{{ [1, 2, 3]|select('>=', 2)|list }}",
                 "[2][2][1, 3][1][1, 2][3][2, 3]");
    CHECK_RENDER("{{ dict(a=1, b=[2]) }} {{ strftime_now('%%') }} {{ [1, 2, 2].count(2) }} {{ [1, 2, 2].index(2) }} "
                 "{{ {'a': 1}.copy() }} {{ [1].copy() }} {{ {'a': 1}.get('a') }} {{ {'a': 1}.get('z', 0) }} "
                 "{{ {'a': 1}.get('z') }} {{ {'a': 1}.keys()|list }} {{ {'a': 1}.values()|list }}",
                 "{'a': 1, 'b': [2]} % 2 1 {'a': 1} [1] 1 0 None ['a'] [1]");
    CHECK_RENDER("{{ '{}-{x}'.format(1, x=2) }} {{ 'ab.txt'.removesuffix('.txt') }} {{ 'ab'.removeprefix('a') }} "
                 "{{ '12'.isdigit() }} {{ 'ab'.isalpha() }} {{ 'a1'.isalnum() }} {{ ' '.isspace() }} "
                 "{{ 'AB'.isupper() }} {{ 'ab'.islower() }}",
                 "1-2 ab b True True True True True True");
    CHECK_RENDER("{{ '-'.join(['a', 'b']) }} {{ 'abab'.count('b') }} {{ 'abab'.rindex('a') }} "
                 "{{ 'abab'.index('b') }} {{ 'abab'.rfind('z') }} {{ 'abab'.find('b') }} {{ 'ÉA'.casefold() }} "
                 "{{ 'aB'.capitalize() }} {{ 'ab'.endswith('b') }} {{ 'a\\nb'.splitlines() }} "
                 "{{ 'a b c'.rsplit(' ', 1) }} {{ 'xax'.rstrip('x') }} {{ 'xax'.lstrip('x') }}",
                 "a-b 2 2 1 -1 1 éa Ab True ['a', 'b'] ['a b', 'c'] xa ax");
}

static void test_messages_drop_null_keys_and_alias_reasoning(void) {
    sl_err_t err;
    char *o = render_ex("{{ messages[0] | tojson }}",
                        "[{\"role\":\"assistant\",\"content\":null,\"reasoning_content\":\"think\"}]", false,
                        NULL, NULL, NULL, &err);
    CHECK(o && !strcmp(o, "{\"thinking\": \"think\", \"role\": \"assistant\", \"reasoning_content\": \"think\"}"));
    free(o);
    o = render_ex("{{ tools }}|{{ documents }}|{{ add_generation_prompt }}|{{ date_string }}", NULL, true,
                  "{\"date_string\": \"1 Jan 2025\"}", NULL, NULL, &err);
    CHECK(o && !strcmp(o, "None|None|True|1 Jan 2025"));
    free(o);
}

/* ---- errors ----------------------------------------------------------------------------- */

static void test_raise_exception_message_is_the_templates(void) {
    CHECK_FAILS("{% if messages|length > 0 %}{{ raise_exception('Only ' ~ 2 ~ ' roles!') }}{% endif %}", NULL,
                CHAT_ERR_RAISED, "Only 2 roles!");
}

static void test_syntax_errors_report_line_and_column(void) {
    sl_err_t err;
    const char *bad = "ok\n{% for x in y %}\n  {{ x | nofilter }}\n{% endfor %}";
    CHECK(chat_template_compile(bad, strlen(bad), &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "line 3, column 10: No filter named 'nofilter'.");
    const char *unclosed = "{% if x %}\nabc";
    CHECK(chat_template_compile(unclosed, strlen(unclosed), &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "Unexpected end of template");
    const char *inc = "{% include 'x.j2' %}";
    CHECK(chat_template_compile(inc, strlen(inc), &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "not supported");
    const char *brk = "{% break %}";
    CHECK(chat_template_compile(brk, strlen(brk), &err) == NULL);
    CHECK_STR_CONTAINS(err.msg, "'break' outside loop");
    CHECK(chat_template_compile("\xff", 1, &err) == NULL);
}

static void test_runtime_errors_carry_jinjas_messages(void) {
    CHECK_FAILS("{{ messages[0].nope.deeper }}", NULL, CHAT_ERR_RENDER, "'dict object' has no attribute 'nope'");
    CHECK_FAILS("{{ messages.append(1) }}", NULL, CHAT_ERR_RENDER,
                "access to attribute 'append' of 'list' object is unsafe.");
    CHECK_FAILS("{{ 'a' < 1 }}", NULL, CHAT_ERR_RENDER, "'<' not supported between instances of 'str' and 'int'");
    CHECK_FAILS("{{ 1 // 0 }}", NULL, CHAT_ERR_RENDER, "division or modulo by zero");
    CHECK_FAILS("{{ range(100001) }}", NULL, CHAT_ERR_RENDER, "Range too big");
    CHECK_FAILS("{% set ns = namespace() %}{% set ns._p = 1 %}", NULL, CHAT_ERR_RENDER, "underscore-prefixed");
    CHECK_FAILS("{{ x }}", "[]", CHAT_ERR_INPUT, "empty conversation");
    CHECK_FAILS("{{ x }}", "[\"not an object\"]", CHAT_ERR_INPUT, "should be dicts");
}

static void test_limits_stop_hostile_templates(void) {
    chat_limits_t lim = chat_limits_default();
    lim.max_loop_iterations = 10000;
    lim.max_memory_bytes = 1u << 20;
    lim.max_output_bytes = 1u << 16;
    lim.max_steps = 200000;
    struct {
        const char *src;
        const char *want;
    } cases[] = {
        {"{% for i in range(1000) %}{% for j in range(1000) %}{% endfor %}{% endfor %}", "iterations"},
        {"{% set ns = namespace(s='x') %}{% for i in range(40) %}{% set ns.s = ns.s + ns.s %}{% endfor %}", "memory"},
        {"{% for i in range(9000) %}{{ 'abcdefghij' }}{% endfor %}", "longer than"},
        {"{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}", "deep"},
        {"{{ 'x' * 100000000 }}", "memory"},
        {"{% set ns = namespace(l=[]) %}{% for i in range(5000) %}{% set ns.l = [ns.l] %}{% endfor %}{{ ns.l }}", "nested too deeply"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        sl_err_t err;
        chat_err_kind_t k;
        char *o = render_ex(cases[i].src, NULL, true, NULL, &lim, &k, &err);
        CHECK(o == NULL);
        free(o);
        CHECK_EQ_INT(k, CHAT_ERR_LIMIT);
        CHECK_STR_CONTAINS(err.msg, cases[i].want);
    }
}

/* ---- concurrency ------------------------------------------------------------------------- */

typedef struct {
    const chat_template_t *t;
    const char *want;
    int ok;
} thread_arg_t;

static void *render_many(void *p) {
    thread_arg_t *a = p;
    cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"S\"},{\"role\":\"user\",\"content\":\"héllo\"}]");
    cJSON *tokens = cJSON_Parse("{\"bos_token\":\"<|begin_of_text|>\"}");
    chat_render_args_t args = {.messages = msgs, .add_generation_prompt = true, .special_tokens = tokens};
    a->ok = 1;
    for (int i = 0; i < 50; i++) {
        char *out = NULL;
        sl_err_t err;
        if (chat_template_render(a->t, &args, &out, NULL, &err) != CHAT_OK || strcmp(out, a->want)) a->ok = 0;
        free(out);
    }
    cJSON_Delete(msgs);
    cJSON_Delete(tokens);
    return NULL;
}

static void test_one_compiled_template_renders_in_many_threads(void) {
    sl_err_t err;
    size_t n;
    char *src = sl_read_file("tests/chat_templates/templates/llama-3.3-70b-instruct.jinja", 1 << 20, &n, &err);
    CHECK(src != NULL);
    if (!src) return;
    chat_template_t *t = chat_template_compile(src, n, &err);
    free(src);
    CHECK(t != NULL);
    if (!t) return;
    const char *want =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
        "Today Date: 26 Jul 2024\n\nS<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nhéllo<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n";
    pthread_t th[4];
    thread_arg_t args[4];
    for (int i = 0; i < 4; i++) {
        args[i] = (thread_arg_t){.t = t, .want = want};
        pthread_create(&th[i], NULL, render_many, &args[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(args[i].ok);
    }
    chat_template_free(t);
}

/* ---- template choice ---------------------------------------------------------------------- */

static void write_file(const char *dir, const char *name, const char *text) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    CHECK(test_write_file(path, text, strlen(text)) == 0);
}

static void test_template_source_follows_vllm_and_transformers(void) {
    char dir[] = "/tmp/servelab-ct-XXXXXX";
    CHECK(mkdtemp(dir) != NULL);
    sl_err_t err;
    char *text = NULL;
    /* no tokenizer_config.json at all / no chat_template: vLLM's message */
    CHECK_EQ_INT(chat_template_source(dir, NULL, &text, &err), 1);
    CHECK_STR_CONTAINS(err.msg, "default chat template is no longer allowed");
    write_file(dir, "tokenizer_config.json", "{\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\"}");
    CHECK_EQ_INT(chat_template_source(dir, NULL, &text, &err), 1);
    /* the list form: "default" is used */
    write_file(dir, "tokenizer_config.json",
               "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"T\"}, {\"name\": \"default\", \"template\": \"D\"}],"
               " \"bos_token\": {\"content\": \"<s>\", \"lstrip\": false}, \"eos_token\": \"</s>\", \"pad_token\": null}");
    CHECK_EQ_INT(chat_template_source(dir, NULL, &text, &err), 0);
    CHECK(text && !strcmp(text, "D"));
    free(text);
    cJSON *tok = chat_special_tokens_load(dir, &err);
    CHECK(tok && !strcmp(cJSON_GetObjectItem(tok, "bos_token")->valuestring, "<s>"));
    CHECK(tok && !cJSON_GetObjectItem(tok, "pad_token"));
    cJSON_Delete(tok);
    /* chat_template.jinja takes priority */
    write_file(dir, "chat_template.jinja", "J");
    CHECK_EQ_INT(chat_template_source(dir, NULL, &text, &err), 0);
    CHECK(text && !strcmp(text, "J"));
    free(text);
    /* --chat-template: a file, else inline text, else a path that failed */
    char path[512];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    CHECK_EQ_INT(chat_template_source(dir, path, &text, &err), 0);
    CHECK(text && !strcmp(text, "J"));
    free(text);
    CHECK_EQ_INT(chat_template_source(dir, "{{ messages }}", &text, &err), 0);
    CHECK(text && !strcmp(text, "{{ messages }}"));
    free(text);
    CHECK_EQ_INT(chat_template_source(dir, "/no/such/template.jinja", &text, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "looks like a file path, but it failed to be opened");
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    RUN(test_corpus_renders_byte_identical_to_transformers);
    RUN(test_whitespace_control_matches_trim_and_lstrip_blocks);
    RUN(test_python_printing_of_values);
    RUN(test_tojson_is_python_json_dumps);
    RUN(test_scoping_follows_jinja);
    RUN(test_loops_and_loop_variables);
    RUN(test_python_string_methods_and_filters);
    RUN(test_each_filter_test_and_method_renders_as_jinja2);
    RUN(test_messages_drop_null_keys_and_alias_reasoning);
    RUN(test_raise_exception_message_is_the_templates);
    RUN(test_syntax_errors_report_line_and_column);
    RUN(test_runtime_errors_carry_jinjas_messages);
    RUN(test_limits_stop_hostile_templates);
    RUN(test_one_compiled_template_renders_in_many_threads);
    RUN(test_template_source_follows_vllm_and_transformers);
    return test_summary();
}
