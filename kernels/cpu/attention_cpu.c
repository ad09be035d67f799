/* attention_cpu.c - paged causal attention over block tables, with GQA.
 *
 * Token t of sequence s attends to positions 0..positions[t] of s, whose K/V
 * live in the blocks block_tables[s][p / B] at offset p % B. This one loop is
 * prefill, chunked prefill, prefix-cache hits and decode alike.
 * KV cache layout: (n_blocks * B, Hkv, D), slot-major, fp32 or bf16.
 *
 * FlashAttention's order on a CPU (docs/architecture.md, "CPU kernels"): a
 * work item is one KV head of a tile of up to ATTN_QT consecutive tokens of
 * one sequence, with every query head of its group, so each K/V row read
 * from the cache serves tile x group query rows. The item walks its keys in
 * blocks of ATTN_KB, up to the tile's last position; each query row takes the
 * scores of the keys it sees (q . k, scale applied in fp32), an online
 * softmax (running max and sum, the accumulator rescaled when the max moves)
 * and O += P V (attend_block). A tile of many rows first copies the block's K
 * and V rows into contiguous fp32 buffers (widened from a bf16 cache); a few
 * rows (decode) read them in place, with prefetches. Either way a row goes
 * through the same operations in the same order, so a token's output does
 * not depend on the other tokens of its step. Nothing is sized by the
 * context. The vector code is GCC's vector extension, compiled once per ISA
 * level (cpu_isa.h) and chosen at run time, with FMA contraction on for this
 * file (CMakeLists.txt); exp is exp_neg, branch-free so that it vectorizes.
 * A head dim that is not a multiple of 16 takes attend_block_plain, plain loops.
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/dtype.h"

#define ATTN_MAX_D 512
#define ATTN_QT 32 /* tokens per tile */
#define ATTN_KB 64 /* keys per block */
/* Query rows of a tile from which a block's K/V rows are copied together
 * rather than read in place (attention_item). */
#define ATTN_GATHER_ROWS 8

/* e^x for x <= 0 (softmax weights): Cephes' expf polynomial on the reduced
 * argument, 2^n put into the exponent directly. Within 2 ulp of expf; 0 below
 * -86 (where 2^n would leave the normal range; e^-86 is 4e-38, nothing next
 * to the row's largest weight, 1). Branch-free, so a loop of it vectorizes. */
static inline float exp_neg(float x) {
    float xc = x < -86.0f ? -86.0f : x;
    float t = xc * 1.44269504088896341f + 12582912.0f; /* 1.5 * 2^23: rounds to an integer */
    float n = t - 12582912.0f;
    int32_t ti;
    memcpy(&ti, &t, sizeof ti);
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f; /* ln 2 = 0.693359375 - 2.12194440e-4, the product above exact */
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    int32_t pi;
    memcpy(&pi, &p, sizeof pi);
    pi += (ti - 0x4b400000) * (1 << 23); /* the integer n, from t's mantissa */
    memcpy(&p, &pi, sizeof p);
    return x < -86.0f ? 0.0f : p;
}

typedef struct {
    int32_t s, t0, t1; /* tokens [t0, t1) of sequence s */
} attn_tile_t;

typedef struct {
    float *out;
    const float *q;
    const void *kc, *vc;
    sl_dtype_t kv_dt;
    const float *fp8_lut; /* an fp8 cache's values by code (NULL: not fp8) */
    const int32_t *positions, *block_tables;
    const attn_tile_t *tiles;
    int64_t max_blocks, H, Hkv, D, B;
    float scale;
    float *scratch; /* per worker: see attn_scratch_floats */
} attn_args_t;

static int64_t attn_scratch_floats(int64_t rows, int64_t D) {
    return 2 * ATTN_KB * D      /* K and V of a block */
           + rows * (D + 2)     /* accumulators, running max and sum */
           + ATTN_KB;           /* one row's scores, then weights */
}

/* Row r of the block's contiguous copy: the cache row of key position p. An
 * fp8 cache (--kv-cache-dtype fp8) widens through its 256-entry table (lut),
 * exactly. */
