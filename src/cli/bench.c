/* bench.c - offline benchmarks. They print figures; they assert nothing.
 *
 *   servelab bench decode MODEL_DIR [--threads 1,2] [-tp 1,2] [--input-len 32] [--output-len 128]
 *     batch-1 decode tokens/s, the weight bytes read per second, and that as a
 *     fraction of the machine's read bandwidth measured in the same run with
 *     the same threads (best of 5 passes over 1 GiB, an AVX2 sum where the CPU
 *     has it). Decoding one token reads every weight once (of the embedding
 *     table, one row), on every rank its shard. With -tp, each size in turn
 *     (its ranks share the threads), and the share of the step time rank 0
 *     spent in all-reduces.
 *   servelab bench throughput MODEL_DIR [--num-prompts 64] [--input-len 128] [--output-len 128]
 *       [--random-range-ratio 0] [--prefix-len 0] [--compare batching|prefix-caching] [-tp 1,2] [engine flags]
 *     like `vllm bench throughput` (--threads takes one number here; -tp a
 *     list, run in turn, each with its all-reduce share): every
 *     prompt submitted at once, random token prompts (lengths uniform in
 *     [len*(1-r), len*(1+r)]), a shared prefix of
 *     --prefix-len tokens; prints vLLM's "Throughput: ..." line. --compare runs
 *     the same prompts twice (continuous vs static batching, or prefix caching
 *     on vs off) and prints the ratio.
 *   servelab bench peak [--threads 1,2]
 *     the machine's arithmetic peak, measured: GFLOP/s of fp32 FMAs (AVX-512,
 *     else AVX2 + FMA, else plain C) and of bf16 dot products (vdpbf16ps, two
 *     products per fp32 lane) where the CPU has them, on each thread count;
 *     the ceiling the prefill GFLOP/s of tools/compare-llamacpp are read
 *     against.
 *   servelab bench scheduler [--running 256,1024] [--steps 200]
 *     host time of one scheduler step plus building its flat batch, with N
 *     requests decoding (no model): the per-step overhead the engine adds.
 *   servelab bench serve [--base-url URL] [vLLM's flags]   (src/bench/serve.c)
 *     the load generator: `vllm bench serve` against any OpenAI-compatible server.
 *   servelab bench compare BASE.json NEW.json [--gate NAME=+P% ...]   (src/bench/compare.c)
 */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "servelab/bench_cli.h"
#include "engine_args.h"
#include "servelab/model_runner.h"
#include "servelab/parallel.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_AVX2_PROBE 1
#endif

static const char *bench_usage =
    "usage: servelab bench decode MODEL_DIR [--threads 1,2] [-tp 1,2] [--input-len N] [--output-len N] [engine flags]\n"
    "       servelab bench throughput MODEL_DIR [--num-prompts N] [--input-len N] [--output-len N]\n"
    "                [--random-range-ratio R] [--prefix-len N] [--compare batching|prefix-caching] [-tp 1,2]\n"
    "                [engine flags]\n"
    "       servelab bench peak [--threads 1,2]\n"
    "       servelab bench scheduler [--running 256,1024] [--steps N]\n"
    "       servelab bench serve [--base-url URL | --host H --port P] [flags]   (--help for all)\n"
    "       servelab bench compare BASE.json NEW.json [--gate NAME=+P%|NAME=-P% ...]\n";

enum { O_THREADS = 256, O_IN, O_OUT, O_NUM, O_RATIO, O_PREFIX, O_COMPARE, O_RUNNING, O_STEPS, O_TP };
static const struct option bench_options[] = {
    {"threads-list", required_argument, 0, O_THREADS}, {"input-len", required_argument, 0, O_IN},
    {"output-len", required_argument, 0, O_OUT},       {"num-prompts", required_argument, 0, O_NUM},
    {"random-range-ratio", required_argument, 0, O_RATIO}, {"prefix-len", required_argument, 0, O_PREFIX},
    {"compare", required_argument, 0, O_COMPARE},      {"running", required_argument, 0, O_RUNNING},
    {"steps", required_argument, 0, O_STEPS},          {"help", no_argument, 0, 'h'},
    {0, 0, 0, 0},
};

