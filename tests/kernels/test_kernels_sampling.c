/* test_kernels_sampling.c - the device sampler (kernels/cuda/sampling.cu)
 * against its CPU twin, cpu_sample (kernels/cpu/sampling_cpu.c).
 *
 * Every batch: fresh random logits (seed printed) of one of three shapes
 * (spread, peaked, and coarse steps that make ties everywhere), rows
 * resolved on the host by sampling_row_resolve exactly as the backend does
 * (u drawn from each row's own generator), the same rows, ids and bias
 * given to both. The results must agree: token, rank, n_top and top_ids
 * exactly; logprob and top_logprobs within 1e-5 (both sum exp in double, in
 * another order); unused fields zero. The one difference allowed is the
 * draw landing on the neighbouring kept token, and only when the CPU's
 * u * total lies within 1e-9 (relative) of the cumulative weight between
 * the two: the test recomputes that from the CPU's final weights (what
 * cpu_sample leaves in scratch.work after a draw). After each call the
 * workspace's history counts must be zero again. Shapes include V not a
 * multiple of the block (1024), V below it, and V = 128256.
 * SERVELAB_TEST_MAX_V=N leaves out the vocabularies over N (tools/gpu-check's
 * racecheck run: the race checker is too slow for V = 128256).
 */
#include <string.h>

#include "kernel_test.h"
#include "ops_cpu.h"
#include "servelab/rng.h"
#include "servelab/sampler.h"

enum { MAX_S = 8, MAX_HIST = 600 };
#define MAX_V 128256

static cudaStream_t stream;
static cpu_sample_scratch_t scratch;
static void *d_workspace;
static int64_t workspace_V; /* the V its zero history counts are laid out for */
static int n_neighbours; /* draws allowed to differ by rounding, reported at the end */

/* The first three are the ordinary shapes; the rest are edge cases. */
typedef enum {
    LOGITS_SPREAD, LOGITS_PEAKED, LOGITS_STEPS, LOGITS_MASKED, LOGITS_STOPS_ONLY, LOGITS_NAN, LOGITS_MOSTLY_NAN
} logits_kind_t;

/* One row's request: parameters and history (prompt, then output). */
typedef struct {
    sampling_params_t p;
    int32_t hist[MAX_HIST];
    int32_t n_prompt, n_output;
} req_t;

/* Sets up request s of a batch of V logits (starts from vLLM's defaults). */
typedef void (*setup_fn)(int s, int64_t V, req_t *r);

static const int32_t EOS[2] = {2, 5};
static int32_t stop_ids[3] = {7, 11, 7};
static int32_t bias_ids[4] = {3, 9, 3, 12};
static float bias_vals[4] = {2.0f, -250.0f, 0.5f, 4.0f}; /* -250 clamped; 3 biased twice */

static double uniform01(void) { return (double)(test_rng() >> 11) / 9007199254740992.0; }

/* Rows of V: spread, peaked, 12 steps (ties everywhere, also at every
 * boundary), all -inf, -inf but for the EOS and stop ids, spread with a NaN
 * at id 7 (and at id 0 too in row 1), and NaN but for every 97th id from 0 (fewer
 * numbers than a top_k of 40 at the smaller vocabularies). */
static void fill_logits(float *x, int64_t S, int64_t V, logits_kind_t kind) {
    for (int64_t i = 0; i < S * V; i++) {
        double u = uniform01();
        int64_t id = i % V;
        bool stop = id == 2 || id == 5 || id == 7 || id == 11;
        x[i] = kind == LOGITS_PEAKED ? (float)(30.0 * u * u * u - 10.0)
             : kind == LOGITS_STEPS ? (float)floor(u * 12.0) * 0.5f
             : kind == LOGITS_MASKED || (kind == LOGITS_STOPS_ONLY && !stop) ? -INFINITY
             : kind == LOGITS_NAN && (id == 7 || (id == 0 && i / V == 1)) ? NAN
             : kind == LOGITS_MOSTLY_NAN && id % 97 != 0 ? NAN
             : (float)(8.0 * u - 4.0);
    }
}

