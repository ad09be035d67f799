/* linear_awq.c - out(T, N) = in(T, K) . W(N, K)^T for AutoAWQ's 4-bit GEMM
 * format (W4A16): the reference dequantization, the kernel's packed copy, and
 * the op on it, in portable C, AVX2, AVX-512 and AVX-512 BF16 (cpu_isa.h).
 *
 * The checkpoint, per Linear of PyTorch shape (N, K), group size G (G | K):
 *   qweight int32 (K, N/8), qzeros int32 (K/G, N/8), scales fp16 (K/G, N);
 * nibble i (bits 4i..4i+3) of an int32 holds column [0, 2, 4, 6, 1, 3, 5, 7][i]
 * of its 8, and
 *   W[n][k] = (q(k, n) - z(k/G, n)) * s(k/G, n).
 * Per level:
 *   avx512, portable  (q - z) * s needs at most 4 + 11 significant bits,
 *       so it is exact in fp32, as is z * s: each weight is built exactly, as
 *       fma(q, s, -z*s), and x * W summed in one fp32 FMA chain per output, in
 *       k order. These levels give the same bits as each other; they differ
 *       from cpu_linear on the dequantized weights only in the order of the
 *       additions.
 *   avx2  the activations quantized to int16 per group once per op (to
 *       within 2^-15 of the group's largest |x|, a power-of-two step), the
 *       inner sums exact in int32 (vpmaddwd on pairs of k), the scale and
 *       zero applied per group (below): per 16 weights a shift, an AND, a
 *       multiply-add and an add, where fp32 weights took an AND, a convert
 *       and an FMA per 8; on cache-resident shapes 25 us against the fp32
 *       kernel's 42-68 (docs/benchmarks.md). Its
 *       bits are its own: against cpu_linear on the dequantized weights
 *       applied to the int16 x it differs by fp32 rounding.
 *   avx512_bf16  activations rounded to bf16 (nearest even) once per op, as
 *       the bf16 linear does at this level (linear_packed.c), and the scale
 *       and zero factored out per group g:
 *         out_n = sum_g s(g, n) * (sum_{k in g} q(k, n) xb(k) - z(g, n) sx_g),
 *       sx_g = sum_{k in g} xb(k) in fp32. The inner sum is vdpbf16ps on
 *       exact bf16 q (products exact, fp32 sums, pairs of k), so per weight
 *       one shift, one permute and half a dot instruction, which lets decode
 *       keep pace with memory. Its bits are its own: against cpu_linear on the
 *       dequantized weights applied to the bf16-rounded x it differs by
 *       rounding of the same order as the fp32 levels'.
 *
 * Packed layout (cpu_awq_pack): panels of AWQ_NP = 64 output columns (the
 * last padded with columns whose q, z and s are 0); a panel is contiguous and
 * holds its K/G groups in k order; a group is
 *   header: s fp16 [64] (128 bytes), z uint8 [64] (64 bytes)
 *   blocks: ceil(G/8) of uint32 [64], block b, column j: k-step i of the
 *           block, q(g*G + 8b + i, 64p + j), in bits 4m.. of the low half
 *           for i = 2m and of the high half for i = 2m + 1; zero past the
 *           group's end.
 * So one 64-byte line is 16 columns x 8 k-steps: a k-step is one shift of a
 * register, and the nibble (low 4 bits) becomes a float by a 16-entry
 * permute (AVX-512); a shift by 4m puts the k-pair (2m, 2m + 1) at the
 * bottom of both 16-bit halves, the pair of int16 a vpmaddwd lane takes
 * (avx2, after a mask), or of bf16 a vdpbf16ps lane takes, after a 16-bit
 * permute (avx512_bf16). A panel
 * streams front to back once per tile of tokens; T = 1 reads every nibble
 * once.
 *
 * The work: threads take panels; a panel takes its tokens in tiles of up to
 * AWQ_MR rows (avx512 levels; 1 elsewhere), each weight widened once per
 * tile. A token's outputs never depend on the other rows of the call: a
 * row's sums run in the same order whatever the tile. No GEMM path for large
 * T: a prefill rebuilds the weights once per tile.
 * Where the scale is applied: per weight at avx512 and portable, the exact
 * levels (avx512's 16-entry permute makes the weight cheap there); per group
 * (s * sum x q - z s * sum x) at avx2 and avx512_bf16, where the bare-q inner
 * sum is what brings decode nearer the memory's pace (avx512_bf16: over
 * twice the fp32 levels' speed, the activations rounded to bf16; avx2: on
 * int16 activations, in integers).
 */
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/dtype.h"

#define AWQ_NP 64   /* output columns per panel */
#define AWQ_KB 8    /* k-steps per uint32 */
#define AWQ_MR 4    /* token rows per tile (avx512) */
#define AWQ_HDR_BYTES (AWQ_NP * (sizeof(uint16_t) + sizeof(uint8_t)))

