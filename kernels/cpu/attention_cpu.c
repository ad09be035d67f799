/* attention_cpu.c - paged causal attention over block tables, with GQA.
 *
 * Token t of sequence s attends to positions 0..positions[t] of s, whose K/V
 * live in the blocks block_tables[s][p / B] at offset p % B. This one loop is
 * prefill, chunked prefill, prefix-cache hits and decode alike.
 * KV cache: fp32, bf16 or fp8, slot-major or head-major (cpu_kv_layout_t,
 * ops_cpu.h; the CPU backend's is head-major).
 *
 * FlashAttention's order on a CPU (docs/architecture.md, "CPU kernels"): a
 * work item is one KV head of a tile of up to ATTN_QT consecutive tokens of
 * one sequence, with every query head of its group, so each K/V row read
 * from the cache serves tile x group query rows. The item walks its keys in
 * blocks of ATTN_KB, up to the tile's last position. Per block, the K and V
 * rows are widened once into fp32 scratch (gather_block; K transposed, so
 * that keys lie along the vector lanes), then the query rows go ATTN_R at a
 * time through a GEMM-style register tile (attend_rows): S = Q K^T, the
 * online softmax (running max and sum, the accumulator rescaled when the
 * max moves), O += P V: matrix products in registers. An item of at most
 * ATTN_R rows (decode: one token's KV group) uses each K row once, so it
 * skips K's gather: its rows stay in registers and read K where it lies in
 * the cache (attend_direct), the rows ahead prefetched (the blocks are
 * scattered). Every output element is one chain of operations in a fixed
 * order on either path, whatever the other rows of its tile, so a token's
 * output does not depend on the other tokens of its step.
 * Nothing is sized by the context. The vector code is GCC's vector
 * extension on 8 lanes, compiled once per ISA level (cpu_isa.h) and chosen
 * at run time, with FMA contraction on for this file (CMakeLists.txt); exp
 * is exp_neg (vec_exp.h), branch-free so that it vectorizes. Speed: cpu_attn_bench
 * (docs/benchmarks.md).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/dtype.h"
#include "vec_exp.h"

#define ATTN_MAX_D 512
#define ATTN_QT 32 /* tokens per tile */
#define ATTN_KB 64 /* keys per block */
#define ATTN_R 6 /* query rows per register tile (attend_rows) */

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
    int64_t head_rows, slot_rows; /* the layout: row of (block b, offset o, head g) = b B Hkv + g head_rows + o slot_rows */
    float scale;
    float *scratch; /* per worker: see attn_scratch_floats */
} attn_args_t;

/* The byte offset of the row of key position p of head g (table: the sequence's blocks). */
static inline size_t kv_offset(const attn_args_t *a, const int32_t *table, int64_t p, int64_t g, size_t row_bytes) {
    return (size_t)((int64_t)table[p / a->B] * a->B * a->Hkv + g * a->head_rows + p % a->B * a->slot_rows) * row_bytes;
}

static int64_t attn_scratch_floats(int64_t rows, int64_t D) {
    int64_t Dp = (D + 15) / 16 * 16;
    return 2 * ATTN_KB * Dp     /* K (transposed) and V of a block */
           + rows * (Dp + 2)    /* accumulators, running max and sum */
           + ATTN_R * ATTN_KB   /* a row tile's scores, then weights */
           + 8 * D;             /* eight fp8 K rows widened */
}

/* 8 fp32 lanes in GCC's vector extension: one ymm register at avx2 and
 * avx512, two xmm in the portable build, from the same source. (Wider
 * generic vectors than the level's registers compile to shuffles through
 * the stack.) Helpers taking and returning v8 are always inlined into the
 * per-level functions, so no vector crosses a call (CMakeLists.txt silences
 * the psABI note for this file). */
typedef float v8 __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));
typedef uint8_t v8b __attribute__((vector_size(8)));
#define V8_FN static inline __attribute__((always_inline))

