/* linear_packed.c - out(T, N) = in(T, K) . w(N, K)^T on a packed copy of w
 * that every batch size reads the same way: bf16, fp32 and f16 weights.
 *
 * Layouts (docs/architecture.md, "CPU kernels"). The weight is cut into panels
 * of 32 output features (the last one padded with zero rows); a panel is
 * contiguous. bf16: inside a panel the features are interleaved by pairs of K,
 *
 *     packed[p][kp][j] = w[32p + j][2kp] | w[32p + j][2kp + 1] << 16   (uint32)
 *
 * for kp < ceil(K / 2) (an odd K is padded with a zero column). One k-pair of
 * a panel is 128 bytes, two 512-bit registers of 16 features, which is the
 * operand vdpbf16ps takes (two bf16 products summed into each fp32 lane), and
 * the 32-bit lanes widen to fp32 with one shift (low half) or one mask (high
 * half) where that instruction is missing. fp32 and f16: packed[p][k][j] =
 * w[32p+j][k] (f16 widened exactly as it is loaded).
 * A panel streams from memory front to back, so decode (T = 1) reads the
 * weights once at the memory's pace, and a tile of up to 8 tokens reuses each
 * loaded k-step for 8 x 32 products, which is what makes prefill and batched
 * decode compute-bound.
 *
 * The work: threads take panels; a panel takes its tokens in tiles of MR
 * rows, the tile's accumulators live in registers for the whole of K. Per
 * level (cpu_isa.h):
 *   avx512_bf16  bf16 weights: activations rounded to bf16 (nearest even) once
 *                per op, as vdpbf16ps needs and as a GPU's bf16 GEMM does:
 *                products exact, sums fp32 (each instruction adds the pair's
 *                odd product, then the even one). The only case that does not
 *                give the exact fp32 result; docs/architecture.md says so.
 *                fp32 weights: as avx512.
 *   avx512, avx2 activations stay fp32, 16-bit weights widen exactly, and each
 *                output is one FMA chain in k order, as the reference loop.
 *   portable     the same arithmetic in plain C (fmaf), so every fp32-exact
 *                level gives the same bits.
 * A token's outputs never depend on the other rows of its step: a tile of 8
 * and a tile of 1 run the same chain per row, so chunked prefill, batches and
 * a batch padded with extra rows (tests/unit/test_llama_graphs.c) change no
 * bits.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/dtype.h"

#define NP 32 /* output features per panel */
#define MR 8  /* token rows per tile (avx512 levels) */

static int64_t kpairs(int64_t K) { return (K + 1) / 2; }

size_t cpu_bf16_packed_bytes(int64_t N, int64_t K) {
    return (size_t)((N + NP - 1) / NP) * NP * (size_t)kpairs(K) * sizeof(uint32_t);
}

typedef struct {
    uint32_t *dst;
    const uint16_t *w;
    int64_t N, K;
} pack_args_t;

static void pack_panels(void *arg, int64_t p0, int64_t p1, int worker) {
    (void)worker;
    const pack_args_t *a = arg;
    int64_t kp2 = kpairs(a->K);
    for (int64_t p = p0; p < p1; p++) {
        uint32_t *panel = a->dst + (size_t)p * NP * (size_t)kp2;
        for (int j = 0; j < NP; j++) {
            int64_t n = p * NP + j;
            if (n >= a->N) { /* the last panel's padding */
                for (int64_t kp = 0; kp < kp2; kp++) panel[kp * NP + j] = 0;
                continue;
            }
            const uint16_t *row = a->w + (size_t)n * (size_t)a->K;
            for (int64_t kp = 0; kp < kp2; kp++) {
                uint32_t hi = 2 * kp + 1 < a->K ? row[2 * kp + 1] : 0;
                panel[kp * NP + j] = row[2 * kp] | hi << 16;
            }
        }
    }
}

