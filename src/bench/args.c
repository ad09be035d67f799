/* args.c - the flags of `servelab bench serve`: vLLM's names and defaults (vllm-compat.md §3.2,
 * vllm/benchmarks/serve.py and datasets/arg_utils.py), parsed the way argparse does it.
 *
 * `--flag value` and `--flag=value`; list flags (--goodput, --metadata, --header) take the
 * following arguments up to the next flag; errors are argparse's wording, returned as one
 * line (the caller exits 2). Not argparse: unambiguous prefixes of flag names are not
 * accepted. Where vLLM has no flag (the long-tail dataset) the names follow its pattern:
 * --long-tail-input-len 256 (the short prompts), --long-tail-long-input-len 4096,
 * --long-tail-long-fraction 0.05, --long-tail-output-len 128. --endpoint defaults to the
 * backend's route (/v1/completions or /v1/chat/completions) instead of always the former.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"

const char bench_serve_usage[] =
    "usage: servelab bench serve [--base-url URL | --host 127.0.0.1 --port 8000] [--backend openai|openai-chat]\n"
    "         [--endpoint PATH] [--model NAME] [--dataset-name random|prefix_repetition|long-tail|custom]\n"
    "         [--dataset-path FILE.jsonl] [--num-prompts 1000] [--request-rate inf] [--burstiness 1.0]\n"
    "         [--max-concurrency N] [--num-warmups 0] [--ignore-eos] [--seed 0]\n"
    "         [--random-input-len 1024] [--random-output-len 128] [--random-range-ratio 0.0] [--random-prefix-len 0]\n"
    "         [--prefix-repetition-prefix-len 256] [--prefix-repetition-suffix-len 256]\n"
    "         [--prefix-repetition-num-prefixes 10] [--prefix-repetition-output-len 128]\n"
    "         [--long-tail-input-len 256] [--long-tail-long-input-len 4096] [--long-tail-long-fraction 0.05]\n"
    "         [--long-tail-output-len 128] [--custom-output-len 256] [--skip-chat-template] [--disable-shuffle]\n"
    "         [--no-oversample] [--input-len N] [--output-len N]\n"
    "         [--percentile-metrics ttft,tpot,itl] [--metric-percentiles 99] [--goodput ttft:MS tpot:MS e2el:MS]\n"
    "         [--save-result] [--save-detailed] [--append-result] [--result-dir DIR] [--result-filename NAME]\n"
    "         [--metadata KEY=VALUE ...] [--label L] [--temperature T] [--top-p P] [--top-k K] [--min-p P]\n"
    "         [--frequency-penalty F] [--presence-penalty P] [--repetition-penalty R] [--logprobs N]\n"
    "         [--extra-body JSON] [--header KEY=VALUE ...] [--ramp-up-strategy linear|exponential\n"
    "         --ramp-up-start-rps N --ramp-up-end-rps N] [--request-id-prefix P] [--served-model-name NAME]\n"
    "         [--tokenizer ID (reported only)] [--disable-tqdm] [--insecure]\n"
    "       API key: OPENAI_API_KEY (sent as Authorization: Bearer).\n";

typedef enum { K_STR, K_INT, K_FLOAT, K_FLAG, K_LIST, K_OPT_FLOAT, K_OPT_INT } kind_t;
typedef struct {
    const char *name;
    kind_t kind;
    size_t off;
    double min, max;
} spec_t;

#define F(name, kind, field, lo, hi) {name, kind, offsetof(bench_args_t, field), lo, hi}
#define BIG 1e15
static const spec_t specs[] = {
    F("--backend", K_STR, backend, 0, 0),
    F("--base-url", K_STR, base_url, 0, 0),
    F("--host", K_STR, host, 0, 0),
    F("--port", K_INT, port, 1, 65535),
    F("--endpoint", K_STR, endpoint, 0, 0),
    F("--model", K_STR, model, 0, 0),
    F("--served-model-name", K_STR, served_model_name, 0, 0),
    F("--tokenizer", K_STR, tokenizer, 0, 0),
    F("--label", K_STR, label, 0, 0),
    F("--header", K_LIST, header, 0, 0),
    F("--insecure", K_FLAG, insecure, 0, 0),
    F("--dataset-name", K_STR, dataset_name, 0, 0),
    F("--dataset-path", K_STR, dataset_path, 0, 0),
    F("--num-prompts", K_INT, num_prompts, 1, 1e8),
    F("--seed", K_INT, seed, -BIG, BIG),
    F("--input-len", K_INT, input_len, 1, 1e8),
    F("--output-len", K_INT, output_len, 1, 1e8),
    F("--random-input-len", K_INT, random_input_len, 1, 1e8),
    F("--random-output-len", K_INT, random_output_len, 1, 1e8),
    F("--random-range-ratio", K_FLOAT, random_range_ratio, 0, 0.999999),
    F("--random-prefix-len", K_INT, random_prefix_len, 0, 1e8),
    F("--prefix-repetition-prefix-len", K_INT, prefix_rep_prefix_len, 0, 1e8),
    F("--prefix-repetition-suffix-len", K_INT, prefix_rep_suffix_len, 0, 1e8),
    F("--prefix-repetition-num-prefixes", K_INT, prefix_rep_num_prefixes, 1, 1e8),
    F("--prefix-repetition-output-len", K_INT, prefix_rep_output_len, 1, 1e8),
    F("--long-tail-input-len", K_INT, long_tail_input_len, 1, 1e8),
    F("--long-tail-long-input-len", K_INT, long_tail_long_input_len, 1, 1e8),
    F("--long-tail-long-fraction", K_FLOAT, long_tail_long_fraction, 0, 1),
    F("--long-tail-output-len", K_INT, long_tail_output_len, 1, 1e8),
    F("--custom-output-len", K_INT, custom_output_len, 1, 1e8),
    F("--skip-chat-template", K_FLAG, skip_chat_template, 0, 0),
    F("--disable-shuffle", K_FLAG, disable_shuffle, 0, 0),
    F("--no-oversample", K_FLAG, no_oversample, 0, 0),
    F("--request-rate", K_FLOAT, request_rate, 1e-9, INFINITY),
    F("--burstiness", K_FLOAT, burstiness, 1e-9, INFINITY),
    F("--ramp-up-strategy", K_STR, ramp_up_strategy, 0, 0),
    F("--ramp-up-start-rps", K_INT, ramp_up_start_rps, 0, 1e9),
    F("--ramp-up-end-rps", K_INT, ramp_up_end_rps, 0, 1e9),
    F("--max-concurrency", K_INT, max_concurrency, 1, 1e8),
    F("--num-warmups", K_INT, num_warmups, 0, 1e8),
    F("--ignore-eos", K_FLAG, ignore_eos, 0, 0),
    F("--disable-tqdm", K_FLAG, disable_tqdm, 0, 0),
    F("--request-id-prefix", K_STR, request_id_prefix, 0, 0),
    F("--temperature", K_OPT_FLOAT, temperature, 0, 0),
    F("--top-p", K_OPT_FLOAT, top_p, 0, 0),
    F("--top-k", K_OPT_INT, top_k, 0, 0),
    F("--min-p", K_OPT_FLOAT, min_p, 0, 0),
    F("--frequency-penalty", K_OPT_FLOAT, frequency_penalty, 0, 0),
    F("--presence-penalty", K_OPT_FLOAT, presence_penalty, 0, 0),
    F("--repetition-penalty", K_OPT_FLOAT, repetition_penalty, 0, 0),
    F("--logprobs", K_OPT_INT, logprobs, 0, 0),
    F("--extra-body", K_STR, extra_body, 0, 0),
    F("--percentile-metrics", K_STR, percentile_metrics, 0, 0),
    F("--metric-percentiles", K_STR, metric_percentiles, 0, 0),
    F("--goodput", K_LIST, goodput, 1, 0), /* min = 1: nargs='+' */
    F("--metadata", K_LIST, metadata, 0, 0),
    F("--save-result", K_FLAG, save_result, 0, 0),
    F("--save-detailed", K_FLAG, save_detailed, 0, 0),
    F("--append-result", K_FLAG, append_result, 0, 0),
    F("--result-dir", K_STR, result_dir, 0, 0),
    F("--result-filename", K_STR, result_filename, 0, 0),
};
#undef F