V8_FN v8 v8_load(const float *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
V8_FN void v8_store(float *p, v8 v) { memcpy(p, &v, sizeof v); }
V8_FN v8 v8_select(v8i mask, v8 a, v8 b) { return (v8)(((v8i)a & mask) | ((v8i)b & ~mask)); }
V8_FN float v8_max(v8 v) {
    float m = v[0];
    for (int i = 1; i < 8; i++) m = v[i] > m ? v[i] : m;
    return m;
}
V8_FN float v8_sum(v8 v) { /* one fixed order */
    return ((v[0] + v[4]) + (v[2] + v[6])) + ((v[1] + v[5]) + (v[3] + v[7]));
}
/* exp_neg on 8 lanes. */
V8_FN v8 v8_exp_neg(v8 x) {
    const v8 lo = (v8){0} - 86.0f;
    v8i under = x < lo;
    v8 xc = v8_select(under, lo, x);
    v8 t = xc * 1.44269504088896341f + 12582912.0f;
    v8 n = t - 12582912.0f;
    v8 r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    v8 p = r * 1.9875691500e-4f + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    v8i pi = (v8i)p + ((v8i)t - 0x4b400000) * (1 << 23);
    return (v8)(pi & ~under);
}

/* 8 fp8 codes (one per int32 lane) widened exactly, as fp8_table has them:
 * the exponent and mantissa moved into an fp32's and rebiased; a subnormal
 * (exponent 0) as m times its unit; E4M3's NaN code (S.1111.111) and E5M2's
 * infinities and NaNs as such. Plain vector statements: a ?: between vectors
 * is lowered lane by lane. */
V8_FN v8 v8_from_e4m3(v8i b) {
    v8i sign = (b & 0x80) << 24, e = (b >> 3) & 15, m = b & 7;
    v8i normal = sign | ((e + 120) << 23) | (m << 20);
    v8i sub = (v8i)(__builtin_convertvector(m, v8) * 0x1p-9f) | sign;
    v8i is_sub = e == 0, nan = (b & 0x7f) == 0x7f; /* one compare: two and-ed ones go lane by lane */
    v8i out = (is_sub & sub) | (~is_sub & normal);
    return (v8)((nan & (sign | 0x7fc00000)) | (~nan & out));
}

V8_FN v8 v8_from_e5m2(v8i b) {
    v8i sign = (b & 0x80) << 24, e = (b >> 2) & 31, m = b & 3;
    v8i normal = sign | ((e + 112) << 23) | (m << 21);
    v8i sub = (v8i)(__builtin_convertvector(m, v8) * 0x1p-16f) | sign;
    v8i is_sub = e == 0, special = e == 31;
    v8i out = (is_sub & sub) | (~is_sub & normal);
    v8i inf_nan = sign | 0x7f800000 | ((m != 0) & 0x400000); /* m != 0: a quiet NaN */
    return (v8)((special & inf_nan) | (~special & out));
}

/* Elements d0 .. d0 + 7 of a cache row, widened to fp32 exactly. dt is a
 * constant at each call (gather_block), so the branches fold. */
typedef uint16_t v8h __attribute__((vector_size(16)));
typedef uint32_t v8u __attribute__((vector_size(32)));
V8_FN v8 load_row8(const uint8_t *row, sl_dtype_t dt, int64_t d0) {
    if (dt == DTYPE_F32) return v8_load((const float *)row + d0);
    if (dt == DTYPE_BF16) {
        v8h h;
        memcpy(&h, row + 2 * d0, sizeof h);
        return (v8)(__builtin_convertvector(h, v8u) << 16);
    }
    v8b b;
    memcpy(&b, row + d0, sizeof b);
    v8i x = __builtin_convertvector(b, v8i);
    return dt == DTYPE_F8_E4M3 ? v8_from_e4m3(x) : v8_from_e5m2(x);
}

/* A row of D fp8 values (D a multiple of 8) widened to fp32 exactly. With
 * F16C (the avx2 and avx512 levels), through half precision: an E5M2 code is
 * the top byte of the same number's f16, an E4M3 code's exponent and
 * mantissa sit in an f16's three bits lower with a bias 8 smaller (so times
 * 2^8 after the conversion, exact; subnormals come out right), its NaN code
 * (S.1111.111) set apart. One vcvtph2ps for eight values where the portable
 * form (v8_from_e4m3) takes some twenty operations. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
__attribute__((target("avx2,f16c"))) static void widen_fp8_f16c(float *dst, const uint8_t *src, sl_dtype_t dt,
                                                                 int64_t D) {
    for (int64_t d0 = 0; d0 < D; d0 += 8) {
        v8b b8;
        memcpy(&b8, src + d0, sizeof b8);
        v8h b = __builtin_convertvector(b8, v8h);
        v8h h = dt == DTYPE_F8_E5M2 ? (v8h)(b << 8) : (v8h)(((b & 0x80) << 8) | ((b & 0x7f) << 7));
        v8 f = (v8)_mm256_cvtph_ps((__m128i)h);
        if (dt == DTYPE_F8_E4M3) {
            f *= 256.0f;
            v8i nan = __builtin_convertvector((b & 0x7f) == 0x7f, v8i);
            f = (v8)((nan & (((v8i)f & (int32_t)0x80000000) | 0x7fc00000)) | (~nan & (v8i)f));
        }
        v8_store(dst + d0, f);
    }
}
#endif

V8_FN void widen_fp8_row(float *dst, const uint8_t *src, sl_dtype_t dt, int64_t D, bool f16c) {
#if defined(__x86_64__) && defined(__GNUC__)
    if (f16c) {
        widen_fp8_f16c(dst, src, dt, D);
        return;
    }
#endif
    (void)f16c;
    for (int64_t d0 = 0; d0 < D; d0 += 8) v8_store(dst + d0, load_row8(src, dt, d0));
}

/* Eight rows of eight lanes transposed in registers (unpack, then shuffle
 * within 128-bit halves, then swap halves: 24 shuffles for 64 elements). */
V8_FN void transpose8(v8 r[8]) {
    const v8i lo = {0, 8, 1, 9, 4, 12, 5, 13}, hi = lo + 2;
    const v8i lo2 = {0, 1, 8, 9, 4, 5, 12, 13}, hi2 = lo2 + 2;
    const v8i lo4 = {0, 1, 2, 3, 8, 9, 10, 11}, hi4 = lo4 + 4;
    v8 t[8], u[8];
    for (int i = 0; i < 8; i += 2) t[i] = __builtin_shuffle(r[i], r[i + 1], lo), t[i + 1] = __builtin_shuffle(r[i], r[i + 1], hi);
    for (int i = 0; i < 8; i += 4)
        for (int k = 0; k < 2; k++) {
            u[i + 2 * k] = __builtin_shuffle(t[i + k], t[i + k + 2], lo2);
            u[i + 2 * k + 1] = __builtin_shuffle(t[i + k], t[i + k + 2], hi2);
        }
    for (int k = 0; k < 4; k++) r[k] = __builtin_shuffle(u[k], u[k + 4], lo4), r[k + 4] = __builtin_shuffle(u[k], u[k + 4], hi4);
}

/* The block's keys p0 .. p0 + nk - 1 of KV head g, widened into attend_rows'
 * layout: K d-major in panels of 16 keys (kt[(j / 16) * D * 16 + d * 16 +
 * j % 16]), V row by row (vb, stride Dp), zeros for the keys past nk up to
 * the panel's end. Eight keys at a time, each K row read once and turned
 * into columns by transpose8; a head dim that is not a multiple of 8 (or an
 * fp8 one, through the table) goes element by element. */
V8_FN void gather_block(const attn_args_t *a, sl_dtype_t dt, bool f16c, const int32_t *table, int64_t g,
                        int64_t p0, int64_t nk, int64_t n_keys, float *kt, float *vb, int64_t Dp, float *kbuf) {
    const int64_t D = a->D, n16 = (nk + 15) / 16 * 16;
    const size_t row_bytes = (size_t)D * dtype_size(dt);
    const uint8_t *krow[8], *vrow[8];
    static const float zeros[ATTN_MAX_D];
    for (int64_t j0 = 0; j0 < n16; j0 += 8) {
        for (int i = 0; i < 8; i++) {
            int64_t p = p0 + j0 + i;
            size_t off = kv_offset(a, table, p, g, row_bytes);
            bool real = j0 + i < nk;
            krow[i] = real ? (const uint8_t *)a->kc + off : (const uint8_t *)zeros;
            vrow[i] = real ? (const uint8_t *)a->vc + off : (const uint8_t *)zeros;
            /* The rows 16 keys on, so that their lines are on the way: the
             * hardware prefetcher cannot guess the blocks' order. */
            int64_t pa = p + 16;
            if (pa < n_keys) {
                size_t offa = kv_offset(a, table, pa, g, row_bytes);
                for (size_t l = 0; l < row_bytes; l += 64) {
                    __builtin_prefetch((const uint8_t *)a->kc + offa + l);
                    __builtin_prefetch((const uint8_t *)a->vc + offa + l);
                }
            }
        }
        float *kp = kt + (j0 / 16) * D * 16 + j0 % 16;
        if (D % 8 == 0) {
            sl_dtype_t kdt = dt;
            if (dtype_is_fp8(dt)) { /* rows widened first (widen_fp8_row), then transposed from there */
                for (int i = 0; i < 8 && j0 + i < nk; i++) {
                    widen_fp8_row(kbuf + i * D, krow[i], dt, D, f16c);
                    widen_fp8_row(vb + (j0 + i) * Dp, vrow[i], dt, D, f16c);
                    krow[i] = (const uint8_t *)(kbuf + i * D);
                }
                kdt = DTYPE_F32;
            }
            for (int64_t d0 = 0; d0 < D; d0 += 8) {
                v8 r[8];
                for (int i = 0; i < 8; i++) /* zero rows are fp32 */
                    r[i] = j0 + i < nk ? load_row8(krow[i], kdt, d0) : load_row8(krow[i], DTYPE_F32, d0);
                transpose8(r);
                for (int k = 0; k < 8; k++) v8_store(kp + (d0 + k) * 16, r[k]);
            }
            if (!dtype_is_fp8(dt))
                for (int i = 0; i < 8 && j0 + i < nk; i++)
                    for (int64_t d0 = 0; d0 < D; d0 += 8) v8_store(vb + (j0 + i) * Dp + d0, load_row8(vrow[i], dt, d0));
        } else {
            for (int i = 0; i < 8; i++) {
                bool real = j0 + i < nk;
                for (int64_t d = 0; d < D; d++) {
                    float k = 0.0f, v = 0.0f;
                    if (real && a->fp8_lut) k = a->fp8_lut[krow[i][d]], v = a->fp8_lut[vrow[i][d]];
                    else if (real && dt == DTYPE_BF16)
                        k = bf16_to_f32(((const uint16_t *)krow[i])[d]), v = bf16_to_f32(((const uint16_t *)vrow[i])[d]);
                    else if (real) k = ((const float *)krow[i])[d], v = ((const float *)vrow[i])[d];
                    kp[d * 16 + i] = k;
                    if (real) vb[(j0 + i) * Dp + d] = v;
                }
            }
        }
    }
}

/* The online softmax over one block's scores, rows r < R: w holds each row's
 * n16 raw scores (ATTN_KB apart); keys past the row's n[r] are masked, the
 * rest scaled, the running max m and sum l updated, and the weights e^(s -
 * m) left in w; cr[r] is the factor the row's accumulator is rescaled by.
 * A row that sees none of the block's keys gets zero weights and cr 1. */
V8_FN void block_softmax(const int R, float scale, const int64_t *n, int64_t n16, float *w, float *mrow, float *lrow,
                         float *cr) {
    const v8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
    for (int r = 0; r < R; r++) {
        float *wr = w + r * ATTN_KB, mx = mrow[r];
        cr[r] = 1.0f;
        if (n[r] == 0) { /* a row whose keys all come before this block: no change */
            memset(wr, 0, (size_t)n16 * sizeof *wr);
            continue;
        }
        for (int64_t c = 0; c < n16; c += 8) {
            v8i seen = lane + (float)c < (float)n[r];
            v8 v = v8_select(seen, v8_load(wr + c) * scale, (v8){0} - INFINITY);
            v8_store(wr + c, v);
            float mc = v8_max(v);
            mx = mc > mx ? mc : mx;
        }
        v8 sum = (v8){0};
        for (int64_t c = 0; c < n16; c += 8) {
            v8 e = v8_exp_neg(v8_load(wr + c) - mx);
            v8_store(wr + c, e);
            sum += e;
        }
        cr[r] = exp_neg(mrow[r] - mx);
        lrow[r] = lrow[r] * cr[r] + v8_sum(sum);
        mrow[r] = mx;
    }
}

/* R query rows (r0 .. r0 + R - 1 of the item) against one block of keys:
 * kt holds the block's keys d-major in panels of 16 (kt[(j / 16) * D * 16 +
 * d * 16 + j % 16], zero past the block's nk keys), vb its V rows (stride
 * Dp, zero past D). R is a constant at each call, so the row loops unroll
 * and the tile's 2R accumulators stay in registers, as in a GEMM's
 * micro-kernel:
 *   scores: per panel of 16 keys, s[r] += q[r][d] * kt[d] over d, in order;
 *   softmax: keys past the row's last position masked, the running max, sum
 *     and accumulator rescaled as FlashAttention does;
 *   P V: per 16 output lanes, o[r] += w[r][j] * v[j] over j, in order, then
 *     acc = acc * c + o.
 * Each element is one chain of FMAs in a fixed order, whatever R and the
 * other rows are; the keys a row does not see add exact zeros. */
V8_FN void attend_rows(const int R, const attn_args_t *a, const attn_tile_t *tile, int64_t g, int64_t r0,
                       int64_t p0, int64_t nk, const float *kt, const float *vb, int64_t Dp, float *w, float *acc,
                       float *mrow, float *lrow) {
    const int64_t D = a->D, group = a->H / a->Hkv;
    const float *qv[ATTN_R];
    int64_t n[ATTN_R], nmax = 0;
    for (int r = 0; r < R; r++) {
        int64_t t = tile->t0 + (r0 + r) / group, h = g * group + (r0 + r) % group;
        n[r] = a->positions[t] + 1 - p0; /* keys of this block row r sees */
        n[r] = n[r] < 0 ? 0 : n[r] > nk ? nk : n[r];
        nmax = n[r] > nmax ? n[r] : nmax;
        qv[r] = a->q + (t * a->H + h) * D;
    }
    if (nmax == 0) return;
    const int64_t n16 = (nmax + 15) / 16 * 16; /* the panels' keys */
    for (int64_t c = 0; c < n16; c += 16) {
        v8 s0[ATTN_R], s1[ATTN_R];
        for (int r = 0; r < R; r++) s0[r] = s1[r] = (v8){0};
        const float *kp = kt + c * D;
        for (int64_t d = 0; d < D; d++) {
            v8 k0 = v8_load(kp + d * 16), k1 = v8_load(kp + d * 16 + 8);
            for (int r = 0; r < R; r++) {
                s0[r] += qv[r][d] * k0;
                s1[r] += qv[r][d] * k1;
            }
        }
        for (int r = 0; r < R; r++) {
            v8_store(w + r * ATTN_KB + c, s0[r]);
            v8_store(w + r * ATTN_KB + c + 8, s1[r]);
        }
    }
    float cr[ATTN_R];
    block_softmax(R, a->scale, n, n16, w, mrow + r0, lrow + r0, cr);
    for (int64_t d0 = 0; d0 < Dp; d0 += 16) {
        v8 o0[ATTN_R], o1[ATTN_R];
        for (int r = 0; r < R; r++) o0[r] = o1[r] = (v8){0};
        for (int64_t j = 0; j < nmax; j++) {
            v8 v0 = v8_load(vb + j * Dp + d0), v1 = v8_load(vb + j * Dp + d0 + 8);
            for (int r = 0; r < R; r++) {
                o0[r] += w[r * ATTN_KB + j] * v0;
                o1[r] += w[r * ATTN_KB + j] * v1;
            }
        }
        for (int r = 0; r < R; r++) {
            float *ar = acc + (r0 + r) * Dp + d0;
            v8_store(ar, v8_load(ar) * cr[r] + o0[r]);
            v8_store(ar + 8, v8_load(ar + 8) * cr[r] + o1[r]);
        }
    }
}

/* ---- decode: the rows against the cache in place ----------------------------
 * An item of at most ATTN_R rows (a decode step's token: its KV group's query
 * heads) uses each K row once, so gathering K into scratch first
 * (gather_block: the widening, the transposes, a store and a load per
 * element) costs more than the arithmetic. attend_direct keeps the rows in
 * registers and reads K where it lies: per 8 keys, their K rows are
 * transposed in registers and go straight into the scores. V rows are
 * widened into scratch as their keys go by, since P V waits for the block's
 * softmax. Every element goes through the chain attend_rows gives
 * it (the same FMAs in the same order, on the same widened values), so a
 * token's output has the same bits on either path, whatever its step. A
 * bf16 row is read as 32-bit words, pairs of elements (2m, 2m + 1): the
 * words are transposed (half the shuffles of widened elements), and a shift
 * left by 16 makes the even element an fp32, a mask the odd one. For f32
 * and bf16 caches with D a multiple of 16 (fp8 and other head dims gather). */

/* The rows of head g at a sequence's positions p, p + 1, ... in turn, as
 * kv_offset gives them (table lookups, no division). */
typedef struct {
    const int32_t *table;
    int64_t B, block, off, block_rows, head_row, slot_rows;
} kv_walk_t;

V8_FN kv_walk_t kv_walk(const attn_args_t *a, const int32_t *table, int64_t g, int64_t p) {
    return (kv_walk_t){table, a->B, p / a->B, p % a->B, a->B * a->Hkv, g * a->head_rows, a->slot_rows};
}
V8_FN int64_t kv_next(kv_walk_t *w) {
    int64_t row = (int64_t)w->table[w->block] * w->block_rows + w->head_row + w->off * w->slot_rows;
    if (++w->off == w->B) w->off = 0, w->block++;
    return row;
}

V8_FN v8 v8_load_bytes(const uint8_t *p) {
    v8 v;
    memcpy(&v, p, sizeof v);
    return v;
}
/* The even and odd elements of 8 words of bf16 pairs, as fp32. */
V8_FN v8 bf16_even(v8 words) { return (v8)((v8i)words << 16); }
V8_FN v8 bf16_odd(v8 words) { return (v8)((v8i)words & ~0xffff); }

/* The R rows' scores against 8 keys (kr: their K rows of this head), into
 * w[r * ATTN_KB + 0..7]: s[r] += q[r][d] * k[d] over d in order, keys along
 * the lanes, as attend_rows sums them. */
V8_FN void direct_scores(const int R, sl_dtype_t dt, const float *const *qv, const uint8_t *const *kr, int64_t D,
                         float *w) {
    v8 s[ATTN_R];
    for (int r = 0; r < R; r++) s[r] = (v8){0};
    for (int64_t d0 = 0; d0 < D; d0 += 16) {
        v8 x[8];
        if (dt == DTYPE_BF16) {
            for (int i = 0; i < 8; i++) x[i] = v8_load_bytes(kr[i] + 2 * d0);
            transpose8(x); /* x[m]: elements d0 + 2m and d0 + 2m + 1 of the 8 keys */
            for (int m = 0; m < 8; m++) {
                const v8 ke = bf16_even(x[m]), ko = bf16_odd(x[m]);
                for (int r = 0; r < R; r++) s[r] += qv[r][d0 + 2 * m] * ke;
                for (int r = 0; r < R; r++) s[r] += qv[r][d0 + 2 * m + 1] * ko;
            }
        } else {
            for (int64_t h = d0; h < d0 + 16; h += 8) {
                for (int i = 0; i < 8; i++) x[i] = v8_load((const float *)kr[i] + h);
                transpose8(x);
                for (int k = 0; k < 8; k++)
                    for (int r = 0; r < R; r++) s[r] += qv[r][h + k] * x[k];
            }
        }
    }
    for (int r = 0; r < R; r++) v8_store(w + r * ATTN_KB, s[r]);
}

/* The V rows of 8 keys (vr) into vb (stride D), fp32; a bf16 row as its
 * even elements then its odd ones, 8 and 8 per 16. */
V8_FN void direct_values(sl_dtype_t dt, const uint8_t *const *vr, int n, int64_t D, float *vb) {
    for (int i = 0; i < n; i++)
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            float *dst = vb + i * D + d0;
            if (dt == DTYPE_BF16) {
                const v8 x = v8_load_bytes(vr[i] + 2 * d0);
                v8_store(dst, bf16_even(x)), v8_store(dst + 8, bf16_odd(x));
            } else {
                v8_store(dst, v8_load((const float *)vr[i] + d0)), v8_store(dst + 8, v8_load((const float *)vr[i] + d0 + 8));
            }
        }
}

