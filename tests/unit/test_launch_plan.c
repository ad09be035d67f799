/* test_launch_plan.c - the launch shapes of the CUDA elementwise, norm, copy
 * RoPE and GEMV kernels (kernels/cuda/launch_plan.h), checked on the CPU in every
 * build: access widths only where every address and stride allows them,
 * block shapes the kernels assume (multiples of 32, at most 1024), grids
 * within the hardware limits, and the shapes chosen for the model sizes that
 * matter (a decode step's few rows, a prefill's many).
 */
#include "launch_plan.h"

#include "test.h"

static const uintptr_t ALIGNED = 0x7f0000000000u, MISALIGNED = 0x7f0000000002u;

static int is_pow2(int64_t x) { return x > 0 && (x & (x - 1)) == 0; }

static void test_vector_access_needs_every_address_aligned(void) {
    CHECK_EQ_INT(slk_vec_elems(2, ALIGNED), 8);
    CHECK_EQ_INT(slk_vec_elems(4, ALIGNED), 4);
    for (uintptr_t bit = 1; bit < 16; bit <<= 1) {
        CHECK_EQ_INT(slk_vec_elems(2, ALIGNED | bit), 1);
        CHECK_EQ_INT(slk_vec_elems(4, ALIGNED | bit), 1);
    }
}

static void test_flat_plan_covers_n_in_one_pass_below_the_cap(void) {
    static const int64_t ns[] = {1, 7, 8, 9, 4099, 300 * 5120 + 5, 8192LL * 28672, 1LL << 34};
    for (int i = 0; i < 8; i++)
        for (int eb = 2; eb <= 4; eb += 2)
            for (int a = 0; a < 2; a++) {
                int64_t n = ns[i];
                slk_flat_plan_t p = slk_plan_flat(n, eb, a ? MISALIGNED : ALIGNED);
                CHECK_EQ_INT(p.vec, a ? 1 : 16 / eb);
                CHECK(p.threads % 32 == 0 && p.threads <= 1024);
                CHECK(p.blocks >= 1 && p.blocks <= SLK_GRID_CAP);
                int64_t items = n / p.vec;
                if (items <= (int64_t)SLK_GRID_CAP * p.threads) CHECK(p.blocks * p.threads >= items);
                else CHECK_EQ_INT(p.blocks, SLK_GRID_CAP); /* the kernel's stride loop does the rest */
            }
}

static void test_norm_plan_shapes_are_valid_for_every_size(void) {
    static const int64_t Ts[] = {1, 3, 17, 300, 1023, 1024, 70000, 8 * 65535 + 5};
    static const int64_t ns[] = {1, 7, 33, 64, 131, 4096 + 3, 4096, 5120, 8192, 16384, 65536};
    for (int i = 0; i < 8; i++)
        for (int j = 0; j < 11; j++)
            for (int eb = 2; eb <= 4; eb += 2)
                for (int a = 0; a < 2; a++) {
                    int64_t T = Ts[i], n = ns[j];
                    slk_norm_plan_t p = slk_plan_norm(T, n, eb, a ? MISALIGNED : ALIGNED);
                    int vec_ok = !a && (n * eb) % 16 == 0;
                    CHECK_EQ_INT(p.vec, vec_ok ? 16 / eb : 1);
                    CHECK(n % p.vec == 0);
                    CHECK(p.threads % 32 == 0 && p.threads >= 32 && p.threads <= 1024);
                    CHECK(is_pow2(p.threads_per_row) && p.threads_per_row >= 32 && p.threads_per_row <= 1024);
                    CHECK(p.blocks >= 1 && p.blocks <= SLK_GRID_CAP);
                    int64_t accesses = n / p.vec, per_thread = T >= SLK_NORM_MANY_ROWS ? SLK_NORM_UNROLL : 1;
                    if (p.threads_per_row < 1024) CHECK(p.threads_per_row * per_thread >= accesses);
                    if (p.threads_per_row > 32) CHECK(p.threads_per_row * per_thread < 2 * accesses);
                    if (p.threads_per_row == 32) {
                        int64_t rpb = T < 8 ? T : 8;
                        CHECK_EQ_INT(p.threads, 32 * rpb);
                        CHECK_EQ_INT(p.blocks, slk_min64((T + rpb - 1) / rpb, SLK_GRID_CAP));
                    } else {
                        CHECK_EQ_INT(p.threads, p.threads_per_row);
                        CHECK_EQ_INT(p.blocks, slk_min64(T, SLK_GRID_CAP));
                    }
                }
}

