/* parallel.c - the CPU worker pools (see parallel.h): each thread owns a
 * contiguous range of chunks and takes them front to back; a thread whose
 * range is used up takes chunks from the back of another's. Idle workers spin
 * briefly, then sleep on a condition variable. The process pool is a static
 * pool whose detached workers never stop; parallel_pool_new's pools have
 * joinable workers that parallel_pool_free stops. Which pool a thread's loops
 * use is a thread-local pointer.
 *
 * Why not OpenMP's teams: libgomp's idle workers spin for ~300k iterations
 * (milliseconds) before they block, a policy it reads from the environment
 * when the library loads (before main, so the process cannot change it), and
 * a team's closing barrier waits for every member, including one the kernel
 * has descheduled. With busy processes beside it on two cores, a 64-token
 * generation went from 0.4 s to 15-70 s. Here idle workers spin for a few
 * microseconds and sleep, and a loop waits only for the chunks a worker is running: the
 * rest of a late or descheduled worker's range is taken by the others.
 *
 * Why owned ranges rather than one shared counter: decode's GEMVs stream the
 * weights from memory, and two threads each reading one contiguous half (as
 * libgomp's static schedule has them) ran ~8% faster than the same threads
 * taking quarter chunks in turn from a shared counter.
 *
 * Each thread's range is one word, generation | front | back, changed only by
 * compare-and-swap, so a worker that looks late, after its job ended, sees
 * that job's ranges used up or fails the swap; it never takes a chunk of the
 * next job. The job's other fields are read only after a successful claim,
 * while the caller cannot move on (it waits for `done` to reach the chunk
 * count). Each thread adds its chunks to `done` once, when it finds no more.
 */
#define _GNU_SOURCE
#include "servelab/parallel.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"

#define PAR_MAX_THREADS 256
/* Chunks per thread: when a worker stalls, the others wait only for the one
 * chunk it is running, 1/8 of its share. */
#define PAR_CHUNKS_PER_THREAD 8
_Static_assert(PAR_MAX_THREADS * PAR_CHUNKS_PER_THREAD < 0x10000, "chunk indices fit in 16 bits");
/* How long an idle worker spins before it sleeps. Long enough to bridge most
 * gaps between one op's loop and the next (the small ops between them run on
 * the caller alone), short enough that the worker leaves its core to other
 * threads between steps. 50 us decoded about as fast on a quiet machine, but
 * beside a busy process it was ~15% slower, and serving the 1M-parameter
 * model it kept the HTTP threads off the cores (e2e.metrics' TTFT check
 * failed 2 runs in 3). */
#define PAR_SPIN_S 5e-6
/* How long the caller spins for the chunks workers are still running before
 * it sleeps. Its wait is bounded by one chunk (it has taken every chunk not
 * yet started), so it can spin longer: at 5 us it slept in ~45% of a batched
 * step's loops and paid a wake-up for each (2-thread `bench throughput`
 * ~8% slower than at 50 us); at 50 us it sleeps in under 1%. */
#define PAR_CALLER_SPIN_S 50e-6

typedef struct {
    _Alignas(64) _Atomic uint64_t word; /* generation << 32 | front << 16 | back (chunk indices) */
} range_t;

/* What a worker thread is started with. */
typedef struct {
    parallel_pool_t *pool;
    int id;                        /* 1..n_started */
} worker_arg_t;

struct parallel_pool {
    atomic_int n_threads;          /* 0 until set or first used */
    pthread_mutex_t run_mu;        /* held by the thread whose job the pool runs */
    int n_started;                 /* workers started (ids 1..n_started), under run_mu */
    uint32_t last_gen;             /* under run_mu */

    /* The job: plain fields written before the ranges are published. */
    parallel_fn_t fn;
    void *arg;
    int64_t n, chunk;
    atomic_int n_active;           /* read before a claim, so atomic */
    range_t range[PAR_MAX_THREADS];
    _Alignas(64) atomic_uint done; /* chunks finished */
    _Alignas(64) atomic_uint gen;  /* the latest job's generation, spun on by idle workers */
    atomic_int n_sleeping;         /* workers in cond_wait (or about to be) */
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;

    /* Set by parallel_pool_free (under mu, with gen bumped so that spinning
     * and sleeping workers both wake); a worker that sees it exits. */
    atomic_bool stop;
    bool joinable;                 /* workers are joined by parallel_pool_free, not detached */
    char name[9];                  /* in the workers' thread names */
    worker_arg_t worker_arg[PAR_MAX_THREADS]; /* [id], under run_mu until the worker starts */
    pthread_t thread[PAR_MAX_THREADS];        /* [id], of joinable workers */
};

static parallel_pool_t process_pool = {
    .run_mu = PTHREAD_MUTEX_INITIALIZER,
    .mu = PTHREAD_MUTEX_INITIALIZER,
    .job_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
    .name = "cpu",
};

