/* test_kernels_elementwise.c - the elementwise, norm, RoPE and KV-write
 * kernels (kernels/cuda/elementwise.cu, rope_kv.cu) against their CPU twins.
 *
 * Every case: fresh random inputs (seed printed), rounded to the dtype so the
 * kernel and the CPU op see the same values; the CPU op's fp32 result is then
 * rounded to the dtype as the kernel's store does, and the two are compared.
 * Outputs are poisoned with NaN bytes first (cudaMemset 0xFF), so an element
 * the kernel forgets fails; the KV caches instead start with random old
 * contents, which must survive wherever no token writes. Shapes include odd
 * sizes (scalar paths), misaligned pointers, aliasing the ops allow, and
 * more rows than the grid cap (the kernels' stride loops).
 *
 * Tolerances, in units of kt_eps(dt) (one rounding of the output):
 * - copies (embed, its vocabulary shard, gather_rows, kv_write) and add: exact. add is one IEEE
 *   fp32 addition of the same two values, then the same rounding.
 * - a 16-bit output that is one rounding of near-equal fp32 values (every
 *   op but the copies): 1. The fp32 values differ by far less than an ulp
 *   of the dtype, so the roundings agree or are adjacent; and at most
 *   2 + n/20 elements may differ at all, which a wrong rounding mode (off in
 *   about half the elements, each by at most an ulp) would not pass.
 * - f32 rmsnorm: 2 sqrt(n) + 8. The CPU sums squares left to right, the
 *   kernel in a tree: the CPU's relative error grows like sqrt(n) ulps
 *   (measured worst over 300 rows of 5120: 32 ulps of the sum, 16 of r, whose
 *   square root halves it); the rest of the formula is the CPU's, rounding
 *   for rounding.
 * - f32 silu_mul: 8. The kernel's expf is within 2 ulps of glibc's, and
 *   1 + e, the division and the product add at most 3.
 * - an fp8 KV cache (rope_kv_write, kv_write into fp8 e4m3 / e5m2 from bf16 / f16):
 *   exact, byte for byte: every code is cpu_kv_write_dt's for the value as
 *   stored in dt (rotated k rounded to dt first). Inputs span every binade
 *   the fp8 dtypes have, from subnormals to past e4m3's largest value
 *   (saturation), and include NaN.
 * - f32 rope: 4, floored at 4 ulps of the largest |value|. With the same
 *   inv_freq (host libm) and double-precision sin/cos the kernel is bit-exact
 *   on x86-64; the slack covers a last-bit difference of the device's double
 *   sincos and a host compiler that contracts x1*c - x2*s into an FMA (the
 *   absolute error of that is an ulp of the inputs, hence the floor).
 */
#include <string.h>

#include "kernel_test.h"

static const sl_dtype_t DTS[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F16};
#define N_DTS 3
static const int64_t NS[] = {1, 7, 64, 4096 + 3, 4096, 5120};
#define N_NS 6
static const int64_t TS[] = {1, 3, 17, 300};
#define N_TS 4
static const int64_t HEADS[][2] = {{8, 1}, {8, 2}, {8, 8}, {32, 1}, {32, 2}, {32, 8}}; /* H, Hkv */
#define N_HEADS 6
static const int64_t DS[] = {64, 128, 72}; /* 72: D/2 * 2 bytes is not a multiple of 16, the scalar path */
#define N_DS 3

static cudaStream_t stream;

/* ---- helpers ------------------------------------------------------------------- */

static float *rand_vec(int64_t n, float lo, float hi, sl_dtype_t dt) {
    float *x = kt_fvec(n);
    kt_fill(x, n, lo, hi, dt);
    return x;
}

