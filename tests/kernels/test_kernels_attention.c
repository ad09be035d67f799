/* test_kernels_attention.c - slk_attention (decode and varlen prefill)
 * against cpu_attention, over a paged KV cache of scattered blocks.
 *
 * Every case builds its KV cache on the host in fp32: a random permutation
 * of block ids 1..n-1 hands out each sequence's blocks (block 0, the null
 * block of the real pool, is never handed out), every slot a sequence does
 * not own is NaN, and so is the block-table entry past each sequence's last
 * block (it points at block 0): a kernel that reads a key it must not shows
 * up as NaN. Values are kt_fill-rounded to the dtype, uploaded in it, and
 * cpu_attention runs on the same rounded values. Outputs and the workspace
 * are poisoned (all bits set: NaN in every dtype) before each run, and each
 * case runs twice to check the result is bitwise deterministic.
 *
 * Matrix: dt f32/bf16/f16 x D 32/64/128 x H/Hkv 1/4/8 (Hkv = 2) x block size
 * 16/32, for pure decode (contexts 1, 15, 16, 17, 600, 4000), decode with
 * more partitions than grid blocks (blocks loop) and one 4k sequence split
 * over every SM, pure prefill
 * (1, 100, 700 tokens), chunked prefill (positions 500..563 over 500 cached
 * tokens), a prefix hit (queries start at a block boundary) and mixed
 * batches; plus odd block sizes, odd group sizes, D = 256, a small mixed
 * batch at every D (the emulator's share of D = 256 and GQA) and bad arguments.
 * An fp8 KV cache (bf16 / f16 activations x e4m3 / e5m2) runs decodes and
 * mixed batches at every D: K and V are drawn rounded to the fp8 dtype and
 * uploaded as its codes (unowned slots as its NaN code), and the reference
 * is cpu_attention on the same values, within the activation dtype's
 * tolerances (the kernels widen fp8 exactly).
 */
#include <string.h>

#include "attention_plan.h"
#include "kernel_test.h"

#define MAX_SEQS 16

typedef struct {
    int n;
    int32_t start[MAX_SEQS]; /* tokens already cached: the first query position */
    int32_t n_new[MAX_SEQS]; /* query tokens this step */
} batch_spec_t;

typedef struct {
    sl_dtype_t dt;
    int64_t D, H, Hkv, B;
} cfg_t;

/* Tolerances. The kernel and cpu_attention see the same dt-rounded q, K and
 * V and both keep scores, softmax and the weighted sum in fp32; they differ
 * in summation order (shuffles, tiles, partitions) and in when the running
 * max rescales. The output is a convex combination of V rows with |v| <= 1,
 * so those differences are absolute, a few 1e-7 * sqrt(context) at most:
 * atol = 2e-5 for every dtype. In f32 the output is not rounded again:
 * rtol = 100 fp32 ulps (1.2e-5). In bf16/f16 the kernel rounds its fp32
 * result once to dt (half an ulp; the fp32 difference can at most move a
 * tie to the next value): rtol = 1 ulp of dt (kt_eps).
 * The bf16 / f16 prefill runs on tensor cores and rounds the softmax weights
 * p_j to dt for the P V product (as FlashAttention does), normalizing by
 * the sum of the rounded weights: p_j (1 + d_j), |d_j| <= u (dt's unit
 * roundoff), moves the output by sum_j p_j d_j (v_j - o) / l, at most
 * u / (1 - u) * max |v_j - o| <= 2u (1 + u) with |v|, |o| <= 1: atol =
 * kt_eps(dt) there (7.9e-3 in bf16, 9.8e-4 in f16: just above 2u (1 + u)
 * for u = 2^-8, 2^-11). Decode and f32 keep ATTN_ATOL. */
#define ATTN_ATOL 2e-5

static double worst_abs[3]; /* per dtype, over the current test, for the log */

static int dt_index(sl_dtype_t dt) { return dt == DTYPE_F32 ? 0 : dt == DTYPE_BF16 ? 1 : 2; }

