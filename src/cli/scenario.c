/* scenario.c - `servelab scenario`: the lab's incidents, reproduced, diagnosed and remedied.
 *
 *   servelab scenario list [--dir DIR]
 *   servelab scenario show NAME [--dir DIR]
 *   servelab scenario run (NAME... | --all [--skip NAME,...]) [--remedy] [--prometheus] [--json] [--dir DIR]
 *
 * A run of one scenario (src/lab/scenario.c has the file format) is up to three phases: the
 * healthy baseline, the incident, and with --remedy the remedy. Each phase starts this binary's
 * `serve` with the phase's flags and faults on a free loopback port (its log in a temporary
 * directory), loads it with `bench serve` run after run (each with its own --seed), waits for
 * tokens to flow, sets the phase's faults through the admin API, waits settle_s, runs `diagnose
 * --json` over window_s (with the baseline's report as --baseline, and the log as --log), and
 * stops both. A remedy that is the baseline's setup again (the incident's change undone) is
 * not run twice: the baseline's measurement is the remedy's. A phase with warm-up flags first
 * runs `bench serve` with them to its end (warm-up requests before taking traffic). A scenario
 * with golden prompts records their answers in the baseline phase, once the load flows, and
 * every phase replays them (`diagnose --golden`). One
 * that watches from boot ("watch": "boot": a cold start) sets its faults at boot (--fault) and
 * starts diagnose before the load, so the window holds the first requests after boot.
 * The incident matches when the diagnoser names the expected cause and the symptom
 * measure moved in its direction from the baseline; the remedy helps when the cause is gone and
 * the measure moved back. The verdicts compare each run with its own baseline, never with a
 * fixed timing, so a slower machine does not flip them. Processes, not threads: each phase is
 * exactly what a user would run by hand (docs/lab.md shows the commands).
 *
 * With --prometheus each phase is also watched by a real Prometheus (the `prometheus` binary on
 * PATH), scraping the phase's server every second and evaluating tools/prometheus/alerts.yml
 * with its windows made seconds long (scenario_shorten_rules: [5m] -> [10s], for -> 3s, as
 * tests/e2e/test_alerts.py loads them). The incident's and the remedy's start on a copy of the
 * baseline's data, with the same target labels, and `offset 1h` made the time since the
 * baseline's started, so the rules that compare with an hour earlier compare with the baseline.
 * A phase with nginx in front also runs nginx-prometheus-exporter on the proxy's stub_status,
 * scraped too (the gateway's requests in flight, which VLLMUpstreamBottleneck compares with the
 * engine's). The phase then holds its load PROM_HOLD_S after the faults are set, and the alerts
 * that reached "firing" are recorded. The alerts agree when the baseline fired none, the
 * incident fired the rule whose cause label is the expected cause (when a rule has it), every
 * alert the incident fired names a cause the diagnoser also found, and the remedy did not fire
 * the expected cause's rule.
 *
 * Exit status: 0 when every scenario matched (and every remedy helped, with --remedy; and the
 * alerts agreed, with --prometheus), 1 when one did not or a phase failed, 2 on bad usage or a
 * bad scenario file.
 */
#define _GNU_SOURCE
#include <curl/curl.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "bench.h"
#include "cli.h"
#include "servelab/core.h"
#include "servelab/diagnose.h"
#include "servelab/lab.h"
#include "servelab/scenario.h"

extern char **environ;

static const char *scn_usage = "usage: servelab scenario list [--dir DIR]\n"
                               "       servelab scenario show NAME [--dir DIR]\n"
                               "       servelab scenario run (NAME ... | --all [--skip NAME,...]) [--remedy] "
                               "[--prometheus] [--json] [--dir DIR]\n";

#define SCN_DEFAULT_DIR "lab/scenarios"

/* ---- scenario files --------------------------------------------------------------- */

static int load_one(const char *dir, const char *name, scenario_t *s) {
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/%s.json", dir, name);
    size_t len;
    sl_err_t rerr;
    char *text = sl_read_file(path, 1 << 20, &len, &rerr);
    if (!text) {
        fprintf(stderr, "servelab: error: scenario '%s': %s (servelab scenario list shows the names)\n", name,
                rerr.msg);
        return -1;
    }
    int rc = scenario_parse(text, len, name, s, err, sizeof err);
    free(text);
    for (int i = 0; !rc && i < s->gates.n; i++) { /* bench compare's own reading of a gate */
        bench_gate_t g;
        sl_err_t gerr;
        if (bench_gate_parse(s->gates.v[i], &g, &gerr)) {
            snprintf(err, sizeof err, "\"gates\"[%d]: %.400s", i, gerr.msg);
            scenario_free(s);
            rc = -1;
        }
    }
    if (rc) fprintf(stderr, "servelab: error: %s: %s\n", path, err);
    return rc;
}

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The scenario names in dir (its *.json files), sorted; NULL when it cannot be read. */
static char **list_names(const char *dir, int *n) {
    DIR *d = opendir(dir);
    if (!d) return NULL;
    char **names = NULL;
    int cap = 0;
    *n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        size_t len = strlen(e->d_name);
        if (len <= 5 || strcmp(e->d_name + len - 5, ".json") || e->d_name[0] == '.') continue;
        if (*n == cap) names = sl_realloc(names, (size_t)(cap = cap ? 2 * cap : 32) * sizeof *names);
        names[*n] = sl_strdup(e->d_name);
        names[(*n)++][len - 5] = '\0';
    }
    closedir(d);
    qsort(names, (size_t)*n, sizeof *names, cmp_str);
    return names;
}

static void free_names(char **names, int n) {
    for (int i = 0; i < n; i++) free(names[i]);
    free(names);
}

/* One argument as a POSIX shell reads it back: as is when it holds only safe characters,
 * else single-quoted ('\'' for a quote inside), so a shown command can be pasted. */
