/* generate.c - `servelab generate`: offline generation through the engine.
 *
 *   servelab generate MODEL_DIR (--prompt TEXT [--prompt TEXT ...] | --prompts-file FILE.jsonl)
 *       [--max-tokens N] [--temperature T] [--ignore-eos] [--json] [engine flags]
 *
 * Like vLLM's LLM.generate, every prompt is submitted at once and the engine
 * batches them continuously; outputs come back in input order. Each line of a
 * prompts file is {"prompt": TEXT, ...vLLM SamplingParams fields...}, or
 * {"prompt_token_ids": [ids], ...} (vLLM's TokensPrompt: the ids are used as they
 * are, and "prompt" becomes their decode); --prompt
 * prompts use --max-tokens/--temperature/--ignore-eos and seed --seed + i.
 * Without --json the prompt and its continuation are printed (streamed as they
 * are generated). With --json, one object per prompt per line: "prompt",
 * "prompt_token_ids", "token_ids", "text", "finish_reason", "stop_reason",
 * "logprobs" (log-softmax of the raw logits at each chosen token),
 * "num_cached_tokens", plus "top_logprobs" when logprobs > 0 was asked and
 * "outputs" (one object per completion) when n > 1. Logs go to stderr.
 * Exit status 1 when a prompt is refused or a completion ends with
 * finish_reason "error" (a failed device step), after printing what came.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine_args.h"
#include "servelab/sampling_json.h"

static const char *gen_usage =
    "usage: servelab generate MODEL_DIR (--prompt TEXT [--prompt TEXT ...] | --prompts-file FILE.jsonl)\n"
    "                         [--max-tokens N] [--temperature T] [--ignore-eos] [--json] [engine flags]\n";

/* --help's descriptions, defaults in parentheses. */
static const char *gen_help =
    "\ngenerate flags:\n"
    "  --prompt TEXT                 a prompt; repeat for several (each seeded --seed + its index)\n"
    "  --prompts-file FILE.jsonl     one {\"prompt\": ..., vLLM sampling fields...} object per line\n"
    "  --max-tokens N                tokens to generate per --prompt (16)\n"
    "  --temperature T               0: greedy (1.0)\n"
    "  --ignore-eos                  keep generating past EOS (off)\n"
    "  --json                        one JSON object per prompt per line, instead of the text (off)\n";

typedef struct {
    char *prompt;
    sampling_params_t params;
    int32_t *ids;
    int32_t n_ids;
    engine_stream_t *stream;
} job_t;

/* Per-completion results gathered from the stream's events. */
typedef struct {
    int32_t *tokens;
    double *logprobs;
    sample_result_t *top;
    int32_t n, cap;
    char *text;
    size_t len;
    finish_reason_t finish;
    int32_t stop_index, stop_token;
} choice_t;

static void choice_add(choice_t *c, const engine_output_t *o) {
    if (o->n_new) {
        if (c->n == c->cap) {
            c->cap = c->cap ? 2 * c->cap : 32;
            c->tokens = sl_realloc(c->tokens, (size_t)c->cap * sizeof *c->tokens);
            c->logprobs = sl_realloc(c->logprobs, (size_t)c->cap * sizeof *c->logprobs);
            c->top = sl_realloc(c->top, (size_t)c->cap * sizeof *c->top);
        }
        c->tokens[c->n] = o->token;
        c->logprobs[c->n] = o->logprobs.logprob;
        c->top[c->n++] = o->logprobs;
    }
    c->text = sl_realloc(c->text, c->len + o->text_len + 1);
    memcpy(c->text + c->len, o->text, o->text_len);
    c->text[c->len += o->text_len] = '\0';
    if (o->finish != FINISH_NONE) {
        c->finish = o->finish;
        c->stop_index = o->stop_index;
        c->stop_token = o->stop_token;
    }
}

static cJSON *int_array(const int32_t *v, int32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(v[i]));
    return a;
}

static void add_choice_fields(cJSON *j, const job_t *job, const choice_t *c) {
    cJSON_AddItemToObject(j, "token_ids", int_array(c->tokens, c->n));
    cJSON_AddStringToObject(j, "text", c->text ? c->text : "");
    cJSON_AddStringToObject(j, "finish_reason", finish_reason_str(c->finish));
    if (c->stop_index >= 0) cJSON_AddStringToObject(j, "stop_reason", job->params.stop[c->stop_index]);
    else if (c->stop_token >= 0) cJSON_AddNumberToObject(j, "stop_reason", c->stop_token);
    else cJSON_AddNullToObject(j, "stop_reason");
    cJSON *lps = cJSON_AddArrayToObject(j, "logprobs");
    for (int32_t i = 0; i < c->n; i++) cJSON_AddItemToArray(lps, cJSON_CreateNumber(c->logprobs[i]));
    if (job->params.logprobs > 0) {
        cJSON *top = cJSON_AddArrayToObject(j, "top_logprobs");
        for (int32_t i = 0; i < c->n; i++) {
            cJSON *step = cJSON_CreateArray();
            for (int32_t k = 0; k < c->top[i].n_top; k++) {
                cJSON *e = cJSON_CreateObject();
                cJSON_AddNumberToObject(e, "id", c->top[i].top_ids[k]);
                cJSON_AddNumberToObject(e, "logprob", c->top[i].top_logprobs[k]);
                cJSON_AddItemToArray(step, e);
            }
            cJSON_AddItemToArray(top, step);
        }
    }
}

