/* model_runner.c - the model runner (see model_runner.h): batch, KV memory, forward, graphs, sampling.
 *
 * Read top to bottom: the flat batch of a scheduler step, the buffers, one
 * forward (graph or eager), the engine's step with its sampling (rows
 * resolved here, sampled by the backend where the logits are), startup's
 * dummy steps, and
 * last the CUDA graphs of decode steps. Sampling depends only on a
 * sequence's own logits, history and generator: whatever else is in the
 * batch, and on either side of PCIe, a request draws the same tokens.
 */
#include "servelab/model_runner.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the flat batch ------------------------------------------------------------ */

void batch_init(sl_batch_t *b, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks) {
    memset(b, 0, sizeof *b);
    b->max_blocks = max_blocks;
    b->token_ids = sl_calloc((size_t)max_tokens, sizeof(int32_t));
    b->positions = sl_calloc((size_t)max_tokens, sizeof(int32_t));
    b->slot_mapping = sl_calloc((size_t)max_tokens, sizeof(int64_t));
    b->query_start = sl_calloc((size_t)max_seqs + 1, sizeof(int32_t));
    b->seq_lens = sl_calloc((size_t)max_seqs, sizeof(int32_t));
    b->logits_index = sl_calloc((size_t)max_seqs, sizeof(int32_t));
    b->block_tables = sl_calloc((size_t)max_seqs * (size_t)max_blocks, sizeof(int32_t));
}

void batch_free(sl_batch_t *b) {
    free(b->token_ids);
    free(b->positions);
    free(b->slot_mapping);
    free(b->query_start);
    free(b->seq_lens);
    free(b->logits_index);
    free(b->block_tables);
    memset(b, 0, sizeof *b);
}

void runner_prepare(sl_batch_t *b, const sched_output_t *so, int32_t B) {
    b->n_tokens = b->n_seqs = b->n_logits = 0;
    for (int32_t s = 0; s < so->n; s++) {
        const request_t *r = so->reqs[s];
        int32_t t0 = b->n_tokens, start = r->n_computed, n = so->n_new[s];
        for (int32_t i = 0; i < n; i++) {
            int32_t pos = start + i;
            b->token_ids[t0 + i] = r->tokens[pos];
            b->positions[t0 + i] = pos;
            b->slot_mapping[t0 + i] = (int64_t)r->blocks.ids[pos / B] * B + pos % B;
        }
        b->n_tokens += n;
        b->query_start[s] = t0;
        b->query_start[s + 1] = b->n_tokens;
        b->seq_lens[s] = start + n;
        int32_t *row = b->block_tables + (size_t)s * (size_t)b->max_blocks;
        memcpy(row, r->blocks.ids, (size_t)r->blocks.n * sizeof *row);
        /* A row for the last known token and one per verified draft. */
        for (int32_t pos = r->n_tokens - 1; pos < start + n; pos++)
            if (pos >= start) b->logits_index[b->n_logits++] = t0 + pos - start;
    }
    b->n_seqs = so->n;
}

/* ---- buffers ------------------------------------------------------------------- */

static void *backend_alloc(const model_runner_t *r, size_t n_bytes, bool *failed) {
    void *p = r->ops->alloc(r->ops->ctx, n_bytes);
    if (!p) *failed = true;
    return p;
}

/* The batch buffers of ranks 1..N-1 on a device backend, each allocated on
 * its rank's backend (made current for the allocation). */
static int rank_batches_init(model_runner_t *r, sl_err_t *err) {
    const llama_model_t *m = r->model;
    int n = m->shard.size;
    size_t T = (size_t)r->max_tokens, S = (size_t)r->max_seqs;
    r->rank_batch = sl_calloc((size_t)n, sizeof *r->rank_batch);
    r->rank_in = sl_calloc((size_t)n, sizeof *r->rank_in);
    bool failed = false;
    for (int k = 1; k < n && !failed; k++) {
        const sl_ops_t *o = llama_rank_ops(m, k);
        runner_rank_batch_t *d = &r->rank_batch[k];
        llama_rank_select(m, k);
        void **bufs[] = {(void **)&d->token_ids, (void **)&d->positions, (void **)&d->slot_mapping,
                         (void **)&d->query_start, (void **)&d->seq_lens, (void **)&d->logits_index,
                         (void **)&d->block_tables};
        size_t sizes[] = {T * sizeof(int32_t), T * sizeof(int32_t), T * sizeof(int64_t), (S + 1) * sizeof(int32_t),
                          S * sizeof(int32_t), S * sizeof(int32_t), S * (size_t)r->max_blocks * sizeof(int32_t)};
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (!(*bufs[i] = o->alloc(o->ctx, sizes[i]))) failed = true;
        llama_rank_select(m, 0);
    }
    return failed ? sl_fail(err, "out of %s memory for the ranks' batches", r->ops->name) : 0;
}

