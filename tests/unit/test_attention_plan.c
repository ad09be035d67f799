/* test_attention_plan.c - the CUDA attention's launch plan, on the CPU.
 *
 * attention_plan.c is pure C and decides everything host-side about a call:
 * path, decode partitions (from the SM count), GQA head tiles, prefill
 * tiles, grids, shared memory and workspace bytes, and which prefill kernel
 * (tensor cores for 16-bit dtypes, FMA for f32). These tests pin its
 * arithmetic at the boundaries (64/65 tokens, 1024/1025, 0 and 1 token,
 * group sizes around powers of two), the split of a context the kernels
 * share (attn_decode_split), the head dim 32 of models/tiny, and its rejections, in every
 * build, GPU or not; in a CUDA build also that its shared-memory sizes are
 * the kernels' own layouts (no device needed).
 */
#include "attention_plan.h"
#include "test.h"

/* The SM count of an H100 SXM / H200, as the plans below are made for. */
#define SMS 132

/* parts x KV-head tiles x S >= 2 x SMs: llama-3-8b (Hkv 8) at S = 1 wants 33
 * partitions on 132 SMs, tinyllama (Hkv 4, one head tile of 8) 66, batch 64
 * one; no SM count counts as 1. */
static void test_decode_targets_twice_the_sm_count(void) {
    CHECK_EQ_INT(ATTN_DECODE_BLOCKS_PER_SM, 2);
    CHECK_EQ_INT(attn_plan_target_parts(1, 8, SMS), 33);
    CHECK_EQ_INT(attn_plan_target_parts(1, 4, SMS), 66);
    CHECK_EQ_INT(attn_plan_target_parts(3, 2, SMS), 44);
    CHECK_EQ_INT(attn_plan_target_parts(64, 8, SMS), 1);
    CHECK_EQ_INT(attn_plan_target_parts(1000, 8, SMS), 1);
    CHECK_EQ_INT(attn_plan_target_parts(1, 1, 0), 2);
    CHECK_EQ_INT(attn_plan_target_parts(0, 8, SMS), 1);
    /* the most partitions: the target, capped by the tiles, at least one per 1024 tokens */
    CHECK_EQ_INT(ATTN_DECODE_PARTITION_MAX, 1024);
    CHECK_EQ_INT(attn_plan_n_parts(0, 33), 1);
    CHECK_EQ_INT(attn_plan_n_parts(1, 33), 1);
    CHECK_EQ_INT(attn_plan_n_parts(64, 33), 1);
    CHECK_EQ_INT(attn_plan_n_parts(65, 33), 2);
    CHECK_EQ_INT(attn_plan_n_parts(4096, 33), 33);
    CHECK_EQ_INT(attn_plan_n_parts(4096, 66), 64);
    CHECK_EQ_INT(attn_plan_n_parts(1024, 1), 1);
    CHECK_EQ_INT(attn_plan_n_parts(1025, 1), 2);
    CHECK_EQ_INT(attn_plan_n_parts(4096, 1), 4);
    CHECK_EQ_INT(attn_plan_n_parts(131072, 33), 128);
}

/* The plan fills the SMs wherever the longest context has enough tiles, for
 * every batch, GQA shape and SM count; the grid never exceeds the partitions
 * and is capped at 16 blocks per SM (or the target) along them. */
