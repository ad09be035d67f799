/* bench.h - the load generator behind `servelab bench serve` and `servelab bench compare`.
 *
 * A client for any OpenAI-compatible server (servelab, vLLM, llama.cpp) that measures what
 * `vllm bench serve` measures, the way it measures it (vllm-compat.md §3.2). The pieces:
 *   rng/stats  seeded generator, Gamma arrivals, numpy-style mean/std/median/percentile
 *   args       vLLM's flags and defaults, parsed without exiting (the CLI turns errors into exit 2)
 *   json       a writer with Python json.dump's spelling
 *   sse        Server-Sent Events framing (lines and blank-line dispatch)
 *   http       libcurl multi for the side calls (/v1/models, /tokenize), in batches
 *   tokenize   the served model's tokenizer, over HTTP
 *   dataset    random, prefix_repetition, long-tail and custom prompts, sized by that tokenizer
 *   run        the benchmark's streams, all on one libcurl multi handle and one thread
 *   metrics    per-request outputs -> vLLM's aggregates
 *   report     the printed table, the result JSON and its file name
 *   serve      the command: model, prompts, warm-up, run, report
 *   compare    two result files side by side, with regression gates
 * Everything but http, tokenize, dataset, run and serve is pure and unit-tested
 * (tests/unit/test_bench_serve.c); the rest is tested over HTTP (tests/bench/).
 * Times are seconds on CLOCK_MONOTONIC (what Python's perf_counter reads on Linux).
 */
#ifndef SERVELAB_BENCH_H
#define SERVELAB_BENCH_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "servelab/bench_cli.h"
#include "servelab/core.h"
#include "servelab/rng.h"

/* ---- rng + stats (stats.c) ------------------------------------------------------------- */

/* The engine's generator (rng.h: xoshiro256** seeded through splitmix64): the streams
 * differ from numpy's, the distributions do not. */
typedef sl_rng_t bench_rng_t;
int64_t bench_rng_range(bench_rng_t *r, int64_t lo, int64_t hi);   /* uniform in [lo, hi] */
double bench_rng_gamma(bench_rng_t *r, double shape, double scale); /* Marsaglia-Tsang */

/* numpy semantics: n == 0 gives 0 (vLLM calls np.mean(x or 0)). std has ddof 0.
 * `sorted` must be ascending. percentile is np.percentile's default "linear" method. */
double bench_mean(const double *x, int64_t n);
double bench_std(const double *x, int64_t n);
double bench_median(const double *sorted, int64_t n);
double bench_percentile(const double *sorted, int64_t n, double p);
void bench_sort(double *x, int64_t n);

typedef enum { BENCH_RAMP_NONE, BENCH_RAMP_LINEAR, BENCH_RAMP_EXPONENTIAL } bench_ramp_t;
typedef struct {
    double rate;       /* requests/s; INFINITY = all at t=0 */
    double burstiness; /* Gamma shape; 1 = Poisson; INFINITY = constant gaps */
    bench_ramp_t ramp;
    double ramp_start_rps, ramp_end_rps;
} bench_arrival_cfg_t;

/* vLLM's get_request(): delay_s[i] is when request i is sent, from the benchmark start.
 * Gaps ~ Gamma(shape=burstiness, scale=1/(rate*burstiness)), summed; without ramp-up
 * the sums are rescaled so the last request goes at exactly n/rate. rates[i] (may be
 * NULL) gets the rate in force for request i. */
void bench_arrivals(const bench_arrival_cfg_t *c, int64_t n, bench_rng_t *rng, double *delay_s, double *rates);

/* ---- string lists ------------------------------------------------------------------------ */

typedef struct {
    const char **v; /* borrowed from argv */
    int n;
} bench_strlist_t;

/* ---- arguments (args.c) -------------------------------------------------------------------- */

#define BENCH_MAX_PCTS 16

typedef enum { BM_TTFT, BM_TPOT, BM_ITL, BM_E2EL, BM_QUEUE, BM_E2EL_Q, BM_N } bench_metric_t;