/* A history of n tokens from a small range (so tokens repeat), with an id
 * outside the vocabulary now and then (to be ignored by both). */
static void fill_history(int32_t *h, int n, int64_t V) {
    for (int i = 0; i < n; i++) h[i] = i % 37 == 36 ? (int32_t)V + 3 : (int32_t)(test_rng() % 40);
}

/* ---- the comparison --------------------------------------------------------------- */

/* Whether the device's token g may differ from the CPU's c by rounding:
 * g is the kept token next to c (in id order) and the CPU's target lies
 * within 1e-9 of the cumulative weight between them. w: the CPU's weights. */
static int neighbour_by_rounding(const float *w, int64_t V, double u, int32_t c, int32_t g) {
    double total = 0, before_c = 0, after_c = 0;
    int64_t prev = -1, next = -1;
    for (int64_t i = 0; i < V; i++) {
        if (w[i] == 0.0f) continue;
        if (i < c) before_c = total + w[i], prev = i;
        if (i == c) before_c = total, after_c = total + w[i];
        if (i > c && next < 0) next = i;
        total += w[i];
    }
    double target = u * total, tol = 1e-9 * total;
    if (g == prev && fabs(target - before_c) <= tol) return 1;
    if (g == next && fabs(target - after_c) <= tol) return 1;
    return 0;
}

static int close_lp(float got, float want) {
    if (isnan(want)) return isnan(got);
    if (isinf(want)) return got == want;
    return fabs((double)got - (double)want) <= 1e-5 * fmax(1.0, fabs((double)want));
}

static void compare_row(const char *what, int s, const sampling_row_t *row, const sample_result_t *got,
                        const sample_result_t *want, int64_t V) {
    int ok = 1;
    if (got->token != want->token) {
        if (row->temperature > 0.0f && got->token >= 0 && got->token < V &&
            neighbour_by_rounding(scratch.work, V, row->u, want->token, got->token))
            n_neighbours++;
        else
            ok = 0;
    }
    ok &= got->rank == want->rank && got->n_top == want->n_top && close_lp(got->logprob, want->logprob);
    for (int j = 0; j < SAMPLING_MAX_LOGPROBS; j++)
        ok &= got->top_ids[j] == want->top_ids[j] && close_lp(got->top_logprobs[j], want->top_logprobs[j]);
    if (!ok) {
        fprintf(stderr, "  %s row %d (V %lld, T %g, top_k %d, top_p %g, min_p %g, u %.17g): token %d want %d, "
                "logprob %.9g want %.9g, rank %d want %d, n_top %d want %d\n", what, s, (long long)V,
                row->temperature, row->top_k, row->top_p, row->min_p, row->u, got->token, want->token,
                got->logprob, want->logprob, got->rank, want->rank, got->n_top, want->n_top);
        for (int j = 0; j < SAMPLING_MAX_LOGPROBS && j < want->n_top; j++)
            if (got->top_ids[j] != want->top_ids[j] || !close_lp(got->top_logprobs[j], want->top_logprobs[j]))
                fprintf(stderr, "    top %d: id %d (%.9g) want %d (%.9g)\n", j, got->top_ids[j],
                        got->top_logprobs[j], want->top_ids[j], want->top_logprobs[j]);
        test_cur_failed = 1;
    }
}

