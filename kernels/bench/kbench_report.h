/* kbench_report.h - the pure-C half of servelab-kernel-bench: options, model
 * shapes, the minimal bytes and FLOPs of each kernel, medians, the roofline
 * and the report (aligned table, RESULT lines, JSON).
 *
 * Nothing here touches CUDA, so tests/unit/test_kbench_report.c checks it in
 * every build. The counts are the least traffic an op can get away with:
 * each input element read once, each output element written once (the
 * attention workspace and any re-read are the kernel's own cost, not the
 * op's), so "% of roofline" is an honest upper bound of 100.
 */
#ifndef SERVELAB_KBENCH_REPORT_H
#define SERVELAB_KBENCH_REPORT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "servelab/config.h"

/* ---- options ------------------------------------------------------------------ */

#define KB_MAX_ONLY 16

typedef struct {
    sl_dtype_t dt;          /* DTYPE_BF16 (default), DTYPE_F16 or DTYPE_F32 */
    int iters;              /* timed iterations per case (median reported) */
    int warmup;             /* untimed launches first */
    int quick;              /* fewer shapes */
    const char *model;      /* NULL: every model; else one name of kb_models */
    const char *json_path;  /* NULL: no JSON */
    int n_only;             /* 0: every kernel */
    const char *only[KB_MAX_ONLY];
} kb_opts_t;

/* The kernels the bench knows, in the order it runs them (NULL-terminated). */
extern const char *const kb_kernel_names[];

/* Parses argv[1..] into *o (defaults first). Returns 0, 1 when --help was
 * asked (nothing else parsed), or -1 with one line in err (usage error).
 * The strings in *o point into argv. */
int kb_parse_args(int argc, char **argv, kb_opts_t *o, char *err, size_t err_cap);
/* Whether `kernel` runs under o's --only. */
int kb_opts_wants(const kb_opts_t *o, const char *kernel);
extern const char kb_usage[];

/* "bf16", "f16", "f32" (others: "?"). */
const char *kb_dtype_short(sl_dtype_t dt);
/* Bytes per element of the float dtypes: 4 or 2. */
int64_t kb_elem_bytes(sl_dtype_t dt);

/* ---- model shapes ---------------------------------------------------------------- */

typedef struct {
    const char *name;
    int64_t hidden, H, Hkv, D, inter, V;
    float rope_theta;
} kb_model_t;

extern const kb_model_t kb_models[];
extern const int kb_n_models;
/* The model called `name`, or NULL. */
const kb_model_t *kb_model_find(const char *name);

/* Token counts T of a step: 1 (batch-1 decode), 64 and 256 (decode batches),
 * 2048 and 8192 (prefill chunks); --quick: 1 and 2048. Returns the count. */
int kb_token_counts(int quick, int64_t out[8]);
/* Decode attention: batches {1, 8, 64} x contexts {512, 4096, 32768};
 * --quick: {1, 64} x {4096}. Prefill attention: {2048, 8192}; --quick {2048}. */
int kb_decode_batches(int quick, int64_t out[4]);
int kb_decode_contexts(int quick, int64_t out[4]);
int kb_prefill_lengths(int quick, int64_t out[4]);

/* ---- minimal bytes and FLOPs (es: bytes per element) ------------------------------ */

/* in (T, n) read, w (n) read, out (T, n) written */
double kb_bytes_rmsnorm(int64_t T, int64_t n, int64_t es);
/* x, y (T, n) and w read; x and out written */
double kb_bytes_add_rmsnorm(int64_t T, int64_t n, int64_t es);
/* gate, up (n) read; out (n) written */
double kb_bytes_silu_mul(int64_t n, int64_t es);
/* q (T, H, D), k, v (T, Hkv, D), positions (int32), slots (int64) read; q and k
 * rewritten, one k and one v cache row written per token */
double kb_bytes_rope_kv_write(int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t es);
/* ids (int32) read, T table rows read, out (T, n) written */
double kb_bytes_embed(int64_t T, int64_t n, int64_t es);
/* S sequences of `ctx` tokens each, one query token each: the K and V of
 * every context token, q, out, block tables (int32, blocks of B) */
double kb_bytes_attn_decode(int64_t S, int64_t ctx, int64_t H, int64_t Hkv, int64_t D, int64_t B, int64_t es);
/* q.k and p.v: 2 FLOPs per multiply-add, 2 * D multiply-adds per (query head, key) */
double kb_flops_attn_decode(int64_t S, int64_t ctx, int64_t H, int64_t D);
/* One fresh causal prompt of T tokens: q, k, v (its own T tokens) read, out written */
double kb_bytes_attn_prefill(int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t es);
/* Causal: query i sees i + 1 keys, so sum_i 4 * H * D * (i + 1) = 2 H D T (T + 1) */
double kb_flops_attn_prefill(int64_t T, int64_t H, int64_t D);
/* out (T, N) = in (T, K) . W (N, K)^T: in and W read (in_es), out written (out_es) */
double kb_bytes_gemm(int64_t T, int64_t N, int64_t K, int64_t in_es, int64_t out_es);
double kb_flops_gemm(int64_t T, int64_t N, int64_t K);

/* ---- statistics and the roofline --------------------------------------------------- */

/* The median of x[0..n) (mean of the middle two when n is even); x is left
 * as it was. 0 when n < 1. */
double kb_median(const double *x, int n);

typedef enum { KB_CHECK_NONE = -1, KB_CHECK_FAIL = 0, KB_CHECK_PASS = 1 } kb_check_t;

typedef struct {
    char kernel[32];        /* "rmsnorm", "gemm", ... */
    char model[32];         /* "llama-3-8b", or "-" */
    char shape[96];         /* "T=2048,n=4096": no spaces (RESULT lines split on them) */
    char dtype[8];
    double median_us;
    double bytes, flops;    /* minimal traffic and work of one launch */
    double gbs, tflops;     /* achieved: bytes / time, flops / time */
    double pct;             /* % of the roofline: the larger of bytes / copy rate and
                             * flops / GEMM rate (the time the op cannot beat), over the time */
    const char *bound;      /* "memory" or "compute": which of the two is the larger */
    kb_check_t check;
} kb_result_t;

/* Fills r's gbs, tflops, pct and bound from median_us, bytes and flops and the
 * roofline measured in the same run (copy_gbs: device copy bandwidth,
 * read + write; gemm_tflops: the cuBLAS GEMM rate). A rate <= 0 leaves its
 * bound out; pct is 0 when neither applies. */
void kb_roofline(kb_result_t *r, double copy_gbs, double gemm_tflops);

/* ---- output -------------------------------------------------------------------------- */

/* One aligned table line: the header, and a result. Return buf. */
const char *kb_format_header(char *buf, size_t cap);
const char *kb_format_row(char *buf, size_t cap, const kb_result_t *r);
/* "RESULT kernel=... model=... shape=... dtype=... median_us=... gbs=... tflops=...
 *  pct=... bound=... check=PASS|FAIL|-" */
const char *kb_format_result_line(char *buf, size_t cap, const kb_result_t *r);
/* The whole run as one JSON object: device, dtype, iters, roofline, results.
 * Returns 0, or -1 on a write error. */
int kb_write_json(FILE *f, const char *device, const kb_opts_t *o, double copy_gbs, double gemm_tflops,
                  const kb_result_t *r, int n);

#endif