static void print_json(const job_t *job, const choice_t *ch, int32_t n, int32_t n_cached) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "prompt", job->prompt);
    cJSON_AddItemToObject(j, "prompt_token_ids", int_array(job->ids, job->n_ids));
    add_choice_fields(j, job, &ch[0]);
    cJSON_AddNumberToObject(j, "num_cached_tokens", n_cached);
    if (n > 1) {
        cJSON *outs = cJSON_AddArrayToObject(j, "outputs");
        for (int32_t i = 0; i < n; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", i);
            add_choice_fields(o, job, &ch[i]);
            cJSON_AddItemToArray(outs, o);
        }
    }
    char *s = cJSON_PrintUnformatted(j);
    puts(s);
    fflush(stdout);
    free(s);
    cJSON_Delete(j);
}

/* Reads a JSONL prompts file into jobs, before the model loads; a file that
 * cannot be read or any bad line is a startup error naming the file. */
static job_t *read_prompts_file(const char *path, int *n_jobs) {
    sl_err_t err;
    size_t len;
    char *text = sl_read_file(path, (size_t)1 << 30, &len, &err);
    if (!text) sl_die("--prompts-file %s", err.msg);
    job_t *jobs = NULL;
    int n = 0, line_no = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next) *next++ = '\0';
        line_no++;
        if (strspn(line, " \t\r") == strlen(line)) continue;
        cJSON *j = cJSON_Parse(line);
        if (!j || !cJSON_IsObject(j)) sl_die("%s:%d: not a JSON object", path, line_no);
        const cJSON *it;
        cJSON_ArrayForEach(it, j) {
            if (strcmp(it->string, "prompt") && strcmp(it->string, "prompt_token_ids") &&
                !sampling_json_is_known_key(it->string))
                sl_die("%s:%d: unknown field \"%.64s\"", path, line_no, it->string);
        }
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(j, "prompt");
        const cJSON *ids = cJSON_GetObjectItemCaseSensitive(j, "prompt_token_ids");
        if (p && ids) sl_die("%s:%d: give prompt or prompt_token_ids, not both", path, line_no);
        if (!ids && !cJSON_IsString(p))
            sl_die("%s:%d: prompt: expected a string (or prompt_token_ids: a list of token ids)", path, line_no);
        jobs = sl_realloc(jobs, (size_t)(n + 1) * sizeof *jobs);
        job_t *job = &jobs[n++];
        memset(job, 0, sizeof *job);
        if (p) {
            job->prompt = sl_strdup(p->valuestring);
        } else {
            int32_t k = cJSON_IsArray(ids) ? cJSON_GetArraySize(ids) : 0;
            if (k == 0) sl_die("%s:%d: prompt_token_ids: expected a non-empty array of token ids", path, line_no);
            job->ids = sl_calloc((size_t)k, sizeof *job->ids);
            cJSON_ArrayForEach(it, ids) {
                /* the range against the vocabulary is engine_submit's check */
                if (!cJSON_IsNumber(it) || it->valuedouble != (double)(int32_t)it->valuedouble)
                    sl_die("%s:%d: prompt_token_ids: expected integers", path, line_no);
                job->ids[job->n_ids++] = (int32_t)it->valuedouble;
            }
        }
        sampling_params_default(&job->params);
        if (sampling_params_from_json(j, &job->params, &err)) sl_die("%s:%d: %s", path, line_no, err.msg);
        cJSON_Delete(j);
    }
    free(text);
    if (n == 0) sl_die("%s: no prompts", path);
    *n_jobs = n;
    return jobs;
}