static void print_shell_word(FILE *f, const char *w) {
    if (*w && strspn(w, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_./:=,@%+-") == strlen(w)) {
        fputs(w, f);
        return;
    }
    fputc('\'', f);
    for (const char *c = w; *c; c++) {
        if (*c == '\'') fputs("'\\''", f);
        else fputc(*c, f);
    }
    fputc('\'', f);
}

static void print_args(FILE *f, const char *lead, const scn_args_t *a) {
    fputs(lead, f);
    for (int i = 0; i < a->n; i++) fputc(' ', f), print_shell_word(f, a->v[i]);
}

static void print_setup(FILE *f, const char *what, const char *model, const scn_setup_t *s) {
    fprintf(f, "  %-9s servelab serve %s", what, s->model ? s->model : model);
    if (s->model) fputs(" --served-model-name ", f), print_shell_word(f, model);
    print_args(f, "", &s->server);
    for (int i = 0; i < s->faults.n; i++) fputs(" --fault ", f), print_shell_word(f, s->faults.v[i]);
    if (s->proxied) {
        fputs("\n            proxy: nginx in front", f);
        for (int i = 0; i < s->proxy.n; i++) fprintf(f, "%s %s;", i ? "" : ":", s->proxy.v[i]);
    }
    print_args(f, "\n            load: servelab bench serve", &s->load);
    if (s->golden_request) fprintf(f, "\n            golden prompts sent with %s", s->golden_request);
    fputc('\n', f);
}

static void show(const scenario_t *s) {
    printf("%s: %s\n  seed %s, %s: \"%s\"\n", s->name, s->title, s->seed, s->section, s->quote);
    if (s->imitation) printf("  imitation: %s\n", s->imitation);
    if (s->replicas > 1)
        printf("  replicas: %d servers behind the proxy; faults and diagnose act on the first\n", s->replicas);
    print_setup(stdout, "baseline", s->model, &s->baseline);
    print_setup(stdout, "incident", s->model, &s->incident);
    if (s->remedy_text) print_setup(stdout, "remedy", s->model, &s->remedy);
    if (s->golden)
        printf("  golden:   %s (the baseline records their answers; every phase replays them)\n", s->golden);
    for (int i = 0; i < s->n_make; i++) {
        printf("  model:    %s, when missing, from", s->make_dir[i]);
        print_args(stdout, "", &s->make_cmd[i]);
        printf("\n");
    }
    if (s->measure) printf("  symptom:  %s %s (%s)\n", s->measure, s->direction > 0 ? "up" : "down", s->where);
    if (s->gates.n) {
        printf("  gates:    each phase also runs its load for %d requests (--save-result); the incident must "
               "break one of", s->gate_prompts);
        for (int i = 0; i < s->gates.n; i++) printf(" --gate %s", s->gates.v[i]);
        printf(" against the baseline (servelab bench compare), the remedy none\n");
    }
    printf("  expected: servelab diagnose names %s\n", s->expect);
    if (s->remedy_text) printf("  remedy:   %s\n", s->remedy_text);
}

/* ---- processes -------------------------------------------------------------------- */

static char self_exe[4096];

/* Starts argv with stdout and stderr into out_path (appended), stdin empty. -1 on failure. */
static pid_t spawn(char *const argv[], const char *out_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, out_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    pid_t pid;
    int rc = posix_spawn(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc ? -1 : pid;
}

/* Copies the file at from to to; 0, or -1 (errno). */
static int copy_file(const char *from, const char *to) {
    size_t len;
    sl_err_t err;
    char *data = sl_read_file(from, 64 << 20, &len, &err);
    if (!data) return -1;
    FILE *f = fopen(to, "wb");
    int rc = f && fwrite(data, 1, len, f) == len ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    free(data);
    return rc;
}

/* SIGTERM, then SIGKILL after timeout_s; reaps it. */
static void stop_process(pid_t pid, double timeout_s) {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    double end = sl_now_s() + timeout_s;
    while (sl_now_s() < end) {
        if (waitpid(pid, NULL, WNOHANG) == pid) return;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
}

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int port = -1;
    if (fd >= 0 && !bind(fd, (struct sockaddr *)&a, sizeof a) && !getsockname(fd, (struct sockaddr *)&a, &len))
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* A request to the phase's server: the status (-1: no answer); *out the body when out is not NULL. */
static long http(const char *base, const char *path, const char *post, const char *bearer, char **out) {
    cli_buf_t b;
    char err[640];
    long status = cli_http(base, path, post, bearer, 5000L, &b, err, sizeof err);
    if (out) *out = b.data;
    else free(b.data);
    return status;
}

static bool healthy(const char *base) { return http(base, "/health", NULL, NULL, NULL) == 200; }

/* The sum of every sample of the series `name` on the server at base now (NAN when /metrics
 * cannot be read). */
static double metric_total(const char *base, const char *name) {
    char *text = NULL, err[128];
    double v = NAN;
    prom_snapshot_t snap = {0};
    if (http(base, "/metrics", NULL, NULL, &text) == 200 && !prom_parse(text, strlen(text), &snap, err, sizeof err)) {
        v = 0;
        for (int i = 0; i < snap.n; i++)
            if (!strcmp(snap.samples[i].name, name)) v += snap.samples[i].value;
    }
    prom_snapshot_free(&snap);
    free(text);
    return v;
}

static double generated(const char *base) { return metric_total(base, "vllm:generation_tokens_total"); }

/* An argv under construction. */
typedef struct {
    char **v;
    int n, cap;
} argv_t;

static void argv_add(argv_t *a, const char *s) {
    if (a->n + 2 > a->cap) a->v = sl_realloc(a->v, (size_t)(a->cap = a->cap ? 2 * a->cap : 32) * sizeof *a->v);
    a->v[a->n++] = sl_strdup(s);
    a->v[a->n] = NULL;
}

static void argv_add_all(argv_t *a, const scn_args_t *s) {
    for (int i = 0; i < s->n; i++) argv_add(a, s->v[i]);
}

static void argv_free(argv_t *a) {
    for (int i = 0; i < a->n; i++) free(a->v[i]);
    free(a->v);
    memset(a, 0, sizeof *a);
}

/* `bench serve`, run after run, until stopped. */
typedef struct {
    argv_t argv;
    const char *log;
    pthread_mutex_t mu;
    pid_t pid;
    bool stop;
    pthread_t thread;
} load_t;

/* Each run gets its own --seed (1, 2, ...; after the scenario's flags, so it
 * wins): a restarted run must not replay prompts the prefix cache holds from
 * the previous one, which would make the hit rate depend on the window. */
static void *load_main(void *arg) {
    load_t *l = arg;
    for (int run = 1;; run++) {
        pthread_mutex_lock(&l->mu);
        if (l->stop) {
            pthread_mutex_unlock(&l->mu);
            return NULL;
        }
        char seed[16];
        snprintf(seed, sizeof seed, "%d", run);
        argv_t a = {0};
        for (int i = 0; i < l->argv.n; i++) argv_add(&a, l->argv.v[i]);
        argv_add(&a, "--seed");
        argv_add(&a, seed);
        l->pid = spawn(a.v, l->log);
        argv_free(&a);
        pid_t pid = l->pid;
        pthread_mutex_unlock(&l->mu);
        if (pid < 0) return NULL;
        waitpid(pid, NULL, 0);
        pthread_mutex_lock(&l->mu);
        l->pid = 0;
        pthread_mutex_unlock(&l->mu);
    }
}

static void load_stop(load_t *l) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    if (l->pid > 0) kill(l->pid, SIGTERM);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    argv_free(&l->argv);
}

/* ---- one phase ------------------------------------------------------------------- */

typedef struct {
    bool ok;
    char err[1024];
    char *cause;          /* the diagnoser's top cause */
    char ranked[512];     /* every cause that fired, most specific first */
    diag_measures_t m;
    char report_path[512];
    bool prom;            /* a Prometheus watched it (--prometheus) */
    char alerts[512];     /* the alerts that reached "firing", comma-separated, first first */
    char alert_causes[512]; /* their cause labels, the same way */
    char expect_rule[64]; /* the alert rule whose cause label is the expected cause ("": none) */
    int n_replicas;       /* servers behind the proxy (1 without one) */
    double served[SCN_MAX_REPLICAS]; /* the requests each finished over diagnose's window */
    char bench_path[512]; /* with gates: the result of the phase's gate run (bench serve --save-result) */
    char prom_data[512];  /* --prometheus: its Prometheus's TSDB, the history of the phases after it */
    double prom_t0;       /* when that Prometheus started (sl_now_s) */
} phase_t;

static void progress(const scenario_t *s, const char *phase, const char *what) {
    fprintf(stderr, "scenario %s: %s: %s\n", s->name, phase, what);
}

static int read_report(phase_t *p) {
    size_t len;
    sl_err_t rerr;
    char *text = sl_read_file(p->report_path, 64 << 20, &len, &rerr);
    cJSON *r = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    const cJSON *cause = r ? cJSON_GetObjectItemCaseSensitive(r, "cause") : NULL;
    char err[256];
    if (!cJSON_IsString(cause) || diag_measures_from_json(r, &p->m, err, sizeof err)) {
        cJSON_Delete(r);
        snprintf(p->err, sizeof p->err, "diagnose wrote no report (%s)", p->report_path);
        return -1;
    }
    p->cause = sl_strdup(cause->valuestring);
    size_t at = 0;
    const cJSON *ranked = cJSON_GetObjectItemCaseSensitive(r, "ranked");
    for (const cJSON *it = ranked ? ranked->child : NULL; it && at < sizeof p->ranked; it = it->next) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "cause");
        if (cJSON_IsString(c))
            at += (size_t)snprintf(p->ranked + at, sizeof p->ranked - at, "%s%s", at ? ", " : "", c->valuestring);
    }
    cJSON_Delete(r);
    return 0;
}

/* Waits until the server has generated 32 tokens more than now (the load flows); 0, or -1
 * with err after 120 s. */
static int wait_for_tokens(const char *base, const char *load_log, char *err, size_t cap) {
    double g0 = generated(base), deadline = sl_now_s() + 120;
    while (sl_now_s() < deadline && !(generated(base) >= g0 + 32)) usleep(100000);
    if (generated(base) >= g0 + 32) return 0;
    snprintf(err, cap, "the load produced no tokens in 120 s (its log: %s)", load_log);
    return -1;
}

/* Sets the setup's faults through the admin API; 0, or -1 with err. */
static int set_faults(const char *base, const char *admin_key, const scn_setup_t *setup, char *err, size_t cap) {
    for (int i = 0; i < setup->faults.n; i++) {
        fault_spec_t spec;
        char ferr[400], *answer = NULL;
        int parsed = fault_parse_spec(setup->faults.v[i], &spec, ferr, sizeof ferr);
        SL_ASSERT(parsed == 0); /* checked when the file was loaded */
        char *body = fault_spec_to_json(&spec);
        long st = http(base, "/admin/faults", body, admin_key, &answer);
        free(body);
        if (st != 200)
            snprintf(err, cap, "setting fault %s failed (HTTP %ld): %.300s", setup->faults.v[i], st,
                     answer ? answer : "");
        free(answer);
        if (st != 200) return -1;
    }
    return 0;
}

/* Runs argv to its end, its output into out_path; 0 when it exited 0. */
static int run_to_end(char *const argv[], const char *out_path) {
    pid_t pid = spawn(argv, out_path);
    int st = 1;
    return pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

/* Golden prompts: the baseline phase records their answers under its load into a copy in tmp
 * (the scenario's file is never written), with the baseline's golden_request; every phase
 * replays them after its window with its own, so the baseline also shows that they replay
 * alike. 0, or -1 with err. */
static int record_golden(const scenario_t *s, const char *name, const char *base, const char *golden,
                         const char *tmp, char *err, size_t cap) {
    const char *req = s->baseline.golden_request;
    char *rec[] = {(char *)self_exe, "diagnose", "--url", (char *)base, "--record-golden", (char *)golden,
                   req ? "--golden-request" : NULL, (char *)req, NULL};
    char out[512];
    snprintf(out, sizeof out, "%s/%.64s-golden.log", tmp, s->name);
    progress(s, name, "recording the golden prompts' answers");
    if (copy_file(s->golden, golden) == 0 && run_to_end(rec, out) == 0) return 0;
    snprintf(err, cap, "recording the golden answers of %s failed (%s)", s->golden, out);
    return -1;
}

/* Warm-up requests before taking traffic: one `bench serve` run with the setup's warmup flags,
 * to its end. 0, or -1 with err. */
static int run_warmup(const scenario_t *s, const char *name, const char *base, const scn_args_t *warmup,
                      const char *tmp, char *err, size_t cap) {
    argv_t a = {0};
    const char *head[] = {self_exe, "bench", "serve", "--base-url", base, "--model", s->model};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) argv_add(&a, head[i]);
    argv_add_all(&a, warmup);
    char out[512];
    snprintf(out, sizeof out, "%s/%.64s-%s-warmup.log", tmp, s->name, name);
    progress(s, name, "warm-up requests (bench serve) before the traffic");
    int rc = run_to_end(a.v, out);
    argv_free(&a);
    if (rc) snprintf(err, cap, "the warm-up run failed (its log: %s)", out);
    return rc;
}

