/* attention_plan.c - the launch plan of the CUDA paged attention (see
 * attention_plan.h): path, partitions, GQA head tiles, tiles, grids, shared
 * memory and workspace. Pure C, no CUDA types: compiled into servelab_host in
 * every build (and into servelab_cuda, which needs it too) and unit-tested on
 * the CPU.
 *
 * Choices: decode is bound by reading the KV cache, so it needs blocks on
 * every SM: the context is split into partitions until partitions x KV-head
 * tiles x S >= 2 x the SM count (a 4k context at S = 1, Hkv = 8 on 132 SMs:
 * 33 wanted, 32 partitions of 128 tokens), with partitions of whole 64-token
 * tiles and at most 1024 tokens (so one long context among short ones is
 * spread over blocks too). The grid along the partitions is capped at 16
 * blocks per SM (or the target, if more), and blocks loop over partitions
 * beyond it: a graph captured for a long max_seq_len launches no thousands
 * of blocks with nothing to do. The split depends on S and the SM count,
 * so a sequence's fp32 partial sums (and its last bits) may differ between
 * batch sizes; for a given plan it is deterministic. The decode head tile is the group size
 * rounded up to a power of two, capped at 8, so one block reads each K/V row
 * once for up to 8 query heads. The FMA prefill's (f32) tiles keep its
 * fp32 shared-memory tiles (Q, K, V, P) at 43-104 KB and a thread's
 * accumulators under ~100 registers: BQ x BK = 64x64 (D=32 and D=64), 64x32 (D=128), 32x32 (D=256).
 * D=32 keeps D=64's 64x64: its thread layout, and 43 KB (under the 48 KB
 * default); a larger BQ would mostly add masked rows (decode rows of mixed
 * batches, short prompts) and fewer blocks for the small models that use it.
 * The tensor-core prefill (bf16, f16; mma.sync) keeps S, P, O, and Q up to
 * D=128, in registers; 16-bit Q, K and V tiles are in shared memory: BQ = 64
 * (4 warps x 16 rows) at every D, BK = 64 at D <= 128 (15, 27, 51 KB) and 32
 * at D=256 (66 KB; there O alone takes 128 registers per thread, and Q is
 * reloaded per tile, so S stays narrow). The wmma fallback has the same tiles
 * plus fp32 S, 16-bit P and row-factor scratch in shared memory (46, 58, 82,
 * 85 KB).
 * Other head dims (80, 96, 112) need a different thread layout: the decode
 * PV phase needs 128 % (D / vec) == 0 and the prefill O columns D % 32 == 0.
 */
#include "attention_plan.h"

#include <string.h>

int attn_plan_supports_head_dim(int64_t D) { return D == 32 || D == 64 || D == 128 || D == 256; }

int64_t attn_plan_head_tile(int64_t group) {
    int64_t tile = 1;
    while (tile < group && tile < ATTN_DECODE_MAX_HEADS) tile *= 2;
    return tile;
}

int64_t attn_plan_target_parts(int64_t S, int64_t n_kv_tiles, int64_t n_sms) {
    if (S < 1 || n_kv_tiles < 1) return 1;
    if (n_sms < 1) n_sms = 1;
    int64_t blocks = (int64_t)ATTN_DECODE_BLOCKS_PER_SM * n_sms, per_part = n_kv_tiles * S;
    int64_t t = (blocks + per_part - 1) / per_part;
    return t < 1 ? 1 : t;
}

int64_t attn_plan_n_parts(int64_t max_seq_len, int64_t target_parts) {
    if (max_seq_len < 1) return 1;
    int64_t n_tiles = (max_seq_len + ATTN_DECODE_TILE - 1) / ATTN_DECODE_TILE;
    int64_t by_max = (max_seq_len + ATTN_DECODE_PARTITION_MAX - 1) / ATTN_DECODE_PARTITION_MAX;
    int64_t n = target_parts < n_tiles ? target_parts : n_tiles;
    if (n < by_max) n = by_max;
    return n < 1 ? 1 : n;
}

