/* llama.c - the Llama forward pass over a flat batch, in terms of the ops table.
 *
 * Per layer: x += o_proj(attn(rope(q, k), paged KV)) on rmsnorm(x), then
 * x += down(silu(gate(h)) * up(h)) on rmsnorm(x). Only the rows named in
 * logits_index go through the final norm and lm_head, so a prefill step of
 * many tokens produces one row of logits per finished prompt. The code never
 * reads a buffer: it is the same for every backend (DESIGN.md principle 3).
 * A backend's optional fused ops (add_rmsnorm, rope_kv_write) replace their
 * unfused sequence when present; the CPU has none, so its arithmetic (the
 * reference the golden test checks bit for bit) is the plain sequence.
 * Decode steps replay CUDA graphs when the backend has them (model.h): the
 * same op sequence, recorded once per padded batch size.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/model.h"

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

static void *scratch(llama_model_t *m, size_t n_bytes, int *failed) {
    void *p = m->ops->alloc(m->ops->ctx, n_bytes);
    if (!p) *failed = 1;
    return p;
}

int llama_init(llama_model_t *m, const char *model_dir, const model_load_opts_t *opts,
               const sl_ops_t *ops, int32_t max_tokens, int32_t max_seqs, int32_t max_blocks,
               sl_err_t *err) {
    memset(m, 0, sizeof *m);
    m->ops = ops;
    if (config_load(model_dir, &m->cfg, err) || config_load_generation(model_dir, &m->cfg, err))
        return -1;
    double t0 = sl_now_s();
    if (weights_load(model_dir, &m->cfg, ops, opts, &m->w, err)) return -1;
    double load_s = sl_now_s() - t0;
    LOG_INFO("Loading weights took %.2f seconds", load_s);
    LOG_INFO("Model loading took %.4f GiB and %.6f seconds", (double)m->w.n_bytes / (1024.0 * 1024.0 * 1024.0),
             load_s);

    const model_config_t *c = &m->cfg;
    m->max_tokens = max_tokens;
    m->max_seqs = max_seqs;
    m->max_blocks = max_blocks;
    size_t a = dtype_size(ops->act_dtype), T = (size_t)max_tokens;
    size_t qd = (size_t)(c->n_heads * c->head_dim), kvd = (size_t)(c->n_kv_heads * c->head_dim);
    size_t width = (size_t)c->hidden_size > qd ? (size_t)c->hidden_size : qd;
    int failed = 0;
    m->x = scratch(m, T * (size_t)c->hidden_size * a, &failed);
    m->h = scratch(m, T * width * a, &failed);
    m->q = scratch(m, T * qd * a, &failed);
    m->k = scratch(m, T * kvd * a, &failed);
    m->v = scratch(m, T * kvd * a, &failed);
    m->attn = scratch(m, T * qd * a, &failed);
    m->gate = scratch(m, T * (size_t)c->intermediate_size * a, &failed);
    m->up = scratch(m, T * (size_t)c->intermediate_size * a, &failed);
    m->rows = scratch(m, (size_t)max_seqs * (size_t)c->hidden_size * a, &failed);
    m->d_token_ids = scratch(m, T * sizeof(int32_t), &failed);
    m->d_positions = scratch(m, T * sizeof(int32_t), &failed);
    m->d_slot_mapping = scratch(m, T * sizeof(int64_t), &failed);
    m->d_query_start = scratch(m, ((size_t)max_seqs + 1) * sizeof(int32_t), &failed);
    m->d_seq_lens = scratch(m, (size_t)max_seqs * sizeof(int32_t), &failed);
    m->d_logits_index = scratch(m, (size_t)max_seqs * sizeof(int32_t), &failed);
    m->d_block_tables = scratch(m, (size_t)max_seqs * (size_t)max_blocks * sizeof(int32_t), &failed);
    if (ops->logits_device)
        m->d_logits = scratch(m, (size_t)max_seqs * (size_t)c->vocab_size * sizeof(float), &failed);
    if (failed) {
        llama_free(m);
        return sl_fail(err, "out of %s memory for activations of %d tokens", ops->name, max_tokens);
    }
    return 0;
}

void llama_free(llama_model_t *m) {
    if (!m->ops) return;
    llama_free_graphs(m);
    void *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->attn, m->gate, m->up, m->rows,
                    m->d_token_ids, m->d_positions, m->d_slot_mapping, m->d_query_start,
                    m->d_seq_lens, m->d_logits_index, m->d_block_tables, m->d_logits};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) m->ops->free(m->ops->ctx, bufs[i]);
    weights_free(&m->w, m->ops);
    memset(m, 0, sizeof *m);
}

size_t kv_cache_block_bytes(const model_config_t *cfg, int64_t block_size, sl_dtype_t dt) {
    return 2 * (size_t)cfg->n_layers * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim *
           (size_t)block_size * dtype_size(dt);
}

int kv_cache_init(kv_cache_t *kv, const llama_model_t *m, int64_t n_blocks, int64_t block_size,
                  sl_err_t *err) {
    memset(kv, 0, sizeof *kv);
    const model_config_t *c = &m->cfg;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->n_layers = c->n_layers;
    kv->k = sl_calloc((size_t)c->n_layers, sizeof(void *));
    kv->v = sl_calloc((size_t)c->n_layers, sizeof(void *));
    size_t block_bytes = (size_t)block_size * (size_t)c->n_kv_heads * (size_t)c->head_dim *
                         dtype_size(m->ops->act_dtype);
    size_t n_bytes = (size_t)n_blocks * block_bytes;
    /* The null block 0 is zero, so whatever reads it (a padding row of a CUDA
     * graph, a profiling forward) reads finite values. */
    void *zeros = sl_calloc(1, block_bytes);
    for (int64_t l = 0; l < c->n_layers; l++) {
        kv->k[l] = m->ops->alloc(m->ops->ctx, n_bytes);
        kv->v[l] = m->ops->alloc(m->ops->ctx, n_bytes);
        if (!kv->k[l] || !kv->v[l]) {
            free(zeros);
            kv_cache_free(kv, m);
            return sl_fail(err, "out of %s memory for a KV cache of %lld blocks", m->ops->name,
                           (long long)n_blocks);
        }
        m->ops->upload(m->ops->ctx, kv->k[l], zeros, block_bytes);
        m->ops->upload(m->ops->ctx, kv->v[l], zeros, block_bytes);
    }
    free(zeros);
    return 0;
}

