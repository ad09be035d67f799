/* test_kv_sizing.c - the GPU KV pool size (src/engine/kv_sizing.c), on the CPU.
 *
 * Named tests pin every branch and its boundary (startup free memory, no
 * memory left, one block short of a max_model_len request, the override and
 * --kv-cache-memory-bytes precedence, the int32 cap) and vLLM's exact error
 * texts; a seeded property test then checks, over random memory figures,
 * that a success leaves room for one max_model_len request in the available
 * bytes and that every failure is the one the figures call for.
 */
#include "servelab/kv_sizing.h"
#include "test.h"

#define MIB (1ll << 20)
#define GIB (1ll << 30)

static void check_msg(const char *got, const char *want) {
    if (strcmp(got, want) != 0) {
        fprintf(stderr, "  %s: message differs\n    got:  %s\n    want: %s\n", test_cur_name, got, want);
        test_cur_failed = 1;
    }
}

/* An 80 GiB device with nothing else on it, a 2 GiB model, 1 MiB blocks of 16 tokens. */
static kv_sizing_in_t base(void) {
    return (kv_sizing_in_t){.device = 0, .total_bytes = 80 * GIB, .free_at_start_bytes = 80 * GIB,
                            .gpu_memory_utilization = 0.9, .weights_bytes = 2 * GIB,
                            .activation_peak_bytes = GIB / 2, .block_bytes = MIB, .block_size = 16,
                            .max_model_len = 2048};
}

static void test_utilization_share_minus_weights_and_activations_is_the_kv_memory(void) {
    kv_sizing_in_t in = base();
    kv_sizing_out_t out;
    sl_err_t err = {{0}};
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    int64_t requested = (int64_t)ceil(80.0 * (double)GIB * 0.9);
    CHECK_EQ_INT(out.requested_bytes, requested);
    CHECK_EQ_INT(out.available_bytes, requested - 2 * GIB - GIB / 2);
    CHECK_EQ_INT(out.n_blocks, (requested - 2 * GIB - GIB / 2) / MIB);
    CHECK(!out.overridden && !out.from_kv_cache_memory_bytes);
}

static void test_requested_memory_rounds_up(void) {
    int64_t r = 0;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_check_startup(0, 1001, 1001, 0.5, &r, &err), 0);
    CHECK_EQ_INT(r, 501); /* ceil(500.5) */
    CHECK_EQ_INT(kv_sizing_check_startup(0, 1000, 1000, 0.5, &r, &err), 0);
    CHECK_EQ_INT(r, 500);
    CHECK_EQ_INT(kv_sizing_check_startup(0, 1000, 1000, 1.0, &r, &err), 0);
    CHECK_EQ_INT(r, 1000); /* utilization 1: the whole device */
}

static void test_startup_fails_when_less_than_the_share_is_free(void) {
    int64_t r = 0;
    sl_err_t err = {{0}};
    /* 6 GiB device, 0.9 -> 5.4 GiB wanted, 5.01 GiB free (vLLM's own example figures). */
    int64_t total = 6 * GIB, free_b = 5 * GIB + GIB / 100;
    CHECK_EQ_INT(kv_sizing_check_startup(0, total, free_b, 0.9, &r, &err), -1);
    check_msg(err.msg, "Free memory on device cuda:0 (5.01/6.0 GiB) on startup is less than desired GPU "
                       "memory utilization (0.9, 5.4 GiB). Decrease GPU memory utilization or reduce GPU "
                       "memory used by other processes.");
    /* The device index is named. */
    CHECK_EQ_INT(kv_sizing_check_startup(3, total, free_b, 0.9, &r, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "Free memory on device cuda:3 (");
}

static void test_startup_boundary_is_free_equal_to_requested(void) {
    int64_t r = 0;
    sl_err_t err;
    int64_t total = 80 * GIB, requested = (int64_t)ceil((double)total * 0.9);
    CHECK_EQ_INT(kv_sizing_check_startup(0, total, requested, 0.9, &r, &err), 0);
    CHECK_EQ_INT(kv_sizing_check_startup(0, total, requested - 1, 0.9, &r, &err), -1);
}

static void test_startup_check_applies_in_every_mode(void) {
    kv_sizing_in_t in = base();
    in.free_at_start_bytes = 10 * GIB; /* another process holds 70 GiB */
    kv_sizing_out_t out;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "on startup is less than desired GPU memory utilization (0.9, 72.0 GiB)");
    in.kv_cache_memory_bytes = GIB;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    in.kv_cache_memory_bytes = 0;
    in.num_gpu_blocks_override = 100;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    /* A lower utilization fits beside the other process. */
    in.num_gpu_blocks_override = 0;
    in.gpu_memory_utilization = 0.1;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.available_bytes, (int64_t)ceil(80.0 * (double)GIB * 0.1) - 2 * GIB - GIB / 2);
}

