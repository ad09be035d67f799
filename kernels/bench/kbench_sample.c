/* kbench_sample.c - the device sampler (slk_sample) at a model's vocabulary.
 *
 * S = 1, 64 and 256 rows of fp32 logits (a decode step's), two mixes: every
 * row greedy (one pass to the argmax), and every row with vLLM's common
 * random setting (temperature 0.8, top_k 50, top_p 0.9, 5 logprobs), which
 * adds the radix selects, the draw and the logprobs. The check: up to four
 * rows against cpu_sample (kernels/cpu), the CPU twin, on the same logits and draws:
 * the same token, rank and top ids, logprobs within 1e-5 (the parity test's
 * rule; a draw within rounding of a boundary is not expected at these
 * seeds). Bytes counted: the logits read once, the least a sampler reads;
 * the workspace traffic is the kernel's own cost.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kbench.h"
#include "kernels.h"
#include "ops_cpu.h"

typedef struct {
    const float *logits;
    int64_t S, V;
    const sampling_row_t *rows;
    const int32_t *ids;
    const float *bias;
    void *ws;
    sample_result_t *out;
} sample_arg_t;

static void launch_sample(kb_ctx_t *c, void *arg) {
    sample_arg_t *a = arg;
    KB_LAUNCH(slk_sample(a->logits, a->S, a->V, a->rows, a->ids, a->bias, a->ws, a->out, c->stream));
}

static int same_result(const sample_result_t *g, const sample_result_t *w) {
    if (g->token != w->token || g->rank != w->rank || g->n_top != w->n_top) return 0;
    if (fabsf(g->logprob - w->logprob) > 1e-5f) return 0;
    for (int j = 0; j < w->n_top; j++)
        if (g->top_ids[j] != w->top_ids[j] || fabsf(g->top_logprobs[j] - w->top_logprobs[j]) > 1e-5f) return 0;
    return 1;
}

static void sample_case(kb_ctx_t *c, const kb_model_t *m, int64_t S, int greedy) {
    const int64_t V = m->V;
    char shape[96];
    snprintf(shape, sizeof shape, "S=%lld,V=%lld,%s", (long long)S, (long long)V, greedy ? "greedy" : "top_k+top_p");
    kb_set_case("sample", m->name, shape);
    /* Rows as the engine resolves them (sample_row.h), with no masks, bias
     * or history: nothing in ids. Greedy is temperature 0; penalties off are
     * 1 (repetition) and 0; logprobs -1 is none. */
    sampling_row_t *rows = malloc((size_t)S * sizeof *rows);
    int32_t ids[1] = {0};
    float bias[1] = {0.0f};
    if (!rows) abort();
    for (int64_t s = 0; s < S; s++) {
        rows[s] = (sampling_row_t){.temperature = greedy ? 0.0f : 0.8f, .top_p = greedy ? 1.0f : 0.9f,
                                   .top_k = greedy ? 0 : 50, .repetition_penalty = 1.0f,
                                   .n_logprobs = greedy ? -1 : 5,
                                   .u = (double)kb_rand_below(1u << 30) / (1u << 30)};
    }
    sample_arg_t a = {kb_try_alloc((size_t)(S * V) * sizeof(float)), S, V, kb_try_alloc((size_t)S * sizeof *rows),
                      kb_try_alloc(sizeof ids), kb_try_alloc(sizeof bias),
                      kb_try_alloc(slk_sample_workspace_bytes(S, V)), kb_try_alloc((size_t)S * sizeof(sample_result_t))};
    void *ptrs[6] = {(void *)a.logits, (void *)a.rows, (void *)a.ids, (void *)a.bias, a.ws, a.out};
    if (!a.logits || !a.rows || !a.ids || !a.bias || !a.ws || !a.out) {
        kb_free_all(ptrs, 6);
        free(rows);
        kb_skip(c, "sample", m->name, shape, "out of device memory");
        return;
    }
    KB_CUDA(cudaMemsetAsync(a.ws, 0, slk_sample_workspace_bytes(S, V), c->stream));
    KB_CUDA(cudaMemcpy((void *)a.rows, rows, (size_t)S * sizeof *rows, cudaMemcpyHostToDevice));
    kb_pattern_t pl;
    kb_pattern_init(&pl, -12.0f, 12.0f, DTYPE_F32); /* logits: a few dominate after softmax */
    kb_fill(c, (void *)a.logits, S * V, DTYPE_F32, &pl, 0);
    launch_sample(c, &a);

    cpu_sample_scratch_t scratch;
    cpu_sample_scratch_init(&scratch, V);
    float *row = malloc((size_t)V * sizeof(float));
    sample_result_t *got = malloc((size_t)S * sizeof *got);
    if (!row || !got) abort();
    KB_CUDA(cudaStreamSynchronize(c->stream));
    KB_CUDA(cudaMemcpy(got, a.out, (size_t)S * sizeof *got, cudaMemcpyDeviceToHost));
    int64_t sample_rows[4];
    int n_rows = kb_sample_rows(S, sample_rows), ok = 1;
    for (int i = 0; i < n_rows; i++) {
        int64_t s = sample_rows[i];
        sample_result_t want;
        kb_pattern_read(row, s * V, V, &pl, 0);
        cpu_sample(&rows[s], ids, bias, row, V, &scratch, &want);
        if (!same_result(&got[s], &want)) {
            fprintf(stderr, "  sample %s %s row %lld: token %d (rank %d, logprob %.6g) want %d (rank %d, logprob %.6g)\n",
                    m->name, shape, (long long)s, got[s].token, got[s].rank, got[s].logprob, want.token, want.rank,
                    want.logprob);
            ok = 0;
        }
    }
    free(row);
    free(got);
    cpu_sample_scratch_free(&scratch);
    kb_pattern_free(&pl);

    double us = kb_time_us(c, launch_sample, &a);
    kb_report(c, "sample", m->name, shape, us, (double)(S * V) * 4.0, 0.0, ok ? KB_CHECK_PASS : KB_CHECK_FAIL);
    kb_free_all(ptrs, 6);
    free(rows);
}

void kb_bench_sample(kb_ctx_t *c, const kb_model_t *m) {
    if (!kb_opts_wants(&c->opts, "sample")) return;
    const int64_t S[] = {1, 64, 256};
    for (int i = 0; i < 3; i++) {
        if (c->opts.quick && S[i] == 64) continue;
        sample_case(c, m, S[i], 1);
        sample_case(c, m, S[i], 0);
    }
}