static void rank_batches_free(model_runner_t *r) {
    const llama_model_t *m = r->model;
    for (int k = 1; r->rank_batch && k < m->shard.size; k++) {
        const sl_ops_t *o = llama_rank_ops(m, k);
        runner_rank_batch_t *d = &r->rank_batch[k];
        void *bufs[] = {d->token_ids, d->positions, d->slot_mapping, d->query_start, d->seq_lens, d->logits_index,
                        d->block_tables};
        llama_rank_select(m, k);
        for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
            if (bufs[i]) o->free(o->ctx, bufs[i]);
        llama_rank_select(m, 0);
    }
    free(r->rank_batch);
    free(r->rank_in);
}

int runner_init(model_runner_t *r, llama_model_t *m, int32_t max_blocks, sl_err_t *err) {
    memset(r, 0, sizeof *r);
    SL_ASSERT(m->ops->sample); /* every backend samples */
    r->model = m;
    r->ops = m->ops;
    r->max_tokens = m->max_tokens;
    r->max_seqs = m->max_seqs;
    r->max_blocks = max_blocks;
    size_t T = (size_t)m->max_tokens, S = (size_t)m->max_seqs, V = (size_t)m->cfg.vocab_size;
    bool failed = false;
    r->d_token_ids = backend_alloc(r, T * sizeof(int32_t), &failed);
    r->d_positions = backend_alloc(r, T * sizeof(int32_t), &failed);
    r->d_slot_mapping = backend_alloc(r, T * sizeof(int64_t), &failed);
    r->d_query_start = backend_alloc(r, (S + 1) * sizeof(int32_t), &failed);
    r->d_seq_lens = backend_alloc(r, S * sizeof(int32_t), &failed);
    r->d_logits_index = backend_alloc(r, S * sizeof(int32_t), &failed);
    r->d_block_tables = backend_alloc(r, S * (size_t)max_blocks * sizeof(int32_t), &failed);
    if (r->ops->logits_device) r->d_logits = backend_alloc(r, S * V * sizeof(float), &failed);
    if (failed) {
        runner_free(r);
        return sl_fail(err, "out of %s memory for the batch of %lld tokens", m->ops->name, (long long)T);
    }
    if (m->tp && !r->ops->host_memory && rank_batches_init(r, err)) {
        runner_free(r);
        return -1;
    }
    batch_init(&r->batch, m->max_tokens, m->max_seqs, max_blocks);
    r->logits = sl_malloc(S * V * sizeof(float));
    r->rows = sl_malloc(S * sizeof *r->rows);
    return 0;
}

void runner_free(model_runner_t *r) {
    if (!r->ops) return;
    runner_free_graphs(r);
    if (r->kv.k) kv_cache_free(&r->kv, r->model);
    rank_batches_free(r);
    void *bufs[] = {r->d_token_ids, r->d_positions, r->d_slot_mapping, r->d_query_start,
                    r->d_seq_lens, r->d_logits_index, r->d_block_tables, r->d_logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) r->ops->free(r->ops->ctx, bufs[i]);
    if (r->batch.token_ids) batch_free(&r->batch);
    free(r->logits);
    free(r->rows);
    free(r->row_ids);
    free(r->row_bias);
    memset(r, 0, sizeof *r);
}

