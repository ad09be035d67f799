/* ops_cpu.c - the elementwise and row-wise CPU reference ops (see ops_cpu.h).
 *
 * Conversions round to nearest even, like PyTorch's .to(). RoPE computes its
 * angles the way transformers' LlamaRotaryEmbedding does (fp32 inverse
 * frequencies, fp32 angle = position * inv_freq), so that our logits match
 * Hugging Face's to ~1e-6 rather than drifting at long positions.
 */
#include "ops_cpu.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "servelab/core.h"
#include "vec_exp.h"

typedef struct {
    float *out;
    const void *table;
    sl_dtype_t dt;
    int64_t n;
    const int32_t *ids;
    int64_t vocab0, n_rows;
} embed_args_t;

static void embed_rows(void *arg, int64_t t0, int64_t t1, int worker) {
    (void)worker;
    const embed_args_t *a = arg;
    size_t row_bytes = (size_t)a->n * dtype_size(a->dt);
    for (int64_t t = t0; t < t1; t++) {
        int64_t row = (int64_t)a->ids[t] - a->vocab0;
        if (row < 0 || row >= a->n_rows) memset(a->out + t * a->n, 0, (size_t)a->n * sizeof(float));
        else dtype_to_f32(a->out + t * a->n, (const uint8_t *)a->table + (size_t)row * row_bytes, a->dt, a->n);
    }
}

void cpu_embed(float *out, const void *table, sl_dtype_t dt, int64_t n, const int32_t *ids,
               int64_t T) {
    cpu_embed_shard(out, table, dt, n, ids, T, 0, INT64_MAX);
}

void cpu_embed_shard(float *out, const void *table, sl_dtype_t dt, int64_t n, const int32_t *ids, int64_t T,
                     int64_t vocab0, int64_t n_rows) {
    embed_args_t a = {out, table, dt, n, ids, vocab0, n_rows};
    cpu_parallel_for(T * n, T, 0, embed_rows, &a);
}

typedef struct {
    float *out;
    const float *in;
    const void *w;
    sl_dtype_t dt;
    int64_t n;
    float eps;
} rmsnorm_args_t;

static void rmsnorm_rows(void *arg, int64_t t0, int64_t t1, int worker) {
    (void)worker;
    const rmsnorm_args_t *a = arg;
    int64_t n = a->n;
    for (int64_t t = t0; t < t1; t++) {
        const float *x = a->in + t * n;
        float *y = a->out + t * n;
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)n + a->eps);
        for (int64_t i = 0; i < n; i++) {
            float wi = a->dt == DTYPE_F32    ? ((const float *)a->w)[i]
                       : a->dt == DTYPE_BF16 ? bf16_to_f32(((const uint16_t *)a->w)[i])
                                             : f16_to_f32(((const uint16_t *)a->w)[i]);
            y[i] = wi * (x[i] * r);
        }
    }
}

void cpu_rmsnorm(float *out, const float *in, const void *w, sl_dtype_t dt, int64_t T, int64_t n,
                 float eps) {
    rmsnorm_args_t a = {out, in, w, dt, n, eps};
    cpu_parallel_for(T * n, T, 0, rmsnorm_rows, &a);
}

/* The angles' cos and sin, per token: a step rotates with the same positions
 * in every layer, so each calling thread keeps the rows of the last positions
 * it was given (the key: the positions, D, theta and scale) and computes them
 * again only when those change. The values are the same either way. */
typedef struct {
    float theta, scale;
    int64_t D, n;      /* the rows held */
    int64_t cap_rows, cap_cs; /* allocated: positions, floats of cs */
    int32_t *pos;      /* n */
    float *cs;         /* n rows of D: cos of the half angles, then their sin */
} rope_memo_t;

static pthread_key_t rope_memo_key;
static pthread_once_t rope_memo_once = PTHREAD_ONCE_INIT;

static void rope_memo_free(void *p) {
    rope_memo_t *m = p;
    free(m->pos), free(m->cs), free(m);
}
static void rope_memo_key_init(void) { SL_ASSERT(pthread_key_create(&rope_memo_key, rope_memo_free) == 0); }

static rope_memo_t *rope_memo(void) {
    pthread_once(&rope_memo_once, rope_memo_key_init);
    rope_memo_t *m = pthread_getspecific(rope_memo_key);
    if (!m) {
        m = sl_malloc(sizeof *m);
        memset(m, 0, sizeof *m);
        SL_ASSERT(pthread_setspecific(rope_memo_key, m) == 0);
    }
    return m;
}

typedef struct {
    float *q, *k;
    const int32_t *positions;
    int64_t H, Hkv, D;
    float theta, scale;
    float *cs;    /* per token, cos then sin (rope_memo_t) */
    bool fresh;   /* cs holds these positions already */
} rope_args_t;

