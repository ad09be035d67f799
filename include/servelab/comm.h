/* comm.h - the collectives tensor-parallel ranks step through: all-reduce, gather, barrier.
 *
 * One communicator joins the `size` ranks of a tensor-parallel group; every
 * rank calls every collective, in the same order, with the same sizes (as
 * with NCCL and torch.distributed). Buffers are backend memory of the
 * caller's rank. Two implementations sit behind this interface:
 * - local (src/parallel/comm_local.c): ranks are threads of this process on
 *   host memory (the CPU backend). All-reduce sums in rank order 0, 1, ...,
 *   size - 1 for every element, so a run is deterministic run to run and
 *   every rank holds the same bits afterwards;
 * - NCCL for CUDA ranks (one device each).
 * See docs/architecture.md, "Tensor parallelism".
 */
#ifndef SERVELAB_COMM_H
#define SERVELAB_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "servelab/core.h"
#include "servelab/dtype.h"

struct sl_ops; /* ops.h */
typedef struct sl_comm sl_comm_t;
struct sl_comm {
    const char *name;   /* "local", "nccl" */
    int size;           /* ranks */
    void *impl;
    /* buf(n) on every rank = the sum of every rank's buf(n). */
    void (*all_reduce_sum)(sl_comm_t *c, int rank, void *buf, int64_t n, sl_dtype_t dt);
    /* recv(size * n) on rank 0 = every rank's send(n), in rank order; recv is
     * only read on rank 0 (NULL elsewhere). */
    void (*gather)(sl_comm_t *c, int rank, const void *send, void *recv, int64_t n, sl_dtype_t dt);
    /* Returns once every rank has called it. */
    void (*barrier)(sl_comm_t *c, int rank);
    /* Frees the communicator (no rank may be in a collective). */
    void (*free)(sl_comm_t *c);
    /* Seconds spent in all_reduce_sum per rank since the last read (the step
     * timing's all-reduce share): comm_take_reduce_s, through take_reduce_s
     * where the time is the device's (NCCL: events), else reduce_s[0]. */
    double *reduce_s;   /* (size) */
    double (*take_reduce_s)(sl_comm_t *c);
    /* Optional (NULL: collectives cannot fail, the local one): 1 with the
     * first failure's message, 0 if none. A failed collective leaves the ones
     * after it undone. */
    int (*last_error)(sl_comm_t *c, char *msg, size_t cap);
    /* The lab's allreduce_delay: each all-reduce lasts delay_s, plus its
     * bytes at delay_gbps (0: none), longer on every rank. Written by rank 0
     * between steps only (the ranks' start barrier publishes it). */
    double delay_s, delay_gbps;
};

/* The local communicator of `size` threads over host memory: fp32 buffers of
 * up to max_elems elements (the largest all-reduce a step makes). */
sl_comm_t *comm_local_new(int size, int64_t max_elems);

/* The shared-device communicator, a test-only mode: ranks whose buffers
 * are backend memory (rank_ops[r]'s) but share one device, which NCCL
 * refuses ("Duplicate GPU detected"). Each collective goes through host
 * staging: the buffer is downloaded (which waits for the rank's work),
 * widened to fp32, reduced as the local communicator does, and uploaded
 * back in the buffer's dtype. Slow, exact in fp32, deterministic: it lets
 * the sharded model run, and be checked, on one device. rank_ops is copied
 * (the caller's array may live on its stack). */
sl_comm_t *comm_staged_new(int size, int64_t max_elems, const struct sl_ops *const *rank_ops);

/* NCCL (builds with CUDA and NCCL: SERVELAB_HAVE_NCCL; comm_nccl.c): size
 * ranks on devices[r], rank r enqueuing on streams[r] (cudaStream_t), one
 * thread per rank. NULL with one line in err (NCCL refuses two ranks on one
 * device). */
sl_comm_t *comm_nccl_new(int size, const int *devices, void *const *streams, sl_err_t *err);
/* NCCL's version ("2.21.5") in buf, or NULL. */
const char *comm_nccl_version(char *buf, size_t cap);

/* Rank 0's all-reduce seconds since the last call (then reset). */
double comm_take_reduce_s(sl_comm_t *c);

/* ---- the barrier the local communicator and the rank threads use ----------- */

/* A reusable barrier of n threads: spins for a few microseconds (a rank's
 * peers usually arrive within one op), then sleeps. */
typedef struct sl_barrier sl_barrier_t;
sl_barrier_t *barrier_new(int n);
void barrier_wait(sl_barrier_t *b);
void barrier_free(sl_barrier_t *b);

#endif