int cli_generate(int argc, char **argv) {
    enum { O_PROMPT = 256, O_FILE, O_MAX_TOKENS, O_TEMP, O_IGNORE_EOS, O_JSON };
    static const struct option own[] = {
        {"prompt", required_argument, 0, O_PROMPT},
        {"prompts-file", required_argument, 0, O_FILE},
        {"max-tokens", required_argument, 0, O_MAX_TOKENS},
        {"temperature", required_argument, 0, O_TEMP},
        {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"json", no_argument, 0, O_JSON},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct option *opts = cli_merge_options(own);
    engine_config_t ea;
    engine_config_default(&ea);
    const char **prompts = NULL, *prompts_file = NULL;
    int n_prompts = 0;
    int32_t max_tokens = 16;
    float temperature = 1.0f;
    bool ignore_eos = false, json = false;

    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (engine_args_handle(&ea, c, optarg)) continue;
        switch (c) {
        case O_PROMPT:
            prompts = sl_realloc(prompts, (size_t)(n_prompts + 1) * sizeof *prompts);
            prompts[n_prompts++] = optarg;
            break;
        case O_FILE: prompts_file = optarg; break;
        case O_MAX_TOKENS: max_tokens = (int32_t)cli_parse_int("--max-tokens", optarg, 1, 1 << 30); break;
        case O_TEMP: temperature = (float)cli_parse_double("--temperature", optarg, 0.0, 1e6); break;
        case O_IGNORE_EOS: ignore_eos = true; break;
        case O_JSON: json = true; break;
        case 'h': printf("%s%s%s%s", gen_usage, engine_usage, gen_help, engine_help); free(opts); free(prompts); return 0;
        default: cli_usage_error(gen_usage, "unrecognized or incomplete argument: %s", argv[optind - 1]);
        }
    }
    free(opts);
    if (optind != argc - 1) cli_usage_error(gen_usage, "expected exactly one MODEL_DIR, got %d", argc - optind);
    if ((n_prompts > 0) == (prompts_file != NULL))
        cli_usage_error(gen_usage, "give either --prompt (one or more) or --prompts-file");
    ea.model_dir = argv[optind];
    sl_log_to_stderr();
    cli_require_checkpoint(ea.model_dir);

    int n_jobs = n_prompts;
    job_t *jobs;
    if (prompts_file) {
        jobs = read_prompts_file(prompts_file, &n_jobs);
    } else {
        jobs = sl_calloc((size_t)n_jobs, sizeof *jobs);
        for (int i = 0; i < n_jobs; i++) {
            jobs[i].prompt = sl_strdup(prompts[i]);
            sampling_params_default(&jobs[i].params);
            jobs[i].params.max_tokens = max_tokens;
            jobs[i].params.temperature = temperature;
            jobs[i].params.ignore_eos = ignore_eos;
            jobs[i].params.has_seed = true;
            jobs[i].params.seed = ea.seed + (uint64_t)i;
        }
    }
    free(prompts);

    engine_t *engine = cli_engine_create(&ea);
    engine_start(engine);
    int status = 0;
    sl_err_t err;
    for (int i = 0; i < n_jobs; i++) {
        job_t *job = &jobs[i];
        if (job->params.logprobs < 0) job->params.logprobs = 0; /* always report the chosen logprob */
        if (job->ids) {
            /* ids out of range decode to nothing; engine_submit refuses them */
            job->prompt = tok_decode(engine_tokenizer(engine), job->ids, (size_t)job->n_ids, false, NULL);
        } else {
            job->n_ids = tok_encode(engine_tokenizer(engine), job->prompt, strlen(job->prompt), true, &job->ids, &err);
        }
        if (job->n_ids < 0 || !(job->stream = engine_submit(engine, job->ids, job->n_ids, &job->params, &err))) {
            fprintf(stderr, "servelab: error: prompt %d: %s\n", i, err.msg);
            status = 1;
        }
    }
    for (int i = 0; i < n_jobs; i++) {
        job_t *job = &jobs[i];
        if (job->stream) {
            int32_t n = job->params.n, n_cached = 0;
            choice_t *ch = sl_calloc((size_t)n, sizeof *ch);
            if (!json) {
                fputs(job->prompt, stdout);
                fflush(stdout);
            }
            for (engine_output_t *o; (o = engine_stream_next(job->stream)); engine_output_free(o)) {
                choice_add(&ch[o->index], o);
                n_cached = o->cached_tokens;
                if (!json && n == 1) {
                    fwrite(o->text, 1, o->text_len, stdout);
                    fflush(stdout);
                }
            }
            if (json) {
                print_json(job, ch, n, n_cached);
            } else {
                for (int32_t k = 0; n > 1 && k < n; k++) printf("\n[%d]%s", k, ch[k].text ? ch[k].text : "");
                printf("\n");
            }
            for (int32_t k = 0; k < n; k++) {
                if (ch[k].finish == FINISH_ERROR) {
                    fprintf(stderr, "servelab: error: prompt %d, completion %d: the engine failed it "
                            "(finish_reason \"error\"; the log says why)\n", i, k);
                    status = 1;
                }
                free(ch[k].tokens), free(ch[k].logprobs), free(ch[k].top), free(ch[k].text);
            }
            free(ch);
            engine_stream_release(engine, job->stream);
        }
        free(job->prompt);
        free(job->ids);
        sampling_params_free(&job->params);
    }
    free(jobs);
    engine_stop(engine);
    engine_free(engine);
    return status;
}
