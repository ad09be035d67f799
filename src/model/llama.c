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
 * With tensor parallelism (docs/architecture.md, "Tensor parallelism") the
 * model is rank 0 of a group: every rank runs the same sequence on its
 * shard, on its own thread, with an all-reduce after the embedding, o_proj
 * and down_proj, and rank 0 assembles the logits.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/model.h"
#include "servelab/parallel.h"

static void *scratch(llama_model_t *m, size_t n_bytes, int *failed) {
    void *p = m->ops->alloc(m->ops->ctx, n_bytes);
    if (!p) *failed = 1;
    return p;
}

/* The other ranks of a tensor-parallel model, and the threads they run on. */
struct llama_tp {
    int size;
    int process_threads;    /* the process pool's size before it was shared out */
    llama_model_t *ranks;   /* (size) [0] unused: rank 0 is the caller's model */
    tp_group_t *group;
};

static void free_rank(llama_model_t *m) {
    if (!m->ops) return;
    void *bufs[] = {m->x, m->h, m->q, m->k, m->v, m->attn, m->gate, m->up, m->rows};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        if (bufs[i]) m->ops->free(m->ops->ctx, bufs[i]);
    free(m->logits_part);
    free(m->logits_all);
    weights_free(&m->w, m->ops);
    memset(m, 0, sizeof *m);
}

/* One rank's shard of the model: weights and scratch. */
static int init_rank(llama_model_t *m, const char *model_dir, const model_config_t *cfg, const tp_shard_t *shard,
                     const model_load_opts_t *opts, const sl_ops_t *ops, int32_t max_tokens, int32_t max_seqs,
                     sl_err_t *err) {
    memset(m, 0, sizeof *m);
    m->ops = ops;
    m->cfg = *cfg;
    m->shard = *shard;
    if (weights_load(model_dir, cfg, shard, ops, opts, &m->w, err)) return -1;
    const model_config_t *c = cfg;
    m->max_tokens = max_tokens;
    m->max_seqs = max_seqs;
    size_t a = dtype_size(ops->act_dtype), T = (size_t)max_tokens;
    size_t qd = (size_t)(shard->n_heads * c->head_dim), kvd = (size_t)(shard->n_kv_heads * c->head_dim);
    size_t width = (size_t)c->hidden_size > qd ? (size_t)c->hidden_size : qd;
    int failed = 0;
    m->x = scratch(m, T * (size_t)c->hidden_size * a, &failed);
    m->h = scratch(m, T * width * a, &failed);
    m->q = scratch(m, T * qd * a, &failed);
    m->k = scratch(m, T * kvd * a, &failed);
    m->v = scratch(m, T * kvd * a, &failed);
    m->attn = scratch(m, T * qd * a, &failed);
    m->gate = scratch(m, T * (size_t)shard->inter * a, &failed);
    m->up = scratch(m, T * (size_t)(shard->inter > c->hidden_size ? shard->inter : c->hidden_size) * a, &failed);
    m->rows = scratch(m, (size_t)max_seqs * (size_t)c->hidden_size * a, &failed);
    if (shard->size > 1) {
        m->logits_part = sl_malloc((size_t)max_seqs * (size_t)shard->vocab_per_rank * sizeof(float));
        if (shard->rank == 0 && !ops->host_memory)
            m->logits_all = sl_malloc((size_t)max_seqs * (size_t)c->vocab_size * sizeof(float));
    }
    if (failed) {
        free_rank(m);
        return sl_fail(err, "out of %s memory for activations of %d tokens", ops->name, max_tokens);
    }
    return 0;
}

/* The bits a decode step reads per weight of the AWQ linears: 4-bit values,
 * 4-bit zeros and fp16 scales per group (4 + 20/128 = 4.16 at group size 128). */