void cpu_bf16_pack(void *dst, const uint16_t *w, int64_t N, int64_t K) {
    pack_args_t a = {dst, w, N, K};
    int64_t n_panels = (N + NP - 1) / NP;
    cpu_parallel_for(N * K, n_panels, 0, pack_panels, &a);
}

/* k-major panels (fp32, f16): packed[p][k][j] = w[32p + j][k], element by
 * element of `es` bytes; the last panel's padding rows are zeros. */
static size_t kmajor_bytes(int64_t N, int64_t K, size_t es) {
    return (size_t)((N + NP - 1) / NP) * NP * (size_t)K * es;
}

typedef struct {
    uint8_t *dst;
    const uint8_t *w;
    int64_t N, K;
    size_t es;
} pack_kmajor_args_t;

static inline __attribute__((always_inline)) void pack_kmajor_range(const pack_kmajor_args_t *a, int64_t p0,
                                                                     int64_t p1, const size_t es) {
    for (int64_t p = p0; p < p1; p++) {
        uint8_t *panel = a->dst + (size_t)p * NP * (size_t)a->K * es;
        for (int j = 0; j < NP; j++) {
            int64_t n = p * NP + j;
            const uint8_t *row = n < a->N ? a->w + (size_t)(n * a->K) * es : NULL;
            for (int64_t k = 0; k < a->K; k++) {
                uint8_t *d = panel + (size_t)(k * NP + j) * es;
                if (row) memcpy(d, row + (size_t)k * es, es);
                else memset(d, 0, es);
            }
        }
    }
}

static void pack_kmajor_panels(void *arg, int64_t p0, int64_t p1, int worker) {
    (void)worker;
    const pack_kmajor_args_t *a = arg;
    if (a->es == 4) pack_kmajor_range(a, p0, p1, 4); /* constant sizes: the copies are moves */
    else pack_kmajor_range(a, p0, p1, 2);
}

static void pack_kmajor(void *dst, const void *w, int64_t N, int64_t K, size_t es) {
    pack_kmajor_args_t a = {dst, w, N, K, es};
    cpu_parallel_for(N * K, (N + NP - 1) / NP, 0, pack_kmajor_panels, &a);
}

size_t cpu_f32_packed_bytes(int64_t N, int64_t K) { return kmajor_bytes(N, K, sizeof(float)); }
void cpu_f32_pack(void *dst, const float *w, int64_t N, int64_t K) { pack_kmajor(dst, w, N, K, sizeof(float)); }
size_t cpu_f16_packed_bytes(int64_t N, int64_t K) { return kmajor_bytes(N, K, sizeof(uint16_t)); }
void cpu_f16_pack(void *dst, const uint16_t *w, int64_t N, int64_t K) { pack_kmajor(dst, w, N, K, sizeof(uint16_t)); }

/* ---- the tiles, one per level ---------------------------------------------
 * tile(out, ldo, panel, x, ldx, kp2, nr, mr): out[r][j] for r < mr, j < nr
 * (nr <= NP real features in this panel) from x's mr rows, ldx apart: bf16
 * pairs (uint32) at avx512_bf16, fp32 (2 kp2 per row, zero-padded) otherwise. */

#define INLINE static inline __attribute__((always_inline))

#ifdef HAVE_X86_LEVELS
TARGET_BF16 INLINE void tile_avx512_bf16(float *out, int64_t ldo, const uint32_t *pw, const uint32_t *x,
                                         int64_t ldx, int64_t kp2, int nr, const int mr) {
    __m512 acc[MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < kp2; kp++) {
        __m512bh w0 = (__m512bh)_mm512_loadu_si512(pw + kp * NP);
        __m512bh w1 = (__m512bh)_mm512_loadu_si512(pw + kp * NP + 16);
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m512bh xr = (__m512bh)_mm512_set1_epi32((int)x[r * ldx + kp]);
            acc[r][0] = _mm512_dpbf16_ps(acc[r][0], xr, w0);
            acc[r][1] = _mm512_dpbf16_ps(acc[r][1], xr, w1);
        }
    }
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_ps(out + r * ldo, m0, acc[r][0]);
        _mm512_mask_storeu_ps(out + r * ldo + 16, m1, acc[r][1]);
    }
}