/* ---- --prometheus ----------------------------------------------------------------- */

#define SCN_ALERT_RULES "tools/prometheus/alerts.yml"
#define PROM_WINDOW "10s"
#define PROM_FOR "3s"
/* The load held after the faults are set: a [10s] share, then for: 3s, and 5 s of scrape and
 * evaluation lag. */
#define PROM_HOLD_S 18.0

typedef struct {
    char exe[4096];        /* the prometheus binary */
    char *rules;           /* SCN_ALERT_RULES as committed (each phase shortens it) */
} prom_cfg_t;

#define NGINX_EXPORTER "prometheus-nginx-exporter" /* Debian's name of nginx-prometheus-exporter */

typedef struct {
    pid_t pid;
    char base[64];
} prom_t;

/* name, found in $PATH, into out; 0, or -1. */
static int find_in_path(const char *name, char *out, size_t cap) {
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; *p;) {
        size_t n = strcspn(p, ":");
        snprintf(out, cap, "%.*s/%s", (int)n, p, name);
        if (n && access(out, X_OK) == 0) return 0;
        p += n + (p[n] == ':');
    }
    return -1;
}

/* Whether the comma-separated list has word. */
static bool list_has(const char *list, const char *word) {
    const size_t n = strlen(word);
    for (const char *p = list; *p;) {
        while (*p == ',' || *p == ' ') p++;
        const size_t m = strcspn(p, ", ");
        if (m == n && !strncmp(p, word, n)) return true;
        p += m;
    }
    return false;
}

static void list_add(char *list, size_t cap, const char *word) {
    const size_t at = strlen(list);
    snprintf(list + at, cap - at, "%s%s", at ? ", " : "", word);
}

static int write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    int rc = f && fputs(text, f) >= 0 ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    return rc;
}

/* Copies the directory from to the new directory to (cp -a); 0, or -1. */
static int copy_dir(const char *from, const char *to) {
    char *argv[] = {"cp", "-a", (char *)from, (char *)to, NULL};
    pid_t pid;
    int status;
    if (posix_spawnp(&pid, "cp", NULL, NULL, argv, environ)) return -1;
    return waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* How many of Prometheus's targets it has scraped, healthy (GET /api/v1/targets). */
static int prom_targets_up(const prom_t *pr) {
    char *body = NULL;
    cJSON *r = http(pr->base, "/api/v1/targets?state=active", NULL, NULL, &body) == 200 && body ? cJSON_Parse(body)
                                                                                                : NULL;
    free(body);
    int up = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "data"), "activeTargets")) {
        const cJSON *health = cJSON_GetObjectItemCaseSensitive(t, "health");
        up += cJSON_IsString(health) && !strcmp(health->valuestring, "up");
    }
    cJSON_Delete(r);
    return up;
}

/* Starts the phase's Prometheus in its own directory under tmp: it scrapes 127.0.0.1:target_port
 * (job servelab) and, when gateway_port is not 0, the gateway's exporter there (job nginx), every
 * second, and evaluates the shortened rules. Every phase labels its targets alike (instance: the
 * scenario whose baseline it is compared with, and its "-gateway"), so a phase after the baseline
 * starts on a copy of the baseline's TSDB and its series continue the baseline's: the rules that
 * compare with an hour earlier (`offset 1h`: VLLMTTFTRegression, VLLMITLRegression) compare with
 * the baseline, the offset made the time since the baseline's Prometheus started at the same point
 * of its phase. The baseline's own rules keep `offset 1h`: no data, no regression. 0 once it is
 * ready and has scraped every target once (p->prom_data, p->prom_t0 set), or -1 with err: the
 * phase's load starts after that, so its hold is all seen (Prometheus applies new targets up to
 * 5 s after it starts, which would otherwise come out of the hold). */
static int prom_start(const prom_cfg_t *cfg, const scenario_t *s, const char *phase, const char *tmp,
                      const char *baseline_of, const phase_t *base, int target_port, int gateway_port, prom_t *pr,
                      phase_t *p, char *err, size_t cap) {
    char dir[400], path[640], cfg_arg[700], data_arg[700], listen_arg[64], log[640];
    snprintf(dir, sizeof dir, "%s/%.64s-%s-prometheus", tmp, s->name, phase);
    snprintf(path, sizeof path, "%s/prometheus.yml", dir);
    snprintf(p->prom_data, sizeof p->prom_data, "%s/data", dir);
    char conf[1024];
    int at = snprintf(conf, sizeof conf,
                      "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nrule_files:\n  - alerts.yml\n"
                      "scrape_configs:\n  - job_name: servelab\n    static_configs:\n"
                      "      - targets: ['127.0.0.1:%d']\n        labels: {instance: '%.64s'}\n",
                      target_port, baseline_of);
    if (gateway_port)
        snprintf(conf + at, sizeof conf - (size_t)at,
                 "  - job_name: nginx\n    static_configs:\n"
                 "      - targets: ['127.0.0.1:%d']\n        labels: {instance: '%.64s-gateway'}\n",
                 gateway_port, baseline_of);
    char rules_path[640], earlier[32];
    snprintf(rules_path, sizeof rules_path, "%s/alerts.yml", dir);
    if (mkdir(dir, 0755) && errno != EEXIST) {
        snprintf(err, cap, "cannot make %s: %s", dir, strerror(errno));
        return -1;
    }
    const bool history = base && base->prom_data[0];
    if (history && copy_dir(base->prom_data, p->prom_data)) {
        snprintf(err, cap, "cannot copy the baseline's Prometheus data %.400s to %.400s", base->prom_data,
                 p->prom_data);
        return -1;
    }
    p->prom_t0 = sl_now_s();
    snprintf(earlier, sizeof earlier, "%.0fs", history ? ceil(p->prom_t0 - base->prom_t0) : 0.0);
    char rerr[256];
    char *rules =
        scenario_shorten_rules(cfg->rules, PROM_WINDOW, PROM_FOR, history ? earlier : NULL, rerr, sizeof rerr);
    SL_ASSERT(rules != NULL); /* shortened once when --prometheus was read */
    const int wrote = write_text(path, conf) || write_text(rules_path, rules);
    free(rules);
    if (wrote) {
        snprintf(err, cap, "cannot write the Prometheus configuration in %s: %s", dir, strerror(errno));
        return -1;
    }
    const int port = free_port();
    snprintf(cfg_arg, sizeof cfg_arg, "--config.file=%s", path);
    snprintf(data_arg, sizeof data_arg, "--storage.tsdb.path=%s", p->prom_data);
    snprintf(listen_arg, sizeof listen_arg, "--web.listen-address=127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/prometheus.log", dir);
    char *argv[] = {(char *)cfg->exe, cfg_arg, data_arg, listen_arg, "--log.level=warn", NULL};
    pr->pid = port > 0 ? spawn(argv, log) : -1;
    snprintf(pr->base, sizeof pr->base, "http://127.0.0.1:%d", port);
    const int targets = gateway_port ? 2 : 1;
    for (double end = sl_now_s() + 30; pr->pid > 0 && sl_now_s() < end && waitpid(pr->pid, NULL, WNOHANG) == 0;
         usleep(100000))
        if (http(pr->base, "/-/ready", NULL, NULL, NULL) == 200 && prom_targets_up(pr) == targets) return 0;
    snprintf(err, cap, "Prometheus did not become ready and scrape its %d target%s (its log: %s)", targets,
             targets > 1 ? "s" : "", log);
    stop_process(pr->pid, 5);
    pr->pid = -1;
    return -1;
}

/* The alerting rule Prometheus loaded whose `cause` label is `cause` (GET /api/v1/rules), into
 * out ("" when none has it). */
static void prom_rule_for(const prom_t *pr, const char *cause, char *out, size_t cap) {
    char *body = NULL;
    cJSON *r = http(pr->base, "/api/v1/rules?type=alert", NULL, NULL, &body) == 200 && body ? cJSON_Parse(body) : NULL;
    free(body);
    out[0] = 0;
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "data"), "groups"), *g;
    cJSON_ArrayForEach(g, groups) {
        const cJSON *rule;
        cJSON_ArrayForEach(rule, cJSON_GetObjectItemCaseSensitive(g, "rules")) {
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(rule, "name"),
                        *c = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rule, "labels"), "cause");
            if (!out[0] && cJSON_IsString(name) && cJSON_IsString(c) && !strcmp(c->valuestring, cause))
                snprintf(out, cap, "%s", name->valuestring);
        }
    }
    cJSON_Delete(r);
}