void kv_cache_free(kv_cache_t *kv, const llama_model_t *m) {
    for (int64_t l = 0; l < kv->n_layers; l++) {
        if (kv->k && kv->k[l]) m->ops->free(m->ops->ctx, kv->k[l]);
        if (kv->v && kv->v[l]) m->ops->free(m->ops->ctx, kv->v[l]);
    }
    free(kv->k);
    free(kv->v);
    memset(kv, 0, sizeof *kv);
}

static void upload_batch(llama_model_t *m, const sl_batch_t *b) {
    const sl_ops_t *o = m->ops;
    size_t T = (size_t)b->n_tokens, S = (size_t)b->n_seqs;
    o->upload(o->ctx, m->d_token_ids, b->token_ids, T * sizeof(int32_t));
    o->upload(o->ctx, m->d_positions, b->positions, T * sizeof(int32_t));
    o->upload(o->ctx, m->d_slot_mapping, b->slot_mapping, T * sizeof(int64_t));
    o->upload(o->ctx, m->d_query_start, b->query_start, (S + 1) * sizeof(int32_t));
    o->upload(o->ctx, m->d_seq_lens, b->seq_lens, S * sizeof(int32_t));
    o->upload(o->ctx, m->d_logits_index, b->logits_index, (size_t)b->n_logits * sizeof(int32_t));
    o->upload(o->ctx, m->d_block_tables, b->block_tables, S * (size_t)b->max_blocks * sizeof(int32_t));
}

/* The ops of one step whose batch is already in backend memory: T tokens,
 * n_logits rows of logits into host_logits, or into m->d_logits when it is
 * NULL. Everything it passes to an op is fixed by (T, n_logits, meta), so a
 * CUDA graph recorded from it replays any batch of that shape. */
