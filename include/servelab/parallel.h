/* parallel.h - the worker pools that the CPU ops and host sampling split their loops over.
 *
 * A pool is the calling thread plus n_threads - 1 workers. A loop of n items
 * is cut into a few contiguous chunks per thread; each thread runs its own,
 * then takes what is left of the others', so the caller never waits for a
 * worker that has not started (one the kernel has descheduled on a busy
 * machine), only for chunks a worker is already running. Idle workers spin
 * for a few microseconds (an op's next loop usually comes sooner), then sleep.
 *
 * Every thread uses the process pool unless it selects another with
 * parallel_use_pool: tensor-parallel CPU ranks, threads of one process, each
 * make their own so that their loops run at once on separate threads.
 */
#ifndef SERVELAB_PARALLEL_H
#define SERVELAB_PARALLEL_H

#include <stdint.h>

/* Runs items [begin, end) of a loop. `worker` is in [0, n_threads) of the
 * pool the loop runs on: 0 is the caller; no two chunks of one parallel_for
 * run with the same `worker` at once, so it may index per-thread scratch
 * sized by parallel_n_threads(). */
typedef void (*parallel_fn_t)(void *arg, int64_t begin, int64_t end, int worker);

typedef struct parallel_pool parallel_pool_t;

/* Makes a pool of n_threads threads, the caller of each loop included (so
 * n_threads - 1 workers, started by the first loop that needs them).
 * n_threads <= 0: the CPUs this process may run on; at most 256. `name` (up to
 * 8 characters, longer is cut; NULL: "pool") goes into the workers' thread
 * names, "sl-<name>-<id>". Dies if memory runs out. Free with parallel_pool_free. */
parallel_pool_t *parallel_pool_new(int n_threads, const char *name);
/* Stops and joins p's workers and frees p. No loop may be running on p, and
 * no thread may use it afterwards (a thread that selected it must select
 * another first; the calling thread's own selection is reset to the process
 * pool if it was p). NULL is a no-op. */
void parallel_pool_free(parallel_pool_t *p);
/* From now on the calling thread's loops (parallel_for, parallel_set_threads,
 * parallel_n_threads) act on p; NULL: the process pool. Per thread: other
 * threads keep theirs. p must outlive the selection. */
void parallel_use_pool(parallel_pool_t *p);

/* Sets the number of threads the calling thread's pool uses for its loops,
 * the caller included (from then on, whichever thread calls on that pool).
 * <= 0: the CPUs this process may run on. */
void parallel_set_threads(int n_threads);
/* The calling thread's pool's thread count: the number set (or the default). */
int parallel_n_threads(void);

/* Calls fn over [0, n) in chunks on at most `max_threads` threads (<= 0: all)
 * of the calling thread's pool and returns when every chunk is done. Items
 * must be independent: which thread runs an item never changes what it
 * computes. Nested or concurrent calls (the pool busy with another caller's
 * loop) run on the calling thread alone. */
void parallel_for(int64_t n, int max_threads, parallel_fn_t fn, void *arg);

/* The spin-wait hint (x86 pause, arm yield) for loops that poll a word
 * another thread will change. */
static inline void parallel_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

#endif