static void test_norm_plan_spreads_decode_rows_and_packs_prefill_rows(void) {
    /* Llama-3-8B hidden 4096, bf16: 512 packs of 8. One row: a thread per pack. */
    slk_norm_plan_t p = slk_plan_norm(1, 4096, 2, ALIGNED);
    CHECK_EQ_INT(p.vec, 8);
    CHECK_EQ_INT(p.threads_per_row, 512);
    CHECK_EQ_INT(p.blocks, 1);
    /* A prefill of 4096 rows: 4 packs per thread, 128 threads per row. */
    p = slk_plan_norm(4096, 4096, 2, ALIGNED);
    CHECK_EQ_INT(p.threads_per_row, 128);
    CHECK_EQ_INT(p.blocks, 4096);
    /* 5120 (13B), f32: 1280 packs of 4; few rows cap at 1024 threads (2 rounds). */
    p = slk_plan_norm(3, 5120, 4, ALIGNED);
    CHECK_EQ_INT(p.vec, 4);
    CHECK_EQ_INT(p.threads_per_row, 1024);
    /* A small row goes to a warp, 8 rows per block. */
    p = slk_plan_norm(300, 64, 2, ALIGNED);
    CHECK_EQ_INT(p.threads_per_row, 32);
    CHECK_EQ_INT(p.threads, 256);
    CHECK_EQ_INT(p.blocks, 38);
    /* n = 4099 cannot keep rows aligned: single elements. */
    p = slk_plan_norm(17, 4099, 2, ALIGNED);
    CHECK_EQ_INT(p.vec, 1);
    CHECK_EQ_INT(p.threads_per_row, 1024);
}

static void test_copy_plan_uses_the_widest_access_dividing_everything(void) {
    static const int64_t rows_bytes[] = {2, 14, 128, 4096 * 2 + 6, 8192, 5120 * 4, 1 * 64 * 2, 8 * 128 * 2, 7};
    for (int i = 0; i < 9; i++)
        for (int a = 0; a < 3; a++) {
            uintptr_t addr = a == 0 ? ALIGNED : a == 1 ? ALIGNED | 8 : MISALIGNED;
            int64_t rb = rows_bytes[i];
            slk_copy_plan_t p = slk_plan_copy(70000, rb, addr);
            CHECK(rb % p.width == 0 && (addr % (uintptr_t)p.width) == 0);
            if (p.width < 16) CHECK(rb % (2 * p.width) != 0 || addr % (uintptr_t)(2 * p.width) != 0);
            CHECK(p.threads % 32 == 0 && p.threads >= 32 && p.threads <= 256);
            CHECK(p.blocks_x >= 1 && p.blocks_x <= SLK_GRID_CAP);
            CHECK(p.blocks_x * p.threads >= rb / p.width);
            CHECK_EQ_INT(p.blocks_y, SLK_GRID_CAP);
        }
    slk_copy_plan_t p = slk_plan_copy(3, 4096 * 2, ALIGNED);
    CHECK_EQ_INT(p.width, 16);
    CHECK_EQ_INT(p.threads, 256);
    CHECK_EQ_INT(p.blocks_x, 2);
    CHECK_EQ_INT(p.blocks_y, 3);
    CHECK_EQ_INT(slk_plan_copy(3, 7, ALIGNED).width, 1);
}

static void test_rope_plan_vectorizes_whole_halves_only(void) {
    static const int64_t Ds[] = {7, 64, 72, 80, 128, 256, 512};
    for (int i = 0; i < 7; i++)
        for (int eb = 2; eb <= 4; eb += 2)
            for (int a = 0; a < 2; a++) {
                int64_t D = Ds[i], half = D / 2;
                slk_rope_plan_t p = slk_plan_rope(300, 32, 8, D, eb, a ? MISALIGNED : ALIGNED);
                int vec_ok = !a && (half * eb) % 16 == 0 && (D * eb) % 16 == 0;
                CHECK_EQ_INT(p.vec, vec_ok ? 16 / eb : 1);
                CHECK(half % p.vec == 0);
                CHECK(p.threads % 32 == 0 && p.threads >= 32 && p.threads <= SLK_ROPE_MAX_THREADS);
                CHECK_EQ_INT(p.blocks, 300);
                CHECK_EQ_INT((int64_t)p.smem_bytes, 2 * half * 4);
            }
    CHECK_EQ_INT(slk_plan_rope(1, 32, 8, 128, 2, ALIGNED).vec, 8);
    CHECK_EQ_INT(slk_plan_rope(1, 32, 8, 128, 2, ALIGNED).threads, 320); /* 40 heads x 8 packs */
    CHECK_EQ_INT(slk_plan_rope(1, 32, 8, 72, 2, ALIGNED).vec, 1);      /* 36 halves: 72 bytes */
    CHECK_EQ_INT(slk_plan_rope(1, 8, 1, 7, 2, ALIGNED).vec, 1);
    CHECK_EQ_INT(slk_plan_rope(5000, 8, 1, 64, 2, ALIGNED).blocks, SLK_ROPE_MAX_BLOCKS);
}