/* Adds the alerts firing now (and their causes) to the phase's lists. */
static void prom_poll(const prom_t *pr, phase_t *p) {
    char *body = NULL;
    cJSON *r = http(pr->base, "/api/v1/alerts", NULL, NULL, &body) == 200 && body ? cJSON_Parse(body) : NULL;
    free(body);
    const cJSON *alerts = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "data"), "alerts"), *a;
    cJSON_ArrayForEach(a, alerts) {
        const cJSON *state = cJSON_GetObjectItemCaseSensitive(a, "state"),
                    *labels = cJSON_GetObjectItemCaseSensitive(a, "labels"),
                    *name = cJSON_GetObjectItemCaseSensitive(labels, "alertname"),
                    *cause = cJSON_GetObjectItemCaseSensitive(labels, "cause");
        if (!cJSON_IsString(state) || strcmp(state->valuestring, "firing") || !cJSON_IsString(name) ||
            list_has(p->alerts, name->valuestring))
            continue;
        list_add(p->alerts, sizeof p->alerts, name->valuestring);
        list_add(p->alert_causes, sizeof p->alert_causes, cJSON_IsString(cause) ? cause->valuestring : "-");
    }
    cJSON_Delete(r);
}

/* ---- a real nginx in front (a setup's "proxy") ------------------------------------- */

typedef struct {
    pid_t pid;
    char base[64];
    char dir[512];
} proxy_t;

/* The nginx binary: on PATH, else Debian's /usr/sbin/nginx (outside a user's PATH). 0, or -1. */
static int nginx_exe(char *out, size_t cap) {
    if (!find_in_path("nginx", out, cap)) return 0;
    snprintf(out, cap, "/usr/sbin/nginx");
    return access(out, X_OK);
}

/* The block a proxy directive belongs to: the zones nginx allows only in `http` go there, the
 * balancing methods into the `upstream`, everything else into `location /v1/`: a gateway's
 * limits act on the OpenAI API, while /tokenize (bench serve sizes its prompts with it),
 * /health and /metrics pass through plain. */
static char directive_block(const char *d) {
    static const char *const http_only[] = {"limit_req_zone", "limit_conn_zone", NULL},
                             *const upstream[] = {"least_conn", "ip_hash", "hash", "random", NULL};
    const size_t n = strcspn(d, " \t");
    for (const char *const *k = http_only; *k; k++)
        if (strlen(*k) == n && !strncmp(d, *k, n)) return 'h';
    for (const char *const *k = upstream; *k; k++)
        if (strlen(*k) == n && !strncmp(d, *k, n)) return 'u';
    return 'l';
}

static void put_directives(FILE *f, const scn_args_t *a, char block, const char *indent) {
    for (int i = 0; i < a->n; i++)
        if (directive_block(a->v[i]) == block) fprintf(f, "%s%s;\n", indent, a->v[i]);
}

/* Starts nginx in its own directory under tmp, proxying to the servers on ports[0..n) as one
 * upstream (SSE unbuffered, upstream keep-alive), with the setup's directives; its access log
 * names the replica that served each request. One process (master_process off), so it runs as
 * the invoking user, root or not, with every path in its directory. 0 once it answers /health,
 * or -1 with err. */
static int proxy_start(const scenario_t *s, const char *phase, const scn_setup_t *setup, const int *ports, int n,
                       const char *tmp, proxy_t *px, char *err, size_t cap) {
    char exe[4096], conf[640], log[640];
    px->pid = -1;
    if (nginx_exe(exe, sizeof exe)) {
        snprintf(err, cap, "the scenario's proxy needs nginx (Debian: apt-get install nginx-light)");
        return -1;
    }
    snprintf(px->dir, sizeof px->dir, "%s/%.64s-%s-nginx", tmp, s->name, phase);
    snprintf(conf, sizeof conf, "%s/nginx.conf", px->dir);
    snprintf(log, sizeof log, "%s/error.log", px->dir);
    const int port = free_port();
    FILE *f = (mkdir(px->dir, 0755) == 0 || errno == EEXIST) ? fopen(conf, "w") : NULL;
    if (!f || port < 0) {
        if (f) fclose(f);
        snprintf(err, cap, "cannot write the nginx configuration in %s: %s", px->dir, strerror(errno));
        return -1;
    }
    const char *d = px->dir;
    fprintf(f, "daemon off;\nmaster_process off;\nworker_processes 1;\npid %s/nginx.pid;\nerror_log %s warn;\n"
               "events { worker_connections 1024; }\nhttp {\n"
               "    log_format servelab '$msec $upstream_addr $status $request_time $upstream_response_time "
               "\"$request\"';\n    access_log %s/access.log servelab;\n",
            d, log, d);
    static const char *const temps[] = {"client_body", "proxy", "fastcgi", "uwsgi", "scgi"};
    for (int i = 0; i < 5; i++) fprintf(f, "    %s_temp_path %s/%s;\n", temps[i], d, temps[i]);
    put_directives(f, &setup->proxy, 'h', "    ");
    fprintf(f, "    upstream servelab {\n");
    put_directives(f, &setup->proxy, 'u', "        ");
    for (int i = 0; i < n; i++) fprintf(f, "        server 127.0.0.1:%d;\n", ports[i]);
    fprintf(f, "        keepalive 64;\n    }\n    server {\n        listen 127.0.0.1:%d;\n", port);
    for (int api = 0; api < 2; api++) {
        fprintf(f, "        location %s {\n            proxy_pass http://servelab;\n"
                   "            proxy_http_version 1.1;\n            proxy_set_header Connection \"\";\n"
                   "            proxy_buffering off;\n"
                   "            proxy_read_timeout 600s;\n",
                api ? "/v1/" : "/");
        if (api) put_directives(f, &setup->proxy, 'l', "            ");
        fprintf(f, "        }\n");
    }
    fprintf(f, "        location = /stub_status {\n            stub_status;\n        }\n    }\n}\n");
    if (fclose(f)) {
        snprintf(err, cap, "cannot write %s: %s", conf, strerror(errno));
        return -1;
    }
    char prefix[600];
    snprintf(prefix, sizeof prefix, "%s/", d);
    char *argv[] = {exe, "-p", prefix, "-c", conf, "-e", log, NULL};
    char out[640];
    snprintf(out, sizeof out, "%s/stdout.log", d);
    px->pid = spawn(argv, out);
    snprintf(px->base, sizeof px->base, "http://127.0.0.1:%d", port);
    for (double end = sl_now_s() + 30; px->pid > 0 && sl_now_s() < end && waitpid(px->pid, NULL, WNOHANG) == 0;
         usleep(50000))
        if (healthy(px->base)) return 0;
    snprintf(err, cap, "nginx did not start proxying (its log: %s)", log);
    stop_process(px->pid, 5);
    px->pid = -1;
    return -1;
}

/* Starts nginx-prometheus-exporter (Debian: prometheus-nginx-exporter) on a free port, reading
 * the proxy's stub_status: the gateway's requests in flight, as a gateway's monitoring sees them
 * (VLLMUpstreamBottleneck). Its port, once /metrics answers, or -1 with err. */
static int exporter_start(const scenario_t *s, const char *phase, const proxy_t *px, const char *tmp, pid_t *pid,
                          char *err, size_t cap) {
    char exe[4096];
    *pid = -1;
    if (find_in_path(NGINX_EXPORTER, exe, sizeof exe)) {
        snprintf(err, cap, "--prometheus watches the scenario's gateway with " NGINX_EXPORTER
                           ", not on PATH (Debian: apt-get install " NGINX_EXPORTER ")");
        return -1;
    }
    const int port = free_port();
    char uri[128], listen[64], log[640], base[64];
    snprintf(uri, sizeof uri, "--nginx.scrape-uri=%s/stub_status", px->base);
    snprintf(listen, sizeof listen, "--web.listen-address=127.0.0.1:%d", port);
    snprintf(log, sizeof log, "%s/%.64s-%s-nginx-exporter.log", tmp, s->name, phase);
    snprintf(base, sizeof base, "http://127.0.0.1:%d", port);
    char *argv[] = {exe, uri, listen, NULL};
    *pid = port > 0 ? spawn(argv, log) : -1;
    for (double end = sl_now_s() + 30; *pid > 0 && sl_now_s() < end && waitpid(*pid, NULL, WNOHANG) == 0;
         usleep(50000))
        if (http(base, "/metrics", NULL, NULL, NULL) == 200) return port;
    snprintf(err, cap, NGINX_EXPORTER " did not start (its log: %s)", log);
    stop_process(*pid, 5);
    *pid = -1;
    return -1;
}

/* Starts `servelab diagnose --json` over window against base (its report into report_path,
 * its stderr into err_path); the pid, or -1. */