static inline void gather_row(float *dst, const void *cache, sl_dtype_t dt, const float *lut, int64_t slot,
                              int64_t Hkv, int64_t g, int64_t D) {
    size_t off = (size_t)((slot * Hkv + g) * D);
    if (lut) {
        const uint8_t *src = (const uint8_t *)cache + off;
        for (int64_t d = 0; d < D; d++) dst[d] = lut[src[d]];
    } else if (dt == DTYPE_BF16) {
        const uint16_t *src = (const uint16_t *)cache + off;
#pragma omp simd
        for (int64_t d = 0; d < D; d++) dst[d] = bf16_to_f32(src[d]);
    } else {
        memcpy(dst, (const float *)cache + off, (size_t)D * sizeof(float));
    }
}

/* 16 fp32 lanes in GCC's vector extension: one zmm register at avx512, two
 * ymm at avx2, four xmm in the portable build, from the same source. */
typedef float v16 __attribute__((vector_size(64)));
/* Helpers taking and returning v16 are always inlined into the per-level
 * functions, so no vector crosses a call (CMakeLists.txt silences the psABI
 * note for this file). */
#define V16_FN static inline __attribute__((always_inline))
typedef int32_t v16i __attribute__((vector_size(64)));

V16_FN v16 v16_load(const float *p) {
    v16 v;
    memcpy(&v, p, sizeof v);
    return v;
}
V16_FN v16 v16_select(v16i mask, v16 a, v16 b) { return (v16)(((v16i)a & mask) | ((v16i)b & ~mask)); }
V16_FN float v16_max(v16 v) {
    float m = v[0];
    for (int i = 1; i < 16; i++) m = v[i] > m ? v[i] : m;
    return m;
}
/* exp_neg on 16 lanes. */
V16_FN v16 v16_exp_neg(v16 x) {
    const v16 lo = (v16){0} - 86.0f;
    v16i under = x < lo;
    v16 xc = v16_select(under, lo, x);
    v16 t = xc * 1.44269504088896341f + 12582912.0f;
    v16 n = t - 12582912.0f;
    v16 r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    v16 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    v16i pi = (v16i)p + ((v16i)t - 0x4b400000) * (1 << 23);
    return (v16)(pi & ~under);
}

/* 16 fp8 codes (one per int32 lane) widened exactly, as fp8_table has them:
 * the exponent and mantissa moved into an fp32's and rebiased; a subnormal
 * (exponent 0) as m times its unit; E4M3's NaN code (S.1111.111) and E5M2's
 * infinities and NaNs as such. Plain vector statements: a ?: between vectors
 * is lowered lane by lane. */
typedef uint16_t v16h __attribute__((vector_size(32)));
typedef uint8_t v16b __attribute__((vector_size(16)));
V16_FN v16 v16_from_e4m3(v16i b) {
    v16i sign = (b & 0x80) << 24, e = (b >> 3) & 15, m = b & 7;
    v16i normal = sign | ((e + 120) << 23) | (m << 20);
    v16i sub = (v16i)(__builtin_convertvector(m, v16) * 0x1p-9f) | sign;
    v16i is_sub = e == 0, nan = (b & 0x7f) == 0x7f; /* one compare: two and-ed ones go lane by lane */
    v16i out = (is_sub & sub) | (~is_sub & normal);
    return (v16)((nan & (sign | 0x7fc00000)) | (~nan & out));
}

V16_FN v16 v16_from_e5m2(v16i b) {
    v16i sign = (b & 0x80) << 24, e = (b >> 2) & 31, m = b & 3;
    v16i normal = sign | ((e + 112) << 23) | (m << 21);
    v16i sub = (v16i)(__builtin_convertvector(m, v16) * 0x1p-16f) | sign;
    v16i is_sub = e == 0, special = e == 31;
    v16i out = (is_sub & sub) | (~is_sub & normal);
    v16i inf_nan = sign | 0x7f800000 | ((m != 0) & 0x400000); /* m != 0: a quiet NaN */
    return (v16)((special & inf_nan) | (~special & out));
}

