/* serve.c - `servelab bench serve`: vLLM's `vllm bench serve`, in C, on libcurl.
 *
 * The order of vLLM's benchmark(): resolve the model (GET /v1/models when --model is not
 * given: its id goes in requests, its root is the reported model_id), build the prompts
 * through the server's tokenizer, send --num-warmups copies of the first prompt, then the
 * run at the configured arrival rate; print the failures (the first 10) and the result
 * table on stdout, and save the JSON with --save-result / --append-result. As in vLLM
 * the random (and here long-tail) datasets set ignore_eos so outputs run to their
 * requested length, and no temperature is sent unless --temperature is given. There is
 * no "initial test run" (vLLM's newest skips it by default too). The dataset and the
 * arrivals draw from separate generators seeded by --seed. Progress and log lines go to
 * stderr; a runtime failure (server unreachable, bad dataset file) is one line and exit
 * 1, bad flags exit 2. Failed requests do not change the exit status, as in vLLM.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench.h"

static void mkdirs(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1;; p++) {
        char c = *p;
        if (c == '/' || c == 0) {
            *p = 0;
            if (mkdir(path, 0777) && errno != EEXIST) sl_die("cannot create %s: %s", path, strerror(errno));
            *p = c;
        }
        if (!c) break;
    }
}

static void save(const bench_args_t *a, const char *path, const char *json, size_t len) {
    bool append = a->append_result;
    struct stat st;
    bool nonempty = append && stat(path, &st) == 0 && st.st_size > 0;
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f) sl_die("cannot write %s: %s", path, strerror(errno));
    if (nonempty) fputc('\n', f);
    if (fwrite(json, 1, len, f) != len || fclose(f)) sl_die("cannot write %s: %s", path, strerror(errno));
}

/* Outputs the server sent no usage for: count their text with its tokenizer. */
static void count_unreported(const bench_server_t *s, bench_output_t *o, int64_t n) {
    int64_t *idx = sl_malloc((size_t)(n ? n : 1) * sizeof *idx), k = 0;
    for (int64_t i = 0; i < n; i++)
        if (o[i].success && !o[i].output_tokens && o[i].text_len) idx[k++] = i;
    if (k) {
        char **texts = sl_malloc((size_t)k * sizeof *texts);
        int64_t *counts = sl_malloc((size_t)k * sizeof *counts);
        for (int64_t j = 0; j < k; j++) texts[j] = o[idx[j]].text;
        sl_err_t err;
        if (bench_tokenize(s, texts, k, false, NULL, counts, &err) == 0)
            for (int64_t j = 0; j < k; j++) o[idx[j]].output_tokens = counts[j];
        else
            LOG_WARNING("no usage in %lld streams and cannot tokenize their text (%s): counting events",
                        (long long)k, err.msg);
        free(texts), free(counts);
    }
    free(idx);
}

static void print_failures(const bench_output_t *o, int64_t n) {
    int64_t shown = 0;
    for (int64_t i = 0; i < n; i++) {
        if (o[i].success) continue;
        if (shown == 0) printf("Failed requests during benchmark run detected (capping to 10):\n");
        if (shown < 10) printf("Error %lld: %s\n", (long long)shown, o[i].error ? o[i].error : "");
        shown++;
    }
    if (!shown) return;
    printf("Failed requests by status:");
    long seen[32];
    int n_seen = 0;
    for (int64_t i = 0; i < n && n_seen < 32; i++) {
        if (o[i].success) continue;
        bool dup = false;
        for (int k = 0; k < n_seen; k++) dup = dup || seen[k] == o[i].status;
        if (dup) continue;
        seen[n_seen++] = o[i].status;
        int64_t c = 0;
        for (int64_t k = i; k < n; k++) c += !o[k].success && o[k].status == o[i].status;
        printf("%s %ld: %lld", n_seen > 1 ? "," : "", o[i].status, (long long)c);
    }
    printf("\n");
}