static void test_no_available_memory_when_the_model_fills_the_share(void) {
    kv_sizing_in_t in = base();
    kv_sizing_out_t out;
    sl_err_t err = {{0}};
    const char *want = "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
                       "when initializing the engine.";
    int64_t requested = (int64_t)ceil(80.0 * (double)GIB * 0.9);
    in.weights_bytes = requested - in.activation_peak_bytes; /* exactly 0 left */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    check_msg(err.msg, want);
    CHECK_EQ_INT(out.available_bytes, 0);
    in.weights_bytes = 72 * GIB; /* more than the share: negative */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    check_msg(err.msg, want);
    CHECK(out.available_bytes < 0);
    /* One byte left is memory, but not a request's worth: the other error. */
    in.weights_bytes = requested - in.activation_peak_bytes - 1;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "To serve at least one request");
}

/* available = exactly `blocks` blocks of base()'s device (plus `extra` bytes). */
static kv_sizing_in_t with_available_blocks(int64_t blocks, int64_t extra) {
    kv_sizing_in_t in = base();
    int64_t requested = (int64_t)ceil(80.0 * (double)GIB * 0.9);
    in.weights_bytes = requested - in.activation_peak_bytes - blocks * MIB - extra;
    return in;
}

static void test_one_max_len_request_plus_the_null_block_is_the_minimum(void) {
    /* max_model_len 2048 / 16 = 128 blocks + the null block. */
    kv_sizing_in_t in = with_available_blocks(129, 0);
    kv_sizing_out_t out;
    sl_err_t err = {{0}};
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 129);
    in = with_available_blocks(129, -1); /* one byte short */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_EQ_INT(out.n_blocks, 128);
    check_msg(err.msg, "To serve at least one request with the models's max seq len (2048), (0.13 GiB KV "
                       "cache is needed, which is larger than the available KV cache memory (0.13 GiB). "
                       "Based on the available memory, the estimated maximum model length is 2032. Try "
                       "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                       "initializing the engine.");
}

static void test_partial_last_block_counts_as_a_block(void) {
    kv_sizing_in_t in = with_available_blocks(65, 0);
    in.max_model_len = 1025; /* ceil(1025 / 16) = 65 blocks, + null = 66 */
    kv_sizing_out_t out;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "max seq len (1025)");
    CHECK_STR_CONTAINS(err.msg, "estimated maximum model length is 1024.");
    in.max_model_len = 1024;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 65);
}

static void test_blocks_are_the_floor_of_available_over_block_bytes(void) {
    kv_sizing_in_t in = with_available_blocks(1000, MIB - 1);
    kv_sizing_out_t out;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 1000);
    CHECK_EQ_INT(out.available_bytes, 1000 * MIB + MIB - 1);
}

static void test_estimated_length_is_never_negative(void) {
    kv_sizing_in_t in = with_available_blocks(0, MIB / 2); /* less than one block */
    kv_sizing_out_t out;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_EQ_INT(out.n_blocks, 0);
    CHECK_STR_CONTAINS(err.msg, "estimated maximum model length is 0.");
    in = with_available_blocks(1, 0); /* the null block alone */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "estimated maximum model length is 0.");
    in = with_available_blocks(2, 0);
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    CHECK_STR_CONTAINS(err.msg, "estimated maximum model length is 16.");
}