static void defaults(bench_args_t *a) {
    memset(a, 0, sizeof *a);
    a->backend = "openai";
    a->host = "127.0.0.1";
    a->port = 8000;
    a->dataset_name = "random";
    a->num_prompts = 1000;
    a->input_len = a->output_len = -1;
    a->random_input_len = 1024, a->random_output_len = 128;
    a->prefix_rep_prefix_len = 256, a->prefix_rep_suffix_len = 256;
    a->prefix_rep_num_prefixes = 10, a->prefix_rep_output_len = 128;
    a->long_tail_input_len = 256, a->long_tail_long_input_len = 4096;
    a->long_tail_long_fraction = 0.05, a->long_tail_output_len = 128;
    a->custom_output_len = 256;
    a->request_rate = INFINITY, a->burstiness = 1.0;
    a->ramp_up_start_rps = a->ramp_up_end_rps = -1;
    a->temperature = a->top_p = a->min_p = NAN;
    a->frequency_penalty = a->presence_penalty = a->repetition_penalty = NAN;
    a->top_k = a->logprobs = INT64_MIN;
    a->metric_percentiles = "99";
    for (int i = 0; i < 3; i++) a->goodput_ms[i] = NAN;
}

static bool looks_like_number(const char *s) {
    char *end;
    strtod(s, &end);
    return end != s && !*end;
}