/* The item's rows (all R of them, r0 = 0) over the keys 0..last, block by
 * block as attention_item walks them, into acc, mrow and lrow. The V rows
 * of each 8 keys are widened into vb as soon as their K rows are used: the
 * lines of both arrive together (the prefetch below), and P V, after the
 * block's softmax, reads them from scratch rather than from the cache
 * again. */
V8_FN void attend_direct(const int R, sl_dtype_t dt, const attn_args_t *a, const attn_tile_t *tile, int64_t g,
                         int32_t last, float *w, float *vb, float *acc, float *mrow, float *lrow) {
    static const float zeros[ATTN_MAX_D];
    const int64_t D = a->D, group = a->H / a->Hkv, n_keys = (int64_t)last + 1;
    const size_t row_bytes = (size_t)D * dtype_size(dt);
    const int32_t *table = a->block_tables + (int64_t)tile->s * a->max_blocks;
    const uint8_t *kc = a->kc, *vc = a->vc;
    const float *qv[ATTN_R];
    for (int r = 0; r < R; r++) qv[r] = a->q + ((tile->t0 + r / group) * a->H + g * group + r % group) * D;
    /* `ahead` runs 16 keys ahead of the rows read: their lines are fetched
     * while these are summed (the blocks are scattered, so the hardware
     * cannot guess them). */
    kv_walk_t at = kv_walk(a, table, g, 0), ahead = kv_walk(a, table, g, 16);
    int64_t p_ahead = 16;
    const uint8_t *kr[ATTN_KB], *vr[ATTN_KB];
    for (int64_t p0 = 0; p0 < n_keys; p0 += ATTN_KB) {
        const int64_t nk = n_keys - p0 < ATTN_KB ? n_keys - p0 : ATTN_KB;
        int64_t n[ATTN_R], nmax = 0;
        for (int r = 0; r < R; r++) {
            n[r] = a->positions[tile->t0 + r / group] + 1 - p0;
            n[r] = n[r] < 0 ? 0 : n[r] > nk ? nk : n[r];
            nmax = n[r] > nmax ? n[r] : nmax;
        }
        const int64_t n16 = (nmax + 15) / 16 * 16;
        for (int64_t j = 0; j < n16; j++) {
            if (j < nk) {
                size_t off = (size_t)kv_next(&at) * row_bytes;
                kr[j] = kc + off, vr[j] = vc + off;
            } else {
                kr[j] = vr[j] = (const uint8_t *)zeros;
            }
        }
        for (int64_t j = n16; j < nk; j++) kv_next(&at); /* keys no row sees: skipped */
        if (nmax == 0) continue;
        for (int64_t j0 = 0; j0 < n16; j0 += 8) {
            for (; p_ahead < n_keys && p_ahead < p0 + j0 + 24; p_ahead++) {
                size_t off = (size_t)kv_next(&ahead) * row_bytes;
                for (size_t l = 0; l < row_bytes; l += 64) {
                    __builtin_prefetch(kc + off + l);
                    __builtin_prefetch(vc + off + l);
                }
            }
            direct_scores(R, dt, qv, kr + j0, D, w + j0);
            direct_values(dt, vr + j0, nk - j0 < 8 ? (int)(nk - j0) : 8, D, vb + j0 * D);
        }
        float cr[ATTN_R];
        block_softmax(R, a->scale, n, n16, w, mrow, lrow, cr);
        for (int64_t d0 = 0; d0 < D; d0 += 16) {
            v8 o0[ATTN_R], o1[ATTN_R];
            for (int r = 0; r < R; r++) o0[r] = o1[r] = (v8){0};
            for (int64_t j = 0; j < nmax; j++) {
                const v8 v0 = v8_load(vb + j * D + d0), v1 = v8_load(vb + j * D + d0 + 8); /* bf16: even, odd */
                for (int r = 0; r < R; r++) {
                    o0[r] += w[r * ATTN_KB + j] * v0;
                    o1[r] += w[r * ATTN_KB + j] * v1;
                }
            }
            for (int r = 0; r < R; r++) {
                if (dt == DTYPE_BF16) { /* back in element order */
                    const v8 e = o0[r], o = o1[r];
                    o0[r] = __builtin_shuffle(e, o, (v8i){0, 8, 1, 9, 2, 10, 3, 11});
                    o1[r] = __builtin_shuffle(e, o, (v8i){4, 12, 5, 13, 6, 14, 7, 15});
                }
                float *ar = acc + r * D + d0;
                v8_store(ar, v8_load(ar) * cr[r] + o0[r]);
                v8_store(ar + 8, v8_load(ar + 8) * cr[r] + o1[r]);
            }
        }
    }
}