typedef struct {
    /* server */
    const char *backend; /* "openai" | "openai-chat" */
    const char *base_url, *host, *endpoint;
    int64_t port;
    const char *model, *served_model_name, *tokenizer, *label;
    bench_strlist_t header; /* KEY=VALUE */
    bool insecure;
    /* dataset */
    const char *dataset_name, *dataset_path;
    int64_t num_prompts, seed;
    int64_t input_len, output_len; /* --input-len/--output-len (-1 = unset) */
    int64_t random_input_len, random_output_len, random_prefix_len;
    double random_range_ratio;
    int64_t prefix_rep_prefix_len, prefix_rep_suffix_len, prefix_rep_num_prefixes, prefix_rep_output_len;
    int64_t long_tail_input_len, long_tail_long_input_len, long_tail_output_len;
    double long_tail_long_fraction;
    int64_t custom_output_len;
    bool skip_chat_template, disable_shuffle, no_oversample;
    /* traffic */
    double request_rate, burstiness;
    const char *ramp_up_strategy;
    int64_t ramp_up_start_rps, ramp_up_end_rps; /* -1 = unset */
    int64_t max_concurrency;                    /* 0 = no limit */
    int64_t num_warmups;
    bool ignore_eos, disable_tqdm;
    const char *request_id_prefix;
    /* sampling: NAN / INT64_MIN = not sent */
    double temperature, top_p, min_p, frequency_penalty, presence_penalty, repetition_penalty;
    int64_t top_k;
    int64_t logprobs; /* INT64_MIN = null */
    const char *extra_body;
    /* reporting */
    const char *percentile_metrics, *metric_percentiles;
    bench_strlist_t goodput, metadata;
    bool save_result, save_detailed, append_result;
    const char *result_dir, *result_filename;
    /* derived by bench_serve_args_parse */
    bool metric_on[BM_N];
    double pcts[BENCH_MAX_PCTS];
    int n_pcts;
    double goodput_ms[3]; /* ttft, tpot, e2el; NAN = no objective */
    bool goodput_on;
    cJSON *extra; /* parsed --extra-body (object) or NULL; owned */
} bench_args_t;

/* Parses `servelab bench serve` flags (argv[0] is "serve"). Returns 0, 1 when --help was
 * asked (usage printed on stdout), or -1 with a one-line message in err (exit 2). Flags,
 * names and defaults are vLLM's; see bench_serve_usage. */
int bench_args_parse(int argc, char **argv, bench_args_t *a, sl_err_t *err);
void bench_args_free(bench_args_t *a);
extern const char bench_serve_usage[];

/* ---- JSON writer (json.c): Python json.dump's spelling (", " and ": ", floats as repr,
 * ensure_ascii), so saved results read like vLLM's. -------------------------------------- */

typedef struct {
    char *buf;
    size_t len, cap;
    int depth;
    bool after_key;
    bool need_comma[64];
} bench_json_t;
void bj_obj(bench_json_t *j);
void bj_obj_end(bench_json_t *j);
void bj_arr(bench_json_t *j);
void bj_arr_end(bench_json_t *j);
void bj_key(bench_json_t *j, const char *key);
void bj_str(bench_json_t *j, const char *s, size_t len);
void bj_int(bench_json_t *j, int64_t v);
void bj_float(bench_json_t *j, double v); /* repr(); NaN, Infinity as Python writes them */
void bj_null(bench_json_t *j);
void bj_bool(bench_json_t *j, bool v);
char *bj_take(bench_json_t *j, size_t *len); /* caller frees; the writer is reset */

/* ---- SSE framing (sse.c) -------------------------------------------------------------------- */

/* Called once per event with its data lines joined by '\n' (NUL-terminated). Returns
 * false to stop (the feed then returns -1). */
typedef bool (*bench_sse_fn)(void *user, const char *data, size_t len);
typedef struct {
    char *line;
    size_t line_len, line_cap;
    char *data;
    size_t data_len, data_cap;
    bool has_data, after_cr;
} bench_sse_t;
/* Feeds bytes as they arrive (any split). Lines end in LF, CRLF or CR; a blank line
 * dispatches; ':' lines are comments; fields other than data are ignored. Returns the
 * number of events dispatched, or -1 (a callback said stop, or a line over 64 MiB). */
int bench_sse_feed(bench_sse_t *s, const char *p, size_t n, bench_sse_fn fn, void *user);
/* End of stream: dispatches a last event that had no blank line after it. */
int bench_sse_end(bench_sse_t *s, bench_sse_fn fn, void *user);
void bench_sse_free(bench_sse_t *s);