static void test_kv_cache_memory_bytes_wins_over_utilization(void) {
    kv_sizing_in_t in = base();
    in.weights_bytes = 75 * GIB; /* would leave nothing from the utilization share */
    in.kv_cache_memory_bytes = 4 * GIB;
    kv_sizing_out_t out;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK(out.from_kv_cache_memory_bytes && !out.overridden);
    CHECK_EQ_INT(out.available_bytes, 4 * GIB);
    CHECK_EQ_INT(out.n_blocks, 4 * GIB / MIB);
}

static void test_kv_cache_memory_bytes_too_small_for_max_len_is_vllms_error(void) {
    kv_sizing_in_t in = base();
    in.kv_cache_memory_bytes = 100 * MIB; /* 100 blocks < 129 */
    kv_sizing_out_t out;
    sl_err_t err = {{0}};
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), -1);
    check_msg(err.msg, "To serve at least one request with the models's max seq len (2048), (0.13 GiB KV "
                       "cache is needed, which is larger than the available KV cache memory (0.10 GiB). "
                       "Based on the available memory, the estimated maximum model length is 1584. Try "
                       "increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                       "initializing the engine.");
}

static void test_override_wins_over_everything(void) {
    kv_sizing_in_t in = base();
    kv_sizing_out_t out;
    sl_err_t err;
    in.num_gpu_blocks_override = 7; /* smaller than one request: a lab setting, no check */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 7);
    CHECK(out.overridden);
    CHECK_EQ_INT(out.available_bytes, out.requested_bytes - 2 * GIB - GIB / 2); /* still reported */
    in.kv_cache_memory_bytes = 4 * GIB;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 7);
    CHECK(out.overridden && out.from_kv_cache_memory_bytes);
    CHECK_EQ_INT(out.available_bytes, 4 * GIB);
    in.kv_cache_memory_bytes = 0;
    in.weights_bytes = 79 * GIB; /* no memory left at all: the override still decides */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 7);
    CHECK(out.available_bytes < 0);
    in.num_gpu_blocks_override = 100000; /* larger than memory: allocation will say so */
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, 100000);
}

static void test_block_count_is_capped_as_the_engine_caps_it(void) {
    kv_sizing_in_t in = base();
    in.total_bytes = in.free_at_start_bytes = 1ll << 50;
    in.block_bytes = 16;
    kv_sizing_out_t out;
    sl_err_t err;
    CHECK_EQ_INT(kv_sizing_compute(&in, &out, &err), 0);
    CHECK_EQ_INT(out.n_blocks, INT32_MAX / 2);
}

static void test_gib_is_printed_as_vllms_format_gib(void) {
    char b[32];
    CHECK(!strcmp(kv_sizing_format_gib(0, b, sizeof b), "0.0"));
    CHECK(!strcmp(kv_sizing_format_gib(6 * GIB, b, sizeof b), "6.0"));
    CHECK(!strcmp(kv_sizing_format_gib(3 * GIB / 2, b, sizeof b), "1.5"));
    CHECK(!strcmp(kv_sizing_format_gib(111 * GIB + 93 * GIB / 100, b, sizeof b), "111.93"));
    CHECK(!strcmp(kv_sizing_format_gib(GIB / 1000, b, sizeof b), "0.0"));
    CHECK(!strcmp(kv_sizing_format_gib(GIB * 199 / 200 + 1, b, sizeof b), "1.0")); /* 0.995.. rounds up */
}