/* S requests from setup over fresh logits of kind, on the device and the CPU. */
static void check_batch(const char *what, int S, int64_t V, logits_kind_t kind, setup_fn setup) {
    static req_t reqs[MAX_S];
    static sampling_row_t rows[MAX_S];
    static int32_t ids[MAX_S * (MAX_HIST + 16)];
    static float bias[MAX_S * (MAX_HIST + 16)];
    static sample_result_t got[MAX_S];
    SL_ASSERT(S <= MAX_S && V <= MAX_V);
    float *logits = malloc((size_t)(S * V) * sizeof(float));
    fill_logits(logits, S, V, kind);
    int64_t off = 0;
    for (int s = 0; s < S; s++) {
        req_t *r = &reqs[s];
        sampling_params_default(&r->p);
        r->n_prompt = r->n_output = 0;
        setup(s, V, r);
        sl_rng_t rng;
        rng_seed(&rng, test_rng());
        double u = sampling_draws(&r->p) ? rng_uniform(&rng) : 0.0;
        off = sampling_row_resolve(&rows[s], &r->p, r->hist, r->n_prompt, r->hist + r->n_prompt, r->n_output, EOS,
                                   2, u, ids, bias, off);
    }
    float *d_logits = kt_upload_raw(logits, (size_t)(S * V) * sizeof(float));
    void *d_rows = kt_upload_raw(rows, (size_t)S * sizeof *rows);
    void *d_ids = kt_upload_raw(ids, (size_t)off * sizeof *ids), *d_bias = kt_upload_raw(bias, (size_t)off * sizeof *bias);
    void *d_out = NULL;
    KT_CUDA(cudaMalloc(&d_out, (size_t)S * sizeof(sample_result_t)));
    KT_CUDA(cudaMemset(d_out, 0xff, (size_t)S * sizeof(sample_result_t))); /* a field left unwritten fails */
    if (V != workspace_V) { /* as a backend allocates for its model's V */
        KT_CUDA(cudaMemset(d_workspace, 0, slk_sample_workspace_bytes(MAX_S, MAX_V)));
        workspace_V = V;
    }
    int rc = slk_sample(d_logits, S, V, d_rows, d_ids, d_bias, d_workspace, d_out, stream);
    if (rc != 0) {
        fprintf(stderr, "  %s: slk_sample returned %d (%s)\n", what, rc, cudaGetErrorString((cudaError_t)rc));
        test_cur_failed = 1;
    }
    KT_CUDA(cudaStreamSynchronize(stream));
    KT_CUDA(cudaMemcpy(got, d_out, (size_t)S * sizeof(sample_result_t), cudaMemcpyDeviceToHost));
    for (int s = 0; s < S; s++) {
        sample_result_t want;
        cpu_sample(&rows[s], ids, bias, logits + (size_t)s * (size_t)V, V, &scratch, &want);
        compare_row(what, s, &rows[s], &got[s], &want, V);
    }
    /* The history counts (the first V words of each row's 8 V bytes) are zero again. */
    uint32_t *ws = malloc((size_t)(S * V) * 2 * sizeof(uint32_t));
    KT_CUDA(cudaMemcpy(ws, d_workspace, (size_t)(S * V) * 2 * sizeof(uint32_t), cudaMemcpyDeviceToHost));
    int64_t dirty = 0;
    for (int s = 0; s < S; s++)
        for (int64_t i = 0; i < V; i++) dirty += ws[(size_t)s * 2 * (size_t)V + (size_t)i] != 0;
    if (dirty) {
        fprintf(stderr, "  %s: %lld history counts left non-zero\n", what, (long long)dirty);
        test_cur_failed = 1;
    }
    free(ws);
    free(logits);
    cudaFree(d_logits), cudaFree(d_rows), cudaFree(d_ids), cudaFree(d_bias), cudaFree(d_out);
}

static const int64_t VS[] = {1, 100, 1000, 1024, 4099, 32000, 128256};
#define N_VS 7
static int64_t max_v = MAX_V; /* SERVELAB_TEST_MAX_V: the largest V of VS that runs */

/* check_batch over every V of VS (up to max_v) and every kind of logits. */
static void check_all(const char *what, int S, setup_fn setup) {
    for (int v = 0; v < N_VS && VS[v] <= max_v; v++)
        for (int k = 0; k < 3; k++) check_batch(what, S, VS[v], (logits_kind_t)k, setup);
}

/* ---- cases ----------------------------------------------------------------------- */