/* Nibble i holds column AWQ_ORDER[i] of its 8; column c is in nibble AWQ_NIBBLE[c]. */
static const int AWQ_NIBBLE[8] = {0, 4, 1, 5, 2, 6, 3, 7};

/* q or z of column n (of N) from a row of AWQ-packed int32s. */
static inline unsigned awq_nibble(const int32_t *row, int64_t n) {
    return ((uint32_t)row[n / 8] >> (4 * AWQ_NIBBLE[n % 8])) & 0xfu;
}

static void awq_check_shape(int64_t N, int64_t K, int64_t G) {
    SL_ASSERT(N > 0 && N % 8 == 0 && K > 0 && G > 0 && K % G == 0);
}

void cpu_awq_dequantize(float *w, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, int64_t N,
                        int64_t K, int64_t G) {
    awq_check_shape(N, K, G);
    int64_t N8 = N / 8;
    for (int64_t k = 0; k < K; k++) {
        const int32_t *qrow = qweight + k * N8, *zrow = qzeros + (k / G) * N8;
        const uint16_t *srow = scales + (k / G) * N;
        for (int64_t n = 0; n < N; n++)
            w[n * K + k] = ((float)awq_nibble(qrow, n) - (float)awq_nibble(zrow, n)) * f16_to_f32(srow[n]);
    }
}

/* Bit offset of k-step i (of 8) in a block's uint32: the even steps in the
 * low half, the odd ones in the high half, so that one shift by 4m puts the
 * pair (2m, 2m + 1) at the bottom of the two 16-bit halves. */
static inline int awq_kshift(int i) { return 16 * (i & 1) + 4 * (i >> 1); }

static int64_t awq_blocks_per_group(int64_t G) { return (G + AWQ_KB - 1) / AWQ_KB; }
static size_t awq_group_bytes(int64_t G) {
    return AWQ_HDR_BYTES + (size_t)awq_blocks_per_group(G) * AWQ_NP * sizeof(uint32_t);
}
static size_t awq_panel_bytes(int64_t K, int64_t G) { return (size_t)(K / G) * awq_group_bytes(G); }

size_t cpu_awq_packed_bytes(int64_t N, int64_t K, int64_t G) {
    awq_check_shape(N, K, G);
    return (size_t)((N + AWQ_NP - 1) / AWQ_NP) * awq_panel_bytes(K, G);
}

typedef struct {
    uint8_t *dst;
    const int32_t *qweight, *qzeros;
    const uint16_t *scales;
    int64_t N, K, G;
} awq_pack_args_t;

static void awq_pack_panels(void *arg, int64_t p0, int64_t p1, int worker) {
    (void)worker;
    const awq_pack_args_t *a = arg;
    int64_t N8 = a->N / 8, n_groups = a->K / a->G, nb = awq_blocks_per_group(a->G);
    for (int64_t p = p0; p < p1; p++) {
        uint8_t *group = a->dst + (size_t)p * awq_panel_bytes(a->K, a->G);
        for (int64_t g = 0; g < n_groups; g++, group += awq_group_bytes(a->G)) {
            uint16_t s[AWQ_NP] = {0};
            uint8_t z[AWQ_NP] = {0};
            uint32_t *blocks = (uint32_t *)(group + AWQ_HDR_BYTES);
            memset(blocks, 0, (size_t)nb * AWQ_NP * sizeof *blocks);
            for (int j = 0; j < AWQ_NP; j++) {
                int64_t n = p * AWQ_NP + j;
                if (n >= a->N) continue; /* padding: q = z = s = 0 */
                s[j] = a->scales[g * a->N + n];
                z[j] = (uint8_t)awq_nibble(a->qzeros + g * N8, n);
                for (int64_t kk = 0; kk < a->G; kk++) {
                    uint32_t q = awq_nibble(a->qweight + (g * a->G + kk) * N8, n);
                    blocks[(kk / AWQ_KB) * AWQ_NP + j] |= q << awq_kshift((int)(kk % AWQ_KB));
                }
            }
            memcpy(group, s, sizeof s);
            memcpy(group + sizeof s, z, sizeof z);
        }
    }
}

void cpu_awq_pack(void *dst, const int32_t *qweight, const int32_t *qzeros, const uint16_t *scales, int64_t N,
                  int64_t K, int64_t G) {
    awq_check_shape(N, K, G);
    awq_pack_args_t a = {dst, qweight, qzeros, scales, N, K, G};
    cpu_parallel_for(N * K, (N + AWQ_NP - 1) / AWQ_NP, 0, awq_pack_panels, &a);
}

/* ---- the panels, one function per level -------------------------------------
 * panel(out, ldo, pw, x, ldx, K, G, nr, mr): out[r][j] for r < mr, j < nr (the
 * panel's real columns) from x's mr rows, ldx apart. */

