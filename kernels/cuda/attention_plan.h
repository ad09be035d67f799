/* attention_plan.h - the launch plan of the CUDA paged attention, as pure C.
 *
 * Everything about one slk_attention call that is decided on the host lives
 * here, free of CUDA types, so that it is unit-tested in every build
 * (tests/unit/test_attention_plan.c) and shared by the two kernels:
 *   - the path: decode (every sequence has one query token, i.e.
 *     max_query_len == 1) or varlen prefill (anything else, mixed batches too);
 *   - decode: how many partitions the context is split into (enough blocks
 *     for the device's SMs, see attn_plan_target_parts), the GQA head tile
 *     (query heads of one KV head computed by one block), grids, shared
 *     memory and the workspace of fp32 partials; attn_decode_split, shared
 *     with the kernels, cuts one sequence's context into partitions;
 *   - prefill: the kernel (tensor cores for bf16 / f16: mma.sync, or the
 *     wmma fallback; fp32 FMA for f32), query tile / KV tile sizes by head
 *     dim, grid, shared memory.
 * The kernels (attention_decode.cu, attention_prefill.cu) lay out their
 * shared memory by the same formulas and check the byte counts at launch.
 */
#ifndef SERVELAB_ATTENTION_PLAN_H
#define SERVELAB_ATTENTION_PLAN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Most context tokens per decode partition (one block's share of a
 * sequence): a longer context is split into more partitions, so that one
 * long sequence among short ones is not streamed by a handful of blocks. */
#define ATTN_DECODE_PARTITION_MAX 1024
/* The decode split aims at partitions x KV-head tiles x S >= this many blocks
 * per SM, where the contexts are long enough (one tile per partition at least). */
#define ATTN_DECODE_BLOCKS_PER_SM 2
/* The decode grid has at most this many blocks per SM (or the target above, if
 * more) along the partitions; a block loops over partitions past the grid. */
#define ATTN_DECODE_GRID_PER_SM 16
/* Threads of every attention kernel. */
#define ATTN_THREADS 128
/* Tokens per step of the decode kernel's online softmax (scores kept in shared memory). */
#define ATTN_DECODE_TILE 64
/* The most query heads (of one KV head) one decode block computes. */
#define ATTN_DECODE_MAX_HEADS 8
/* CUDA's limit on gridDim.y and gridDim.z. */
#define ATTN_MAX_GRID_YZ 65535
/* Largest dynamic shared memory the plan asks for (H100/H200 allow 227 KB per block). */
#define ATTN_MAX_SMEM_BYTES (200 * 1024)

/* Prefill tiles: query rows and KV rows per block step, by head dim. */
#define ATTN_PREFILL_BQ_D32 64
#define ATTN_PREFILL_BK_D32 64
#define ATTN_PREFILL_BQ_D64 64
#define ATTN_PREFILL_BK_D64 64
#define ATTN_PREFILL_BQ_D128 64
#define ATTN_PREFILL_BK_D128 32
#define ATTN_PREFILL_BQ_D256 32
#define ATTN_PREFILL_BK_D256 32
/* The tensor-core prefills (16-bit dtypes, mma.sync and wmma alike): 64 query
 * rows per block (one warp per 16) at every head dim, KV rows per step by head dim. */
#define ATTN_PREFILL_TC_BQ 64
#define ATTN_PREFILL_TC_BK_D32 64
#define ATTN_PREFILL_TC_BK_D64 64
#define ATTN_PREFILL_TC_BK_D128 64
#define ATTN_PREFILL_TC_BK_D256 32

typedef enum { ATTN_PATH_DECODE = 0, ATTN_PATH_PREFILL = 1 } attn_path_t;

