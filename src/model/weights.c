/* weights.c - checkpoint tensors to backend weights, every name and shape checked.
 *
 * On a host-memory backend with --dtype auto, weights are used in place in the
 * safetensors mapping (zero copy); the pages are touched once at load so the
 * first request does not pay for disk reads. Otherwise each tensor is
 * converted to the requested dtype and copied to the backend. --load-format
 * dummy (as in vLLM) builds random weights of the config's shapes instead,
 * scaled so the next-token distribution is peaked rather than flat, which is
 * what GPU benchmarks of large shapes use. Unknown extra tensors are ignored
 * with one warning (old checkpoints carry rotary_emb.inv_freq buffers).
 */
#define _DEFAULT_SOURCE
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "servelab/dtype.h"
#include "servelab/model.h"
#include "servelab/parallel.h"

int load_format_parse(const char *s) {
    if (!strcmp(s, "auto")) return LOAD_FORMAT_AUTO;
    if (!strcmp(s, "safetensors")) return LOAD_FORMAT_SAFETENSORS;
    if (!strcmp(s, "dummy")) return LOAD_FORMAT_DUMMY;
    return -1;
}

int dtype_parse(const char *s, sl_dtype_t *dt, bool *auto_out) {
    *auto_out = false;
    if (!strcmp(s, "auto")) *auto_out = true;
    else if (!strcmp(s, "half") || !strcmp(s, "float16")) *dt = DTYPE_F16;
    else if (!strcmp(s, "bfloat16")) *dt = DTYPE_BF16;
    else if (!strcmp(s, "float") || !strcmp(s, "float32")) *dt = DTYPE_F32;
    else return -1;
    return 0;
}

/* Progress on stderr, shown only once loading has taken more than a second. */
typedef struct {
    double t0;
    int64_t total, done;
    bool enabled, shown;
} progress_t;

static void progress_step(progress_t *p, int64_t n) {
    p->done += n;
    if (!p->enabled) return;
    double el = sl_now_s() - p->t0;
    if (!p->shown && el < 1.0) return;
    p->shown = true;
    int pct = p->total ? (int)(100 * p->done / p->total) : 100;
    double eta = p->done ? el * (double)(p->total - p->done) / (double)p->done : 0.0;
    char bar[21];
    for (int i = 0; i < 20; i++) bar[i] = i < pct / 5 ? '#' : ' ';
    bar[20] = '\0';
    fprintf(stderr, "\rLoading weights: %3d%%|%s| %lld/%lld tensors [%02d:%02d<%02d:%02d]", pct,
            bar, (long long)p->done, (long long)p->total, (int)el / 60, (int)el % 60,
            (int)eta / 60, (int)eta % 60);
    if (p->done == p->total) fputc('\n', stderr);
}

typedef struct {
    const char *model_dir;
    const model_config_t *cfg;
    const sl_ops_t *ops;
    const model_load_opts_t *opts;
    llama_weights_t *w;
    progress_t progress;
    int n_used;
    int64_t dummy_index;
} loader_t;