TARGET_512 INLINE void tile_avx512(float *out, int64_t ldo, const uint32_t *pw, const float *x, int64_t ldx,
                                   int64_t kp2, int nr, const int mr) {
    const __m512i hi_mask = _mm512_set1_epi32((int)0xffff0000u);
    __m512 acc[MR][2];
    for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();
    for (int64_t kp = 0; kp < kp2; kp++) {
        __m512i w0 = _mm512_loadu_si512(pw + kp * NP), w1 = _mm512_loadu_si512(pw + kp * NP + 16);
        __m512 lo0 = _mm512_castsi512_ps(_mm512_slli_epi32(w0, 16));
        __m512 lo1 = _mm512_castsi512_ps(_mm512_slli_epi32(w1, 16));
        __m512 hi0 = _mm512_castsi512_ps(_mm512_and_si512(w0, hi_mask));
        __m512 hi1 = _mm512_castsi512_ps(_mm512_and_si512(w1, hi_mask));
#pragma GCC unroll 8
        for (int r = 0; r < mr; r++) {
            __m512 xe = _mm512_set1_ps(x[r * ldx + 2 * kp]), xo = _mm512_set1_ps(x[r * ldx + 2 * kp + 1]);
            acc[r][0] = _mm512_fmadd_ps(xo, hi0, _mm512_fmadd_ps(xe, lo0, acc[r][0]));
            acc[r][1] = _mm512_fmadd_ps(xo, hi1, _mm512_fmadd_ps(xe, lo1, acc[r][1]));
        }
    }
    __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);
    __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;
    for (int r = 0; r < mr; r++) {
        _mm512_mask_storeu_ps(out + r * ldo, m0, acc[r][0]);
        _mm512_mask_storeu_ps(out + r * ldo + 16, m1, acc[r][1]);
    }
}

/* AVX2 has 16 vector registers: a panel is 4 of them per half-pair, so a tile
 * is 2 rows (8 accumulators, 4 widened weights, 2 broadcasts). */
#define MR_AVX2 2
TARGET_AVX2 INLINE void tile_avx2(float *out, int64_t ldo, const uint32_t *pw, const float *x, int64_t ldx,
                                  int64_t kp2, int nr, const int mr) {
    const __m256i hi_mask = _mm256_set1_epi32((int)0xffff0000u);
    __m256 acc[MR_AVX2][4];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm256_setzero_ps();
    for (int64_t kp = 0; kp < kp2; kp++) {
#pragma GCC unroll 4
        for (int v = 0; v < 4; v++) {
            __m256i w = _mm256_loadu_si256((const __m256i *)(pw + kp * NP + 8 * v));
            __m256 lo = _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
            __m256 hi = _mm256_castsi256_ps(_mm256_and_si256(w, hi_mask));
#pragma GCC unroll 2
            for (int r = 0; r < mr; r++) {
                __m256 xe = _mm256_set1_ps(x[r * ldx + 2 * kp]), xo = _mm256_set1_ps(x[r * ldx + 2 * kp + 1]);
                acc[r][v] = _mm256_fmadd_ps(xo, hi, _mm256_fmadd_ps(xe, lo, acc[r][v]));
            }
        }
    }
    for (int r = 0; r < mr; r++) {
        float tmp[NP];
        for (int v = 0; v < 4; v++) _mm256_storeu_ps(tmp + 8 * v, acc[r][v]);
        memcpy(out + r * ldo, tmp, (size_t)nr * sizeof(float));
    }
}

/* k-major panels (fp32 and f16 weights): a k-step is 32 weights, widened
 * to fp32 as they are loaded (f16 exactly, by vcvtph2ps). One tile per
 * level and weight type, from one body. */
