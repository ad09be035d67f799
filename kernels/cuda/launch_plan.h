/* launch_plan.h - the launch shapes of the elementwise, norm, row-copy, RoPE
 * and GEMV kernels (kernels/cuda/elementwise.cu, rope_kv.cu, gemv.cu), as
 * plain C.
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

/* ---- GEMV / skinny GEMM: out(T, N) = in(T, K) . W(N, K)^T, T <= SLK_GEMV_MAX_T ----
 * Memory-bound: each weight row is read once for all T input rows. A warp
 * owns `rows` weight rows (one K slice of each; 2 at T = 1: on an H200,
 * 10-20% faster than 1 on the llama-3-8b shapes) and each lane issues
 * SLK_GEMV_LOADS weight loads (16 bytes each) before its first FMA; the
 * input slice a lane loads (through L1) serves all of the warp's rows, so L1
 * reads per weight byte are tokens / rows, at most 2. K is split over
 * `ksplit` warps of a block when the rows alone give too few warps to fill
 * the card (N = 256); the slices are summed in shared memory in slice order
 * (deterministic). T runs as the next power of two (1, 2, 4, 8: the graph
 * batch sizes), the padded tokens reading input row T - 1 and storing
 * nothing. The kernel stops at T = 8: a bf16 weight element costs T FMAs,
 * and 4.2 TB/s of weights is 2.1e12 elements/s, so T = 8 already needs 34 of
 * the H200's ~67 fp32 TFLOP/s and T = 16 all of them (plus the widening):
 * past 8 the CUDA cores cannot keep up with HBM at all. In practice the
 * widening, the L1 input reads and the register pressure (one block of 8
 * warps per SM at T = 8) make it slower than cuBLAS's tensor cores from
 * T = 4 already, so the CUDA backend calls it for T <= 2 only (its
 * GEMV_MAX_T, with the measurements). */
#define SLK_GEMV_MAX_T 8
#define SLK_GEMV_THREADS 256    /* 8 warps */
#define SLK_GEMV_LOADS 8        /* weight loads in flight per lane, over its rows */
#define SLK_GEMV_MIN_WARPS 4096 /* ~32 warps on each of 132 SMs: enough bytes in flight for HBM */

typedef struct {
    int vec;        /* elements per access: 16 / elem_bytes, or 1 (the scalar path) */
    int tokens;     /* T rounded up to a power of two: 1, 2, 4 or 8 */
    int rows;       /* weight rows per warp: 2 at T = 1 (measured faster than 1), else min(tokens, 4) */
    int ksplit;     /* warps sharing a row's K: 1, 2, 4 or 8 (divides the block's 8 warps) */
    int threads;    /* per block: SLK_GEMV_THREADS */
    int64_t blocks; /* cdiv(N, rows * 8 / ksplit) */
} slk_gemv_plan_t;

/* 16-byte access needs both base pointers and the row stride K * elem_bytes
 * 16-byte aligned (so that every row is); otherwise every access is one
 * element (correct, slow; no model has such a K). ksplit: the smallest that
 * gives SLK_GEMV_MIN_WARPS warps, as long as every lane keeps at least one
 * access of each row. Callers pass 1 <= T <= SLK_GEMV_MAX_T, N >= 1, K >= 0
 * (the output pointer's alignment does not matter: stores are scalar). */
static inline slk_gemv_plan_t slk_plan_gemv(int64_t T, int64_t N, int64_t K, int elem_bytes, uintptr_t addr_or) {
    slk_gemv_plan_t p;
    p.vec = slk_vec_elems(elem_bytes, addr_or | (uintptr_t)(K * elem_bytes));
    p.tokens = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8;
    p.rows = p.tokens == 1 ? 2 : p.tokens < 4 ? p.tokens : 4;
    p.threads = SLK_GEMV_THREADS;
    const int warps = SLK_GEMV_THREADS / 32;
    const int64_t row_warps = slk_cdiv64(N, p.rows), accesses = K / p.vec;
    p.ksplit = 1;
    while (p.ksplit < warps && row_warps * p.ksplit < SLK_GEMV_MIN_WARPS && accesses >= 64 * p.ksplit) p.ksplit *= 2;
    p.blocks = slk_cdiv64(N, (int64_t)p.rows * (warps / p.ksplit));
    return p;
}

/* ---- AWQ W4A16 GEMV: out(T, N) = in(T, K) . W(N, K)^T, W as AutoAWQ's nibbles ----
 * (linear_awq.cu, on qweight repacked to (N/8, K).) A warp owns 4 int32
 * columns (32 outputs) and reads them in batches of `batch` accesses of 32 k
 * (one zero word and one load of scales per batch: 32 batch divides G). As
 * the bf16 GEMV (slk_plan_gemv), the block's 8 warps share a column's K
 * (ksplit of them, summed in shared memory) until the grid has
 * SLK_AWQ_MIN_WARPS warps, as long as every warp keeps a batch. T runs as
 * the next power of two (1, 2, 4, 8), the padded tokens storing nothing.
 * Takes G a multiple of 32 (dividing K) and N a multiple of 8. */