#define INLINE static inline __attribute__((always_inline))

/* Plain C, one row at a time: the arithmetic every vector level does lane by lane. */
static void awq_panel_portable(float *out, int64_t ldo, const uint8_t *pw, const float *x, int64_t ldx, int64_t K,
                               int64_t G, int nr, int mr) {
    int64_t n_groups = K / G;
    for (int r = 0; r < mr; r++) {
        const float *xr = x + r * ldx;
        float acc[AWQ_NP] = {0};
        const uint8_t *group = pw;
        for (int64_t g = 0; g < n_groups; g++, group += awq_group_bytes(G)) {
            float s[AWQ_NP], zs[AWQ_NP];
            for (int j = 0; j < AWQ_NP; j++) {
                uint16_t h;
                memcpy(&h, group + 2 * j, sizeof h);
                s[j] = f16_to_f32(h);
                zs[j] = (float)group[2 * AWQ_NP + j] * s[j];
            }
            const uint8_t *blocks = group + AWQ_HDR_BYTES;
            for (int64_t kk = 0; kk < G; kk++) {
                float xk = xr[g * G + kk];
                const uint8_t *blk = blocks + (size_t)(kk / AWQ_KB) * AWQ_NP * sizeof(uint32_t);
                int shift = awq_kshift((int)(kk % AWQ_KB));
                for (int j = 0; j < AWQ_NP; j++) {
                    uint32_t u;
                    memcpy(&u, blk + 4 * j, sizeof u);
                    float w = fmaf((float)((u >> shift) & 0xfu), s[j], -zs[j]); /* exact */
                    acc[j] = fmaf(xk, w, acc[j]);
                }
            }
        }
        memcpy(out + r * ldo, acc, (size_t)nr * sizeof(float));
    }
}


#ifdef HAVE_X86_LEVELS
/* 4 registers of 16 columns; per k-step the 4 weights are built once and feed
 * mr rows. n_steps < 8 only in a group's last, partial block. */
TARGET_512 INLINE void awq_block_avx512(__m512 acc[AWQ_MR][4], const uint32_t *blk, const float *x, int64_t ldx,
                                        int n_steps, const __m512 s[4], const __m512 zs[4], __m512 lut,
                                        const int mr) {
    __m512i q[4];
    for (int v = 0; v < 4; v++) q[v] = _mm512_loadu_si512(blk + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < n_steps; i++) {
        __m512 w[4];
        for (int v = 0; v < 4; v++) {
            /* vpermps reads only the low 4 bits of each index: no mask needed. */
            __m512 qf = _mm512_permutexvar_ps(_mm512_srli_epi32(q[v], awq_kshift(i)), lut);
            w[v] = _mm512_fmsub_ps(qf, s[v], zs[v]); /* (q - z) * s, exact */
        }
#pragma GCC unroll 4
        for (int r = 0; r < mr; r++) {
            __m512 xb = _mm512_set1_ps(x[r * ldx + i]);
            for (int v = 0; v < 4; v++) acc[r][v] = _mm512_fmadd_ps(xb, w[v], acc[r][v]);
        }
    }
}

TARGET_512 INLINE void awq_tile_avx512(float *out, int64_t ldo, const uint8_t *pw, const float *x, int64_t ldx,
                                       int64_t K, int64_t G, int nr, const int mr) {
    const __m512 lut = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    int64_t n_groups = K / G, full = G / AWQ_KB;
    int tail = (int)(G % AWQ_KB);
    __m512 acc[AWQ_MR][4];
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
    const uint8_t *group = pw;
    for (int64_t g = 0; g < n_groups; g++, group += awq_group_bytes(G)) {
        __m512 s[4], zs[4];
        for (int v = 0; v < 4; v++) {
            s[v] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(group + 32 * v)));
            __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(group + 128 + 16 * v))));
            zs[v] = _mm512_mul_ps(z, s[v]); /* exact */
        }
        const uint32_t *blocks = (const uint32_t *)(group + AWQ_HDR_BYTES);
        const float *xg = x + g * G;
        for (int64_t b = 0; b < full; b++)
            awq_block_avx512(acc, blocks + b * AWQ_NP, xg + b * AWQ_KB, ldx, AWQ_KB, s, zs, lut, mr);
        if (tail) awq_block_avx512(acc, blocks + full * AWQ_NP, xg + full * AWQ_KB, ldx, tail, s, zs, lut, mr);
    }
    for (int r = 0; r < mr; r++)
        for (int v = 0; v < 4; v++) {
            int nv = nr - 16 * v;
            if (nv <= 0) break;
            __mmask16 m = nv >= 16 ? 0xffff : (__mmask16)((1u << nv) - 1);
            _mm512_mask_storeu_ps(out + r * ldo + 16 * v, m, acc[r][v]);
        }
}

