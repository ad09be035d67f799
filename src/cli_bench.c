/* cli_bench.c - `servelab bench decode`: batch-1 decode speed against the roofline.
 *
 *   servelab bench decode MODEL_DIR [--threads 1,2] [--input-len 32] [--output-len 128]
 *       [--load-format auto|dummy] [--dtype auto]
 *
 * Decoding one token reads every weight once (all but the embedding table, of
 * which it reads one row), so batch-1 decode is bound by memory bandwidth. For
 * each thread count this measures the machine's read bandwidth with the same
 * threads (best of 5 passes over a 1 GiB buffer), then decode tokens/s, and
 * prints the achieved weight-read GB/s and its fraction of the measured
 * bandwidth. A benchmark prints figures; it asserts nothing.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/generate.h"

static const char *bench_usage =
    "usage: servelab bench decode MODEL_DIR [--threads 1,2] [--input-len N] [--output-len N]\n"
    "                             [--load-format auto|safetensors|dummy] [--dtype auto|...]\n";

/* Best read bandwidth in GB/s over 5 passes of a sum over `n_bytes`. */
static double measure_read_bandwidth(size_t n_bytes) {
    size_t n = n_bytes / sizeof(float);
    float *buf = sl_malloc(n * sizeof(float));
#pragma omp parallel for schedule(static)
    for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 1023) * 1e-3f;
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = sl_now_s();
        float total = 0.0f;
#pragma omp parallel for simd schedule(static) reduction(+ : total)
        for (size_t i = 0; i < n; i++) total += buf[i];
        double dt = sl_now_s() - t0;
        sink += total;
        double gbs = (double)(n * sizeof(float)) / dt / 1e9;
        if (gbs > best) best = gbs;
    }
    (void)sink;
    free(buf);
    return best;
}

int cli_bench(int argc, char **argv) {
    if (argc < 2 || strcmp(argv[1], "decode") != 0)
        cli_usage_error(bench_usage, "expected a benchmark name: decode");
    argc--;
    argv++;
    enum { O_THREADS = 256, O_IN, O_OUT, O_LOAD, O_DTYPE };
    static const struct option opts[] = {
        {"threads", required_argument, 0, O_THREADS}, {"input-len", required_argument, 0, O_IN},
        {"output-len", required_argument, 0, O_OUT},  {"load-format", required_argument, 0, O_LOAD},
        {"dtype", required_argument, 0, O_DTYPE},     {0, 0, 0, 0},
    };
    char threads_arg[128] = "1,2";
    long long input_len = 32, output_len = 128;
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype_auto = true, .progress = true};
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case O_THREADS: snprintf(threads_arg, sizeof threads_arg, "%s", optarg); break;
        case O_IN: input_len = cli_parse_int("--input-len", optarg, 1, 1 << 20); break;
        case O_OUT: output_len = cli_parse_int("--output-len", optarg, 2, 1 << 20); break;
        case O_LOAD: {
            int f = load_format_parse(optarg);
            if (f < 0) cli_usage_error(bench_usage, "argument --load-format: invalid choice: '%s'", optarg);
            lo.load_format = (load_format_t)f;
            break;
        }
        case O_DTYPE:
            if (dtype_parse(optarg, &lo.dtype, &lo.dtype_auto))
                cli_usage_error(bench_usage, "argument --dtype: invalid choice: '%s'", optarg);
            break;
        default: cli_usage_error(bench_usage, "unrecognized argument: %s", argv[optind - 1]);
        }
    }
    if (optind != argc - 1) cli_usage_error(bench_usage, "expected exactly one MODEL_DIR");
    const char *model_dir = argv[optind];

    sl_err_t err;
    const sl_ops_t *ops = cpu_backend_init(0);
    tokenizer_t *tok = tok_load(model_dir, &err);
    if (!tok) sl_die("%s", err.msg);
    int32_t max_len = (int32_t)(input_len + output_len + 1), block = 16;
    llama_model_t model;
    if (llama_init(&model, model_dir, &lo, ops, (int32_t)input_len, 1, (max_len + block - 1) / block,
                   &err))
        sl_die("%s", err.msg);
    gen_ctx_t g;
    if (gen_init(&g, &model, tok, max_len, (int32_t)input_len, block, &err)) sl_die("%s", err.msg);

    const model_config_t *cfg = &model.cfg;
    /* A decode step reads every weight but the embedding table (one row of it). */
    double embed_bytes = cfg->tie_word_embeddings ? 0.0
                         : (double)(cfg->vocab_size * cfg->hidden_size) * (double)dtype_size(model.w.embed.dtype);
    double step_bytes = (double)model.w.n_bytes - embed_bytes;
    int32_t *prompt = sl_malloc((size_t)input_len * sizeof(int32_t));
    for (long long i = 0; i < input_len; i++) prompt[i] = (int32_t)(3 + (i * 7919) % (cfg->vocab_size - 3));

    printf("model: %s (%lld parameters, %.1f MB of weights read per decode step)\n", model_dir,
           (long long)model.w.n_params, step_bytes / 1e6);
    printf("%-8s %-12s %-14s %-16s %-10s\n", "threads", "decode tok/s", "weights GB/s",
           "memory read GB/s", "fraction");
    char *save = NULL;
    for (char *t = strtok_r(threads_arg, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int n_threads = (int)cli_parse_int("--threads", t, 1, 4096);
        omp_set_num_threads(n_threads);
        double bw = measure_read_bandwidth((size_t)1 << 30);
        gen_params_t p = {.max_tokens = (int32_t)output_len, .temperature = 0.0f, .ignore_eos = true};
        gen_output_t out;
        if (gen_run(&g, prompt, (int32_t)input_len, &p, NULL, NULL, &out, &err)) sl_die("%s", err.msg);
        /* The first sampled token comes from the prefill; the rest are decode steps. */
        double tok_s = (double)(out.n - 1) / out.decode_s;
        double gbs = tok_s * step_bytes / 1e9;
        printf("%-8d %-12.1f %-14.2f %-16.2f %-10.2f\n", n_threads, tok_s, gbs, bw, gbs / bw);
        fflush(stdout);
        gen_output_free(&out);
    }
    free(prompt);
    gen_free(&g);
    llama_free(&model);
    tok_free(tok);
    return 0;
}