static double llama_awq_bits_per_weight(const llama_model_t *m) {
    double bits = 0.0, n = 0.0;
    for (int64_t l = 0; l < m->cfg.n_layers; l++) {
        const llama_layer_t *ly = &m->w.layers[l];
        const sl_weight_t *lin[] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
        for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
            if (!lin[i]->awq_group) continue;
            double w = (double)lin[i]->rows * (double)lin[i]->cols, groups = w / (double)lin[i]->awq_group;
            bits += 4.0 * w + 4.0 * groups + 16.0 * groups;
            n += w;
        }
    }
    return n > 0 ? bits / n : 0.0;
}

int llama_init(llama_model_t *m, const char *model_dir, const model_load_opts_t *opts,
               const sl_ops_t *ops, int32_t max_tokens, int32_t max_seqs, sl_err_t *err) {
    memset(m, 0, sizeof *m);
    int size = opts->tensor_parallel_size > 1 ? opts->tensor_parallel_size : 1;
    model_config_t cfg;
    tp_shard_t shard;
    if (config_load(model_dir, &cfg, err) || config_load_generation(model_dir, &cfg, err) ||
        tp_shard_plan(&cfg, 0, size, &shard, err)) {
        if (opts->comm) opts->comm->free(opts->comm);
        return -1;
    }
    if (opts->quantization && cfg.quant.method != QUANT_AWQ) {
        sl_fail(err, "Quantization method specified in the model config (None) does not match the quantization "
                "method specified in the `quantization` argument (%s).", opts->quantization);
        if (opts->comm) opts->comm->free(opts->comm);
        return -1;
    }
    /* Device ranks each need a backend of their own; host ones may share. */
    const sl_ops_t *ops0 = size > 1 && opts->rank_ops ? opts->rank_ops[0] : ops;
    SL_ASSERT(size == 1 || opts->rank_ops || ops->host_memory);
    double t0 = sl_now_s();
    if (init_rank(m, model_dir, &cfg, &shard, opts, ops0, max_tokens, max_seqs, err)) {
        if (opts->comm) opts->comm->free(opts->comm);
        return -1;
    }
    if (size > 1) {
        /* Ranks 1 .. size-1 load their shards here, on this thread, each with
         * its backend made current; every rank then runs on a share of the
         * CPU threads (rank 0 on the process pool, resized to its share). */
        llama_tp_t *tp = m->tp = sl_calloc(1, sizeof *tp);
        tp->size = size;
        tp->ranks = sl_calloc((size_t)size, sizeof *tp->ranks);
        tp->process_threads = parallel_n_threads();
        m->comm = opts->comm ? opts->comm : comm_local_new(size, (int64_t)max_tokens * cfg.hidden_size);
        for (int r = 1; r < size; r++) {
            tp_shard_t sr;
            SL_ASSERT(tp_shard_plan(&cfg, r, size, &sr, err) == 0);
            const sl_ops_t *ops_r = opts->rank_ops ? opts->rank_ops[r] : ops;
            if (ops_r->thread_init) ops_r->thread_init(ops_r->ctx);
            int rc = init_rank(&tp->ranks[r], model_dir, &cfg, &sr, opts, ops_r, max_tokens, max_seqs, err);
            if (ops0->thread_init) ops0->thread_init(ops0->ctx);
            if (rc) {
                llama_free(m);
                return -1;
            }
            tp->ranks[r].comm = m->comm;
        }
        int threads = tp->process_threads / size;
        if (threads < 1) threads = 1;
        parallel_set_threads(threads);
        tp->group = tp_group_new(size, threads);
        LOG_INFO("Tensor parallelism: %d ranks, threads of this process, %d CPU threads each; all-reduce through "
                 "the %s communicator; %lld query and %lld KV heads per rank%s", size, threads, m->comm->name,
                 (long long)shard.n_heads, (long long)shard.n_kv_heads,
                 shard.kv_head_replicas > 1 ? " (KV heads replicated)" : "");
    }
    double load_s = sl_now_s() - t0;
    if (cfg.quant.method == QUANT_AWQ)
        LOG_INFO("Quantization: awq (AutoAWQ GEMM, 4-bit, group size %d%s): the %s backend's W4A16 kernels, "
                 "%.2f bits per weight read", cfg.quant.group_size, cfg.quant.group_size == -1 ? ": whole inputs" : "",
                 ops0->name, llama_awq_bits_per_weight(m));
    /* vLLM's warning for its plain awq kernels, and true of ours on a device: past
     * 32 rows a linear is dequantized for cuBLAS (cuda_backend.c), more bytes
     * than bf16 moves (0.57x bf16 at 64 concurrent requests on an H100,
     * docs/gpu-results.md). The CPU's batched W4 kernel is not slower than its bf16. */
    if (cfg.quant.method == QUANT_AWQ && !ops0->host_memory)
        LOG_WARNING("awq quantization is not fully optimized yet. The speed can be slower than non-quantized "
                    "models.");
    LOG_INFO("Loading weights took %.2f seconds", load_s);
    LOG_INFO("Model loading took %.4f GiB and %.6f seconds", (double)m->w.n_bytes / (1024.0 * 1024.0 * 1024.0),
             load_s);
    return 0;
}

