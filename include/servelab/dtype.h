/* dtype.h - element types of checkpoints, weights and activations, and their conversions.
 *
 * The scalar conversions are exact IEEE round-to-nearest-even (NaN stays NaN),
 * so every backend, the weight loader and the parity tests agree bit for bit
 * on what a bf16 or fp16 value is.
 */
#ifndef SERVELAB_DTYPE_H
#define SERVELAB_DTYPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Element types of checkpoints, weights and activations. */
typedef enum {
    DTYPE_F32,
    DTYPE_F16,
    DTYPE_BF16,
    DTYPE_I32,
    DTYPE_I8,
    DTYPE_U8,
    DTYPE_I64,
    DTYPE_F64,
    DTYPE_BOOL,
    /* The fp8 KV cache's element types (--kv-cache-dtype), not read from checkpoints: OCP
     * E4M3FN (bias 7, max 448, no infinity, NaN = S.1111.111) and E5M2 (bias 15, max 57344). */
    DTYPE_F8_E4M3,
    DTYPE_F8_E5M2,
    DTYPE_COUNT
} sl_dtype_t;
#define DTYPE_CHECKPOINT_COUNT DTYPE_F8_E4M3 /* the dtypes a safetensors header may name */

size_t dtype_size(sl_dtype_t dt);
/* "F32", "BF16", ... as written in safetensors headers. */
const char *dtype_name(sl_dtype_t dt);
/* "float32", "bfloat16", ... as written in config.json's torch_dtype. */
const char *dtype_torch_name(sl_dtype_t dt);

static inline float bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t f32_to_bf16(float f) { /* round to nearest even; NaN stays NaN */
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, man = h & 0x3ffu, u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);                 /* inf / nan */
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);        /* normal */
    } else if (man == 0) {
        u = sign;                                             /* zero */
    } else {                                                  /* subnormal: normalize */
        int e = -1;
        do { man <<= 1; e++; } while (!(man & 0x400u));
        u = sign | ((uint32_t)(112 - e) << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

uint16_t f32_to_f16(float f);

/* fp8 as NVIDIA's cvt.rn.satfinite (vLLM's fp8 KV cache with scale 1.0): round to nearest
 * even; a finite value or an infinity beyond the largest finite one saturates to it (448,
 * 57344), any NaN becomes the canonical NaN 0x7f. The widening is exact. */
uint8_t f32_to_fp8_e4m3(float f);
uint8_t f32_to_fp8_e5m2(float f);
float fp8_e4m3_to_f32(uint8_t b);
float fp8_e5m2_to_f32(uint8_t b);
/* The 256 values of an fp8 dtype, by code, for decoding loops. */
const float *fp8_table(sl_dtype_t dt);
static inline bool dtype_is_fp8(sl_dtype_t dt) { return dt == DTYPE_F8_E4M3 || dt == DTYPE_F8_E5M2; }

/* Widens n elements of a F32/F16/BF16/F8 array to fp32. */
void dtype_to_f32(float *dst, const void *src, sl_dtype_t dt, int64_t n);
/* Narrows n fp32 elements to dt (F32/F16/BF16/F8), rounding to nearest even. */
void dtype_from_f32(void *dst, const float *src, sl_dtype_t dt, int64_t n);

#endif