static void own(llama_weights_t *w, void *p) {
    w->owned = sl_realloc(w->owned, (size_t)(w->n_owned + 1) * sizeof *w->owned);
    w->owned[w->n_owned++] = p;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Fills n elements uniformly in [-a, a) (std a/sqrt(3)), plus `offset`;
 * a pure function of (seed, tensor index, element index), so the chunks of
 * 4096 elements are filled in parallel (Llama-3-8B's 8 G elements take
 * seconds, not a minute, on a many-core host). */
typedef struct {
    void *dst;
    sl_dtype_t dt;
    int64_t n;
    uint64_t base;
    float a, offset;
} dummy_fill_t;

#define DUMMY_CHUNK 4096

static void fill_dummy_chunks(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const dummy_fill_t *f = arg;
    float buf[DUMMY_CHUNK];
    for (int64_t chunk = begin; chunk < end; chunk++) {
        int64_t c = chunk * DUMMY_CHUNK, m = f->n - c < DUMMY_CHUNK ? f->n - c : DUMMY_CHUNK;
        for (int64_t i = 0; i < m; i++) {
            double u = (double)(splitmix64(f->base + (uint64_t)(c + i)) >> 11) * 0x1.0p-53;
            buf[i] = f->offset + f->a * (float)(2.0 * u - 1.0);
        }
        dtype_from_f32((uint8_t *)f->dst + (size_t)c * dtype_size(f->dt), buf, f->dt, m);
    }
}

static void fill_dummy(void *dst, sl_dtype_t dt, int64_t n, uint64_t seed, int64_t index,
                       float std, float offset) {
    dummy_fill_t f = {.dst = dst, .dt = dt, .n = n, .a = std * sqrtf(3.0f), .offset = offset,
                      .base = splitmix64(seed ^ splitmix64((uint64_t)index))};
    parallel_for((n + DUMMY_CHUNK - 1) / DUMMY_CHUNK, 0, fill_dummy_chunks, &f);
}

/* Moves a host buffer of weights to the backend (or keeps it on host memory). */
static const void *to_backend(loader_t *L, void *host, size_t n_bytes, sl_err_t *err) {
    if (L->ops->host_memory) {
        own(L->w, host);
        return host;
    }
    void *dev = L->ops->alloc(L->ops->ctx, n_bytes);
    if (!dev) {
        free(host);
        sl_fail(err, "out of %s memory loading weights (%zu bytes more)", L->ops->name, n_bytes);
        return NULL;
    }
    L->ops->upload(L->ops->ctx, dev, host, n_bytes);
    free(host);
    own(L->w, dev);
    return dev;
}

static sl_dtype_t target_dtype(const loader_t *L, sl_dtype_t stored) {
    return L->opts->dtype_auto ? stored : L->opts->dtype;
}

/* The part of a (rows, cols) tensor one rank holds: rows [r0, r0 + nr) of
 * columns [c0, c0 + nc). */
typedef struct {
    int64_t r0, nr, c0, nc;
} part_t;

/* Copies `part` of the (rows, cols) tensor src (dtype from) to dst in dtype
 * to, row by row. */
static void copy_part(void *dst, sl_dtype_t to, const void *src, sl_dtype_t from, int64_t cols, const part_t *part) {
    size_t fs = dtype_size(from), ts = dtype_size(to);
    float *tmp = from == to ? NULL : sl_malloc((size_t)part->nc * sizeof(float));
    for (int64_t r = 0; r < part->nr; r++) {
        const uint8_t *in = (const uint8_t *)src + ((size_t)(part->r0 + r) * (size_t)cols + (size_t)part->c0) * fs;
        uint8_t *out = (uint8_t *)dst + (size_t)r * (size_t)part->nc * ts;
        if (!tmp) {
            memcpy(out, in, (size_t)part->nc * fs);
        } else {
            dtype_to_f32(tmp, in, from, part->nc);
            dtype_from_f32(out, tmp, to, part->nc);
        }
    }
    free(tmp);
}

/* Loads `part` (NULL: all) of one weight of shape (rows, cols), or (cols)
 * when rows == 0. The whole tensor is checked (and, for dummy weights,
 * generated) so that every rank's part is cut from the same values. */
static int load(loader_t *L, const char *name, int64_t rows, int64_t cols, float dummy_std,
                float dummy_offset, const part_t *part, sl_weight_t *out, sl_err_t *err) {
    int64_t shape[2] = {rows, cols};
    int n_dims = rows ? 2 : 1;
    const int64_t *sh = rows ? shape : shape + 1;
    int64_t R = rows ? rows : 1;
    part_t whole = {0, R, 0, cols};
    if (!part) part = &whole;
    out->rows = part->nr;
    out->cols = part->nc;
    int64_t n = part->nr * part->nc;
    bool is_whole = part->nr == R && part->nc == cols;

    const void *src;
    sl_dtype_t src_dt;
    void *dummy = NULL;
    bool aligned = true;
    if (L->opts->load_format == LOAD_FORMAT_DUMMY) {
        src_dt = target_dtype(L, L->cfg->torch_dtype);
        dummy = sl_malloc((size_t)(R * cols) * dtype_size(src_dt));
        fill_dummy(dummy, src_dt, R * cols, L->opts->seed, L->dummy_index++, dummy_std, dummy_offset);
        src = dummy;
    } else {
        const st_tensor_t *t = st_expect(&L->w->archive, name, n_dims, sh, err);
        if (!t) return -1;
        if (t->dtype != DTYPE_F32 && t->dtype != DTYPE_F16 && t->dtype != DTYPE_BF16)
            return sl_fail(err, "%s: tensor %s: dtype %s is not a floating-point weight",
                           L->w->archive.file_names[t->file_index], name, dtype_name(t->dtype));
        L->n_used++;
        src = t->data;
        src_dt = t->dtype;
        /* safetensors only promises the data section starts after the header: a
         * tensor that is not aligned to its element size is copied, not aliased. */
        aligned = (uintptr_t)t->data % dtype_size(t->dtype) == 0;
    }
    sl_dtype_t dt = target_dtype(L, src_dt);
    out->dtype = dt;
    size_t n_bytes = (size_t)n * dtype_size(dt);
    L->w->n_bytes += n_bytes;

    if (dummy && is_whole) {
        if (!(out->data = to_backend(L, dummy, n_bytes, err))) return -1;
    } else if (!dummy && L->ops->host_memory && dt == src_dt && aligned && part->nc == cols) {
        /* In place (a block of whole rows is contiguous): fault the pages in
         * now rather than during the first request. */
        const uint8_t *p = (const uint8_t *)src + (size_t)(part->r0 * cols) * dtype_size(dt);
        madvise((void *)((uintptr_t)p & ~(uintptr_t)4095), n_bytes + 4096, MADV_WILLNEED);
        volatile uint8_t sink = 0;
        for (size_t off = 0; off < n_bytes; off += 4096) sink ^= p[off];
        (void)sink;
        out->data = p;
    } else {
        void *host = sl_malloc(n_bytes ? n_bytes : 1);
        copy_part(host, dt, src, src_dt, cols, part);
        free(dummy);
        if (!(out->data = to_backend(L, host, n_bytes, err))) return -1;
    }
    progress_step(&L->progress, 1);
    return 0;
}

/* Dummy AWQ tensors (--load-format dummy) of a Linear whose dequantized
 * weights should have standard deviation `std`: every nibble of qweight
 * uniform in 0..15, zeros in 6..9 (AutoAWQ's asymmetric zeros sit near 8 for
 * weights centred on 0), and scales uniform in [0.5, 1.5] x std / 4.6 (the
 * standard deviation of q - z is about 4.6). A pure function of (seed,
 * tensor index, element index), as fill_dummy. */
typedef struct {
    uint8_t *dst;
    sl_dtype_t dt; /* I32: qweight, or qzeros when `zeros`; F16: scales */
    bool zeros;
    int64_t n;
    uint64_t base;
    float scale;
} awq_dummy_t;

static void fill_awq_dummy_chunks(void *arg, int64_t begin, int64_t end, int worker) {
    (void)worker;
    const awq_dummy_t *f = arg;
    for (int64_t chunk = begin; chunk < end; chunk++) {
        int64_t c = chunk * DUMMY_CHUNK, m = f->n - c < DUMMY_CHUNK ? f->n - c : DUMMY_CHUNK;
        for (int64_t i = c; i < c + m; i++) {
            uint64_t r = splitmix64(f->base + (uint64_t)i);
            if (f->dt == DTYPE_F16) {
                float v = f->scale * (0.5f + (float)((double)(r >> 11) * 0x1.0p-53));
                dtype_from_f32(f->dst + (size_t)i * 2, &v, DTYPE_F16, 1);
            } else {
                uint32_t q = (uint32_t)r;
                if (f->zeros) q = (q & 0x33333333u) + 0x66666666u; /* each nibble 6 + (0..3) */
                memcpy(f->dst + (size_t)i * 4, &q, 4);
            }
        }
    }
}

static void *awq_dummy(loader_t *L, const char *name, const int64_t shape[2], sl_dtype_t dt, float std) {
    awq_dummy_t f = {.dt = dt, .zeros = strstr(name, ".qzeros") != NULL, .n = shape[0] * shape[1],
                     .base = splitmix64(L->opts->seed ^ splitmix64((uint64_t)L->dummy_index++)),
                     .scale = std / 4.6f};
    f.dst = sl_malloc((size_t)f.n * dtype_size(dt) + 1);
    parallel_for((f.n + DUMMY_CHUNK - 1) / DUMMY_CHUNK, 0, fill_awq_dummy_chunks, &f);
    return f.dst;
}

/* An AWQ tensor of `shape`, checked whole (shape and dtype), and the block
 * `part` of its own (rows, cols) grid that this rank holds (NULL: all): in
 * place when that is whole rows and the backend reads host memory (the
 * checkpoint's bytes are what the kernels' packed copy is made from), else
 * copied, to the backend. With --load-format dummy, made by awq_dummy for a
 * Linear of weight standard deviation `dummy_std`. NULL with err. */
static const void *load_awq_part(loader_t *L, const char *name, const int64_t shape[2], sl_dtype_t want,
                                 const part_t *part, float dummy_std, sl_err_t *err) {
    part_t whole = {0, shape[0], 0, shape[1]};
    if (!part) part = &whole;
    size_t es = dtype_size(want), n_bytes = (size_t)(part->nr * part->nc) * es;
    L->w->n_bytes += n_bytes;
    progress_step(&L->progress, 1);
    if (L->opts->load_format == LOAD_FORMAT_DUMMY) {
        void *dummy = awq_dummy(L, name, shape, want, dummy_std), *host = dummy;
        if (part->nr != shape[0] || part->nc != shape[1]) {
            host = sl_malloc(n_bytes ? n_bytes : 1);
            copy_part(host, want, dummy, want, shape[1], part);
            free(dummy);
        }
        return to_backend(L, host, n_bytes, err);
    }
    const st_tensor_t *t = st_expect(&L->w->archive, name, 2, shape, err);
    if (!t) return NULL;
    if (t->dtype != want) {
        sl_fail(err, "%s: tensor %s: dtype %s, expected %s (AutoAWQ's GEMM format)",
                L->w->archive.file_names[t->file_index], name, dtype_name(t->dtype), dtype_name(want));
        return NULL;
    }
    L->n_used++;
    const uint8_t *rows = (const uint8_t *)t->data + (size_t)(part->r0 * shape[1]) * es;
    if (L->ops->host_memory && part->nc == shape[1] && (uintptr_t)t->data % es == 0) return rows;
    void *host = sl_malloc(n_bytes ? n_bytes : 1);
    copy_part(host, want, t->data, want, shape[1], part);
    return to_backend(L, host, n_bytes, err);
}

/* The AWQ linear `prefix` of shape (rows out, cols in), or the block `part`
 * of it this rank holds (NULL: all): prefix.qweight, .qzeros and .scales
 * (vLLM's AWQLinearMethod), in its checkpoint layout. A rank's block must
 * keep whole int32s of 8 output columns and whole groups of inputs, or it is
 * refused as vLLM refuses it. */
static int load_awq(loader_t *L, const char *prefix, int64_t rows, int64_t cols, float dummy_std,
                    const part_t *part, sl_weight_t *out, sl_err_t *err) {
    const char *file = L->w->archive.n_files ? L->w->archive.file_names[0] : L->model_dir;
    int64_t G = L->cfg->quant.group_size == -1 ? cols : L->cfg->quant.group_size;
    if (rows % 8)
        return sl_fail(err, "%s: %s: %lld output features, not a multiple of 8 (AWQ packs 8 to an int32)", file,
                       prefix, (long long)rows);
    if (cols % G)
        return sl_fail(err, "%s: %s: group_size %lld does not divide its %lld input features", file, prefix,
                       (long long)G, (long long)cols);
    part_t whole = {0, rows, 0, cols};
    const part_t *p = part ? part : &whole;
    if (p->r0 % 8 || p->nr % 8)
        return sl_fail(err, "%s: The output size is not aligned with the quantized weight shape. This can be caused "
                       "by too large tensor parallel size (%lld of its %lld output features per rank, not a "
                       "multiple of 8).", prefix, (long long)p->nr, (long long)rows);
    if (p->c0 % G || p->nc % G)
        return sl_fail(err, "%s: The input size is not aligned with the quantized weight shape. This can be caused "
                       "by too large tensor parallel size (%lld of its %lld input features per rank, group_size "
                       "%lld).", prefix, (long long)p->nc, (long long)cols, (long long)G);
    char name[300];
    int64_t qshape[2] = {cols, rows / 8}, zshape[2] = {cols / G, rows / 8}, sshape[2] = {cols / G, rows};
    part_t qpart = {p->c0, p->nc, p->r0 / 8, p->nr / 8}, zpart = {p->c0 / G, p->nc / G, p->r0 / 8, p->nr / 8};
    part_t spart = {p->c0 / G, p->nc / G, p->r0, p->nr};
    *out = (sl_weight_t){.dtype = DTYPE_I32, .rows = p->nr, .cols = p->nc, .awq_group = G};
    snprintf(name, sizeof name, "%s.qweight", prefix);
    if (!(out->data = load_awq_part(L, name, qshape, DTYPE_I32, &qpart, dummy_std, err))) return -1;
    snprintf(name, sizeof name, "%s.qzeros", prefix);
    if (!(out->qzeros = load_awq_part(L, name, zshape, DTYPE_I32, &zpart, dummy_std, err))) return -1;
    snprintf(name, sizeof name, "%s.scales", prefix);
    if (!(out->scales = load_awq_part(L, name, sshape, DTYPE_F16, &spart, dummy_std, err))) return -1;
    if (L->ops->awq_repack) L->ops->awq_repack(L->ops->ctx, (void *)out->data, out->rows, out->cols);
    return 0;
}

/* The plain layout of a linear weight the backend now reads from its own
 * copy is released, unless something else reads it (the embedding, when the
 * LM head is tied to it): a buffer of ours is freed, pages of the mapped
 * checkpoint are dropped (they are the file's, and come back if touched). */
static void release_bytes(loader_t *L, const void **data, size_t n_bytes) {
    for (int i = 0; i < L->w->n_owned; i++) {
        if (L->w->owned[i] != *data) continue;
        free(L->w->owned[i]); /* host memory: pack hooks are for host-memory backends */
        L->w->owned[i] = L->w->owned[--L->w->n_owned];
        *data = NULL;
        return;
    }
    uintptr_t lo = ((uintptr_t)*data + 4095) & ~(uintptr_t)4095;
    uintptr_t hi = ((uintptr_t)*data + n_bytes) & ~(uintptr_t)4095;
    if (hi > lo) madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* An AWQ weight's three tensors (ops.h) are all in its packed copy. */
static void release_plain(loader_t *L, sl_weight_t *wt) {
    size_t n = (size_t)(wt->rows * wt->cols);
    if (!wt->awq_group) {
        release_bytes(L, &wt->data, n * dtype_size(wt->dtype));
        return;
    }
    size_t groups = (size_t)(wt->cols / wt->awq_group) * (size_t)wt->rows;
    release_bytes(L, &wt->data, n / 2);
    release_bytes(L, &wt->qzeros, groups / 2);
    release_bytes(L, &wt->scales, groups * 2);
}

#define HUGE_PAGE ((size_t)2 << 20)

/* The backend's copies of every linear weight (ops->pack_linear), in one
 * arena of 2 MB pages (MADV_HUGEPAGE, asked before the pages are first
 * touched): decode reads all of it once per token, and the TLB misses of 4
 * KB pages cost a third of a GEMV's bandwidth. */
static int pack_linears(loader_t *L, sl_err_t *err) {
    if (!L->ops->packed_bytes) return 0;
    llama_weights_t *w = L->w;
    int64_t n = 7 * L->cfg->n_layers + 1;
    sl_weight_t **lin = sl_malloc((size_t)n * sizeof *lin);
    for (int64_t i = 0; i < L->cfg->n_layers; i++) {
        llama_layer_t *ly = &w->layers[i];
        sl_weight_t *l7[] = {&ly->q, &ly->k, &ly->v, &ly->o, &ly->gate, &ly->up, &ly->down};
        memcpy(lin + 7 * i, l7, sizeof l7);
    }
    lin[n - 1] = &w->lm_head;
    size_t total = 0;
    for (int64_t i = 0; i < n; i++) total += (L->ops->packed_bytes(L->ops->ctx, lin[i]) + 63) & ~(size_t)63;
    if (!total) {
        free(lin);
        return 0;
    }
    size_t arena_bytes = (total + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    void *arena = NULL;
    if (posix_memalign(&arena, HUGE_PAGE, arena_bytes) != 0) {
        free(lin);
        return sl_fail(err, "out of host memory for the packed linear weights (%zu bytes)", arena_bytes);
    }
    madvise(arena, arena_bytes, MADV_HUGEPAGE); /* advice: without THP, 4 KB pages */
    own(w, arena);
    w->n_packed_bytes = total;
    size_t off = 0;
    for (int64_t i = 0; i < n; i++) {
        size_t nb = L->ops->packed_bytes(L->ops->ctx, lin[i]);
        if (!nb) continue;
        L->ops->pack_linear(L->ops->ctx, lin[i], (uint8_t *)arena + off);
        lin[i]->packed = (uint8_t *)arena + off;
        off += (nb + 63) & ~(size_t)63;
        if (!(i == n - 1 && L->cfg->tie_word_embeddings)) release_plain(L, lin[i]);
    }
    free(lin);
    LOG_INFO("Linear weights copied for the %s backend's kernels: %.2f GiB", L->ops->name,
             (double)total / (1 << 30));
    return 0;
}

int weights_load(const char *model_dir, const model_config_t *cfg, const tp_shard_t *shard, const sl_ops_t *ops,
                 const model_load_opts_t *opts, llama_weights_t *w, sl_err_t *err) {
    memset(w, 0, sizeof *w);
    loader_t L = {.model_dir = model_dir, .cfg = cfg, .ops = ops, .opts = opts, .w = w};
    int64_t hid = cfg->hidden_size, inter = cfg->intermediate_size, V = cfg->vocab_size, D = cfg->head_dim;
    int64_t qd = cfg->n_heads * D, kvd = cfg->n_kv_heads * D;
    int64_t n_tensors = 2 + 9 * cfg->n_layers + (cfg->tie_word_embeddings ? 0 : 1);
    L.progress = (progress_t){.t0 = sl_now_s(), .total = n_tensors, .enabled = opts->progress};

    if (cfg->quant.method == QUANT_AWQ) {
        /* Where AWQ runs: the CPU kernels (on their packed copy) or CUDA's (on the checkpoint's tensors). */
        if (!ops->packed_bytes && !ops->awq_weights)
            return sl_fail(err, "%s: an AWQ checkpoint: the %s backend has no W4A16 kernels yet. Hint: run with "
                           "--device cpu", model_dir, ops->name);
        L.progress.total += 2 * 7 * cfg->n_layers; /* qweight, qzeros, scales for each linear */
    }
    if (opts->load_format != LOAD_FORMAT_DUMMY && st_open_dir(model_dir, &w->archive, err) != 0)
        return -1;
    w->layers = sl_calloc((size_t)cfg->n_layers, sizeof *w->layers);

    /* The rank's parts (tp.h): heads and MLP features as whole rows of the
     * column-parallel weights and as columns of the row-parallel ones. */
    const tp_shard_t *s = shard;
    part_t q_rows = {s->q_head0 * D, s->n_heads * D, 0, hid}, kv_rows = {s->kv_head0 * D, s->n_kv_heads * D, 0, hid};
    part_t o_cols = {0, hid, s->q_head0 * D, s->n_heads * D};
    part_t mlp_rows = {s->inter0, s->inter, 0, hid}, down_cols = {0, hid, s->inter0, s->inter};
    part_t vocab_rows = {s->vocab0, s->n_vocab, 0, hid};

    float s_hid = 1.0f / sqrtf((float)hid), s_q = 1.0f / sqrtf((float)qd);
    float s_inter = 1.0f / sqrtf((float)inter);
    char name[256];
    if (load(&L, "model.embed_tokens.weight", V, hid, 1.0f, 0.0f, &vocab_rows, &w->embed, err)) goto fail;
    for (int64_t i = 0; i < cfg->n_layers; i++) {
        llama_layer_t *ly = &w->layers[i];
        struct { const char *suffix; int64_t rows, cols; float std, off; const part_t *part; sl_weight_t *dst; } specs[] = {
            {"input_layernorm.weight", 0, hid, 0.05f, 1.0f, NULL, &ly->input_norm},
            {"self_attn.q_proj.weight", qd, hid, s_hid, 0.0f, &q_rows, &ly->q},
            {"self_attn.k_proj.weight", kvd, hid, s_hid, 0.0f, &kv_rows, &ly->k},
            {"self_attn.v_proj.weight", kvd, hid, s_hid, 0.0f, &kv_rows, &ly->v},
            {"self_attn.o_proj.weight", hid, qd, s_q, 0.0f, &o_cols, &ly->o},
            {"post_attention_layernorm.weight", 0, hid, 0.05f, 1.0f, NULL, &ly->post_norm},
            {"mlp.gate_proj.weight", inter, hid, s_hid, 0.0f, &mlp_rows, &ly->gate},
            {"mlp.up_proj.weight", inter, hid, s_hid, 0.0f, &mlp_rows, &ly->up},
            {"mlp.down_proj.weight", hid, inter, s_inter, 0.0f, &down_cols, &ly->down},
        };
        for (size_t j = 0; j < sizeof specs / sizeof specs[0]; j++) {
            snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)i, specs[j].suffix);
            /* "...q_proj.weight" -> the module "...q_proj", as modules_to_not_convert names it. */
            char module[256];
            snprintf(module, sizeof module, "%.*s", (int)(strlen(name) - strlen(".weight")), name);
            bool awq = specs[j].rows && strstr(name, "proj.weight") && config_linear_quantized(cfg, module);
            if (awq ? load_awq(&L, module, specs[j].rows, specs[j].cols, specs[j].std, specs[j].part, specs[j].dst, err)
                    : load(&L, name, specs[j].rows, specs[j].cols, specs[j].std, specs[j].off, specs[j].part,
                           specs[j].dst, err))
                goto fail;
        }
    }
    if (load(&L, "model.norm.weight", 0, hid, 0.05f, 1.0f, NULL, &w->norm, err)) goto fail;
    if (cfg->tie_word_embeddings) {
        w->lm_head = w->embed;
    } else if (load(&L, "lm_head.weight", V, hid, 4.0f * s_hid, 0.0f, &vocab_rows, &w->lm_head, err)) {
        goto fail;
    }
    if (pack_linears(&L, err)) goto fail;
    if (opts->load_format != LOAD_FORMAT_DUMMY && L.n_used < w->archive.n_tensors) {
        int tied_extra = cfg->tie_word_embeddings && st_find(&w->archive, "lm_head.weight");
        if (w->archive.n_tensors - L.n_used > tied_extra)
            LOG_WARNING("%s: %d tensors in the checkpoint are not used by the model", model_dir,
                        w->archive.n_tensors - L.n_used - tied_extra);
    }
    w->n_params = V * hid * (cfg->tie_word_embeddings ? 1 : 2) + hid +
                  cfg->n_layers * (2 * hid + 2 * qd * hid + 2 * kvd * hid + 3 * hid * inter);
    return 0;
fail:
    weights_free(w, ops);
    return -1;
}

void weights_free(llama_weights_t *w, const sl_ops_t *ops) {
    for (int i = 0; i < w->n_owned; i++) {
        if (ops->host_memory) free(w->owned[i]);
        else ops->free(ops->ctx, w->owned[i]);
    }
    free(w->owned);
    free(w->layers);
    st_close(&w->archive);
    memset(w, 0, sizeof *w);
}