void llama_free(llama_model_t *m) {
    if (!m->ops) return;
    llama_tp_t *tp = m->tp;
    if (tp) {
        tp_group_free(tp->group);
        for (int r = 1; r < tp->size; r++) {
            const sl_ops_t *o = tp->ranks[r].ops;
            if (o && o->thread_init) o->thread_init(o->ctx);
            free_rank(&tp->ranks[r]);
        }
        if (m->ops->thread_init) m->ops->thread_init(m->ops->ctx);
        free(tp->ranks);
        parallel_set_threads(tp->process_threads);
        free(tp);
    }
    if (m->comm) m->comm->free(m->comm);
    free_rank(m);
}

size_t llama_kv_block_bytes(const llama_model_t *m, int64_t block_size) {
    return 2 * (size_t)m->cfg.n_layers * (size_t)m->shard.n_kv_heads * (size_t)m->cfg.head_dim *
           (size_t)block_size * dtype_size(m->ops->kv_dtype);
}

const sl_ops_t *llama_rank_ops(const llama_model_t *m, int rank) {
    return rank == 0 ? m->ops : m->tp->ranks[rank].ops;
}

void llama_rank_select(const llama_model_t *m, int rank) {
    const sl_ops_t *o = llama_rank_ops(m, rank);
    if (o->thread_init) o->thread_init(o->ctx);
}

int llama_last_error(const llama_model_t *m, char *msg, size_t cap) {
    int worst = 0;
    int n = m->tp ? m->tp->size : 1;
    for (int r = 0; r < n; r++) {
        const sl_ops_t *o = llama_rank_ops(m, r);
        char this_msg[SL_ERR_LEN];
        int rc = o->last_error ? o->last_error(o->ctx, this_msg, sizeof this_msg) : 0;
        if (rc && !worst) snprintf(msg, cap, "%s%s", n > 1 ? (r ? "a tensor-parallel rank: " : "") : "", this_msg);
        if (rc > worst) worst = rc;
    }
    char comm_msg[SL_ERR_LEN];
    if (m->comm && m->comm->last_error && m->comm->last_error(m->comm, comm_msg, sizeof comm_msg)) {
        if (!worst) snprintf(msg, cap, "%s", comm_msg);
        worst = 2; /* a failed collective leaves the ranks out of step for good */
    }
    return worst;
}

size_t llama_weight_bytes(const llama_model_t *m) {
    size_t n = m->w.n_bytes;
    for (int r = 1; m->tp && r < m->tp->size; r++) n += m->tp->ranks[r].w.n_bytes;
    return n;
}

bool llama_set_allreduce_delay(llama_model_t *m, double ms, double gbps) {
    if (!m->comm) return false;
    m->comm->delay_s = ms / 1000.0;
    m->comm->delay_gbps = gbps;
    return true;
}