static void forward_ops(llama_model_t *m, const kv_cache_t *kv, const sl_attn_meta_t *meta, int32_t n_logits,
                        float *host_logits) {
    const sl_ops_t *o = m->ops;
    const model_config_t *c = &m->cfg;
    void *ctx = o->ctx;
    int64_t T = meta->n_tokens, H = c->n_heads, Hkv = c->n_kv_heads, D = c->head_dim;
    int64_t hid = c->hidden_size, inter = c->intermediate_size;
    float eps = (float)c->rms_norm_eps, scale = 1.0f / sqrtf((float)D);

    /* Fused ops (device backends) fold each sub-layer's residual add into the
     * norm that follows it, and rope into the KV write. The residual branch
     * then needs a (T, hidden) output apart from h: `up` (T, intermediate) is
     * free at both points (before the MLP writes it, after silu_mul read it).
     * Without fused ops (CPU: the reference) y is h and the sequence is the
     * plain one: linear into h, add, rmsnorm. */
    bool fuse_norm = o->add_rmsnorm != NULL && inter >= hid;
    void *y = fuse_norm ? m->up : m->h;

    o->embed(ctx, m->x, &m->w.embed, m->d_token_ids, T);
    for (int64_t l = 0; l < c->n_layers; l++) {
        const llama_layer_t *ly = &m->w.layers[l];
        if (l == 0 || !fuse_norm) o->rmsnorm(ctx, m->h, m->x, &ly->input_norm, T, eps);
        o->linear(ctx, m->q, m->h, &ly->q, T);
        o->linear(ctx, m->k, m->h, &ly->k, T);
        o->linear(ctx, m->v, m->h, &ly->v, T);
        if (o->rope_kv_write) {
            o->rope_kv_write(ctx, m->q, m->k, m->v, kv->k[l], kv->v[l], m->d_positions,
                             m->d_slot_mapping, T, H, Hkv, D, (float)c->rope_theta,
                             (float)c->rope_scaling_factor);
        } else {
            o->rope(ctx, m->q, m->k, m->d_positions, T, H, Hkv, D, (float)c->rope_theta,
                    (float)c->rope_scaling_factor);
            o->kv_write(ctx, kv->k[l], kv->v[l], m->k, m->v, m->d_slot_mapping, T, Hkv, D);
        }
        o->attention(ctx, m->attn, m->q, kv->k[l], kv->v[l], meta, H, Hkv, D, kv->block_size,
                     scale);
        o->linear(ctx, y, m->attn, &ly->o, T);
        if (fuse_norm) {
            o->add_rmsnorm(ctx, m->x, m->h, y, &ly->post_norm, T, eps);
        } else {
            o->add(ctx, m->x, y, T * hid);
            o->rmsnorm(ctx, m->h, m->x, &ly->post_norm, T, eps);
        }
        o->linear(ctx, m->gate, m->h, &ly->gate, T);
        o->linear(ctx, m->up, m->h, &ly->up, T);
        o->silu_mul(ctx, m->gate, m->gate, m->up, T * inter);
        o->linear(ctx, y, m->gate, &ly->down, T);
        /* The next layer's input norm, fused with this residual add. */
        if (fuse_norm && l + 1 < c->n_layers)
            o->add_rmsnorm(ctx, m->x, m->h, y, &m->w.layers[l + 1].input_norm, T, eps);
        else
            o->add(ctx, m->x, y, T * hid);
    }
    if (n_logits == 0) return;
    o->gather_rows(ctx, m->rows, m->x, m->d_logits_index, n_logits, hid);
    o->rmsnorm(ctx, m->rows, m->rows, &m->w.norm, n_logits, eps);
    if (host_logits)
        o->logits(ctx, host_logits, m->rows, &m->w.lm_head, n_logits);
    else
        o->logits_device(ctx, m->d_logits, m->rows, &m->w.lm_head, n_logits);
}

