/* attention_plan.h - the launch plan of the CUDA paged attention, as pure C.
 *
 * Everything about one slk_attention call that is decided on the host lives
 * here, free of CUDA types, so that it is unit-tested in every build
 * (tests/unit/test_attention_plan.c) and shared by the two kernels:
 *   - the path: decode (every sequence has one query token, i.e.
 *     max_query_len == 1) or varlen prefill (anything else, mixed batches too);
 *   - decode: partitions of ATTN_DECODE_PARTITION context tokens, the GQA
 *     head tile (query heads of one KV head computed by one block), grids,
 *     shared memory and the workspace of fp32 partials;
 *   - prefill: the kernel (tensor cores for bf16 / f16, fp32 FMA for f32),
 *     query tile / KV tile sizes by head dim, grid, shared memory.
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

/* Context tokens per decode partition (one block's share of a sequence). */
#define ATTN_DECODE_PARTITION 512
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
/* The tensor-core prefill (16-bit dtypes): 64 query rows per block (one warp
 * per 16) at every head dim, KV rows per step by head dim. */
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

    /* decode: grid (n_parts, Hkv * n_head_tiles, S), ATTN_THREADS threads */
    int64_t n_parts;            /* partitions of the longest context; >= 1 */
    int64_t head_tile;          /* query heads per block: 1, 2, 4 or 8 (>= group when group <= 8) */
    int64_t n_head_tiles;       /* ceil(group / head_tile) */
    int64_t decode_grid[3];
    size_t decode_smem_bytes;
    /* reduce (only when n_parts > 1): grid (H, S), ATTN_THREADS threads */
    int reduce;                 /* 1 when partials are written and reduced */
    int64_t reduce_grid[3];
    size_t reduce_smem_bytes;   /* n_parts fp32 weights */

    /* prefill: grid (n_q_tiles, H, S), ATTN_THREADS threads */
    int prefill_tc;             /* 1: the tensor-core kernel (elem_bytes 2); 0: the fp32 FMA one */
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

/* Decode partitions for a longest context of max_seq_len tokens:
 * ceil(max_seq_len / ATTN_DECODE_PARTITION), at least 1. */
int64_t attn_plan_n_parts(int64_t max_seq_len);

/* Workspace bytes for S sequences, H query heads, head dim D: the fp32
 * partials of the decode path when it splits the context (n_parts > 1), else 0
 * (prefill and one-partition decode write the output directly). Grows with
 * S and max_seq_len, so a backend may size it once for its largest decode
 * step (max_query_len = 1). Returns 0 for an unsupported D. */
size_t attn_plan_workspace_bytes(int64_t S, int64_t max_seq_len, int64_t max_query_len, int64_t H,
                                 int64_t D);

/* Fills *p for T tokens of S sequences (max_seq_len, max_query_len as in
 * sl_attn_meta_t), H query and Hkv KV heads, head dim D, elements of
 * elem_bytes (4 or 2). Returns 0, or -1 (and *p unspecified) when the shape
 * is unsupported: T < 1, S < 1, H or Hkv < 1, H % Hkv != 0, D not in
 * {32, 64, 128, 256}, elem_bytes not 2 or 4, or a grid dimension over CUDA's
 * limits. */
int attn_plan_make(attn_plan_t *p, int64_t T, int64_t S, int64_t max_seq_len, int64_t max_query_len,
                   int64_t H, int64_t Hkv, int64_t D, int64_t elem_bytes);

/* Shared-memory bytes of the kernels, by the formulas their layouts use. */
size_t attn_plan_decode_smem_bytes(int64_t head_tile, int64_t D, int64_t vec);
size_t attn_plan_prefill_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D);
size_t attn_plan_prefill_tc_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D);

/* The kernels' own shared-memory layouts (attention_decode.cu,
 * attention_prefill.cu; CUDA builds only, callable without a device): bytes
 * of the decode kernel for elem_bytes (4: f32; 2: bf16 / f16), D and
 * head_tile, and of the prefill kernel (FMA for 4, tensor cores for 2) with
 * its tiles; 0 for a shape no kernel is instantiated for. A launch refuses a
 * plan whose bytes differ, but only on a GPU: the unit test compares these
 * with the plan's functions above in every CUDA build. */
size_t attn_kernel_decode_smem_bytes(int64_t elem_bytes, int64_t D, int64_t head_tile);
size_t attn_kernel_prefill_smem_bytes(int64_t elem_bytes, int64_t D, int64_t *q_tile, int64_t *kv_tile);

#ifdef __cplusplus
}
#endif

#endif