typedef struct {
    engine_config_t ea;
    char threads[128];                  /* decode: a list; throughput: one number */
    bool threads_set;
    char running[128];
    char tp[64];                        /* decode, throughput: tensor-parallel sizes, a list */
    long long input_len, output_len, num_prompts, prefix_len, steps;
    double range_ratio;
    const char *compare;
} bench_args_t;

/* `bench --help` and `bench decode|throughput|scheduler --help`: usage on stdout. */
static void print_help(void) { printf("%s%s", bench_usage, engine_usage); }

static void parse(int argc, char **argv, bench_args_t *a, bool need_model) {
    struct option *opts = cli_merge_options(bench_options);
    /* --threads and --tensor-parallel-size (-tp) take lists here; route them to our own options. */
    for (struct option *o = opts; o->name; o++) {
        if (!strcmp(o->name, "threads")) o->val = O_THREADS;
        if (!strcmp(o->name, "tensor-parallel-size")) o->val = O_TP;
    }
    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (engine_args_handle(&a->ea, c, optarg)) continue;
        switch (c) {
        case O_THREADS:
            snprintf(a->threads, sizeof a->threads, "%s", optarg);
            a->threads_set = true;
            break;
        case O_IN: a->input_len = cli_parse_int("--input-len", optarg, 1, 1 << 20); break;
        case O_OUT: a->output_len = cli_parse_int("--output-len", optarg, 1, 1 << 20); break;
        case O_NUM: a->num_prompts = cli_parse_int("--num-prompts", optarg, 1, 1 << 20); break;
        case O_RATIO: a->range_ratio = cli_parse_double("--random-range-ratio", optarg, 0.0, 1.0); break;
        case O_PREFIX: a->prefix_len = cli_parse_int("--prefix-len", optarg, 0, 1 << 20); break;
        case O_COMPARE:
            if (strcmp(optarg, "batching") && strcmp(optarg, "prefix-caching"))
                cli_usage_error(bench_usage, "argument --compare: invalid choice: '%s'", optarg);
            a->compare = optarg;
            break;
        case O_RUNNING: snprintf(a->running, sizeof a->running, "%s", optarg); break;
        case O_STEPS: a->steps = cli_parse_int("--steps", optarg, 1, 1 << 20); break;
        case O_TP: snprintf(a->tp, sizeof a->tp, "%s", optarg); break;
        case 'h': print_help(); free(opts); exit(0);
        default: cli_usage_error(bench_usage, "unrecognized argument: %s", argv[optind - 1]);
        }
    }
    free(opts);
    if (need_model) {
        if (optind != argc - 1) cli_usage_error(bench_usage, "expected exactly one MODEL_DIR");
        a->ea.model_dir = argv[optind];
    } else if (optind != argc) {
        cli_usage_error(bench_usage, "unexpected argument: %s", argv[optind]);
    }
}

/* ---- decode ------------------------------------------------------------------- */

/* The read bandwidth probe: sum every float of a buffer far larger than the
 * last-level cache. Eight independent vector accumulators, so the adds'
 * latency never holds back the loads: one accumulator (what an `omp simd`
 * reduction compiled for baseline x86-64 gives) read ~40% below what one core
 * of this machine pulls and inflated the printed fraction. */
#define BW_BLOCK 4096 /* floats per item: a multiple of the unrolled 64 */

#ifdef HAVE_AVX2_PROBE
__attribute__((target("avx2"))) static float sum_avx2(const float *p, size_t n) {
    __m256 a[8];
    for (int j = 0; j < 8; j++) a[j] = _mm256_setzero_ps();
    for (size_t i = 0; i < n; i += 64)
        for (int j = 0; j < 8; j++) a[j] = _mm256_add_ps(a[j], _mm256_load_ps(p + i + 8 * j));
    for (int j = 1; j < 8; j++) a[0] = _mm256_add_ps(a[0], a[j]);
    float o[8], total = 0.0f;
    _mm256_storeu_ps(o, a[0]);
    for (int j = 0; j < 8; j++) total += o[j];
    return total;
}
#endif