/* The calling thread's pool; NULL: the process pool. A worker sets it to its
 * own pool, so a loop nested in one of its chunks finds that pool busy and
 * runs on the worker alone, as the pool's other callers do. */
static _Thread_local parallel_pool_t *tl_pool;

static inline parallel_pool_t *cur_pool(void) {
    parallel_pool_t *p = tl_pool;
    return p ? p : &process_pool;
}

static int default_threads(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return 1;
}

static int clamp_threads(int n_threads) {
    if (n_threads <= 0) n_threads = default_threads();
    return n_threads < PAR_MAX_THREADS ? n_threads : PAR_MAX_THREADS;
}

void parallel_set_threads(int n_threads) {
    atomic_store(&cur_pool()->n_threads, clamp_threads(n_threads));
}

int parallel_n_threads(void) {
    parallel_pool_t *P = cur_pool();
    int n = atomic_load(&P->n_threads);
    if (n == 0) {
        atomic_compare_exchange_strong(&P->n_threads, &n, clamp_threads(0));
        n = atomic_load(&P->n_threads);
    }
    return n;
}

/* Takes one chunk of job g from thread t's range: its front if `own`, else
 * its back. Returns the chunk index, or -1 if that range is used up. */
static int claim(parallel_pool_t *P, uint32_t g, int t, bool own) {
    _Atomic uint64_t *w = &P->range[t].word;
    uint64_t c = atomic_load_explicit(w, memory_order_acquire);
    for (;;) {
        unsigned front = (unsigned)(c >> 16 & 0xffff), back = (unsigned)(c & 0xffff);
        if ((uint32_t)(c >> 32) != g || front >= back) return -1;
        uint64_t next = own ? c + ((uint64_t)1 << 16) : c - 1;
        if (atomic_compare_exchange_weak_explicit(w, &c, next, memory_order_acq_rel, memory_order_acquire))
            return (int)(own ? front : back - 1);
    }
}

static void run_chunk(parallel_pool_t *P, int k, int worker) {
    int64_t begin = (int64_t)k * P->chunk, end = begin + P->chunk < P->n ? begin + P->chunk : P->n;
    P->fn(P->arg, begin, end, worker);
}

/* Runs job g's chunks: the worker's own range first, then whatever is left
 * of the others'; then adds them to `done` with one atomic add. */
static void run_job(parallel_pool_t *P, uint32_t g, int worker, bool is_caller) {
    int n_active = atomic_load_explicit(&P->n_active, memory_order_relaxed);
    unsigned n_run = 0;
    if (worker < n_active) {
        for (int k; (k = claim(P, g, worker, true)) >= 0; n_run++) run_chunk(P, k, worker);
        for (int i = 1; i < n_active; i++) {
            int victim = (worker + i) % n_active;
            for (int k; (k = claim(P, g, victim, false)) >= 0; n_run++) run_chunk(P, k, worker);
        }
    }
    if (n_run == 0) return;
    /* n_chunks is the job's: this thread's chunks are not counted yet, so the
     * caller is still waiting on this job. */
    unsigned n_chunks = (unsigned)((P->n + P->chunk - 1) / P->chunk);
    if (atomic_fetch_add_explicit(&P->done, n_run, memory_order_acq_rel) + n_run == n_chunks && !is_caller) {
        pthread_mutex_lock(&P->mu);
        pthread_cond_signal(&P->done_cv);
        pthread_mutex_unlock(&P->mu);
    }
}

/* Spins for at most spin_s seconds until (*word == value) == until_equal.
 * Returns whether that happened. */
static bool spin_until(atomic_uint *word, unsigned value, bool until_equal, double spin_s) {
    double deadline = 0.0;
    for (uint32_t i = 1;; i++) {
        if ((atomic_load_explicit(word, memory_order_acquire) == value) == until_equal) return true;
        if (i % 64 == 0) {
            double now = sl_now_s();
            if (deadline == 0.0) deadline = now + spin_s;
            else if (now > deadline) return false;
        }
        parallel_relax();
    }
}

static void *worker_main(void *warg) {
    parallel_pool_t *P = ((worker_arg_t *)warg)->pool;
    int id = ((worker_arg_t *)warg)->id;
    tl_pool = P;
    /* "sl-" + up to 8 + "-" + up to 3 digits fits the 15 characters Linux keeps. */
    char name[32];
    snprintf(name, sizeof name, "sl-%s-%d", P->name, id);
    name[15] = '\0';
    pthread_setname_np(pthread_self(), name);
    uint32_t seen = 0;
    for (;;) {
        /* A worker the thread count leaves out sleeps without spinning. */
        bool spin = id < atomic_load(&P->n_threads);
        if (!spin || !spin_until(&P->gen, seen, false, PAR_SPIN_S)) {
            pthread_mutex_lock(&P->mu);
            atomic_fetch_add(&P->n_sleeping, 1);
            while (atomic_load(&P->gen) == seen) pthread_cond_wait(&P->job_cv, &P->mu);
            atomic_fetch_sub(&P->n_sleeping, 1);
            pthread_mutex_unlock(&P->mu);
        }
        seen = atomic_load_explicit(&P->gen, memory_order_acquire);
        /* stop is stored before the generation that wakes us for it. */
        if (atomic_load(&P->stop)) break;
        run_job(P, seen, id, false);
    }
    return NULL;
}

