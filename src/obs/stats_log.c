/* stats_log.c - vLLM's periodic engine stats line (v1/metrics/loggers.py LoggingStatLogger).
 *
 *   Engine 000: Avg prompt throughput: 1234.5 tokens/s, Avg generation throughput: 567.8 tokens/s,
 *   Running: 12 reqs, Waiting: 0 reqs, GPU KV cache usage: 34.5%, Prefix cache hit rate: 56.7%
 *
 * Every interval (VLLM_LOG_STATS_INTERVAL, 10 s): throughputs are the tokens
 * counted in the interval over its length (prompt tokens counted when a
 * prompt's prefill completes, in full, as vLLM 0.10); Running/Waiting and KV
 * usage are the engine's last snapshot; the hit rate covers the last 1000
 * admitted requests. `Preemptions: N` (the interval's) follows Waiting when N
 * is not 0, as vLLM 0.11 prints it. The line is INFO, or DEBUG when this and
 * the previous interval both had zero throughput (an idle server stays quiet).
 * With speculative decoding, vLLM's "SpecDecoding metrics: ..." line
 * (spec_decode.h) follows it for every interval that verified a draft.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "servelab/engine.h"
#include "servelab/spec_decode.h"
#include "servelab/stats_log.h"

struct stats_logger {
    engine_t *engine;
    double interval_s;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool stop, started;
    /* Logger thread only. */
    engine_stats_t last;
    double last_t, last_prompt_tps, last_gen_tps;
};

void stats_logger_tick(stats_logger_t *l) {
    engine_stats_t s;
    engine_get_stats(l->engine, &s);
    double now = sl_now_s(), dt = now - l->last_t;
    double prompt_tps = dt > 0 ? (double)(s.n_prompt_tokens_total - l->last.n_prompt_tokens_total) / dt : 0.0;
    double gen_tps = dt > 0 ? (double)(s.n_generation_tokens_total - l->last.n_generation_tokens_total) / dt : 0.0;
    int64_t preemptions = s.n_preemptions - l->last.n_preemptions;
    log_level_t level = prompt_tps == 0 && gen_tps == 0 && l->last_prompt_tps == 0 && l->last_gen_tps == 0
                            ? LOG_DEBUG : LOG_INFO;
    char preempt[48] = "";
    if (preemptions > 0) snprintf(preempt, sizeof preempt, "Preemptions: %lld, ", (long long)preemptions);
    sl_log(level, __FILE__, __LINE__,
           "Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
           "Running: %d reqs, Waiting: %d reqs, %sGPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%",
           0, prompt_tps, gen_tps, s.n_running, s.n_waiting, preempt, s.kv_usage * 100.0,
           s.prefix_hit_rate * 100.0);
    /* With --speculative-config, vLLM's SpecDecodingLogging line follows at
     * the same level, when the interval verified any draft. */
    spec_stats_t d;
    spec_stats_diff(&d, &s.spec, &l->last.spec);
    char spec[512];
    if (s.spec_k > 0 && spec_stats_format(&d, s.spec_k, dt, spec, sizeof spec))
        sl_log(level, __FILE__, __LINE__, "%s", spec);
    l->last = s;
    l->last_t = now;
    l->last_prompt_tps = prompt_tps;
    l->last_gen_tps = gen_tps;
}

static void *logger_main(void *arg) {
    stats_logger_t *l = arg;
    pthread_mutex_lock(&l->mu);
    struct timespec next;
    clock_gettime(CLOCK_REALTIME, &next);
    while (!l->stop) {
        double when = (double)next.tv_sec + (double)next.tv_nsec * 1e-9 + l->interval_s;
        next.tv_sec = (time_t)when;
        next.tv_nsec = (long)((when - (double)next.tv_sec) * 1e9);
        while (!l->stop && pthread_cond_timedwait(&l->cv, &l->mu, &next) == 0) {
        }
        if (l->stop) break;
        pthread_mutex_unlock(&l->mu);
        stats_logger_tick(l);
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

stats_logger_t *stats_logger_new(engine_t *engine, double interval_s) {
    stats_logger_t *l = sl_calloc(1, sizeof *l);
    l->engine = engine;
    l->interval_s = interval_s;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv, NULL);
    engine_get_stats(engine, &l->last);
    l->last_t = sl_now_s();
    return l;
}

void stats_logger_start(stats_logger_t *l) {
    if (pthread_create(&l->thread, NULL, logger_main, l) != 0) sl_die("cannot start the stats logger thread");
    l->started = true;
}

void stats_logger_free(stats_logger_t *l) {
    if (!l) return;
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_signal(&l->cv);
    pthread_mutex_unlock(&l->mu);
    if (l->started) pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free(l);
}
