/* lab.h - fault injection: one table of named faults that make the server show a
 * playbook symptom on purpose (a throttled GPU, runaway generation, failing
 * requests), switched on at startup (--fault) or through the admin API.
 *
 * The table is pure: parsing `NAME[:key=value,...]`, validating parameters and
 * rendering the list need no engine or server and are unit-tested. A faults_t
 * holds the live state. Readers on hot paths (the engine, once per step) load
 * one atomic mask (faults_mask); everything else is under the table's mutex.
 * Every change logs one INFO line and moves servelab:fault_active{fault=...};
 * each injection counts in servelab:fault_injections_total{fault=...}.
 */
#ifndef SERVELAB_LAB_H
#define SERVELAB_LAB_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "servelab/metrics.h"

typedef enum { FAULT_STEP_DELAY, FAULT_SUPPRESS_EOS, FAULT_HTTP_ERROR, FAULT_COUNT } fault_id_t;
#define FAULT_BIT(id) (1u << (id))

/* http_error's answer kinds (bits of fault_params_t.types). */
typedef enum {
    FAULT_HTTP_RATE_LIMIT,      /* 429 */
    FAULT_HTTP_INVALID_API_KEY, /* 401 */
    FAULT_HTTP_CONTEXT_LENGTH,  /* 400 */
    FAULT_HTTP_SERVER_ERROR,    /* 503 */
    FAULT_HTTP_INVALID_REQUEST, /* 400 */
    FAULT_HTTP_MODEL_NOT_FOUND, /* 404 */
    FAULT_HTTP_N_TYPES
} fault_http_type_t;

/* One fault's parameters; only its own fields mean anything. */
typedef struct {
    int32_t ms;      /* step_delay: extra milliseconds per engine step, 1..60000 (required) */
    int32_t rate;    /* http_error: percent of requests failed, 0..100 (100) */
    uint32_t types;  /* http_error: FAULT_BIT of each fault_http_type_t drawn from (server_error) */
    int64_t count;   /* http_error: fail exactly the next count requests, then clear (0: no limit) */
} fault_params_t;

typedef struct {
    fault_id_t id;
    fault_params_t p;
} fault_spec_t;

/* A fault's name ("step_delay"), one-line description and playbook symptom
 * (static strings); id must be < FAULT_COUNT. */
const char *fault_name(fault_id_t id);
const char *fault_description(fault_id_t id);
const char *fault_symptom(fault_id_t id);

/* The fault called `name`: 0 and *id, or -1 with err naming the valid ones. */
int fault_lookup(const char *name, fault_id_t *id, char *err, size_t err_len);

/* Resets s to fault id with its default parameters. */
void fault_spec_init(fault_spec_t *s, fault_id_t id);

/* Sets one parameter from its text (units as in the table). 0, or -1 with err
 * saying what was wrong and listing the fault's valid parameters; s is
 * unchanged on error. */
int fault_param_set(fault_spec_t *s, const char *key, const char *value, char *err, size_t err_len);

/* Whether every required parameter is given: 0, or -1 with err. */
int fault_spec_check(const fault_spec_t *s, char *err, size_t err_len);

/* Parses `NAME[:key=value,...]`. A comma-separated piece without '=' continues
 * the previous value, so `http_error:types=rate_limit,server_error,count=2`
 * gives types "rate_limit,server_error". 0, or -1 with err (s undefined). */
int fault_parse_spec(const char *text, fault_spec_t *s, char *err, size_t err_len);

/* The parameters' current values as `key=value,...` (for logs); buf gets "" for none. */
void fault_params_format(const fault_spec_t *s, char *buf, size_t len);

/* ---- live state -------------------------------------------------------------------- */

typedef struct faults {
    _Atomic uint32_t mask;          /* FAULT_BIT of each active fault: the one hot-path read */
    _Atomic int32_t step_delay_ms;  /* copy of step_delay's ms, for the engine thread */
    /* Below: guarded by mu. */
    void *mu;                       /* pthread_mutex_t, kept opaque here */
    fault_params_t params[FAULT_COUNT];
    uint64_t rng;                   /* http_error's draws (splitmix64, from --seed) */
    metric_t *active_metric[FAULT_COUNT];
    metric_t *injections_metric[FAULT_COUNT];
} faults_t;

/* A table with every fault off; http_error draws from a generator seeded
 * with `seed`. Free with faults_free. */
faults_t *faults_new(uint64_t seed);
void faults_free(faults_t *f);

/* Registers servelab:fault_active and servelab:fault_injections_total on
 * `metrics` with one child per fault. Once, before any fault is set. */
void faults_bind_metrics(faults_t *f, metrics_t *metrics);

/* The active faults' bits; f may be NULL (none). One relaxed atomic load. */
static inline uint32_t faults_mask(const faults_t *f) {
    return f ? atomic_load_explicit(&((faults_t *)f)->mask, memory_order_relaxed) : 0;
}

/* Switches s's fault on with its parameters (replacing earlier ones), or a
 * fault off (no residue: its parameters go back to their defaults); logs one
 * INFO line each. faults_clear_all clears every active one. */
void faults_set(faults_t *f, const fault_spec_t *s);
void faults_clear(faults_t *f, fault_id_t id);
void faults_clear_all(faults_t *f);

/* Counts n injections of fault id (servelab:fault_injections_total). */
void faults_count(faults_t *f, fault_id_t id, int64_t n);

/* http_error, for one request: whether to fail it and, if so, the answer
 * (status, OpenAI error type, message; static strings). Draws from the
 * seeded generator, counts the injection, and clears the fault when its
 * count runs out. */
bool faults_http_error_draw(faults_t *f, int *status, const char **type, const char **message);

/* The list GET /admin/faults answers: a malloc'd JSON object
 * {"faults":[{"name","description","symptom","active","injections","params":[...]}]} */
char *faults_list_json(faults_t *f);

#endif