static float *copy_vec(const float *x, int64_t n) {
    float *y = kt_fvec(n);
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

/* The value a store in dt keeps: what the kernel's output holds. */
static void round_to_dt(float *x, int64_t n, sl_dtype_t dt) {
    if (dt == DTYPE_F32) return;
    void *tmp = malloc((size_t)(n > 0 ? n : 1) * 2);
    dtype_from_f32(tmp, x, dt, n);
    dtype_to_f32(x, tmp, dt, n);
    free(tmp);
}

/* x in dt's bytes, for the CPU ops that read a dt array (embed's table, norm weights). */
static void *host_dt(const float *x, int64_t n, sl_dtype_t dt) {
    void *p = malloc((size_t)(n > 0 ? n : 1) * kt_size(dt));
    dtype_from_f32(p, x, dt, n);
    return p;
}

/* n elements of dt on the device, every byte 0xFF: NaN in all three dtypes. */
static void *dev_poisoned(int64_t n, sl_dtype_t dt) {
    size_t bytes = (size_t)(n > 0 ? n : 1) * kt_size(dt);
    void *d = NULL;
    KT_CUDA(cudaMalloc(&d, bytes));
    KT_CUDA(cudaMemset(d, 0xff, bytes));
    return d;
}

/* kt_close, plus (when `rounding`) a cap on how many 16-bit elements may
 * differ at all from the CPU's rounding; marks the test failed. */
static void expect_close(const char *ctx, const float *got, const float *want, int64_t n, sl_dtype_t dt,
                         double ulps, double floor_frac, int rounding) {
    int ok = kt_close(ctx, got, want, n, dt, ulps, floor_frac);
    if (ok && rounding && dt != DTYPE_F32) {
        int64_t off = 0;
        for (int64_t i = 0; i < n; i++) off += got[i] != want[i];
        if (off > 2 + n / 20) {
            fprintf(stderr, "  %s (%s): %lld of %lld elements differ from the CPU's rounding\n", ctx, kt_name(dt),
                    (long long)off, (long long)n);
            ok = 0;
        }
    }
    if (!ok) test_cur_failed = 1;
}

static void expect_exact(const char *ctx, const float *got, const float *want, int64_t n, sl_dtype_t dt) {
    expect_close(ctx, got, want, n, dt, 0.0, 0.0, 0);
}

static void expect_rc(int rc, const char *ctx) {
    if (rc != 0) {
        fprintf(stderr, "  %s: launcher returned %d (%s)\n", ctx, rc, cudaGetErrorString((cudaError_t)rc));
        test_cur_failed = 1;
    }
}

/* T distinct slots out of n_slots (scattered over the blocks), about one in
 * five -1 (skipped), and the middle token always skipped when T >= 3. */
static int64_t *make_slot_mapping(int64_t T, int64_t n_slots) {
    int64_t *perm = malloc((size_t)n_slots * sizeof(int64_t)), *slots = malloc((size_t)T * sizeof(int64_t));
    for (int64_t i = 0; i < n_slots; i++) perm[i] = i;
    for (int64_t t = 0; t < T; t++) {
        int64_t j = t + (int64_t)(test_rng() % (uint64_t)(n_slots - t)), tmp = perm[t];
        perm[t] = perm[j], perm[j] = tmp;
        slots[t] = test_rng() % 5 == 0 || (T >= 3 && t == T / 2) ? -1 : perm[t];
    }
    free(perm);
    return slots;
}

/* Positions as a mixed batch has them: small ones and ones far into a long context. */
static int32_t *make_positions(int64_t T) {
    int32_t *pos = malloc((size_t)T * sizeof(int32_t));
    for (int64_t t = 0; t < T; t++) pos[t] = t == 0 ? 0 : t % 2 ? (int32_t)(test_rng() % 100000) : (int32_t)t;
    return pos;
}

static int32_t *make_indices(int64_t n, int64_t range) {
    int32_t *idx = malloc((size_t)n * sizeof(int32_t));
    for (int64_t i = 0; i < n; i++) idx[i] = (int32_t)(test_rng() % (uint64_t)range);
    return idx;
}

/* ---- row copies ------------------------------------------------------------------ */

static void embed_case(sl_dtype_t dt, int64_t T, int64_t n) {
    const int64_t V = 37;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "embed T=%lld n=%lld", (long long)T, (long long)n);
    float *table = rand_vec(V * n, -1.0f, 1.0f, dt), *got = kt_fvec(T * n), *want = kt_fvec(T * n);
    int32_t *ids = make_indices(T, V);
    void *d_table = kt_upload(table, V * n, dt), *d_ids = kt_upload_raw(ids, (size_t)T * sizeof(int32_t));
    void *d_out = dev_poisoned(T * n, dt);
    expect_rc(slk_embed(d_out, d_table, d_ids, T, n, 0, V, dt, stream), ctx);
    kt_download(got, d_out, T * n, dt);
    void *raw = host_dt(table, V * n, dt);
    cpu_embed(want, raw, dt, n, ids, T);
    expect_exact(ctx, got, want, T * n, dt);
    free(raw), free(table), free(got), free(want), free(ids);
    cudaFree(d_table), cudaFree(d_ids), cudaFree(d_out);
}

static void test_embed_copies_the_rows_of_each_id(void) {
    for (int d = 0; d < N_DTS; d++)
        for (int i = 0; i < N_NS; i++)
            for (int j = 0; j < N_TS; j++) embed_case(DTS[d], TS[j], NS[i]);
}

static int64_t n_shard_cases, n_shard_hits, n_shard_misses;

/* One rank's vocabulary shard: the device table holds rows [vocab0, vocab0 +
 * n_rows) of a V-row embedding, ids range over all of V. The first ids are
 * the range's edges (its first row, the id just below it, the id just past
 * it, its last row), so even T = 1 looks a row up and T >= 3 meets both
 * kinds; out is NaN-poisoned, so a skipped zero row fails. */