static void rope_rows(void *arg, int64_t t0, int64_t t1, int worker) {
    (void)worker;
    const rope_args_t *a = arg;
    int64_t H = a->H, Hkv = a->Hkv, D = a->D, half = D / 2;
    for (int64_t t = t0; t < t1; t++) {
        float *cs = a->cs + t * D;
        if (!a->fresh) {
            float pos = (float)a->positions[t];
            for (int64_t i = 0; i < half; i++) {
                /* transformers: inv_freq = 1 / base^(arange(0, D, 2) / D) in fp32,
                 * divided by the linear scaling factor; angle = pos * inv_freq. */
                float inv_freq = (float)(1.0 / pow((double)a->theta, (double)(2 * i) / (double)D));
                inv_freq /= a->scale;
                float angle = pos * inv_freq;
                cs[i] = (float)cos((double)angle), cs[half + i] = (float)sin((double)angle);
            }
        }
        for (int64_t h = 0; h < H + Hkv; h++) {
            float *x = h < H ? a->q + (t * H + h) * D : a->k + (t * Hkv + (h - H)) * D;
            for (int64_t i = 0; i < half; i++) {
                float c = cs[i], s = cs[half + i], x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c - x2 * s;
                x[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

void cpu_rope(float *q, float *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv,
              int64_t D, float theta, float scale) {
    if (T <= 0) return;
    rope_memo_t *m = rope_memo();
    bool fresh = m->n == T && m->D == D && m->theta == theta && m->scale == scale &&
                 memcmp(m->pos, positions, (size_t)T * sizeof *positions) == 0;
    if (!fresh) {
        if (T > m->cap_rows) {
            free(m->pos);
            m->pos = sl_malloc((size_t)T * sizeof *m->pos);
            m->cap_rows = T;
        }
        if (T * D > m->cap_cs) {
            free(m->cs);
            m->cs = sl_malloc((size_t)(T * D) * sizeof *m->cs);
            m->cap_cs = T * D;
        }
        m->n = T, m->D = D, m->theta = theta, m->scale = scale;
        memcpy(m->pos, positions, (size_t)T * sizeof *positions);
    }
    rope_args_t a = {q, k, positions, H, Hkv, D, theta, scale, m->cs, fresh};
    cpu_parallel_for(T * (D / 2) * (H + Hkv) * 8, T, 0, rope_rows, &a);
}

void cpu_kv_write(float *kc, float *vc, const float *k, const float *v,
                  const int64_t *slot_mapping, int64_t T, int64_t Hkv, int64_t D) {
    cpu_kv_write_dt(kc, vc, DTYPE_F32, KV_SLOT_MAJOR, 1, k, v, slot_mapping, T, Hkv, D);
}

void cpu_kv_write_dt(void *kc, void *vc, sl_dtype_t kv_dt, cpu_kv_layout_t layout, int64_t B, const float *k,
                     const float *v, const int64_t *slot_mapping, int64_t T, int64_t Hkv, int64_t D) {
    /* Slot-major: the token's Hkv rows are one run; head-major: Hkv runs of D. */
    const int64_t run = layout == KV_SLOT_MAJOR ? Hkv * D : D, n_runs = Hkv * D / run;
    const size_t row_bytes = (size_t)D * dtype_size(kv_dt);
    for (int64_t t = 0; t < T; t++) {
        int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        for (int64_t g = 0; g < n_runs; g++) {
            size_t dst = (size_t)cpu_kv_row(layout, slot, g, Hkv, B) * row_bytes, src = (size_t)(t * Hkv + g) * (size_t)D;
            dtype_from_f32((uint8_t *)kc + dst, k + src, kv_dt, run);
            dtype_from_f32((uint8_t *)vc + dst, v + src, kv_dt, run);
        }
    }
}

typedef struct {
    float *out;
    const float *g, *u;
} silu_mul_args_t;

/* silu(g) u = g / (1 + e^-g) u, e^x by exp_f32 (vec_exp.h) so that the loop
 * vectorizes: a decode step's 2048-wide MLP took 12 us in libm's expf, long
 * enough for the pool's workers to go to sleep and be woken for the next
 * linear. The same source per level, no FMA contraction: the same bits. */
#define SILU_MUL_LOOP(name, target)                                                   \
    target static void name(float *out, const float *g, const float *u, int64_t n) { \
        for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + exp_f32(-g[i])) * u[i]; \
    }
SILU_MUL_LOOP(silu_mul_portable, )
#ifdef HAVE_X86_LEVELS
SILU_MUL_LOOP(silu_mul_avx2, TARGET_AVX2)
SILU_MUL_LOOP(silu_mul_avx512, TARGET_512)
#endif

static void silu_mul_range(void *arg, int64_t i0, int64_t i1, int worker) {
    (void)worker;
    const silu_mul_args_t *a = arg;
    void (*loop)(float *, const float *, const float *, int64_t) = silu_mul_portable;
#ifdef HAVE_X86_LEVELS
    cpu_isa_t isa = cpu_isa();
    loop = isa >= CPU_ISA_AVX512 ? silu_mul_avx512 : isa == CPU_ISA_AVX2 ? silu_mul_avx2 : silu_mul_portable;
#endif
    loop(a->out + i0, a->g + i0, a->u + i0, i1 - i0);
}

void cpu_silu_mul(float *out, const float *g, const float *u, int64_t n) {
    silu_mul_args_t a = {out, g, u};
    cpu_parallel_for(n * 8, n, 0, silu_mul_range, &a);
}

typedef struct {
    float *x;
    const float *y;
} add_args_t;

static void add_range(void *arg, int64_t i0, int64_t i1, int worker) {
    (void)worker;
    const add_args_t *a = arg;
    for (int64_t i = i0; i < i1; i++) a->x[i] += a->y[i];
}

void cpu_add(float *x, const float *y, int64_t n) {
    add_args_t a = {x, y};
    cpu_parallel_for(n, n, 0, add_range, &a);
}

void cpu_gather_rows(float *out, const float *in, const int32_t *idx, int64_t S, int64_t n) {
    for (int64_t s = 0; s < S; s++)
        memmove(out + s * n, in + (int64_t)idx[s] * n, (size_t)n * sizeof(float));
}
