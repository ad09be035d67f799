/* kbench_report.c - options, shapes, byte/FLOP counts, medians, roofline and
 * the report of servelab-kernel-bench (see kbench_report.h). Pure C: unit-tested
 * by tests/unit/test_kbench_report.c in every build.
 */
#include "kbench_report.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

const char *const kb_kernel_names[] = {"rmsnorm", "add_rmsnorm", "silu_mul", "rope_kv_write", "embed",
                                       "attn_decode", "attn_prefill", "gemm", "gemv", "awq_gemv", "awq_mma", "sample", NULL};

const char kb_usage[] =
    "usage: servelab-kernel-bench [--dtype bf16|f16|f32] [--iters N] [--warmup N] [--quick]\n"
    "                             [--only NAME[,NAME...]] [--model llama-3-8b|tinyllama-1.1b] [--json FILE]\n"
    "Validates each CUDA kernel (and the cuBLAS GEMMs of the linear layers) against its CPU twin,\n"
    "then times it with CUDA events (median of --iters, default 50, each after an L2 flush) and\n"
    "prints GB/s or TFLOP/s and the % of the roofline measured in the same run (device copy\n"
    "bandwidth, cuBLAS 8192^3 GEMM rate). Kernels: rmsnorm add_rmsnorm silu_mul rope_kv_write\n"
    "embed attn_decode attn_prefill gemm gemv awq_gemv awq_mma sample. Exit status: 0 all PASS, 1 a FAIL or CUDA error,\n"
    "2 usage error, 77 no CUDA device.\n";

/* ---- options ------------------------------------------------------------------ */

static int fail(char *err, size_t cap, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, cap, fmt, ap);
    va_end(ap);
    return -1;
}

static int parse_count(const char *flag, const char *v, int lo, int hi, int *out, char *err, size_t cap) {
    char *end = NULL;
    long x = strtol(v, &end, 10);
    if (!*v || *end || x < lo || x > hi)
        return fail(err, cap, "argument %s: expected an integer in [%d, %d], got '%s'", flag, lo, hi, v);
    *out = (int)x;
    return 0;
}

static int parse_dtype(const char *v, sl_dtype_t *dt) {
    if (!strcmp(v, "bf16") || !strcmp(v, "bfloat16")) *dt = DTYPE_BF16;
    else if (!strcmp(v, "f16") || !strcmp(v, "fp16") || !strcmp(v, "float16") || !strcmp(v, "half")) *dt = DTYPE_F16;
    else if (!strcmp(v, "f32") || !strcmp(v, "fp32") || !strcmp(v, "float32") || !strcmp(v, "float")) *dt = DTYPE_F32;
    else return -1;
    return 0;
}

static int known_kernel(const char *name, size_t len) {
    for (int i = 0; kb_kernel_names[i]; i++)
        if (strlen(kb_kernel_names[i]) == len && !strncmp(kb_kernel_names[i], name, len)) return i;
    return -1;
}

/* --only a,b: each name must be known; kept as pointers into argv's string. */
static int parse_only(char *v, kb_opts_t *o, char *err, size_t cap) {
    for (char *p = v; *p;) {
        size_t len = strcspn(p, ",");
        int k = known_kernel(p, len);
        if (k < 0) return fail(err, cap, "argument --only: unknown kernel '%.*s' (choose from rmsnorm, add_rmsnorm, "
                               "silu_mul, rope_kv_write, embed, attn_decode, attn_prefill, gemm, gemv, awq_gemv, awq_mma, sample)", (int)len, p);
        if (o->n_only == KB_MAX_ONLY) return fail(err, cap, "argument --only: too many names");
        o->only[o->n_only++] = kb_kernel_names[k];
        p += len;
        if (*p == ',') p++;
    }
    if (o->n_only == 0) return fail(err, cap, "argument --only: expected at least one kernel name");
    return 0;
}

int kb_parse_args(int argc, char **argv, kb_opts_t *o, char *err, size_t cap) {
    memset(o, 0, sizeof *o);
    o->dt = DTYPE_BF16, o->iters = 50, o->warmup = 5;
    for (int i = 1; i < argc; i++) {
        char *a = argv[i], *v = NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) return 1;
        if (!strcmp(a, "--quick")) {
            o->quick = 1;
            continue;
        }
        /* every other flag takes a value: --flag VALUE or --flag=VALUE */
        char *eq = strncmp(a, "--", 2) == 0 ? strchr(a, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - a) : strlen(a);
        static const char *const valued[] = {"--dtype", "--iters", "--warmup", "--only", "--model", "--json", NULL};
        int f = -1;
        for (int k = 0; valued[k]; k++)
            if (strlen(valued[k]) == name_len && !strncmp(valued[k], a, name_len)) f = k;
        if (f < 0) return fail(err, cap, "unrecognized argument: %s", a);
        if (eq) v = eq + 1;
        else if (i + 1 < argc) v = argv[++i];
        else return fail(err, cap, "argument %s: expected a value", valued[f]);
        switch (f) {
        case 0:
            if (parse_dtype(v, &o->dt)) return fail(err, cap, "argument --dtype: expected bf16, f16 or f32, got '%s'", v);
            break;
        case 1: if (parse_count("--iters", v, 1, 100000, &o->iters, err, cap)) return -1; break;
        case 2: if (parse_count("--warmup", v, 0, 1000, &o->warmup, err, cap)) return -1; break;
        case 3: if (parse_only(v, o, err, cap)) return -1; break;
        case 4:
            if (strcmp(v, "all") && !kb_model_find(v))
                return fail(err, cap, "argument --model: unknown model '%s' (llama-3-8b, tinyllama-1.1b or all)", v);
            o->model = strcmp(v, "all") ? v : NULL;
            break;
        default:
            if (!*v) return fail(err, cap, "argument --json: expected a file name");
            o->json_path = v;
        }
    }
    return 0;
}