static sl_attn_meta_t batch_meta(const llama_model_t *m, const sl_batch_t *b) {
    int32_t max_seq_len = 0, max_query_len = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seq_lens[s] > max_seq_len) max_seq_len = b->seq_lens[s];
        int32_t q = b->query_start[s + 1] - b->query_start[s];
        if (q > max_query_len) max_query_len = q;
    }
    return (sl_attn_meta_t){.n_tokens = b->n_tokens, .n_seqs = b->n_seqs, .max_blocks = b->max_blocks,
                            .max_seq_len = max_seq_len, .max_query_len = max_query_len,
                            .positions = m->d_positions, .query_start = m->d_query_start,
                            .seq_lens = m->d_seq_lens, .block_tables = m->d_block_tables};
}

static bool graph_step(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv);

void llama_forward(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv, float *logits) {
    SL_ASSERT(b->n_tokens > 0 && b->n_tokens <= m->max_tokens && b->n_seqs <= m->max_seqs);
    SL_ASSERT(b->max_blocks <= m->max_blocks && b->n_logits <= b->n_seqs);
    SL_ASSERT(logits || m->d_logits);
    if (graph_step(m, b, kv)) {
        m->n_graph_steps++;
    } else {
        m->n_eager_steps++;
        upload_batch(m, b);
        sl_attn_meta_t meta = batch_meta(m, b);
        /* With device logits, one path for graphs and eager steps: into
         * d_logits, then (if asked) one download. */
        forward_ops(m, kv, &meta, b->n_logits, m->d_logits ? NULL : logits);
    }
    if (logits && m->d_logits && b->n_logits > 0)
        m->ops->download(m->ops->ctx, logits, m->d_logits,
                         (size_t)b->n_logits * (size_t)m->cfg.vocab_size * sizeof(float));
}

/* ---- CUDA graphs of decode steps (model.h) -------------------------------- */

int llama_graph_sizes(int32_t max_size, int32_t max_num_seqs, int32_t max_num_batched_tokens, int32_t *out,
                      int cap) {
    int n = 0;
    for (int32_t size = 1; size <= max_size && size <= max_num_batched_tokens && n < cap;
         size = size < 8 ? (size < 4 ? size * 2 : 8) : size + 8) {
        out[n++] = size;
        if (size >= max_num_seqs) break;
    }
    return n;
}