/* p_rounded: the kernel rounds the softmax weights to dt (16-bit prefill). */
static int close_enough(const char *what, const float *got, const float *want, int64_t n, sl_dtype_t dt,
                        int p_rounded) {
    double maxw = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) {
        maxw = fmax(maxw, fabs((double)want[i]));
        double d = fabs((double)got[i] - (double)want[i]);
        if (!(d <= worst)) worst = d; /* NaN sticks */
    }
    if (worst > worst_abs[dt_index(dt)] || isnan(worst)) worst_abs[dt_index(dt)] = worst;
    double ulps = dt == DTYPE_F32 ? 100.0 : 1.0;
    double rtol = ulps * kt_eps(dt);
    double atol = p_rounded ? kt_eps(dt) : ATTN_ATOL;
    double floor_frac = maxw > 0 ? atol / (rtol * maxw) : 1.0; /* atol as above */
    return kt_close(what, got, want, n, dt, ulps, floor_frac);
}

/* Runs one batch on one configuration with the cache in kv (c->dt, or an
 * fp8 dtype); returns 1 when the kernel matches. */
static int run_case_kv(const char *name, const cfg_t *c, sl_dtype_t kv, const batch_spec_t *b) {
    const int64_t D = c->D, H = c->H, Hkv = c->Hkv, B = c->B, S = b->n;
    const sl_dtype_t dt = c->dt;
    int64_t T = 0, n_blocks = 1, max_blocks = 1;
    int32_t max_seq_len = 0, max_query_len = 0;
    int32_t seq_lens[MAX_SEQS];
    for (int s = 0; s < S; s++) {
        seq_lens[s] = b->start[s] + b->n_new[s];
        int64_t nb = (seq_lens[s] + B - 1) / B;
        n_blocks += nb;
        if (nb + 1 > max_blocks) max_blocks = nb + 1; /* one entry past the end, pointing at block 0 */
        T += b->n_new[s];
        if (seq_lens[s] > max_seq_len) max_seq_len = seq_lens[s];
        if (b->n_new[s] > max_query_len) max_query_len = b->n_new[s];
    }
    int64_t work = 0; /* q.k and p.v multiply-adds of the case */
    for (int s = 0; s < S; s++) work += 2 * (int64_t)b->n_new[s] * seq_lens[s] * H * D;
    if (kt_too_big(work)) return 1;
    n_blocks += 3; /* spare blocks nobody owns */

    int32_t *perm = malloc((size_t)n_blocks * sizeof *perm);
    for (int64_t i = 0; i < n_blocks; i++) perm[i] = (int32_t)i;
    for (int64_t i = n_blocks - 1; i > 1; i--) { /* shuffle 1..n-1; block 0 stays the null block */
        int64_t j = 1 + (int64_t)(test_rng() % (uint64_t)i);
        int32_t tmp = perm[i];
        perm[i] = perm[j], perm[j] = tmp;
    }
    int32_t *tables = calloc((size_t)(S * max_blocks), sizeof *tables);
    int32_t *positions = malloc((size_t)(T ? T : 1) * sizeof *positions), query_start[MAX_SEQS + 1];
    int64_t next = 1, t = 0;
    for (int s = 0; s < S; s++) {
        for (int64_t k = 0; k < (seq_lens[s] + B - 1) / B; k++) tables[s * max_blocks + k] = perm[next++];
        query_start[s] = (int32_t)t;
        for (int32_t i = 0; i < b->n_new[s]; i++) positions[t++] = b->start[s] + i;
    }
    query_start[S] = (int32_t)t;

    const int64_t row = Hkv * D, n_cache = n_blocks * B * row;
    float *kc = malloc((size_t)n_cache * sizeof(float)), *vc = malloc((size_t)n_cache * sizeof(float));
    for (int64_t i = 0; i < n_cache; i++) kc[i] = vc[i] = NAN;
    for (int s = 0; s < S; s++)
        for (int32_t p = 0; p < seq_lens[s]; p++) {
            int64_t slot = (int64_t)tables[s * max_blocks + p / B] * B + p % B;
            kt_fill(kc + slot * row, row, -1.0f, 1.0f, kv);
            kt_fill(vc + slot * row, row, -1.0f, 1.0f, kv);
        }
    const int64_t n_q = T * H * D;
    float *q = malloc((size_t)n_q * sizeof(float)), *want = malloc((size_t)n_q * sizeof(float));
    float *got = malloc((size_t)n_q * sizeof(float)), *got2 = malloc((size_t)n_q * sizeof(float));
    kt_fill(q, n_q, -3.0f, 3.0f, dt); /* scores of std ~1: softmax neither flat nor one-hot */
    const float scale = 1.0f / sqrtf((float)D);
    cpu_attention(want, q, kc, vc, positions, query_start, tables, S, max_blocks, T, H, Hkv, D, B, scale);

    void *d_q = kt_upload(q, n_q, dt), *d_k = kt_upload(kc, n_cache, kv), *d_v = kt_upload(vc, n_cache, kv);
    int32_t *d_pos = kt_upload_raw(positions, (size_t)T * sizeof(int32_t));
    int32_t *d_qs = kt_upload_raw(query_start, (size_t)(S + 1) * sizeof(int32_t));
    int32_t *d_sl = kt_upload_raw(seq_lens, (size_t)S * sizeof(int32_t));
    int32_t *d_bt = kt_upload_raw(tables, (size_t)(S * max_blocks) * sizeof(int32_t));
    const size_t out_bytes = (size_t)n_q * kt_size(dt);
    void *d_out = NULL, *d_ws = NULL;
    KT_CUDA(cudaMalloc(&d_out, out_bytes));
    sl_attn_meta_t meta = {.n_tokens = (int32_t)T, .n_seqs = (int32_t)S, .max_blocks = (int32_t)max_blocks,
                           .max_seq_len = max_seq_len, .max_query_len = max_query_len, .positions = d_pos,
                           .query_start = d_qs, .seq_lens = d_sl, .block_tables = d_bt};
    size_t ws_bytes = slk_attention_workspace_bytes(&meta, H, Hkv, D);
    KT_CUDA(cudaMalloc(&d_ws, ws_bytes ? ws_bytes : 16));

    int ok = 1;
    for (int run = 0; run < 2; run++) {
        KT_CUDA(cudaMemset(d_out, 0xff, out_bytes));
        KT_CUDA(cudaMemset(d_ws, 0xff, ws_bytes ? ws_bytes : 16));
        int rc = slk_attention(d_out, d_q, d_k, d_v, &meta, H, Hkv, D, B, scale, dt, kv, ws_bytes ? d_ws : NULL,
                               ws_bytes, NULL);
        if (rc != 0) {
            fprintf(stderr, "  slk_attention returned %d (%s)\n", rc, cudaGetErrorString((cudaError_t)rc));
            ok = 0;
            break;
        }
        KT_CUDA(cudaGetLastError());
        kt_download(run == 0 ? got : got2, d_out, n_q, dt);
    }
    char what[160];
    snprintf(what, sizeof what, "%s D=%lld H=%lld Hkv=%lld B=%lld%s%s", name, (long long)D, (long long)H,
             (long long)Hkv, (long long)B, kv != dt ? " cache " : "", kv != dt ? kt_name(kv) : "");
    if (ok) ok = close_enough(what, got, want, n_q, dt, dt != DTYPE_F32 && max_query_len > 1);
    if (ok && memcmp(got, got2, (size_t)n_q * sizeof(float)) != 0) {
        fprintf(stderr, "  %s (%s): two runs differ\n", what, kt_name(dt));
        ok = 0;
    }

    cudaFree(d_q), cudaFree(d_k), cudaFree(d_v), cudaFree(d_pos), cudaFree(d_qs), cudaFree(d_sl);
    cudaFree(d_bt), cudaFree(d_out), cudaFree(d_ws);
    free(perm), free(tables), free(positions), free(kc), free(vc), free(q), free(want), free(got), free(got2);
    return ok;
}