static pid_t spawn_diagnose(const char *base, const char *window, const char *log, const char *baseline_report,
                            const char *golden, const char *golden_request, int expected_inflight,
                            const char *report_path, const char *err_path) {
    argv_t dg = {0};
    const char *dhead[] = {self_exe, "diagnose", "--url", base, "--window", window, "--interval", "0.5s", "--json",
                           "--log", log};
    for (size_t i = 0; i < sizeof dhead / sizeof dhead[0]; i++) argv_add(&dg, dhead[i]);
    if (baseline_report) argv_add(&dg, "--baseline"), argv_add(&dg, baseline_report);
    if (golden) argv_add(&dg, "--golden"), argv_add(&dg, golden);
    if (golden && golden_request) argv_add(&dg, "--golden-request"), argv_add(&dg, golden_request);
    char inflight[16];
    snprintf(inflight, sizeof inflight, "%d", expected_inflight);
    if (expected_inflight > 0) argv_add(&dg, "--expected-inflight"), argv_add(&dg, inflight);
    /* diagnose's stdout is the report; its stderr goes beside it. */
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, report_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_addopen(&fa, 2, err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    int rc = posix_spawn(&pid, self_exe, &fa, NULL, dg.v, environ);
    posix_spawn_file_actions_destroy(&fa);
    argv_free(&dg);
    return rc ? -1 : pid;
}

/* With gates: one `bench serve` run of the phase's load to its end (gate_prompts requests, the
 * faults still set), its result saved for the gates (`bench compare`'s input). 0, or -1 with
 * p->err. */
static int gate_run(const scenario_t *s, const char *name, const scn_setup_t *setup, const char *load_base,
                    const char *tmp, phase_t *p) {
    char n[16], out[512];
    snprintf(n, sizeof n, "%d", s->gate_prompts);
    snprintf(p->bench_path, sizeof p->bench_path, "%s/%.64s-%s-bench.json", tmp, s->name, name);
    snprintf(out, sizeof out, "%s/%.64s-%s-gate.log", tmp, s->name, name);
    argv_t a = {0};
    const char *head[] = {self_exe, "bench", "serve", "--base-url", load_base, "--model", s->model};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) argv_add(&a, head[i]);
    argv_add_all(&a, &setup->load);
    const char *tail[] = {"--num-prompts", n, "--seed", "1000", "--save-result", "--result-filename", p->bench_path};
    for (size_t i = 0; i < sizeof tail / sizeof tail[0]; i++) argv_add(&a, tail[i]);
    char what[96];
    snprintf(what, sizeof what, "gate run: bench serve, %d requests to their end", s->gate_prompts);
    progress(s, name, what);
    const int rc = run_to_end(a.v, out);
    argv_free(&a);
    if (rc) snprintf(p->err, sizeof p->err, "the gate run failed (its log: %s)", out);
    return rc;
}

/* The processes of one phase: its servers (the first is the scenario's), nginx, Prometheus. */
typedef struct {
    pid_t server[SCN_MAX_REPLICAS];
    int n_servers;
    proxy_t proxy;
    pid_t exporter; /* the gateway's, with --prometheus */
    prom_t prom;
} procs_t;

static void stop_all(procs_t *ps) {
    stop_process(ps->prom.pid, 10);
    stop_process(ps->exporter, 5);
    stop_process(ps->proxy.pid, 10);
    for (int i = 0; i < ps->n_servers; i++) stop_process(ps->server[i], 30);
}

/* Starts servelab serve on a free port (*port, its URL in base) with the setup's flags (the first
 * server also with the faults when they act from boot); 0 once /health answers, or -1 with
 * p->err. */
static int start_server(const scenario_t *s, const char *name, const scn_setup_t *setup, int replica,
                        const char *admin_key, const char *log, procs_t *ps, int *port_out, char *base,
                        size_t base_cap, phase_t *p) {
    const int port = *port_out = free_port();
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    snprintf(base, base_cap, "http://127.0.0.1:%d", port);
    /* The lab's admin API is on in every phase (the same series in each); the faults are set
     * through it once the load flows, so the incident happens under load, as a real one does,
     * not before the clients start. */
    argv_t srv = {0};
    const char *head[] = {self_exe, "serve", setup->model ? setup->model : s->model, "--host", "127.0.0.1",
                          "--port", port_s, "--enable-fault-injection", "--admin-key", admin_key};
    for (size_t i = 0; i < sizeof head / sizeof head[0]; i++) argv_add(&srv, head[i]);
    if (setup->model) /* another checkpoint under the same name: clients and golden prompts unchanged */
        argv_add(&srv, "--served-model-name"), argv_add(&srv, s->model);
    argv_add_all(&srv, &setup->server);
    if (s->watch_boot && replica == 0) /* the faults act from boot, as --fault sets them */
        for (int i = 0; i < setup->faults.n; i++) argv_add(&srv, "--fault"), argv_add(&srv, setup->faults.v[i]);
    char what[64] = "starting servelab serve";
    if (s->replicas > 1) snprintf(what, sizeof what, "starting servelab serve (replica %d)", replica + 1);
    progress(s, name, what);
    const pid_t pid = port > 0 ? spawn(srv.v, log) : -1;
    argv_free(&srv);
    if (pid < 0) {
        snprintf(p->err, sizeof p->err, "could not start servelab serve");
        return -1;
    }
    ps->server[ps->n_servers++] = pid;
    bool up = false;
    for (double deadline = sl_now_s() + 300; !up && sl_now_s() < deadline && waitpid(pid, NULL, WNOHANG) == 0;)
        if (!(up = healthy(base))) usleep(100000);
    if (!up) snprintf(p->err, sizeof p->err, "servelab serve did not become healthy (its log: %s)", log);
    return up ? 0 : -1;
}

/* One phase of s, compared with `against` (NULL: it is the baseline): `baseline_of` names the scenario
 * whose baseline that is (s's own, or the one whose baseline s shares), which recorded the golden
 * answers and whose Prometheus history the phase's continues. */