#define SLK_AWQ_MAX_T 8
#define SLK_AWQ_THREADS 256
#define SLK_AWQ_MIN_WARPS 4096
#define SLK_AWQ_MIN_BLOCKS 512 /* the tensor-core kernel's K split, below */

typedef struct {
    int tokens;     /* T rounded up: 1, 2, 4 or 8 */
    int batch;      /* accesses of 32 k per batch: 4, 2 or 1 (at most 4, 2, 1 at 1-2, 4, 8 tokens) */
    int ksplit;     /* warps sharing a column's K: 1, 2, 4 or 8 */
    int64_t blocks; /* cdiv(cdiv(N / 8, 4), 8 / ksplit) */
} slk_awq_plan_t;

static inline int slk_awq_gemv_takes(int64_t N, int64_t K, int64_t G) {
    return N > 0 && N % 8 == 0 && G > 0 && G % 32 == 0 && K > 0 && K % G == 0;
}

/* Callers pass 1 <= T <= SLK_AWQ_MAX_T and a shape slk_awq_gemv_takes. */
static inline slk_awq_plan_t slk_plan_awq_gemv(int64_t T, int64_t N, int64_t K, int64_t G) {
    slk_awq_plan_t p;
    p.tokens = T <= 1 ? 1 : T <= 2 ? 2 : T <= 4 ? 4 : 8;
    p.batch = p.tokens <= 2 ? 4 : p.tokens == 4 ? 2 : 1; /* registers: T accumulators per nibble */
    while ((G / 32) % p.batch != 0) p.batch /= 2;
    const int64_t col_warps = slk_cdiv64(N / 8, 4), batches = K / (32 * p.batch);
    p.ksplit = 1;
    while (p.ksplit < SLK_AWQ_THREADS / 32 && col_warps * p.ksplit < SLK_AWQ_MIN_WARPS && batches >= 2 * p.ksplit)
        p.ksplit *= 2;
    p.blocks = slk_cdiv64(col_warps, SLK_AWQ_THREADS / 32 / p.ksplit);
    return p;
}

/* ---- AWQ W4A16 on the tensor cores: slk_awq_mma (linear_awq.cu) ----
 * A block is SLK_AWQ_THREADS threads (8 warps) over 8 int32 columns of
 * qweight (64 outputs), 8 * ntiles tokens (gridDim.z takes the next ones),
 * and a chunk of K in steps of 16 (one mma.sync's depth); the warps take the
 * chunk's batches of `batch` steps in turn. A batch lies in one group
 * (batch divides G / 16), so its loads come with one scale and zero load.
 * K is split over gridDim.y = ksplit blocks until the grid has
 * SLK_AWQ_MIN_BLOCKS blocks, keeping a batch for every warp of a chunk.
 * Takes K and G multiples of 16 (G dividing K), N a multiple of 8, any T. */
#define SLK_AWQ_MMA_WARPS 8

typedef struct {
    int ntiles;           /* 8-token mma tiles per block: 1, 2 or 4 */
    int batch;            /* k-steps of 16 per load batch: 1, 2 or 4 */
    int ksplit;           /* blocks along K (gridDim.y) */
    int64_t chunk;        /* k-steps per split, a multiple of batch */
    int64_t col_blocks;   /* cdiv(N / 8, 8) (gridDim.x) */
    int64_t token_blocks; /* cdiv(T, 8 ntiles) (gridDim.z) */
} slk_awq_mma_plan_t;

static inline int slk_awq_mma_takes(int64_t N, int64_t K, int64_t G) {
    return N > 0 && N % 8 == 0 && G > 0 && G % 16 == 0 && K > 0 && K % G == 0;
}

/* Callers pass T >= 1 and a shape slk_awq_mma_takes. */
static inline slk_awq_mma_plan_t slk_plan_awq_mma(int64_t T, int64_t N, int64_t K, int64_t G) {
    slk_awq_mma_plan_t p;
    p.ntiles = T <= 8 ? 1 : T <= 16 ? 2 : 4;
    const int64_t group_steps = G / 16, steps = K / 16;
    const int most = p.ntiles == 4 ? 2 : 4; /* registers: 4 ntiles x 4 m-tiles x 4 accumulators already */
    p.batch = most == 4 && group_steps % 4 == 0 ? 4 : group_steps % 2 == 0 ? 2 : 1;
    p.col_blocks = slk_cdiv64(N / 8, 8);
    p.token_blocks = slk_cdiv64(T, 8 * p.ntiles);
    const int64_t batches = steps / p.batch;
    int64_t split = slk_min64(slk_cdiv64(SLK_AWQ_MIN_BLOCKS, p.col_blocks * p.token_blocks),
                              slk_cdiv64(batches, SLK_AWQ_MMA_WARPS));
    if (split < 1) split = 1;
    const int64_t chunk_batches = slk_cdiv64(batches, split);
    p.chunk = chunk_batches * p.batch;
    p.ksplit = (int)slk_cdiv64(batches, chunk_batches);
    return p;
}

#endif
