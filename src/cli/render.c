/* render.c - `servelab render`: a conversation through the checkpoint's chat
 * template, then through its tokenizer, exactly as a chat request would be.
 *
 *   servelab render MODEL_DIR --messages JSON [--chat-template PATH_OR_INLINE]
 *       [--no-generation-prompt] [--tools JSON] [--chat-template-kwargs JSON] [--json]
 *
 * The runbook step "render the prompt text and token ids": a wrong template or a
 * tokenizer mismatch (a doubled BOS, a special token split into pieces) shows here
 * directly. JSON arguments may be given inline or as @FILE. The prompt is tokenized
 * with add_special_tokens=False, as vLLM does for chat prompts (the template already
 * wrote the BOS). Without --json: the prompt text between two header lines, then the
 * ids; with --json one object {"prompt": TEXT, "token_ids": [...]}. A template error
 * (including raise_exception) prints "servelab: error: MESSAGE" and exits 1.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/chat_template.h"
#include "servelab/tokenizer.h"

static const char *render_usage =
    "usage: servelab render MODEL_DIR --messages JSON [--chat-template PATH_OR_INLINE]\n"
    "                       [--no-generation-prompt] [--tools JSON] [--chat-template-kwargs JSON]\n"
    "                       [--json]\n"
    "  JSON arguments are inline JSON or @FILE.\n";

/* Parses an inline JSON argument or @FILE; exits 2 (usage) on bad JSON. */
static cJSON *json_arg(const char *flag, const char *value) {
    char *text = NULL;
    if (value[0] == '@') {
        sl_err_t err;
        size_t n;
        text = sl_read_file(value + 1, 64u << 20, &n, &err);
        if (!text) cli_usage_error(render_usage, "argument %s: %s", flag, err.msg);
        value = text;
    }
    cJSON *j = cJSON_Parse(value);
    free(text);
    if (!j) cli_usage_error(render_usage, "argument %s: invalid JSON", flag);
    return j;
}

int cli_render(int argc, char **argv) {
    enum { O_MESSAGES = 256, O_TEMPLATE, O_NO_GEN, O_TOOLS, O_KWARGS, O_JSON };
    static const struct option opts[] = {
        {"messages", required_argument, 0, O_MESSAGES},
        {"chat-template", required_argument, 0, O_TEMPLATE},
        {"no-generation-prompt", no_argument, 0, O_NO_GEN},
        {"tools", required_argument, 0, O_TOOLS},
        {"chat-template-kwargs", required_argument, 0, O_KWARGS},
        {"json", no_argument, 0, O_JSON},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char *messages_arg = NULL, *template_arg = NULL, *tools_arg = NULL, *kwargs_arg = NULL;
    bool add_gen = true, json = false;
    optind = 1;
    opterr = 0;
    int ch;
    while ((ch = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (ch) {
        case O_MESSAGES: messages_arg = optarg; break;
        case O_TEMPLATE: template_arg = optarg; break;
        case O_NO_GEN: add_gen = false; break;
        case O_TOOLS: tools_arg = optarg; break;
        case O_KWARGS: kwargs_arg = optarg; break;
        case O_JSON: json = true; break;
        case 'h': fputs(render_usage, stdout); return 0;
        default: cli_usage_error(render_usage, "unrecognized or incomplete argument: %s", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        cli_usage_error(render_usage, "expected exactly one MODEL_DIR, got %d", argc - optind);
    if (!messages_arg) cli_usage_error(render_usage, "the following arguments are required: --messages");
    const char *model_dir = argv[optind];
    sl_log_to_stderr();

    cJSON *messages = json_arg("--messages", messages_arg);
    cJSON *tools = tools_arg ? json_arg("--tools", tools_arg) : NULL;
    cJSON *kwargs = kwargs_arg ? json_arg("--chat-template-kwargs", kwargs_arg) : NULL;
    if (!cJSON_IsArray(messages)) cli_usage_error(render_usage, "argument --messages: expected a JSON array");
    if (kwargs && !cJSON_IsObject(kwargs))
        cli_usage_error(render_usage, "argument --chat-template-kwargs: expected a JSON object");

    sl_err_t err;
    char *source = NULL;
    if (chat_template_source(model_dir, template_arg, &source, &err) != 0) sl_die("%s", err.msg);
    cJSON *tokens = chat_special_tokens_load(model_dir, &err);
    if (!tokens) sl_die("%s", err.msg);
    chat_template_t *tmpl = chat_template_compile(source, strlen(source), &err);
    if (!tmpl) sl_die("chat template: %s", err.msg);

    chat_render_args_t args = {.messages = messages, .add_generation_prompt = add_gen, .tools = tools,
                               .special_tokens = tokens, .extra = kwargs};
    char *prompt = NULL;
    size_t prompt_len = 0;
    if (chat_template_render(tmpl, &args, &prompt, &prompt_len, &err) != CHAT_OK) sl_die("%s", err.msg);

    tokenizer_t *tok = tok_load(model_dir, &err);
    if (!tok) sl_die("%s", err.msg);
    int32_t *ids = NULL;
    int n_ids = tok_encode(tok, prompt, prompt_len, false, &ids, &err);
    if (n_ids < 0) sl_die("%s", err.msg);

    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", prompt);
        cJSON *arr = cJSON_AddArrayToObject(o, "token_ids");
        for (int i = 0; i < n_ids; i++) cJSON_AddItemToArray(arr, cJSON_CreateNumber(ids[i]));
        char *s = cJSON_PrintUnformatted(o);
        puts(s);
        free(s);
        cJSON_Delete(o);
    } else {
        printf("=== prompt (%zu bytes) ===\n", prompt_len);
        fwrite(prompt, 1, prompt_len, stdout);
        if (prompt_len == 0 || prompt[prompt_len - 1] != '\n') putchar('\n');
        printf("=== token ids (%d) ===\n", n_ids);
        for (int i = 0; i < n_ids; i++) printf("%s%d", i ? " " : "", ids[i]);
        putchar('\n');
    }
    free(ids);
    tok_free(tok);
    free(prompt);
    chat_template_free(tmpl);
    cJSON_Delete(tokens);
    free(source);
    cJSON_Delete(kwargs);
    cJSON_Delete(tools);
    cJSON_Delete(messages);
    return 0;
}
