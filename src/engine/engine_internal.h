/* engine_internal.h - the engine's private state, shared by engine.c (queues,
 * thread, streams) and step.c (one scheduling step). Not a public header. */
#ifndef SERVELAB_ENGINE_INTERNAL_H
#define SERVELAB_ENGINE_INTERNAL_H

#include <pthread.h>

#include "servelab/engine.h"

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

struct engine {
    engine_config_t cfg;
    llama_model_t *model;
    const tokenizer_t *tok;
    kv_cache_t kv;
    kv_pool_t pool;
    scheduler_t sched;
    sl_batch_t batch;
    float *logits;                  /* (max_num_seqs, V) */
    sampler_scratch_t *scratch;     /* (n_scratch) one per OpenMP thread */
    int n_scratch;
    request_t **sampled;            /* (max_num_seqs) sequences sampled this step */
    sample_result_t *results;       /* (max_num_seqs) */
    int64_t max_request_tokens;     /* tokens one request may hold in the pool */
    uint64_t seed, n_submitted;

    /* Submission side, guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    request_t **incoming;
    int32_t n_incoming, cap_incoming;
    engine_stream_t **aborts;
    int32_t n_aborts, cap_aborts;
    bool stop;
    bool thread_running;
    pthread_t thread;
    engine_stats_t stats;           /* snapshot, updated once per step */
};

/* step.c */
void engine_finish_request(engine_t *e, request_t *r, finish_reason_t why, double now);
void engine_post(engine_stream_t *st, engine_output_t *o, bool finishes_sequence);
void engine_stream_unref(engine_stream_t *st);

#endif