int kb_opts_wants(const kb_opts_t *o, const char *kernel) {
    if (o->n_only == 0) return 1;
    for (int i = 0; i < o->n_only; i++)
        if (!strcmp(o->only[i], kernel)) return 1;
    return 0;
}

const char *kb_dtype_short(sl_dtype_t dt) {
    return dt == DTYPE_BF16 ? "bf16" : dt == DTYPE_F16 ? "f16" : dt == DTYPE_F32 ? "f32" : "?";
}

int64_t kb_elem_bytes(sl_dtype_t dt) { return dt == DTYPE_F32 ? 4 : 2; }

/* ---- shapes ---------------------------------------------------------------------- */

const kb_model_t kb_models[] = {
    /* name             hidden  H   Hkv  D    inter  V       rope_theta */
    {"llama-3-8b", 4096, 32, 8, 128, 14336, 128256, 500000.0f},
    {"tinyllama-1.1b", 2048, 32, 4, 64, 5632, 32000, 10000.0f},
};
const int kb_n_models = (int)(sizeof kb_models / sizeof kb_models[0]);

const kb_model_t *kb_model_find(const char *name) {
    for (int i = 0; i < kb_n_models; i++)
        if (!strcmp(kb_models[i].name, name)) return &kb_models[i];
    return NULL;
}

static int copy_list(const int64_t *src, int n, int64_t *out) {
    memcpy(out, src, (size_t)n * sizeof *out);
    return n;
}

int kb_token_counts(int quick, int64_t out[8]) {
    static const int64_t full[] = {1, 64, 256, 2048, 8192}, brief[] = {1, 2048};
    return quick ? copy_list(brief, 2, out) : copy_list(full, 5, out);
}

int kb_decode_batches(int quick, int64_t out[4]) {
    static const int64_t full[] = {1, 8, 64}, brief[] = {1, 64};
    return quick ? copy_list(brief, 2, out) : copy_list(full, 3, out);
}

int kb_decode_contexts(int quick, int64_t out[4]) {
    static const int64_t full[] = {512, 4096, 32768}, brief[] = {4096};
    return quick ? copy_list(brief, 1, out) : copy_list(full, 3, out);
}

int kb_prefill_lengths(int quick, int64_t out[4]) {
    static const int64_t full[] = {2048, 8192}, brief[] = {2048};
    return quick ? copy_list(brief, 1, out) : copy_list(full, 2, out);
}

/* ---- counts: doubles, since 8192 x 128256 x 4096 overflows nothing there ---------------- */

double kb_bytes_rmsnorm(int64_t T, int64_t n, int64_t es) { return ((double)T * n * 2 + (double)n) * (double)es; }

double kb_bytes_add_rmsnorm(int64_t T, int64_t n, int64_t es) { return ((double)T * n * 4 + (double)n) * (double)es; }

double kb_bytes_silu_mul(int64_t n, int64_t es) { return 3.0 * (double)n * (double)es; }

double kb_bytes_rope_kv_write(int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t es) {
    /* read q, k, v; write q, k, k_cache, v_cache: (2 H + 5 Hkv) D elements per token */
    return (double)T * ((double)(2 * H + 5 * Hkv) * (double)D * (double)es + 4.0 + 8.0);
}

double kb_bytes_embed(int64_t T, int64_t n, int64_t es) { return (double)T * (2.0 * (double)n * (double)es + 4.0); }

double kb_bytes_attn_decode(int64_t S, int64_t ctx, int64_t H, int64_t Hkv, int64_t D, int64_t B, int64_t es) {
    double kv = 2.0 * (double)S * (double)ctx * (double)Hkv * (double)D * (double)es;
    double qo = 2.0 * (double)S * (double)H * (double)D * (double)es;
    double meta = (double)S * ((double)((ctx + B - 1) / B) * 4.0 + 4.0 * 3); /* tables, seq_lens, positions, starts */
    return kv + qo + meta;
}

double kb_flops_attn_decode(int64_t S, int64_t ctx, int64_t H, int64_t D) {
    return 4.0 * (double)S * (double)ctx * (double)H * (double)D;
}

double kb_bytes_attn_prefill(int64_t T, int64_t H, int64_t Hkv, int64_t D, int64_t es) {
    return (double)T * (double)(2 * H + 2 * Hkv) * (double)D * (double)es;
}

