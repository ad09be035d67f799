/* launch_plan.h - the launch shapes of the elementwise, norm, row-copy and
 * RoPE kernels (kernels/cuda/elementwise.cu, rope_kv.cu), as plain C.
 *
 * Everything a launcher decides before launching lives here, free of CUDA
 * types, so that tests/unit/test_launch_plan.c checks it in every build:
 * the access width (16 bytes when every pointer and row stride allows it,
 * else one element), threads per block and per row, and the grid. Grids are
 * capped at SLK_GRID_CAP blocks per dimension; every kernel loops past it, so
 * the cap never drops work. Callers pass positive sizes (launchers return
 * before planning when there is no work).
 */
#ifndef SERVELAB_LAUNCH_PLAN_H
#define SERVELAB_LAUNCH_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define SLK_GRID_CAP 65535     /* blocks per grid dimension (gridDim.y's hardware limit) */
#define SLK_NORM_MANY_ROWS 1024 /* from this many rows, a norm thread takes 4 accesses, not 1 */
#define SLK_NORM_UNROLL 4      /* accesses a norm thread issues before using any of them */
#define SLK_ROPE_MAX_D 512     /* the inverse frequencies travel in the kernel's arguments */
#define SLK_ROPE_MAX_THREADS 512
#define SLK_ROPE_MAX_BLOCKS 1024

static inline int64_t slk_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t slk_cdiv64(int64_t a, int64_t b) { return (a + b - 1) / b; }

/* Elements per access: 16 / elem_bytes when the OR of every address and
 * row stride involved is a multiple of 16, else 1. */
static inline int slk_vec_elems(int elem_bytes, uintptr_t addr_or) {
    return addr_or % 16 == 0 ? 16 / elem_bytes : 1;
}

/* ---- flat elementwise ops (add, silu_mul): n elements, one pass ---------- */
typedef struct {
    int vec;        /* elements per access; n % vec elements go through a scalar tail */
    int threads;    /* per block */
    int64_t blocks; /* grid-stride over n / vec accesses (and the tail) */
} slk_flat_plan_t;

static inline slk_flat_plan_t slk_plan_flat(int64_t n, int elem_bytes, uintptr_t addr_or) {
    slk_flat_plan_t p;
    p.vec = slk_vec_elems(elem_bytes, addr_or);
    p.threads = 256;
    int64_t items = n / p.vec > 0 ? n / p.vec : 1;
    p.blocks = slk_min64(slk_cdiv64(items, p.threads), SLK_GRID_CAP);
    return p;
}

/* ---- row norms (rmsnorm, add_rmsnorm): T rows of n ---------------------- */
typedef struct {
    int vec;             /* elements per access; divides n */
    int threads;         /* per block: a multiple of 32, at most 1024 */
    int threads_per_row; /* 32 (a warp per row, threads / 32 rows per block) or threads */
    int64_t blocks;      /* rows are strided over blocks past SLK_GRID_CAP */
} slk_norm_plan_t;

/* A row is 16-byte accessed only when n * elem_bytes keeps every row aligned.
 * Threads per row: the fewest (a power of two, 32..1024) such that each takes
 * at most 4 accesses when rows are many (the block's reduction is paid once
 * per 4 accesses), at most 1 when rows are few (a decode step: spread each
 * row over as many threads as possible, for latency). */
static inline slk_norm_plan_t slk_plan_norm(int64_t T, int64_t n, int elem_bytes, uintptr_t addr_or) {
    slk_norm_plan_t p;
    p.vec = slk_vec_elems(elem_bytes, addr_or | (uintptr_t)(n * elem_bytes));
    int64_t accesses = n / p.vec, per_thread = T >= SLK_NORM_MANY_ROWS ? SLK_NORM_UNROLL : 1;
    int tpr = 32;
    while (tpr < 1024 && tpr * per_thread < accesses) tpr *= 2;
    p.threads_per_row = tpr;
    if (tpr == 32) {
        int64_t rows_per_block = slk_min64(T, 8);
        p.threads = 32 * (int)rows_per_block;
        p.blocks = slk_min64(slk_cdiv64(T, rows_per_block), SLK_GRID_CAP);
    } else {
        p.threads = tpr;
        p.blocks = slk_min64(T, SLK_GRID_CAP);
    }
    return p;
}

/* ---- row copies (embed, gather_rows, kv_write): rows of row_bytes -------- */
typedef struct {
    int width;        /* bytes per access: 16, 8, 4, 2 or 1; divides row_bytes */
    int threads;      /* per block, a multiple of 32 */
    int64_t blocks_x; /* over a row's accesses */
    int64_t blocks_y; /* over rows */
} slk_copy_plan_t;

/* The widest access that divides every address and the row size: a copy
 * needs no tail, whatever the dtype. */
static inline slk_copy_plan_t slk_plan_copy(int64_t rows, int64_t row_bytes, uintptr_t addr_or) {
    slk_copy_plan_t p;
    uintptr_t a = addr_or | (uintptr_t)row_bytes;
    p.width = a % 16 == 0 ? 16 : a % 8 == 0 ? 8 : a % 4 == 0 ? 4 : a % 2 == 0 ? 2 : 1;
    int64_t words = row_bytes / p.width;
    p.threads = (int)slk_min64(256, slk_cdiv64(words, 32) * 32);
    p.blocks_x = slk_min64(slk_cdiv64(words, p.threads), SLK_GRID_CAP);
    p.blocks_y = slk_min64(rows, SLK_GRID_CAP);
    return p;
}

/* ---- RoPE (+ KV write): q(T, H, D), k(T, Hkv, D) ------------------------- */
typedef struct {
    int vec;           /* elements per access; divides D / 2 */
    int threads;       /* per block, a multiple of 32 */
    int64_t blocks;    /* tokens are strided over blocks */
    size_t smem_bytes; /* the token's cos and sin, D / 2 floats each */
} slk_rope_plan_t;

/* A block rotates one token at a time: (H + Hkv) * (D / 2) / vec pairs of
 * accesses (x[i..], x[i + D/2 ..]). 16-byte access needs both halves and
 * every head row aligned: D / 2 * elem_bytes a multiple of 16 (and D even). */
static inline slk_rope_plan_t slk_plan_rope(int64_t T, int64_t H, int64_t Hkv, int64_t D, int elem_bytes,
                                            uintptr_t addr_or) {
    slk_rope_plan_t p;
    int64_t half = D / 2;
    uintptr_t strides = (uintptr_t)(half * elem_bytes) | (uintptr_t)(D * elem_bytes);
    p.vec = half > 0 ? slk_vec_elems(elem_bytes, addr_or | strides) : 1;
    int64_t items = (H + Hkv) * (half / p.vec);
    p.threads = (int)slk_min64(SLK_ROPE_MAX_THREADS, slk_cdiv64(items > 0 ? items : 1, 32) * 32);
    p.blocks = slk_min64(T, SLK_ROPE_MAX_BLOCKS);
    p.smem_bytes = (size_t)(2 * half) * sizeof(float);
    return p;
}

#endif
