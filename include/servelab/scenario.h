/* scenario.h - a lab scenario: one playbook incident, reproduced, diagnosed and remedied.
 *
 * A scenario file (lab/scenarios/NAME.json, docs/lab.md "Scenarios") names the seed and
 * section it reproduces, the model, three setups of the server and its load (the healthy
 * baseline, the incident, the remedy), the symptom an operator sees (a `servelab diagnose`
 * measure and its direction against the baseline, and where to look), and the cause the
 * diagnoser must name. The incident and the remedy inherit each part they leave out (server
 * flags, faults, load flags) from the baseline. Real settings come first; a fault only where no
 * setting can do it (`imitation` then says what is imitated). Output incidents name golden
 * prompts (`golden`) whose answers the baseline records. A setup with `proxy` puts a real nginx
 * in front of the server (a gateway's limits, seed 004's "bottleneck upstream from vLLM"), and
 * `replicas` starts several servers behind it. Parsing is pure; running is
 * `servelab scenario` (src/cli/scenario.c).
 */
#ifndef SERVELAB_SCENARIO_H
#define SERVELAB_SCENARIO_H

#include <stdbool.h>
#include <stddef.h>

#define SCN_MAX_REPLICAS 8 /* the most servers a scenario puts behind its proxy ("replicas") */

typedef struct {
    char **v;
    int n;
} scn_args_t;

typedef struct {
    scn_args_t server;  /* `servelab serve MODEL` flags */
    scn_args_t faults;  /* --fault specs, NAME[:key=value,...] */
    scn_args_t load;    /* `servelab bench serve` flags (base URL and model are the runner's) */
    scn_args_t warmup;  /* `servelab bench serve` flags of a run that ends before the load starts
                         * (empty: none): warm-up requests before taking traffic */
    char *model;        /* NULL, or a model directory served in the scenario's model's place
                         * under its name (a release that swapped the checkpoint) */
    char *golden_request; /* NULL, or a JSON object: the request fields the golden prompts go
                         * with (`diagnose --golden-request`; null: not sent), as a client sends
                         * them (a test that leaves temperature to the server) */
    bool proxied;       /* a real nginx in front: the load goes through it */
    scn_args_t proxy;   /* nginx directives for its `location /` (one simple directive each, no
                         * ';' or braces); limit_req_zone and limit_conn_zone go to `http` */
} scn_setup_t;

typedef struct {
    char *name;         /* the file's name without .json */
    char *title, *seed, *section, *quote;
    char *model;        /* MODEL_DIR */
    char *imitation;    /* NULL, or what a fault stands in for (a GPU, a network) */
    char *golden;       /* NULL, or a golden prompts file (`servelab diagnose --golden`): the
                         * baseline records its answers, the other phases replay them */
    scn_setup_t baseline, incident, remedy;
    char *remedy_text;  /* the playbook's remedy, in words; NULL: none (the healthy baseline only) */
    char *expect;       /* the cause `servelab diagnose` must name (diagnose.h) */
    char *measure;      /* the symptom: a diagnose measure (diag_measure_names); NULL: none (healthy) */
    int direction;      /* +1: it rises in the incident, -1: it falls */
    char *where;        /* where an operator sees it (a series, a log line) */
    double window_s, settle_s; /* diagnose's window; load before it starts */
    int expected_inflight; /* 0, or the requests the clients hold (diagnose --expected-inflight) */
    scn_args_t gates;   /* `servelab bench compare` gates (NAME=+P% or NAME=-P%): each phase also
                         * runs `bench serve` to its end, gate_prompts requests, and the incident
                         * must break a gate against the baseline, the remedy none (empty: none) */
    int gate_prompts;   /* the requests of that run (50) */
    int n_make;         /* "make_models": how a model a setup names is made when it is missing */
    char **make_dir;    /* the model directories */
    scn_args_t *make_cmd; /* their commands: a program under tools/ and its arguments */
    int replicas;       /* servers behind the proxy (1 without one); faults and diagnose act on the
                         * first (its metrics are the scenario's), the others stay healthy */
    bool watch_boot;    /* "watch": "boot": faults are set at boot (--fault), and diagnose watches
                         * from before the load starts (the first requests after boot); else it
                         * watches once the load flows and the faults are set */
} scenario_t;

/* Parses a scenario document (JSON, len bytes) named `name`. 0, or -1 with
 * one line in err (the field and what is wrong); *s is then empty. */
int scenario_parse(const char *json, size_t len, const char *name, scenario_t *s, char *err, size_t err_len);
void scenario_free(scenario_t *s);

/* Whether a and b run the same baseline phase: the same model, baseline setup (server flags,
 * faults, load, warm-up), golden prompts, watch mode, window, settle time and expected in-flight
 * requests. Then one baseline measurement serves both (`scenario run` measures it once). */
bool scenario_same_baseline(const scenario_t *a, const scenario_t *b);

/* Whether s's remedy is its baseline setup again (the remedy undoes the incident's change, as
 * "restore --max-num-seqs 8" does). Then the baseline's measurement is the remedy's. */
bool scenario_remedy_is_baseline(const scenario_t *s);

/* Alert rules for a run of seconds (`scenario run --prometheus`): the rule file's text with every
 * range [5m] and subquery [5m:] made [window] and [window:], and every `for: D` made `for: hold`
 * (the rules' logic unchanged: shares over the window, as tests/e2e/test_alerts.py loads them);
 * with earlier (a duration, or NULL to leave them), every `offset D` made `offset earlier`: "an
 * hour ago" becomes the baseline phase's time. NULL (with err) when the text has another range,
 * which would need its own shortening. */
char *scenario_shorten_rules(const char *text, const char *window, const char *hold, const char *earlier, char *err,
                             size_t err_len);

#endif