static int run_case(const char *name, const cfg_t *c, const batch_spec_t *b) {
    return run_case_kv(name, c, c->dt, b);
}

/* The main matrix: dt x D {32, 64, 128} x group {1, 4, 8} x block size {16, 32}.
 * D = 32 (models/tiny) has 64-byte rows in 16-bit: 4 vectors, not 8. */
static void run_matrix(const char *name, const batch_spec_t *b) {
    const sl_dtype_t dts[3] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
    const int64_t Ds[3] = {32, 64, 128}, groups[3] = {1, 4, 8}, Bs[2] = {16, 32};
    memset(worst_abs, 0, sizeof worst_abs);
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int g = 0; g < 3; g++)
                for (int k = 0; k < 2; k++) {
                    cfg_t c = {dts[i], Ds[j], 2 * groups[g], 2, Bs[k]};
                    if (!run_case(name, &c, b)) test_cur_failed = 1;
                }
    printf("  %-32s max |err|: f32 %.2e  bf16 %.2e  f16 %.2e\n", name, worst_abs[0], worst_abs[1], worst_abs[2]);
}

static batch_spec_t decodes(const int32_t *ctx, int n) {
    batch_spec_t b = {.n = n};
    for (int s = 0; s < n; s++) b.start[s] = ctx[s] - 1, b.n_new[s] = 1;
    return b;
}