TARGET_512 static void awq_panel_avx512(float *out, int64_t ldo, const uint8_t *pw, const float *x, int64_t ldx,
                                        int64_t K, int64_t G, int nr, int64_t T) {
    int64_t t = 0;
    for (; t + AWQ_MR <= T; t += AWQ_MR) awq_tile_avx512(out + t * ldo, ldo, pw, x + t * ldx, ldx, K, G, nr, AWQ_MR);
    switch ((int)(T - t)) { /* constant mr: each case compiles to its own register tile */
    case 3: awq_tile_avx512(out + t * ldo, ldo, pw, x + t * ldx, ldx, K, G, nr, 3); break;
    case 2: awq_tile_avx512(out + t * ldo, ldo, pw, x + t * ldx, ldx, K, G, nr, 2); break;
    case 1: awq_tile_avx512(out + t * ldo, ldo, pw, x + t * ldx, ldx, K, G, nr, 1); break;
    default: break;
    }
}

/* avx512_bf16. The activations, per row and group: xb, the group's x rounded
 * to bf16 (nearest even, denormals flushed, as the instruction does) and
 * zero-padded to the group's 8 k-steps per block, and sx, the fp32 sum of
 * those bf16 values. A tile then sums acc = q . xb over the group with
 * vdpbf16ps (q in 0..15 is an exact bf16, the products are exact) and adds
 * s * (acc - z * sx) to the output: the scale and zero once per group. */
typedef struct {
    uint32_t *xb;      /* (T, K/G, nb * 4) bf16 pairs */
    float *sx;         /* (T, K/G) */
    const float *x;    /* (T, K) */
    int64_t K, G;
} awq_round_args_t;

TARGET_BF16 static void awq_round_rows(void *arg, int64_t t0, int64_t t1, int worker) {
    (void)worker;
    const awq_round_args_t *a = arg;
    int64_t n_groups = a->K / a->G, gp = awq_blocks_per_group(a->G) * AWQ_KB; /* bf16 per padded group */
    for (int64_t t = t0; t < t1; t++) {
        const float *xr = a->x + t * a->K;
        uint16_t *dst = (uint16_t *)(a->xb + t * n_groups * (gp / 2));
        for (int64_t g = 0; g < n_groups; g++) {
            __m512 sum = _mm512_setzero_ps();
            for (int64_t kk = 0; kk < gp; kk += 16) {
                int64_t nx = a->G - kk, nd = gp - kk;
                __mmask16 mx = nx >= 16 ? 0xffff : nx > 0 ? (__mmask16)((1u << nx) - 1) : 0;
                __mmask16 md = nd >= 16 ? 0xffff : (__mmask16)((1u << nd) - 1);
                __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(mx, xr + g * a->G + kk));
                _mm256_mask_storeu_epi16(dst + g * gp + kk, md, h);
                sum = _mm512_add_ps(sum, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)));
            }
            a->sx[t * n_groups + g] = _mm512_reduce_add_ps(sum);
        }
    }
}

/* bf16 of i mod 16 for i < 32 (exact): vpermw reads the low 5 bits of each
 * 16-bit index, so the nibble above a shifted one needs no mask. */
static const uint16_t AWQ_BF16_LUT[32] = {
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
    0x0000, 0x3f80, 0x4000, 0x4040, 0x4080, 0x40a0, 0x40c0, 0x40e0,
    0x4100, 0x4110, 0x4120, 0x4130, 0x4140, 0x4150, 0x4160, 0x4170,
};

/* One 16-column register per 16 columns: per k-pair m of a block, one shift
 * and one vpermw make 32 bf16 weights, which feed mr rows. */
TARGET_BF16 INLINE void awq_tile_bf16(float *out, int64_t ldo, const uint8_t *pw, const uint32_t *xb, int64_t ldxb,
                                      const float *sx, int64_t ldsx, int64_t K, int64_t G, int nr, const int mr) {
    const __m512i lut = _mm512_loadu_si512(AWQ_BF16_LUT);
    int64_t n_groups = K / G, nb = awq_blocks_per_group(G);
    float o[AWQ_MR][AWQ_NP] = {{0}};
    const uint8_t *group = pw;
    for (int64_t g = 0; g < n_groups; g++, group += awq_group_bytes(G)) {
        __m512 acc[AWQ_MR][4];
        for (int r = 0; r < mr; r++)
            for (int v = 0; v < 4; v++) acc[r][v] = _mm512_setzero_ps();
        const uint32_t *blocks = (const uint32_t *)(group + AWQ_HDR_BYTES), *xg = xb + g * nb * 4;
        for (int64_t b = 0; b < nb; b++) {
            __m512i q[4];
            for (int v = 0; v < 4; v++) q[v] = _mm512_loadu_si512(blocks + b * AWQ_NP + 16 * v);
#pragma GCC unroll 4
            for (int m = 0; m < 4; m++) {
                __m512bh w[4];
                for (int v = 0; v < 4; v++)
                    w[v] = (__m512bh)_mm512_permutexvar_epi16(_mm512_srli_epi32(q[v], 4 * m), lut);
#pragma GCC unroll 4
                for (int r = 0; r < mr; r++) {
                    __m512bh xr = (__m512bh)_mm512_set1_epi32((int)xg[r * ldxb + 4 * b + m]);
                    for (int v = 0; v < 4; v++) acc[r][v] = _mm512_dpbf16_ps(acc[r][v], xr, w[v]);
                }
            }
        }
        for (int v = 0; v < 4; v++) {
            __m512 s = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(group + 32 * v)));
            __m512 z = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(group + 128 + 16 * v))));
            for (int r = 0; r < mr; r++) {
                __m512 d = _mm512_fnmadd_ps(z, _mm512_set1_ps(sx[r * ldsx + g]), acc[r][v]); /* acc - z sx */
                _mm512_storeu_ps(o[r] + 16 * v, _mm512_fmadd_ps(s, d, _mm512_loadu_ps(o[r] + 16 * v)));
            }
        }
    }
    for (int r = 0; r < mr; r++) memcpy(out + r * ldo, o[r], (size_t)nr * sizeof(float));
}

