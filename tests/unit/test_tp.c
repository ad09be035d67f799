/* test_tp.c - tensor parallelism: the shard plan, the local communicator, and the sharded forward.
 *
 * The plan must split every head, feature and vocabulary row exactly once
 * (KV heads replicated where ranks outnumber them) and refuse sizes that do
 * not divide the model with vLLM's text. The local all-reduce must leave
 * the same bits on every rank: the rank-order sum. The sharded forward must
 * compute the function the one-rank forward does: teacher-forced logits of
 * the committed tiny checkpoint (GQA: 2 KV heads, so 4 ranks replicate
 * them) and of an MQA model (dummy weights) at 2 and 4 ranks against 1, in
 * float32, equal to rounding and with the same argmax at every position.
 * The same again as a device backend runs it: each rank on a backend of its
 * own that is not host memory (the CPU ops behind a table that says so, with
 * logits left in "device" memory), so the weights, the KV cache and each
 * rank's copy of the batch go through alloc and upload, the all-reduce
 * through the shared-device communicator's staging, and rank 0's assembled
 * logits to its sampler's memory: the paths CUDA ranks take.
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "servelab/comm.h"
#include "servelab/model.h"
#include "servelab/model_runner.h"
#include "servelab/tp.h"
#include "test.h"

/* ---- the shard plan ------------------------------------------------------------- */

static model_config_t shape(int64_t H, int64_t Hkv, int64_t I, int64_t V) {
    model_config_t c = {0};
    c.n_heads = H, c.n_kv_heads = Hkv, c.intermediate_size = I, c.vocab_size = V;
    c.head_dim = 8, c.hidden_size = H * 8;
    return c;
}

/* Every query head, MLP feature and vocabulary row on exactly one rank; each
 * rank's KV heads the ones its query heads read (GQA: head h reads h / (H / Hkv)). */
static void check_plan_covers(int64_t H, int64_t Hkv, int64_t I, int64_t V, int size) {
    model_config_t c = shape(H, Hkv, I, V);
    int64_t q_next = 0, i_next = 0, v_next = 0;
    for (int r = 0; r < size; r++) {
        tp_shard_t s;
        sl_err_t err;
        CHECK(tp_shard_plan(&c, r, size, &s, &err) == 0);
        CHECK(s.q_head0 == q_next && s.inter0 == i_next && s.vocab0 == v_next);
        q_next += s.n_heads, i_next += s.inter, v_next += s.n_vocab;
        CHECK(s.n_vocab <= s.vocab_per_rank);
        for (int64_t h = s.q_head0; h < s.q_head0 + s.n_heads; h++) {
            int64_t kv = h / (H / Hkv);
            CHECK(kv >= s.kv_head0 && kv < s.kv_head0 + s.n_kv_heads);
            /* ... and at the same place within the rank: local head h' reads h' / (H_r / Hkv_r). */
            CHECK(kv - s.kv_head0 == (h - s.q_head0) / (s.n_heads / s.n_kv_heads));
        }
        CHECK(s.kv_head_replicas == (size > Hkv ? size / Hkv : 1));
    }
    CHECK(q_next == H && i_next == I && v_next == V);
}

static void test_plan_splits_everything_once_and_replicates_kv_heads(void) {
    check_plan_covers(4, 2, 352, 1024, 1);
    check_plan_covers(4, 2, 352, 1024, 2);
    check_plan_covers(4, 2, 352, 1024, 4); /* 2 KV heads, 4 ranks: each head on 2 */
    check_plan_covers(12, 12, 2048, 8192, 4);
    check_plan_covers(8, 1, 64, 1001, 8); /* MQA; a vocabulary the ranks do not divide */
    check_plan_covers(32, 8, 14336, 128256, 8);
}