static void run_phase(const scenario_t *s, const char *name, const scn_setup_t *setup, const char *tmp,
                      const phase_t *against, const char *baseline_of, const prom_cfg_t *prom, phase_t *p) {
    const char *baseline_report = against ? against->report_path : NULL;
    memset(p, 0, sizeof *p);
    procs_t ps = {.proxy.pid = -1, .exporter = -1, .prom.pid = -1};
    char base[64], log[512], load_log[512], window[32];
    /* tmp is short (mkdtemp's /tmp/servelab-scenario-XXXXXX) and names are file names. */
    snprintf(log, sizeof log, "%s/%.64s-%s-serve.log", tmp, s->name, name);
    snprintf(load_log, sizeof load_log, "%s/%.64s-%s-load.log", tmp, s->name, name);
    snprintf(p->report_path, sizeof p->report_path, "%s/%.64s-%s-report.json", tmp, s->name, name);
    snprintf(window, sizeof window, "%gs", s->window_s);
    char admin_key[40];
    snprintf(admin_key, sizeof admin_key, "scenario-%d-%ld", (int)getpid(), (long)sl_now_s());

    /* The first server is the scenario's: faults, diagnose and Prometheus act on it. */
    char bases[SCN_MAX_REPLICAS][64];
    const int n = setup->proxied ? s->replicas : 1;
    int ports[SCN_MAX_REPLICAS];
    for (int i = 0; i < n; i++) {
        char rlog[512];
        snprintf(rlog, sizeof rlog, "%s/%.64s-%s-serve-%d.log", tmp, s->name, name, i + 1);
        if (start_server(s, name, setup, i, admin_key, i ? rlog : log, &ps, &ports[i], bases[i], sizeof bases[i],
                         p)) {
            stop_all(&ps);
            return;
        }
    }
    snprintf(base, sizeof base, "%s", bases[0]);
    const char *load_base = base; /* where the clients connect: the proxy when there is one */
    if (setup->proxied) {
        progress(s, name, n > 1 ? "starting nginx in front of the replicas" : "starting nginx in front");
        if (proxy_start(s, name, setup, ports, n, tmp, &ps.proxy, p->err, sizeof p->err)) {
            stop_all(&ps);
            return;
        }
        load_base = ps.proxy.base;
    }
    /* Warm-up before Prometheus: every phase's Prometheus then starts at the same point of its
     * phase, just before the load, which aligns the baseline's history (prom_start). */
    if (setup->warmup.n && run_warmup(s, name, load_base, &setup->warmup, tmp, p->err, sizeof p->err)) {
        stop_all(&ps);
        return;
    }
    if (prom) {
        int gateway = 0;
        if (setup->proxied) {
            progress(s, name, "starting " NGINX_EXPORTER " (the gateway's metrics)");
            if ((gateway = exporter_start(s, name, &ps.proxy, tmp, &ps.exporter, p->err, sizeof p->err)) < 0) {
                stop_all(&ps);
                return;
            }
        }
        progress(s, name, "starting Prometheus (the alert rules, windows of seconds)");
        if (prom_start(prom, s, name, tmp, baseline_of, against, ports[0], gateway, &ps.prom, p, p->err,
                       sizeof p->err)) {
            stop_all(&ps);
            return;
        }
        p->prom = true;
        prom_rule_for(&ps.prom, s->expect, p->expect_rule, sizeof p->expect_rule);
    }
    char golden[512], diag_out[512];
    snprintf(golden, sizeof golden, "%s/%.64s-golden.json", tmp, baseline_of);
    snprintf(diag_out, sizeof diag_out, "%s/%.64s-%s-diagnose.err", tmp, s->name, name);

    load_t load = {.log = load_log};
    pthread_mutex_init(&load.mu, NULL);
    const char *lhead[] = {self_exe, "bench", "serve", "--base-url", load_base, "--model", s->model};
    for (size_t i = 0; i < sizeof lhead / sizeof lhead[0]; i++) argv_add(&load.argv, lhead[i]);
    argv_add_all(&load.argv, &setup->load);
    pid_t diag = -1;
    if (s->watch_boot) {
        /* The first requests after boot are the point: diagnose takes its first scrape before
         * the load starts, and its window holds them. */
        char what[160];
        snprintf(what, sizeof what, "diagnose watches %gs from before the first request", s->window_s);
        progress(s, name, what);
        diag = spawn_diagnose(base, window, log, baseline_report, NULL, NULL, s->expected_inflight, p->report_path,
                              diag_out);
        usleep(500000);
    }
    double served0[SCN_MAX_REPLICAS];
    for (int i = 0; i < n; i++) served0[i] = metric_total(bases[i], "vllm:request_success_total");
    pthread_create(&load.thread, NULL, load_main, &load);
    double hold_end = sl_now_s() + PROM_HOLD_S;
    if (!s->watch_boot) {
        progress(s, name, "load started (bench serve); waiting for tokens");
        if (wait_for_tokens(base, load_log, p->err, sizeof p->err) ||
            set_faults(base, admin_key, setup, p->err, sizeof p->err) ||
            (s->golden && !baseline_report && record_golden(s, name, base, golden, tmp, p->err, sizeof p->err))) {
            load_stop(&load);
            stop_all(&ps);
            return;
        }
        hold_end = sl_now_s() + PROM_HOLD_S;
        char what[160];
        char hold[64] = "";
        if (prom) snprintf(hold, sizeof hold, "; Prometheus until the load has run %g s", PROM_HOLD_S);
        snprintf(what, sizeof what, "%sdiagnose watches %gs after %gs%s", setup->faults.n ? "faults set; " : "",
                 s->window_s, s->settle_s, hold);
        progress(s, name, what);
        struct timespec ts = {(time_t)s->settle_s, (long)((s->settle_s - floor(s->settle_s)) * 1e9)};
        while (nanosleep(&ts, &ts) && errno == EINTR) {}
        for (int i = 0; i < n; i++) served0[i] = metric_total(bases[i], "vllm:request_success_total");
        diag = spawn_diagnose(base, window, log, baseline_report, s->golden ? golden : NULL, setup->golden_request,
                              s->expected_inflight, p->report_path, diag_out);
    }
    /* diagnose's window; with Prometheus, the alerts polled meanwhile and until hold_end */
    int status = 0;
    bool ran = false;
    while (diag > 0) {
        if (!ran) {
            const pid_t w = waitpid(diag, &status, prom ? WNOHANG : 0);
            if (w < 0) break;
            ran = w == diag;
        }
        if (prom) prom_poll(&ps.prom, p);
        if (ran && (!prom || sl_now_s() >= hold_end)) break;
        if (prom) usleep(500000);
    }
    /* the requests each replica finished over the window (balancing, seen from the servers) */
    p->n_replicas = n;
    for (int i = 0; i < n; i++) p->served[i] = metric_total(bases[i], "vllm:request_success_total") - served0[i];
    load_stop(&load);
    if (s->gates.n && ran && gate_run(s, name, setup, load_base, tmp, p)) {
        stop_all(&ps);
        return;
    }
    stop_all(&ps);
    int code = ran && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    if (code != 0 && code != 3) {
        snprintf(p->err, sizeof p->err, "servelab diagnose failed (exit %d; %s)", code, diag_out);
        return;
    }

    if (read_report(p)) return;
    p->ok = true;
}

/* ---- verdicts --------------------------------------------------------------------- */

typedef struct {
    phase_t base, incident, remedy;
    bool ran_remedy, matched, moved, remedy_helped;
    bool watched;           /* --prometheus */
    const char *alert_rule; /* the rule whose cause is the expected one (NULL: none has it) */
    bool alerts_ok;         /* the alerts agreed (the header says how) */
    int broke_incident, broke_remedy; /* with gates: how many the phase broke (-1: not judged) */
    char broke_incident_list[512], broke_remedy_list[512];
} result_t;

static double measure(const phase_t *p, const scenario_t *s) {
    return s->measure && p->ok ? p->m.v[diag_measure_index(s->measure)] : NAN;
}

static cJSON *read_json(const char *path) {
    size_t len;
    sl_err_t err;
    char *text = path[0] ? sl_read_file(path, 16 << 20, &len, &err) : NULL;
    cJSON *j = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    return j;
}

/* The gates of s for the result file `now` against `base`, by `bench compare`'s logic
 * (bench_gate_ok): the broken ones listed in broke ("NAME=+P% (+X%)"); their number, or -1 when
 * a phase did not run or a file lacks a gated figure. */
static int gates_broken(const scenario_t *s, const phase_t *base, const phase_t *now, char *broke, size_t cap) {
    cJSON *b = base->ok ? read_json(base->bench_path) : NULL, *n = now->ok ? read_json(now->bench_path) : NULL;
    int count = b && n ? 0 : -1;
    broke[0] = 0;
    for (int i = 0; count >= 0 && i < s->gates.n; i++) {
        bench_gate_t g;
        sl_err_t err;
        const int parsed = bench_gate_parse(s->gates.v[i], &g, &err);
        SL_ASSERT(parsed == 0); /* checked when the file was loaded */
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(b, g.key), *y = cJSON_GetObjectItemCaseSensitive(n, g.key);
        if (!cJSON_IsNumber(x) || !cJSON_IsNumber(y)) {
            count = -1;
        } else if (!bench_gate_ok(&g, x->valuedouble, y->valuedouble)) {
            char one[160];
            snprintf(one, sizeof one, "%s (%+.0f%%)", s->gates.v[i],
                     x->valuedouble ? 100 * (y->valuedouble / x->valuedouble - 1) : INFINITY);
            list_add(broke, cap, one);
            count++;
        }
    }
    cJSON_Delete(b);
    cJSON_Delete(n);
    return count;
}

static void judge(const scenario_t *s, result_t *r) {
    double b = measure(&r->base, s), i = measure(&r->incident, s);
    r->moved = !s->measure || (isfinite(b) && isfinite(i) && (s->direction > 0 ? i > b : i < b));
    r->matched = r->incident.ok && !strcmp(r->incident.cause, s->expect) && r->moved;
    r->broke_incident = r->broke_remedy = -1;
    if (s->gates.n) { /* the release gates must catch the incident */
        r->broke_incident = gates_broken(s, &r->base, &r->incident, r->broke_incident_list,
                                         sizeof r->broke_incident_list);
        r->matched = r->matched && r->broke_incident > 0;
    }
    if (!r->ran_remedy) return;
    double m = measure(&r->remedy, s);
    bool back = !s->measure || (isfinite(m) && isfinite(i) && (s->direction > 0 ? m < i : m > i));
    r->remedy_helped = r->remedy.ok && strcmp(r->remedy.cause, s->expect) && back;
    if (s->gates.n) { /* and pass the remedy */
        r->broke_remedy = gates_broken(s, &r->base, &r->remedy, r->broke_remedy_list, sizeof r->broke_remedy_list);
        r->remedy_helped = r->remedy_helped && r->broke_remedy == 0;
    }
}

/* The alerts agree with the scenario: the incident fired the expected cause's rule (when one has
 * it) and the baseline did not, every alert the incident fired that the baseline had not names a
 * cause the diagnoser found too, and the remedy did not fire the expected cause's rule. What the
 * baseline fires is the lab load's own (bench serve's requests end on max_tokens, which
 * VLLMRunawayGeneration reads as runaway generation), judged against the baseline like every
 * other verdict. */
static void judge_alerts(result_t *r) {
    r->watched = true;
    const phase_t *inc = &r->incident;
    r->alert_rule = inc->expect_rule[0] ? inc->expect_rule : NULL;
    bool agree = inc->ok && r->base.ok;
    const char *a = inc->alerts, *c = inc->alert_causes;
    while (*a && *c) { /* the two lists walk together */
        while (*a == ',' || *a == ' ') a++;
        while (*c == ',' || *c == ' ') c++;
        const size_t na = strcspn(a, ", "), nc = strcspn(c, ", ");
        char name[64], cause[64];
        snprintf(name, sizeof name, "%.*s", (int)na, a);
        snprintf(cause, sizeof cause, "%.*s", (int)nc, c);
        if (na && !list_has(r->base.alerts, name) && !list_has(inc->ranked, cause) &&
            strcmp(inc->cause ? inc->cause : "", cause))
            agree = false;
        a += na, c += nc;
    }
    const bool fired = !r->alert_rule || (list_has(inc->alerts, r->alert_rule) && !list_has(r->base.alerts, r->alert_rule));
    const bool gone = !r->ran_remedy || (r->remedy.ok && (!r->alert_rule || !list_has(r->remedy.alerts, r->alert_rule)));
    r->alerts_ok = agree && fired && gone;
}

