/* dtype.h - element types of checkpoints, weights and activations, and their conversions.
 *
 * The scalar conversions are exact IEEE round-to-nearest-even (NaN stays NaN),
 * so every backend, the weight loader and the parity tests agree bit for bit
 * on what a bf16 or fp16 value is.
 */
#ifndef SERVELAB_DTYPE_H
#define SERVELAB_DTYPE_H

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
    DTYPE_COUNT
} sl_dtype_t;

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

/* Widens n elements of a F32/F16/BF16 array to fp32. */
void dtype_to_f32(float *dst, const void *src, sl_dtype_t dt, int64_t n);
/* Narrows n fp32 elements to dt (F32/F16/BF16), rounding to nearest even. */
void dtype_from_f32(void *dst, const float *src, sl_dtype_t dt, int64_t n);

#endif