int kv_cache_init(kv_cache_t *kv, const llama_model_t *m, int64_t n_blocks, int64_t block_size,
                  sl_err_t *err) {
    memset(kv, 0, sizeof *kv);
    const model_config_t *c = &m->cfg;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_layers = c->n_layers;
    kv->n_ranks = m->shard.size;
    size_t n_bufs = (size_t)kv->n_ranks * (size_t)c->n_layers;
    kv->k = sl_calloc(n_bufs, sizeof(void *));
    kv->v = sl_calloc(n_bufs, sizeof(void *));
    /* Every rank holds the same number of KV heads (its own, or a replica),
     * in its own backend's memory. */
    size_t block_bytes = (size_t)block_size * (size_t)m->shard.n_kv_heads * (size_t)c->head_dim *
                         dtype_size(m->ops->kv_dtype);
    size_t n_bytes = (size_t)n_blocks * block_bytes;
    /* The null block 0 is zero, so whatever reads it (a padding row of a CUDA
     * graph, a profiling forward) reads finite values. */
    void *zeros = sl_calloc(1, block_bytes);
    bool failed = false;
    for (size_t i = 0; i < n_bufs && !failed; i++) {
        int rank = (int)(i / (size_t)c->n_layers);
        const sl_ops_t *o = llama_rank_ops(m, rank);
        if (rank > 0) llama_rank_select(m, rank);
        kv->k[i] = o->alloc(o->ctx, n_bytes);
        kv->v[i] = o->alloc(o->ctx, n_bytes);
        failed = !kv->k[i] || !kv->v[i];
        if (!failed) {
            o->upload(o->ctx, kv->k[i], zeros, block_bytes);
            o->upload(o->ctx, kv->v[i], zeros, block_bytes);
        }
        if (rank > 0) llama_rank_select(m, 0);
    }
    free(zeros);
    if (failed) {
        kv_cache_free(kv, m);
        return sl_fail(err, "out of %s memory for a KV cache of %lld blocks", m->ops->name, (long long)n_blocks);
    }
    return 0;
}

void kv_cache_free(kv_cache_t *kv, const llama_model_t *m) {
    size_t n_bufs = (size_t)kv->n_ranks * (size_t)kv->n_layers;
    for (size_t i = 0; i < n_bufs; i++) {
        int rank = (int)(i / (size_t)kv->n_layers);
        const sl_ops_t *o = llama_rank_ops(m, rank);
        if (rank > 0) llama_rank_select(m, rank);
        if (kv->k && kv->k[i]) o->free(o->ctx, kv->k[i]);
        if (kv->v && kv->v[i]) o->free(o->ctx, kv->v[i]);
        if (rank > 0) llama_rank_select(m, 0);
    }
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

int runner_alloc_kv(model_runner_t *r, int64_t n_blocks, int32_t block_size, sl_err_t *err) {
    SL_ASSERT(!r->kv.k);
    return kv_cache_init(&r->kv, r->model, n_blocks, block_size, err);
}

/* ---- one forward ------------------------------------------------------------------ */

static void upload_batch(model_runner_t *r, const sl_batch_t *b) {
    const sl_ops_t *o = r->ops;
    size_t T = (size_t)b->n_tokens, S = (size_t)b->n_seqs;
    o->upload(o->ctx, r->d_token_ids, b->token_ids, T * sizeof(int32_t));
    o->upload(o->ctx, r->d_positions, b->positions, T * sizeof(int32_t));
    o->upload(o->ctx, r->d_slot_mapping, b->slot_mapping, T * sizeof(int64_t));
    o->upload(o->ctx, r->d_query_start, b->query_start, (S + 1) * sizeof(int32_t));
    o->upload(o->ctx, r->d_seq_lens, b->seq_lens, S * sizeof(int32_t));
    o->upload(o->ctx, r->d_logits_index, b->logits_index, (size_t)b->n_logits * sizeof(int32_t));
    o->upload(o->ctx, r->d_block_tables, b->block_tables, S * (size_t)b->max_blocks * sizeof(int32_t));
    for (int k = 1; r->rank_batch && k < r->model->shard.size; k++) {
        const sl_ops_t *ok = llama_rank_ops(r->model, k);
        const runner_rank_batch_t *d = &r->rank_batch[k];
        llama_rank_select(r->model, k);
        ok->upload(ok->ctx, d->token_ids, b->token_ids, T * sizeof(int32_t));
        ok->upload(ok->ctx, d->positions, b->positions, T * sizeof(int32_t));
        ok->upload(ok->ctx, d->slot_mapping, b->slot_mapping, T * sizeof(int64_t));
        ok->upload(ok->ctx, d->query_start, b->query_start, (S + 1) * sizeof(int32_t));
        ok->upload(ok->ctx, d->seq_lens, b->seq_lens, S * sizeof(int32_t));
        ok->upload(ok->ctx, d->logits_index, b->logits_index, (size_t)b->n_logits * sizeof(int32_t));
        ok->upload(ok->ctx, d->block_tables, b->block_tables, S * (size_t)b->max_blocks * sizeof(int32_t));
        llama_rank_select(r->model, 0);
    }
}

/* The step's inputs as llama_forward takes them: the batch arrays in the
 * runner's backend buffers, the attention's host-side sizes from b. */
static llama_inputs_t batch_inputs(model_runner_t *r, const sl_batch_t *b) {
    int32_t max_seq_len = 0, max_query_len = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seq_lens[s] > max_seq_len) max_seq_len = b->seq_lens[s];
        int32_t q = b->query_start[s + 1] - b->query_start[s];
        if (q > max_query_len) max_query_len = q;
    }
    llama_inputs_t in = (llama_inputs_t){
        .token_ids = r->d_token_ids, .slot_mapping = r->d_slot_mapping, .logits_index = r->d_logits_index,
        .n_logits = b->n_logits,
        .meta = {.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .max_blocks = b->max_blocks,
                 .max_seq_len = max_seq_len, .max_query_len = max_query_len, .positions = r->d_positions,
                 .query_start = r->d_query_start, .seq_lens = r->d_seq_lens, .block_tables = r->d_block_tables}};
    if (!r->rank_batch) return in;
    /* Each rank's copy: the same sizes, its own buffers. */
    r->rank_in[0] = in;
    for (int k = 1; k < r->model->shard.size; k++) {
        const runner_rank_batch_t *d = &r->rank_batch[k];
        llama_inputs_t *ik = &r->rank_in[k];
        *ik = in;
        ik->token_ids = d->token_ids, ik->slot_mapping = d->slot_mapping, ik->logits_index = d->logits_index;
        ik->meta.positions = d->positions, ik->meta.query_start = d->query_start, ik->meta.seq_lens = d->seq_lens;
        ik->meta.block_tables = d->block_tables;
    }
    in.rank_in = r->rank_in;
    return in;
}