static float sum_portable(const float *p, size_t n) {
    float a[16] = {0}, total = 0.0f;
    for (size_t i = 0; i < n; i += 16)
        for (int j = 0; j < 16; j++) a[j] += p[i + j];
    for (int j = 0; j < 16; j++) total += a[j];
    return total;
}

typedef struct {
    float *buf;
    float *partial; /* (n_threads) one per worker */
    bool avx2;
} bw_args_t;

static void bw_fill(void *arg, int64_t b0, int64_t b1, int worker) {
    (void)worker;
    bw_args_t *a = arg;
    for (size_t i = (size_t)b0 * BW_BLOCK; i < (size_t)b1 * BW_BLOCK; i++) a->buf[i] = (float)(i & 1023) * 1e-3f;
}

static void bw_sum(void *arg, int64_t b0, int64_t b1, int worker) {
    bw_args_t *a = arg;
    const float *p = a->buf + (size_t)b0 * BW_BLOCK;
    size_t n = (size_t)(b1 - b0) * BW_BLOCK;
#ifdef HAVE_AVX2_PROBE
    if (a->avx2) {
        a->partial[worker] += sum_avx2(p, n);
        return;
    }
#endif
    a->partial[worker] += sum_portable(p, n);
}

/* GB/s read by n_threads threads of the pool, best of 5 passes over n_bytes. */
static double measure_read_bandwidth(size_t n_bytes, int n_threads) {
    int64_t n_blocks = (int64_t)(n_bytes / (BW_BLOCK * sizeof(float)));
    bw_args_t a = {.partial = sl_calloc((size_t)parallel_n_threads(), sizeof(float))};
#ifdef HAVE_AVX2_PROBE
    a.avx2 = __builtin_cpu_supports("avx2");
#endif
    if (posix_memalign((void **)&a.buf, 64, (size_t)n_blocks * BW_BLOCK * sizeof(float)) != 0)
        sl_die("cannot allocate %zu bytes for the bandwidth probe", n_bytes);
    parallel_for(n_blocks, n_threads, bw_fill, &a);
    double best = 0.0;
    volatile float sink = 0.0f;
    for (int pass = 0; pass < 5; pass++) {
        double t0 = sl_now_s();
        parallel_for(n_blocks, n_threads, bw_sum, &a);
        double gbs = (double)n_blocks * BW_BLOCK * sizeof(float) / (sl_now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    for (int i = 0; i < parallel_n_threads(); i++) sink += a.partial[i];
    (void)sink;
    free(a.buf);
    free(a.partial);
    return best;
}

/* ---- peak ------------------------------------------------------------------- */

/* Arithmetic peak: PEAK_ACC independent accumulators (more than FMA latency x
 * issue width on current x86), each updated PEAK_ITERS times in registers; a
 * thread's GFLOP/s is 2 x the multiply-adds over its time. The pool runs one
 * such loop per thread, so the figure for n threads is what n cores give
 * together (clocks drop when more cores are busy). */
#define PEAK_ACC 12
#define PEAK_ITERS 20000000

#ifdef HAVE_AVX2_PROBE
__attribute__((target("avx512f,fma"))) static float peak_avx512(void) {
    __m512 a[PEAK_ACC], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-6f);
    for (int j = 0; j < PEAK_ACC; j++) a[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < PEAK_ITERS; i++)
        for (int j = 0; j < PEAK_ACC; j++) a[j] = _mm512_fmadd_ps(a[j], m, c);
    for (int j = 1; j < PEAK_ACC; j++) a[0] = _mm512_add_ps(a[0], a[j]);
    return _mm512_reduce_add_ps(a[0]);
}
__attribute__((target("avx2,fma"))) static float peak_avx2(void) {
    __m256 a[PEAK_ACC], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-6f);
    for (int j = 0; j < PEAK_ACC; j++) a[j] = _mm256_set1_ps((float)j);
    for (long i = 0; i < PEAK_ITERS; i++)
        for (int j = 0; j < PEAK_ACC; j++) a[j] = _mm256_fmadd_ps(a[j], m, c);
    float o[8], t = 0.0f;
    for (int j = 1; j < PEAK_ACC; j++) a[0] = _mm256_add_ps(a[0], a[j]);
    _mm256_storeu_ps(o, a[0]);
    for (int j = 0; j < 8; j++) t += o[j];
    return t;
}
__attribute__((target("avx512f,avx512bf16"))) static float peak_bf16(void) {
    __m512 a[PEAK_ACC];
    __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3a803a80);
    for (int j = 0; j < PEAK_ACC; j++) a[j] = _mm512_set1_ps((float)j);
    for (long i = 0; i < PEAK_ITERS; i++)
        for (int j = 0; j < PEAK_ACC; j++) a[j] = _mm512_dpbf16_ps(a[j], x, y);
    for (int j = 1; j < PEAK_ACC; j++) a[0] = _mm512_add_ps(a[0], a[j]);
    return _mm512_reduce_add_ps(a[0]);
}
#endif