TARGET_BF16 static void awq_panel_bf16(float *out, int64_t ldo, const uint8_t *pw, const uint32_t *xb, int64_t ldxb,
                                       const float *sx, int64_t ldsx, int64_t K, int64_t G, int nr, int64_t T) {
    int64_t t = 0;
    for (; t + AWQ_MR <= T; t += AWQ_MR)
        awq_tile_bf16(out + t * ldo, ldo, pw, xb + t * ldxb, ldxb, sx + t * ldsx, ldsx, K, G, nr, AWQ_MR);
    switch ((int)(T - t)) {
    case 3: awq_tile_bf16(out + t * ldo, ldo, pw, xb + t * ldxb, ldxb, sx + t * ldsx, ldsx, K, G, nr, 3); break;
    case 2: awq_tile_bf16(out + t * ldo, ldo, pw, xb + t * ldxb, ldxb, sx + t * ldsx, ldsx, K, G, nr, 2); break;
    case 1: awq_tile_bf16(out + t * ldo, ldo, pw, xb + t * ldxb, ldxb, sx + t * ldsx, ldsx, K, G, nr, 1); break;
    default: break;
    }
}

/* AVX2 (bits of its own): integer sums on 16-bit activations. Each row's x
 * is quantized once per op to int16 per group (awq_quantize_rows: x16 =
 * round(x / d_g), d_g the power of two just above max_{k in g} |x(k)| /
 * 32767, so |x - d_g x16| <= d_g / 2 < 2^-15 of the group's largest, finer
 * than avx512_bf16's rounding of each element), and then
 *   out_n = sum_g s(g, n) d_g (sum_{k in g} q(k, n) x16(k) - z(g, n) sx16_g),
 * sx16_g = sum_{k in g} x16(k). The inner sums are exact, in int32: a
 * block's uint32 holds the k-steps (2m, 2m + 1) at bits 4m and 16 + 4m, so a
 * shift by 4m and a mask 0x000f000f make the pair two 16-bit lanes, and one
 * vpmaddwd against the pair (x16(2m), x16(2m + 1)) adds both products into
 * the column's int32 lane: per 16 weights a shift, an AND, a multiply-add
 * and an add, where the fp32 way took an AND, a convert and an FMA per 8.
 * The panel's 8
 * column registers are summed at once. The sums are flushed to fp32 every
 * AWQ_I16_CHUNK k-steps, so no int32 overflows (15 * 32767 * 2 per lane and
 * pair). cpu_awq_avx2_reads gives the activations this level computes with, for
 * its test's reference. */
#define AWQ_I16_CHUNK 2048

/* acc[v] += sum over the block's k-steps of q(k) x16(k), for the 8 column
 * registers; xp: the block's 4 pairs of x16 (zero past the group's end). */
TARGET_AVX2 INLINE void awq_block_avx2(__m256i acc[8], const uint32_t *blk, const int32_t *xp) {
    const __m256i mask = _mm256_set1_epi32(0x000f000f);
    __m256i x[4];
    for (int m = 0; m < 4; m++) x[m] = _mm256_set1_epi32(xp[m]);
    for (int v = 0; v < 8; v++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(blk + 8 * v));
        __m256i sum = _mm256_madd_epi16(_mm256_and_si256(q, mask), x[0]);
        for (int m = 1; m < 4; m++)
            sum = _mm256_add_epi32(sum, _mm256_madd_epi16(_mm256_and_si256(_mm256_srli_epi32(q, 4 * m), mask), x[m]));
        acc[v] = _mm256_add_epi32(acc[v], sum);
    }
}

