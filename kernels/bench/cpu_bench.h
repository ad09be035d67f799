/* cpu_bench.h - what the CPU kernel printouts (cpu_awq_bench, cpu_attn_bench) share:
 * a median of timed calls. */
#ifndef SERVELAB_CPU_BENCH_H
#define SERVELAB_CPU_BENCH_H

#include <stdlib.h>

#include "servelab/core.h"

static inline int cpu_bench_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median seconds per call over `reps` calls (after `warm` untimed ones),
 * `prep` run untimed before each timed call. */
#define CPU_BENCH_MEDIAN_PREP(result, reps, warm, prep, call)                   \
    do {                                                                        \
        double *t_ = sl_malloc((size_t)(reps) * sizeof *t_);                    \
        for (int w_ = 0; w_ < (warm); w_++) call;                               \
        for (int r_ = 0; r_ < (reps); r_++) {                                   \
            prep;                                                               \
            double t0_ = sl_now_s();                                            \
            call;                                                               \
            t_[r_] = sl_now_s() - t0_;                                          \
        }                                                                       \
        qsort(t_, (size_t)(reps), sizeof *t_, cpu_bench_cmp_double);            \
        (result) = t_[(reps) / 2];                                              \
        free(t_);                                                               \
    } while (0)
#define CPU_BENCH_MEDIAN(result, reps, warm, call) CPU_BENCH_MEDIAN_PREP(result, reps, warm, (void)0, call)

#endif
