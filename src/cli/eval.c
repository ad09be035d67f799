/* eval.c - `servelab eval perplexity`: the perplexity of a model on a text.
 *
 *   servelab eval perplexity MODEL_DIR (--text FILE | --tokens FILE)
 *       [--max-model-len N] [--stride S] [engine flags: --device --dtype --load-format
 *        --max-num-batched-tokens --threads --block-size]
 *
 * Hugging Face's "Perplexity of fixed-length models" sliding window: windows
 * of up to N tokens start every S tokens; each window scores only the tokens
 * the previous one did not (its last end - prev_end), with the window's
 * earlier tokens as context, so with S < N every token after the first window
 * has at least N - S tokens of context. The text is tokenized once, as the
 * tokenizer does by default (add_special_tokens: Llama's BOS first). A
 * window's first token is never scored (transformers shifts the labels inside
 * the model): with S < N that is only the text's first token; with S == N
 * (no overlap), the first of every window, as in the guide. Perplexity is exp(total NLL / scored tokens),
 * the token-weighted mean (the guide averages per-window means, which weighs
 * a short last window as much as a full one).
 *
 * No scheduler and no KV pool: one sequence at a time through the model
 * runner, each window restarting at position 0 in a cache of one window,
 * computed in chunks of at most --max-num-batched-tokens tokens (chunked
 * prefill). Every chunk asks for the logits of the positions that predict a
 * scored token; each row's log-softmax (in double) is reduced to one NLL as
 * it comes, so memory holds one chunk's logits, never a window's.
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "engine_args.h"
#include "servelab/model_runner.h"
#include "servelab/parallel.h"
#include "servelab/tokenizer.h"

/* Rows of logits per forward when --max-num-batched-tokens is not given: 512
 * rows of a 49152-token vocabulary are 100 MB of fp32, 2048 would be 400. */
#define PPL_DEFAULT_CHUNK 512

static const char *eval_usage =
    "usage: servelab eval perplexity MODEL_DIR (--text FILE | --tokens FILE) [--max-model-len N] [--stride S]\n"
    "                                [engine flags]\n";

static const char *eval_help =
    "\nperplexity flags:\n"
    "  --text FILE                   UTF-8 text, tokenized once with the tokenizer's special tokens (BOS)\n"
    "  --tokens FILE                 token ids (whitespace-separated) instead of a text, used as given\n"
    "  --max-model-len N             tokens per window (max_position_embeddings of config.json)\n"
    "  --stride S                    tokens between window starts, 1..N (N / 2)\n"
    "  --max-num-batched-tokens T    tokens per forward: a window runs in chunks of T (min(N, 512))\n"
    "  --device, --dtype, --load-format, --threads, --block-size: as for serve\n";

/* The windows of Hugging Face's loop over n tokens, max_len per window, the
 * given stride: window w covers [begin, end), scores its last n_scored
 * tokens. Returns how many; writes at most cap of them. */
typedef struct {
    int64_t begin, end, n_scored;
} ppl_window_t;

static int64_t ppl_windows(int64_t n, int64_t max_len, int64_t stride, ppl_window_t *out, int64_t cap) {
    int64_t k = 0, prev_end = 0;
    for (int64_t begin = 0; begin < n; begin += stride) {
        int64_t end = begin + max_len < n ? begin + max_len : n;
        /* A window's first token has no context in it (transformers shifts the
         * labels by one inside the model), so at most end - begin - 1 are
         * scored: all but the text's first with overlap (stride < N), all but
         * each window's first without. */
        int64_t trg = end - prev_end < end - begin - 1 ? end - prev_end : end - begin - 1;
        if (k < cap) out[k] = (ppl_window_t){begin, end, trg};
        k++;
        prev_end = end;
        if (end == n) break;
    }
    return k;
}