static float peak_portable(void) {
    float a[PEAK_ACC * 8];
    for (int j = 0; j < PEAK_ACC * 8; j++) a[j] = (float)j;
    for (long i = 0; i < PEAK_ITERS / 8; i++)
        for (int j = 0; j < PEAK_ACC * 8; j++) a[j] = a[j] * 0.999999f + 1e-6f;
    float t = 0.0f;
    for (int j = 0; j < PEAK_ACC * 8; j++) t += a[j];
    return t;
}

typedef enum { PEAK_FP32, PEAK_BF16 } peak_kind_t;
typedef struct {
    peak_kind_t kind;
    double flops;   /* per thread, set by the loop that ran */
    float sink[256];
} peak_args_t;

static void peak_run(void *arg, int64_t i0, int64_t i1, int worker) {
    peak_args_t *a = arg;
    for (int64_t i = i0; i < i1; i++) {
#ifdef HAVE_AVX2_PROBE
        if (a->kind == PEAK_BF16) {
            a->sink[worker & 255] += peak_bf16();
            a->flops = 2.0 * 32 * PEAK_ACC * (double)PEAK_ITERS;
            continue;
        }
        if (__builtin_cpu_supports("avx512f")) {
            a->sink[worker & 255] += peak_avx512();
            a->flops = 2.0 * 16 * PEAK_ACC * (double)PEAK_ITERS;
            continue;
        }
        if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
            a->sink[worker & 255] += peak_avx2();
            a->flops = 2.0 * 8 * PEAK_ACC * (double)PEAK_ITERS;
            continue;
        }
#endif
        a->sink[worker & 255] += peak_portable();
        a->flops = 2.0 * PEAK_ACC * 8 * (double)(PEAK_ITERS / 8);
    }
}

/* GFLOP/s of n_threads threads, each running one loop; best of 3. */
static double measure_peak(peak_kind_t kind, int n_threads) {
    peak_args_t a = {.kind = kind};
    double best = 0.0;
    for (int pass = 0; pass < 3; pass++) {
        double t0 = sl_now_s();
        parallel_for(n_threads, n_threads, peak_run, &a);
        double gf = a.flops * n_threads / (sl_now_s() - t0) / 1e9;
        if (gf > best) best = gf;
    }
    volatile float sink = 0.0f;
    for (int i = 0; i < 256; i++) sink += a.sink[i];
    (void)sink;
    return best;
}

