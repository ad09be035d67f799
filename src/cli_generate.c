/* cli_generate.c - `servelab generate`: offline generation from a checkpoint.
 *
 *   servelab generate MODEL_DIR --prompt TEXT [--prompt TEXT ...] [--max-tokens N]
 *       [--temperature T] [--seed S] [--ignore-eos] [--json]
 *       [--dtype auto] [--load-format auto|safetensors|dummy] [--max-model-len N]
 *       [--max-num-batched-tokens N] [--block-size N] [--threads N]
 *
 * Without --json the prompt and its continuation are streamed to stdout as they
 * are generated. With --json one object per prompt per line:
 *   {"prompt", "prompt_token_ids", "token_ids", "text", "finish_reason", "logprobs"}
 * where logprobs[i] is log_softmax of the raw logits at the chosen token. Log
 * lines go to stderr so stdout stays data. Defaults follow vLLM: max_tokens 16,
 * temperature 1.0, seed 0 (prompt i uses seed + i), max_model_len from config.json.
 */
#define _GNU_SOURCE
#include <cjson/cJSON.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/generate.h"

static const char *gen_usage =
    "usage: servelab generate MODEL_DIR --prompt TEXT [--prompt TEXT ...] [--max-tokens N]\n"
    "                         [--temperature T] [--seed S] [--ignore-eos] [--json]\n"
    "                         [--dtype auto|float32|bfloat16|float16] [--load-format auto|safetensors|dummy]\n"
    "                         [--max-model-len N] [--max-num-batched-tokens N] [--block-size N]\n"
    "                         [--threads N]\n";

static void stream_stdout(void *user, const char *text, int len) {
    (void)user;
    fwrite(text, 1, (size_t)len, stdout);
    fflush(stdout);
}

static void print_json(const char *prompt, const int32_t *prompt_ids, int n_prompt,
                       const gen_output_t *o) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "prompt", prompt);
    cJSON *pids = cJSON_AddArrayToObject(j, "prompt_token_ids");
    for (int i = 0; i < n_prompt; i++) cJSON_AddItemToArray(pids, cJSON_CreateNumber(prompt_ids[i]));
    cJSON *ids = cJSON_AddArrayToObject(j, "token_ids");
    for (int i = 0; i < o->n; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(o->token_ids[i]));
    cJSON_AddStringToObject(j, "text", o->text);
    cJSON_AddStringToObject(j, "finish_reason", o->finish_reason);
    cJSON *lps = cJSON_AddArrayToObject(j, "logprobs");
    for (int i = 0; i < o->n; i++) cJSON_AddItemToArray(lps, cJSON_CreateNumber(o->logprobs[i]));
    char *s = cJSON_PrintUnformatted(j);
    puts(s);
    fflush(stdout);
    free(s);
    cJSON_Delete(j);
}

