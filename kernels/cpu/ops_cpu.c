/* ops_cpu.c - the elementwise and row-wise CPU reference ops (see ops_cpu.h).
 *
 * Conversions round to nearest even, like PyTorch's .to(). RoPE computes its
 * angles the way transformers' LlamaRotaryEmbedding does (fp32 inverse
 * frequencies, fp32 angle = position * inv_freq), so that our logits match
 * Hugging Face's to ~1e-6 rather than drifting at long positions.
 */
#include "ops_cpu.h"

#include <math.h>

#include "servelab/core.h"

void cpu_embed(float *out, const void *table, sl_dtype_t dt, int64_t n, const int32_t *ids,
               int64_t T) {
    size_t row_bytes = (size_t)n * dtype_size(dt);
#pragma omp parallel for schedule(static) if (T * n >= CPU_PAR_MIN_WORK)
    for (int64_t t = 0; t < T; t++)
        dtype_to_f32(out + t * n, (const uint8_t *)table + (size_t)ids[t] * row_bytes, dt, n);
}

void cpu_rmsnorm(float *out, const float *in, const void *w, sl_dtype_t dt, int64_t T, int64_t n,
                 float eps) {
#pragma omp parallel for schedule(static) if (T * n >= CPU_PAR_MIN_WORK)
    for (int64_t t = 0; t < T; t++) {
        const float *x = in + t * n;
        float *y = out + t * n;
        float ss = 0.0f;
        for (int64_t i = 0; i < n; i++) ss += x[i] * x[i];
        float r = 1.0f / sqrtf(ss / (float)n + eps);
        for (int64_t i = 0; i < n; i++) {
            float wi = dt == DTYPE_F32    ? ((const float *)w)[i]
                       : dt == DTYPE_BF16 ? bf16_to_f32(((const uint16_t *)w)[i])
                                          : f16_to_f32(((const uint16_t *)w)[i]);
            y[i] = wi * (x[i] * r);
        }
    }
}

void cpu_rope(float *q, float *k, const int32_t *positions, int64_t T, int64_t H, int64_t Hkv,
              int64_t D, float theta, float scale) {
    int64_t half = D / 2;
#pragma omp parallel for schedule(static) if (T * half * (H + Hkv) * 8 >= CPU_PAR_MIN_WORK)
    for (int64_t t = 0; t < T; t++) {
        float pos = (float)positions[t];
        for (int64_t i = 0; i < half; i++) {
            /* transformers: inv_freq = 1 / base^(arange(0, D, 2) / D) in fp32,
             * divided by the linear scaling factor; angle = pos * inv_freq. */
            float inv_freq = (float)(1.0 / pow((double)theta, (double)(2 * i) / (double)D));
            inv_freq /= scale;
            float angle = pos * inv_freq;
            float c = (float)cos((double)angle), s = (float)sin((double)angle);
            for (int64_t h = 0; h < H + Hkv; h++) {
                float *x = h < H ? q + (t * H + h) * D : k + (t * Hkv + (h - H)) * D;
                float x1 = x[i], x2 = x[i + half];
                x[i] = x1 * c - x2 * s;
                x[i + half] = x2 * c + x1 * s;
            }
        }
    }
}

void cpu_kv_write(float *kc, float *vc, const float *k, const float *v,
                  const int64_t *slot_mapping, int64_t T, int64_t Hkv, int64_t D) {
    size_t row = (size_t)(Hkv * D);
    for (int64_t t = 0; t < T; t++) {
        int64_t slot = slot_mapping[t];
        if (slot < 0) continue;
        memcpy(kc + (size_t)slot * row, k + (size_t)t * row, row * sizeof(float));
        memcpy(vc + (size_t)slot * row, v + (size_t)t * row, row * sizeof(float));
    }
}

void cpu_silu_mul(float *out, const float *g, const float *u, int64_t n) {
#pragma omp parallel for schedule(static) if (n * 8 >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < n; i++) out[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

void cpu_add(float *x, const float *y, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= CPU_PAR_MIN_WORK)
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
}

void cpu_gather_rows(float *out, const float *in, const int32_t *idx, int64_t S, int64_t n) {
    for (int64_t s = 0; s < S; s++)
        memmove(out + s * n, in + (int64_t)idx[s] * n, (size_t)n * sizeof(float));
}
