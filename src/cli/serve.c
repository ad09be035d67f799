/* serve.c - `servelab serve`: the OpenAI-compatible server, with vLLM's flags.
 *
 *   servelab serve MODEL_DIR [--host H] [--port 8000] [--served-model-name NAME ...]
 *       [--api-key KEY ...] [--chat-template PATH_OR_INLINE] [--generation-config auto|vllm|DIR]
 *       [--enable-log-requests | --disable-log-requests] [--max-log-len N]
 *       [--max-request-bytes N] [--max-waiting-requests N] [--request-header-timeout S]
 *       [--request-body-timeout S] [--disable-log-stats] [--fault NAME[:key=value,...] ...]
 *       [--enable-fault-injection --admin-key KEY] [engine flags]
 *
 * MODEL_DIR may also be given as --model. The API key also comes from
 * VLLM_API_KEY; the idle-connection timeout from VLLM_HTTP_TIMEOUT_KEEP_ALIVE (5 s).
 * A request's line and headers, and then its body, must each arrive within
 * --request-header-timeout / --request-body-timeout seconds (60, 60; 0: no
 * limit), however steadily a slow client trickles them. An
 * unknown flag is a usage error naming the closest valid one. GET /metrics
 * serves vLLM's metrics; the "Engine 000: ..." stats line is logged every
 * VLLM_LOG_STATS_INTERVAL seconds (10); --disable-log-stats turns both the
 * line and the vllm:* series off, as in vLLM (process_* and http_* remain).
 * SIGINT/SIGTERM stop gracefully: no new connections, in-flight requests get
 * a grace period, then the rest are aborted and the process exits 0.
 * The lab's faults (docs/lab.md) start with --fault; the /admin/faults API that
 * changes them at run time exists only with --enable-fault-injection, which
 * needs an --admin-key different from every API key.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli.h"
#include "engine_args.h"
#include "servelab/lab.h"
#include "servelab/metrics.h"
#include "servelab/server.h"
#include "servelab/stats_log.h"

static const char *serve_usage =
    "usage: servelab serve MODEL_DIR [--host H] [--port 8000] [--served-model-name NAME ...]\n"
    "                      [--api-key KEY ...] [--chat-template PATH_OR_INLINE]\n"
    "                      [--generation-config auto|vllm|DIR] [--enable-log-requests]\n"
    "                      [--max-log-len N] [--max-request-bytes N] [--max-waiting-requests N]\n"
    "                      [--request-header-timeout S] [--request-body-timeout S]\n"
    "                      [--disable-log-stats] [--fault NAME[:key=value,...] ...]\n"
    "                      [--enable-fault-injection --admin-key KEY] [engine flags]\n";

/* --help's descriptions, defaults in parentheses. */
static const char *serve_help =
    "\nserver flags:\n"
    "  --host H                      listen address (all interfaces)\n"
    "  --port P                      listen port (8000)\n"
    "  --served-model-name NAME      the model name clients send; repeat for aliases (MODEL_DIR)\n"
    "  --api-key KEY                 required as Authorization: Bearer KEY on /v1/*; repeat for several\n"
    "                                (VLLM_API_KEY; none)\n"
    "  --chat-template PATH_OR_INLINE\n"
    "                                override the checkpoint's chat template\n"
    "  --generation-config auto|vllm|DIR\n"
    "                                sampling defaults from generation_config.json, or none (auto)\n"
    "  --enable-log-requests         vLLM's Received request / Aborted request lines (off)\n"
    "  --max-log-len N               prompts in those lines cut to N (no limit)\n"
    "  --max-request-bytes N         larger bodies get 413 (32 MiB)\n"
    "  --max-waiting-requests N      503 with Retry-After when N requests already wait (off)\n"
    "  --request-header-timeout S    a request's line and headers must arrive within S s; 0: no limit (60)\n"
    "  --request-body-timeout S      its body within S s after its headers; 0: no limit (60)\n"
    "  --disable-log-stats           no periodic stats line and no vllm:* metrics (off)\n"
    "\nlab flags (docs/lab.md):\n"
    "  --fault NAME[:key=value,...]  start with this fault on; repeat for several (none): step_delay:ms=N,\n"
    "                                suppress_eos, http_error[:rate=PCT,types=T1,T2,count=N]\n"
    "  --enable-fault-injection      serve the /admin/faults API (off; needs --admin-key)\n"
    "  --admin-key KEY               Bearer key of /admin/* and /lab/*, never an API key (none)\n"
    "  --enable-lab-ui               serve GET /lab/snapshot: the queues and the KV block map as JSON\n"
    "                                (off; behind --admin-key when one is set)\n";