int cli_generate(int argc, char **argv) {
    enum { O_PROMPT = 256, O_MAX_TOKENS, O_TEMP, O_SEED, O_IGNORE_EOS, O_JSON, O_DTYPE, O_LOAD,
           O_MAX_LEN, O_MAX_BATCHED, O_BLOCK, O_THREADS };
    static const struct option opts[] = {
        {"prompt", required_argument, 0, O_PROMPT},
        {"max-tokens", required_argument, 0, O_MAX_TOKENS},
        {"temperature", required_argument, 0, O_TEMP},
        {"seed", required_argument, 0, O_SEED},
        {"ignore-eos", no_argument, 0, O_IGNORE_EOS},
        {"json", no_argument, 0, O_JSON},
        {"dtype", required_argument, 0, O_DTYPE},
        {"load-format", required_argument, 0, O_LOAD},
        {"max-model-len", required_argument, 0, O_MAX_LEN},
        {"max-num-batched-tokens", required_argument, 0, O_MAX_BATCHED},
        {"block-size", required_argument, 0, O_BLOCK},
        {"threads", required_argument, 0, O_THREADS},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    const char **prompts = NULL;
    int n_prompts = 0;
    gen_params_t params = {.max_tokens = 16, .temperature = 1.0f, .seed = 0};
    bool json = false;
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true, .progress = true};
    long long max_model_len = 0, max_batched = 2048, block_size = 16, threads = 0;

    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        switch (c) {
        case O_PROMPT:
            prompts = sl_realloc(prompts, (size_t)(n_prompts + 1) * sizeof *prompts);
            prompts[n_prompts++] = optarg;
            break;
        case O_MAX_TOKENS: params.max_tokens = (int32_t)cli_parse_int("--max-tokens", optarg, 1, 1 << 30); break;
        case O_TEMP: params.temperature = (float)cli_parse_double("--temperature", optarg, 0.0, 1e6); break;
        case O_SEED: params.seed = (uint64_t)cli_parse_int("--seed", optarg, 0, INT64_MAX); break;
        case O_IGNORE_EOS: params.ignore_eos = true; break;
        case O_JSON: json = true; break;
        case O_DTYPE:
            if (dtype_parse(optarg, &lo.dtype, &lo.dtype_auto))
                cli_usage_error(gen_usage, "argument --dtype: invalid choice: '%s'", optarg);
            break;
        case O_LOAD: {
            int f = load_format_parse(optarg);
            if (f < 0) cli_usage_error(gen_usage, "argument --load-format: invalid choice: '%s'", optarg);
            lo.load_format = (load_format_t)f;
            break;
        }
        case O_MAX_LEN: max_model_len = cli_parse_int("--max-model-len", optarg, 2, 1 << 24); break;
        case O_MAX_BATCHED: max_batched = cli_parse_int("--max-num-batched-tokens", optarg, 1, 1 << 20); break;
        case O_BLOCK: block_size = cli_parse_int("--block-size", optarg, 1, 1024); break;
        case O_THREADS: threads = cli_parse_int("--threads", optarg, 1, 4096); break;
        case 'h': fputs(gen_usage, stdout); free(prompts); return 0;
        default:
            cli_usage_error(gen_usage, "unrecognized or incomplete argument: %s", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        cli_usage_error(gen_usage, "expected exactly one MODEL_DIR, got %d", argc - optind);
    if (n_prompts == 0) cli_usage_error(gen_usage, "the following arguments are required: --prompt");
    const char *model_dir = argv[optind];

    sl_log_to_stderr();
    sl_err_t err;
    model_config_t cfg;
    if (config_load(model_dir, &cfg, &err)) sl_die("%s", err.msg);
    if (max_model_len == 0) max_model_len = cfg.max_position_embeddings;
    if (max_model_len > cfg.max_position_embeddings)
        sl_die("--max-model-len %lld is larger than the model's max_position_embeddings (%lld)",
               max_model_len, (long long)cfg.max_position_embeddings);
    int32_t max_blocks = (int32_t)((max_model_len + block_size - 1) / block_size);

    const sl_ops_t *ops = cpu_backend_init((int)threads);
    tokenizer_t *tok = tok_load(model_dir, &err);
    if (!tok) sl_die("%s", err.msg);
    llama_model_t model;
    if (llama_init(&model, model_dir, &lo, ops, (int32_t)max_batched, 1, max_blocks, &err))
        sl_die("%s", err.msg);
    gen_ctx_t g;
    if (gen_init(&g, &model, tok, (int32_t)max_model_len, (int32_t)max_batched,
                 (int32_t)block_size, &err))
        sl_die("%s", err.msg);

    int status = 0;
    for (int i = 0; i < n_prompts; i++) {
        int32_t *ids = NULL;
        int n = tok_encode(tok, prompts[i], strlen(prompts[i]), true, &ids, &err);
        gen_output_t out;
        gen_params_t p = params;
        p.seed = params.seed + (uint64_t)i;
        if (n >= 0 && !json) {
            fputs(prompts[i], stdout);
            fflush(stdout);
        }
        if (n < 0 || gen_run(&g, ids, n, &p, json ? NULL : stream_stdout, NULL, &out, &err)) {
            fprintf(stderr, "servelab: error: prompt %d: %s\n", i, err.msg);
            free(ids);
            status = 1;
            continue;
        }
        if (json) {
            print_json(prompts[i], ids, n, &out);
        } else {
            printf("\n");
            fflush(stdout);
        }
        LOG_DEBUG("prompt %d: %d prompt tokens in %.3f s, %d tokens in %.3f s", i, n,
                  out.prefill_s, out.n, out.decode_s);
        gen_output_free(&out);
        free(ids);
    }
    gen_free(&g);
    llama_free(&model);
    tok_free(tok);
    free(prompts);
    return status;
}