static void embed_shard_case(sl_dtype_t dt, int64_t T, int64_t n, int64_t V, int64_t vocab0, int64_t n_rows) {
    char ctx[128];
    snprintf(ctx, sizeof ctx, "embed shard [%lld, %lld) of V=%lld T=%lld n=%lld", (long long)vocab0,
             (long long)(vocab0 + n_rows), (long long)V, (long long)T, (long long)n);
    float *table = rand_vec(n_rows * n, -1.0f, 1.0f, dt), *got = kt_fvec(T * n), *want = kt_fvec(T * n);
    int32_t *ids = make_indices(T, V);
    const int64_t edges[4] = {vocab0, vocab0 - 1, vocab0 + n_rows, vocab0 + n_rows - 1};
    for (int64_t t = 0; t < T && t < 4; t++)
        if (edges[t] >= 0 && edges[t] < V) ids[t] = (int32_t)edges[t];
    for (int64_t t = 0; t < T; t++) {
        int hit = ids[t] >= vocab0 && ids[t] < vocab0 + n_rows;
        n_shard_hits += hit, n_shard_misses += !hit;
    }
    void *d_table = kt_upload(table, n_rows * n, dt), *d_ids = kt_upload_raw(ids, (size_t)T * sizeof(int32_t));
    void *d_out = dev_poisoned(T * n, dt);
    expect_rc(slk_embed(d_out, d_table, d_ids, T, n, vocab0, n_rows, dt, stream), ctx);
    kt_download(got, d_out, T * n, dt);
    void *raw = host_dt(table, n_rows * n, dt);
    cpu_embed_shard(want, raw, dt, n, ids, T, vocab0, n_rows);
    expect_exact(ctx, got, want, T * n, dt);
    n_shard_cases++;
    free(raw), free(table), free(got), free(want), free(ids);
    cudaFree(d_table), cudaFree(d_ids), cudaFree(d_out);
}

static void test_embed_shard_zeroes_the_ids_of_other_ranks(void) {
    const int64_t V = 37;
    n_shard_cases = n_shard_hits = n_shard_misses = 0;
    for (int d = 0; d < N_DTS; d++) {
        for (int i = 0; i < N_NS; i++)
            for (int j = 0; j < N_TS; j++) {
                embed_shard_case(DTS[d], TS[j], NS[i], V, 11, 13); /* a middle rank */
                embed_shard_case(DTS[d], TS[j], NS[i], V, 26, 11); /* the last rank: its range ends at V */
            }
        embed_shard_case(DTS[d], 70000, 3, V, 11, 13); /* more rows than the grid's 65535: the row loop */
    }
    printf("     embed shard: %lld cases, %lld rows looked up, %lld zero rows\n", (long long)n_shard_cases,
           (long long)n_shard_hits, (long long)n_shard_misses);
}

static void gather_case(sl_dtype_t dt, int64_t S, int64_t n) {
    const int64_t R = S + 5;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "gather_rows S=%lld n=%lld", (long long)S, (long long)n);
    float *in = rand_vec(R * n, -2.0f, 2.0f, dt), *got = kt_fvec(S * n), *want = kt_fvec(S * n);
    int32_t *idx = make_indices(S, R);
    void *d_in = kt_upload(in, R * n, dt), *d_idx = kt_upload_raw(idx, (size_t)S * sizeof(int32_t));
    void *d_out = dev_poisoned(S * n, dt);
    expect_rc(slk_gather_rows(d_out, d_in, d_idx, S, n, dt, stream), ctx);
    kt_download(got, d_out, S * n, dt);
    cpu_gather_rows(want, in, idx, S, n);
    expect_exact(ctx, got, want, S * n, dt);
    free(in), free(got), free(want), free(idx);
    cudaFree(d_in), cudaFree(d_idx), cudaFree(d_out);
}

static void test_gather_rows_picks_the_indexed_rows(void) {
    for (int d = 0; d < N_DTS; d++) {
        for (int i = 0; i < N_NS; i++)
            for (int j = 0; j < N_TS; j++) gather_case(DTS[d], TS[j], NS[i]);
        gather_case(DTS[d], 70000, 3); /* more rows than the grid's 65535: the row loop */
    }
}

/* ---- flat elementwise ------------------------------------------------------------- */

/* `offset` elements into each device buffer: 1 makes every pointer miss
 * 16-byte alignment, the scalar path. */
static void add_case(sl_dtype_t dt, int64_t n, int64_t offset) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "add n=%lld offset=%lld", (long long)n, (long long)offset);
    float *x = rand_vec(n + offset, -2.0f, 2.0f, dt), *y = rand_vec(n + offset, -2.0f, 2.0f, dt);
    float *got = kt_fvec(n + offset), *want = copy_vec(x, n + offset);
    void *d_x = kt_upload(x, n + offset, dt), *d_y = kt_upload(y, n + offset, dt);
    size_t off = (size_t)offset * kt_size(dt);
    expect_rc(slk_add((char *)d_x + off, (char *)d_y + off, n, dt, stream), ctx);
    kt_download(got, d_x, n + offset, dt);
    cpu_add(want + offset, y + offset, n);
    round_to_dt(want, n + offset, dt);
    expect_exact(ctx, got, want, n + offset, dt); /* elements before the offset untouched too */
    free(x), free(y), free(got), free(want);
    cudaFree(d_x), cudaFree(d_y);
}

static const int64_t FLAT_NS[] = {1, 7, 64, 4096 + 3, 4096, 300 * 5120 + 5};
#define N_FLAT_NS 6