static void test_decode_plan_fills_the_sms_where_the_context_allows(void) {
    static const int64_t Ss[] = {1, 2, 3, 7, 16, 64, 256}, Hkvs[] = {1, 2, 4, 8}, groups[] = {1, 4, 8, 12};
    static const int64_t msls[] = {1, 63, 64, 65, 512, 4096, 4097, 32768}, smss[] = {1, 78, 114, 132};
    for (size_t a = 0; a < sizeof Ss / sizeof *Ss; a++)
        for (size_t b = 0; b < sizeof Hkvs / sizeof *Hkvs; b++)
            for (size_t c = 0; c < sizeof groups / sizeof *groups; c++)
                for (size_t d = 0; d < sizeof msls / sizeof *msls; d++)
                    for (size_t e = 0; e < sizeof smss / sizeof *smss; e++) {
                        const int64_t S = Ss[a], Hkv = Hkvs[b], H = Hkv * groups[c], msl = msls[d], sms = smss[e];
                        attn_plan_t p;
                        CHECK_EQ_INT(attn_plan_make(&p, S, S, msl, 1, H, Hkv, 128, 2, sms), 0);
                        const int64_t per_part = Hkv * p.n_head_tiles * S;
                        CHECK_EQ_INT(p.target_parts, attn_plan_target_parts(S, per_part / S, sms));
                        CHECK_EQ_INT(p.n_parts, attn_plan_n_parts(msl, p.target_parts));
                        if (msl >= ATTN_DECODE_TILE * p.target_parts) CHECK(p.n_parts * per_part >= 2 * sms);
                        CHECK(p.decode_grid[0] >= 1 && p.decode_grid[0] <= p.n_parts);
                        CHECK(p.decode_grid[0] >= (p.n_parts < p.target_parts ? p.n_parts : p.target_parts));
                        if (p.decode_grid[0] > p.target_parts)
                            CHECK((p.decode_grid[0] - 1) * per_part < ATTN_DECODE_GRID_PER_SM * sms);
                        CHECK_EQ_INT(p.decode_grid[1], per_part / S);
                        CHECK_EQ_INT(p.decode_grid[2], S);
                        CHECK_EQ_INT(p.reduce, p.n_parts > 1);
                        CHECK_EQ_INT(p.workspace_bytes, attn_plan_workspace_bytes(S, msl, 1, H, Hkv, 128, sms));
                    }
}

/* The grid cap: batch 64 of llama-3-8b captured for 32k tokens has 32
 * partitions of 1024 tokens at most but 5 blocks per (sequence, KV head),
 * which loop; at 4k the 4 partitions fit the grid. */
static void test_decode_grid_is_capped_and_blocks_loop_over_partitions(void) {
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 64, 64, 32768, 1, 32, 8, 128, 2, SMS), 0);
    CHECK_EQ_INT(p.target_parts, 1);
    CHECK_EQ_INT(p.n_parts, 32);
    CHECK_EQ_INT(p.decode_grid[0], 5); /* ceil(16 * 132 / (8 * 64)) */
    CHECK_EQ_INT(attn_plan_make(&p, 64, 64, 4096, 1, 32, 8, 128, 2, SMS), 0);
    CHECK_EQ_INT(p.n_parts, 4);
    CHECK_EQ_INT(p.decode_grid[0], 4);
    /* batch 1 at 4k: 33 wanted, 33 in the grid */
    CHECK_EQ_INT(attn_plan_make(&p, 1, 1, 4096, 1, 32, 8, 128, 2, SMS), 0);
    CHECK_EQ_INT(p.n_parts, 33);
    CHECK_EQ_INT(p.decode_grid[0], 33);
    CHECK_EQ_INT(p.decode_grid[1], 8);
}

/* attn_decode_split, the kernels' cut of one context: whole tiles, no empty
 * partition, the whole context covered, never more than the plan's n_parts,
 * partitions of at most 1024 tokens for a context within max_seq_len. */