/* A K or V row as 16-lane slices: fp32 as it is, bf16 and fp8 widened
 * (exactly). */
V16_FN v16 v16_load_kv(const void *row, sl_dtype_t dt, int64_t d0) {
    if (dt == DTYPE_F32) return v16_load((const float *)row + d0);
    if (dt == DTYPE_F8_E4M3 || dt == DTYPE_F8_E5M2) {
        v16b b;
        memcpy(&b, (const uint8_t *)row + d0, sizeof b);
        v16i x = __builtin_convertvector(b, v16i);
        if (dt == DTYPE_F8_E4M3) return v16_from_e4m3(x);
        return v16_from_e5m2(x);
    }
    v16h h;
    memcpy(&h, (const uint16_t *)row + d0, sizeof h);
    return (v16)(__builtin_convertvector(h, v16i) << 16);
}

/* An fp8 row widened into dst (the gathered block), 16 lanes at a time. */
V16_FN void gather_fp8_row(float *dst, const void *row, sl_dtype_t dt, int64_t D) {
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
        v16 x;
        if (dt == DTYPE_F8_E4M3) x = v16_load_kv(row, DTYPE_F8_E4M3, d0);
        else x = v16_load_kv(row, DTYPE_F8_E5M2, d0);
        memcpy(dst + d0, &x, sizeof x);
    }
}

/* Pairs of vectors, each summed by halves: lanes i and i + h of a's keys, then
 * of b's, for a vector of twice as many keys with half as many lanes each. */
#define FOLD(a, b, lo, hi) (__builtin_shuffle((a), (b), (lo)) + __builtin_shuffle((a), (b), (hi)))

/* The 16 dot products of one query row with 16 keys: p[j] holds key j's
 * products summed by lane (d mod 16); four folds sum the lanes of all 16 at
 * once (lane i with i + 8, then + 4, + 2, + 1) and leave key j in lane j. One
 * fixed order of additions, whatever the keys are, so a row's scores do not
 * depend on how its keys were reached. */
V16_FN v16 reduce16(v16 p[16]) {
    const v16i l8 = {0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23}, h8 = l8 + 8;
    const v16i l4 = {0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 19, 24, 25, 26, 27}, h4 = l4 + 4;
    const v16i l2 = {0, 1, 4, 5, 8, 9, 12, 13, 16, 17, 20, 21, 24, 25, 28, 29}, h2 = l2 + 2;
    const v16i l1 = {0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30}, h1 = l1 + 1;
    v16 r[8], s[4], u[2];
    for (int k = 0; k < 8; k++) r[k] = FOLD(p[2 * k], p[2 * k + 1], l8, h8);
    for (int k = 0; k < 4; k++) s[k] = FOLD(r[2 * k], r[2 * k + 1], l4, h4);
    for (int k = 0; k < 2; k++) u[k] = FOLD(s[2 * k], s[2 * k + 1], l2, h2);
    return FOLD(u[0], u[1], l1, h1);
}

/* One query row against one block of keys (krow/vrow: nk rows, then
 * zero rows up to a multiple of 16), updating its running max m, sum l and
 * accumulator o. src_dt is a constant at each call, so the loads fold. Keys
 * go 16 at a time: the 16 dot products advance together over d (16
 * independent FMA chains), then reduce16; P V takes four keys at a time into
 * four accumulators per 16 output lanes, added in a fixed order at the end. */