static void test_add_matches_cpu(void) {
    for (int d = 0; d < N_DTS; d++)
        for (int i = 0; i < N_FLAT_NS; i++)
            for (int64_t off = 0; off < 2; off++) add_case(DTS[d], FLAT_NS[i], off);
}

/* in_place: out is gate, as the Llama MLP calls it. */
static void silu_case(sl_dtype_t dt, int64_t n, int64_t offset, int in_place) {
    char ctx[96];
    snprintf(ctx, sizeof ctx, "silu_mul n=%lld offset=%lld%s", (long long)n, (long long)offset,
             in_place ? " in place" : "");
    float *g = rand_vec(n + offset, -8.0f, 8.0f, dt), *u = rand_vec(n + offset, -2.0f, 2.0f, dt);
    float *got = kt_fvec(n), *want = kt_fvec(n);
    void *d_g = kt_upload(g, n + offset, dt), *d_u = kt_upload(u, n + offset, dt);
    void *d_out = in_place ? d_g : dev_poisoned(n + offset, dt);
    size_t off = (size_t)offset * kt_size(dt);
    expect_rc(slk_silu_mul((char *)d_out + off, (char *)d_g + off, (char *)d_u + off, n, dt, stream), ctx);
    float *all = kt_fvec(n + offset);
    kt_download(all, d_out, n + offset, dt);
    memcpy(got, all + offset, (size_t)n * sizeof(float));
    cpu_silu_mul(want, g + offset, u + offset, n);
    round_to_dt(want, n, dt);
    expect_close(ctx, got, want, n, dt, dt == DTYPE_F32 ? 8.0 : 1.0, 1e-3, 1);
    free(g), free(u), free(got), free(want), free(all);
    cudaFree(d_g), cudaFree(d_u);
    if (!in_place) cudaFree(d_out);
}

static void test_silu_mul_matches_cpu(void) {
    for (int d = 0; d < N_DTS; d++)
        for (int i = 0; i < N_FLAT_NS; i++) {
            silu_case(DTS[d], FLAT_NS[i], 0, 0);
            silu_case(DTS[d], FLAT_NS[i], 1, 0);
            silu_case(DTS[d], FLAT_NS[i], 0, 1);
        }
}

/* ---- norms -------------------------------------------------------------------------- */

static double norm_ulps(sl_dtype_t dt, int64_t n) { return dt == DTYPE_F32 ? 2.0 * sqrt((double)n) + 8.0 : 1.0; }

/* in_place: out is in, as the final norm over the gathered rows runs. */
static void rmsnorm_case(sl_dtype_t dt, int64_t T, int64_t n, int in_place) {
    const float eps = T % 2 ? 1e-5f : 1e-6f;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "rmsnorm T=%lld n=%lld%s", (long long)T, (long long)n, in_place ? " in place" : "");
    float *x = rand_vec(T * n, -2.0f, 2.0f, dt), *w = rand_vec(n, -1.5f, 1.5f, dt);
    float *got = kt_fvec(T * n), *want = kt_fvec(T * n);
    void *d_x = kt_upload(x, T * n, dt), *d_w = kt_upload(w, n, dt);
    void *d_out = in_place ? d_x : dev_poisoned(T * n, dt);
    expect_rc(slk_rmsnorm(d_out, d_x, d_w, T, n, eps, dt, stream), ctx);
    kt_download(got, d_out, T * n, dt);
    void *raw_w = host_dt(w, n, dt);
    cpu_rmsnorm(want, x, raw_w, dt, T, n, eps);
    round_to_dt(want, T * n, dt);
    expect_close(ctx, got, want, T * n, dt, norm_ulps(dt, n), 1e-3, 1);
    free(x), free(w), free(got), free(want), free(raw_w);
    cudaFree(d_x), cudaFree(d_w);
    if (!in_place) cudaFree(d_out);
}

static void test_rmsnorm_matches_cpu(void) {
    for (int d = 0; d < N_DTS; d++)
        for (int i = 0; i < N_NS; i++)
            for (int j = 0; j < N_TS; j++) rmsnorm_case(DTS[d], TS[j], NS[i], j == 1);
}

/* From 1024 rows each thread takes up to 4 accesses; past the grid cap of
 * 65535 blocks (a block per row: n = 131 is 131 scalar accesses, over 4 x 32;
 * a warp per row: 8 rows per block) blocks loop over rows. */
static void test_rmsnorm_many_rows(void) {
    for (int d = 0; d < N_DTS; d++) {
        rmsnorm_case(DTS[d], 1100, 4096, 0);
        rmsnorm_case(DTS[d], 1100, 5120, 0);
        rmsnorm_case(DTS[d], 1100, 4096 + 3, 0);
        rmsnorm_case(DTS[d], 66000, 131, 0);
        rmsnorm_case(DTS[d], 8 * 65535 + 5, 7, 0);
    }
}