static bool graph_step(model_runner_t *r, const sl_batch_t *b, const kv_cache_t *kv);

void runner_forward(model_runner_t *r, const sl_batch_t *b, const kv_cache_t *kv, float *logits) {
    SL_ASSERT(b->n_tokens > 0 && b->n_tokens <= r->max_tokens && b->n_seqs <= r->max_seqs);
    SL_ASSERT(b->max_blocks <= r->max_blocks && b->n_logits <= r->max_seqs);
    SL_ASSERT(logits || r->d_logits);
    if (graph_step(r, b, kv)) {
        r->n_graph_steps++;
    } else {
        r->n_eager_steps++;
        upload_batch(r, b);
        llama_inputs_t in = batch_inputs(r, b);
        /* With device logits, one path for graphs and eager steps: into
         * d_logits, then (if asked) one download. */
        if (r->d_logits) llama_forward(r->model, &in, kv, r->d_logits, true);
        else llama_forward(r->model, &in, kv, logits, false);
    }
    if (logits && r->d_logits && b->n_logits > 0)
        r->ops->download(r->ops->ctx, logits, r->d_logits,
                         (size_t)b->n_logits * (size_t)r->model->cfg.vocab_size * sizeof(float));
}

/* ---- the engine's step: forward, then sampling ---------------------------------------- */

/* Resolves each sampled sequence's rows and has the backend sample them
 * where the logits are: one row for its last known token, then one per
 * draft it verifies (request_t n_spec), each with the history up to its
 * position (the drafts before it count as output, for the penalties and
 * min_tokens). Row j takes the j-th draw ahead in the request's generator,
 * peeked from a copy: the engine advances the generator by one draw per
 * token it keeps (runner_execute), so token i of a request always comes
 * from its i-th draw, with or without speculation. A row depends only on its
 * own logits, history and draw, so batch and backend never change a
 * request's tokens. */