/* One tile x KV head (item = tile * Hkv + g). Per block of keys, the block's
 * K and V rows of head g are widened once into kt and vb (attend_rows' layout:
 * in the cache a head's rows are D (head-major) or Hkv * D (slot-major) apart
 * within a block, its blocks scattered), then
 * every query row of the tile attends to them, ATTN_R rows at a time. The
 * operations a row goes through do not depend on the tile's other rows, so a
 * token's output does not depend on its step's other tokens: chunked prefill,
 * prefix hits, batches and decode give the same bits. */
/* attend_direct at one R and dt, as its own function (direct_fn_for). */
typedef void (*direct_fn_t)(const attn_args_t *a, const attn_tile_t *tile, int64_t g, int32_t last, float *w,
                            float *vb, float *acc, float *mrow, float *lrow);

static inline __attribute__((always_inline)) void attention_item(const attn_args_t *a, int64_t item,
                                                                  float *scratch, bool f16c,
                                                                  const direct_fn_t *direct_fns) {
    const int64_t D = a->D, Dp = (D + 15) / 16 * 16, group = a->H / a->Hkv, Hkv = a->Hkv;
    const attn_tile_t *tile = &a->tiles[item / Hkv];
    const int64_t g = item % Hkv, nt = tile->t1 - tile->t0, rows = nt * group;
    const int32_t *table = a->block_tables + (int64_t)tile->s * a->max_blocks;
    float *kt = scratch, *vb = kt + ATTN_KB * Dp, *acc = vb + ATTN_KB * Dp;
    float *mrow = acc + rows * Dp, *lrow = mrow + rows, *w = lrow + rows, *kbuf = w + ATTN_R * ATTN_KB;

    int32_t last = 0; /* the tile's largest position: keys beyond it are seen by no row */
    for (int64_t i = 0; i < nt; i++)
        if (a->positions[tile->t0 + i] > last) last = a->positions[tile->t0 + i];
    for (int64_t r = 0; r < rows; r++) mrow[r] = -INFINITY, lrow[r] = 0.0f;
    memset(acc, 0, (size_t)(rows * Dp) * sizeof *acc);
    if (Dp != D) memset(vb, 0, (size_t)(ATTN_KB * Dp) * sizeof *vb);

    const bool direct = rows <= ATTN_R && D % 16 == 0 && (a->kv_dt == DTYPE_BF16 || a->kv_dt == DTYPE_F32);
    for (int64_t p0 = 0; p0 <= last && !direct; p0 += ATTN_KB) {
        int64_t nk = last + 1 - p0 < ATTN_KB ? last + 1 - p0 : ATTN_KB;
        switch (a->kv_dt) { /* a constant dt in each, so load_row8's branches fold */
        case DTYPE_F32: gather_block(a, DTYPE_F32, f16c, table, g, p0, nk, last + 1, kt, vb, Dp, kbuf); break;
        case DTYPE_BF16: gather_block(a, DTYPE_BF16, f16c, table, g, p0, nk, last + 1, kt, vb, Dp, kbuf); break;
        case DTYPE_F8_E4M3: gather_block(a, DTYPE_F8_E4M3, f16c, table, g, p0, nk, last + 1, kt, vb, Dp, kbuf); break;
        default: gather_block(a, DTYPE_F8_E5M2, f16c, table, g, p0, nk, last + 1, kt, vb, Dp, kbuf); break;
        }
        int64_t r0 = 0;
        for (; r0 + ATTN_R <= rows; r0 += ATTN_R)
            attend_rows(ATTN_R, a, tile, g, r0, p0, nk, kt, vb, Dp, w, acc, mrow, lrow);
        switch (rows - r0) {
#define ATTN_TAIL(k) \
    case k: if (k < ATTN_R) attend_rows(k, a, tile, g, r0, p0, nk, kt, vb, Dp, w, acc, mrow, lrow); break;
            ATTN_TAIL(1) ATTN_TAIL(2) ATTN_TAIL(3) ATTN_TAIL(4) ATTN_TAIL(5) ATTN_TAIL(6) ATTN_TAIL(7)
#undef ATTN_TAIL
        default: break;
        }
    }
    if (direct) direct_fns[rows * 2 + (a->kv_dt == DTYPE_BF16)](a, tile, g, last, w, vb, acc, mrow, lrow);
    for (int64_t r = 0; r < rows; r++) {
        int64_t t = tile->t0 + r / group, h = g * group + r % group;
        float *o = a->out + (t * a->H + h) * D, inv = 1.0f / lrow[r];
        for (int64_t d = 0; d < D; d++) o[d] = acc[r * Dp + d] * inv;
    }
}