typedef struct {
    attn_path_t path;
    int64_t T, S, H, Hkv, D;
    int64_t group;              /* H / Hkv: query heads per KV head */
    int64_t elem_bytes;         /* 4 (f32) or 2 (f16, bf16) */
    int64_t vec;                /* elements per 16-byte vector: 16 / elem_bytes */

    /* decode: grid (min(n_parts, cap), Hkv * n_head_tiles, S), ATTN_THREADS threads */
    int64_t n_sms;              /* the device's SM count the plan was made for */
    int64_t target_parts;       /* attn_plan_target_parts: the split aimed at, per sequence */
    int64_t n_parts;            /* most partitions of any context <= max_seq_len; >= 1 */
    int64_t head_tile;          /* query heads per block: 1, 2, 4 or 8 (>= group when group <= 8) */
    int64_t n_head_tiles;       /* ceil(group / head_tile) */
    int64_t decode_grid[3];
    size_t decode_smem_bytes;
    /* reduce (only when n_parts > 1): grid (H, S), ATTN_THREADS threads */
    int reduce;                 /* 1 when partials are written and reduced */
    int64_t reduce_grid[3];
    size_t reduce_smem_bytes;   /* n_parts fp32 weights, rounded up to 16 bytes */

    /* prefill: grid (n_q_tiles, H, S), ATTN_THREADS threads */
    int prefill_tc;             /* 1: a tensor-core kernel (elem_bytes 2); 0: the fp32 FMA one */
    int prefill_wmma;           /* tensor cores: 0 the mma.sync kernel, 1 the wmma fallback */
    int64_t q_tile, kv_tile;    /* BQ query rows, BK KV rows */
    int64_t n_q_tiles;          /* ceil(max_query_len / BQ) */
    int64_t prefill_grid[3];
    size_t prefill_smem_bytes;

    /* workspace: fp32 partials (decode with n_parts > 1 only, else 0 bytes)
     *   o (S, H, n_parts, D) at byte 0, m (S, H, n_parts) at m_offset,
     *   l (S, H, n_parts) at l_offset; m is the max logit, l the exp-sum,
     *   o the unnormalized sum of exp(logit - m) * v over the partition. */
    size_t workspace_bytes;
    size_t ws_m_offset, ws_l_offset;
} attn_plan_t;

/* Whether head dim D has kernels (32, 64, 128, 256). */
int attn_plan_supports_head_dim(int64_t D);

/* Query heads one decode block computes for a GQA group of `group` heads:
 * the group rounded up to a power of two, at most ATTN_DECODE_MAX_HEADS. */
int64_t attn_plan_head_tile(int64_t group);

/* Partitions per sequence the decode split aims at, so that the blocks
 * (partitions x n_kv_tiles x S, n_kv_tiles = Hkv * head tiles per KV head)
 * fill n_sms SMs ATTN_DECODE_BLOCKS_PER_SM times:
 * ceil(ATTN_DECODE_BLOCKS_PER_SM * n_sms / (n_kv_tiles * S)), at least 1. */
int64_t attn_plan_target_parts(int64_t S, int64_t n_kv_tiles, int64_t n_sms);

/* Most partitions attn_decode_split makes of a context of up to max_seq_len
 * tokens for target_parts: max(min(target, ceil(max_seq_len / TILE)),
 * ceil(max_seq_len / PARTITION_MAX)), at least 1. */
int64_t attn_plan_n_parts(int64_t max_seq_len, int64_t target_parts);

/* Workspace bytes for S sequences, H query and Hkv KV heads, head dim D on a
 * device of n_sms SMs: the fp32 partials of the decode path when it may split
 * a context (n_parts > 1), else 0 (prefill and one-partition decode write the
 * output directly). Returns 0 for an unsupported shape. */
size_t attn_plan_workspace_bytes(int64_t S, int64_t max_seq_len, int64_t max_query_len, int64_t H,
                                 int64_t Hkv, int64_t D, int64_t n_sms);