static void test_random_figures_keep_the_invariants(void) {
    for (int i = 0; i < 20000; i++) {
        kv_sizing_in_t in = {0};
        in.device = 0;
        in.total_bytes = (int64_t)(1 + test_rng() % 200) * GIB + (int64_t)(test_rng() % GIB);
        in.free_at_start_bytes = (int64_t)(test_rng() % (uint64_t)(in.total_bytes + 1));
        in.gpu_memory_utilization = (double)(1 + test_rng() % 100) / 100.0;
        in.weights_bytes = (int64_t)(test_rng() % (uint64_t)in.total_bytes);
        in.activation_peak_bytes = (int64_t)(test_rng() % (uint64_t)(in.total_bytes / 8 + 1));
        in.block_size = 1 << (test_rng() % 8);
        in.block_bytes = (int64_t)(1 + test_rng() % (4 * MIB)) * in.block_size;
        in.max_model_len = (int32_t)(1 + test_rng() % 200000);
        if (test_rng() % 4 == 0) in.num_gpu_blocks_override = (int32_t)(2 + test_rng() % 100000);
        if (test_rng() % 4 == 0) in.kv_cache_memory_bytes = (int64_t)(1 + test_rng() % (uint64_t)(64 * GIB));
        kv_sizing_out_t out;
        sl_err_t err = {{0}};
        int rc = kv_sizing_compute(&in, &out, &err);
        int64_t requested = (int64_t)ceil((double)in.total_bytes * in.gpu_memory_utilization);
        if (in.free_at_start_bytes < requested) {
            CHECK_EQ_INT(rc, -1);
            CHECK_STR_CONTAINS(err.msg, "on startup is less than desired GPU memory utilization");
            continue;
        }
        int64_t avail = in.kv_cache_memory_bytes > 0 ? in.kv_cache_memory_bytes
                                                     : requested - in.weights_bytes - in.activation_peak_bytes;
        CHECK_EQ_INT(out.available_bytes, avail);
        if (in.num_gpu_blocks_override > 0) {
            CHECK_EQ_INT(rc, 0);
            CHECK_EQ_INT(out.n_blocks, in.num_gpu_blocks_override);
            continue;
        }
        if (avail <= 0) {
            CHECK_EQ_INT(rc, -1);
            CHECK_STR_CONTAINS(err.msg, "No available memory for the cache blocks.");
            continue;
        }
        int64_t B = in.block_size, need = (in.max_model_len + B - 1) / B + 1;
        CHECK(out.n_blocks * in.block_bytes <= avail);
        if (out.n_blocks < INT32_MAX / 2) CHECK((out.n_blocks + 1) * in.block_bytes > avail);
        if (rc == 0) {
            CHECK(out.n_blocks >= need);
            CHECK((out.n_blocks - 1) * B >= in.max_model_len);
        } else {
            CHECK(out.n_blocks < need);
            CHECK_STR_CONTAINS(err.msg, "To serve at least one request with the models's max seq len");
        }
        if (test_cur_failed) {
            fprintf(stderr, "  case %d failed\n", i);
            return;
        }
    }
}

int main(void) {
    test_seed();
    RUN(test_utilization_share_minus_weights_and_activations_is_the_kv_memory);
    RUN(test_requested_memory_rounds_up);
    RUN(test_startup_fails_when_less_than_the_share_is_free);
    RUN(test_startup_boundary_is_free_equal_to_requested);
    RUN(test_startup_check_applies_in_every_mode);
    RUN(test_no_available_memory_when_the_model_fills_the_share);
    RUN(test_one_max_len_request_plus_the_null_block_is_the_minimum);
    RUN(test_partial_last_block_counts_as_a_block);
    RUN(test_blocks_are_the_floor_of_available_over_block_bytes);
    RUN(test_estimated_length_is_never_negative);
    RUN(test_kv_cache_memory_bytes_wins_over_utilization);
    RUN(test_kv_cache_memory_bytes_too_small_for_max_len_is_vllms_error);
    RUN(test_override_wins_over_everything);
    RUN(test_block_count_is_capped_as_the_engine_caps_it);
    RUN(test_gib_is_printed_as_vllms_format_gib);
    RUN(test_random_figures_keep_the_invariants);
    return test_summary();
}