parallel_pool_t *parallel_pool_new(int n_threads, const char *name) {
    parallel_pool_t *p = aligned_alloc(_Alignof(parallel_pool_t), sizeof(parallel_pool_t));
    if (!p) sl_die("out of memory making a %zu-byte worker pool", sizeof(parallel_pool_t));
    memset(p, 0, sizeof *p);
    atomic_init(&p->n_threads, clamp_threads(n_threads));
    pthread_mutex_init(&p->run_mu, NULL);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->job_cv, NULL);
    pthread_cond_init(&p->done_cv, NULL);
    p->joinable = true;
    snprintf(p->name, sizeof p->name, "%s", name ? name : "pool");
    return p;
}

void parallel_pool_free(parallel_pool_t *p) {
    if (!p) return;
    SL_ASSERT(p != &process_pool);
    if (tl_pool == p) tl_pool = NULL;
    pthread_mutex_lock(&p->run_mu); /* no loop runs on p; this orders n_started */
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->stop, true);
    atomic_fetch_add(&p->gen, 1);
    pthread_cond_broadcast(&p->job_cv);
    pthread_mutex_unlock(&p->mu);
    for (int id = 1; id <= p->n_started; id++) pthread_join(p->thread[id], NULL);
    pthread_mutex_unlock(&p->run_mu);
    pthread_mutex_destroy(&p->run_mu);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->job_cv);
    pthread_cond_destroy(&p->done_cv);
    free(p);
}

void parallel_use_pool(parallel_pool_t *p) {
    tl_pool = p;
}

void parallel_for(int64_t n, int max_threads, parallel_fn_t fn, void *arg) {
    if (n <= 0) return;
    parallel_pool_t *P = cur_pool();
    int nt = parallel_n_threads();
    if (max_threads > 0 && max_threads < nt) nt = max_threads;
    if (nt > n) nt = (int)n;
    if (nt <= 1 || pthread_mutex_trylock(&P->run_mu) != 0) {
        fn(arg, 0, n, 0);
        return;
    }
    for (; P->n_started < nt - 1; P->n_started++) {
        int id = P->n_started + 1;
        P->worker_arg[id] = (worker_arg_t){.pool = P, .id = id};
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, P->joinable ? PTHREAD_CREATE_JOINABLE : PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&P->thread[id], &attr, worker_main, &P->worker_arg[id]);
        pthread_attr_destroy(&attr);
        if (rc != 0) { /* out of threads: run with the workers there are */
            nt = P->n_started + 1;
            break;
        }
    }
    int64_t want = (int64_t)nt * PAR_CHUNKS_PER_THREAD;
    int64_t per = (n + want - 1) / want;
    unsigned n_chunks = (unsigned)((n + per - 1) / per); /* <= PAR_MAX_THREADS * PAR_CHUNKS_PER_THREAD */
    P->fn = fn, P->arg = arg, P->n = n, P->chunk = per;
    atomic_store_explicit(&P->n_active, nt, memory_order_relaxed);
    atomic_store_explicit(&P->done, 0, memory_order_relaxed);
    uint32_t g = ++P->last_gen;
    for (int t = 0; t < nt; t++) {
        uint64_t front = (uint64_t)n_chunks * (uint64_t)t / (uint64_t)nt;
        uint64_t back = (uint64_t)n_chunks * (uint64_t)(t + 1) / (uint64_t)nt;
        atomic_store_explicit(&P->range[t].word, (uint64_t)g << 32 | front << 16 | back, memory_order_release);
    }
    /* Either a worker going to sleep sees the new generation, or we see it
     * counted in n_sleeping and wake it (both sides are sequentially consistent). */
    atomic_store(&P->gen, g);
    if (atomic_load(&P->n_sleeping) > 0) {
        pthread_mutex_lock(&P->mu);
        pthread_cond_broadcast(&P->job_cv);
        pthread_mutex_unlock(&P->mu);
    }
    run_job(P, g, 0, true);
    if (!spin_until(&P->done, n_chunks, true, PAR_CALLER_SPIN_S)) {
        pthread_mutex_lock(&P->mu);
        while (atomic_load_explicit(&P->done, memory_order_acquire) != n_chunks)
            pthread_cond_wait(&P->done_cv, &P->mu);
        pthread_mutex_unlock(&P->mu);
    }
    pthread_mutex_unlock(&P->run_mu);
}
