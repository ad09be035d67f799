/* dtype.c - dtype names and sizes, and array conversions to and from fp32 (see dtype.h). */
#include "servelab/dtype.h"

#include <math.h>
#include <pthread.h>

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
    [DTYPE_F8_E4M3] = {"F8_E4M3", "float8_e4m3fn", 1}, [DTYPE_F8_E5M2] = {"F8_E5M2", "float8_e5m2", 1},
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

/* f32 -> fp8 of `man` mantissa bits and exponent `bias`, whose largest finite code (without
 * the sign) is max_code: nearest even, saturating, any NaN -> 0x7f (the canonical NaN, as
 * NVIDIA's conversion gives it: the CUDA cache's codes are these, byte for byte). */
static uint8_t f32_to_fp8(float f, int man, int bias, uint32_t max_code) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    uint8_t sign = (uint8_t)((u >> 24) & 0x80u);
    uint32_t abs = u & 0x7fffffffu;
    if (abs > 0x7f800000u) return 0x7fu;
    int e = (int)(abs >> 23) - 127;                 /* unbiased exponent of a normal f32 */
    uint32_t r;
    if (e < 1 - bias) {
        /* Below the smallest normal: a multiple of 2^(1 - bias - man), counted exactly (a power of
         * two scaling), rounded to nearest even; 2^man of them is the smallest normal's code. */
        float q = fabsf(f) * ldexpf(1.0f, bias - 1 + man);
        float fl = floorf(q), rem = q - fl;
        r = (uint32_t)fl;
        if (rem > 0.5f || (rem == 0.5f && (r & 1u))) r++;
    } else {
        int drop = 23 - man;                       /* f32 mantissa bits below fp8's */
        uint32_t m = abs & 0x7fffffu, half = 1u << (drop - 1), rem = m & ((1u << drop) - 1);
        r = ((uint32_t)(e + bias) << man) | (m >> drop);
        if (rem > half || (rem == half && (r & 1u))) r++; /* a carry moves into the exponent */
    }
    return (uint8_t)(sign | (r > max_code ? max_code : r));
}

uint8_t f32_to_fp8_e4m3(float f) { return f32_to_fp8(f, 3, 7, 0x7eu); }
uint8_t f32_to_fp8_e5m2(float f) { return f32_to_fp8(f, 2, 15, 0x7bu); }

float fp8_e4m3_to_f32(uint8_t b) {
    int e = (b >> 3) & 15, m = b & 7;
    float v = e == 15 && m == 7 ? NAN : e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return b & 0x80 ? -v : v;
}

float fp8_e5m2_to_f32(uint8_t b) {
    int e = (b >> 2) & 31, m = b & 3;
    float v = e == 31 ? (m ? NAN : INFINITY) : e == 0 ? ldexpf((float)m, -16) : ldexpf(1.0f + (float)m / 4.0f, e - 15);
    return b & 0x80 ? -v : v;
}

static float fp8_tables[2][256];
static pthread_once_t fp8_once = PTHREAD_ONCE_INIT;
static void fp8_fill(void) {
    for (int i = 0; i < 256; i++) {
        fp8_tables[0][i] = fp8_e4m3_to_f32((uint8_t)i);
        fp8_tables[1][i] = fp8_e5m2_to_f32((uint8_t)i);
    }
}

const float *fp8_table(sl_dtype_t dt) {
    SL_ASSERT(dtype_is_fp8(dt));
    pthread_once(&fp8_once, fp8_fill);
    return fp8_tables[dt == DTYPE_F8_E5M2];
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
    case DTYPE_F8_E4M3:
    case DTYPE_F8_E5M2: {
        const float *t = fp8_table(dt);
        for (int64_t i = 0; i < n; i++) dst[i] = t[((const uint8_t *)src)[i]];
        return;
    }
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
    case DTYPE_F8_E4M3:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = f32_to_fp8_e4m3(src[i]);
        return;
    case DTYPE_F8_E5M2:
        for (int64_t i = 0; i < n; i++) ((uint8_t *)dst)[i] = f32_to_fp8_e5m2(src[i]);
        return;
    default: SL_ASSERT(!"dtype_from_f32: not a float dtype");
    }
}