static void sample_rows(model_runner_t *r, request_t *const *reqs, int32_t n_reqs, int32_t n_rows,
                        sample_result_t *out) {
    const model_config_t *c = &r->model->cfg;
    int64_t need = 0;
    for (int32_t i = 0; i < n_reqs; i++) {
        const request_t *q = reqs[i];
        for (int32_t j = 0; j <= q->n_spec; j++)
            need += sampling_row_n_ids(&q->params, q->n_prompt, request_n_output(q) + j, c->n_eos_token_ids);
    }
    if (need > r->row_cap) {
        r->row_cap = need > 2 * r->row_cap ? need : 2 * r->row_cap;
        free(r->row_ids);
        free(r->row_bias);
        r->row_ids = sl_malloc((size_t)r->row_cap * sizeof *r->row_ids);
        r->row_bias = sl_malloc((size_t)r->row_cap * sizeof *r->row_bias);
    }
    int64_t off = 0;
    int32_t row = 0;
    for (int32_t i = 0; i < n_reqs; i++) {
        request_t *q = reqs[i];
        sl_rng_t ahead = q->rng;
        bool draws = sampling_draws(&q->params);
        for (int32_t j = 0; j <= q->n_spec; j++, row++) {
            double u = draws ? rng_uniform(&ahead) : 0.0;
            off = sampling_row_resolve(&r->rows[row], &q->params, q->tokens, q->n_prompt, q->tokens + q->n_prompt,
                                       request_n_output(q) + j, c->eos_token_ids, c->n_eos_token_ids, u,
                                       r->row_ids, r->row_bias, off);
        }
    }
    SL_ASSERT(row == n_rows);
    r->ops->sample(r->ops->ctx, r->d_logits ? r->d_logits : r->logits, n_rows, c->vocab_size, r->rows, r->row_ids,
                   r->row_bias, off, out);
}

/* ---- the lab's logit_noise (model_runner.h) ----------------------------------------- */

uint64_t logit_noise_seed(uint64_t seed, const int32_t *tokens, int32_t n_tokens) {
    /* splitmix64's finalizer over (seed, each token): any change of a token
     * or of its place changes the row's noise. */
    uint64_t h = seed ^ 0x6c6f6769745f6e6full; /* "logit_no" */
    for (int32_t i = 0; i <= n_tokens; i++) {
        h ^= i < n_tokens ? (uint64_t)(uint32_t)tokens[i] : (uint64_t)n_tokens << 32;
        h += 0x9e3779b97f4a7c15ull;
        h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ull;
        h = (h ^ (h >> 27)) * 0x94d049bb133111ebull;
        h ^= h >> 31;
    }
    return h;
}

void logit_noise_row(float *row, int64_t V, double scale, uint64_t row_seed) {
    sl_rng_t rng;
    rng_seed(&rng, row_seed);
    /* Box-Muller: two uniforms give two independent normals. */
    for (int64_t i = 0; i < V; i += 2) {
        double u1 = 1.0 - rng_uniform(&rng), u2 = rng_uniform(&rng); /* u1 in (0, 1]: log is finite */
        double rad = sqrt(-2.0 * log(u1)) * scale, th = 6.283185307179586 * u2; /* 2 pi */
        row[i] += (float)(rad * cos(th));
        if (i + 1 < V) row[i + 1] += (float)(rad * sin(th));
    }
}

/* A row's noise is seeded by the tokens before its position: a verified
 * draft's row by the request's tokens and the drafts before it, as the
 * same position would be without speculation. */
static void add_logit_noise(model_runner_t *r, request_t *const *reqs, int32_t n_reqs, int32_t n_rows,
                            const runner_noise_t *noise) {
    const sl_ops_t *o = r->ops;
    int64_t V = r->model->cfg.vocab_size;
    size_t n_bytes = (size_t)n_rows * (size_t)V * sizeof(float);
    if (r->d_logits) o->download(o->ctx, r->logits, r->d_logits, n_bytes);
    for (int32_t i = 0, row = 0; i < n_reqs; i++)
        for (int32_t j = 0; j <= reqs[i]->n_spec; j++, row++)
            logit_noise_row(r->logits + (size_t)row * (size_t)V, V, noise->scale,
                            logit_noise_seed(noise->seed, reqs[i]->tokens, reqs[i]->n_tokens + j));
    if (r->d_logits) o->upload(o->ctx, r->d_logits, r->logits, n_bytes);
}

int runner_execute(model_runner_t *r, const sched_output_t *so, request_t *const *sampled, int32_t n_sampled,
                   const runner_noise_t *noise, sample_result_t *out, char *msg, size_t msg_cap) {
    runner_prepare(&r->batch, so, (int32_t)r->kv.block_size);
    int32_t n_rows = r->batch.n_logits;
    SL_ASSERT(n_rows >= n_sampled);
    runner_forward(r, &r->batch, &r->kv, r->d_logits ? NULL : r->logits);
    if (noise && n_rows > 0) add_logit_noise(r, sampled, n_sampled, n_rows, noise);
    if (n_rows > 0) sample_rows(r, sampled, n_sampled, n_rows, out);
    /* One check for both (every rank's backend): on a device it is a synchronization. */
    return llama_last_error(r->model, msg, msg_cap);
}

