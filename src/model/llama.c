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
 */
#include <math.h>
#include <stdbool.h>
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
    if (failed) {
        llama_free(m);
        return sl_fail(err, "out of %s memory for activations of %d tokens", ops->name, max_tokens);
    }
    return 0;
}

void llama_free(llama_model_t *m) {
    if (!m->ops) return;
    void *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->attn, m->gate, m->up, m->rows,
                    m->d_token_ids, m->d_positions, m->d_slot_mapping, m->d_query_start,
                    m->d_seq_lens, m->d_logits_index, m->d_block_tables};
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
    size_t n_bytes = (size_t)n_blocks * (size_t)block_size * (size_t)c->n_kv_heads *
                     (size_t)c->head_dim * dtype_size(m->ops->act_dtype);
    for (int64_t l = 0; l < c->n_layers; l++) {
        kv->k[l] = m->ops->alloc(m->ops->ctx, n_bytes);
        kv->v[l] = m->ops->alloc(m->ops->ctx, n_bytes);
        if (!kv->k[l] || !kv->v[l]) {
            kv_cache_free(kv, m);
            return sl_fail(err, "out of %s memory for a KV cache of %lld blocks", m->ops->name,
                           (long long)n_blocks);
        }
    }
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

void llama_forward(llama_model_t *m, const sl_batch_t *b, const kv_cache_t *kv, float *logits) {
    const sl_ops_t *o = m->ops;
    const model_config_t *c = &m->cfg;
    void *ctx = o->ctx;
    int64_t T = b->n_tokens, H = c->n_heads, Hkv = c->n_kv_heads, D = c->head_dim;
    int64_t hid = c->hidden_size, inter = c->intermediate_size;
    float eps = (float)c->rms_norm_eps, scale = 1.0f / sqrtf((float)D);
    SL_ASSERT(T > 0 && T <= m->max_tokens && b->n_seqs <= m->max_seqs);
    SL_ASSERT(b->max_blocks <= m->max_blocks && b->n_logits <= b->n_seqs);
    upload_batch(m, b);
    int32_t max_seq_len = 0, max_query_len = 0;
    for (int32_t s = 0; s < b->n_seqs; s++) {
        if (b->seq_lens[s] > max_seq_len) max_seq_len = b->seq_lens[s];
        int32_t q = b->query_start[s + 1] - b->query_start[s];
        if (q > max_query_len) max_query_len = q;
    }
    sl_attn_meta_t meta = {.n_tokens = (int32_t)T, .n_seqs = b->n_seqs,
                           .max_blocks = b->max_blocks, .max_seq_len = max_seq_len,
                           .max_query_len = max_query_len, .positions = m->d_positions,
                           .query_start = m->d_query_start, .seq_lens = m->d_seq_lens,
                           .block_tables = m->d_block_tables};

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
        o->attention(ctx, m->attn, m->q, kv->k[l], kv->v[l], &meta, H, Hkv, D, kv->block_size,
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
    if (b->n_logits == 0) return;
    o->gather_rows(ctx, m->rows, m->x, m->d_logits_index, b->n_logits, hid);
    o->rmsnorm(ctx, m->rows, m->rows, &m->w.norm, b->n_logits, eps);
    o->logits(ctx, logits, m->rows, &m->w.lm_head, b->n_logits);
}