/* xq: the rows' x16, each group padded to whole blocks of 8 with zeros (ldq
 * apart); dq, sq: per row and group, d_g and sx16_g (ldg apart). */
TARGET_AVX2 static void awq_panel_avx2(float *out, int64_t ldo, const uint8_t *pw, const int16_t *xq, int64_t ldq,
                                       const float *dq, const float *sq, int64_t ldg, int64_t K, int64_t G, int nr,
                                       int64_t T) {
    const int64_t n_groups = K / G, nb = awq_blocks_per_group(G);
    for (int64_t t = 0; t < T; t++) {
        float o[AWQ_NP] = {0};
        const uint8_t *group = pw;
        for (int64_t g = 0; g < n_groups; g++, group += awq_group_bytes(G)) {
            const uint32_t *blocks = (const uint32_t *)(group + AWQ_HDR_BYTES);
            const int16_t *xg = xq + t * ldq + g * nb * AWQ_KB;
            /* The next group streams in while this one is summed. */
            const uint8_t *next = group + awq_group_bytes(G);
            __m256 f[8];
            for (int v = 0; v < 8; v++) f[v] = _mm256_setzero_ps();
            for (int64_t b0 = 0; b0 < nb; b0 += AWQ_I16_CHUNK / AWQ_KB) {
                const int64_t b1 = nb - b0 < AWQ_I16_CHUNK / AWQ_KB ? nb : b0 + AWQ_I16_CHUNK / AWQ_KB;
                __m256i acc[8];
                for (int v = 0; v < 8; v++) acc[v] = _mm256_setzero_si256();
                for (int64_t b = b0; b < b1; b++) {
                    if (g + 1 < n_groups)
                        for (int c = 0; c < 4; c++)
                            _mm_prefetch((const char *)(next + (size_t)b * AWQ_NP * 4 + 64 * c), _MM_HINT_T0);
                    int32_t xp[4];
                    memcpy(xp, xg + b * AWQ_KB, sizeof xp);
                    awq_block_avx2(acc, blocks + b * AWQ_NP, xp);
                }
                for (int v = 0; v < 8; v++) f[v] = _mm256_add_ps(f[v], _mm256_cvtepi32_ps(acc[v]));
            }
            const __m256 d = _mm256_set1_ps(dq[t * ldg + g]), sx = _mm256_set1_ps(sq[t * ldg + g]);
            for (int v = 0; v < 8; v++) {
                const __m256 sv = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(group + 16 * v)));
                const __m256 z =
                    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(group + 128 + 8 * v))));
                const __m256 diff = _mm256_fnmadd_ps(z, sx, f[v]); /* sum q x16 - z sx16 */
                _mm256_storeu_ps(o + 8 * v, _mm256_fmadd_ps(_mm256_mul_ps(sv, d), diff, _mm256_loadu_ps(o + 8 * v)));
            }
        }
        memcpy(out + t * ldo, o, (size_t)nr * sizeof(float));
    }
}
#endif

static void awq_panel_portable_rows(float *out, int64_t ldo, const uint8_t *pw, const float *x, int64_t ldx,
                                    int64_t K, int64_t G, int nr, int64_t T) {
    for (int64_t t = 0; t < T; t++) awq_panel_portable(out + t * ldo, ldo, pw, x + t * ldx, ldx, K, G, nr, 1);
}

/* ---- the op ------------------------------------------------------------------
 * One job over the panels of n linears of the same input (cpu_linears_*):
 * the activations are rounded or quantized once for all of them, and the
 * pool splits the parts' panels together, so q/k/v (or gate/up) cost one
 * hand-off to the workers instead of three; each part's outputs have the
 * bits of its own call, whose sums do not depend on the other columns. */

typedef void (*awq_panel_fn_t)(float *, int64_t, const uint8_t *, const float *, int64_t, int64_t, int64_t, int,
                               int64_t);

typedef struct {
    const cpu_linear_part_t *parts;
    int64_t first[CPU_LINEAR_MAX_PARTS + 1]; /* each part's first panel in the job; first[n] = all */
    const float *x;
    int64_t T, K, G;
    awq_panel_fn_t panel;
    const uint32_t *xb; /* avx512_bf16: x as awq_round_rows makes it, else NULL */
    const float *sx;    /* its group sums of x */
    const int16_t *xq;  /* avx2: x as awq_quantize_rows makes it, else NULL */
    const float *dq, *sq; /* its group scales and sums */
} awq_args_t;

typedef struct {
    int16_t *xq;      /* (T, n_groups * blocks per group * 8) */
    float *dq, *sq;   /* (T, n_groups) */
    const float *x;   /* (T, K) */
    int64_t K, G;
} awq_quantize_args_t;

/* The group's d_g: the power of two just above amax / 32767, so that x / d is
 * exact but for the rounding to an integer and a unit vector's products come
 * out exact; 0 for a group below 2^-125 * 32767 (it reads as zeros), NaN for
 * one with a NaN or an infinity (finite false). *inv = 1 / d, or 0. */