int bench_serve_main(int argc, char **argv) {
    bench_args_t a;
    sl_err_t err;
    int rc = bench_args_parse(argc, argv, &a, &err);
    if (rc == 1) return 0;
    if (rc) {
        fprintf(stderr, "usage: servelab bench serve [--base-url URL | --host H --port P] [flags] (--help for all)\n"
                        "servelab: error: %s\n", err.msg);
        bench_args_free(&a);
        return 2;
    }
    sl_log_to_stderr();
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) sl_die("curl_global_init failed");

    char base[2048];
    if (a.base_url) snprintf(base, sizeof base, "%s", a.base_url);
    else if (strchr(a.host, ':') && a.host[0] != '[') snprintf(base, sizeof base, "http://[%s]:%lld", a.host, (long long)a.port);
    else snprintf(base, sizeof base, "http://%s:%lld", a.host, (long long)a.port);
    for (size_t l = strlen(base); l > 0 && base[l - 1] == '/'; l--) base[l - 1] = 0;
    char api_url[4096];
    snprintf(api_url, sizeof api_url, "%s%s", base, a.endpoint);

    bench_http_t http;
    if (bench_http_init(&http, &a, &err)) sl_die("%s", err.msg);
    bench_server_t srv = {.base_url = base, .http = &http};
    char *first_id = NULL, *first_root = NULL;
    const char *model_id, *model_name;
    if (!a.model) {
        printf("Model not specified, fetching first model from server...\n");
        if (bench_first_model(&srv, &first_id, &first_root, &err))
            sl_die("Failed to fetch models from server at %s/v1/models: %s", base, err.msg);
        printf("First model name: %s, first model id: %s\n", first_id, first_root);
        model_name = first_id, model_id = first_root;
    } else {
        model_id = a.model;
        model_name = a.served_model_name ? a.served_model_name : a.model;
    }
    srv.model = model_name;
    fflush(stdout);

    if (!strcmp(a.dataset_name, "random") || !strcmp(a.dataset_name, "long-tail")) a.ignore_eos = true;
    bool custom = !strcmp(a.dataset_name, "custom");
    if (bench_probe_tokenizer(&srv, &err)) {
        if (!custom) sl_die("%s (synthetic prompts are sized with the server's tokenizer)", err.msg);
        LOG_WARNING("%s", err.msg);
    }
    bench_sample_t *samples;
    int64_t n;
    if (bench_dataset_build(&a, &srv, &samples, &n, &err)) sl_die("%s", err.msg);
    if (isnan(a.temperature))
        printf("WARNING: servelab bench serve, like vllm bench serve, does not set temperature==0 (greedy) in "
               "requests by default. The default will be determined on the server side and can be model/API "
               "specific. For the old behavior, include --temperature=0.\n");
    char **payloads = sl_malloc((size_t)n * sizeof *payloads);
    for (int64_t i = 0; i < n; i++) payloads[i] = bench_payload(&a, model_name, &samples[i]);

    char prefix[64];
    if (!a.request_id_prefix) {
        unsigned r = (unsigned)(sl_now_s() * 1e6) ^ ((unsigned)a.seed * 2654435761u);
        snprintf(prefix, sizeof prefix, "bench-%08x-", r);
        a.request_id_prefix = prefix;
    }
    bench_run_cfg_t cfg = {.api_url = api_url, .chat = !strcmp(a.backend, "openai-chat"), .http = &http,
                           .request_id_prefix = a.request_id_prefix, .max_concurrency = a.max_concurrency,
                           .progress = !a.disable_tqdm, .multi = curl_multi_init()};
    if (!cfg.multi) sl_die("curl_multi_init failed");
    if (a.num_warmups > 0) {
        printf("Warming up with %lld requests...\n", (long long)a.num_warmups);
        fflush(stdout);
        char **wp = sl_malloc((size_t)a.num_warmups * sizeof *wp);
        double *wd = sl_calloc((size_t)a.num_warmups, sizeof *wd);
        bench_output_t *wo = sl_calloc((size_t)a.num_warmups, sizeof *wo);
        for (int64_t i = 0; i < a.num_warmups; i++) wp[i] = payloads[0];
        bench_run_cfg_t wc = cfg;
        wc.request_id_prefix = NULL;
        bench_run(&wc, wp, a.num_warmups, wd, wo);
        for (int64_t i = 0; i < a.num_warmups; i++) bench_output_free(&wo[i]);
        free(wp), free(wd), free(wo);
        printf("Warmup run completed.\n");
    }

    printf("Starting main benchmark run...\n");
    bench_arrival_cfg_t ac = {.rate = a.request_rate, .burstiness = a.burstiness};
    char num[64], num2[64];
    if (a.ramp_up_strategy) {
        ac.ramp = !strcmp(a.ramp_up_strategy, "linear") ? BENCH_RAMP_LINEAR : BENCH_RAMP_EXPONENTIAL;
        ac.ramp_start_rps = (double)a.ramp_up_start_rps, ac.ramp_end_rps = (double)a.ramp_up_end_rps;
        printf("Traffic ramp-up strategy: %s.\nWill increase RPS from %lld to %lld RPS over the duration of the "
               "benchmark.\n", a.ramp_up_strategy, (long long)a.ramp_up_start_rps, (long long)a.ramp_up_end_rps);
    } else {
        if (isinf(a.request_rate)) snprintf(num, sizeof num, "inf");
        else sl_format_py_float(a.request_rate, 0, num, sizeof num);
        printf("Traffic request rate: %s\n", num);
    }
    if (isinf(a.burstiness)) snprintf(num2, sizeof num2, "inf");
    else sl_format_py_float(a.burstiness, 0, num2, sizeof num2);
    printf("Burstiness factor: %s (%s)\n", num2, a.burstiness == 1.0 ? "Poisson process" : "Gamma distribution");
    if (a.max_concurrency > 0) printf("Maximum request concurrency: %lld\n", (long long)a.max_concurrency);
    else printf("Maximum request concurrency: None\n");
    fflush(stdout);

    double *delays = sl_malloc((size_t)n * sizeof *delays);
    bench_rng_t rng;
    rng_seed(&rng, (uint64_t)a.seed ^ 0x9e3779b97f4a7c15ull);
    bench_arrivals(&ac, n, &rng, delays, NULL);
    bench_output_t *outs = sl_calloc((size_t)n, sizeof *outs);
    for (int64_t i = 0; i < n; i++) outs[i].prompt_len = samples[i].prompt_len; /* until usage says */
    double duration = bench_run(&cfg, payloads, n, delays, outs);
    count_unreported(&srv, outs, n);

    bench_metrics_t m;
    bench_metrics_compute(outs, n, duration, &a, &m);
    print_failures(outs, n);
    bench_print_table(stdout, &a, &m, duration);
    fflush(stdout);

    char date[32];
    time_t now = time(NULL);
    struct tm tm;
    localtime_r(&now, &tm);
    strftime(date, sizeof date, "%Y%m%d-%H%M%S", &tm);
    if (a.save_result || a.append_result) {
        bench_report_t r = {.date = date, .model_id = model_id, .tokenizer_id = a.tokenizer ? a.tokenizer : model_id,
                            .duration_s = duration};
        size_t len;
        char *json = bench_result_json(&a, &r, &m, outs, n, &len);
        char path[4096];
        if (a.result_dir) mkdirs(a.result_dir);
        bench_result_path(&a, model_id, date, path, sizeof path);
        save(&a, path, json, len);
        free(json);
        fprintf(stderr, "Saved the result to %s\n", path);
    }

    curl_multi_cleanup(cfg.multi);
    bench_metrics_free(&m);
    for (int64_t i = 0; i < n; i++) bench_output_free(&outs[i]), free(payloads[i]);
    free(outs), free(payloads), free(delays);
    bench_samples_free(samples, n);
    free(first_id), free(first_root);
    bench_http_free(&http);
    bench_args_free(&a);
    curl_global_cleanup();
    return 0;
}