/* The decode plan slk_attention makes on this device (attention_plan.h). */
static attn_plan_t device_decode_plan(const int32_t *ctx, int S, int64_t H, int64_t Hkv, int64_t D, int64_t eb) {
    int dev = 0, sms = 1;
    KT_CUDA(cudaGetDevice(&dev));
    KT_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int32_t msl = 0;
    for (int s = 0; s < S; s++) msl = ctx[s] > msl ? ctx[s] : msl;
    attn_plan_t p;
    CHECK_EQ_INT(attn_plan_make(&p, S, S, msl, 1, H, Hkv, D, eb, sms), 0);
    return p;
}

static void test_decode_matches_cpu_across_blocks_and_partitions(void) {
    /* on 132 SMs, Hkv = 2: 22 partitions wanted; 600 is 10 of one tile (the
     * last 24 tokens), 4000 21 of 3 tiles; 1..17 one partition, written directly */
    const int32_t ctx[6] = {1, 15, 16, 17, 600, 4000};
    batch_spec_t b = decodes(ctx, 6);
    run_matrix("decode 1/15/16/17/600/4000", &b);
    const int32_t one[1] = {1537}; /* a lone sequence: 25 one-tile partitions, the last of one token */
    b = decodes(one, 1);
    run_matrix("decode 1537", &b);
}

/* More partitions than the grid has blocks along them: 16 sequences of 8 KV
 * heads have 3 partitions wanted (132 SMs), but the 18000-token one needs 18
 * of at most 1024 tokens and the grid is capped at 17 (16 blocks per SM), so
 * blocks 0 and 1 loop over a second partition; beside it contexts of one
 * token, one tile, tile +- 1, a partition +- 1 and a few thousand. */
static void test_decode_blocks_loop_over_partitions_past_the_grid(void) {
    const int32_t ctx[16] = {18000, 1, 63, 64, 65, 129, 1024, 1025, 3000, 5, 17, 4000, 700, 2, 100, 2049};
    batch_spec_t b = decodes(ctx, 16);
    const cfg_t cfgs[] = {
        {DTYPE_BF16, 128, 8, 8, 16}, /* group 1 */
        {DTYPE_F16, 64, 32, 8, 32},  /* group 4 */
        {DTYPE_F32, 64, 64, 8, 16},  /* group 8 */
        {DTYPE_BF16, 128, 32, 8, 16}, /* llama-3-8b's heads */
        {DTYPE_F32, 256, 16, 8, 16}, /* wide rows: no register prefetch */
    };
    memset(worst_abs, 0, sizeof worst_abs);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        const cfg_t *c = &cfgs[i];
        const attn_plan_t p = device_decode_plan(ctx, 16, c->H, c->Hkv, c->D, c->dt == DTYPE_F32 ? 4 : 2);
        int len = 0, n = 0;
        attn_decode_split(ctx[0], (int)p.target_parts, (int)p.n_parts, &len, &n);
        printf("  grid %lld of %lld partitions; the %d-token context: %d of %d tokens\n",
               (long long)p.decode_grid[0], (long long)p.n_parts, ctx[0], n, len);
        CHECK(n > p.decode_grid[0]); /* some block loops */
        if (!run_case("decode, blocks looping", c, &b)) test_cur_failed = 1;
    }
    printf("  %-32s max |err|: f32 %.2e  bf16 %.2e  f16 %.2e\n", "decode, blocks looping", worst_abs[0],
           worst_abs[1], worst_abs[2]);
}