static void test_decode_split_covers_the_context_in_whole_tiles(void) {
    int len = 0, n = 0;
    attn_decode_split(4096, 33, 33, &len, &n); /* llama-3-8b, S = 1 */
    CHECK_EQ_INT(len, 128);
    CHECK_EQ_INT(n, 32);
    attn_decode_split(4096, 66, 64, &len, &n); /* tinyllama, S = 1: one tile each */
    CHECK_EQ_INT(len, 64);
    CHECK_EQ_INT(n, 64);
    attn_decode_split(4096, 1, 4, &len, &n); /* S = 64 */
    CHECK_EQ_INT(len, 1024);
    CHECK_EQ_INT(n, 4);
    attn_decode_split(1, 33, 33, &len, &n);
    CHECK_EQ_INT(len, 64);
    CHECK_EQ_INT(n, 1);
    attn_decode_split(100, 33, 33, &len, &n); /* 2 tiles: 2 partitions, the last one of 36 tokens */
    CHECK_EQ_INT(len, 64);
    CHECK_EQ_INT(n, 2);
    attn_decode_split(5000, 4, 4, &len, &n); /* over max_seq_len 4096: longer partitions, no more of them */
    CHECK_EQ_INT(n, 4);
    CHECK_EQ_INT(len, 1280);
    static const int targets[] = {1, 2, 3, 7, 33, 66, 264};
    for (size_t i = 0; i < sizeof targets / sizeof *targets; i++)
        for (int msl = 1; msl <= 9000; msl += msl < 300 ? 1 : 37) {
            const int n_parts = (int)attn_plan_n_parts(msl, targets[i]);
            for (int ctx = 1; ctx <= msl + 200; ctx += ctx < 200 ? 1 : 53) {
                attn_decode_split(ctx, targets[i], n_parts, &len, &n);
                CHECK(len >= ATTN_DECODE_TILE && len % ATTN_DECODE_TILE == 0);
                CHECK(n >= 1 && n <= n_parts);
                CHECK((int64_t)(n - 1) * len < ctx && ctx <= (int64_t)n * len);
                if (ctx <= msl) CHECK(len <= ATTN_DECODE_PARTITION_MAX);
                const int tiles = (ctx + ATTN_DECODE_TILE - 1) / ATTN_DECODE_TILE;
                const int want = targets[i] < tiles ? targets[i] : tiles;
                if (ctx <= msl) CHECK(2 * n > (want < n_parts ? want : n_parts));
            }
        }
}

static void test_workspace_holds_partials_only_when_decode_splits(void) {
    /* per (seq, head, partition) D + 2 floats; S=3, Hkv=8 on 132 SMs: 11 wanted */
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 513, 1, 32, 8, 128, SMS), 3 * 32 * 9 * 130 * 4);
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 4000, 1, 32, 8, 128, SMS), 3 * 32 * 11 * 130 * 4);
    CHECK_EQ_INT(attn_plan_workspace_bytes(1, 1025, 1, 8, 8, 64, SMS), 1 * 8 * 17 * 66 * 4);
    CHECK_EQ_INT(attn_plan_workspace_bytes(2, 1025, 1, 4, 2, 32, SMS), 2 * 4 * 17 * 34 * 4);
    /* one partition: the decode kernel writes the output itself */
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 64, 1, 32, 8, 128, SMS), 0);
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 1, 1, 32, 8, 128, SMS), 0);
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 0, 1, 32, 8, 128, SMS), 0);
    CHECK_EQ_INT(attn_plan_workspace_bytes(64, 1024, 1, 32, 8, 128, SMS), 0);
    CHECK_EQ_INT(attn_plan_workspace_bytes(64, 1025, 1, 32, 8, 128, SMS), 64 * 32 * 2 * 130 * 4);
    /* prefill (any step with a sequence of more than one query token) needs none */
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 4000, 2, 32, 8, 128, SMS), 0);
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 4000, 700, 32, 8, 128, SMS), 0);
    /* unsupported head dim or GQA shape */
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 4000, 1, 32, 8, 96, SMS), 0);
    CHECK_EQ_INT(attn_plan_workspace_bytes(3, 4000, 1, 32, 3, 128, SMS), 0);
    /* grows with max_seq_len */
    CHECK(attn_plan_workspace_bytes(8, 8192, 1, 32, 8, 128, SMS) >=
          attn_plan_workspace_bytes(8, 8191, 1, 32, 8, 128, SMS));
}