/* Reads whitespace-separated token ids; exits 2 naming the file on a bad one. */
static int32_t *read_token_file(const char *path, int64_t V, int64_t *n_out) {
    sl_err_t err;
    size_t len;
    char *text = sl_read_file(path, (size_t)1 << 30, &len, &err);
    if (!text) cli_usage_error("", "argument --tokens: %s", err.msg);
    int32_t *ids = NULL;
    int64_t n = 0, cap = 0;
    for (char *p = text, *end;; p = end) {
        while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r' || *p == ',') p++;
        if (!*p) break;
        long long v = strtoll(p, &end, 10);
        if (end == p || v < 0 || v >= V)
            cli_usage_error("", "argument --tokens: %s: token %lld: not an id in [0, %lld)", path, (long long)n,
                            (long long)V);
        if (n == cap) ids = sl_realloc(ids, (size_t)(cap = cap ? 2 * cap : 1024) * sizeof *ids);
        ids[n++] = (int32_t)v;
    }
    free(text);
    *n_out = n;
    return ids;
}

/* -log softmax(row)[target], in double. */
static double row_nll(const float *row, int64_t V, int32_t target) {
    double mx = row[0];
    for (int64_t i = 1; i < V; i++)
        if (row[i] > mx) mx = row[i];
    double s = 0.0;
    for (int64_t i = 0; i < V; i++) s += exp((double)row[i] - mx);
    return log(s) + mx - (double)row[target];
}

typedef struct {
    engine_config_t ea;
    const char *text, *tokens;
    int64_t stride;
} ppl_args_t;

/* The backend --device asks for (auto: CUDA when this build has it and
 * device 0 answers), and the load options for it. Exits 1 on failure. */
static const sl_ops_t *ppl_backend(const ppl_args_t *a, const model_config_t *mc, model_load_opts_t *load) {
    *load = a->ea.load;
    load->progress = false;
#ifdef SERVELAB_HAVE_CUDA
    if (a->ea.device != ENGINE_DEVICE_CPU) {
        cuda_device_info_t info;
        sl_err_t err;
        if (cuda_backend_probe(0, &info, &err) == 0) {
            sl_dtype_t act = engine_cuda_act_dtype(load, mc), fp8 = DTYPE_COUNT;
            engine_kv_cache_dtype_parse(a->ea.kv_cache_dtype, &fp8); /* checked at argument parsing */
            cuda_backend_opts_t o = {.device = 0, .act_dtype = act, .kv_fp8 = fp8 != DTYPE_COUNT ? fp8 : 0};
            const sl_ops_t *ops = cuda_backend_init(&o, &err);
            if (!ops) sl_die("%s", err.msg);
            load->dtype_auto = false;
            load->dtype = act;
            return ops;
        }
        if (a->ea.device == ENGINE_DEVICE_CUDA) sl_die("%s", err.msg);
    }
#else
    if (a->ea.device == ENGINE_DEVICE_CUDA) sl_die("--device cuda: this build has no CUDA backend");
#endif
    return cpu_backend_init_kv(a->ea.threads, engine_cpu_kv_dtype(load, mc, a->ea.kv_cache_dtype));
}