/* A lone sequence on every SM: llama-3-8b's and tinyllama's heads at 4096
 * tokens (128- and 64-token partitions on 132 SMs) and one just past a
 * partition boundary. */
static void test_decode_of_one_long_sequence_spreads_over_the_sms(void) {
    const int32_t ctxs[3] = {4096, 4097, 2113};
    const cfg_t cfgs[] = {{DTYPE_BF16, 128, 32, 8, 16}, {DTYPE_BF16, 64, 32, 4, 16}, {DTYPE_F32, 128, 32, 8, 32}};
    memset(worst_abs, 0, sizeof worst_abs);
    for (int k = 0; k < 3; k++) {
        batch_spec_t b = decodes(&ctxs[k], 1);
        for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
            if (!run_case("decode, one long sequence", &cfgs[i], &b)) test_cur_failed = 1;
    }
    printf("  %-32s max |err|: f32 %.2e  bf16 %.2e  f16 %.2e\n", "decode, one long sequence", worst_abs[0],
           worst_abs[1], worst_abs[2]);
}

static void test_prefill_of_one_sequence_matches_cpu(void) {
    const int32_t lens[3] = {1, 100, 700};
    for (int i = 0; i < 3; i++) {
        batch_spec_t b = {.n = 1, .start = {0}, .n_new = {lens[i]}};
        char name[64];
        snprintf(name, sizeof name, "prefill %d", lens[i]);
        run_matrix(name, &b);
    }
}

static void test_chunked_prefill_attends_to_cached_context(void) {
    batch_spec_t b = {.n = 1, .start = {500}, .n_new = {64}}; /* positions 500..563 */
    run_matrix("chunked prefill 500..563", &b);
}

static void test_prefix_hit_queries_start_at_block_boundary(void) {
    /* 64 cached tokens: 4 blocks of 16 or 2 of 32, then 37 new tokens */
    batch_spec_t b = {.n = 2, .start = {64, 32}, .n_new = {37, 70}};
    run_matrix("prefix hit 64+37, 32+70", &b);
}

static void test_mixed_batch_of_decodes_and_prefills(void) {
    batch_spec_t b = {.n = 6,
                      .start = {0, 16, 0, 500, 3999, 599},
                      .n_new = {1, 1, 100, 64, 1, 1}};
    run_matrix("mixed decodes + prefills", &b);
    batch_spec_t b2 = {.n = 3, .start = {0, 0, 700}, .n_new = {1, 2, 1}}; /* smallest prefill: 2 tokens */
    run_matrix("mixed 1 + 2 + decode 701", &b2);
}