size_t attn_plan_workspace_bytes(int64_t S, int64_t max_seq_len, int64_t max_query_len, int64_t H,
                                 int64_t Hkv, int64_t D, int64_t n_sms) {
    if (max_query_len != 1 || S < 1 || H < 1 || Hkv < 1 || H % Hkv != 0 || !attn_plan_supports_head_dim(D))
        return 0;
    int64_t group = H / Hkv, tile = attn_plan_head_tile(group);
    int64_t n_kv_tiles = Hkv * ((group + tile - 1) / tile);
    int64_t n_parts = attn_plan_n_parts(max_seq_len, attn_plan_target_parts(S, n_kv_tiles, n_sms));
    if (n_parts == 1) return 0;
    /* o: D floats, m and l: one float each, per (sequence, query head, partition) */
    return (size_t)S * (size_t)H * (size_t)n_parts * (size_t)(D + 2) * sizeof(float);
}

/* Layout (attention_decode.cu): 128 bytes of per-head stats (m, l, alpha of
 * up to 8 heads), two buffers of ATTN_DECODE_TILE int64 slots, then a union of
 * {q (head_tile, D) + p (ATTN_DECODE_TILE, head_tile)} during the loop and
 * the cross-thread reduction buffer (ATTN_THREADS, head_tile, vec) after it. */
size_t attn_plan_decode_smem_bytes(int64_t head_tile, int64_t D, int64_t vec) {
    int64_t loop = head_tile * D + (int64_t)ATTN_DECODE_TILE * head_tile;
    int64_t red = (int64_t)ATTN_THREADS * head_tile * vec;
    int64_t uni = loop > red ? loop : red;
    return 128 + 2 * (size_t)ATTN_DECODE_TILE * 8 + (size_t)uni * sizeof(float);
}

/* Layout (attention_prefill.cu): fp32 q (BQ, D+4), k (BK, D+4), v (BK, D),
 * p (BQ, BK+4), then BQ int32 positions. */
size_t attn_plan_prefill_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D) {
    int64_t floats = q_tile * (D + 4) + kv_tile * (D + 4) + kv_tile * D + q_tile * (kv_tile + 4);
    return (size_t)floats * sizeof(float) + (size_t)q_tile * sizeof(int32_t);
}

/* Layout (attention_prefill.cu, MmaLayout): 16-bit q (BQ, D+8), k (BK, D+8),
 * v (BK, D+8), then BQ int32 positions; S and P stay in registers. */
size_t attn_plan_prefill_mma_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D) {
    return (size_t)(q_tile + 2 * kv_tile) * (size_t)(D + 8) * 2 + (size_t)q_tile * 4;
}

/* Layout (attention_prefill_wmma.cu, WmmaLayout): 16-bit q (BQ, D+8), k (BK,
 * D+8), v (BK, D+8), then fp32 s (BQ, BK+8), 16-bit p (BQ, BK+8), fp32 row
 * factors (BQ, 16), then BQ int32 positions. */
size_t attn_plan_prefill_wmma_smem_bytes(int64_t q_tile, int64_t kv_tile, int64_t D) {
    int64_t halves = q_tile * (D + 8) + 2 * kv_tile * (D + 8) + q_tile * (kv_tile + 8);
    int64_t words = q_tile * (kv_tile + 8) + q_tile * 16 + q_tile;
    return (size_t)halves * 2 + (size_t)words * 4;
}

void attn_plan_use_wmma_prefill(attn_plan_t *p) {
    if (!p->prefill_tc) return;
    p->prefill_wmma = 1;
    p->prefill_smem_bytes = attn_plan_prefill_wmma_smem_bytes(p->q_tile, p->kv_tile, p->D);
}