static int bench_peak(bench_args_t *a) {
    bool bf16 = false;
#ifdef HAVE_AVX2_PROBE
    __builtin_cpu_init();
    bf16 = __builtin_cpu_supports("avx512bf16");
#endif
    printf("%-8s %-18s %-18s\n", "threads", "fp32 FMA GFLOP/s", "bf16 dot GFLOP/s");
    char *save = NULL;
    for (char *t = strtok_r(a->threads, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int n = (int)cli_parse_int("--threads", t, 1, 4096);
        parallel_set_threads(n);
        double f = measure_peak(PEAK_FP32, n);
        if (bf16) printf("%-8d %-18.1f %-18.1f\n", n, f, measure_peak(PEAK_BF16, n));
        else printf("%-8d %-18.1f %-18s\n", n, f, "-");
        fflush(stdout);
    }
    return 0;
}

static int32_t *random_prompt(int64_t n, int64_t V, uint64_t *state) {
    int32_t *p = sl_malloc((size_t)n * sizeof *p);
    for (int64_t i = 0; i < n; i++) {
        *state = *state * 6364136223846793005ull + 1442695040888963407ull;
        p[i] = (int32_t)(3 + (*state >> 33) % (uint64_t)(V - 3));
    }
    return p;
}

/* One decode row: batch-1 greedy decode of output_len tokens at a->ea's
 * threads and tensor-parallel size. */
static void decode_row(bench_args_t *a, bool first) {
    /* Before the engine: with several ranks its threads are shared out over
     * pools, at least one per rank (llama.c), so N ranks run on at least N. */
    int tp0 = a->ea.load.tensor_parallel_size > 1 ? a->ea.load.tensor_parallel_size : 1;
    int used = a->ea.threads / tp0 > 1 ? a->ea.threads / tp0 * tp0 : tp0;
    parallel_set_threads(used);
    double bw = measure_read_bandwidth((size_t)1 << 30, used);
    engine_t *engine = cli_engine_create(&a->ea);
    engine_start(engine);
    const llama_model_t *m = engine_model(engine);
    const model_config_t *cfg = &m->cfg;
    int tp = m->shard.size;
    /* Every rank reads its shard; of each rank's embedding rows, one row. */
    double embed_bytes = cfg->tie_word_embeddings ? 0.0
                         : (double)(cfg->vocab_size * cfg->hidden_size) * (double)dtype_size(m->w.embed.dtype);
    double step_bytes = (double)llama_weight_bytes(m) - embed_bytes;
    uint64_t rs = 1;
    int32_t *prompt = random_prompt(a->input_len, cfg->vocab_size, &rs);
    sampling_params_t p;
    sampling_params_default(&p);
    p.temperature = 0.0f;
    p.ignore_eos = true;
    p.max_tokens = (int32_t)a->output_len;
    sl_err_t err;
    engine_stats_t s0, s1;
    engine_get_stats(engine, &s0);
    engine_stream_t *st = engine_submit(engine, prompt, (int32_t)a->input_len, &p, &err);
    if (!st) sl_die("%s", err.msg);
    /* Timed by the engine's posting times, not by when this thread reads the
     * events: with every core busy (-tp N on N cores) the reader may only run
     * once the engine has finished. The first token comes from the prefill. */
    double t_first = 0, t_last = 0;
    int32_t n = 0;
    for (engine_output_t *o; (o = engine_stream_next(st)); engine_output_free(o)) {
        if (!o->n_new) continue;
        t_last = o->t_posted;
        if (n++ == 0) t_first = t_last;
    }
    engine_stream_release(engine, st);
    engine_get_stats(engine, &s1);
    double tok_s = t_last > t_first ? (double)(n - 1) / (t_last - t_first) : 0.0;
    double gbs = tok_s * step_bytes / 1e9;
    double fwd = s1.forward_s_total - s0.forward_s_total, ar = s1.allreduce_s_total - s0.allreduce_s_total;
    if (first)
        fprintf(stderr, "model: %s (%lld parameters, %.1f MB of weights read per decode step)\n",
                a->ea.model_dir, (long long)m->w.n_params, step_bytes / 1e6);
    printf("%-4d %-8d %-12.1f %-14.2f %-16.2f %-10.2f %-10.1f\n", tp, used, tok_s, gbs, bw, gbs / bw,
           fwd > 0 ? 100.0 * ar / fwd : 0.0);
    fflush(stdout);
    sampling_params_free(&p);
    free(prompt);
    engine_stop(engine);
    engine_free(engine);
}

static int bench_decode(bench_args_t *a) {
    a->ea.sched.max_num_seqs = 1;
    a->ea.max_model_len = a->input_len + a->output_len + 1;
    a->ea.load.progress = false;
    printf("%-4s %-8s %-12s %-14s %-16s %-10s %-10s\n", "tp", "threads", "decode tok/s", "weights GB/s",
           "memory read GB/s", "fraction", "all-reduce %");
    if (!a->tp[0]) snprintf(a->tp, sizeof a->tp, "%d", a->ea.load.tensor_parallel_size > 1 ? a->ea.load.tensor_parallel_size : 1);
    bool first = true;
    char *save_tp = NULL;
    for (char *tp = strtok_r(a->tp, ",", &save_tp); tp; tp = strtok_r(NULL, ",", &save_tp)) {
        a->ea.load.tensor_parallel_size = (int)cli_parse_int("--tensor-parallel-size", tp, 1, 256);
        char threads[sizeof a->threads];
        snprintf(threads, sizeof threads, "%s", a->threads);
        char *save = NULL;
        for (char *t = strtok_r(threads, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
            a->ea.threads = (int)cli_parse_int("--threads", t, 1, 4096);
            decode_row(a, first);
            first = false;
        }
    }
    return 0;
}

/* ---- throughput ---------------------------------------------------------------- */

typedef struct {
    double seconds;
    int64_t prompt_tokens, output_tokens;
    engine_stats_t stats;
} tp_result_t;

static tp_result_t run_throughput(engine_config_t ea, int32_t **prompts, const int32_t *in_lens,
                                  const int32_t *out_lens, int64_t n) {
    engine_t *engine = cli_engine_create(&ea);
    engine_stream_t **st = sl_malloc((size_t)n * sizeof *st);
    tp_result_t r = {0};
    sl_err_t err;
    double t0 = sl_now_s();
    for (int64_t i = 0; i < n; i++) {
        sampling_params_t p;
        sampling_params_default(&p);
        p.ignore_eos = true;
        p.temperature = 1.0f;
        p.max_tokens = out_lens[i];
        if (!(st[i] = engine_submit(engine, prompts[i], in_lens[i], &p, &err))) sl_die("%s", err.msg);
        sampling_params_free(&p);
        r.prompt_tokens += in_lens[i];
    }
    while (engine_step(engine)) {}
    r.seconds = sl_now_s() - t0;
    for (int64_t i = 0; i < n; i++) {
        for (engine_output_t *o; (o = engine_stream_next(st[i])); engine_output_free(o)) r.output_tokens += o->n_new;
        engine_stream_release(engine, st[i]);
    }
    engine_get_stats(engine, &r.stats);
    free(st);
    engine_free(engine);
    return r;
}

static void print_throughput(const char *label, const tp_result_t *r, int64_t n) {
    printf("%s\n", label);
    printf("Throughput: %.2f requests/s, %.2f total tokens/s, %.2f output tokens/s\n",
           (double)n / r->seconds, (double)(r->prompt_tokens + r->output_tokens) / r->seconds,
           (double)r->output_tokens / r->seconds);
    printf("Total num prompt tokens:  %lld\nTotal num output tokens:  %lld\n", (long long)r->prompt_tokens,
           (long long)r->output_tokens);
    printf("Engine steps: %lld, preemptions: %lld, prefix cache hit rate: %.1f%%\n", (long long)r->stats.n_steps,
           (long long)r->stats.n_preemptions,
           r->stats.prefix_queries ? 100.0 * (double)r->stats.prefix_hits / (double)r->stats.prefix_queries : 0.0);
    printf("Step time in the model runner: %.2f s, of which tensor-parallel all-reduce: %.2f s (%.1f%%)\n",
           r->stats.forward_s_total, r->stats.allreduce_s_total,
           r->stats.forward_s_total > 0 ? 100.0 * r->stats.allreduce_s_total / r->stats.forward_s_total : 0.0);
    fflush(stdout);
}

static int bench_throughput(bench_args_t *a) {
    model_config_t cfg;
    sl_err_t err;
    if (config_load(a->ea.model_dir, &cfg, &err)) sl_die("%s", err.msg);
    int64_t n = a->num_prompts;
    int32_t **prompts = sl_malloc((size_t)n * sizeof *prompts);
    int32_t *in_lens = sl_malloc((size_t)n * sizeof *in_lens), *out_lens = sl_malloc((size_t)n * sizeof *out_lens);
    uint64_t rs = 42;
    int32_t *prefix = random_prompt(a->prefix_len ? a->prefix_len : 1, cfg.vocab_size, &rs);
    for (int64_t i = 0; i < n; i++) {
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        double u1 = (double)(rs >> 11) * 0x1.0p-53;
        rs = rs * 6364136223846793005ull + 1442695040888963407ull;
        double u2 = (double)(rs >> 11) * 0x1.0p-53;
        double r = a->range_ratio;
        int32_t in = (int32_t)((double)a->input_len * (1.0 - r + 2.0 * r * u1));
        int32_t out = (int32_t)((double)a->output_len * (1.0 - r + 2.0 * r * u2));
        in_lens[i] = (int32_t)a->prefix_len + (in > 1 ? in : 1);
        out_lens[i] = out > 1 ? out : 1;
        int32_t *body = random_prompt(in_lens[i], cfg.vocab_size, &rs);
        memcpy(body, prefix, (size_t)a->prefix_len * sizeof *body);
        prompts[i] = body;
    }
    int64_t longest = 0;
    for (int64_t i = 0; i < n; i++)
        if (in_lens[i] + out_lens[i] > longest) longest = in_lens[i] + out_lens[i];
    if (a->ea.max_model_len == 0 && longest + 1 > cfg.max_position_embeddings)
        sl_die("prompts of up to %lld tokens do not fit max_position_embeddings (%lld)", (long long)longest,
               (long long)cfg.max_position_embeddings);
    printf("%lld prompts: input %lld tokens (range ratio %.2f, shared prefix %lld), output %lld tokens; CPU threads: %d\n",
           (long long)n, a->input_len, a->range_ratio, a->prefix_len, a->output_len,
           a->ea.threads > 0 ? a->ea.threads : parallel_n_threads());

    if (!a->tp[0]) snprintf(a->tp, sizeof a->tp, "%d", a->ea.load.tensor_parallel_size > 1 ? a->ea.load.tensor_parallel_size : 1);
    char *save_tp = NULL;
    for (char *tp = strtok_r(a->tp, ",", &save_tp); tp; tp = strtok_r(NULL, ",", &save_tp)) {
        a->ea.load.tensor_parallel_size = (int)cli_parse_int("--tensor-parallel-size", tp, 1, 256);
        printf("Tensor parallel size: %d\n", a->ea.load.tensor_parallel_size);
        if (!a->compare) {
            tp_result_t r = run_throughput(a->ea, prompts, in_lens, out_lens, n);
            print_throughput(a->ea.sched.static_batching ? "static batching" : "continuous batching", &r, n);
        } else {
            engine_config_t x = a->ea, y = a->ea;
            const char *lx, *ly;
            if (!strcmp(a->compare, "batching")) {
                x.sched.static_batching = false, lx = "continuous batching";
                y.sched.static_batching = true, ly = "static batching";
            } else {
                x.enable_prefix_caching = true, lx = "prefix caching on";
                y.enable_prefix_caching = false, ly = "prefix caching off";
            }
            tp_result_t rx = run_throughput(x, prompts, in_lens, out_lens, n);
            print_throughput(lx, &rx, n);
            tp_result_t ry = run_throughput(y, prompts, in_lens, out_lens, n);
            print_throughput(ly, &ry, n);
            printf("%s / %s: %.2fx output tokens/s, %.2fx total tokens/s\n", lx, ly,
                   ((double)rx.output_tokens / rx.seconds) / ((double)ry.output_tokens / ry.seconds),
                   ((double)(rx.prompt_tokens + rx.output_tokens) / rx.seconds) /
                       ((double)(ry.prompt_tokens + ry.output_tokens) / ry.seconds));
        }
    }
    for (int64_t i = 0; i < n; i++) free(prompts[i]);
    free(prompts), free(in_lens), free(out_lens), free(prefix);
    return 0;
}

/* ---- scheduler ------------------------------------------------------------------ */

static int bench_scheduler(bench_args_t *a) {
    printf("%-10s %-16s %-16s\n", "running", "us per step", "us per request");
    char *save = NULL;
    for (char *t = strtok_r(a->running, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        int32_t n = (int32_t)cli_parse_int("--running", t, 1, 1 << 20), B = 16, prompt = 100;
        int32_t steps = (int32_t)a->steps, max_len = prompt + steps + 1;
        int32_t blocks = n * ((max_len + B - 1) / B) + 1;
        kv_pool_t pool;
        kv_pool_init(&pool, blocks, B, true, KV_HASH_SHA256);
        scheduler_t s;
        sched_config_t sc = {.max_num_batched_tokens = n * prompt, .max_num_seqs = n, .max_model_len = max_len,
                             .enable_chunked_prefill = true};
        sched_init(&s, &sc, &pool);
        sl_batch_t batch;
        batch_init(&batch, sc.max_num_batched_tokens, n, (max_len + B - 1) / B);
        request_t *reqs = sl_calloc((size_t)n, sizeof *reqs);
        uint64_t rs = 7;
        for (int32_t i = 0; i < n; i++) {
            reqs[i].tokens = random_prompt(prompt, 30000, &rs);
            reqs[i].cap = reqs[i].n_prompt = reqs[i].n_tokens = prompt;
            sched_add(&s, &reqs[i]);
        }
        double total = 0;
        for (int32_t k = 0; k < steps + 1; k++) {
            double t0 = sl_now_s();
            const sched_output_t *so = sched_step(&s, t0);
            runner_prepare(&batch, so, B);
            double dt = sl_now_s() - t0;
            if (k > 0) total += dt; /* step 0 is the prefill admission */
            for (int32_t i = 0; i < so->n; i++) { /* what the model + sampler would do */
                so->reqs[i]->n_computed += so->n_new[i];
                request_append(so->reqs[i], 5);
            }
        }
        printf("%-10d %-16.1f %-16.3f\n", n, total / steps * 1e6, total / steps * 1e6 / n);
        for (int32_t i = 0; i < n; i++) {
            free(reqs[i].tokens);
            kv_seq_blocks_free(&reqs[i].blocks);
        }
        free(reqs);
        batch_free(&batch);
        sched_free(&s);
        kv_pool_free(&pool);
    }
    return 0;
}

int cli_bench(int argc, char **argv) {
    if (argc < 2) cli_usage_error(bench_usage, "expected a benchmark: decode, throughput, peak, scheduler, serve or compare");
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
        print_help();
        return 0;
    }
    /* The load generator and the comparison take no engine flags. */
    if (!strcmp(argv[1], "serve")) return bench_serve_main(argc - 1, argv + 1);
    if (!strcmp(argv[1], "compare")) return bench_compare_main(argc - 1, argv + 1);
    bench_args_t a = {.input_len = 0, .output_len = 0, .num_prompts = 64, .steps = 200};
    engine_config_default(&a.ea);
    snprintf(a.threads, sizeof a.threads, "1,2");
    snprintf(a.running, sizeof a.running, "256,1024");
    const char *what = argv[1];
    sl_log_to_stderr();
    if (!strcmp(what, "decode")) {
        a.input_len = 32, a.output_len = 128;
        parse(argc - 1, argv + 1, &a, true);
        return bench_decode(&a);
    }
    if (!strcmp(what, "throughput")) {
        a.input_len = 128, a.output_len = 128;
        parse(argc - 1, argv + 1, &a, true);
        if (a.threads_set) a.ea.threads = (int)cli_parse_int("--threads", a.threads, 1, 4096);
        return bench_throughput(&a);
    }
    if (!strcmp(what, "peak")) {
        parse(argc - 1, argv + 1, &a, false);
        return bench_peak(&a);
    }
    if (!strcmp(what, "scheduler")) {
        parse(argc - 1, argv + 1, &a, false);
        return bench_scheduler(&a);
    }
    cli_usage_error(bench_usage, "argument benchmark: invalid choice: '%s' (choose from 'decode', "
                    "'throughput', 'peak', 'scheduler', 'serve', 'compare')", what);
}