/* Levenshtein distance, for "did you mean". */
static int edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 99;
    int d[65][65];
    for (size_t i = 0; i <= la; i++) d[i][0] = (int)i;
    for (size_t j = 0; j <= lb; j++) d[0][j] = (int)j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int sub = d[i - 1][j - 1] + (a[i - 1] != b[j - 1]);
            int del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            d[i][j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
    return d[la][lb];
}

static _Noreturn void unknown_flag(const struct option *opts, const char *arg) {
    char flag[128];
    snprintf(flag, sizeof flag, "%s", arg);
    char *eq = strchr(flag, '=');
    if (eq) *eq = '\0';
    const char *name = flag[0] == '-' && flag[1] == '-' ? flag + 2 : flag;
    const char *best = NULL;
    int best_d = 1 << 30;
    for (const struct option *o = opts; o->name; o++) {
        int dd = edit_distance(name, o->name);
        if (dd < best_d) best_d = dd, best = o->name;
    }
    if (best && best_d <= 4)
        cli_usage_error(serve_usage, "unrecognized arguments: %s (did you mean --%s?)", flag, best);
    cli_usage_error(serve_usage, "unrecognized arguments: %s", flag);
}

int cli_serve(int argc, char **argv) {
    enum { O_MODEL = 256, O_HOST, O_PORT, O_NAME, O_KEY, O_TEMPLATE, O_GENCFG, O_LOGREQ, O_NOLOGREQ,
           O_MAXLOG, O_MAXBYTES, O_MAXWAIT, O_HEADER_TIMEOUT, O_BODY_TIMEOUT, O_NOSTATS, O_FAULT, O_FAULT_API, O_ADMIN_KEY, O_LAB_UI };
    static const struct option own[] = {
        {"model", required_argument, 0, O_MODEL},
        {"host", required_argument, 0, O_HOST},
        {"port", required_argument, 0, O_PORT},
        {"served-model-name", required_argument, 0, O_NAME},
        {"api-key", required_argument, 0, O_KEY},
        {"chat-template", required_argument, 0, O_TEMPLATE},
        {"generation-config", required_argument, 0, O_GENCFG},
        {"enable-log-requests", no_argument, 0, O_LOGREQ},
        {"disable-log-requests", no_argument, 0, O_NOLOGREQ},
        {"max-log-len", required_argument, 0, O_MAXLOG},
        {"max-request-bytes", required_argument, 0, O_MAXBYTES},
        {"max-waiting-requests", required_argument, 0, O_MAXWAIT},
        {"request-header-timeout", required_argument, 0, O_HEADER_TIMEOUT},
        {"request-body-timeout", required_argument, 0, O_BODY_TIMEOUT},
        {"disable-log-stats", no_argument, 0, O_NOSTATS},
        {"fault", required_argument, 0, O_FAULT},
        {"enable-fault-injection", no_argument, 0, O_FAULT_API},
        {"enable-lab-ui", no_argument, 0, O_LAB_UI},
        {"admin-key", required_argument, 0, O_ADMIN_KEY},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    struct option *opts = cli_merge_options(own);
    engine_config_t ea;
    engine_config_default(&ea);
    server_config_t sc;
    server_config_default(&sc);
    const char *model = NULL, *chat_template = NULL, *gencfg = "auto";
    const char **names = NULL, **keys = NULL;
    int n_names = 0, n_keys = 0;
    bool log_stats = true;
    fault_spec_t *faults = NULL;
    int n_faults = 0;

    optind = 1;
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
        if (engine_args_handle(&ea, c, optarg)) continue;
        switch (c) {
        case O_MODEL: model = optarg; break;
        case O_HOST: sc.host = optarg; break;
        case O_PORT: sc.port = (int)cli_parse_int("--port", optarg, 0, 65535); break;
        case O_NAME:
            names = sl_realloc(names, (size_t)(n_names + 1) * sizeof *names);
            names[n_names++] = optarg;
            break;
        case O_KEY:
            keys = sl_realloc(keys, (size_t)(n_keys + 1) * sizeof *keys);
            keys[n_keys++] = optarg;
            break;
        case O_TEMPLATE: chat_template = optarg; break;
        case O_GENCFG: gencfg = optarg; break;
        case O_LOGREQ: sc.log_requests = true; break;
        case O_NOLOGREQ: sc.log_requests = false; break;
        case O_MAXLOG: sc.max_log_len = (int32_t)cli_parse_int("--max-log-len", optarg, 0, INT32_MAX); break;
        case O_MAXBYTES: sc.max_request_bytes = cli_parse_human_int("--max-request-bytes", optarg, 0x1p30); break;
        case O_MAXWAIT: sc.max_waiting_requests = (int32_t)cli_parse_int("--max-waiting-requests", optarg, 0, INT32_MAX); break;
        case O_HEADER_TIMEOUT:
            sc.header_timeout_s = cli_parse_double("--request-header-timeout", optarg, 0, 86400);
            break;
        case O_BODY_TIMEOUT: sc.body_timeout_s = cli_parse_double("--request-body-timeout", optarg, 0, 86400); break;
        case O_NOSTATS: log_stats = false; break;
        case O_FAULT: {
            char ferr[768];
            faults = sl_realloc(faults, (size_t)(n_faults + 1) * sizeof *faults);
            if (fault_parse_spec(optarg, &faults[n_faults++], ferr, sizeof ferr))
                cli_usage_error("", "argument --fault: %s", ferr);
            break;
        }
        case O_FAULT_API: sc.enable_fault_injection = true; break;
        case O_LAB_UI: sc.enable_lab_ui = true; break;
        case O_ADMIN_KEY: sc.admin_key = optarg; break;
        case 'h': printf("%s%s%s%s", serve_usage, engine_usage, serve_help, engine_help); free(opts); return 0;
        default: unknown_flag(opts, argv[optind - 1]);
        }
    }
    if (optind < argc) {
        if (model || optind != argc - 1)
            cli_usage_error(serve_usage, "unrecognized arguments: %s", argv[model ? optind : optind + 1]);
        model = argv[optind];
    }
    if (!model) cli_usage_error(serve_usage, "the following arguments are required: MODEL_DIR (or --model)");
    /* vLLM's uvicorn keep-alive timeout (VLLM_HTTP_TIMEOUT_KEEP_ALIVE, 5 s): idle
     * connections, slow clients included, are closed after it. */
    const char *ka = getenv("VLLM_HTTP_TIMEOUT_KEEP_ALIVE");
    if (ka && *ka) sc.connection_timeout_s = (unsigned)cli_parse_int("VLLM_HTTP_TIMEOUT_KEEP_ALIVE", ka, 1, 3600);
    const char *env_key = getenv("VLLM_API_KEY");
    if (n_keys == 0 && env_key && *env_key) {
        keys = sl_realloc(keys, sizeof *keys);
        keys[n_keys++] = env_key;
    }
    ea.model_dir = model;
    sc.model_path = model;
    if (n_names == 0) {
        names = sl_realloc(names, sizeof *names);
        names[n_names++] = model;
    }
    sc.served_model_names = names;
    sc.n_served_model_names = n_names;
    sc.api_keys = keys;
    sc.n_api_keys = n_keys;
    if (sc.enable_fault_injection && (!sc.admin_key || !*sc.admin_key))
        cli_usage_error("", "argument --enable-fault-injection: requires --admin-key KEY");
    for (int i = 0; sc.admin_key && i < n_keys; i++)
        if (!strcmp(sc.admin_key, keys[i]))
            cli_usage_error("", "argument --admin-key: must differ from every API key");
    if (!strcmp(gencfg, "auto")) sc.generation_config_dir = model;
    else if (!strcmp(gencfg, "vllm")) sc.generation_config_dir = NULL;
    else sc.generation_config_dir = gencfg;

    /* Signals go to sigwait below, never to a worker thread. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    /* Thousands of streams need thousands of descriptors. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    cli_require_checkpoint(model);
    sl_err_t err;
    if (server_check_listen(&sc, &err)) sl_die("%s", err.msg);
    LOG_INFO("servelab API server version %s", SERVELAB_VERSION);
    LOG_INFO("args: model='%s', host=%s, port=%d", model, sc.host ? sc.host : "None", sc.port);
    char *tmpl_src = NULL;
    chat_template_t *tmpl = NULL;
    /* The chat template and its special tokens are the tokenizer's, as in vLLM. */
    const char *tok_dir = ea.tokenizer_dir ? ea.tokenizer_dir : model;
    int r = chat_template_source(tok_dir, chat_template, &tmpl_src, &err);
    if (r < 0) sl_die("%s", err.msg);
    if (r == 0 && !(tmpl = chat_template_compile(tmpl_src, strlen(tmpl_src), &err)))
        sl_die("chat template: %s", err.msg);
    if (r == 1) LOG_WARNING("No chat template found for %s: chat requests will be refused", tok_dir);
    free(tmpl_src);
    cJSON *special = chat_special_tokens_load(tok_dir, &err);
    if (!special) sl_die("%s", err.msg);

    double stats_interval = 10.0;
    const char *interval_env = getenv("VLLM_LOG_STATS_INTERVAL");
    if (interval_env && *interval_env) {
        char *end;
        stats_interval = strtod(interval_env, &end);
        if (*end || !(stats_interval > 0) || stats_interval > 86400)
            sl_die("VLLM_LOG_STATS_INTERVAL=%s: expected a number of seconds > 0", interval_env);
    }

    /* The lab's faults: off (one atomic load per step) unless asked for. */
    faults_t *fault_table = faults_new(ea.seed);
    ea.faults = fault_table;
    sc.faults = fault_table;
    engine_t *engine = cli_engine_create(&ea);
    sc.max_model_len = engine_config(engine)->sched.max_model_len;
    /* As vLLM: process_* first, then the engine's vllm:* (absent with
     * --disable-log-stats, which turns off every stat logger), then http_*. */
    metrics_t *metrics = metrics_new();
    metrics_add_process_collector(metrics);
    stats_logger_t *stats_logger = NULL;
    if (log_stats) {
        engine_enable_metrics(engine, metrics, names[0]);
        stats_logger = stats_logger_new(engine, stats_interval);
    }
    sc.metrics = metrics;
    /* servelab:fault_* only where the lab is used, so /metrics is vLLM's otherwise. */
    if (n_faults > 0 || sc.enable_fault_injection) faults_bind_metrics(fault_table, metrics);
    for (int i = 0; i < n_faults; i++) faults_set(fault_table, &faults[i]);
    if (sc.enable_lab_ui) engine_enable_lab_ui(engine);
    engine_start(engine);
    server_t *srv = server_start(&sc, engine, engine_tokenizer(engine), tmpl, special, &err);
    if (!srv) sl_die("%s", err.msg);
    if (stats_logger) stats_logger_start(stats_logger);

    int sig = 0;
    sigwait(&sigs, &sig);
    LOG_INFO("Received %s, shutting down (grace period 10 s)", sig == SIGINT ? "SIGINT" : "SIGTERM");
    stats_logger_free(stats_logger);
    server_stop(srv, 10.0);
    engine_stop(engine);
    engine_free(engine);
    metrics_free(metrics);
    faults_free(fault_table);
    free(faults);
    chat_template_free(tmpl);
    cJSON_Delete(special);
    free(names);
    free(keys);
    free(opts);
    LOG_INFO("Shutdown complete");
    return 0;
}
