/* test_parallel.c - the CPU worker pool: every item once, worker ids, nesting,
 * concurrent callers, and idle workers that sleep instead of spinning.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <time.h>

#include "servelab/core.h"
#include "servelab/parallel.h"
#include "test.h"

typedef struct {
    atomic_int *visits;  /* (n) */
    atomic_int busy[8];  /* a worker id in use by a running chunk */
    atomic_int bad_worker, overlap;
    int max_worker;      /* ids must stay below this */
} visit_args_t;

static void visit(void *arg, int64_t i0, int64_t i1, int worker) {
    visit_args_t *a = arg;
    if (worker < 0 || worker >= a->max_worker) {
        atomic_fetch_add(&a->bad_worker, 1);
        return;
    }
    if (atomic_exchange(&a->busy[worker], 1)) atomic_fetch_add(&a->overlap, 1);
    for (int64_t i = i0; i < i1; i++) atomic_fetch_add(&a->visits[i], 1);
    atomic_store(&a->busy[worker], 0);
}

/* Runs parallel_for over n items and checks each ran exactly once on a valid worker id. */
static void check_once(int64_t n, int max_threads, int n_threads) {
    visit_args_t a = {.visits = sl_calloc((size_t)n, sizeof(atomic_int))};
    a.max_worker = max_threads > 0 && max_threads < n_threads ? max_threads : n_threads;
    parallel_for(n, max_threads, visit, &a);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += atomic_load(&a.visits[i]) != 1;
    CHECK_EQ_INT(wrong, 0);
    CHECK_EQ_INT(atomic_load(&a.bad_worker), 0);
    CHECK_EQ_INT(atomic_load(&a.overlap), 0);
    free(a.visits);
}

static void test_every_item_runs_once_on_a_valid_worker(void) {
    static const int64_t sizes[] = {1, 2, 3, 7, 64, 1000, 100003};
    for (int nt = 1; nt <= 4; nt++) {
        parallel_set_threads(nt);
        CHECK_EQ_INT(parallel_n_threads(), nt);
        for (int rep = 0; rep < 50; rep++)
            for (size_t k = 0; k < sizeof sizes / sizeof *sizes; k++) check_once(sizes[k], 0, nt);
        check_once(1000, 2, nt); /* max_threads caps the ids */
    }
    parallel_set_threads(0);
}

/* Back-to-back small loops whose chunk counts differ from one to the next:
 * a worker still looking at the previous job must never run, or count, a
 * chunk of the next one (a pool that read the chunk count apart from the
 * claim word once ran an extra chunk and then waited forever). */
static void test_back_to_back_loops_of_changing_sizes(void) {
    test_seed();
    for (int nt = 2; nt <= 4; nt++) {
        parallel_set_threads(nt);
        for (int rep = 0; rep < 20000; rep++) check_once(2 + (int64_t)(test_rng() % 200), 0, nt);
    }
    parallel_set_threads(0);
}

typedef struct {
    atomic_int by_worker[2]; /* items */
} slow_args_t;

static void slow_worker_chunk(void *arg, int64_t i0, int64_t i1, int worker) {
    slow_args_t *a = arg;
    atomic_fetch_add(&a->by_worker[worker], (int)(i1 - i0));
    struct timespec t = {0, (worker == 1 ? 20 : 1) * 1000 * 1000};
    nanosleep(&t, NULL);
}

/* A worker that stalls (descheduled, on a busy machine) does not hold the
 * loop: the caller runs its own half of the items, then takes the rest of
 * the worker's, whose chunks would otherwise take 20 ms each. */
static void test_caller_takes_over_a_stalled_workers_range(void) {
    parallel_set_threads(2);
    check_once(1000, 0, 2); /* the worker is started and awake */
    slow_args_t a = {0};
    parallel_for(64, 0, slow_worker_chunk, &a);
    int w0 = atomic_load(&a.by_worker[0]), w1 = atomic_load(&a.by_worker[1]);
    printf("  of 64 items, 32 per thread: the caller ran %d, the stalled worker %d\n", w0, w1);
    CHECK_EQ_INT(w0 + w1, 64);
    CHECK(w0 > 32);
    parallel_set_threads(0);
}

static void nested_outer(void *arg, int64_t i0, int64_t i1, int worker) {
    (void)worker;
    for (int64_t i = i0; i < i1; i++) check_once(100, 0, parallel_n_threads());
    atomic_fetch_add((atomic_int *)arg, (int)(i1 - i0));
}

static void test_nested_call_runs_on_the_calling_thread(void) {
    parallel_set_threads(2);
    atomic_int outer = 0;
    parallel_for(16, 0, nested_outer, &outer);
    CHECK_EQ_INT(atomic_load(&outer), 16);
    parallel_set_threads(0);
}

static void *caller(void *arg) {
    (void)arg;
    for (int rep = 0; rep < 300; rep++) check_once(999, 0, parallel_n_threads());
    return NULL;
}

static void test_concurrent_callers_both_finish(void) {
    parallel_set_threads(2);
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, caller, NULL);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    parallel_set_threads(0);
}

static double cpu_s(void) {
    struct rusage r;
    getrusage(RUSAGE_SELF, &r);
    return (double)(r.ru_utime.tv_sec + r.ru_stime.tv_sec) + (double)(r.ru_utime.tv_usec + r.ru_stime.tv_usec) * 1e-6;
}

/* The reason the pool exists: between loops, idle workers must leave the
 * cores to other processes within microseconds (libgomp's spun for ms). */
static void test_idle_workers_sleep(void) {
    parallel_set_threads(4);
    check_once(100000, 0, 4);
    struct timespec pause = {0, 5 * 1000 * 1000};
    nanosleep(&pause, NULL);
    double c0 = cpu_s();
    struct timespec idle = {0, 200 * 1000 * 1000};
    nanosleep(&idle, NULL);
    double used = cpu_s() - c0;
    printf("  CPU time of 3 idle workers over 200 ms: %.2f ms\n", used * 1e3);
    CHECK(used < 0.02);
    parallel_set_threads(0);
}

int main(void) {
    RUN(test_every_item_runs_once_on_a_valid_worker);
    RUN(test_back_to_back_loops_of_changing_sizes);
    RUN(test_caller_takes_over_a_stalled_workers_range);
    RUN(test_nested_call_runs_on_the_calling_thread);
    RUN(test_concurrent_callers_both_finish);
    RUN(test_idle_workers_sleep);
    return test_summary();
}