static int perplexity(ppl_args_t *a) {
    sl_err_t err;
    model_config_t mc;
    if (config_load(a->ea.model_dir, &mc, &err)) sl_die("%s", err.msg);
    int64_t N = a->ea.max_model_len ? a->ea.max_model_len : mc.max_position_embeddings;
    if (N > mc.max_position_embeddings)
        cli_usage_error("", "argument --max-model-len: %lld is greater than max_position_embeddings (%lld) in "
                        "%s/config.json", (long long)N, (long long)mc.max_position_embeddings, a->ea.model_dir);
    int64_t S = a->stride ? a->stride : (N + 1) / 2;
    if (S > N)
        cli_usage_error("", "argument --stride: %lld is greater than the window (--max-model-len %lld)",
                        (long long)S, (long long)N);

    /* The input, before the model loads: a bad file costs no load. */
    int64_t n = 0;
    int32_t *ids = NULL;
    bool bos = false;
    if (a->tokens) {
        ids = read_token_file(a->tokens, mc.vocab_size, &n);
    } else {
        size_t len;
        char *text = sl_read_file(a->text, (size_t)1 << 30, &len, &err);
        if (!text) cli_usage_error("", "argument --text: %s", err.msg);
        tokenizer_t *tok = tok_load(a->ea.model_dir, &err);
        if (!tok) sl_die("%s", err.msg);
        int32_t k = tok_encode(tok, text, len, true, &ids, &err);
        if (k < 0) cli_usage_error("", "argument --text: %s: %s", a->text, err.msg);
        n = k;
        bos = n > 0 && ids[0] == tok_bos_id(tok);
        tok_free(tok);
        free(text);
    }
    if (n < 2)
        cli_usage_error("", "argument --%s: %s has %lld token%s%s; perplexity needs at least 2 (the first is "
                        "never scored)", a->tokens ? "tokens" : "text", a->tokens ? a->tokens : a->text,
                        (long long)n, n == 1 ? "" : "s", bos ? " (its BOS)" : "");

    int64_t n_windows = ppl_windows(n, N, S, NULL, 0);
    ppl_window_t *win = sl_malloc((size_t)n_windows * sizeof *win);
    ppl_windows(n, N, S, win, n_windows);
    int64_t win_max = win[0].end - win[0].begin; /* the first window is the longest */
    int64_t chunk = a->ea.max_num_batched_tokens_set ? a->ea.sched.max_num_batched_tokens : PPL_DEFAULT_CHUNK;
    if (chunk > win_max) chunk = win_max;

    model_load_opts_t load;
    const sl_ops_t *ops = ppl_backend(a, &mc, &load);
    int32_t B = a->ea.block_size, max_blocks = (int32_t)((win_max + B - 1) / B);
    llama_model_t m;
    model_runner_t r;
    kv_cache_t kv;
    /* max_seqs = chunk: the runner's logits rows, one per position of a chunk. */
    if (llama_init(&m, a->ea.model_dir, &load, ops, (int32_t)chunk, (int32_t)chunk, &err)) sl_die("%s", err.msg);
    if (runner_init(&r, &m, max_blocks, &err)) sl_die("%s", err.msg);
    if (kv_cache_init(&kv, &m, 1 + max_blocks, B, &err)) sl_die("%s", err.msg);
    int64_t V = m.cfg.vocab_size;
    float *logits = sl_malloc((size_t)chunk * (size_t)V * sizeof(float));
    sl_batch_t *b = &r.batch;

    fprintf(stderr, "perplexity: %s on %s: %lld tokens%s, %lld windows of up to %lld tokens, stride %lld, "
            "%lld tokens per forward; %s, %s weights, %s activations\n", a->ea.model_dir,
            a->tokens ? a->tokens : a->text, (long long)n, bos ? " (BOS first)" : "", (long long)n_windows,
            (long long)N, (long long)S, (long long)chunk, ops->name,
            dtype_name(load.dtype_auto ? mc.torch_dtype : load.dtype), dtype_name(ops->act_dtype));
    double nll = 0.0, nll2 = 0.0, compute_s = 0.0;
    int64_t scored = 0, computed = 0;
    char msg[SL_ERR_LEN];
    for (int64_t w = 0; w < n_windows; w++) {
        const int32_t *x = ids + win[w].begin;
        int64_t len = win[w].end - win[w].begin;
        int64_t first_row = len - win[w].n_scored - 1; /* the row that predicts the first scored token */
        for (int64_t c0 = 0; c0 < len; c0 += chunk) {
            int64_t c1 = c0 + chunk < len ? c0 + chunk : len;
            b->n_tokens = (int32_t)(c1 - c0);
            b->n_seqs = 1;
            b->n_logits = 0;
            for (int64_t p = c0; p < c1; p++) {
                b->token_ids[p - c0] = x[p];
                b->positions[p - c0] = (int32_t)p;
                b->slot_mapping[p - c0] = (int64_t)(1 + p / B) * B + p % B;
                /* Row p predicts token p + 1: needed when that token is scored. */
                if (p >= first_row && p + 1 < len) b->logits_index[b->n_logits++] = (int32_t)(p - c0);
            }
            b->query_start[0] = 0;
            b->query_start[1] = b->n_tokens;
            b->seq_lens[0] = (int32_t)c1;
            for (int32_t j = 0; j < max_blocks; j++) b->block_tables[j] = 1 + j;
            double t0 = sl_now_s();
            runner_forward(&r, b, &kv, logits);
            compute_s += sl_now_s() - t0;
            if (ops->last_error && ops->last_error(ops->ctx, msg, sizeof msg)) sl_die("forward failed: %s", msg);
            computed += b->n_tokens;
            for (int32_t k = 0; k < b->n_logits; k++) {
                int64_t p = c0 + b->logits_index[k];
                double e = row_nll(logits + (size_t)k * (size_t)V, V, x[p + 1]);
                nll += e;
                nll2 += e * e;
                scored++;
            }
        }
        printf("[%lld]%.4f%s", (long long)w + 1, exp(nll / (double)scored), w + 1 < n_windows ? "," : "\n");
        fflush(stdout);
    }
    SL_ASSERT(scored == n - 1 || (S == N && scored == n - n_windows));
    /* llama.cpp's uncertainty: the standard error of the mean NLL, carried through exp. */
    double mean = nll / (double)scored, ppl = exp(mean);
    double var = scored > 1 ? (nll2 / (double)scored - mean * mean) / (double)(scored - 1) : 0.0;
    printf("Final estimate: PPL = %.4f +/- %.4f\n", ppl, ppl * sqrt(var > 0 ? var : 0.0));
    printf("Perplexity: %.6f\n", ppl);
    printf("Mean NLL: %.9f nats/token\n", mean);
    printf("Scored tokens: %lld of %lld\n", (long long)scored, (long long)n);
    printf("Windows: %lld (max length %lld, stride %lld)\n", (long long)n_windows, (long long)N, (long long)S);
    printf("Tokens/s: %.1f (prefill: %lld tokens through the model in %.3f s)\n", (double)computed / compute_s,
           (long long)computed, compute_s);
    free(logits);
    free(win);
    free(ids);
    kv_cache_free(&kv, &m);
    runner_free(&r);
    llama_free(&m);
    return 0;
}