/* ---- startup's dummy steps (profiling, warm-up) -------------------------------------- */

/* S sequences share T tokens (the first T % S get one more); with `context`
 * each has max_model_len tokens in the cache after the step (its queries are
 * the last ones), otherwise it is a fresh prompt. The last token of each
 * sequence gets logits, or every token with all_rows. */
static void dummy_batch(sl_batch_t *b, const runner_shape_t *shape, int32_t max_model_len, int64_t V) {
    int32_t S = shape->S, T = shape->T;
    bool context = shape->context;
    SL_ASSERT(S >= 1 && T >= S && (int64_t)T <= (int64_t)S * max_model_len);
    b->n_tokens = T;
    b->n_seqs = S;
    b->n_logits = 0;
    int32_t t = 0;
    for (int32_t s = 0; s < S; s++) {
        int32_t q = T / S + (s < T % S), len = context ? max_model_len : q;
        b->query_start[s] = t;
        for (int32_t i = 0; i < q; i++, t++) {
            b->token_ids[t] = (int32_t)(t % V);
            b->positions[t] = len - q + i;
            b->slot_mapping[t] = -1;
            if (shape->all_rows || i == q - 1) b->logits_index[b->n_logits++] = t;
        }
        b->query_start[s + 1] = t;
        b->seq_lens[s] = len;
        memset(b->block_tables + (size_t)s * (size_t)b->max_blocks, 0, (size_t)b->max_blocks * sizeof(int32_t));
    }
}

/* One sampling of S rows over the logits the last forward left, with every stage on (temperature, top_k, top_p, min_p,
 * penalties, 20 logprobs), as vLLM's dummy sampler run does. */
static void dummy_sample(model_runner_t *r, int32_t S) {
    const model_config_t *c = &r->model->cfg;
    sampling_params_t p;
    sampling_params_default(&p);
    p.top_k = 50;
    p.top_p = 0.9f;
    p.min_p = 0.01f;
    p.repetition_penalty = 1.1f;
    p.logprobs = SAMPLING_MAX_LOGPROBS;
    int32_t history[2] = {0, 1};
    sampling_row_t *rows = sl_malloc((size_t)S * sizeof *rows);
    int64_t n_ids = (int64_t)S * sampling_row_n_ids(&p, 1, 1, c->n_eos_token_ids), off = 0;
    int32_t *ids = sl_malloc((size_t)n_ids * sizeof *ids);
    float *bias = sl_malloc((size_t)n_ids * sizeof *bias);
    for (int32_t s = 0; s < S; s++)
        off = sampling_row_resolve(&rows[s], &p, history, 1, history + 1, 1, c->eos_token_ids, c->n_eos_token_ids,
                                   0.5, ids, bias, off);
    sample_result_t *out = sl_malloc((size_t)S * sizeof *out);
    r->ops->sample(r->ops->ctx, r->d_logits ? r->d_logits : r->logits, S, c->vocab_size, rows, ids, bias, off, out);
    free(out);
    free(bias);
    free(ids);
    free(rows);
    sampling_params_free(&p);
}

int runner_dummy_steps(model_runner_t *r, int32_t block_size, int32_t max_model_len, const runner_shape_t *shapes,
                       int n, bool sample, const char *what, sl_err_t *err) {
    kv_cache_t kv;
    if (kv_cache_init(&kv, r->model, 1, block_size, err)) return -1;
    sl_batch_t b;
    batch_init(&b, r->max_tokens, r->max_seqs, r->max_blocks);
    const sl_ops_t *o = r->ops;
    char msg[SL_ERR_LEN] = "";
    int failed = 0;
    for (int i = 0; i < n && !failed; i++) {
        dummy_batch(&b, &shapes[i], max_model_len, r->model->cfg.vocab_size);
        runner_forward(r, &b, &kv, r->d_logits ? NULL : r->logits);
        failed = o->last_error ? o->last_error(o->ctx, msg, sizeof msg) : 0;
    }
    if (!failed && sample) {
        dummy_sample(r, b.n_logits); /* the rows of logits the last shape left */
        failed = o->last_error ? o->last_error(o->ctx, msg, sizeof msg) : 0;
    }
    batch_free(&b);
    kv_cache_free(&kv, r->model);
    if (failed)
        return sl_fail(err, "%s failed: %s%s", what, msg,
                       strstr(msg, "(in op ") ? "" : ". Hint: SERVELAB_CUDA_SYNC_OPS=1 names the op that faulted");
    return 0;
}