/* Fills *p for T tokens of S sequences (max_seq_len, max_query_len as in
 * sl_attn_meta_t), H query and Hkv KV heads, head dim D, elements of
 * elem_bytes (4 or 2), on a device of n_sms SMs (< 1 counts as 1). Returns 0,
 * or -1 (and *p unspecified) when the shape is unsupported: T < 1, S < 1, H or
 * Hkv < 1, H % Hkv != 0, D not in {32, 64, 128, 256}, elem_bytes not 2 or 4,
 * or a grid dimension over CUDA's limits. */
int attn_plan_make(attn_plan_t *p, int64_t T, int64_t S, int64_t max_seq_len, int64_t max_query_len,
                   int64_t H, int64_t Hkv, int64_t D, int64_t elem_bytes, int64_t n_sms);

#if defined(__CUDACC__)
#define ATTN_HOST_DEVICE __host__ __device__
#else
#define ATTN_HOST_DEVICE
#endif

/* How the decode kernels (partitions, then the reduce) cut one sequence's
 * context of n_ctx >= 1 tokens: into *n_valid partitions of *part_len tokens
 * (a multiple of ATTN_DECODE_TILE; the last one shorter), partition i being
 * [i * part_len, min((i + 1) * part_len, n_ctx)), none of them empty. It aims
 * at target_parts partitions, fewer if the context has fewer tiles, more if
 * they would exceed ATTN_DECODE_PARTITION_MAX tokens, and never more than
 * n_parts (the workspace's; a context over max_seq_len then gets longer
 * partitions). It depends on the sequence's own length and the plan only, so
 * a sequence's result does not depend on the other sequences of the batch
 * beyond S (through target_parts) and, for a context over max_seq_len, n_parts. */
static inline ATTN_HOST_DEVICE void attn_decode_split(int n_ctx, int target_parts, int n_parts, int *part_len,
                                                      int *n_valid) {
    const int n_tiles = (n_ctx + ATTN_DECODE_TILE - 1) / ATTN_DECODE_TILE;
    int want = target_parts < n_tiles ? target_parts : n_tiles;
    const int by_max = (n_ctx + ATTN_DECODE_PARTITION_MAX - 1) / ATTN_DECODE_PARTITION_MAX;
    if (want < by_max) want = by_max;
    if (want > n_parts) want = n_parts;
    if (want < 1) want = 1;
    *part_len = (n_tiles + want - 1) / want * ATTN_DECODE_TILE;
    *n_valid = (n_ctx + *part_len - 1) / *part_len;
}

/* Switches a plan made by attn_plan_make from the mma.sync prefill kernel to
 * the wmma one (SERVELAB_ATTN_PREFILL=wmma): same tiles and grid, its shared
 * memory. Nothing changes for a plan without tensor cores (f32). */
void attn_plan_use_wmma_prefill(attn_plan_t *p);

/* Shared-memory bytes of the kernels, by the formulas their layouts use. */
size_t attn_plan_decode_smem_bytes(int64_t head_tile, int64_t D, int64_t vec);
size_t attn_plan_prefill_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D);
size_t attn_plan_prefill_mma_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D);
size_t attn_plan_prefill_wmma_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D);

/* The kernels' own shared-memory layouts (attention_decode.cu,
 * attention_prefill*.cu; CUDA builds only, callable without a device): bytes
 * of the decode kernel for elem_bytes (4: f32; 2: bf16 / f16), D and
 * head_tile, and of the prefill kernel (FMA for 4; for 2, mma.sync, or wmma
 * when `wmma`) with its tiles; 0 for a shape no kernel is instantiated for. A
 * launch refuses a plan whose bytes differ, but only on a GPU: the unit test
 * compares these with the plan's functions above in every CUDA build. */
size_t attn_kernel_decode_smem_bytes(int64_t elem_bytes, int64_t D, int64_t head_tile);
size_t attn_kernel_prefill_smem_bytes(int64_t elem_bytes, int wmma, int64_t D, int64_t *q_tile, int64_t *kv_tile);

#ifdef __cplusplus
}
#endif

#endif