/* ---- per-request outputs and metrics (metrics.c), the report (report.c) -------------------------- */

typedef struct {
    bool success;
    long status;        /* HTTP status; 0 when there was no response (connection failure) */
    double start_time;  /* when the request was sent */
    double queue_time;  /* waited for a --max-concurrency slot before that */
    double ttft;        /* send -> first event with non-empty choices */
    double latency;     /* send -> last event with non-empty choices (E2EL) */
    double *itl;        /* gaps between consecutive choice events */
    int64_t n_itl, cap_itl;
    int64_t prompt_len;    /* usage.prompt_tokens, else the dataset's count */
    int64_t output_tokens; /* usage.completion_tokens; 0 = not reported */
    char *text;
    size_t text_len, text_cap;
    char *error; /* NULL on success */
} bench_output_t;
void bench_output_free(bench_output_t *o);

typedef struct {
    double mean, median, std;
    double pct[BENCH_MAX_PCTS];
    bool present;
} bench_dist_t;

typedef struct {
    int64_t completed, failed, total_input, total_output;
    double request_throughput, request_goodput, output_throughput, total_token_throughput;
    double max_output_tokens_per_s;
    int64_t max_concurrent_requests;
    int64_t *output_lens; /* per request; 0 for a failed one; owned */
    bench_dist_t dist[BM_N];
} bench_metrics_t;

/* vLLM's calculate_metrics(): output tokens from usage (else 1 + number of ITLs), TPOT per
 * request (E2EL-TTFT)/(out-1) when out > 1, goodput against the objectives in a (all
 * must hold; TPOT counts as 0 for one-token outputs), peak output tokens/s over
 * one-second buckets from the first start, peak concurrency by a sweep over [start,
 * end) intervals. The queue distributions exist only with --max-concurrency (the
 * queue-inclusive E2EL only with a finite rate). */
void bench_metrics_compute(const bench_output_t *o, int64_t n, double duration_s, const bench_args_t *a,
                           bench_metrics_t *m);
void bench_metrics_free(bench_metrics_t *m);

/* What the report needs besides the metrics. */
typedef struct {
    const char *date; /* %Y%m%d-%H%M%S */
    const char *model_id, *tokenizer_id;
    double duration_s;
} bench_report_t;

/* vLLM's printout, from the header line to the closing line of '='. */
void bench_print_table(FILE *f, const bench_args_t *a, const bench_metrics_t *m, double duration_s);
/* The result JSON (vLLM's keys and order; per-request arrays when a->save_detailed). */
char *bench_result_json(const bench_args_t *a, const bench_report_t *r, const bench_metrics_t *m,
                        const bench_output_t *o, int64_t n, size_t *len);
/* vLLM's file name: {label}-{rate}qps[-concurrency{N}]-{model basename}-{date}.json, or
 * --result-filename, under --result-dir. */
void bench_result_path(const bench_args_t *a, const char *model_id, const char *date, char *out, size_t cap);

/* ---- HTTP (http.c) ------------------------------------------------------------------------------ */

typedef struct {
    struct curl_slist *headers; /* Content-Type, Authorization (OPENAI_API_KEY), --header */
    bool insecure;
} bench_http_t;

/* Builds the shared headers; returns -1 with err on a malformed --header. */
int bench_http_init(bench_http_t *h, const bench_args_t *a, sl_err_t *err);
void bench_http_free(bench_http_t *h);

typedef struct {
    char *url;  /* owned */
    char *body; /* owned; NULL = GET */
    long status;
    char *resp; /* owned, NUL-terminated */
    size_t resp_len;
    char err[256];
} bench_call_t;
/* Runs the calls concurrently, at most max_parallel at once, on one curl multi handle.
 * Each call gets its status (0 if the transfer failed, then err says why) and body. */
void bench_http_run(const bench_http_t *h, bench_call_t *calls, int64_t n, int max_parallel);
void bench_call_free(bench_call_t *c);
/* "METHOD URL: why" for a failed call, into err; returns -1. */
int bench_call_fail(const bench_call_t *c, sl_err_t *err);

/* ---- the server's tokenizer (tokenize.c) --------------------------------------------------- */

typedef struct {
    const char *base_url; /* no trailing slash */
    const char *model;    /* the name requests carry */
    const bench_http_t *http;
    bool llama_cpp;       /* /tokenize speaks llama.cpp's {"content", "add_special"} */
} bench_server_t;