/* attend_direct's twelve instances (R 1..ATTN_R, f32 and bf16) at one level,
 * each its own function, in a table by rows * 2 + (dt is bf16). Inlined
 * into the level's items function they made it so large that GCC's RTL
 * passes (PRE, load CSE, liveness) took 56 s on this file; a call per item
 * costs nothing next to an item. */
#define ATTN_DIRECT_FN(level, target, k, dt, tag)                                                                  \
    target __attribute__((noinline)) static void direct_##level##_##tag##k(                                        \
        const attn_args_t *a, const attn_tile_t *tile, int64_t g, int32_t last, float *w, float *vb, float *acc, \
        float *mrow, float *lrow) {                                                                                \
        attend_direct(k, dt, a, tile, g, last, w, vb, acc, mrow, lrow);                                            \
    }
#define ATTN_DIRECT_FNS(level, target, k) \
    ATTN_DIRECT_FN(level, target, k, DTYPE_F32, f32_) ATTN_DIRECT_FN(level, target, k, DTYPE_BF16, bf16_)
#define ATTN_DIRECT_PAIR(level, k) direct_##level##_f32_##k, direct_##level##_bf16_##k
_Static_assert(ATTN_R == 6, "direct_fns lists R = 1..6");
#define ATTN_ITEMS_FN(name, level, target, f16c)                                                                   \
    ATTN_DIRECT_FNS(level, target, 1) ATTN_DIRECT_FNS(level, target, 2) ATTN_DIRECT_FNS(level, target, 3)        \
    ATTN_DIRECT_FNS(level, target, 4) ATTN_DIRECT_FNS(level, target, 5) ATTN_DIRECT_FNS(level, target, 6)        \
    static const direct_fn_t direct_fns_##level[2 * (ATTN_R + 1)] = {                                             \
        NULL, NULL, ATTN_DIRECT_PAIR(level, 1), ATTN_DIRECT_PAIR(level, 2), ATTN_DIRECT_PAIR(level, 3),          \
        ATTN_DIRECT_PAIR(level, 4), ATTN_DIRECT_PAIR(level, 5), ATTN_DIRECT_PAIR(level, 6)};                    \
    target static void name(void *arg, int64_t i0, int64_t i1, int worker) {                                      \
        const attn_args_t *a = arg;                                                                               \
        int64_t rows = ATTN_QT * (a->H / a->Hkv);                                                                 \
        float *scratch = a->scratch + (size_t)worker * (size_t)attn_scratch_floats(rows, a->D);                  \
        for (int64_t i = i0; i < i1; i++) attention_item(a, i, scratch, f16c, direct_fns_##level);              \
    }

ATTN_ITEMS_FN(items_portable, portable, , false)
#if defined(__x86_64__) && defined(__GNUC__)
ATTN_ITEMS_FN(items_avx2, avx2, __attribute__((target("avx2,fma,f16c"))), true)
ATTN_ITEMS_FN(items_avx512, avx512, __attribute__((target("avx512f,avx512bw,avx512vl,fma,f16c"))), true)
#endif

void cpu_attention_kv(float *out, const float *q, const void *kc, const void *vc, sl_dtype_t kv_dt,
                      cpu_kv_layout_t layout, const int32_t *positions, const int32_t *query_start,
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
                     tiles, max_blocks, H, Hkv, D, B,
                     layout == KV_SLOT_MAJOR ? 1 : B, layout == KV_SLOT_MAJOR ? Hkv : 1, scale,
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
    cpu_attention_kv(out, q, kc, vc, DTYPE_F32, KV_SLOT_MAJOR, positions, query_start, block_tables, S, max_blocks, T, H,
                     Hkv, D, B, scale);
}