int llama_graph_bucket(const int32_t *sizes, int n, int32_t S) {
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

/* The attention metadata every graph of size S was captured with. */
static sl_attn_meta_t graph_meta(const llama_model_t *m, int32_t S) {
    return (sl_attn_meta_t){.n_tokens = S, .n_seqs = S, .max_blocks = m->graph_batch.max_blocks,
                            .max_seq_len = m->graph_max_seq_len, .max_query_len = 1,
                            .positions = m->d_positions, .query_start = m->d_query_start,
                            .seq_lens = m->d_seq_lens, .block_tables = m->d_block_tables,
                            .for_graph = 1};
}

/* Warms up then captures the graph of sizes[i] on a batch of padding rows
 * (the batch's values do not matter: a replay reads the buffers anew). */
static int capture_one(llama_model_t *m, const kv_cache_t *kv, int i, sl_err_t *err) {
    const sl_ops_t *o = m->ops;
    int32_t S = m->graph_sizes[i];
    sl_batch_t empty = m->graph_batch;
    empty.n_tokens = empty.n_seqs = empty.n_logits = 0;
    batch_pad_decode(&m->graph_batch, &empty, S);
    upload_batch(m, &m->graph_batch);
    sl_attn_meta_t meta = graph_meta(m, S);
    forward_ops(m, kv, &meta, S, NULL); /* first-use costs, and scratch sized before capture */
    char msg[SL_ERR_LEN];
    if (o->last_error(o->ctx, msg, sizeof msg)) {
        m->graph_failed[i] = true;
        return sl_fail(err, "warm-up of the CUDA graph of batch size %d failed: %s", S, msg);
    }
    o->graph_begin(o->ctx);
    forward_ops(m, kv, &meta, S, NULL);
    m->graphs[i] = o->graph_end(o->ctx);
    if (!m->graphs[i]) {
        m->graph_failed[i] = true;
        if (!o->last_error(o->ctx, msg, sizeof msg)) snprintf(msg, sizeof msg, "no reason given");
        return sl_fail(err, "capturing the CUDA graph of batch size %d failed: %s", S, msg);
    }
    return 0;
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int llama_capture_graphs(llama_model_t *m, const kv_cache_t *kv, const int32_t *sizes, int n,
                         int32_t max_seq_len, bool lazy, sl_err_t *err) {
    const sl_ops_t *o = m->ops;
    if (!o->graph_begin || !m->d_logits || !o->last_error)
        return sl_fail(err, "the %s backend has no CUDA graphs", o->name);
    llama_free_graphs(m);
    m->graph_sizes = sl_malloc((size_t)(n > 0 ? n : 1) * sizeof(int32_t));
    int32_t cap = m->max_seqs < m->max_tokens ? m->max_seqs : m->max_tokens;
    int k = 0;
    for (int i = 0; i < n; i++)
        if (sizes[i] >= 1) m->graph_sizes[k++] = sizes[i] < cap ? sizes[i] : cap;
    qsort(m->graph_sizes, (size_t)k, sizeof(int32_t), cmp_i32);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || m->graph_sizes[u - 1] != m->graph_sizes[i]) m->graph_sizes[u++] = m->graph_sizes[i];
    m->n_graphs = u;
    m->graphs = sl_calloc((size_t)(u > 0 ? u : 1), sizeof(void *));
    m->graph_failed = sl_calloc((size_t)(u > 0 ? u : 1), sizeof(bool));
    m->graph_lazy = lazy;
    m->graph_max_seq_len = max_seq_len < 1 ? 1 : max_seq_len;
    m->graph_kv = kv;
    int32_t largest = u > 0 ? m->graph_sizes[u - 1] : 1;
    batch_init(&m->graph_batch, largest, largest, m->max_blocks);
    if (lazy) return 0;
    for (int i = u - 1; i >= 0; i--) /* largest first, as vLLM: the rest fit in what it sized */
        if (capture_one(m, kv, i, err)) {
            llama_free_graphs(m);
            return -1;
        }
    return 0;
}

void llama_free_graphs(llama_model_t *m) {
    for (int i = 0; i < m->n_graphs; i++)
        if (m->graphs[i]) m->ops->graph_free(m->ops->ctx, m->graphs[i]);
    free(m->graphs);
    free(m->graph_sizes);
    free(m->graph_failed);
    if (m->graph_batch.token_ids) batch_free(&m->graph_batch);
    m->graphs = NULL;
    m->graph_sizes = NULL;
    m->graph_failed = NULL;
    m->n_graphs = 0;
    m->graph_kv = NULL;
}

/* Replays the graph of the smallest captured size that holds this decode
 * step, padded to it; false (nothing done) when none applies. A lazy size is
 * captured here, at its first use (what --skip-warmup reproduces: the first
 * requests pay for it). A failed capture is logged once and leaves the size
 * to eager steps, this one included. */
static bool graph_step(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv) {
    int32_t S = b->n_seqs;
    if (m->n_graphs == 0 || kv != m->graph_kv || b->n_tokens != S || b->n_logits != S) return false;
    for (int32_t s = 0; s < S; s++)
        if (b->seq_lens[s] > m->graph_max_seq_len) return false;
    int i = llama_graph_bucket(m->graph_sizes, m->n_graphs, S);
    if (i < 0 || m->graph_failed[i]) return false;
    if (!m->graphs[i]) {
        sl_err_t err;
        double t0 = sl_now_s();
        if (capture_one(m, kv, i, &err)) {
            LOG_ERROR("%s; batches of up to %d sequences run eagerly from now on", err.msg, m->graph_sizes[i]);
            return false;
        }
        LOG_INFO("Captured the CUDA graph of batch size %d at its first use in %.3f seconds", m->graph_sizes[i],
                 sl_now_s() - t0);
    }
    batch_pad_decode(&m->graph_batch, b, m->graph_sizes[i]);
    upload_batch(m, &m->graph_batch);
    m->ops->graph_launch(m->ops->ctx, m->graphs[i]);
    return true;
}