static void test_plan_workspace_layout_matches_its_byte_count(void) {
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 5, 5, 1500, 1, 32, 8, 128, 2, SMS), 0);
    CHECK_EQ_INT(p.n_parts, 7); /* ceil(264 / 40) */
    CHECK(p.reduce);
    size_t o = 5u * 32 * 7 * 128 * 4, ml = 5u * 32 * 7 * 4;
    CHECK_EQ_INT(p.ws_m_offset, o);
    CHECK_EQ_INT(p.ws_l_offset, o + ml);
    CHECK_EQ_INT(p.workspace_bytes, o + 2 * ml);
    CHECK_EQ_INT(p.workspace_bytes, attn_plan_workspace_bytes(5, 1500, 1, 32, 8, 128, SMS));
    CHECK_EQ_INT(p.ws_m_offset % 16, 0);
    CHECK_EQ_INT(p.reduce_grid[0], 32);
    CHECK_EQ_INT(p.reduce_grid[1], 5);
    CHECK_EQ_INT(p.reduce_smem_bytes, 8 * 4); /* 7 weights, in whole float4s */

    CHECK_EQ_INT(attn_plan_make(&p, 5, 5, 64, 1, 32, 8, 128, 2, SMS), 0);
    CHECK_EQ_INT(p.n_parts, 1);
    CHECK(!p.reduce);
    CHECK_EQ_INT(p.workspace_bytes, 0);
}

static void test_path_is_decode_only_when_every_query_is_one_token(void) {
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 64, 4, SMS), 0);
    CHECK_EQ_INT(p.path, ATTN_PATH_DECODE);
    CHECK_EQ_INT(attn_plan_make(&p, 5, 4, 100, 2, 8, 8, 64, 4, SMS), 0); /* mixed: one sequence has 2 */
    CHECK_EQ_INT(p.path, ATTN_PATH_PREFILL);
    CHECK_EQ_INT(p.workspace_bytes, 0);
    CHECK_EQ_INT(attn_plan_make(&p, 700, 1, 700, 700, 8, 8, 64, 4, SMS), 0);
    CHECK_EQ_INT(p.path, ATTN_PATH_PREFILL);
    /* a one-token prefill of a single sequence is a decode step */
    CHECK_EQ_INT(attn_plan_make(&p, 1, 1, 1, 1, 8, 8, 64, 4, SMS), 0);
    CHECK_EQ_INT(p.path, ATTN_PATH_DECODE);
}

static void test_decode_head_tile_covers_the_gqa_group(void) {
    struct { int64_t H, Hkv, tile, n_tiles; } c[] = {
        {8, 8, 1, 1}, {16, 8, 2, 1}, {12, 4, 4, 1}, {16, 4, 4, 1}, {20, 4, 8, 1},
        {28, 4, 8, 1}, {32, 4, 8, 1}, {48, 4, 8, 2}, {128, 8, 8, 2}, {32, 1, 8, 4},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        attn_plan_t p;
        CHECK_EQ_INT(attn_plan_make(&p, 3, 3, 2000, 1, c[i].H, c[i].Hkv, 128, 2, SMS), 0);
        CHECK_EQ_INT(p.group, c[i].H / c[i].Hkv);
        CHECK_EQ_INT(p.head_tile, c[i].tile);
        CHECK_EQ_INT(p.n_head_tiles, c[i].n_tiles);
        CHECK(p.head_tile * p.n_head_tiles >= p.group);
        CHECK_EQ_INT(p.n_parts, attn_plan_n_parts(2000, p.target_parts));
        CHECK_EQ_INT(p.decode_grid[1], c[i].Hkv * c[i].n_tiles);
        CHECK_EQ_INT(p.decode_grid[2], 3);
    }
}