static void test_plan_refuses_sizes_that_do_not_divide_the_model(void) {
    tp_shard_t s;
    sl_err_t err;
    model_config_t smol = shape(9, 3, 1536, 49152); /* SmolLM2-135M */
    CHECK(tp_shard_plan(&smol, 0, 2, &s, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "Total number of attention heads (9) must be divisible by tensor parallel size (2).");
    model_config_t kv3 = shape(12, 3, 64, 100);
    CHECK(tp_shard_plan(&kv3, 0, 2, &s, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "key/value heads (3)");
    model_config_t odd_mlp = shape(4, 4, 66, 100);
    CHECK(tp_shard_plan(&odd_mlp, 0, 4, &s, &err) == -1);
    CHECK_STR_CONTAINS(err.msg, "intermediate_size (66)");
    CHECK(tp_shard_plan(&smol, 0, 3, &s, &err) == 0);
}

/* ---- the local communicator -------------------------------------------------- */

#define N_ELEMS 1000
#define N_ROUNDS 200

typedef struct {
    sl_comm_t *comm;
    int rank;
    float buf[N_ELEMS];
    float gathered[4 * 16];
    int bad;
} rank_arg_t;

static float value(int rank, int round, int i) {
    /* Magnitudes far apart, so that the order of the additions shows in the bits. */
    return (float)((rank * 7919 + round * 31 + i) % 1000) * (rank % 2 ? 1e-4f : 1e3f) - 1.0f;
}

static void *rank_main(void *p) {
    rank_arg_t *a = p;
    int size = a->comm->size;
    for (int round = 0; round < N_ROUNDS; round++) {
        for (int i = 0; i < N_ELEMS; i++) a->buf[i] = value(a->rank, round, i);
        int64_t n = 1 + (round * 37) % N_ELEMS; /* sizes that do not split evenly */
        a->comm->all_reduce_sum(a->comm, a->rank, a->buf, n, DTYPE_F32);
        for (int64_t i = 0; i < n; i++) {
            float want = value(0, round, (int)i);
            for (int r = 1; r < size; r++) want += value(r, round, (int)i);
            if (memcmp(&want, &a->buf[i], sizeof want)) a->bad++;
        }
        for (int64_t i = n; i < N_ELEMS; i++) a->bad += a->buf[i] != value(a->rank, round, (int)i);
        float send[16];
        for (int i = 0; i < 16; i++) send[i] = (float)(a->rank * 100 + round + i);
        a->comm->gather(a->comm, a->rank, send, a->rank == 0 ? a->gathered : NULL, 16, DTYPE_F32);
        if (a->rank == 0)
            for (int r = 0; r < size; r++)
                for (int i = 0; i < 16; i++) a->bad += a->gathered[r * 16 + i] != (float)(r * 100 + round + i);
        a->comm->barrier(a->comm, a->rank);
    }
    return NULL;
}

static void test_local_all_reduce_is_the_rank_order_sum_on_every_rank(void) {
    for (int size = 2; size <= 4; size++) {
        sl_comm_t *c = comm_local_new(size, N_ELEMS);
        rank_arg_t *args = calloc((size_t)size, sizeof *args);
        pthread_t th[4];
        for (int r = 0; r < size; r++) {
            args[r] = (rank_arg_t){.comm = c, .rank = r};
            SL_ASSERT(pthread_create(&th[r], NULL, rank_main, &args[r]) == 0);
        }
        int bad = 0;
        for (int r = 0; r < size; r++) {
            pthread_join(th[r], NULL);
            bad += args[r].bad;
        }
        printf("  %d ranks, %d rounds: %d mismatches\n", size, N_ROUNDS, bad);
        CHECK_EQ_INT(bad, 0);
        CHECK(comm_take_reduce_s(c) > 0.0 && comm_take_reduce_s(c) == 0.0);
        c->free(c);
        free(args);
    }
}

/* ---- the sharded forward ----------------------------------------------------------- */

#define B 16
#define T_SEQ 40
#define MAX_TP 4

/* A device backend's paths on the CPU: the CPU ops, not host memory (so
 * nothing is used in place and every copy is an upload or a download), no
 * packed weights, and logits computed into backend memory. */
static sl_ops_t device_like[MAX_TP];
static const sl_ops_t *device_like_ptrs[MAX_TP];

static void logits_into_backend(void *ctx, float *out, const void *in, const sl_weight_t *w, int64_t S) {
    cpu_backend_init(2)->logits(ctx, out, in, w, S);
}

static void make_device_like(void) {
    for (int r = 0; r < MAX_TP; r++) {
        device_like[r] = *cpu_backend_init(2);
        device_like[r].host_memory = 0;
        device_like[r].packed_bytes = NULL;
        device_like[r].pack_linear = NULL;
        device_like[r].logits_device = logits_into_backend;
        device_like_ptrs[r] = &device_like[r];
    }
}

/* Teacher-forced logits (T_SEQ, V) of one sequence: one prefill step with a
 * logits row at every position; `device` runs it as device_like ranks. */
static float *all_position_logits(const char *dir, const model_load_opts_t *lo0, int tp, const int32_t *ids,
                                  bool device) {
    model_load_opts_t lo = *lo0;
    lo.tensor_parallel_size = tp;
    model_config_t cfg;
    sl_err_t err;
    SL_ASSERT(config_load(dir, &cfg, &err) == 0);
    if (device && tp > 1) {
        lo.rank_ops = device_like_ptrs;
        /* The engine passes an array on its stack: the communicator keeps a copy.
         * Poisoned and freed here, a kept pointer fails (under ASan, by name). */
        const sl_ops_t **ops_arg = sl_malloc((size_t)tp * sizeof *ops_arg);
        memcpy(ops_arg, device_like_ptrs, (size_t)tp * sizeof *ops_arg);
        lo.comm = comm_staged_new(tp, (int64_t)T_SEQ * cfg.hidden_size, ops_arg);
        memset(ops_arg, 0, (size_t)tp * sizeof *ops_arg);
        free(ops_arg);
    }
    llama_model_t m;
    if (llama_init(&m, dir, &lo, device ? device_like_ptrs[0] : cpu_backend_init(2), T_SEQ, T_SEQ, &err)) {
        fprintf(stderr, "llama_init: %s\n", err.msg);
        SL_ASSERT(0);
    }
    int32_t n_blocks = (T_SEQ + B - 1) / B;
    kv_cache_t kv;
    SL_ASSERT(kv_cache_init(&kv, &m, 1 + n_blocks, B, &err) == 0);
    CHECK(kv.n_ranks == tp);
    model_runner_t r;
    SL_ASSERT(runner_init(&r, &m, n_blocks, &err) == 0);
    sl_batch_t *b = &r.batch;
    b->n_tokens = T_SEQ, b->n_seqs = 1, b->n_logits = T_SEQ;
    for (int32_t t = 0; t < T_SEQ; t++) {
        b->token_ids[t] = ids[t];
        b->positions[t] = t;
        b->slot_mapping[t] = (int64_t)(1 + t / B) * B + t % B;
        b->logits_index[t] = t;
    }
    b->query_start[0] = 0, b->query_start[1] = T_SEQ, b->seq_lens[0] = T_SEQ;
    for (int32_t j = 0; j < n_blocks; j++) b->block_tables[j] = 1 + j;
    int64_t V = m.cfg.vocab_size;
    float *logits = sl_malloc((size_t)T_SEQ * (size_t)V * sizeof(float));
    CHECK((r.rank_batch != NULL) == (device && tp > 1));
    CHECK((r.d_logits != NULL) == device);
    runner_forward(&r, b, &kv, logits);
    runner_free(&r);
    kv_cache_free(&kv, &m);
    llama_free(&m);
    return logits;
}

static int argmax(const float *x, int64_t n) {
    int best = 0;
    for (int64_t i = 1; i < n; i++)
        if (x[i] > x[best]) best = (int)i;
    return best;
}

static void check_tp_matches_one_rank(const char *dir, const model_load_opts_t *lo, int64_t V) {
    int32_t ids[T_SEQ];
    for (int t = 0; t < T_SEQ; t++) ids[t] = 3 + (int32_t)(test_rng() % (uint64_t)(V - 3));
    float *one = all_position_logits(dir, lo, 1, ids, false);
    for (int run = 0; run < 4; run++) {
        int tp = run % 2 ? 4 : 2;
        bool device = run >= 2;
        float *many = all_position_logits(dir, lo, tp, ids, device);
        float max_diff = 0.0f, max_abs = 0.0f;
        int same_argmax = 0;
        for (int t = 0; t < T_SEQ; t++) {
            const float *a = one + (size_t)t * (size_t)V, *b = many + (size_t)t * (size_t)V;
            for (int64_t v = 0; v < V; v++) {
                max_diff = fmaxf(max_diff, fabsf(a[v] - b[v]));
                max_abs = fmaxf(max_abs, fabsf(a[v]));
            }
            same_argmax += argmax(a, V) == argmax(b, V);
        }
        printf("  %s, %d %s ranks: max |logit diff| %.2e (logits up to %.1f), argmax equal at %d of %d positions\n",
               dir, tp, device ? "device-like" : "host", max_diff, max_abs, same_argmax, T_SEQ);
        /* Only the order of the row-parallel sums differs: fp32 rounding. */
        CHECK(max_diff < 1e-4f * fmaxf(1.0f, max_abs));
        CHECK_EQ_INT(same_argmax, T_SEQ);
        free(many);
    }
    free(one);
}

static void test_tiny_gqa_at_2_and_4_ranks_matches_one_rank(void) {
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_AUTO, .dtype = DTYPE_F32};
    check_tp_matches_one_rank("models/tiny", &lo, 1024);
}

/* An MQA model (one KV head, every rank a replica) of dummy weights, whose
 * vocabulary (1001) no rank count divides. */
static void test_mqa_dummy_model_at_2_and_4_ranks_matches_one_rank(void) {
    char dir[] = "/tmp/servelab-tp-mqa-XXXXXX";
    SL_ASSERT(mkdtemp(dir));
    char path[256];
    snprintf(path, sizeof path, "%s/config.json", dir);
    FILE *f = fopen(path, "w");
    SL_ASSERT(f);
    fputs("{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 64, "
          "\"intermediate_size\": 96, \"num_attention_heads\": 4, \"num_key_value_heads\": 1, "
          "\"num_hidden_layers\": 3, \"vocab_size\": 1001, \"max_position_embeddings\": 256, "
          "\"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0, \"torch_dtype\": \"float32\", "
          "\"tie_word_embeddings\": true, \"bos_token_id\": 1, \"eos_token_id\": 2}", f);
    fclose(f);
    model_load_opts_t lo = {.load_format = LOAD_FORMAT_DUMMY, .dtype = DTYPE_F32, .seed = 3};
    check_tp_matches_one_rank(dir, &lo, 1001);
    remove(path);
    rmdir(dir);
}

int main(void) {
    make_device_like();
    RUN(test_plan_splits_everything_once_and_replicates_kv_heads);
    RUN(test_plan_refuses_sizes_that_do_not_divide_the_model);
    RUN(test_local_all_reduce_is_the_rank_order_sum_on_every_rank);
    RUN(test_tiny_gqa_at_2_and_4_ranks_matches_one_rank);
    RUN(test_mqa_dummy_model_at_2_and_4_ranks_matches_one_rank);
    return test_summary();
}