/* GET /v1/models: the first model's id and root (root = id when absent). */
int bench_first_model(const bench_server_t *s, char **id, char **root, sl_err_t *err);
/* Finds which /tokenize the server has: vLLM's, else llama.cpp's (sets s->llama_cpp). A
 * shape counts only when "hello" gives at least one token id (llama.cpp answers vLLM's
 * body with an empty list). Returns -1 with the vLLM-shape call's error when neither does. */
int bench_probe_tokenizer(bench_server_t *s, sl_err_t *err);
/* POST /tokenize for each text; ids (may be NULL) gets the tokens (ids[i] for the caller
 * to free), counts[i] their number. bench_tokenize_chat does the same for conversations,
 * rendered by the server's chat template with the generation prompt (vLLM's only). */
int bench_tokenize(const bench_server_t *s, char *const *texts, int64_t n, bool add_special, int32_t **ids,
                   int64_t *counts, sl_err_t *err);
int bench_tokenize_chat(const bench_server_t *s, const cJSON *const *messages, int64_t n, int32_t **ids,
                        int64_t *counts, sl_err_t *err);
/* POST /detokenize for each id list; texts[i] owned by the caller. */
int bench_detokenize(const bench_server_t *s, int32_t *const *ids, const int64_t *counts, int64_t n, char **texts,
                     sl_err_t *err);

/* ---- datasets (dataset.c) --------------------------------------------------------------------- */

typedef struct {
    char *prompt;         /* text prompt (completions) / user message text (chat), or NULL */
    int32_t *ids;         /* token-id prompt (completions; custom data through the chat template) */
    int64_t n_ids;
    cJSON *messages;      /* chat conversation from a custom file; NULL = one user message */
    int64_t prompt_len;   /* tokens as the server will count them (best knowledge) */
    int64_t output_len;   /* max_tokens */
} bench_sample_t;

int bench_dataset_build(const bench_args_t *a, const bench_server_t *s, bench_sample_t **out, int64_t *n,
                        sl_err_t *err);
void bench_samples_free(bench_sample_t *v, int64_t n);
/* The request body for one sample (vLLM's payload, then --extra-body merged on top). */
char *bench_payload(const bench_args_t *a, const char *model, const bench_sample_t *s);

/* ---- the streaming run (run.c) ------------------------------------------------------------------ */

typedef struct {
    const char *api_url;
    bool chat;
    const bench_http_t *http;
    const char *request_id_prefix; /* x-request-id = prefix + index; NULL: none */
    int64_t max_concurrency;       /* 0 = none */
    bool progress;                 /* a bar on stderr */
    void *multi;                   /* a CURLM* kept across runs (warm-up, then the benchmark) so
                                      its connection pool is reused, as vLLM's aiohttp session
                                      is; NULL: one of its own */
} bench_run_cfg_t;

/* Sends payloads[i] at start + delay_s[i] (no later than a concurrency slot allows), all
 * streams driven by one curl multi handle on this thread. Fills outs[i]; returns the
 * seconds from the start to the last completion. */
double bench_run(const bench_run_cfg_t *c, char *const *payloads, int64_t n, const double *delay_s,
                 bench_output_t *outs);

/* ---- compare gates (compare.c; the commands are in bench_cli.h) ------------------------------------ */

typedef struct {
    char name[96]; /* as given */
    char key[96];  /* the result-JSON key it means */
    bool increase;    /* "+": bounds an increase; "-": bounds a decrease */
    double limit_pct; /* how much of it is allowed, in percent of the base value (>= 0) */
} bench_gate_t;
/* "ttft_p99=+10%" -> key p99_ttft_ms, +10. Accepted names: any result key (p99_ttft_ms,
 * output_throughput, ...), METRIC_STAT and STAT_METRIC for METRIC in ttft, tpot, itl, e2el
 * and STAT in mean, median, std, pNN (ttft_p99, p99_ttft, itl_mean), and the short names
 * throughput (output_throughput), total_throughput, request_throughput, goodput. */
int bench_gate_parse(const char *spec, bench_gate_t *g, sl_err_t *err);
/* True when `now` is within the gate relative to `base`. */
bool bench_gate_ok(const bench_gate_t *g, double base, double now);

#endif