static void setup_greedy(int s, int64_t V, req_t *r) {
    (void)s, (void)V;
    r->p.temperature = 0.0f;
}
static void setup_temperature(int s, int64_t V, req_t *r) {
    (void)V;
    static const float T[4] = {1.0f, 0.7f, 1.6f, 0.003f}; /* 0.003: raised to 0.01 */
    r->p.temperature = T[s % 4];
}
static void setup_top_k(int s, int64_t V, req_t *r) {
    const int64_t k[5] = {1, 5, 50, V - 1, V + 10}; /* V - 1 and beyond: ties at the k-th value, off */
    r->p.top_k = (int32_t)(k[s % 5] > 0 ? k[s % 5] : 1);
    r->p.temperature = s % 2 ? 0.8f : 1.0f;
}
static void setup_top_p(int s, int64_t V, req_t *r) {
    (void)V;
    static const float P[4] = {1e-6f, 0.5f, 0.9f, 1.0f};
    r->p.top_p = P[s % 4];
}
static void setup_min_p(int s, int64_t V, req_t *r) {
    (void)V;
    r->p.min_p = s % 2 ? 0.1f : 0.5f;
    r->p.temperature = s % 3 ? 1.0f : 0.6f;
}
static void setup_penalties(int s, int64_t V, req_t *r) {
    r->n_prompt = 200 + s, r->n_output = 100 + 3 * s;
    fill_history(r->hist, r->n_prompt + r->n_output, V);
    r->p.temperature = s % 4 == 3 ? 0.0f : 1.0f;
    r->p.repetition_penalty = s % 2 ? 1.3f : 0.8f;
    if (s % 3 != 1) r->p.frequency_penalty = 0.5f;
    if (s % 3 != 2) r->p.presence_penalty = -0.7f;
}
static void setup_min_tokens(int s, int64_t V, req_t *r) {
    (void)V;
    r->n_output = 1;
    r->hist[0] = 4;
    r->p.min_tokens = 2; /* 1 output < 2: EOS (2, 5) and stop ids (7, 11) masked */
    r->p.n_stop_token_ids = 3, r->p.stop_token_ids = stop_ids;
    r->p.temperature = s % 2 ? 0.0f : 1.0f;
}
static void setup_logit_bias(int s, int64_t V, req_t *r) {
    (void)V;
    r->p.n_logit_bias = 4, r->p.logit_bias_ids = bias_ids, r->p.logit_bias_values = bias_vals;
    r->p.temperature = s % 2 ? 0.0f : 0.5f;
}
static void setup_logprobs(int s, int64_t V, req_t *r) {
    (void)V;
    static const int32_t L[3] = {0, 5, 20};
    r->p.logprobs = L[s % 3];
    r->p.temperature = s % 2 ? 0.0f : 1.0f;
}
static void setup_combined(int s, int64_t V, req_t *r) {
    r->n_prompt = 150, r->n_output = 60 + s;
    fill_history(r->hist, r->n_prompt + r->n_output, V);
    r->p.temperature = s == 0 ? 0.0f : 0.5f + 0.25f * (float)s;
    r->p.top_k = s % 3 ? 40 : 0;
    r->p.top_p = s % 2 ? 0.85f : 1.0f;
    r->p.min_p = s % 4 == 1 ? 0.05f : 0.0f;
    r->p.repetition_penalty = 1.2f, r->p.frequency_penalty = 0.3f, r->p.presence_penalty = 0.2f;
    r->p.min_tokens = s % 2 ? 100 : 0, r->p.n_stop_token_ids = 3, r->p.stop_token_ids = stop_ids;
    r->p.n_logit_bias = 4, r->p.logit_bias_ids = bias_ids, r->p.logit_bias_values = bias_vals;
    r->p.logprobs = s % 3 == 0 ? 20 : s % 3 == 1 ? 3 : -1;
}

static void test_greedy_takes_first_argmax_as_cpu(void) { check_all("greedy", 3, setup_greedy); }
static void test_temperature_draws_as_cpu(void) { check_all("temperature", 4, setup_temperature); }
static void test_top_k_keeps_ties_at_kth_as_cpu(void) { check_all("top_k", 5, setup_top_k); }
static void test_top_p_tiny_half_and_off_as_cpu(void) { check_all("top_p", 4, setup_top_p); }
static void test_min_p_as_cpu(void) { check_all("min_p", 3, setup_min_p); }
static void test_penalties_with_repeated_history_as_cpu(void) { check_all("penalties", 4, setup_penalties); }
static void test_min_tokens_masks_as_cpu(void) { check_all("min_tokens", 2, setup_min_tokens); }
static void test_logit_bias_with_repeated_ids_as_cpu(void) { check_all("logit_bias", 2, setup_logit_bias); }
static void test_logprobs_0_5_20_as_cpu(void) { check_all("logprobs", 6, setup_logprobs); }
static void test_every_feature_at_once_as_cpu(void) { check_all("combined", 8, setup_combined); }

