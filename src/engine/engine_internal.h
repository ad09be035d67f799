/* engine_internal.h - the engine's private state, shared by engine.c (queues,
 * thread, streams) and step.c (one scheduling step). Not a public header. */
#ifndef SERVELAB_ENGINE_INTERNAL_H
#define SERVELAB_ENGINE_INTERNAL_H

#include <pthread.h>

#include "servelab/engine.h"
#include "servelab/sampler.h"

struct engine_stream {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    engine_output_t *head, *tail;   /* events not yet taken by the client */
    int32_t n_live;                 /* sequences not finished (guarded by mu) */
    int refs;                       /* client + engine (guarded by mu) */
    bool abort_requested;           /* guarded by the engine's mu */
    int32_t n_seqs;
    request_t **seqs;               /* engine thread only */
    engine_notify_fn notify;        /* guarded by mu */
    void *notify_user;
    int in_notify;                  /* notify calls under way (guarded by mu) */
};

/* vLLM's PrefixCachingMetrics: (requests, queries, hits) per step, the oldest
 * dropped while more than HIT_WINDOW_REQUESTS requests are covered. */
#define HIT_WINDOW_REQUESTS 1000
#define HIT_WINDOW_CAP (HIT_WINDOW_REQUESTS + 1)
typedef struct {
    int64_t e[HIT_WINDOW_CAP][3];
    int32_t head, n;
    int64_t requests, queries, hits;
} hit_window_t;
void hit_window_observe(hit_window_t *w, int64_t requests, int64_t queries, int64_t hits);
double hit_window_rate(const hit_window_t *w);

/* engine_metrics.c: vLLM's engine metrics (NULL when metrics are off; every
 * em_* call then does nothing). */
typedef struct engine_metrics engine_metrics_t;
typedef struct {
    bool stepped;                   /* a forward ran (vllm:iteration_tokens_total observes it) */
    int32_t n_running, n_waiting;
    double kv_usage, prefix_hit_rate;
    int64_t d_prompt_tokens, d_generation_tokens, d_preemptions, d_queries, d_hits;
    double d_allreduce_s;
    const spec_stats_t *d_spec;     /* the step's speculative decoding counts (NULL: none) */
} em_step_t;
struct metrics;
engine_metrics_t *em_new(struct metrics *reg, const char *model_name, const struct engine *e);
void em_free(engine_metrics_t *em);
/* r just got its newest token at `now`; prev_token is when it got the one before. */
void em_token(engine_metrics_t *em, const request_t *r, double now, double prev_token);
void em_finished(engine_metrics_t *em, const request_t *r);
void em_parent_finished(engine_metrics_t *em, const struct engine_stream *st);
void em_flush(engine_metrics_t *em, const em_step_t *s);

/* The lab's engine-side state (engine_lab.c), engine thread only. */
typedef struct {
    uint64_t stall_epoch;           /* engine_stall's setting last seen (one injection each) */
    uint64_t cold_epoch;            /* cold_start's setting whose steps are counted */
    int64_t cold_left;              /* its slowed steps still to run */
    bool allreduce_delay_on;        /* allreduce_delay is set on the model's communicator */
    int32_t *leaked;                /* kv_leak: blocks held, one reference each */
    int32_t n_leaked, cap_leaked;
} engine_lab_t;

/* A scheduled sequence decodes this step when it computes the last token it
 * knows, and nothing before it (read before n_computed advances); with
 * speculative decoding its drafts come along (n_new = 1 + drafts). Anything
 * else computes prompt tokens: a prefill chunk, or a recompute after a
 * preemption. */
static inline bool step_decodes(const request_t *r, int32_t n_new) {
    return n_new >= 1 && r->n_computed == r->n_tokens - 1;
}

/* The step's prompt and decode tokens, for the trace and the lab snapshot. */
typedef struct {
    int64_t prefill, decode;
} step_mix_t;
static inline step_mix_t step_mix(const sched_output_t *so) {
    step_mix_t m = {0, 0};
    for (int32_t i = 0; i < so->n; i++) {
        if (step_decodes(so->reqs[i], so->n_new[i])) m.decode += so->n_new[i]; /* its token and drafts */
        else m.prefill += so->n_new[i];
    }
    return m;
}

typedef struct engine_trace engine_trace_t;

struct engine {
    engine_config_t cfg;            /* resolved (engine_boot.c) */
    llama_model_t model;
    tokenizer_t *tok;
    model_runner_t runner;          /* batch, KV cache, forward, sampling */
    kv_pool_t pool;                 /* which KV blocks hold what */
    scheduler_t sched;
    request_t **sampled;            /* (max_num_seqs) sequences sampled this step */
    sample_result_t *results;       /* (runner.max_seqs) their rows: 1 + drafts each */
    int64_t max_request_tokens;     /* tokens one request may hold in the pool */
    uint64_t n_submitted;