static int parse_number(const spec_t *sp, const char *v, void *field, sl_err_t *err) {
    char *end;
    errno = 0;
    if (sp->kind == K_INT || sp->kind == K_OPT_INT) {
        long long x = strtoll(v, &end, 10);
        if (errno || end == v || *end) return sl_fail(err, "argument %s: invalid int value: '%s'", sp->name, v);
        if (sp->kind == K_INT && ((double)x < sp->min || (double)x > sp->max))
            return sl_fail(err, "argument %s: %s is out of range [%.0f, %.0f]", sp->name, v, sp->min, sp->max);
        *(int64_t *)field = x;
        return 0;
    }
    double x = strtod(v, &end);
    if (end == v || *end || isnan(x)) return sl_fail(err, "argument %s: invalid float value: '%s'", sp->name, v);
    if (sp->kind == K_FLOAT && !(x >= sp->min && x <= sp->max))
        return sl_fail(err, "argument %s: %s is out of range [%g, %g]", sp->name, v, sp->min, sp->max);
    *(double *)field = x;
    return 0;
}

static int parse_flags(int argc, char **argv, bench_args_t *a, sl_err_t *err) {
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (!strcmp(arg, "-h") || !strcmp(arg, "--help")) return 1;
        const char *eq = strncmp(arg, "--", 2) ? NULL : strchr(arg, '=');
        size_t name_len = eq ? (size_t)(eq - arg) : strlen(arg);
        const spec_t *sp = NULL;
        for (size_t k = 0; k < sizeof specs / sizeof *specs; k++)
            if (strlen(specs[k].name) == name_len && !strncmp(specs[k].name, arg, name_len)) sp = &specs[k];
        if (!sp) return sl_fail(err, "unrecognized arguments: %s", arg);
        void *field = (char *)a + sp->off;
        if (sp->kind == K_FLAG) {
            if (eq) return sl_fail(err, "argument %.*s: ignored explicit argument '%s'", (int)name_len, arg, eq + 1);
            *(bool *)field = true;
            continue;
        }
        if (sp->kind == K_LIST) {
            bench_strlist_t *l = field;
            free(l->v);
            l->v = sl_malloc(sizeof *l->v * (size_t)(argc + 1));
            l->n = 0;
            if (eq) l->v[l->n++] = eq + 1;
            while (i + 1 < argc && (argv[i + 1][0] != '-' || looks_like_number(argv[i + 1]))) l->v[l->n++] = argv[++i];
            if (sp->min > 0 && l->n == 0) return sl_fail(err, "argument %s: expected at least one argument", sp->name);
            continue;
        }
        const char *v;
        if (eq) v = eq + 1;
        else if (i + 1 < argc && (argv[i + 1][0] != '-' || looks_like_number(argv[i + 1]))) v = argv[++i];
        else return sl_fail(err, "argument %s: expected one argument", sp->name);
        if (sp->kind == K_STR) *(const char **)field = v;
        else if (parse_number(sp, v, field, err)) return -1;
    }
    return 0;
}