int64_t llama_allreduces_per_step(const llama_model_t *m) { return m->comm ? 2 * m->cfg.n_layers + 1 : 0; }

double llama_take_allreduce_s(llama_model_t *m) { return m->comm ? comm_take_reduce_s(m->comm) : 0.0; }

/* A row-parallel output (o_proj, down_proj, the embedding's shard) summed over the ranks. */
static void all_reduce(const llama_model_t *m, void *buf, int64_t n) {
    if (m->comm) m->comm->all_reduce_sum(m->comm, m->shard.rank, buf, n, m->ops->act_dtype);
}

/* Each rank's logits over its vocabulary rows, assembled on rank 0: every
 * rank computes its (S, n_vocab) into host memory (ops->logits), and after a
 * barrier rank 0 copies each rank's columns into (S, V) straight from the
 * ranks' buffers (the ranks are threads of this process). On a device
 * backend the assembled rows then go to `logits` in rank 0's memory, where
 * its sampler reads them. No rank writes its part again before the next
 * step, which starts after rank 0 is done here. */
static void sharded_logits(llama_model_t *m, float *logits, int32_t S, bool logits_on_device) {
    const tp_shard_t *s = &m->shard;
    int64_t V = m->cfg.vocab_size;
    if (s->n_vocab > 0) m->ops->logits(m->ops->ctx, m->logits_part, m->rows, &m->w.lm_head, S);
    m->comm->barrier(m->comm, s->rank);
    if (s->rank != 0) return;
    float *dst = logits_on_device ? m->logits_all : logits;
    for (int r = 0; r < s->size; r++) {
        const llama_model_t *mr = r == 0 ? m : &m->tp->ranks[r];
        int64_t v0 = mr->shard.vocab0, nv = mr->shard.n_vocab;
        for (int32_t i = 0; i < S; i++)
            memcpy(dst + (size_t)i * (size_t)V + (size_t)v0, mr->logits_part + (size_t)i * (size_t)nv,
                   (size_t)nv * sizeof(float));
    }
    if (logits_on_device) m->ops->upload(m->ops->ctx, logits, dst, (size_t)S * (size_t)V * sizeof(float));
}

/* Linears of one input: one op where the backend has it (ops.h). */
static void linears(const sl_ops_t *o, int n, void *const *outs, const void *in, const sl_weight_t *const *ws,
                    int64_t T) {
    if (o->linears) {
        o->linears(o->ctx, n, outs, in, ws, T);
        return;
    }
    for (int i = 0; i < n; i++) o->linear(o->ctx, outs[i], in, ws[i], T);
}