#define TILE_KMAJOR_512(name, wtype, LOAD16)                                                             \
    TARGET_512 INLINE void name(float *out, int64_t ldo, const wtype *pw, const float *x, int64_t ldx,    \
                                int64_t K, int nr, const int mr) {                                       \
        __m512 acc[MR][2];                                                                               \
        for (int r = 0; r < mr; r++) acc[r][0] = acc[r][1] = _mm512_setzero_ps();                        \
        for (int64_t k = 0; k < K; k++) {                                                                \
            __m512 w0 = LOAD16(pw + k * NP), w1 = LOAD16(pw + k * NP + 16);                              \
            _Pragma("GCC unroll 8") for (int r = 0; r < mr; r++) {                                       \
                __m512 xr = _mm512_set1_ps(x[r * ldx + k]);                                              \
                acc[r][0] = _mm512_fmadd_ps(xr, w0, acc[r][0]);                                          \
                acc[r][1] = _mm512_fmadd_ps(xr, w1, acc[r][1]);                                          \
            }                                                                                            \
        }                                                                                                \
        __mmask16 m0 = nr >= 16 ? 0xffff : (__mmask16)((1u << nr) - 1);                                  \
        __mmask16 m1 = nr >= 32 ? 0xffff : nr > 16 ? (__mmask16)((1u << (nr - 16)) - 1) : 0;            \
        for (int r = 0; r < mr; r++) {                                                                   \
            _mm512_mask_storeu_ps(out + r * ldo, m0, acc[r][0]);                                         \
            _mm512_mask_storeu_ps(out + r * ldo + 16, m1, acc[r][1]);                                    \
        }                                                                                                \
    }

#define TILE_KMAJOR_AVX2(name, wtype, LOAD8)                                                             \
    TARGET_AVX2 INLINE void name(float *out, int64_t ldo, const wtype *pw, const float *x, int64_t ldx,   \
                                 int64_t K, int nr, const int mr) {                                      \
        __m256 acc[MR_AVX2][4];                                                                          \
        for (int r = 0; r < mr; r++)                                                                     \
            for (int v = 0; v < 4; v++) acc[r][v] = _mm256_setzero_ps();                                 \
        for (int64_t k = 0; k < K; k++) {                                                                \
            _Pragma("GCC unroll 2") for (int r = 0; r < mr; r++) {                                       \
                __m256 xr = _mm256_set1_ps(x[r * ldx + k]);                                              \
                _Pragma("GCC unroll 4") for (int v = 0; v < 4; v++)                                      \
                    acc[r][v] = _mm256_fmadd_ps(xr, LOAD8(pw + k * NP + 8 * v), acc[r][v]);              \
            }                                                                                            \
        }                                                                                                \
        for (int r = 0; r < mr; r++) {                                                                   \
            float tmp[NP];                                                                               \
            for (int v = 0; v < 4; v++) _mm256_storeu_ps(tmp + 8 * v, acc[r][v]);                        \
            memcpy(out + r * ldo, tmp, (size_t)nr * sizeof(float));                                      \
        }                                                                                                \
    }

#define LOAD16_F32(p) _mm512_loadu_ps(p)
#define LOAD16_F16(p) _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p)))
#define LOAD8_F32(p) _mm256_loadu_ps(p)
#define LOAD8_F16(p) _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(p)))
TILE_KMAJOR_512(tile_f32_avx512, float, LOAD16_F32)
TILE_KMAJOR_512(tile_f16_avx512, uint16_t, LOAD16_F16)
TILE_KMAJOR_AVX2(tile_f32_avx2, float, LOAD8_F32)
TILE_KMAJOR_AVX2(tile_f16_avx2, uint16_t, LOAD8_F16)
#endif