static float awq_group_scale(float amax, bool finite, float *inv) {
    int e = 0;
    if (finite && amax > 0.0f) frexpf(amax / 32767.0f, &e);
    const bool zero = !finite || !(amax > 0.0f) || e < -125;
    *inv = zero ? 0.0f : ldexpf(1.0f, -e);
    return !finite ? NAN : zero ? 0.0f : ldexpf(1.0f, e);
}

/* One group of G activations: x16 = round(x / d) into xq (padded with zeros
 * to nq), returning sum x16; *d as awq_group_scale. */
static int64_t awq_quantize_group(int16_t *xq, const float *x, int64_t G, int64_t nq, float *d) {
    float amax = 0.0f, inv;
    bool finite = true;
    for (int64_t kk = 0; kk < G; kk++) {
        amax = fmaxf(amax, fabsf(x[kk]));
        finite &= isfinite(x[kk]);
    }
    *d = awq_group_scale(amax, finite, &inv);
    int64_t sum = 0;
    for (int64_t kk = 0; kk < nq; kk++) {
        xq[kk] = kk < G ? (int16_t)lrintf(x[kk] * inv) : 0;
        sum += xq[kk];
    }
    return sum;
}

#ifdef HAVE_X86_LEVELS
/* awq_quantize_group in AVX2, the same values (max is exact, x * inv exact,
 * the conversion rounds to nearest even as lrintf does), for G a multiple
 * of 16. */
TARGET_AVX2 static int64_t awq_quantize_group_avx2(int16_t *xq, const float *x, int64_t G, float *d) {
    const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff)), zero = _mm256_setzero_ps();
    __m256 vmax = zero, nan = zero; /* x * 0 is NaN for a NaN or an infinity */
    for (int64_t kk = 0; kk < G; kk += 8) {
        const __m256 v = _mm256_loadu_ps(x + kk);
        vmax = _mm256_max_ps(vmax, _mm256_and_ps(v, abs_mask));
        nan = _mm256_add_ps(nan, _mm256_mul_ps(v, zero));
    }
    float m[8], z[8], amax = 0.0f, inv;
    _mm256_storeu_ps(m, vmax), _mm256_storeu_ps(z, nan);
    bool finite = true;
    for (int i = 0; i < 8; i++) amax = fmaxf(amax, m[i]), finite &= !isnan(z[i]);
    *d = awq_group_scale(amax, finite, &inv);
    const __m256 vinv = _mm256_set1_ps(inv);
    __m256i sum = _mm256_setzero_si256();
    for (int64_t kk = 0; kk < G; kk += 16) {
        const __m256i a = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + kk), vinv)),
                      b = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + kk + 8), vinv));
        sum = _mm256_add_epi32(sum, _mm256_add_epi32(a, b));
        _mm256_storeu_si256((__m256i *)(xq + kk), _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xd8));
    }
    int32_t sv[8];
    _mm256_storeu_si256((__m256i *)sv, sum);
    int64_t total = 0;
    for (int i = 0; i < 8; i++) total += sv[i];
    return total;
}
#endif

/* For the AVX2 level: per row and group, d_g (awq_group_scale), x16 =
 * round(x / d_g) (|x16| <= 32767), padded with zeros to whole blocks, and
 * sx16_g = sum x16. */
static void awq_quantize_rows(void *arg, int64_t t0, int64_t t1, int worker) {
    (void)worker;
    const awq_quantize_args_t *a = arg;
    const int64_t n_groups = a->K / a->G, nq = awq_blocks_per_group(a->G) * AWQ_KB;
#ifdef HAVE_X86_LEVELS
    const bool avx2 = cpu_isa() >= CPU_ISA_AVX2 && a->G % 16 == 0;
#else
    const bool avx2 = false;
#endif
    for (int64_t t = t0; t < t1; t++)
        for (int64_t g = 0; g < n_groups; g++) {
            const float *x = a->x + t * a->K + g * a->G;
            int16_t *xq = a->xq + t * n_groups * nq + g * nq;
            float *d = &a->dq[t * n_groups + g];
            int64_t sum;
#ifdef HAVE_X86_LEVELS
            if (avx2) sum = awq_quantize_group_avx2(xq, x, a->G, d);
            else
#endif
                sum = awq_quantize_group(xq, x, a->G, nq, d);
            a->sq[t * n_groups + g] = (float)sum;
        }
}