/* out_is_y: out aliases y, as the Llama layer calls it (x += h; h = norm(x)). */
static void add_rmsnorm_case(sl_dtype_t dt, int64_t T, int64_t n, int out_is_y) {
    const float eps = 1e-5f;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "add_rmsnorm T=%lld n=%lld%s", (long long)T, (long long)n, out_is_y ? " out=y" : "");
    float *x = rand_vec(T * n, -2.0f, 2.0f, dt), *y = rand_vec(T * n, -2.0f, 2.0f, dt);
    float *w = rand_vec(n, -1.5f, 1.5f, dt);
    float *got_x = kt_fvec(T * n), *got = kt_fvec(T * n), *want_x = copy_vec(x, T * n), *want = kt_fvec(T * n);
    void *d_x = kt_upload(x, T * n, dt), *d_y = kt_upload(y, T * n, dt), *d_w = kt_upload(w, n, dt);
    void *d_out = out_is_y ? d_y : dev_poisoned(T * n, dt);
    expect_rc(slk_add_rmsnorm(d_x, d_out, d_y, d_w, T, n, eps, dt, stream), ctx);
    kt_download(got_x, d_x, T * n, dt);
    kt_download(got, d_out, T * n, dt);
    /* The unfused sequence: add, store x (rounded), rmsnorm of the stored x. */
    cpu_add(want_x, y, T * n);
    round_to_dt(want_x, T * n, dt);
    void *raw_w = host_dt(w, n, dt);
    cpu_rmsnorm(want, want_x, raw_w, dt, T, n, eps);
    round_to_dt(want, T * n, dt);
    expect_exact(ctx, got_x, want_x, T * n, dt);
    expect_close(ctx, got, want, T * n, dt, norm_ulps(dt, n), 1e-3, 1);
    free(x), free(y), free(w), free(got_x), free(got), free(want_x), free(want), free(raw_w);
    cudaFree(d_x), cudaFree(d_y), cudaFree(d_w);
    if (!out_is_y) cudaFree(d_out);
}

static void test_add_rmsnorm_matches_add_then_rmsnorm(void) {
    for (int d = 0; d < N_DTS; d++) {
        for (int i = 0; i < N_NS; i++)
            for (int j = 0; j < N_TS; j++) add_rmsnorm_case(DTS[d], TS[j], NS[i], j == 2);
        add_rmsnorm_case(DTS[d], 1100, 5120, 0);
        add_rmsnorm_case(DTS[d], 1100, 4096, 1);
    }
}

/* ---- RoPE and the KV cache ---------------------------------------------------------- */

static const float THETAS[][2] = {{10000.0f, 1.0f}, {500000.0f, 8.0f}, {1000000.0f, 1.0f}}; /* theta, scale */

static double rope_ulps(sl_dtype_t dt) { return dt == DTYPE_F32 ? 4.0 : 1.0; }
static double rope_floor(sl_dtype_t dt) { return dt == DTYPE_F32 ? 1.0 : 1e-3; }

/* kv: the fused slk_rope_kv_write, against cpu_rope then cpu_kv_write of the
 * rotated k as stored (rounded to dt). */
static void rope_case(sl_dtype_t dt, int64_t T, int64_t H, int64_t Hkv, int64_t D, int cfg, int kv) {
    const float theta = THETAS[cfg][0], scale = THETAS[cfg][1];
    const int64_t B = 16, n_slots = B * (2 * ((T + B - 1) / B) + 3), row = Hkv * D;
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s T=%lld H=%lld Hkv=%lld D=%lld theta=%g scale=%g", kv ? "rope_kv_write" : "rope",
             (long long)T, (long long)H, (long long)Hkv, (long long)D, theta, scale);
    float *q = rand_vec(T * H * D, -2.0f, 2.0f, dt), *k = rand_vec(T * row, -2.0f, 2.0f, dt);
    float *v = rand_vec(T * row, -2.0f, 2.0f, dt);
    float *kc = rand_vec(n_slots * row, -1.0f, 1.0f, dt), *vc = rand_vec(n_slots * row, -1.0f, 1.0f, dt);
    int32_t *pos = make_positions(T);
    int64_t *slots = make_slot_mapping(T, n_slots);
    void *d_q = kt_upload(q, T * H * D, dt), *d_k = kt_upload(k, T * row, dt), *d_v = kt_upload(v, T * row, dt);
    void *d_kc = kt_upload(kc, n_slots * row, dt), *d_vc = kt_upload(vc, n_slots * row, dt);
    void *d_pos = kt_upload_raw(pos, (size_t)T * sizeof(int32_t));
    void *d_slots = kt_upload_raw(slots, (size_t)T * sizeof(int64_t));
    int rc = kv ? slk_rope_kv_write(d_q, d_k, d_v, d_kc, d_vc, d_pos, d_slots, T, H, Hkv, D, theta, scale, dt, dt,
                                    stream)
                : slk_rope(d_q, d_k, d_pos, T, H, Hkv, D, theta, scale, dt, stream);
    expect_rc(rc, ctx);

    cpu_rope(q, k, pos, T, H, Hkv, D, theta, scale);
    round_to_dt(q, T * H * D, dt);
    round_to_dt(k, T * row, dt);
    float *got = kt_fvec(T * H * D > n_slots * row ? T * H * D : n_slots * row);
    kt_download(got, d_q, T * H * D, dt);
    expect_close(ctx, got, q, T * H * D, dt, rope_ulps(dt), rope_floor(dt), 1);
    kt_download(got, d_k, T * row, dt);
    expect_close(ctx, got, k, T * row, dt, rope_ulps(dt), rope_floor(dt), 1);
    if (kv) {
        cpu_kv_write(kc, vc, k, v, slots, T, Hkv, D);
        kt_download(got, d_kc, n_slots * row, dt);
        expect_close(ctx, got, kc, n_slots * row, dt, rope_ulps(dt), rope_floor(dt), 1);
        kt_download(got, d_vc, n_slots * row, dt);
        expect_exact(ctx, got, vc, n_slots * row, dt);
    }
    free(q), free(k), free(v), free(kc), free(vc), free(pos), free(slots), free(got);
    cudaFree(d_q), cudaFree(d_k), cudaFree(d_v), cudaFree(d_kc), cudaFree(d_vc), cudaFree(d_pos), cudaFree(d_slots);
}