static void test_odd_block_sizes_and_group_sizes(void) {
    batch_spec_t dec = {.n = 3, .start = {0, 40, 1100}, .n_new = {1, 1, 1}};
    batch_spec_t mix = {.n = 3, .start = {0, 33, 1100}, .n_new = {45, 1, 20}};
    const cfg_t cfgs[] = {
        {DTYPE_F32, 128, 8, 2, 1},   {DTYPE_BF16, 128, 8, 2, 5},  {DTYPE_F16, 64, 6, 2, 7},
        {DTYPE_F32, 64, 6, 2, 16},   /* group 3: head tile 4, one padding head */
        {DTYPE_BF16, 64, 24, 2, 16}, /* group 12: two head tiles of 8 */
        {DTYPE_BF16, 128, 32, 1, 16}, /* group 32: four head tiles */
        {DTYPE_F32, 256, 8, 2, 16},  {DTYPE_BF16, 256, 8, 4, 16}, {DTYPE_F16, 256, 4, 4, 32},
        {DTYPE_BF16, 32, 4, 2, 16},  /* models/tiny: 4 heads, 2 KV heads */
        {DTYPE_F16, 32, 6, 2, 5},    {DTYPE_F32, 32, 24, 2, 7}, {DTYPE_BF16, 32, 32, 1, 1},
    };
    memset(worst_abs, 0, sizeof worst_abs);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++) {
        if (!run_case("odd decode", &cfgs[i], &dec)) test_cur_failed = 1;
        if (!run_case("odd mixed", &cfgs[i], &mix)) test_cur_failed = 1;
    }
    printf("  %-32s max |err|: f32 %.2e  bf16 %.2e  f16 %.2e\n", "odd shapes", worst_abs[0], worst_abs[1],
           worst_abs[2]);
}

/* A chunk of a prompt over cached context, a prefix hit, a short prompt and a
 * decode in one batch, small enough to run at D = 128 and 256 with GQA under
 * the emulator's work cap (tests/cuda-emu), whose other prefill cases at
 * these widths are left out: the tensor-core kernels' D=256 path (Q reloaded
 * per tile, BK = 32) and grouped heads in chunks and prefix hits. */
static void test_small_mixed_batch_at_every_head_dim_and_group(void) {
    batch_spec_t b = {.n = 4, .start = {40, 32, 0, 29}, .n_new = {24, 20, 30, 1}};
    const cfg_t cfgs[] = {
        {DTYPE_BF16, 256, 4, 1, 16}, /* group 4 */
        {DTYPE_F16, 256, 2, 2, 7},   /* group 1, odd block size */
        {DTYPE_F32, 256, 4, 2, 16},
        {DTYPE_BF16, 128, 8, 2, 16}, /* group 4 */
        {DTYPE_F16, 128, 8, 1, 5},   /* group 8 */
        {DTYPE_BF16, 64, 16, 2, 32}, /* group 8 */
        {DTYPE_F16, 32, 8, 2, 16},   /* group 4 */
    };
    memset(worst_abs, 0, sizeof worst_abs);
    for (size_t i = 0; i < sizeof cfgs / sizeof cfgs[0]; i++)
        if (!run_case("small mixed", &cfgs[i], &b)) test_cur_failed = 1;
    printf("  %-32s max |err|: f32 %.2e  bf16 %.2e  f16 %.2e\n", "small mixed", worst_abs[0], worst_abs[1],
           worst_abs[2]);
}

/* An fp8 cache (--kv-cache-dtype fp8 / fp8_e5m2) under both 16-bit
 * activation dtypes at every head dim: decodes over one and several
 * partitions (the decode kernel's 8-byte loads) and a mixed batch of a
 * chunk, a prefix hit, a short prompt and a decode (the tensor-core
 * kernels' widening into their 16-bit tiles; wmma too in the emulator's
 * SERVELAB_ATTN_PREFILL=wmma run). */
static void test_fp8_cache_matches_cpu(void) {
    const int32_t ctx[3] = {1, 17, 600};
    batch_spec_t dec = decodes(ctx, 3);
    batch_spec_t mix = {.n = 4, .start = {40, 32, 0, 29}, .n_new = {24, 20, 30, 1}};
    const sl_dtype_t dts[2] = {DTYPE_BF16, DTYPE_F16}, kvs[2] = {DTYPE_F8_E4M3, DTYPE_F8_E5M2};
    const int64_t Ds[4] = {32, 64, 128, 256};
    memset(worst_abs, 0, sizeof worst_abs);
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int d = 0; d < 4; d++) {
                const int64_t group = d % 2 ? 4 : 1; /* GQA at D = 64 and 256 */
                const cfg_t c = {dts[i], Ds[d], 2 * group, 2, d == 1 ? 32 : 16};
                if (!run_case_kv("fp8 decode", &c, kvs[j], &dec)) test_cur_failed = 1;
                if (!run_case_kv("fp8 mixed", &c, kvs[j], &mix)) test_cur_failed = 1;
            }
    printf("  %-32s max |err|: bf16 %.2e  f16 %.2e\n", "fp8 cache", worst_abs[1], worst_abs[2]);
}