static void print_phase(const scenario_t *s, const char *what, const phase_t *p) {
    if (!p->ok) {
        printf("  %-9s FAILED: %s\n", what, p->err);
        return;
    }
    printf("  %-9s %-23s", what, p->cause);
    if (s->measure) printf(" %s %.4g", s->measure, measure(p, s));
    if (p->ranked[0] && strcmp(p->ranked, p->cause)) printf("  (fired: %s)", p->ranked);
    if (p->prom) printf("  alerts: %s", p->alerts[0] ? p->alerts : "none");
    if (p->n_replicas > 1) {
        printf("  served:");
        for (int i = 0; i < p->n_replicas; i++) printf("%s%.0f", i ? " / " : " ", p->served[i]);
    }
    printf("\n");
}

static void print_result(const scenario_t *s, const result_t *r) {
    printf("== %s: %s (seed %s, %s)\n", s->name, s->title, s->seed, s->section);
    if (s->imitation) printf("  imitation: %s\n", s->imitation);
    print_phase(s, "baseline", &r->base);
    print_phase(s, "incident", &r->incident);
    if (r->ran_remedy) print_phase(s, "remedy", &r->remedy);
    if (s->measure) printf("  symptom:  %s %s: %s (%s)\n", s->measure, s->direction > 0 ? "up" : "down",
                           r->moved ? "yes" : "NO", s->where);
    if (s->gates.n) {
        printf("  gates:    bench compare BASELINE INCIDENT");
        for (int i = 0; i < s->gates.n; i++) printf(" --gate %s", s->gates.v[i]);
        printf("\n            incident: %s", r->broke_incident < 0 ? "not judged (a gate run is missing)"
                                              : r->broke_incident ? "broke " : "all held (NOT CAUGHT)");
        if (r->broke_incident > 0) printf("%s", r->broke_incident_list);
        if (r->ran_remedy)
            printf("; remedy: %s%s", r->broke_remedy < 0 ? "not judged" : r->broke_remedy ? "broke " : "all held",
                   r->broke_remedy > 0 ? r->broke_remedy_list : "");
        printf("\n");
    }
    printf("  expected: %s, found: %s: %s\n", s->expect, r->incident.ok ? r->incident.cause : "-",
           r->matched ? "MATCH" : "MISMATCH");
    if (s->remedy_text) printf("  remedy:   %s", s->remedy_text);
    if (r->ran_remedy) printf(": %s", r->remedy_helped ? "helped" : "DID NOT HELP");
    if (s->remedy_text) printf("\n");
    if (r->watched) {
        printf("  alerts:   ");
        if (r->alert_rule) printf("%s (the rule for %s) new in the incident, ", r->alert_rule, s->expect);
        else printf("no rule for %s; ", s->expect);
        printf("the incident's other new alerts what the diagnoser found%s: %s\n",
               r->alert_rule && r->ran_remedy ? ", the rule quiet in the remedy" : "",
               r->alerts_ok ? "AGREE" : "DISAGREE");
    }
    fflush(stdout);
}

static cJSON *phase_json(const scenario_t *s, const phase_t *p) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddBoolToObject(o, "ok", p->ok);
    if (!p->ok) {
        cJSON_AddStringToObject(o, "error", p->err);
        return o;
    }
    cJSON_AddStringToObject(o, "cause", p->cause);
    cJSON_AddStringToObject(o, "ranked", p->ranked);
    double v = measure(p, s);
    if (s->measure) cJSON_AddItemToObject(o, s->measure, isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull());
    cJSON_AddStringToObject(o, "report", p->report_path);
    if (p->n_replicas > 1) {
        cJSON *served = cJSON_AddArrayToObject(o, "served");
        for (int i = 0; i < p->n_replicas; i++) cJSON_AddItemToArray(served, cJSON_CreateNumber(p->served[i]));
    }
    if (p->prom) {
        cJSON *alerts = cJSON_AddArrayToObject(o, "alerts");
        for (const char *a = p->alerts; *a;) {
            while (*a == ',' || *a == ' ') a++;
            const size_t n = strcspn(a, ", ");
            char name[64];
            snprintf(name, sizeof name, "%.*s", (int)n, a);
            if (n) cJSON_AddItemToArray(alerts, cJSON_CreateString(name));
            a += n;
        }
    }
    return o;
}

static cJSON *result_json(const scenario_t *s, const result_t *r) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", s->name);
    cJSON_AddStringToObject(o, "title", s->title);
    cJSON_AddStringToObject(o, "seed", s->seed);
    cJSON_AddStringToObject(o, "expected", s->expect);
    cJSON_AddStringToObject(o, "found", r->incident.ok ? r->incident.cause : "");
    cJSON_AddBoolToObject(o, "matched", r->matched);
    cJSON_AddBoolToObject(o, "symptom_moved", r->moved);
    if (s->measure) cJSON_AddStringToObject(o, "measure", s->measure);
    cJSON_AddItemToObject(o, "baseline", phase_json(s, &r->base));
    cJSON_AddItemToObject(o, "incident", phase_json(s, &r->incident));
    if (r->ran_remedy) {
        cJSON_AddItemToObject(o, "remedy", phase_json(s, &r->remedy));
        cJSON_AddBoolToObject(o, "remedy_helped", r->remedy_helped);
    }
    if (s->gates.n) {
        cJSON *g = cJSON_AddObjectToObject(o, "gates_broken");
        const char *lists[] = {r->broke_incident_list, r->broke_remedy_list};
        const int counts[] = {r->broke_incident, r->broke_remedy};
        for (int k = 0; k < (r->ran_remedy ? 2 : 1); k++) {
            cJSON *arr = counts[k] < 0 ? cJSON_CreateNull() : cJSON_CreateArray();
            for (const char *at = lists[k]; counts[k] > 0 && *at;) { /* "NAME=+P% (+X%), ..." */
                while (*at == ',' || *at == ' ') at++;
                const int len = (int)strcspn(at, ",");
                char one[160];
                snprintf(one, sizeof one, "%.*s", len, at);
                if (len) cJSON_AddItemToArray(arr, cJSON_CreateString(one));
                at += len;
            }
            cJSON_AddItemToObject(g, k ? "remedy" : "incident", arr);
        }
    }
    if (r->watched) {
        cJSON_AddItemToObject(o, "alert_rule", r->alert_rule ? cJSON_CreateString(r->alert_rule) : cJSON_CreateNull());
        cJSON_AddBoolToObject(o, "alerts_agree", r->alerts_ok);
    }
    return o;
}

/* Runs s; true when it matched (and its remedy helped, when run). Its baseline is `shared`'s
 * measurement when that is given (another scenario's, named shared_of, with the same baseline
 * phase: scenario_same_baseline), else measured here; either way it is left in *base for the
 * scenarios after it (the caller frees base->cause). */
/* Makes each model a setup of s serves that is missing (no config.json) with its "make_models"
 * command, run from the repository's root; 0, or -1 with err. */
static int make_models(const scenario_t *s, bool remedy, const char *tmp, char *err, size_t cap) {
    const char *dirs[] = {s->model, s->incident.model, remedy ? s->remedy.model : NULL};
    for (int k = 0; k < 3; k++) {
        char config[4200];
        if (!dirs[k]) continue;
        snprintf(config, sizeof config, "%s/config.json", dirs[k]);
        if (access(config, F_OK) == 0) continue;
        int i = 0;
        while (i < s->n_make && strcmp(s->make_dir[i], dirs[k])) i++;
        if (i == s->n_make) {
            snprintf(err, cap, "the model %s is missing and \"make_models\" does not say how to make it", dirs[k]);
            return -1;
        }
        char out[512], what[1024];
        snprintf(out, sizeof out, "%s/%.64s-make-model-%d.log", tmp, s->name, k);
        snprintf(what, sizeof what, "making %.200s with %.200s (once; its log: %s)", dirs[k], s->make_cmd[i].v[0], out);
        progress(s, "setup", what);
        argv_t a = {0};
        argv_add_all(&a, &s->make_cmd[i]);
        const int rc = run_to_end(a.v, out);
        argv_free(&a);
        if (rc || access(config, F_OK)) {
            snprintf(err, cap, "making the model %s failed (its log: %s)", dirs[k], out);
            return -1;
        }
    }
    return 0;
}

static bool run_one(const scenario_t *s, bool remedy, const char *tmp, const prom_cfg_t *prom, const phase_t *shared,
                    const char *shared_of, phase_t *base, cJSON *json_out) {
    result_t r = {0};
    if (make_models(s, remedy, tmp, r.base.err, sizeof r.base.err)) {
        shared = NULL; /* nothing runs: reported as the baseline's failure */
    } else if (shared) {
        char what[160];
        snprintf(what, sizeof what, "the same as %.64s's: its measurement serves", shared_of);
        progress(s, "baseline", what);
        r.base = *shared;
        r.base.cause = sl_strdup(shared->cause);
    } else {
        run_phase(s, "baseline", &s->baseline, tmp, NULL, s->name, prom, &r.base);
    }
    const char *baseline_of = shared ? shared_of : s->name;
    if (r.base.ok) {
        run_phase(s, "incident", &s->incident, tmp, &r.base, baseline_of, prom, &r.incident);
        if (remedy && s->remedy_text) {
            r.ran_remedy = true;
            if (scenario_remedy_is_baseline(s)) {
                progress(s, "remedy", "the baseline's setup again: the baseline's measurement serves");
                r.remedy = r.base;
                r.remedy.cause = sl_strdup(r.base.cause);
            } else {
                run_phase(s, "remedy", &s->remedy, tmp, &r.base, baseline_of, prom, &r.remedy);
            }
        }
    } else {
        snprintf(r.incident.err, sizeof r.incident.err, "not run: the baseline failed");
    }
    judge(s, &r);
    if (prom) judge_alerts(&r);
    if (json_out) cJSON_AddItemToArray(json_out, result_json(s, &r));
    else print_result(s, &r);
    bool ok = r.matched && (!r.ran_remedy || r.remedy_helped) && (!prom || r.alerts_ok);
    *base = r.base;
    free(r.incident.cause);
    free(r.remedy.cause);
    return ok;
}