static void rope_sweep(int kv) {
    int cfg = 0;
    for (int d = 0; d < N_DTS; d++)
        for (int h = 0; h < N_HEADS; h++)
            for (int i = 0; i < N_DS; i++)
                for (int j = 0; j < N_TS; j++, cfg = (cfg + 1) % 3)
                    rope_case(DTS[d], TS[j], HEADS[h][0], HEADS[h][1], DS[i], cfg, kv);
}

static void test_rope_matches_cpu(void) {
    rope_sweep(0);
    for (int d = 0; d < N_DTS; d++) rope_case(DTS[d], 1500, 8, 2, 128, d, 0); /* more tokens than blocks */
}

static void test_rope_kv_write_matches_rope_then_kv_write(void) {
    rope_sweep(1);
    for (int d = 0; d < N_DTS; d++) {
        rope_case(DTS[d], 1500, 8, 2, 128, d, 1);
        rope_case(DTS[d], 5, 4, 2, 7, d, 1); /* odd D: the last element is cached unrotated */
    }
}

static void kv_write_case(sl_dtype_t dt, int64_t T, int64_t Hkv, int64_t D) {
    const int64_t B = 16, n_slots = B * (2 * ((T + B - 1) / B) + 3), row = Hkv * D;
    char ctx[96];
    snprintf(ctx, sizeof ctx, "kv_write T=%lld Hkv=%lld D=%lld", (long long)T, (long long)Hkv, (long long)D);
    float *k = rand_vec(T * row, -2.0f, 2.0f, dt), *v = rand_vec(T * row, -2.0f, 2.0f, dt);
    float *kc = rand_vec(n_slots * row, -1.0f, 1.0f, dt), *vc = rand_vec(n_slots * row, -1.0f, 1.0f, dt);
    int64_t *slots = make_slot_mapping(T, n_slots);
    void *d_k = kt_upload(k, T * row, dt), *d_v = kt_upload(v, T * row, dt);
    void *d_kc = kt_upload(kc, n_slots * row, dt), *d_vc = kt_upload(vc, n_slots * row, dt);
    void *d_slots = kt_upload_raw(slots, (size_t)T * sizeof(int64_t));
    expect_rc(slk_kv_write(d_kc, d_vc, d_k, d_v, d_slots, T, Hkv, D, dt, dt, stream), ctx);
    cpu_kv_write(kc, vc, k, v, slots, T, Hkv, D);
    float *got = kt_fvec(n_slots * row);
    kt_download(got, d_kc, n_slots * row, dt);
    expect_exact(ctx, got, kc, n_slots * row, dt);
    kt_download(got, d_vc, n_slots * row, dt);
    expect_exact(ctx, got, vc, n_slots * row, dt);
    free(k), free(v), free(kc), free(vc), free(slots), free(got);
    cudaFree(d_k), cudaFree(d_v), cudaFree(d_kc), cudaFree(d_vc), cudaFree(d_slots);
}

/* n values in dt whose magnitudes span 2^-14 .. 2^10 (fp8 subnormals to
 * past e4m3's 448, below e5m2's 57344), either sign, one in 97 a NaN. */
static float *wide_vec(int64_t n, sl_dtype_t dt) {
    float *x = kt_fvec(n);
    for (int64_t i = 0; i < n; i++) {
        uint64_t r = test_rng();
        x[i] = r % 97 == 0 ? NAN : ldexpf(1.0f + (float)((r >> 8) & 0xffff) / 65536.0f, (int)((r >> 24) % 25) - 14);
        if (r & 0x80) x[i] = -x[i];
    }
    round_to_dt(x, n, dt);
    return x;
}

/* An fp8 cache: rope_kv_write (rope = 1; q and k rotated, k cached as
 * stored) or kv_write into kv_dt codes, against cpu_[rope,] rounding to dt,
 * cpu_kv_write_dt, byte for byte; the cache's old bytes (random) must stay
 * wherever no token writes. */