static void test_bad_arguments_are_rejected_without_launch(void) {
    int32_t zero[2] = {0, 1};
    int32_t *d = kt_upload_raw(zero, sizeof zero);
    void *buf = NULL;
    KT_CUDA(cudaMalloc(&buf, 1 << 20));
    KT_CUDA(cudaMemset(buf, 0xff, 1 << 20));
    sl_attn_meta_t meta = {.n_tokens = 1, .n_seqs = 1, .max_blocks = 1, .max_seq_len = 1, .max_query_len = 1,
                           .positions = d, .query_start = d, .seq_lens = d + 1, .block_tables = d};
    /* D = 96 and an integer dtype are not supported */
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 96, 16, 1.0f, DTYPE_BF16, DTYPE_BF16, NULL, 0,
                               NULL),
                 cudaErrorInvalidValue);
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 64, 16, 1.0f, DTYPE_I32, DTYPE_I32, NULL, 0,
                               NULL),
                 cudaErrorInvalidValue);
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 3, 64, 16, 1.0f, DTYPE_BF16, DTYPE_BF16, NULL, 0,
                               NULL),
                 cudaErrorInvalidValue);
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 64, 0, 1.0f, DTYPE_BF16, DTYPE_BF16, NULL, 0,
                               NULL),
                 cudaErrorInvalidValue);
    /* an fp8 cache with f32 activations, and a cache dtype that is neither dt nor fp8 */
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 64, 16, 1.0f, DTYPE_F32, DTYPE_F8_E4M3, NULL, 0,
                               NULL),
                 cudaErrorInvalidValue);
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 64, 16, 1.0f, DTYPE_BF16, DTYPE_F16, NULL, 0, NULL),
                 cudaErrorInvalidValue);
    /* a workspace smaller than asked for */
    meta.max_seq_len = 2000;
    size_t need = slk_attention_workspace_bytes(&meta, 4, 4, 64);
    CHECK(need > 0);
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 64, 16, 1.0f, DTYPE_BF16, DTYPE_BF16, buf,
                               need - 1, NULL),
                 cudaErrorInvalidValue);
    /* T = 0: nothing to do, nothing launched, the output untouched */
    meta.n_tokens = 0;
    CHECK_EQ_INT(slk_attention(buf, buf, buf, buf, &meta, 4, 4, 64, 16, 1.0f, DTYPE_BF16, DTYPE_BF16, NULL, 0,
                               NULL),
                 0);
    KT_CUDA(cudaDeviceSynchronize());
    unsigned char head[64];
    KT_CUDA(cudaMemcpy(head, buf, sizeof head, cudaMemcpyDeviceToHost));
    int untouched = 1;
    for (size_t i = 0; i < sizeof head; i++) untouched &= head[i] == 0xff;
    CHECK(untouched);
    KT_CUDA(cudaGetLastError());
    cudaFree(buf), cudaFree(d);
}

int main(void) {
    kt_require_gpu();
    test_seed();
    RUN(test_bad_arguments_are_rejected_without_launch);
    RUN(test_decode_matches_cpu_across_blocks_and_partitions);
    RUN(test_decode_blocks_loop_over_partitions_past_the_grid);
    RUN(test_decode_of_one_long_sequence_spreads_over_the_sms);
    RUN(test_prefill_of_one_sequence_matches_cpu);
    RUN(test_chunked_prefill_attends_to_cached_context);
    RUN(test_prefix_hit_queries_start_at_block_boundary);
    RUN(test_mixed_batch_of_decodes_and_prefills);
    RUN(test_odd_block_sizes_and_group_sizes);
    RUN(test_small_mixed_batch_at_every_head_dim_and_group);
    RUN(test_fp8_cache_matches_cpu);
    kt_report_left_out();
    return test_summary();
}