static void test_decode_smem_is_the_larger_of_loop_and_reduction(void) {
    /* 128 B stats + 2 x 64 int64 slots, then max(q + p, reduction) fp32 */
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(8, 128, 8), 1152 + 4 * (128 * 8 * 8));
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(8, 128, 4), 1152 + 4 * (128 * 8 * 4));
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(1, 256, 8), 1152 + 4 * 1024);      /* loop 320 < red 1024 */
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(1, 256, 4), 1152 + 4 * 512);
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(2, 64, 4), 1152 + 4 * (128 * 2 * 4)); /* loop 256 < red 1024 */
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(8, 32, 8), 1152 + 4 * (128 * 8 * 8)); /* loop 768 < red 8192 */
    CHECK_EQ_INT(attn_plan_decode_smem_bytes(1, 32, 4), 1152 + 4 * 512);           /* loop 96 < red 512 */
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 2, 2, 10, 1, 16, 2, 256, 2, SMS), 0);
    CHECK_EQ_INT(p.vec, 8);
    CHECK_EQ_INT(p.decode_smem_bytes, attn_plan_decode_smem_bytes(8, 256, 8));
    CHECK(p.decode_smem_bytes <= 48 * 1024); /* no opt-in needed for decode */
}

static void test_fma_prefill_tiles_by_head_dim(void) {
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 700, 1, 700, 700, 8, 2, 64, 4, SMS), 0);
    CHECK(!p.prefill_tc);
    CHECK_EQ_INT(p.q_tile, 64);
    CHECK_EQ_INT(p.kv_tile, 64);
    CHECK_EQ_INT(p.n_q_tiles, 11);
    CHECK_EQ_INT(p.prefill_grid[0], 11);
    CHECK_EQ_INT(p.prefill_grid[1], 8);
    CHECK_EQ_INT(p.prefill_grid[2], 1);
    CHECK_EQ_INT(p.prefill_smem_bytes, 4 * (64 * 68 + 64 * 68 + 64 * 64 + 64 * 68) + 64 * 4);

    CHECK_EQ_INT(attn_plan_make(&p, 130, 3, 900, 64, 8, 2, 128, 4, SMS), 0);
    CHECK_EQ_INT(p.q_tile, 64);
    CHECK_EQ_INT(p.kv_tile, 32);
    CHECK_EQ_INT(p.n_q_tiles, 1);
    CHECK_EQ_INT(p.prefill_smem_bytes, 4 * (64 * 132 + 32 * 132 + 32 * 128 + 64 * 36) + 64 * 4);

    CHECK_EQ_INT(attn_plan_make(&p, 130, 3, 900, 65, 8, 2, 256, 4, SMS), 0);
    CHECK_EQ_INT(p.q_tile, 32);
    CHECK_EQ_INT(p.kv_tile, 32);
    CHECK_EQ_INT(p.n_q_tiles, 3);
    CHECK_EQ_INT(p.prefill_smem_bytes, 4 * (32 * 260 + 32 * 260 + 32 * 256 + 32 * 36) + 32 * 4);
    CHECK(p.prefill_smem_bytes <= ATTN_MAX_SMEM_BYTES);

    CHECK_EQ_INT(attn_plan_make(&p, 100, 2, 60, 70, 8, 2, 32, 4, SMS), 0);
    CHECK_EQ_INT(p.q_tile, 64);
    CHECK_EQ_INT(p.kv_tile, 64);
    CHECK_EQ_INT(p.n_q_tiles, 2);
    CHECK_EQ_INT(p.prefill_smem_bytes, 4 * (64 * 36 + 64 * 36 + 64 * 32 + 64 * 68) + 64 * 4);
    CHECK(p.prefill_smem_bytes <= 48 * 1024); /* no opt-in needed at D=32 */

    /* a meta without max_query_len falls back to T */
    CHECK_EQ_INT(attn_plan_make(&p, 130, 3, 900, 0, 8, 2, 128, 4, SMS), 0);
    CHECK_EQ_INT(p.path, ATTN_PATH_PREFILL);
    CHECK_EQ_INT(p.n_q_tiles, 3);
}

