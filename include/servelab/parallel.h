/* parallel.h - the worker pool that the CPU ops and host sampling split their loops over.
 *
 * One pool per process: the calling thread plus n_threads - 1 workers. A loop
 * of n items is cut into a few contiguous chunks per thread; each thread runs
 * its own, then takes what is left of the others', so the caller never waits
 * for a worker that has not started (one the kernel has descheduled on a busy
 * machine), only for chunks a worker is already running. Idle workers spin
 * for a few microseconds (an op's next loop usually comes sooner), then sleep.
 */
#ifndef SERVELAB_PARALLEL_H
#define SERVELAB_PARALLEL_H

#include <stdint.h>

/* Runs items [begin, end) of a loop. `worker` is in [0, n_threads): 0 is the
 * caller; no two chunks of one parallel_for run with the same `worker` at once,
 * so it may index per-thread scratch. */
typedef void (*parallel_fn_t)(void *arg, int64_t begin, int64_t end, int worker);

/* Sets the number of threads loops use, the caller included (from then on,
 * whichever thread calls). <= 0: the CPUs this process may run on. */
void parallel_set_threads(int n_threads);
/* The number set (or the default). */
int parallel_n_threads(void);

/* Calls fn over [0, n) in chunks on at most `max_threads` threads (<= 0: all)
 * and returns when every chunk is done. Items must be independent: which
 * thread runs an item never changes what it computes. Nested or concurrent
 * calls (the pool busy with another caller's loop) run on the calling thread
 * alone. */
void parallel_for(int64_t n, int max_threads, parallel_fn_t fn, void *arg);

#endif