/* ---- the command ------------------------------------------------------------------- */

/* run --all --skip LIST: drops LIST's names (comma-separated) from the n
 * files, keeping their order; the dropped ones are freed. A name that is not
 * a scenario of dir is an error (one line), not a no-op. */
static int skip_names(const char *list, char **files, int *n, const char *dir) {
    char *copy = sl_strdup(list), *save = NULL;
    int rc = 0;
    for (char *name = strtok_r(copy, ",", &save); name && !rc; name = strtok_r(NULL, ",", &save)) {
        int k = 0;
        while (k < *n && strcmp(files[k], name)) k++;
        if (k == *n) {
            fprintf(stderr, "servelab: error: argument --skip: no scenario %s in %s\n", name, dir);
            rc = 2;
            continue;
        }
        free(files[k]);
        memmove(files + k, files + k + 1, (size_t)(*n - k - 1) * sizeof *files);
        (*n)--;
    }
    free(copy);
    return rc;
}

int cli_scenario(int argc, char **argv) {
    const char *dir = SCN_DEFAULT_DIR, *verb = NULL, *skip = NULL;
    bool all = false, remedy = false, json = false, watch = false;
    char **names = sl_calloc((size_t)argc + 1, sizeof *names);
    int n_names = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("%s\nThe lab's incidents, one per lab/scenarios/NAME.json: a healthy baseline, the incident\n"
                   "and its remedy, each a servelab serve under bench serve load, judged by servelab diagnose\n"
                   "(docs/lab.md, \"Scenarios\").\n\n  --all      every scenario\n  --skip NAME,...  with --all: every scenario but these\n  --remedy   also run the "
                   "remedy and compare\n  --prometheus  also watch each phase with a real Prometheus and the alert rules "
                   "(windows of seconds)\n  --json     one JSON array of results\n  --dir DIR  the scenario "
                   "files (%s)\n", scn_usage, SCN_DEFAULT_DIR);
            free(names);
            return 0;
        }
        if (!strcmp(a, "--dir") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(a, "--all")) all = true;
        else if (!strcmp(a, "--skip") && i + 1 < argc) skip = argv[++i];
        else if (!strcmp(a, "--remedy")) remedy = true;
        else if (!strcmp(a, "--prometheus")) watch = true;
        else if (!strcmp(a, "--json")) json = true;
        else if (a[0] == '-') cli_usage_error(scn_usage, "unrecognized arguments: %s", a);
        else if (!verb) verb = a;
        else names[n_names++] = (char *)a;
    }
    if (!verb || (strcmp(verb, "list") && strcmp(verb, "show") && strcmp(verb, "run")))
        cli_usage_error(scn_usage, "argument command: invalid choice: '%s' (choose from 'list', 'show', 'run')",
                        verb ? verb : "");
    if (!strcmp(verb, "show") && n_names != 1) cli_usage_error(scn_usage, "show takes one scenario name");
    if (!strcmp(verb, "run") && (all == (n_names > 0)))
        cli_usage_error(scn_usage, "run takes scenario names or --all, not both");
    if (skip && !(all && !strcmp(verb, "run"))) cli_usage_error(scn_usage, "--skip goes with run --all");

    int n_files = 0;
    char **files = list_names(dir, &n_files);
    if (!files) {
        fprintf(stderr, "servelab: error: cannot read the scenario directory %s: %s\n", dir, strerror(errno));
        free(names);
        return 2;
    }
    char **run_names = all || !strcmp(verb, "list") ? files : names;
    int n_run = all || !strcmp(verb, "list") ? n_files : n_names;
    if (skip) {
        int rc_skip = skip_names(skip, files, &n_files, dir);
        n_run = n_files;
        if (rc_skip) {
            free_names(files, n_files);
            free(names);
            return rc_skip;
        }
    }
    scenario_t *scn = sl_calloc((size_t)(n_run ? n_run : 1), sizeof *scn);
    int bad = 0;
    for (int i = 0; i < n_run; i++) bad |= load_one(dir, run_names[i], &scn[i]) != 0;
    int rc = bad ? 2 : 0;
    if (!bad && !strcmp(verb, "list")) {
        for (int i = 0; i < n_run; i++)
            printf("%-28s seed %s  %-23s %s%s\n", scn[i].name, scn[i].seed, scn[i].expect, scn[i].title,
                   scn[i].imitation ? " (imitated)" : "");
    } else if (!bad && !strcmp(verb, "show")) {
        show(&scn[0]);
    } else if (!bad) {
        if (readlink("/proc/self/exe", self_exe, sizeof self_exe - 1) <= 0) {
            fprintf(stderr, "servelab: error: cannot find this program's path (/proc/self/exe)\n");
            rc = 1;
        }
        char tmp[] = "/tmp/servelab-scenario-XXXXXX";
        if (!rc && !mkdtemp(tmp)) {
            fprintf(stderr, "servelab: error: cannot make a temporary directory: %s\n", strerror(errno));
            rc = 1;
        }
        prom_cfg_t prom = {0};
        if (!rc && watch) {
            size_t len;
            sl_err_t rerr;
            char *text = sl_read_file(SCN_ALERT_RULES, 1 << 20, &len, &rerr), perr[256] = "";
            if (find_in_path("prometheus", prom.exe, sizeof prom.exe)) {
                fprintf(stderr, "servelab: error: argument --prometheus: no prometheus binary on PATH (Debian: "
                                "apt-get install prometheus)\n");
                rc = 2;
            } else if (!text || !(prom.rules = scenario_shorten_rules(text, PROM_WINDOW, PROM_FOR, "1s", perr,
                                                                      sizeof perr))) {
                fprintf(stderr, "servelab: error: argument --prometheus: %s: %s\n", SCN_ALERT_RULES,
                        text ? perr : "cannot read it (run from the repository's root)");
                rc = 2;
            } else {
                free(prom.rules); /* it shortens: each phase shortens the text with its own offset */
                prom.rules = text, text = NULL;
            }
            free(text);
        }
        cJSON *out = json ? cJSON_CreateArray() : NULL;
        if (!rc) {
            curl_global_init(CURL_GLOBAL_DEFAULT);
            signal(SIGPIPE, SIG_IGN);
            fprintf(stderr, "scenario: logs and reports in %s\n", tmp);
            /* Scenarios with the same baseline phase share its measurement: they run one after
             * the other, after the first of them, which measures it; results keep file order. */
            phase_t *bases = sl_calloc((size_t)n_run, sizeof *bases);
            int *order = sl_calloc((size_t)n_run, sizeof *order), n_order = 0;
            bool *queued = sl_calloc((size_t)n_run, sizeof *queued);
            for (int i = 0; i < n_run; i++)
                for (int k = i; k < n_run && !(k == i && queued[i]); k++)
                    if (!queued[k] && (k == i || scenario_same_baseline(&scn[i], &scn[k])))
                        queued[k] = true, order[n_order++] = k;
            SL_ASSERT(n_order == n_run);
            cJSON **items = sl_calloc((size_t)n_run, sizeof *items);
            for (int o = 0; o < n_run; o++) {
                const int i = order[o];
                int j = -1;
                for (int q = 0; q < o && j < 0; q++)
                    if (bases[order[q]].ok && scenario_same_baseline(&scn[order[q]], &scn[i])) j = order[q];
                cJSON *one = out ? cJSON_CreateArray() : NULL;
                if (!run_one(&scn[i], remedy, tmp, watch ? &prom : NULL, j >= 0 ? &bases[j] : NULL,
                             j >= 0 ? scn[j].name : NULL, &bases[i], one))
                    rc = 1;
                if (one) items[i] = cJSON_DetachItemFromArray(one, 0), cJSON_Delete(one);
            }
            for (int i = 0; out && i < n_run; i++) cJSON_AddItemToArray(out, items[i]);
            for (int i = 0; i < n_run; i++) free(bases[i].cause);
            free(bases), free(order), free(queued), free(items);
        }
        free(prom.rules);
        if (out) {
            char *text = cJSON_Print(out);
            printf("%s\n", text);
            free(text);
            cJSON_Delete(out);
        }
    }
    for (int i = 0; i < n_run; i++) scenario_free(&scn[i]);
    free(scn);
    free_names(files, n_files);
    free(names);
    return rc;
}