/* bf16 / f16 prefill runs the tensor-core kernel: 64 query rows (4 warps of
 * 16) at every D, 64 KV rows (32 at D=256); the mma.sync kernel's 16-bit q, k,
 * v tiles stay under 48 KB at D <= 64, and the wmma fallback's (with its
 * fp32 s, 16-bit p and row-factor scratch) under the opt-in limit. */
static void test_prefill_uses_tensor_cores_for_16_bit_dtypes(void) {
    CHECK_EQ_INT(attn_plan_prefill_mma_smem_bytes(64, 64, 128), 2 * (64 * 136 + 2 * 64 * 136) + 4 * 64);
    CHECK_EQ_INT(attn_plan_prefill_wmma_smem_bytes(64, 64, 128),
                 2 * (64 * 136 + 2 * 64 * 136 + 64 * 72) + 4 * (64 * 72 + 64 * 16 + 64));
    struct { int64_t D, bk; size_t smem, wmma_smem; } c[] = {
        {32, 64, 15616, 47360}, {64, 64, 27904, 59648}, {128, 64, 52480, 84224}, {256, 32, 67840, 87296},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        attn_plan_t p;
        CHECK_EQ_INT(attn_plan_make(&p, 700, 2, 900, 650, 8, 2, c[i].D, 2, SMS), 0);
        CHECK_EQ_INT(p.path, ATTN_PATH_PREFILL);
        CHECK(p.prefill_tc);
        CHECK(!p.prefill_wmma);
        CHECK_EQ_INT(p.q_tile, 64);
        CHECK_EQ_INT(p.kv_tile, c[i].bk);
        CHECK_EQ_INT(p.n_q_tiles, 11);
        CHECK_EQ_INT(p.prefill_grid[0], 11);
        CHECK_EQ_INT(p.prefill_grid[1], 8);
        CHECK_EQ_INT(p.prefill_grid[2], 2);
        CHECK_EQ_INT(p.prefill_smem_bytes, c[i].smem);
        CHECK_EQ_INT(p.prefill_smem_bytes, attn_plan_prefill_mma_smem_bytes(64, c[i].bk, c[i].D));
        CHECK(p.prefill_smem_bytes <= ATTN_MAX_SMEM_BYTES);
        CHECK_EQ_INT(p.workspace_bytes, 0);
        /* the wmma fallback: same tiles and grid, its own shared memory */
        attn_plan_t w = p;
        attn_plan_use_wmma_prefill(&w);
        CHECK(w.prefill_wmma);
        CHECK_EQ_INT(w.prefill_smem_bytes, c[i].wmma_smem);
        CHECK_EQ_INT(w.prefill_smem_bytes, attn_plan_prefill_wmma_smem_bytes(64, c[i].bk, c[i].D));
        CHECK(w.prefill_smem_bytes <= ATTN_MAX_SMEM_BYTES);
        CHECK_EQ_INT(w.q_tile, p.q_tile);
        CHECK_EQ_INT(w.kv_tile, p.kv_tile);
        CHECK_EQ_INT(w.prefill_grid[0], p.prefill_grid[0]);
        /* f32: the FMA kernel, whatever the shape; no wmma switch either */
        CHECK_EQ_INT(attn_plan_make(&p, 700, 2, 900, 650, 8, 2, c[i].D, 4, SMS), 0);
        CHECK(!p.prefill_tc);
        CHECK_EQ_INT(p.prefill_smem_bytes, attn_plan_prefill_smem_bytes(p.q_tile, p.kv_tile, c[i].D));
        attn_plan_use_wmma_prefill(&p);
        CHECK(!p.prefill_wmma);
        CHECK_EQ_INT(p.prefill_smem_bytes, attn_plan_prefill_smem_bytes(p.q_tile, p.kv_tile, c[i].D));
    }
    CHECK(attn_plan_prefill_mma_smem_bytes(64, 64, 64) <= 48 * 1024);  /* no opt-in needed at D <= 64 */
    CHECK(attn_plan_prefill_wmma_smem_bytes(64, 64, 32) <= 48 * 1024); /* nor for wmma at D=32 */
    /* a 2-token prefill is still one block of 64 rows per head */
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 3, 2, 701, 2, 4, 2, 32, 2, SMS), 0);
    CHECK(p.prefill_tc);
    CHECK_EQ_INT(p.n_q_tiles, 1);
}