    /* Submission side, guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request_t **incoming;
    int32_t n_incoming, cap_incoming;
    engine_stream_t **aborts;
    int32_t n_aborts, cap_aborts;
    bool stop;
    bool poked;                     /* a lab fault changed: step once even without requests */
    bool thread_running;
    bool dead;                      /* the device is lost for good (ops.h last_error 2) */
    pthread_t thread;
    engine_stats_t stats;           /* snapshot, updated once per step */
    int32_t stats_sched_waiting;    /* the scheduler's waiting count in that snapshot */

    /* Engine thread only. */
    engine_metrics_t *metrics;
    hit_window_t hit_window;
    int64_t seen_preemptions;
    kv_prefix_stats_t seen_prefix;
    spec_stats_t spec_stats, seen_spec; /* speculative decoding: totals, and those already published */
    uint32_t step_faults;           /* the lab's mask as this step loaded it */
    engine_lab_t lab;
    double step_forward_s, step_allreduce_s; /* this step's runner time and its all-reduce part */
    engine_trace_t *trace;          /* --trace, or /lab/trace (trace.c; trace_on: recording) */
    struct {                        /* the lab page's snapshot (lab_snapshot.c) */
        bool on, last_idle;
        pthread_mutex_t mu;         /* guards text */
        char *text;
        double t0, t_last;
        step_mix_t step;            /* the last step's work */
    } lab_snap;
    uint64_t n_sequences;           /* sequences submitted (guarded by mu) */
};

/* trace.c: the trace (header there). trace_new makes one that records
 * nothing until engine_trace_start; trace_open one that records from now to
 * FILE, checking the path is writable (one line in err otherwise);
 * trace_close writes the --trace file's events and frees the trace (a failed
 * write: -1 with err). trace_on: is it recording (t may be NULL). */
engine_trace_t *trace_new(size_t cap_bytes);
engine_trace_t *trace_open(const char *path, size_t cap_bytes, sl_err_t *err);
bool trace_on(engine_trace_t *t);
void trace_step(engine_trace_t *t, const sched_output_t *so, step_mix_t mix, int32_t n_sampled, double t_start,
                double t_end, double forward_s);
void trace_request_done(engine_trace_t *t, const request_t *r);
int trace_close(engine_trace_t *t, sl_err_t *err);

/* lab_snapshot.c (header there): the snapshot at the end of
 * engine_publish_stats (rate-limited); freed with the engine. */
void lab_snapshot_publish(engine_t *e, double kv_usage, bool idle);
void lab_snapshot_free(engine_t *e);

/* engine.c: builds the engine around a model and tokenizer that engine_boot.c
 * loaded (and the engine then owns), sizes and allocates the KV cache. On
 * failure frees nothing of what it was given. */
engine_t *engine_assemble(const engine_config_t *cfg, llama_model_t *model, tokenizer_t *tok, sl_err_t *err);

/* step.c */
void engine_finish_request(engine_t *e, request_t *r, finish_reason_t why, double now);
/* Finishes every running and waiting request (engine_free, a dead engine). */
void engine_finish_all(engine_t *e, finish_reason_t why, double now);
void engine_post(engine_stream_t *st, engine_output_t *o, bool finishes_sequence);
void engine_stream_unref(engine_stream_t *st);
/* The step's snapshot and metrics (engine_get_stats, em_flush). */
void engine_publish_stats(engine_t *e, int64_t steps, int64_t n_prompt_done, int64_t n_gen);

/* engine_lab.c: the lab's faults where the engine acts on them (docs/lab.md).
 * Each is called only when the step's mask has a bit set (or, for
 * lab_begin_step, blocks are still leaked), so they cost nothing when off. */
/* Start of a step: returns kv_leak's blocks once it is cleared; engine_stall.
 * True when the engine is stalled: the step does nothing more. */
bool lab_begin_step(engine_t *e, uint32_t faults);
/* Before the forward: allreduce_delay onto the model's communicator (set,
 * changed or cleared). Called when its bit is set or it is still on. */
void lab_allreduce_delay(engine_t *e, uint32_t faults);
/* After scheduling, before the forward: oom fails its requests (they leave
 * so), cold_start sleeps. */
void lab_before_forward(engine_t *e, uint32_t faults, sched_output_t *so, double now);
/* kv_leak: r finishes; some of its blocks get one more reference, kept. */
void lab_leak(engine_t *e, request_t *r);
/* engine_free: gives back what the lab still holds. */
void lab_free(engine_t *e);

#endif