static void forward_rank(llama_model_t *m, const llama_inputs_t *in, const kv_cache_t *kv, float *logits,
                         bool logits_on_device) {
    const sl_ops_t *o = m->ops;
    const model_config_t *c = &m->cfg;
    const tp_shard_t *sh = &m->shard;
    void *ctx = o->ctx;
    const sl_attn_meta_t *meta = &in->meta;
    int64_t T = meta->n_tokens, H = sh->n_heads, Hkv = sh->n_kv_heads, D = c->head_dim;
    int64_t hid = c->hidden_size, inter = sh->inter;
    float eps = (float)c->rms_norm_eps, scale = 1.0f / sqrtf((float)D);
    void *const *kc = kv->k + (size_t)sh->rank * (size_t)kv->n_layers;
    void *const *vc = kv->v + (size_t)sh->rank * (size_t)kv->n_layers;

    /* Fused ops (device backends) fold each sub-layer's residual add into the
     * norm that follows it, and rope into the KV write. The residual branch
     * then needs a (T, hidden) output apart from h: `up` (T, intermediate) is
     * free at both points (before the MLP writes it, after silu_mul read it).
     * Without fused ops (CPU: the reference) y is h and the sequence is the
     * plain one: linear into h, add, rmsnorm. With several ranks, o_proj's
     * and down_proj's outputs are each rank's partial sums: all-reduced
     * before the residual add. */
    bool fuse_norm = o->add_rmsnorm != NULL && inter >= hid;
    void *y = fuse_norm ? m->up : m->h;

    o->embed(ctx, m->x, &m->w.embed, in->token_ids, T, sh->vocab0);
    all_reduce(m, m->x, T * hid);
    for (int64_t l = 0; l < c->n_layers; l++) {
        const llama_layer_t *ly = &m->w.layers[l];
        if (l == 0 || !fuse_norm) o->rmsnorm(ctx, m->h, m->x, &ly->input_norm, T, eps);
        linears(o, 3, (void *[]){m->q, m->k, m->v}, m->h, (const sl_weight_t *[]){&ly->q, &ly->k, &ly->v}, T);
        if (o->rope_kv_write) {
            o->rope_kv_write(ctx, m->q, m->k, m->v, kc[l], vc[l], meta->positions, in->slot_mapping, T, H, Hkv, D,
                             (float)c->rope_theta, (float)c->rope_scaling_factor, kv->block_size);
        } else {
            o->rope(ctx, m->q, m->k, meta->positions, T, H, Hkv, D, (float)c->rope_theta,
                    (float)c->rope_scaling_factor);
            o->kv_write(ctx, kc[l], vc[l], m->k, m->v, in->slot_mapping, T, Hkv, D, kv->block_size);
        }
        o->attention(ctx, m->attn, m->q, kc[l], vc[l], meta, H, Hkv, D, kv->block_size, scale);
        o->linear(ctx, y, m->attn, &ly->o, T);
        all_reduce(m, y, T * hid);
        if (fuse_norm) {
            o->add_rmsnorm(ctx, m->x, m->h, y, &ly->post_norm, T, eps);
        } else {
            o->add(ctx, m->x, y, T * hid);
            o->rmsnorm(ctx, m->h, m->x, &ly->post_norm, T, eps);
        }
        linears(o, 2, (void *[]){m->gate, m->up}, m->h, (const sl_weight_t *[]){&ly->gate, &ly->up}, T);
        o->silu_mul(ctx, m->gate, m->gate, m->up, T * inter);
        o->linear(ctx, y, m->gate, &ly->down, T);
        all_reduce(m, y, T * hid);
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
    if (m->comm)
        sharded_logits(m, logits, n_logits, logits_on_device);
    else if (logits_on_device)
        o->logits_device(ctx, logits, m->rows, &m->w.lm_head, n_logits);
    else
        o->logits(ctx, logits, m->rows, &m->w.lm_head, n_logits);
}

typedef struct {
    llama_model_t *m;
    const llama_inputs_t *in;
    const kv_cache_t *kv;
    float *logits;
    bool logits_on_device;
} tp_step_t;

/* One rank's forward: its backend made current on its thread (rank 0's is
 * the engine thread's already), its own copy of the inputs where it has one. */
static void tp_step_rank(void *arg, int rank) {
    const tp_step_t *s = arg;
    llama_model_t *m = rank == 0 ? s->m : &s->m->tp->ranks[rank];
    if (rank != 0 && m->ops->thread_init) m->ops->thread_init(m->ops->ctx);
    const llama_inputs_t *in = s->in->rank_in ? &s->in->rank_in[rank] : s->in;
    forward_rank(m, in, s->kv, rank == 0 ? s->logits : NULL, s->logits_on_device);
}

void llama_forward(llama_model_t *m, const llama_inputs_t *in, const kv_cache_t *kv, float *logits,
                   bool logits_on_device) {
    if (!m->tp) {
        forward_rank(m, in, kv, logits, logits_on_device);
        return;
    }
    SL_ASSERT(kv->n_ranks == m->tp->size);
    tp_step_t s = {m, in, kv, logits, logits_on_device};
    tp_run(m->tp->group, tp_step_rank, &s);
}