/* models/tiny: hidden 128, 4 query heads, 2 KV heads, head_dim 32, in bf16 and f32. */
static void test_head_dim_32_of_the_tiny_model_is_planned(void) {
    CHECK(attn_plan_supports_head_dim(32));
    for (int64_t eb = 2; eb <= 4; eb += 2) {
        attn_plan_t p;
        CHECK_EQ_INT(attn_plan_make(&p, 3, 3, 1500, 1, 4, 2, 32, eb, SMS), 0);
        CHECK_EQ_INT(p.path, ATTN_PATH_DECODE);
        CHECK_EQ_INT(p.vec, 16 / eb);
        CHECK_EQ_INT(p.head_tile, 2);
        CHECK_EQ_INT(p.n_head_tiles, 1);
        CHECK_EQ_INT(p.n_parts, 24); /* 44 wanted, 24 tiles */
        CHECK_EQ_INT(p.decode_grid[0], 24);
        CHECK_EQ_INT(p.decode_grid[1], 2);
        CHECK_EQ_INT(p.decode_grid[2], 3);
        CHECK_EQ_INT(p.decode_smem_bytes, attn_plan_decode_smem_bytes(2, 32, 16 / eb));
        CHECK_EQ_INT(p.workspace_bytes, 3 * 4 * 24 * 34 * 4);
        CHECK_EQ_INT(p.ws_m_offset, 3 * 4 * 24 * 32 * 4);
        CHECK_EQ_INT(p.ws_l_offset, p.ws_m_offset + 3 * 4 * 24 * 4);
        CHECK_EQ_INT(p.ws_m_offset % 16, 0);

        CHECK_EQ_INT(attn_plan_make(&p, 130, 2, 700, 129, 4, 2, 32, eb, SMS), 0);
        CHECK_EQ_INT(p.path, ATTN_PATH_PREFILL);
        CHECK_EQ_INT(p.n_q_tiles, 3);
        CHECK_EQ_INT(p.prefill_grid[1], 4);
        CHECK_EQ_INT(p.workspace_bytes, 0);
    }
    /* GQA groups 1, 4 and 8 (Hkv = 2): head tiles 1, 4, 8 */
    const int64_t groups[3] = {1, 4, 8};
    for (int i = 0; i < 3; i++) {
        attn_plan_t p;
        CHECK_EQ_INT(attn_plan_make(&p, 2, 2, 600, 1, 2 * groups[i], 2, 32, 2, SMS), 0);
        CHECK_EQ_INT(p.head_tile, groups[i]);
        CHECK(p.decode_smem_bytes <= 48 * 1024);
    }
}

static void test_unsupported_shapes_are_rejected(void) {
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 96, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 80, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 112, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 16, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 48, 4, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 512, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 0, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 3, 64, 2, SMS), -1); /* H % Hkv */
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 0, 64, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 0, 4, 100, 1, 8, 8, 64, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 0, 100, 1, 8, 8, 64, 2, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 64, 1, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 64, 8, SMS), -1);
    CHECK_EQ_INT(attn_plan_make(&p, 70000, 70000, 100, 1, 8, 8, 64, 2, SMS), -1); /* gridDim.z */
    CHECK(!attn_plan_supports_head_dim(96));
    CHECK(attn_plan_supports_head_dim(32) && attn_plan_supports_head_dim(64) && attn_plan_supports_head_dim(128) &&
          attn_plan_supports_head_dim(256));
    CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 100, 1, 8, 8, 64, 2, SMS), 0);
}