/* Every logit -inf, or all masked: the first index, greedy or not (and the
 * CPU drew its u all the same). */
static void setup_masked(int s, int64_t V, req_t *r) {
    (void)V;
    r->p.temperature = s % 2 ? 0.0f : 1.0f;
    r->p.top_p = 0.5f, r->p.top_k = 3, r->p.logprobs = 2;
}
static void test_all_masked_rows_give_first_index_as_cpu(void) {
    for (int v = 0; v < N_VS && VS[v] <= max_v; v++) {
        check_batch("masked", 2, VS[v], LOGITS_MASKED, setup_masked);
        if (VS[v] > 11) check_batch("stops only", 2, VS[v], LOGITS_STOPS_ONLY, setup_min_tokens);
    }
}

/* A NaN logit is never the argmax (but at id 0, which the CPU's argmax
 * returns: and then, all masked, token 0), nor drawn, nor in the top
 * logprobs (which are NaN, as the lse is); in the top_k selection it ranks
 * as -inf. With fewer numbers than top_k (the mostly-NaN rows), NaN once
 * made the device's k-th value NaN: no weight kept, token -1, and the
 * logprobs read logits[-1]. */
static void setup_nan(int s, int64_t V, req_t *r) {
    (void)V;
    r->p.temperature = s % 2 ? 0.0f : 1.0f;
    r->p.top_p = s % 3 ? 0.7f : 1.0f;
    r->p.top_k = s % 4 < 2 ? 40 : 0;
    r->p.logprobs = 5;
}
static void test_nan_logit_is_never_chosen_as_cpu(void) {
    for (int v = 2; v < N_VS && VS[v] <= max_v; v++) {
        check_batch("nan", 4, VS[v], LOGITS_NAN, setup_nan);
        check_batch("mostly nan", 4, VS[v], LOGITS_MOSTLY_NAN, setup_nan);
    }
}

int main(void) {
    kt_require_gpu();
    test_seed();
    const char *env = getenv("SERVELAB_TEST_MAX_V");
    if (env && *env) {
        max_v = strtoll(env, NULL, 10);
        if (max_v < 1 || max_v > MAX_V) max_v = MAX_V;
        printf("vocabularies up to %lld (SERVELAB_TEST_MAX_V)\n", (long long)max_v);
    }
    KT_CUDA(cudaStreamCreate(&stream));
    cpu_sample_scratch_init(&scratch, MAX_V);
    size_t ws = slk_sample_workspace_bytes(MAX_S, MAX_V);
    KT_CUDA(cudaMalloc(&d_workspace, ws));
    RUN(test_greedy_takes_first_argmax_as_cpu);
    RUN(test_temperature_draws_as_cpu);
    RUN(test_top_k_keeps_ties_at_kth_as_cpu);
    RUN(test_top_p_tiny_half_and_off_as_cpu);
    RUN(test_min_p_as_cpu);
    RUN(test_penalties_with_repeated_history_as_cpu);
    RUN(test_min_tokens_masks_as_cpu);
    RUN(test_logit_bias_with_repeated_ids_as_cpu);
    RUN(test_logprobs_0_5_20_as_cpu);
    RUN(test_every_feature_at_once_as_cpu);
    RUN(test_all_masked_rows_give_first_index_as_cpu);
    RUN(test_nan_logit_is_never_chosen_as_cpu);
    printf("%d draws took the neighbouring token by rounding\n", n_neighbours);
    cudaFree(d_workspace);
    cpu_sample_scratch_free(&scratch);
    KT_CUDA(cudaStreamDestroy(stream));
    return test_summary();
}