static inline __attribute__((always_inline)) void attend_block(const float *qv, const void *const *krow,
                                                               const void *const *vrow, sl_dtype_t src_dt,
                                                               int64_t n, int64_t D, float scale, float *w,
                                                               float *o, float *m_io, float *l_io) {
    v16 lane;
    for (int i = 0; i < 16; i++) lane[i] = (float)i;
    float mx = *m_io;
    v16 sc[ATTN_KB / 16];
    for (int64_t c = 0; c < (n + 15) / 16; c++) {
        v16 part[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) part[k] = (v16){0};
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            v16 qc = v16_load(qv + d0);
#pragma GCC unroll 16
            for (int k = 0; k < 16; k++) part[k] += qc * v16_load_kv(krow[16 * c + k], src_dt, d0);
        }
        v16i seen = lane + (float)(16 * c) < (float)n;
        sc[c] = v16_select(seen, reduce16(part) * scale, (v16){0} - INFINITY);
        float mc = v16_max(sc[c]);
        mx = mc > mx ? mc : mx;
    }
    float sum = 0.0f;
    for (int64_t c = 0; c < (n + 15) / 16; c++) {
        v16 e = v16_exp_neg(sc[c] - mx);
        memcpy(w + 16 * c, &e, sizeof e);
    }
    for (int64_t j = 0; j < n; j++) sum += w[j];
    for (int64_t j = n; j < (n + 3) / 4 * 4; j++) w[j] = 0.0f; /* the last group of four */
    float cr = exp_neg(*m_io - mx);
    *l_io = *l_io * cr + sum;
    *m_io = mx;
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
        v16 a0 = (v16){0}, a1 = a0, a2 = a0, a3 = a0;
        for (int64_t j = 0; j < n; j += 4) {
            a0 += w[j] * v16_load_kv(vrow[j], src_dt, d0);
            a1 += w[j + 1] * v16_load_kv(vrow[j + 1], src_dt, d0);
            a2 += w[j + 2] * v16_load_kv(vrow[j + 2], src_dt, d0);
            a3 += w[j + 3] * v16_load_kv(vrow[j + 3], src_dt, d0);
        }
        v16 ov = v16_load(o + d0) * cr + ((a0 + a1) + (a2 + a3));
        memcpy(o + d0, &ov, sizeof ov);
    }
}

/* attend_block for any D, in plain loops (a head dim that is not a multiple
 * of 16; the item always gathers then, so krow/vrow are fp32). */
static inline __attribute__((always_inline)) void attend_block_plain(const float *qv, const void *const *krow,
                                                                     const void *const *vrow, int64_t n, int64_t D,
                                                                     float scale, float *w, float *o, float *m_io,
                                                                     float *l_io) {
    float mx = *m_io;
    for (int64_t j = 0; j < n; j++) {
        const float *kv = krow[j];
        float sc = 0.0f;
#pragma omp simd reduction(+ : sc)
        for (int64_t d = 0; d < D; d++) sc += qv[d] * kv[d];
        w[j] = sc * scale;
        mx = w[j] > mx ? w[j] : mx;
    }
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (int64_t j = 0; j < n; j++) {
        w[j] = exp_neg(w[j] - mx);
        sum += w[j];
    }
    float c = exp_neg(*m_io - mx);
    *l_io = *l_io * c + sum;
    *m_io = mx;
#pragma omp simd
    for (int64_t d = 0; d < D; d++) o[d] *= c;
    for (int64_t j = 0; j < n; j++) {
        const float *vv = vrow[j];
        float wj = w[j];
#pragma omp simd
        for (int64_t d = 0; d < D; d++) o[d] += wj * vv[d];
    }
}

/* Zero rows for the keys past a block's end (no branch in the 16-key loop). */
static const float zero_row[ATTN_MAX_D];

/* One tile x KV head (item = tile * Hkv + g). Per block of keys, krow[j] and
 * vrow[j] point at key j's rows: in the cache itself for a few query rows
 * (decode: one token and its group's heads), or, for a tile of many, in a
 * contiguous fp32 copy of the block made once and read by every row (the
 * cache's rows of one head are Hkv * D apart, blocks scattered). The values
 * are the same either way (bf16 widens exactly) and so is every operation a
 * row goes through (attend_block), so a token's output does not depend on its
 * step's other tokens: chunked prefill, prefix hits and batches give the same
 * bits. */