static void tile_f32_portable(float *out, int64_t ldo, const float *pw, const float *x, int64_t ldx, int64_t K,
                              int nr, int mr) {
    for (int r = 0; r < mr; r++) {
        float acc[NP] = {0};
        for (int64_t k = 0; k < K; k++)
            for (int j = 0; j < NP; j++) acc[j] = fmaf(x[r * ldx + k], pw[k * NP + j], acc[j]);
        memcpy(out + r * ldo, acc, (size_t)nr * sizeof(float));
    }
}

static void tile_f16_portable(float *out, int64_t ldo, const uint16_t *pw, const float *x, int64_t ldx, int64_t K,
                              int nr, int mr) {
    for (int r = 0; r < mr; r++) {
        float acc[NP] = {0};
        for (int64_t k = 0; k < K; k++)
            for (int j = 0; j < NP; j++) acc[j] = fmaf(x[r * ldx + k], f16_to_f32(pw[k * NP + j]), acc[j]);
        memcpy(out + r * ldo, acc, (size_t)nr * sizeof(float));
    }
}

/* Plain C: one row at a time, fmaf in k order per output (what the vector
 * levels compute lane by lane). */
static void tile_portable(float *out, int64_t ldo, const uint32_t *pw, const float *x, int64_t ldx,
                          int64_t kp2, int nr, int mr) {
    for (int r = 0; r < mr; r++) {
        float acc[NP] = {0};
        const float *xr = x + r * ldx;
        for (int64_t kp = 0; kp < kp2; kp++) {
            for (int j = 0; j < NP; j++) {
                uint32_t u = pw[kp * NP + j], lo_bits = u << 16, hi_bits = u & 0xffff0000u;
                float lo, hi;
                memcpy(&lo, &lo_bits, sizeof lo);
                memcpy(&hi, &hi_bits, sizeof hi);
                acc[j] = fmaf(xr[2 * kp + 1], hi, fmaf(xr[2 * kp], lo, acc[j]));
            }
        }
        memcpy(out + r * ldo, acc, (size_t)nr * sizeof(float));
    }
}

/* ---- rows of a panel: full tiles, then one tile of the remainder ---------- */

/* kp2: the panel's k-steps (pairs for bf16, K for fp32). */
#define ROWS_FN(name, tile, wtype, xtype, mr_max, target)                                                  \
    target static void name(float *out, int64_t ldo, const void *pwv, const void *xv, int64_t ldx,         \
                            int64_t kp2, int nr, int64_t T) {                                              \
        const wtype *pw = pwv;                                                                             \
        const xtype *x = xv;                                                                               \
        int64_t t = 0;                                                                                     \
        for (; t + (mr_max) <= T; t += (mr_max)) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, mr_max); \
        switch ((int)(T - t)) { /* constant mr: each case compiles to its own register tile */            \
        case 7: if ((mr_max) > 7) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 7); break;      \
        case 6: if ((mr_max) > 6) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 6); break;      \
        case 5: if ((mr_max) > 5) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 5); break;      \
        case 4: if ((mr_max) > 4) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 4); break;      \
        case 3: if ((mr_max) > 3) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 3); break;      \
        case 2: if ((mr_max) > 2) tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 2); break;      \
        case 1: tile(out + t * ldo, ldo, pw, x + t * ldx, ldx, kp2, nr, 1); break;                         \
        default: break;                                                                                    \
        }                                                                                                  \
    }

typedef void (*rows_fn_t)(float *, int64_t, const void *, const void *, int64_t, int64_t, int, int64_t);