static int check_choice(const char *flag, const char *v, const char *const *choices, sl_err_t *err) {
    char list[256] = "";
    for (const char *const *c = choices; *c; c++) {
        if (!strcmp(v, *c)) return 0;
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s'%s'", l ? ", " : "", *c);
    }
    return sl_fail(err, "argument %s: invalid choice: '%s' (choose from %s)", flag, v, list);
}

static const char *const metric_names[BM_N] = {"ttft", "tpot", "itl", "e2el", "client_queue_time",
                                              "e2el_including_client_queue"};

static int derive(bench_args_t *a, sl_err_t *err) {
    static const char *const backends[] = {"openai", "openai-chat", NULL};
    static const char *const datasets[] = {"random", "prefix_repetition", "long-tail", "custom", NULL};
    if (check_choice("--backend", a->backend, backends, err)) return -1;
    /* Accept both spellings of the two names with a separator; vLLM's are these. */
    if (!strcmp(a->dataset_name, "prefix-repetition")) a->dataset_name = "prefix_repetition";
    if (!strcmp(a->dataset_name, "long_tail")) a->dataset_name = "long-tail";
    if (!strcmp(a->dataset_name, "sharegpt") || !strcmp(a->dataset_name, "sonnet") || !strcmp(a->dataset_name, "hf") ||
        !strcmp(a->dataset_name, "burstgpt") || !strcmp(a->dataset_name, "random-mm"))
        return sl_fail(err, "argument --dataset-name: '%s' is not supported here (choose from 'random', "
                            "'prefix_repetition', 'long-tail', 'custom'; a JSONL file of prompts works with 'custom')",
                       a->dataset_name);
    if (check_choice("--dataset-name", a->dataset_name, datasets, err)) return -1;
    bool custom = !strcmp(a->dataset_name, "custom");
    if (custom && !a->dataset_path) return sl_fail(err, "--dataset-name custom needs --dataset-path FILE.jsonl");
    if (!custom && a->dataset_path)
        return sl_fail(err, "Cannot use '%s' dataset with --dataset-path. Please specify the appropriate "
                            "--dataset-name (e.g., 'custom') for your dataset file: %s",
                       a->dataset_name, a->dataset_path);
    bool chat = !strcmp(a->backend, "openai-chat");
    if (!a->endpoint) a->endpoint = chat ? "/v1/chat/completions" : "/v1/completions";
    size_t el = strlen(a->endpoint);
    const char *want = chat ? "chat/completions" : "completions";
    if (el < strlen(want) || strcmp(a->endpoint + el - strlen(want), want))
        return sl_fail(err, "--endpoint %s: the %s backend needs a URL ending in '%s'", a->endpoint, a->backend, want);
    if (a->input_len > 0) a->random_input_len = a->input_len;
    if (a->output_len > 0)
        a->random_output_len = a->custom_output_len = a->prefix_rep_output_len = a->long_tail_output_len = a->output_len;
    if (a->ramp_up_strategy) {
        static const char *const ramps[] = {"linear", "exponential", NULL};
        if (check_choice("--ramp-up-strategy", a->ramp_up_strategy, ramps, err)) return -1;
        if (!isinf(a->request_rate))
            return sl_fail(err, "When using ramp-up, do not specify --request-rate. The request rate will be "
                                "controlled by ramp-up parameters. Please remove the --request-rate argument.");
        if (a->ramp_up_start_rps < 0 || a->ramp_up_end_rps < 0)
            return sl_fail(err, "When using --ramp-up-strategy, both --ramp-up-start-rps and --ramp-up-end-rps must "
                                "be specified");
        if (a->ramp_up_start_rps > a->ramp_up_end_rps) return sl_fail(err, "Ramp-up start RPS must be less than end RPS");
        if (!strcmp(a->ramp_up_strategy, "exponential") && a->ramp_up_start_rps == 0)
            return sl_fail(err, "For exponential ramp-up, the start RPS cannot be 0.");
    }
    if (a->logprobs != INT64_MIN && (a->logprobs < 0 || a->logprobs > 20))
        return sl_fail(err, "argument --logprobs: %lld is out of range [0, 20]", (long long)a->logprobs);

    /* --percentile-metrics: vLLM ignores unknown names silently; a typo here is an error. */
    char buf[256];
    snprintf(buf, sizeof buf, "%s", a->percentile_metrics ? a->percentile_metrics : "ttft,tpot,itl");
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < BM_N && strcmp(t, metric_names[k])) k++;
        if (k == BM_N)
            return sl_fail(err, "argument --percentile-metrics: unknown metric '%s' (choose from ttft, tpot, itl, "
                                "e2el, client_queue_time, e2el_including_client_queue)", t);
        a->metric_on[k] = true;
    }
    snprintf(buf, sizeof buf, "%s", a->metric_percentiles);
    a->n_pcts = 0;
    for (char *save = NULL, *t = strtok_r(buf, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        char *end;
        double p = strtod(t, &end);
        if (end == t || *end || !(p >= 0 && p <= 100))
            return sl_fail(err, "argument --metric-percentiles: '%s' is not a percentile in [0, 100]", t);
        if (a->n_pcts == BENCH_MAX_PCTS) return sl_fail(err, "argument --metric-percentiles: at most %d values", BENCH_MAX_PCTS);
        a->pcts[a->n_pcts++] = p;
    }
    if (a->n_pcts == 0) return sl_fail(err, "argument --metric-percentiles: no percentile given");

    static const char *const slo_names[3] = {"ttft", "tpot", "e2el"};
    for (int i = 0; i < a->goodput.n; i++) {
        const char *kv = a->goodput.v[i], *colon = strchr(kv, ':');
        char *end = NULL;
        double v = colon ? strtod(colon + 1, &end) : 0;
        if (!colon || strchr(colon + 1, ':') || end == colon + 1 || *end)
            return sl_fail(err, "Invalid format found for service level objectives. Specify service level objectives "
                                "for goodput as \"KEY:VALUE\" pairs, where the key is a metric name, and the value is "
                                "a number in milliseconds.");
        int k = 0;
        while (k < 3 && (strlen(slo_names[k]) != (size_t)(colon - kv) || strncmp(kv, slo_names[k], (size_t)(colon - kv))))
            k++;
        if (k == 3)
            return sl_fail(err, "Invalid metric name found, %.*s: %g. The service level objective name should be one "
                                "of ['ttft', 'tpot', 'e2el']. ", (int)(colon - kv), kv, v);
        if (v < 0)
            return sl_fail(err, "Invalid value found, %s: %g. The service level objective value should be non-negative.",
                           slo_names[k], v);
        a->goodput_ms[k] = v;
        a->goodput_on = true;
    }
    for (int i = 0; i < a->metadata.n; i++)
        if (!strchr(a->metadata.v[i], '='))
            return sl_fail(err, "Invalid metadata format. Please use KEY=VALUE format.");
    for (int i = 0; i < a->header.n; i++)
        if (!strchr(a->header.v[i], '=')) return sl_fail(err, "Invalid header format. Please use KEY=VALUE format.");
    if (a->extra_body) {
        a->extra = cJSON_Parse(a->extra_body);
        if (!a->extra || !cJSON_IsObject(a->extra))
            return sl_fail(err, "argument --extra-body: invalid JSON object: '%s'", a->extra_body);
    }
    return 0;
}

int bench_args_parse(int argc, char **argv, bench_args_t *a, sl_err_t *err) {
    defaults(a);
    int rc = parse_flags(argc, argv, a, err);
    if (rc == 1) {
        fputs(bench_serve_usage, stdout);
        return 1;
    }
    if (rc || derive(a, err)) return -1;
    return 0;
}

void bench_args_free(bench_args_t *a) {
    free(a->header.v);
    free(a->goodput.v);
    free(a->metadata.v);
    cJSON_Delete(a->extra);
    a->header.v = a->goodput.v = a->metadata.v = NULL;
    a->extra = NULL;
}