static void fp8_cache_case(sl_dtype_t dt, sl_dtype_t kv_dt, int64_t T, int64_t H, int64_t Hkv, int64_t D, int rope) {
    const int64_t B = 16, n_slots = B * (2 * ((T + B - 1) / B) + 3), row = Hkv * D, n_cache = n_slots * row;
    char ctx[128];
    snprintf(ctx, sizeof ctx, "%s %s <- %s T=%lld H=%lld Hkv=%lld D=%lld", rope ? "rope_kv_write" : "kv_write",
             kt_name(kv_dt), kt_name(dt), (long long)T, (long long)H, (long long)Hkv, (long long)D);
    float *q = wide_vec(T * H * D, dt), *k = wide_vec(T * row, dt), *v = wide_vec(T * row, dt);
    uint8_t *kc = malloc((size_t)n_cache), *vc = malloc((size_t)n_cache);
    uint8_t *got = malloc((size_t)n_cache);
    for (int64_t i = 0; i < n_cache; i++) kc[i] = (uint8_t)test_rng(), vc[i] = (uint8_t)test_rng();
    int32_t *pos = make_positions(T);
    int64_t *slots = make_slot_mapping(T, n_slots);
    void *d_q = kt_upload(q, T * H * D, dt), *d_k = kt_upload(k, T * row, dt), *d_v = kt_upload(v, T * row, dt);
    void *d_kc = kt_upload_raw(kc, (size_t)n_cache), *d_vc = kt_upload_raw(vc, (size_t)n_cache);
    void *d_pos = kt_upload_raw(pos, (size_t)T * sizeof(int32_t));
    void *d_slots = kt_upload_raw(slots, (size_t)T * sizeof(int64_t));
    int rc = rope ? slk_rope_kv_write(d_q, d_k, d_v, d_kc, d_vc, d_pos, d_slots, T, H, Hkv, D, 10000.0f, 1.0f, dt,
                                      kv_dt, stream)
                  : slk_kv_write(d_kc, d_vc, d_k, d_v, d_slots, T, Hkv, D, dt, kv_dt, stream);
    expect_rc(rc, ctx);

    if (rope) {
        cpu_rope(q, k, pos, T, H, Hkv, D, 10000.0f, 1.0f);
        round_to_dt(k, T * row, dt);
    }
    cpu_kv_write_dt(kc, vc, kv_dt, KV_SLOT_MAJOR, 1, k, v, slots, T, Hkv, D); /* the device cache is slot-major */
    KT_CUDA(cudaStreamSynchronize(stream));
    const uint8_t *want[2] = {kc, vc};
    void *dev[2] = {d_kc, d_vc};
    for (int c = 0; c < 2; c++) {
        KT_CUDA(cudaMemcpy(got, dev[c], (size_t)n_cache, cudaMemcpyDeviceToHost));
        for (int64_t i = 0; i < n_cache; i++)
            if (got[i] != want[c][i]) {
                fprintf(stderr, "  %s: %s cache byte %lld is 0x%02x, want 0x%02x\n", ctx, c ? "v" : "k",
                        (long long)i, got[i], want[c][i]);
                test_cur_failed = 1;
                break;
            }
    }
    free(q), free(k), free(v), free(kc), free(vc), free(got), free(pos), free(slots);
    cudaFree(d_q), cudaFree(d_k), cudaFree(d_v), cudaFree(d_kc), cudaFree(d_vc), cudaFree(d_pos), cudaFree(d_slots);
}

static void test_fp8_cache_writes_match_cpu_codes(void) {
    static const sl_dtype_t KVS[] = {DTYPE_F8_E4M3, DTYPE_F8_E5M2};
    static const int64_t FP8_DS[] = {64, 128, 72, 7}; /* 72: scalar rope; 7: odd D, scalar everywhere */
    for (int d = 1; d < N_DTS; d++)
        for (int c = 0; c < 2; c++)
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < N_TS; j++) {
                    fp8_cache_case(DTS[d], KVS[c], TS[j], 8, 2, FP8_DS[i], 1);
                    fp8_cache_case(DTS[d], KVS[c], TS[j], 8, 2, FP8_DS[i], 0);
                }
    fp8_cache_case(DTYPE_BF16, DTYPE_F8_E4M3, 1500, 8, 2, 128, 1); /* more tokens than blocks */
    fp8_cache_case(DTYPE_F16, DTYPE_F8_E5M2, 1500, 8, 2, 128, 0);
}

static void test_kv_write_fills_the_mapped_slots_only(void) {
    static const int64_t HKVS[] = {1, 2, 8};
    for (int d = 0; d < N_DTS; d++)
        for (int h = 0; h < 3; h++)
            for (int i = 0; i < N_DS; i++)
                for (int j = 0; j < N_TS; j++) kv_write_case(DTS[d], TS[j], HKVS[h], DS[i]);
}

/* ---- arguments ------------------------------------------------------------------------ */