static inline __attribute__((always_inline)) void attention_item(const attn_args_t *a, int64_t item,
                                                                  float *scratch) {
    const int64_t D = a->D, B = a->B, group = a->H / a->Hkv, Hkv = a->Hkv;
    const attn_tile_t *tile = &a->tiles[item / Hkv];
    const int64_t g = item % Hkv, nt = tile->t1 - tile->t0, rows = nt * group;
    const int32_t *table = a->block_tables + (int64_t)tile->s * a->max_blocks;
    const size_t row_bytes = (size_t)D * dtype_size(a->kv_dt);
    const bool vec = D % 16 == 0, gather = rows >= ATTN_GATHER_ROWS || !vec;
    float *kb = scratch, *vb = kb + ATTN_KB * D, *acc = vb + ATTN_KB * D;
    float *mrow = acc + rows * D, *lrow = mrow + rows, *w = lrow + rows;
    const void *krow[ATTN_KB], *vrow[ATTN_KB];

    int32_t last = 0; /* the tile's largest position: keys beyond it are seen by no row */
    for (int64_t i = 0; i < nt; i++)
        if (a->positions[tile->t0 + i] > last) last = a->positions[tile->t0 + i];
    for (int64_t r = 0; r < rows; r++) mrow[r] = -INFINITY, lrow[r] = 0.0f;
    memset(acc, 0, (size_t)(rows * D) * sizeof *acc);

    for (int64_t p0 = 0; p0 <= last; p0 += ATTN_KB) {
        int64_t nk = last + 1 - p0 < ATTN_KB ? last + 1 - p0 : ATTN_KB;
        for (int64_t j = 0; j < nk; j++) {
            int64_t p = p0 + j, slot = (int64_t)table[p / B] * B + p % B;
            const uint8_t *kc = (const uint8_t *)a->kc + (size_t)(slot * Hkv + g) * row_bytes;
            const uint8_t *vc = (const uint8_t *)a->vc + (size_t)(slot * Hkv + g) * row_bytes;
            if (gather && a->fp8_lut && vec) {
                gather_fp8_row(kb + j * D, kc, a->kv_dt, D);
                gather_fp8_row(vb + j * D, vc, a->kv_dt, D);
                krow[j] = kb + j * D, vrow[j] = vb + j * D;
            } else if (gather) {
                gather_row(kb + j * D, a->kc, a->kv_dt, a->fp8_lut, slot, Hkv, g, D);
                gather_row(vb + j * D, a->vc, a->kv_dt, a->fp8_lut, slot, Hkv, g, D);
                krow[j] = kb + j * D, vrow[j] = vb + j * D;
            } else {
                /* Read in place: the prefetcher cannot guess these addresses. */
                for (size_t off = 0; off < row_bytes; off += 64) {
                    __builtin_prefetch(kc + off);
                    __builtin_prefetch(vc + off);
                }
                krow[j] = kc, vrow[j] = vc;
            }
        }
        for (int64_t j = nk; j < (nk + 15) / 16 * 16; j++) krow[j] = vrow[j] = zero_row;
        for (int64_t r = 0; r < rows; r++) {
            int64_t t = tile->t0 + r / group, h = g * group + r % group;
            int64_t n = a->positions[t] + 1 - p0; /* keys of this block row r sees */
            if (n <= 0) continue;
            if (n > nk) n = nk;
            const float *qv = a->q + (t * a->H + h) * D;
            if (!vec)
                attend_block_plain(qv, krow, vrow, n, D, a->scale, w, acc + r * D, &mrow[r], &lrow[r]);
            else if (gather || a->kv_dt == DTYPE_F32)
                attend_block(qv, krow, vrow, DTYPE_F32, n, D, a->scale, w, acc + r * D, &mrow[r], &lrow[r]);
            else if (a->kv_dt == DTYPE_BF16)
                attend_block(qv, krow, vrow, DTYPE_BF16, n, D, a->scale, w, acc + r * D, &mrow[r], &lrow[r]);
            else if (a->kv_dt == DTYPE_F8_E4M3)
                attend_block(qv, krow, vrow, DTYPE_F8_E4M3, n, D, a->scale, w, acc + r * D, &mrow[r], &lrow[r]);
            else
                attend_block(qv, krow, vrow, DTYPE_F8_E5M2, n, D, a->scale, w, acc + r * D, &mrow[r], &lrow[r]);
        }
    }
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = tile->t0 + r / group, h = g * group + r % group;
        float *o = a->out + (t * a->H + h) * D, inv = 1.0f / lrow[r];
        for (int64_t d = 0; d < D; d++) o[d] = acc[r * D + d] * inv;
    }
}