int attn_plan_make(attn_plan_t *p, int64_t T, int64_t S, int64_t max_seq_len, int64_t max_query_len,
                   int64_t H, int64_t Hkv, int64_t D, int64_t elem_bytes, int64_t n_sms) {
    memset(p, 0, sizeof *p);
    if (T < 1 || S < 1 || H < 1 || Hkv < 1 || H % Hkv != 0) return -1;
    if (!attn_plan_supports_head_dim(D) || (elem_bytes != 2 && elem_bytes != 4)) return -1;
    if (S > ATTN_MAX_GRID_YZ || H > ATTN_MAX_GRID_YZ) return -1;
    p->T = T, p->S = S, p->H = H, p->Hkv = Hkv, p->D = D;
    p->group = H / Hkv;
    p->elem_bytes = elem_bytes;
    p->vec = 16 / elem_bytes;
    p->path = max_query_len == 1 ? ATTN_PATH_DECODE : ATTN_PATH_PREFILL;

    /* decode */
    p->n_sms = n_sms < 1 ? 1 : n_sms;
    p->head_tile = attn_plan_head_tile(p->group);
    p->n_head_tiles = (p->group + p->head_tile - 1) / p->head_tile;
    p->target_parts = attn_plan_target_parts(S, Hkv * p->n_head_tiles, p->n_sms);
    p->n_parts = attn_plan_n_parts(max_seq_len, p->target_parts);
    /* the cap: blocks beyond ATTN_DECODE_GRID_PER_SM per SM loop instead */
    int64_t cap = attn_plan_target_parts(S, Hkv * p->n_head_tiles,
                                         p->n_sms * (ATTN_DECODE_GRID_PER_SM / ATTN_DECODE_BLOCKS_PER_SM));
    if (cap < p->target_parts) cap = p->target_parts;
    p->decode_grid[0] = p->n_parts < cap ? p->n_parts : cap;
    p->decode_grid[1] = Hkv * p->n_head_tiles;
    p->decode_grid[2] = S;
    p->decode_smem_bytes = attn_plan_decode_smem_bytes(p->head_tile, D, p->vec);
    p->reduce = p->n_parts > 1;
    p->reduce_grid[0] = H;
    p->reduce_grid[1] = S;
    p->reduce_grid[2] = 1;
    /* n_parts fp32 weights, in whole 16-byte units: the kernels declare their
     * dynamic shared memory as float4[], so ptxas may read the last weights as
     * one LDS.128 (compute-sanitizer memcheck on an H200 caught 21 weights in
     * 84 bytes read at 80..95). */
    p->reduce_smem_bytes = ((size_t)p->n_parts * sizeof(float) + 15) / 16 * 16;

    /* prefill: tensor cores for 16-bit dtypes; f32 stays on the FMA kernel,
     * the exactness reference */
    p->prefill_tc = elem_bytes == 2;
    if (p->prefill_tc) {
        p->q_tile = ATTN_PREFILL_TC_BQ;
        p->kv_tile = D == 32    ? ATTN_PREFILL_TC_BK_D32
                     : D == 64  ? ATTN_PREFILL_TC_BK_D64
                     : D == 128 ? ATTN_PREFILL_TC_BK_D128
                                : ATTN_PREFILL_TC_BK_D256;
    } else {
        switch (D) {
        case 32: p->q_tile = ATTN_PREFILL_BQ_D32, p->kv_tile = ATTN_PREFILL_BK_D32; break;
        case 64: p->q_tile = ATTN_PREFILL_BQ_D64, p->kv_tile = ATTN_PREFILL_BK_D64; break;
        case 128: p->q_tile = ATTN_PREFILL_BQ_D128, p->kv_tile = ATTN_PREFILL_BK_D128; break;
        default: p->q_tile = ATTN_PREFILL_BQ_D256, p->kv_tile = ATTN_PREFILL_BK_D256; break;
        }
    }
    /* max_query_len bounds every sequence's query count; a meta without it
     * (< 1) falls back to T, the bound that always holds. */
    int64_t qmax = max_query_len >= 1 ? max_query_len : T;
    p->n_q_tiles = (qmax + p->q_tile - 1) / p->q_tile;
    p->prefill_grid[0] = p->n_q_tiles;
    p->prefill_grid[1] = H;
    p->prefill_grid[2] = S;
    p->prefill_smem_bytes = p->prefill_tc ? attn_plan_prefill_mma_smem_bytes(p->q_tile, p->kv_tile, D)
                                          : attn_plan_prefill_smem_bytes(p->q_tile, p->kv_tile, D);

    if (p->path == ATTN_PATH_DECODE) {
        if (p->decode_grid[1] > ATTN_MAX_GRID_YZ || p->n_parts > INT32_MAX) return -1;
        if (p->decode_smem_bytes > ATTN_MAX_SMEM_BYTES || p->reduce_smem_bytes > ATTN_MAX_SMEM_BYTES)
            return -1;
        p->workspace_bytes = attn_plan_workspace_bytes(S, max_seq_len, max_query_len, H, Hkv, D, p->n_sms);
    } else {
        if (p->prefill_grid[0] > INT32_MAX || p->prefill_smem_bytes > ATTN_MAX_SMEM_BYTES) return -1;
        p->workspace_bytes = 0;
    }
    p->ws_m_offset = (size_t)S * (size_t)H * (size_t)p->n_parts * (size_t)D * sizeof(float);
    p->ws_l_offset = p->ws_m_offset + (size_t)S * (size_t)H * (size_t)p->n_parts * sizeof(float);
    return 0;
}