#ifdef SERVELAB_HAVE_CUDA
/* The plan's shared-memory bytes and tiles are the kernels' own layouts
 * (DecodeLayout, PrefillLayout, MmaLayout, WmmaLayout in the .cu files), for every
 * instantiation: a launch refuses a mismatch, but only on a GPU, so without
 * this a layout change would first fail there. Decode at every GQA group
 * size the plan tiles (head tiles 1, 2, 4, 8), prefill in each dtype (both tensor-core kernels for 16-bit). */
static void test_plan_shared_memory_is_the_kernels_layout(void) {
    static const int64_t Ds[] = {32, 64, 128, 256}, elems[] = {4, 2}, groups[] = {1, 2, 3, 4, 7, 8, 16};
    int n_tiles[9] = {0};
    for (size_t e = 0; e < 2; e++) {
        for (size_t d = 0; d < 4; d++) {
            int64_t eb = elems[e], D = Ds[d];
            for (size_t g = 0; g < sizeof groups / sizeof *groups; g++) {
                attn_plan_t p;
                CHECK_EQ_INT(attn_plan_make(&p, 4, 4, 300, 1, 4 * groups[g], 4, D, eb, SMS), 0);
                CHECK_EQ_INT(p.path, ATTN_PATH_DECODE);
                CHECK(p.head_tile >= 1 && p.head_tile <= 8);
                n_tiles[p.head_tile]++;
                CHECK_EQ_INT(p.decode_smem_bytes, attn_kernel_decode_smem_bytes(eb, D, p.head_tile));
            }
            /* prefill: FMA (f32); mma.sync, then the wmma fallback (16-bit) */
            for (int wmma = 0; wmma <= (eb == 2); wmma++) {
                attn_plan_t p;
                int64_t bq = 0, bk = 0;
                CHECK_EQ_INT(attn_plan_make(&p, 700, 2, 900, 650, 8, 2, D, eb, SMS), 0);
                CHECK_EQ_INT(p.path, ATTN_PATH_PREFILL);
                if (wmma) attn_plan_use_wmma_prefill(&p);
                size_t bytes = attn_kernel_prefill_smem_bytes(eb, wmma, D, &bq, &bk);
                CHECK(bytes > 0);
                CHECK_EQ_INT(p.prefill_smem_bytes, bytes);
                CHECK_EQ_INT(p.q_tile, bq);
                CHECK_EQ_INT(p.kv_tile, bk);
            }
        }
    }
    CHECK(n_tiles[1] && n_tiles[2] && n_tiles[4] && n_tiles[8]); /* every decode instantiation was compared */
}
#endif

int main(void) {
    test_seed();
    RUN(test_decode_targets_twice_the_sm_count);
    RUN(test_decode_plan_fills_the_sms_where_the_context_allows);
    RUN(test_decode_grid_is_capped_and_blocks_loop_over_partitions);
    RUN(test_decode_split_covers_the_context_in_whole_tiles);
    RUN(test_workspace_holds_partials_only_when_decode_splits);
    RUN(test_plan_workspace_layout_matches_its_byte_count);
    RUN(test_path_is_decode_only_when_every_query_is_one_token);
    RUN(test_decode_head_tile_covers_the_gqa_group);
    RUN(test_decode_smem_is_the_larger_of_loop_and_reduction);
    RUN(test_fma_prefill_tiles_by_head_dim);
    RUN(test_prefill_uses_tensor_cores_for_16_bit_dtypes);
    RUN(test_head_dim_32_of_the_tiny_model_is_planned);
    RUN(test_unsupported_shapes_are_rejected);
#ifdef SERVELAB_HAVE_CUDA
    RUN(test_plan_shared_memory_is_the_kernels_layout);
#endif
    return test_summary();
}