/* ---- CUDA graphs of decode steps (model_runner.h) ------------------------------------ */


int runner_graph_sizes(int32_t max_size, int32_t max_num_seqs, int32_t max_num_batched_tokens, int32_t *out,
                      int cap) {
    int n = 0;
    for (int32_t size = 1; size <= max_size && size <= max_num_batched_tokens && n < cap;
         size = size < 8 ? (size < 4 ? size * 2 : 8) : size + 8) {
        out[n++] = size;
        if (size >= max_num_seqs) break;
    }
    return n;
}

int runner_graph_bucket(const int32_t *sizes, int n, int32_t S) {
    for (int i = 0; i < n; i++)
        if (sizes[i] >= S) return i;
    return -1;
}

void batch_pad_decode(sl_batch_t *dst, const sl_batch_t *src, int32_t S_pad) {
    int32_t S = src->n_seqs;
    SL_ASSERT(src->n_tokens == S && src->n_logits == S && S <= S_pad && dst->max_blocks >= src->max_blocks);
    size_t row = (size_t)dst->max_blocks, src_row = (size_t)src->max_blocks;
    memcpy(dst->token_ids, src->token_ids, (size_t)S * sizeof(int32_t));
    memcpy(dst->positions, src->positions, (size_t)S * sizeof(int32_t));
    memcpy(dst->slot_mapping, src->slot_mapping, (size_t)S * sizeof(int64_t));
    memcpy(dst->seq_lens, src->seq_lens, (size_t)S * sizeof(int32_t));
    if (row == src_row) {
        memcpy(dst->block_tables, src->block_tables, (size_t)S * row * sizeof(int32_t));
    } else {
        for (int32_t s = 0; s < S; s++)
            memcpy(dst->block_tables + (size_t)s * row, src->block_tables + (size_t)s * src_row,
                   src_row * sizeof(int32_t));
    }
    memset(dst->block_tables + (size_t)S * row, 0, (size_t)(S_pad - S) * row * sizeof(int32_t));
    for (int32_t s = 0; s < S_pad; s++) {
        if (s >= S) {
            dst->token_ids[s] = 0;
            dst->positions[s] = 0;
            dst->slot_mapping[s] = -1;
            dst->seq_lens[s] = 1;
        }
        dst->query_start[s] = s;
        dst->logits_index[s] = s;
    }
    dst->query_start[S_pad] = S_pad;
    dst->n_tokens = dst->n_seqs = dst->n_logits = S_pad;
}

/* The inputs every graph of size S was captured with. */
static llama_inputs_t graph_inputs(model_runner_t *r, int32_t S) {
    llama_inputs_t in = batch_inputs(r, &r->graphs.padded);
    in.n_logits = S;
    in.meta = (sl_attn_meta_t){.n_tokens = S, .n_seqs = S, .max_blocks = r->graphs.padded.max_blocks,
                               .max_seq_len = r->graphs.max_seq_len, .max_query_len = 1,
                               .positions = r->d_positions, .query_start = r->d_query_start,
                               .seq_lens = r->d_seq_lens, .block_tables = r->d_block_tables, .for_graph = 1};
    return in;
}

/* Warms up then captures the graph of sizes[i] on a batch of padding rows
 * (the batch's values do not matter: a replay reads the buffers anew). */