#ifdef HAVE_X86_LEVELS
ROWS_FN(rows_avx512_bf16, tile_avx512_bf16, uint32_t, uint32_t, MR, TARGET_BF16)
ROWS_FN(rows_avx512, tile_avx512, uint32_t, float, MR, TARGET_512)
ROWS_FN(rows_avx2, tile_avx2, uint32_t, float, MR_AVX2, TARGET_AVX2)
ROWS_FN(rows_f32_avx512, tile_f32_avx512, float, float, MR, TARGET_512)
ROWS_FN(rows_f32_avx2, tile_f32_avx2, float, float, MR_AVX2, TARGET_AVX2)
ROWS_FN(rows_f16_avx512, tile_f16_avx512, uint16_t, float, MR, TARGET_512)
ROWS_FN(rows_f16_avx2, tile_f16_avx2, uint16_t, float, MR_AVX2, TARGET_AVX2)
#endif
ROWS_FN(rows_portable, tile_portable, uint32_t, float, 1, )
ROWS_FN(rows_f32_portable, tile_f32_portable, float, float, 1, )
ROWS_FN(rows_f16_portable, tile_f16_portable, uint16_t, float, 1, )

/* ---- the op ---------------------------------------------------------------- */

#ifdef HAVE_X86_LEVELS
/* Rows of x rounded to bf16 pairs (nearest even, as f32_to_bf16; the
 * instruction also flushes denormals to zero, as vdpbf16ps would). */
typedef struct {
    uint32_t *xb;
    const float *x;
    int64_t K, kp2;
} round_args_t;

TARGET_BF16 static void round_rows(void *arg, int64_t t0, int64_t t1, int worker) {
    (void)worker;
    const round_args_t *a = arg;
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = a->x + t * a->K;
        uint32_t *dst = a->xb + t * a->kp2;
        int64_t k = 0;
        for (; k + 32 <= a->K; k += 32) {
            __m512bh v = _mm512_cvtne2ps_pbh(_mm512_loadu_ps(xr + k + 16), _mm512_loadu_ps(xr + k));
            _mm512_storeu_si512(dst + k / 2, (__m512i)v);
        }
        for (; k < a->K; k += 2) {
            uint32_t hi = k + 1 < a->K ? f32_to_bf16(xr[k + 1]) : 0;
            dst[k / 2] = f32_to_bf16(xr[k]) | hi << 16;
        }
    }
}
#endif

/* One job over the panels of n linears of the same input (cpu_linears_*):
 * the activations are read (and at avx512_bf16 rounded) once for all of
 * them, and the pool splits the parts' panels together, so q/k/v (or
 * gate/up) cost one hand-off to the workers instead of three; each part's
 * outputs have the bits of its own call (a column's sums never depend on
 * the other columns). */
typedef struct {
    const cpu_linear_part_t *parts;
    int64_t first[CPU_LINEAR_MAX_PARTS + 1]; /* each part's first panel in the job; first[n] = all */
    const void *x;      /* activations as the level reads them */
    int64_t ldx;        /* elements of x per row */
    size_t panel_bytes;
    int64_t T, kp2;
    rows_fn_t rows;
} packed_args_t;

static void packed_panels(void *arg, int64_t p0, int64_t p1, int worker) {
    (void)worker;
    const packed_args_t *a = arg;
    for (int64_t p = p0, j = 0; p < p1; p++) {
        while (p >= a->first[j + 1]) j++;
        const int64_t N = a->parts[j].N, n0 = (p - a->first[j]) * NP;
        const int nr = N - n0 < NP ? (int)(N - n0) : NP;
        a->rows(a->parts[j].out + n0, N, (const uint8_t *)a->parts[j].packed + (size_t)(p - a->first[j]) * a->panel_bytes,
                a->x, a->ldx, a->kp2, nr, a->T);
    }
}

/* The job's panel numbering and its work (T x sum N x K). */
static int64_t packed_parts(packed_args_t *a, const cpu_linear_part_t *parts, int n, int64_t T, int64_t K) {
    SL_ASSERT(n >= 1 && n <= CPU_LINEAR_MAX_PARTS);
    a->parts = parts;
    a->first[0] = 0;
    int64_t sum_n = 0;
    for (int j = 0; j < n; j++) a->first[j + 1] = a->first[j] + (parts[j].N + NP - 1) / NP, sum_n += parts[j].N;
    return T * sum_n * K;
}