static void test_gemv_plan_covers_every_row_with_valid_shapes(void) {
    static const int64_t Ns[] = {1, 7, 256, 4096 + 3, 14336, 128256};
    static const int64_t Ks[] = {0, 1, 8, 64, 2048, 4099, 14336};
    for (int64_t T = 1; T <= SLK_GEMV_MAX_T; T++)
        for (int i = 0; i < 6; i++)
            for (int j = 0; j < 7; j++)
                for (int eb = 2; eb <= 4; eb += 2)
                    for (int a = 0; a < 2; a++) {
                        int64_t N = Ns[i], K = Ks[j];
                        slk_gemv_plan_t p = slk_plan_gemv(T, N, K, eb, a ? MISALIGNED : ALIGNED);
                        CHECK_EQ_INT(p.vec, !a && (K * eb) % 16 == 0 ? 16 / eb : 1);
                        CHECK(is_pow2(p.tokens) && p.tokens >= T && p.tokens < 2 * T + (T == 1));
                        CHECK_EQ_INT(p.rows, p.tokens == 1 ? 2 : p.tokens < 4 ? p.tokens : 4);
                        CHECK_EQ_INT(SLK_GEMV_LOADS % p.rows, 0);
                        CHECK(is_pow2(p.ksplit) && p.ksplit <= SLK_GEMV_THREADS / 32);
                        CHECK(p.ksplit == 1 || K / p.vec >= 32 * p.ksplit); /* every lane has an access */
                        CHECK_EQ_INT(p.threads, SLK_GEMV_THREADS);
                        int64_t rows_per_block = (int64_t)p.rows * (SLK_GEMV_THREADS / 32 / p.ksplit);
                        CHECK(p.blocks * rows_per_block >= N && (p.blocks - 1) * rows_per_block < N);
                        CHECK(p.blocks <= 0x7fffffff);
                    }
}

/* The decode shapes of llama-3-8b and TinyLlama (bf16): enough warps for the
 * card, K split only where the rows alone are too few. */
static void test_gemv_plan_fills_the_card_for_model_shapes(void) {
    slk_gemv_plan_t p = slk_plan_gemv(1, 4096, 4096, 2, ALIGNED); /* llama-3-8b q: 2 rows a warp, K over 2 */
    CHECK_EQ_INT(p.vec, 8); CHECK_EQ_INT(p.rows, 2); CHECK_EQ_INT(p.ksplit, 2); CHECK_EQ_INT(p.blocks, 512);
    p = slk_plan_gemv(1, 1024, 4096, 2, ALIGNED); /* k/v: 1024 rows, K over all 8 warps */
    CHECK_EQ_INT(p.ksplit, 8); CHECK_EQ_INT(p.blocks, 512);
    p = slk_plan_gemv(1, 4096, 14336, 2, ALIGNED); /* down */
    CHECK_EQ_INT(p.ksplit, 2); CHECK_EQ_INT(p.blocks, 512);
    p = slk_plan_gemv(1, 128256, 4096, 2, ALIGNED); /* lm_head: rows enough, no split */
    CHECK_EQ_INT(p.ksplit, 1); CHECK_EQ_INT(p.blocks, 8016);
    p = slk_plan_gemv(1, 256, 2048, 2, ALIGNED); /* tinyllama k/v: 256 accesses per row, 8 warps each */
    CHECK_EQ_INT(p.ksplit, 8); CHECK_EQ_INT(p.blocks, 128);
    p = slk_plan_gemv(8, 4096, 4096, 2, ALIGNED); /* q at T = 8: 4 rows a warp */
    CHECK_EQ_INT(p.tokens, 8); CHECK_EQ_INT(p.rows, 4); CHECK_EQ_INT(p.ksplit, 4); CHECK_EQ_INT(p.blocks, 512);
    p = slk_plan_gemv(3, 7, 8, 2, ALIGNED); /* T = 3 runs as 4; K = 8: one access, no split */
    CHECK_EQ_INT(p.tokens, 4); CHECK_EQ_INT(p.ksplit, 1); CHECK_EQ_INT(p.blocks, 1);
    CHECK_EQ_INT(slk_plan_gemv(1, 4096, 4099, 2, ALIGNED).vec, 1); /* rows not 16-byte aligned */
    CHECK_EQ_INT(slk_plan_gemv(1, 4096, 4100, 4, ALIGNED).vec, 4);
}

int main(void) {
    RUN(test_vector_access_needs_every_address_aligned);
    RUN(test_flat_plan_covers_n_in_one_pass_below_the_cap);
    RUN(test_norm_plan_shapes_are_valid_for_every_size);
    RUN(test_norm_plan_spreads_decode_rows_and_packs_prefill_rows);
    RUN(test_copy_plan_uses_the_widest_access_dividing_everything);
    RUN(test_rope_plan_vectorizes_whole_halves_only);
    RUN(test_gemv_plan_covers_every_row_with_valid_shapes);
    RUN(test_gemv_plan_fills_the_card_for_model_shapes);
    return test_summary();
}