static int capture_one(model_runner_t *r, const kv_cache_t *kv, int i, sl_err_t *err) {
    const sl_ops_t *o = r->ops;
    runner_graphs_t *g = &r->graphs;
    int32_t S = g->sizes[i];
    sl_batch_t empty = g->padded;
    empty.n_tokens = empty.n_seqs = empty.n_logits = 0;
    batch_pad_decode(&g->padded, &empty, S);
    upload_batch(r, &g->padded);
    llama_inputs_t in = graph_inputs(r, S);
    llama_forward(r->model, &in, kv, r->d_logits, true); /* first-use costs, and scratch sized before capture */
    char msg[SL_ERR_LEN];
    if (o->last_error(o->ctx, msg, sizeof msg)) {
        g->failed[i] = true;
        return sl_fail(err, "warm-up of the CUDA graph of batch size %d failed: %s", S, msg);
    }
    o->graph_begin(o->ctx);
    llama_forward(r->model, &in, kv, r->d_logits, true);
    g->graphs[i] = o->graph_end(o->ctx);
    if (!g->graphs[i]) {
        g->failed[i] = true;
        if (!o->last_error(o->ctx, msg, sizeof msg)) snprintf(msg, sizeof msg, "no reason given");
        return sl_fail(err, "capturing the CUDA graph of batch size %d failed: %s", S, msg);
    }
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int runner_capture_graphs(model_runner_t *r, const kv_cache_t *kv, const int32_t *sizes, int n,
                          int32_t max_seq_len, bool lazy, sl_err_t *err) {
    const sl_ops_t *o = r->ops;
    if (!o->graph_begin || !r->d_logits || !o->last_error)
        return sl_fail(err, "the %s backend has no CUDA graphs", o->name);
    /* A rank's graph would replay its all-reduces on a communicator that the
     * other ranks' threads drive eagerly. */
    if (r->model->tp) return sl_fail(err, "CUDA graphs are not captured with tensor parallelism");
    runner_free_graphs(r);
    runner_graphs_t *g = &r->graphs;
    g->sizes = sl_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    int32_t cap = r->max_seqs < r->max_tokens ? r->max_seqs : r->max_tokens;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (sizes[i] >= 1) g->sizes[k++] = sizes[i] < cap ? sizes[i] : cap;
    qsort(g->sizes, (size_t)k, sizeof(int32_t), cmp_i32);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || g->sizes[u - 1] != g->sizes[i]) g->sizes[u++] = g->sizes[i];
    g->n = u;
    g->graphs = sl_calloc((size_t)(u > 0 ? u : 1), sizeof(void *));
    g->failed = sl_calloc((size_t)(u > 0 ? u : 1), sizeof(bool));
    g->lazy = lazy;
    g->max_seq_len = max_seq_len < 1 ? 1 : max_seq_len;
    g->kv = kv;
    int32_t largest = u > 0 ? g->sizes[u - 1] : 1;
    batch_init(&g->padded, largest, largest, r->max_blocks);
    if (lazy) return 0;
    for (int i = u - 1; i >= 0; i--) /* largest first, as vLLM: the rest fit in what it sized */
        if (capture_one(r, kv, i, err)) {
            runner_free_graphs(r);
            return -1;
        }
    return 0;
}

void runner_free_graphs(model_runner_t *r) {
    runner_graphs_t *g = &r->graphs;
    for (int i = 0; i < g->n; i++)
        if (g->graphs[i]) r->ops->graph_free(r->ops->ctx, g->graphs[i]);
    free(g->graphs);
    free(g->sizes);
    free(g->failed);
    if (g->padded.token_ids) batch_free(&g->padded);
    memset(g, 0, sizeof *g);
}

/* Replays the graph of the smallest captured size that holds this decode
 * step, padded to it; false (nothing done) when none applies. A lazy size is
 * captured here, at its first use (what --skip-warmup reproduces: the first
 * requests pay for it). A failed capture is logged once and leaves the size
 * to eager steps, this one included. */
static bool graph_step(model_runner_t *r, const sl_batch_t *b, const kv_cache_t *kv) {
    runner_graphs_t *g = &r->graphs;
    int32_t S = b->n_seqs;
    if (g->n == 0 || kv != g->kv || b->n_tokens != S || b->n_logits != S) return false;
    for (int32_t s = 0; s < S; s++)
        if (b->seq_lens[s] > g->max_seq_len) return false;
    int i = runner_graph_bucket(g->sizes, g->n, S);
    if (i < 0 || g->failed[i]) return false;
    if (!g->graphs[i]) {
        sl_err_t err;
        double t0 = sl_now_s();
        if (capture_one(r, kv, i, &err)) {
            LOG_ERROR("%s; batches of up to %d sequences run eagerly from now on", err.msg, g->sizes[i]);
            return false;
        }
        LOG_INFO("Captured the CUDA graph of batch size %d at its first use in %.3f seconds", g->sizes[i],
                 sl_now_s() - t0);
    }
    batch_pad_decode(&g->padded, b, g->sizes[i]);
    upload_batch(r, &g->padded);
    r->ops->graph_launch(r->ops->ctx, g->graphs[i]);
    return true;
}