double kb_flops_attn_prefill(int64_t T, int64_t H, int64_t D) {
    return 2.0 * (double)H * (double)D * (double)T * (double)(T + 1);
}

double kb_bytes_gemm(int64_t T, int64_t N, int64_t K, int64_t in_es, int64_t out_es) {
    return ((double)T * (double)K + (double)N * (double)K) * (double)in_es + (double)T * (double)N * (double)out_es;
}

double kb_flops_gemm(int64_t T, int64_t N, int64_t K) { return 2.0 * (double)T * (double)N * (double)K; }

/* ---- statistics ------------------------------------------------------------------------- */

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double kb_median(const double *x, int n) {
    if (n < 1) return 0.0;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) abort();
    memcpy(s, x, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    double m = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    free(s);
    return m;
}

void kb_roofline(kb_result_t *r, double copy_gbs, double gemm_tflops) {
    double t = r->median_us * 1e-6;
    r->gbs = t > 0 ? r->bytes / t / 1e9 : 0.0;
    r->tflops = t > 0 ? r->flops / t / 1e12 : 0.0;
    double t_mem = copy_gbs > 0 ? r->bytes / (copy_gbs * 1e9) : 0.0;
    double t_comp = gemm_tflops > 0 ? r->flops / (gemm_tflops * 1e12) : 0.0;
    r->bound = t_comp > t_mem ? "compute" : "memory";
    r->pct = t > 0 ? 100.0 * fmax(t_mem, t_comp) / t : 0.0;
}

/* ---- output --------------------------------------------------------------------------------- */

static const char *check_name(kb_check_t c) { return c == KB_CHECK_PASS ? "PASS" : c == KB_CHECK_FAIL ? "FAIL" : "-"; }

#define ROW_FMT "%-14s %-15s %-32s %-5s %11s %10s %9s %7s %-8s %-5s"

const char *kb_format_header(char *buf, size_t cap) {
    snprintf(buf, cap, ROW_FMT, "kernel", "model", "shape", "dtype", "median_us", "GB/s", "TFLOP/s", "%roof",
             "bound", "check");
    return buf;
}

const char *kb_format_row(char *buf, size_t cap, const kb_result_t *r) {
    char us[32], gbs[32], tf[32], pct[32];
    snprintf(us, sizeof us, "%.2f", r->median_us);
    snprintf(gbs, sizeof gbs, "%.1f", r->gbs);
    if (r->flops > 0) snprintf(tf, sizeof tf, "%.2f", r->tflops);
    else snprintf(tf, sizeof tf, "-");
    snprintf(pct, sizeof pct, "%.1f", r->pct);
    snprintf(buf, cap, ROW_FMT, r->kernel, r->model, r->shape, r->dtype, us, gbs, tf, pct, r->bound ? r->bound : "-",
             check_name(r->check));
    return buf;
}

const char *kb_format_result_line(char *buf, size_t cap, const kb_result_t *r) {
    snprintf(buf, cap,
             "RESULT kernel=%s model=%s shape=%s dtype=%s median_us=%.3f bytes=%.0f flops=%.0f gbs=%.2f "
             "tflops=%.3f pct=%.2f bound=%s check=%s",
             r->kernel, r->model, r->shape, r->dtype, r->median_us, r->bytes, r->flops, r->gbs, r->tflops, r->pct,
             r->bound ? r->bound : "-", check_name(r->check));
    return buf;
}

static void json_str(FILE *f, const char *s) {
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c < 0x20) fprintf(f, "\\u%04x", c);
        else fputc(c, f);
    }
    fputc('"', f);
}

int kb_write_json(FILE *f, const char *device, const kb_opts_t *o, double copy_gbs, double gemm_tflops,
                  const kb_result_t *r, int n) {
    fputs("{\"device\": ", f);
    json_str(f, device);
    fprintf(f, ", \"dtype\": \"%s\", \"iters\": %d, \"warmup\": %d,\n", kb_dtype_short(o->dt), o->iters, o->warmup);
    fprintf(f, " \"roofline\": {\"copy_gbs\": %.3f, \"gemm_tflops\": %.4f},\n \"results\": [", copy_gbs, gemm_tflops);
    for (int i = 0; i < n; i++) {
        fputs(i ? ",\n  {" : "\n  {", f);
        fputs("\"kernel\": ", f), json_str(f, r[i].kernel);
        fputs(", \"model\": ", f), json_str(f, r[i].model);
        fputs(", \"shape\": ", f), json_str(f, r[i].shape);
        fputs(", \"dtype\": ", f), json_str(f, r[i].dtype);
        fprintf(f, ", \"median_us\": %.4f, \"bytes\": %.0f, \"flops\": %.0f, \"gbs\": %.3f, \"tflops\": %.4f, "
                   "\"pct\": %.3f, \"bound\": \"%s\", \"check\": \"%s\"}",
                r[i].median_us, r[i].bytes, r[i].flops, r[i].gbs, r[i].tflops, r[i].pct, r[i].bound ? r[i].bound : "-",
                check_name(r[i].check));
    }
    fputs("\n ]}\n", f);
    return ferror(f) ? -1 : 0;
}
