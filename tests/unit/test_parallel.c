/* test_parallel.c - the CPU worker pools: every item once, worker ids, nesting,
 * concurrent callers, idle workers that sleep instead of spinning, and pools of
 * their own (one per tensor-parallel rank) that run loops at once, count their
 * own threads, and stop their workers when freed.
 */
#define _GNU_SOURCE
#include <dirent.h>
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

/* Runs parallel_for over n items on the calling thread's pool and returns how
 * many things went wrong (items not run exactly once, bad or shared worker
 * ids); adds the items worker 1 ran to *by_worker1. For threads other than
 * the main one, whose CHECKs would race on the harness's state. */
typedef struct {
    visit_args_t v;
    atomic_int by_worker1;
} counted_args_t;

static void counted_visit(void *arg, int64_t i0, int64_t i1, int worker) {
    counted_args_t *a = arg;
    visit(&a->v, i0, i1, worker);
    if (worker == 1) atomic_fetch_add(&a->by_worker1, (int)(i1 - i0));
}

static int64_t loop_errors(int64_t n, int n_threads, int64_t *by_worker1) {
    counted_args_t a = {.v = {.visits = sl_calloc((size_t)n, sizeof(atomic_int)), .max_worker = n_threads}};
    parallel_for(n, 0, counted_visit, &a);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += atomic_load(&a.v.visits[i]) != 1;
    free(a.v.visits);
    *by_worker1 += atomic_load(&a.by_worker1);
    return wrong + atomic_load(&a.v.bad_worker) + atomic_load(&a.v.overlap);
}

typedef struct {
    const char *name;
    int n_threads_seen;
    int64_t errors, by_worker1;
} rank_args_t;

/* One tensor-parallel rank: its own pool of 2, 2000 loops of 10000 items. */
static void *rank_main(void *arg) {
    rank_args_t *r = arg;
    parallel_pool_t *pool = parallel_pool_new(2, r->name);
    parallel_use_pool(pool);
    r->n_threads_seen = parallel_n_threads();
    for (int rep = 0; rep < 2000; rep++) r->errors += loop_errors(10000, 2, &r->by_worker1);
    parallel_use_pool(NULL);
    parallel_pool_free(pool);
    return NULL;
}

/* Two ranks' loops run at once, each on its own pool's threads: neither falls
 * back to running alone (as two callers of one pool do), so each pool's
 * worker 1 takes part, and ids stay below the pool's count of 2. */
static void test_two_pools_run_loops_at_once(void) {
    parallel_set_threads(4);
    rank_args_t r[2] = {{.name = "r0"}, {.name = "r1"}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, rank_main, &r[i]);
    for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < 2; i++) {
        printf("  rank %d: worker 1 ran %lld of %d items\n", i, (long long)r[i].by_worker1, 2000 * 10000);
        CHECK_EQ_INT(r[i].n_threads_seen, 2);
        CHECK_EQ_INT(r[i].errors, 0);
        CHECK(r[i].by_worker1 > 0);
    }
    CHECK_EQ_INT(parallel_n_threads(), 4);
    parallel_set_threads(0);
}

typedef struct {
    int n_threads_seen, n_threads_after_set;
    int64_t errors, by_worker1;
} count_args_t;

static void *pool_of_3_main(void *arg) {
    count_args_t *c = arg;
    parallel_pool_t *pool = parallel_pool_new(3, "t3");
    parallel_use_pool(pool);
    c->n_threads_seen = parallel_n_threads();
    for (int rep = 0; rep < 100; rep++) c->errors += loop_errors(1000, 3, &c->by_worker1);
    parallel_set_threads(2); /* acts on this thread's pool, not the process's */
    c->n_threads_after_set = parallel_n_threads();
    for (int rep = 0; rep < 100; rep++) c->errors += loop_errors(1000, 2, &c->by_worker1);
    parallel_pool_free(pool); /* also returns this thread to the process pool */
    return NULL;
}

/* Kernels size scratch by parallel_n_threads(): on a thread using a pool of 3
 * it is 3, while the main thread's process pool keeps its own count. */
static void test_n_threads_is_the_current_pools(void) {
    parallel_set_threads(2);
    count_args_t c = {0};
    pthread_t t;
    pthread_create(&t, NULL, pool_of_3_main, &c);
    pthread_join(t, NULL);
    CHECK_EQ_INT(c.n_threads_seen, 3);
    CHECK_EQ_INT(c.n_threads_after_set, 2);
    CHECK_EQ_INT(c.errors, 0);
    CHECK_EQ_INT(parallel_n_threads(), 2);
    parallel_set_threads(0);
}

static int n_process_threads(void) {
    DIR *d = opendir("/proc/self/task");
    if (!d) return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(d));) n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* parallel_pool_free joins the workers: made and freed 50 times (some never
 * used, some with workers asleep, some right after a loop), no thread is
 * left behind and nothing hangs. */
static void test_freed_pools_leave_no_threads(void) {
    check_once(1000, 0, parallel_n_threads()); /* the process pool's workers exist already */
    int before = n_process_threads();
    for (int rep = 0; rep < 50; rep++) {
        parallel_pool_t *pool = parallel_pool_new(2 + rep % 3, "tmp");
        if (rep % 5 != 0) {
            parallel_use_pool(pool);
            check_once(1000, 0, 2 + rep % 3);
            if (rep % 5 == 1) {
                struct timespec nap = {0, 2 * 1000 * 1000}; /* the workers go to sleep */
                nanosleep(&nap, NULL);
            }
            parallel_use_pool(NULL);
        }
        parallel_pool_free(pool);
    }
    int after = n_process_threads();
    printf("  threads before: %d, after 50 pools: %d\n", before, after);
    CHECK(before > 0);
    CHECK_EQ_INT(after, before);
}

/* parallel_use_pool(NULL) puts the thread back on the process pool. */
static void test_use_pool_null_returns_to_the_process_pool(void) {
    parallel_set_threads(2);
    parallel_pool_t *pool = parallel_pool_new(3, "p3");
    parallel_use_pool(pool);
    CHECK_EQ_INT(parallel_n_threads(), 3);
    check_once(1000, 0, 3);
    parallel_use_pool(NULL);
    CHECK_EQ_INT(parallel_n_threads(), 2);
    check_once(1000, 0, 2);
    parallel_pool_free(pool);
    CHECK_EQ_INT(parallel_n_threads(), 2);
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
    RUN(test_two_pools_run_loops_at_once);
    RUN(test_n_threads_is_the_current_pools);
    RUN(test_freed_pools_leave_no_threads);
    RUN(test_use_pool_null_returns_to_the_process_pool);
    return test_summary();
}