void cpu_awq_avx2_reads(float *dst, const float *x, int64_t T, int64_t K, int64_t G) {
    const int64_t n_groups = K / G, ldq = n_groups * awq_blocks_per_group(G) * AWQ_KB;
    int16_t *xq = sl_malloc((size_t)(T * ldq) * sizeof *xq);
    float *dq = sl_malloc((size_t)(T * n_groups) * sizeof *dq), *sq = sl_malloc((size_t)(T * n_groups) * sizeof *sq);
    awq_quantize_args_t q = {xq, dq, sq, x, K, G};
    awq_quantize_rows(&q, 0, T, 0);
    for (int64_t t = 0; t < T; t++)
        for (int64_t k = 0; k < K; k++)
            dst[t * K + k] = dq[t * n_groups + k / G] * (float)xq[t * ldq + k / G * awq_blocks_per_group(G) * AWQ_KB + k % G];
    free(xq), free(dq), free(sq);
}

static void awq_panels(void *arg, int64_t p0, int64_t p1, int worker) {
    (void)worker;
    const awq_args_t *a = arg;
    size_t panel_bytes = awq_panel_bytes(a->K, a->G);
    for (int64_t p = p0, j = 0; p < p1; p++) {
        while (p >= a->first[j + 1]) j++;
        const int64_t N = a->parts[j].N, n0 = (p - a->first[j]) * AWQ_NP;
        const int nr = N - n0 < AWQ_NP ? (int)(N - n0) : AWQ_NP;
        float *out = a->parts[j].out + n0;
        const uint8_t *pw = (const uint8_t *)a->parts[j].packed + (size_t)(p - a->first[j]) * panel_bytes;
#ifdef HAVE_X86_LEVELS
        if (a->xb) {
            int64_t n_groups = a->K / a->G;
            awq_panel_bf16(out, N, pw, a->xb, n_groups * awq_blocks_per_group(a->G) * 4, a->sx, n_groups, a->K, a->G,
                           nr, a->T);
            continue;
        }
        if (a->xq) {
            int64_t n_groups = a->K / a->G;
            awq_panel_avx2(out, N, pw, a->xq, n_groups * awq_blocks_per_group(a->G) * AWQ_KB, a->dq, a->sq, n_groups,
                           a->K, a->G, nr, a->T);
            continue;
        }
#endif
        a->panel(out, N, pw, a->x, a->K, a->K, a->G, nr, a->T);
    }
}

void cpu_linear_awq_packed(float *out, const float *in, const void *packed, int64_t T, int64_t N, int64_t K,
                           int64_t G) {
    const cpu_linear_part_t part = {out, packed, N};
    cpu_linears_awq_packed(&part, 1, in, T, K, G);
}

void cpu_linears_awq_packed(const cpu_linear_part_t *parts, int n, const float *in, int64_t T, int64_t K, int64_t G) {
    SL_ASSERT(n >= 1 && n <= CPU_LINEAR_MAX_PARTS);
    awq_args_t a = {parts, {0}, in, T, K, G, awq_panel_portable_rows, NULL, NULL, NULL, NULL, NULL};
    int64_t sum_n = 0;
    for (int j = 0; j < n; j++) {
        awq_check_shape(parts[j].N, K, G);
        a.first[j + 1] = a.first[j] + (parts[j].N + AWQ_NP - 1) / AWQ_NP;
        sum_n += parts[j].N;
    }
    cpu_isa_t isa = cpu_isa();
    uint32_t *xb = NULL;
    int16_t *xq = NULL;
    float *sx = NULL, *dq = NULL, *sq = NULL;
#ifdef HAVE_X86_LEVELS
    if (isa == CPU_ISA_AVX512_BF16) {
        /* The activations rounded, and their group sums, once for every panel. */
        int64_t n_groups = K / G;
        xb = sl_malloc((size_t)(T * n_groups * awq_blocks_per_group(G) * 4) * sizeof *xb);
        sx = sl_malloc((size_t)(T * n_groups) * sizeof *sx);
        awq_round_args_t r = {xb, sx, in, K, G};
        cpu_parallel_for(T * K, T, 0, awq_round_rows, &r);
        a.xb = xb, a.sx = sx;
    } else if (isa == CPU_ISA_AVX512) {
        a.panel = awq_panel_avx512;
    } else if (isa == CPU_ISA_AVX2) {
        /* The activations quantized to int16 per group, once for every panel. */
        int64_t n_groups = K / G;
        xq = sl_malloc((size_t)(T * n_groups * awq_blocks_per_group(G) * AWQ_KB) * sizeof *xq);
        dq = sl_malloc((size_t)(T * n_groups) * sizeof *dq);
        sq = sl_malloc((size_t)(T * n_groups) * sizeof *sq);
        awq_quantize_args_t r = {xq, dq, sq, in, K, G};
        cpu_parallel_for(T * K, T, 0, awq_quantize_rows, &r);
        a.xq = xq, a.dq = dq, a.sq = sq;
    }
#else
    (void)isa;
#endif
    cpu_parallel_for(T * sum_n * K, a.first[n], 0, awq_panels, &a);
    free(xb), free(xq);
    free(sx), free(dq), free(sq);
}