#define ATTN_ITEMS_FN(name, target)                                                     \
    target static void name(void *arg, int64_t i0, int64_t i1, int worker) {            \
        const attn_args_t *a = arg;                                                     \
        int64_t rows = ATTN_QT * (a->H / a->Hkv);                                       \
        float *scratch = a->scratch + (size_t)worker * (size_t)attn_scratch_floats(rows, a->D); \
        for (int64_t i = i0; i < i1; i++) attention_item(a, i, scratch);                \
    }

ATTN_ITEMS_FN(items_portable, )
#if defined(__x86_64__) && defined(__GNUC__)
ATTN_ITEMS_FN(items_avx2, __attribute__((target("avx2,fma,f16c"))))
ATTN_ITEMS_FN(items_avx512, __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))))
#endif

void cpu_attention_kv(float *out, const float *q, const void *kc, const void *vc, sl_dtype_t kv_dt,
                      const int32_t *positions, const int32_t *query_start,
                      const int32_t *block_tables, int64_t S, int64_t max_blocks, int64_t T,
                      int64_t H, int64_t Hkv, int64_t D, int64_t B, float scale) {
    SL_ASSERT(D <= ATTN_MAX_D && H % Hkv == 0 && (kv_dt == DTYPE_F32 || kv_dt == DTYPE_BF16 || dtype_is_fp8(kv_dt)));
    (void)T;
    int64_t n_tiles = 0;
    for (int64_t s = 0; s < S; s++) n_tiles += (query_start[s + 1] - query_start[s] + ATTN_QT - 1) / ATTN_QT;
    attn_tile_t *tiles = sl_malloc((size_t)(n_tiles ? n_tiles : 1) * sizeof *tiles);
    int64_t n = 0, work = 0;
    for (int64_t s = 0; s < S; s++) {
        for (int32_t t0 = query_start[s]; t0 < query_start[s + 1]; t0 += ATTN_QT) {
            int32_t t1 = t0 + ATTN_QT < query_start[s + 1] ? t0 + ATTN_QT : query_start[s + 1];
            tiles[n++] = (attn_tile_t){(int32_t)s, t0, t1};
            work += (int64_t)(t1 - t0) * (positions[t1 - 1] + 1);
        }
    }
    int nt = parallel_n_threads();
    int64_t rows = ATTN_QT * (H / Hkv);
    attn_args_t a = {out, q, kc, vc, kv_dt, dtype_is_fp8(kv_dt) ? fp8_table(kv_dt) : NULL, positions, block_tables,
                     tiles, max_blocks, H, Hkv, D, B, scale,
                     sl_malloc((size_t)nt * (size_t)attn_scratch_floats(rows, D) * sizeof(float))};
    parallel_fn_t fn = items_portable;
#if defined(__x86_64__) && defined(__GNUC__)
    cpu_isa_t isa = cpu_isa();
    fn = isa >= CPU_ISA_AVX512 ? items_avx512 : isa == CPU_ISA_AVX2 ? items_avx2 : items_portable;
#endif
    cpu_parallel_for(work * H * D, n_tiles * Hkv, 0, fn, &a);
    free(a.scratch);
    free(tiles);
}

void cpu_attention(float *out, const float *q, const float *kc, const float *vc,
                   const int32_t *positions, const int32_t *query_start,
                   const int32_t *block_tables, int64_t S, int64_t max_blocks, int64_t T,
                   int64_t H, int64_t Hkv, int64_t D, int64_t B, float scale) {
    cpu_attention_kv(out, q, kc, vc, DTYPE_F32, positions, query_start, block_tables, S, max_blocks, T, H,
                     Hkv, D, B, scale);
}