int cli_eval(int argc, char **argv) {
    if (argc < 2) cli_usage_error(eval_usage, "expected an evaluation: perplexity");
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        printf("%s%s%s%s", eval_usage, engine_usage, eval_help, engine_help);
        return 0;
    }
    if (strcmp(argv[1], "perplexity"))
        cli_usage_error(eval_usage, "argument evaluation: invalid choice: '%s' (choose from 'perplexity')", argv[1]);
    argc--, argv++;
    enum { O_TEXT = 256, O_TOKENS, O_STRIDE };
    static const struct option own[] = {
        {"text", required_argument, 0, O_TEXT},
        {"tokens", required_argument, 0, O_TOKENS},
        {"stride", required_argument, 0, O_STRIDE},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct option *opts = cli_merge_options(own);
    ppl_args_t a = {0};
    engine_config_default(&a.ea);
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (engine_args_handle(&a.ea, c, optarg)) continue;
        switch (c) {
        case O_TEXT: a.text = optarg; break;
        case O_TOKENS: a.tokens = optarg; break;
        case O_STRIDE: a.stride = cli_parse_int("--stride", optarg, 1, INT32_MAX); break;
        case 'h': printf("%s%s%s%s", eval_usage, engine_usage, eval_help, engine_help); free(opts); return 0;
        default: cli_usage_error(eval_usage, "unrecognized or incomplete argument: %s", argv[optind - 1]);
        }
    }
    free(opts);
    if (optind != argc - 1) cli_usage_error(eval_usage, "expected exactly one MODEL_DIR, got %d", argc - optind);
    if (!a.text == !a.tokens) cli_usage_error(eval_usage, "give either --text or --tokens");
    a.ea.model_dir = argv[optind];
    sl_log_to_stderr();
    cli_require_checkpoint(a.ea.model_dir);
    return perplexity(&a);
}