static void test_empty_work_launches_nothing_and_bad_dtype_is_rejected(void) {
    const int bad = (int)cudaErrorInvalidValue;
    for (int d = 0; d < N_DTS; d++) {
        sl_dtype_t dt = DTS[d];
        CHECK_EQ_INT(slk_embed(NULL, NULL, NULL, 0, 64, 0, 37, dt, stream), 0);
        CHECK_EQ_INT(slk_embed(NULL, NULL, NULL, 1, 64, -1, 37, dt, stream), bad);
        CHECK_EQ_INT(slk_embed(NULL, NULL, NULL, 1, 64, 0, -1, dt, stream), bad);
        CHECK_EQ_INT(slk_rmsnorm(NULL, NULL, NULL, 0, 64, 1e-5f, dt, stream), 0);
        CHECK_EQ_INT(slk_add_rmsnorm(NULL, NULL, NULL, NULL, 0, 64, 1e-5f, dt, stream), 0);
        CHECK_EQ_INT(slk_add(NULL, NULL, 0, dt, stream), 0);
        CHECK_EQ_INT(slk_silu_mul(NULL, NULL, NULL, 0, dt, stream), 0);
        CHECK_EQ_INT(slk_gather_rows(NULL, NULL, NULL, 0, 64, dt, stream), 0);
        CHECK_EQ_INT(slk_rope(NULL, NULL, NULL, 0, 8, 2, 64, 1e4f, 1.0f, dt, stream), 0);
        CHECK_EQ_INT(slk_kv_write(NULL, NULL, NULL, NULL, NULL, 0, 2, 64, dt, dt, stream), 0);
        CHECK_EQ_INT(
            slk_rope_kv_write(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 0, 8, 2, 64, 1e4f, 1.0f, dt, dt, stream), 0);
    }
    sl_dtype_t dt = DTYPE_I32;
    CHECK_EQ_INT(slk_embed(NULL, NULL, NULL, 1, 64, 0, 37, dt, stream), bad);
    CHECK_EQ_INT(slk_rmsnorm(NULL, NULL, NULL, 1, 64, 1e-5f, dt, stream), bad);
    CHECK_EQ_INT(slk_add_rmsnorm(NULL, NULL, NULL, NULL, 1, 64, 1e-5f, dt, stream), bad);
    CHECK_EQ_INT(slk_add(NULL, NULL, 64, dt, stream), bad);
    CHECK_EQ_INT(slk_silu_mul(NULL, NULL, NULL, 64, dt, stream), bad);
    CHECK_EQ_INT(slk_gather_rows(NULL, NULL, NULL, 1, 64, dt, stream), bad);
    CHECK_EQ_INT(slk_rope(NULL, NULL, NULL, 1, 8, 2, 64, 1e4f, 1.0f, dt, stream), bad);
    CHECK_EQ_INT(slk_kv_write(NULL, NULL, NULL, NULL, NULL, 1, 2, 64, dt, dt, stream), bad);
    CHECK_EQ_INT(slk_rope_kv_write(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 8, 2, 64, 1e4f, 1.0f, dt, dt, stream),
                 bad);
    /* an fp8 cache from f32 activations, and a 16-bit cache of another dtype */
    CHECK_EQ_INT(slk_kv_write(NULL, NULL, NULL, NULL, NULL, 1, 2, 64, DTYPE_F32, DTYPE_F8_E4M3, stream), bad);
    CHECK_EQ_INT(slk_rope_kv_write(NULL, NULL, NULL, NULL, NULL, NULL, NULL, 1, 8, 2, 64, 1e4f, 1.0f, DTYPE_F32,
                                   DTYPE_F8_E5M2, stream),
                 bad);
    CHECK_EQ_INT(slk_kv_write(NULL, NULL, NULL, NULL, NULL, 1, 2, 64, DTYPE_BF16, DTYPE_F16, stream), bad);
    /* RoPE's inverse frequencies travel in the kernel's arguments: D is bounded. */
    CHECK_EQ_INT(slk_rope(NULL, NULL, NULL, 1, 8, 2, 1024, 1e4f, 1.0f, DTYPE_BF16, stream), bad);
    KT_CUDA(cudaStreamSynchronize(stream));
}

int main(void) {
    kt_require_gpu();
    test_seed();
    KT_CUDA(cudaStreamCreate(&stream));
    RUN(test_empty_work_launches_nothing_and_bad_dtype_is_rejected);
    RUN(test_embed_copies_the_rows_of_each_id);
    RUN(test_embed_shard_zeroes_the_ids_of_other_ranks);
    RUN(test_gather_rows_picks_the_indexed_rows);
    RUN(test_add_matches_cpu);
    RUN(test_silu_mul_matches_cpu);
    RUN(test_rmsnorm_matches_cpu);
    RUN(test_rmsnorm_many_rows);
    RUN(test_add_rmsnorm_matches_add_then_rmsnorm);
    RUN(test_rope_matches_cpu);
    RUN(test_rope_kv_write_matches_rope_then_kv_write);
    RUN(test_kv_write_fills_the_mapped_slots_only);
    RUN(test_fp8_cache_writes_match_cpu_codes);
    KT_CUDA(cudaStreamDestroy(stream));
    return test_summary();
}
