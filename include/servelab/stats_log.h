/* stats_log.h - vLLM's periodic "Engine 000: Avg prompt throughput ..." line. */
#ifndef SERVELAB_STATS_LOG_H
#define SERVELAB_STATS_LOG_H

#include "servelab/engine.h"

typedef struct stats_logger stats_logger_t;

/* A logger over `engine` that prints every interval_s seconds once started. */
stats_logger_t *stats_logger_new(engine_t *engine, double interval_s);
void stats_logger_start(stats_logger_t *l);
/* Prints one line now, covering the time since the previous one (tests). */
void stats_logger_tick(stats_logger_t *l);
/* Stops the thread (if started) and frees. */
void stats_logger_free(stats_logger_t *l);

#endif
