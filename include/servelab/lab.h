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

/* The faults, in the order GET /admin/faults lists them. A new fault is a value
 * here, a row in faults.c's table, its fields in fault_params_t, and a check of
 * its bit where it acts (docs/lab.md). */
typedef enum {
    FAULT_STEP_DELAY,      /* engine: sleep per step */
    FAULT_ENGINE_STALL,    /* engine: no steps for a while */
    FAULT_TOKENIZE_COST,   /* server: CPU work per prompt token */
    FAULT_STREAM_DELAY,    /* server: each SSE event held */
    FAULT_STREAM_COALESCE, /* server: SSE events flushed every N tokens */
    FAULT_KV_LEAK,         /* engine: KV blocks not returned */
    FAULT_OOM,             /* engine: requests fail as a CUDA OOM would */
    FAULT_COLD_START,      /* engine: the first steps slowed */
    FAULT_SUPPRESS_EOS,    /* engine: EOS and stop tokens never end */
    FAULT_LOGIT_NOISE,     /* engine: noise on the logits */
    FAULT_HTTP_ERROR,      /* server: requests fail with error bodies */
    FAULT_ALLREDUCE_DELAY, /* model: each tensor-parallel all-reduce slowed */
    FAULT_COUNT
} fault_id_t;
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

/* One fault's parameters; only its own fields mean anything. Ranges, units and
 * defaults are in faults.c's table; 0 means "not given" where a parameter is
 * optional without a default (every such range excludes 0). */
typedef struct {
    int64_t ms;            /* step_delay, stream_delay, cold_start: milliseconds */
    int64_t seconds;       /* engine_stall: stall length (0: until cleared) */
    int64_t us_per_token;  /* tokenize_cost: CPU microseconds per prompt token */
    int64_t tokens;        /* stream_coalesce: tokens per flushed event */
    int64_t blocks;        /* kv_leak: blocks kept per finished request */
    int64_t prompt_tokens; /* oom: a prompt longer than this fails (0: no limit) */
    int64_t running;       /* oom: a step with more running requests fails (0: no limit) */
    int64_t steps;         /* cold_start: steps slowed after boot or set */
    double scale;          /* logit_noise: standard deviation of the noise, in logits */
    int64_t rate;          /* http_error: percent of requests failed */
    uint32_t types;        /* http_error: FAULT_BIT of each fault_http_type_t drawn from */
    int64_t count;         /* http_error: fail exactly the next count requests, then clear (0: no limit) */
    double allreduce_ms;   /* allreduce_delay: extra milliseconds per all-reduce */
    double gbps;           /* allreduce_delay: the bytes each rank reduces move at this many GB/s */
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

/* Parses the admin API's body, {"name": "...", "params": {...}}: each parameter
 * goes through fault_param_set as text (numbers as written, a list of strings
 * joined with commas), then fault_spec_check. 0, or -1 with err. */
int fault_spec_from_json(const char *body, size_t len, fault_spec_t *s, char *err, size_t err_len);

/* Parses `NAME[:key=value,...]`. A comma-separated piece without '=' continues
 * the previous value, so `http_error:types=rate_limit,server_error,count=2`
 * gives types "rate_limit,server_error". 0, or -1 with err (s undefined). */
int fault_parse_spec(const char *text, fault_spec_t *s, char *err, size_t err_len);

/* The parameters' current values as `key=value,...` (for logs); buf gets "" for none. */
void fault_params_format(const fault_spec_t *s, char *buf, size_t len);
/* s as the admin API's body, {"name": ..., "params": {key: "value", ...}},
 * which fault_spec_from_json reads back to s. Malloc'd. */
char *fault_spec_to_json(const fault_spec_t *s);

/* oom's ERROR line, in PyTorch's wording (torch.OutOfMemoryError, as vLLM
 * logs it): `ask` bytes could not be allocated on GPU 0 of `total` bytes.
 * The other numbers follow from those two as they do in a serving process
 * that holds nearly all of its GPU: less is free than was asked for, a
 * little is reserved by the caching allocator but unallocated, a CUDA
 * context's worth is not PyTorch's. Sizes are written as PyTorch's
 * format_size writes them (bytes, KiB, MiB, GiB with two decimals). */
void fault_oom_message(char *buf, size_t len, int64_t ask, int64_t total);

/* ---- live state -------------------------------------------------------------------- */

typedef struct faults {
    _Atomic uint32_t mask;          /* FAULT_BIT of each active fault: the one hot-path read */
    _Atomic int32_t step_delay_ms;  /* copy of step_delay's ms, for the engine thread */
    /* Below: guarded by mu. */
    void *mu;                       /* pthread_mutex_t, kept opaque here */
    fault_params_t params[FAULT_COUNT];
    uint64_t epoch[FAULT_COUNT];    /* times each fault was set: a reader sees a new setting */
    double set_at[FAULT_COUNT];     /* sl_now_s() of the latest set */
    uint64_t rng;                   /* http_error's draws (splitmix64, from --seed) */
    void (*on_change)(void *);      /* faults_on_change's hook */
    void *on_change_ctx;
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

/* A fault that runs out by itself (engine_stall's seconds, cold_start's
 * steps): clears fault id only while it is still the setting numbered
 * `epoch` (faults_get), so a new setting made meanwhile is kept, and logs
 * "Fault injection: NAME cleared (why)". Whether it cleared. */
bool faults_expire(faults_t *f, fault_id_t id, uint64_t epoch, const char *why);

/* Whether fault id is active; if so *p (may be NULL) gets its parameters,
 * *epoch (may be NULL) how many times it has been set, and *set_at (may be
 * NULL) when, so a reader can tell a new setting from the one it acted on.
 * Takes the mutex: for paths that already saw the fault's bit in the mask. */
bool faults_get(faults_t *f, fault_id_t id, fault_params_t *p, uint64_t *epoch, double *set_at);

/* Calls fn(ctx) after every set or clear, outside the table's lock (the
 * engine wakes to act on it while idle); fn NULL removes the hook. */
void faults_on_change(faults_t *f, void (*fn)(void *), void *ctx);

/* Counts n injections of fault id (servelab:fault_injections_total). */
void faults_count(faults_t *f, fault_id_t id, int64_t n);

/* http_error, for one request: whether to fail it and, if so, the answer
 * (status, OpenAI error type, message; static strings). Draws from the
 * seeded generator, counts the injection, and clears the fault when its
 * count runs out. */
bool faults_http_error_draw(faults_t *f, int *status, const char **type, const char **message);

/* tokenize_cost, for one request: burns `us` microseconds of this thread's CPU
 * time (CLOCK_THREAD_CPUTIME_ID), re-hashing the n token ids (n may be 0) in a
 * loop the compiler cannot remove; no sleep. Returns the hash. */
uint64_t faults_burn_cpu(int64_t us, const int32_t *ids, int64_t n);

/* The list GET /admin/faults answers: a malloc'd JSON object
 * {"faults":[{"name","description","symptom","active","injections","params":[...]}]} */
char *faults_list_json(faults_t *f);

#endif