void cpu_linear_bf16_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N,
                            int64_t K) {
    const cpu_linear_part_t part = {out, packed, N};
    cpu_linears_bf16_packed(&part, 1, in, T, K);
}

void cpu_linears_bf16_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K) {
    cpu_isa_t isa = cpu_isa();
    int64_t kp2 = kpairs(K);
    packed_args_t a = {.x = in, .ldx = K, .panel_bytes = NP * (size_t)kp2 * sizeof(uint32_t), .T = T, .kp2 = kp2,
                       .rows = rows_portable};
    const int64_t work = packed_parts(&a, parts, n, T, K);
    void *scratch = NULL;
#ifdef HAVE_X86_LEVELS
    if (isa == CPU_ISA_AVX512_BF16) {
        /* The activations as bf16 pairs, rounded once for every panel. */
        uint32_t *xb = scratch = sl_malloc((size_t)T * (size_t)kp2 * sizeof *xb);
        round_args_t r = {xb, in, K, kp2};
        cpu_parallel_for(T * K, T, 0, round_rows, &r);
        a.x = xb, a.ldx = kp2, a.rows = rows_avx512_bf16;
    } else if (isa == CPU_ISA_AVX512) {
        a.rows = rows_avx512;
    } else if (isa == CPU_ISA_AVX2) {
        a.rows = rows_avx2;
    }
#else
    (void)isa;
#endif
    if (K % 2 && a.x == in) {
        /* fp32 levels read whole pairs: pad each row with a zero. */
        float *xp = scratch = sl_malloc((size_t)T * (size_t)(2 * kp2) * sizeof *xp);
        for (int64_t t = 0; t < T; t++) {
            memcpy(xp + t * 2 * kp2, in + t * K, (size_t)K * sizeof *xp);
            xp[t * 2 * kp2 + K] = 0.0f;
        }
        a.x = xp, a.ldx = 2 * kp2;
    }
    cpu_parallel_for(work, a.first[n], 0, packed_panels, &a);
    free(scratch);
}

void cpu_linear_f32_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N, int64_t K) {
    const cpu_linear_part_t part = {out, packed, N};
    cpu_linears_f32_packed(&part, 1, in, T, K);
}

void cpu_linears_f32_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K) {
    cpu_isa_t isa = cpu_isa();
    packed_args_t a = {.x = in, .ldx = K, .panel_bytes = NP * (size_t)K * sizeof(float), .T = T, .kp2 = K,
                       .rows = rows_f32_portable};
    const int64_t work = packed_parts(&a, parts, n, T, K);
#ifdef HAVE_X86_LEVELS
    if (isa >= CPU_ISA_AVX512) a.rows = rows_f32_avx512;
    else if (isa == CPU_ISA_AVX2) a.rows = rows_f32_avx2;
#else
    (void)isa;
#endif
    cpu_parallel_for(work, a.first[n], 0, packed_panels, &a);
}

void cpu_linear_f16_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N, int64_t K) {
    const cpu_linear_part_t part = {out, packed, N};
    cpu_linears_f16_packed(&part, 1, in, T, K);
}

void cpu_linears_f16_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K) {
    cpu_isa_t isa = cpu_isa();
    packed_args_t a = {.x = in, .ldx = K, .panel_bytes = NP * (size_t)K * sizeof(uint16_t), .T = T, .kp2 = K,
                       .rows = rows_f16_portable};
    const int64_t work = packed_parts(&a, parts, n, T, K);
#ifdef HAVE_X86_LEVELS
    if (isa >= CPU_ISA_AVX512) a.rows = rows_f16_avx512;
    else if (isa == CPU_ISA_AVX2) a.rows = rows_f16_avx2;
#else
    (void)isa;
#endif
    cpu_parallel_for(work, a.first[n], 0, packed_panels, &a);
}
