/* dtype.c - dtype names and sizes, and array conversions to and from fp32 (see dtype.h). */
#include "servelab/dtype.h"

#include "servelab/core.h"

static const struct {
    const char *st, *torch;
    size_t size;
} dtype_info[DTYPE_COUNT] = {
    [DTYPE_F32] = {"F32", "float32", 4},  [DTYPE_F16] = {"F16", "float16", 2},
    [DTYPE_BF16] = {"BF16", "bfloat16", 2}, [DTYPE_I32] = {"I32", "int32", 4},
    [DTYPE_I8] = {"I8", "int8", 1},       [DTYPE_U8] = {"U8", "uint8", 1},
    [DTYPE_I64] = {"I64", "int64", 8},    [DTYPE_F64] = {"F64", "float64", 8},
    [DTYPE_BOOL] = {"BOOL", "bool", 1},
};

size_t dtype_size(sl_dtype_t dt) {
    SL_ASSERT(dt >= 0 && dt < DTYPE_COUNT);
    return dtype_info[dt].size;
}

const char *dtype_name(sl_dtype_t dt) {
    SL_ASSERT(dt >= 0 && dt < DTYPE_COUNT);
    return dtype_info[dt].st;
}

const char *dtype_torch_name(sl_dtype_t dt) {
    SL_ASSERT(dt >= 0 && dt < DTYPE_COUNT);
    return dtype_info[dt].torch;
}

uint16_t f32_to_f16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint32_t sign = (u >> 16) & 0x8000u, abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);           /* nan */
    if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);          /* overflow -> inf */
    if (abs < 0x38800000u) {                                            /* subnormal or zero */
        if (abs < 0x33000000u) return (uint16_t)sign;                   /* below half the smallest */
        uint32_t man = (abs & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(abs >> 23);                             /* 14..24 */
        uint32_t half = man >> shift, rem = man & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = abs - 0x38000000u;                                     /* rebias exponent */
    uint32_t half = r >> 13, rem = r & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) half++;
    return (uint16_t)(sign | half);
}

void dtype_to_f32(float *dst, const void *src, sl_dtype_t dt, int64_t n) {
    switch (dt) {
    case DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = bf16_to_f32(((const uint16_t *)src)[i]);
        return;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = f16_to_f32(((const uint16_t *)src)[i]);
        return;
    default: SL_ASSERT(!"dtype_to_f32: not a float dtype");
    }
}

void dtype_from_f32(void *dst, const float *src, sl_dtype_t dt, int64_t n) {
    switch (dt) {
    case DTYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); return;
    case DTYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_bf16(src[i]);
        return;
    case DTYPE_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = f32_to_f16(src[i]);
        return;
    default: SL_ASSERT(!"dtype_from_f32: not a float dtype");
    }
}
