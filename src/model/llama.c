/* llama.c - the Llama forward pass over a flat batch, in terms of the ops table.
 *
 * Per layer: x += o_proj(attn(rope(q, k), paged KV)) on rmsnorm(x), then
 * x += down(silu(gate(h)) * up(h)) on rmsnorm(x). Only the rows named in
 * logits_index go through the final norm and lm_head, so a prefill step of
 * many tokens produces one row of logits per finished prompt. The code never
 * reads a buffer: it is the same for every backend (docs/architecture.md, "One model, two backends").
 * A backend's optional fused ops (add_rmsnorm, rope_kv_write) replace their
 * unfused sequence when present; the CPU has none, so its arithmetic (the
 * reference the golden test checks bit for bit) is the plain sequence.
 * The inputs are in backend memory already and nothing here depends on
 * their values, which is what lets the model runner record this sequence
 * once per batch shape as a CUDA graph and replay it.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/model.h"

static void *scratch(llama_model_t *m, size_t n_bytes, int *failed) {
    void *p = m->ops->alloc(m->ops->ctx, n_bytes);
    if (!p) *failed = 1;
    return p;
}

int llama_init(llama_model_t *m, const char *model_dir, const model_load_opts_t *opts,
               const sl_ops_t *ops, int32_t max_tokens, int32_t max_seqs, sl_err_t *err) {
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
    if (failed) {
        llama_free(m);
        return sl_fail(err, "out of %s memory for activations of %d tokens", ops->name, max_tokens);
    }
    return 0;
}

void llama_free(llama_model_t *m) {
    if (!m->ops) return;
    void *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->attn, m->gate, m->up, m->rows};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) m->ops->free(m->ops->ctx, bufs[i]);
    weights_free(&m->w, m->ops);
    memset(m, 0, sizeof *m);
}

size_t kv_cache_block_bytes(const model_config_t *cfg, int64_t block_size, sl_dtype_t dt) {
    return 2 * (size_t)cfg->n_layers * (size_t)cfg->n_kv_heads * (size_t)cfg->head_dim *
           (size_t)block_size * dtype_size(dt);
}

void llama_forward(llama_model_t *m, const llama_inputs_t *in, const kv_cache_t *kv, float *logits,
                   bool logits_on_device) {
    const sl_ops_t *o = m->ops;
    const model_config_t *c = &m->cfg;
    void *ctx = o->ctx;
    const sl_attn_meta_t *meta = &in->meta;
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

    o->embed(ctx, m->x, &m->w.embed, in->token_ids, T);
    for (int64_t l = 0; l < c->n_layers; l++) {
        const llama_layer_t *ly = &m->w.layers[l];
        if (l == 0 || !fuse_norm) o->rmsnorm(ctx, m->h, m->x, &ly->input_norm, T, eps);
        o->linear(ctx, m->q, m->h, &ly->q, T);
        o->linear(ctx, m->k, m->h, &ly->k, T);
        o->linear(ctx, m->v, m->h, &ly->v, T);
        if (o->rope_kv_write) {
            o->rope_kv_write(ctx, m->q, m->k, m->v, kv->k[l], kv->v[l], meta->positions,
                             in->slot_mapping, T, H, Hkv, D, (float)c->rope_theta,
                             (float)c->rope_scaling_factor);
        } else {
            o->rope(ctx, m->q, m->k, meta->positions, T, H, Hkv, D, (float)c->rope_theta,
                    (float)c->rope_scaling_factor);
            o->kv_write(ctx, kv->k[l], kv->v[l], m->k, m->v, in->slot_mapping, T, Hkv, D);
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
    int32_t n_logits = in->n_logits;
    if (n_logits == 0) return;
    o->gather_rows(ctx, m->rows, m->x, in->logits_index, n_logits, hid);
    o->rmsnorm(ctx, m->rows, m->rows, &m->w.norm, n_logits, eps);
    if (logits_on_device)
        o->logits_device(ctx, logits, m->rows, &m->w.lm_head, n_logits);
    else
        o->logits(ctx, logits, m->rows, &m->w.lm_head, n_logits);
}

