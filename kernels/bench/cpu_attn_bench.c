/* cpu_attn_bench.c - the CPU paged attention's speed on prefill and decode
 * shapes, against the machine's FMA peak.
 *
 * Prefill: one sequence of T tokens, all in one step (causal).
 * Decode: S sequences of context L, one token each. Prints the median time,
 * the attention FLOPs per second (QK^T and PV, 2 FLOPs per multiply-add,
 * causal: each token counts the keys it sees) and, for decode, the KV bytes
 * read per second. Decode runs in both cache layouts (cpu_kv_layout_t:
 * slot-major, the CUDA kernels'; head-major, the CPU backend's), with the
 * cache warm and cold: before each cold call a 64 MiB buffer is read through,
 * as a decode step's weights push the KV cache out of the last-level cache
 * between two layers' attention. Prefill runs head-major, warm. A printout,
 * not a check.
 * Usage: cpu_attn_bench [threads [H Hkv D [KIND [KV]]]]   (default: 1 thread,
 * SmolLM2's 9 3 64, every kind (prefill, chunk, decode or all), KV bf16 (or
 * float32, fp8_e4m3, fp8_e5m2))
 */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_bench.h"
#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"
#include "servelab/dtype.h"
#include "servelab/parallel.h"

static uint64_t rng_state = 88172645463325252ull;
static float rnd(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (float)(rng_state >> 40) / (float)(1 << 24) * 2.0f - 1.0f;
}

/* Reads a buffer larger than the last-level cache. */
static float evict_buf_sum(void) {
    static float *buf;
    const size_t n = (size_t)64 << 20 >> 2;
    if (!buf) {
        buf = sl_malloc(n * sizeof *buf);
        for (size_t i = 0; i < n; i++) buf[i] = (float)(i & 7);
    }
    float sum = 0.0f;
    for (size_t i = 0; i < n; i += 16) sum += buf[i];
    return sum;
}
static volatile float evict_sink;

/* One attention call over S sequences of n_q query tokens each, the last at
 * position ctx - 1; median seconds of `reps` calls. */
static double run(sl_dtype_t kv, cpu_kv_layout_t layout, bool cold, int64_t S, int64_t n_q, int64_t ctx, int64_t H,
                  int64_t Hkv, int64_t D, int reps, double *flops, double *kv_bytes) {
    const int64_t B = 16, blocks = (ctx + B - 1) / B, T = S * n_q, n_kv = S * blocks * B * Hkv * D;
    float *f = sl_malloc((size_t)n_kv * sizeof *f);
    void *kc = sl_malloc((size_t)n_kv * dtype_size(kv)), *vc = sl_malloc((size_t)n_kv * dtype_size(kv));
    for (int64_t i = 0; i < n_kv; i++) f[i] = rnd();
    dtype_from_f32(kc, f, kv, n_kv);
    for (int64_t i = 0; i < n_kv; i++) f[i] = rnd();
    dtype_from_f32(vc, f, kv, n_kv);
    free(f);
    float *q = sl_malloc((size_t)(T * H * D) * sizeof *q), *out = sl_malloc((size_t)(T * H * D) * sizeof *out);
    for (int64_t i = 0; i < T * H * D; i++) q[i] = rnd();
    int32_t *pos = sl_malloc((size_t)T * sizeof *pos), *qs = sl_malloc((size_t)(S + 1) * sizeof *qs);
    int32_t *bt = sl_malloc((size_t)(S * blocks) * sizeof *bt);
    *flops = 0;
    for (int64_t s = 0; s < S; s++) {
        qs[s] = (int32_t)(s * n_q);
        for (int64_t i = 0; i < n_q; i++) {
            pos[s * n_q + i] = (int32_t)(ctx - n_q + i);
            *flops += 4.0 * (double)(H * D) * (double)(ctx - n_q + i + 1);
        }
        for (int64_t b = 0; b < blocks; b++) bt[s * blocks + b] = (int32_t)(s * blocks + b);
    }
    qs[S] = (int32_t)T;
    *kv_bytes = 2.0 * (double)dtype_size(kv) * (double)(S * ctx * Hkv * D);
    double med;
    CPU_BENCH_MEDIAN_PREP(med, reps, 1, if (cold) evict_sink = evict_buf_sum(),
                          cpu_attention_kv(out, q, kc, vc, kv, layout, pos, qs, bt, S, blocks, T, H, Hkv, D, B,
                                           1.0f / sqrtf((float)D)));
    free(kc), free(vc), free(q), free(out), free(pos), free(qs), free(bt);
    return med;
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 1;
    int64_t H = argc > 4 ? atoll(argv[2]) : 9, Hkv = argc > 4 ? atoll(argv[3]) : 3, D = argc > 4 ? atoll(argv[4]) : 64;
    sl_dtype_t kv = DTYPE_BF16;
    if (argc > 6) {
        static const sl_dtype_t kinds[] = {DTYPE_F32, DTYPE_BF16, DTYPE_F8_E4M3, DTYPE_F8_E5M2};
        static const char *names[] = {"float32", "bf16", "fp8_e4m3", "fp8_e5m2"};
        kv = (sl_dtype_t)-1;
        for (int i = 0; i < 4; i++)
            if (strcmp(argv[6], names[i]) == 0) kv = kinds[i];
        if (kv == (sl_dtype_t)-1) {
            fprintf(stderr, "cpu_attn_bench: KV dtype must be float32, bf16, fp8_e4m3 or fp8_e5m2, not %s\n", argv[6]);
            return 2;
        }
    }
    parallel_set_threads(threads);
    printf("cpu_attn_bench: level %s, %d thread(s), H %lld Hkv %lld D %lld, %s KV\n", cpu_isa_name(cpu_isa()),
           threads, (long long)H, (long long)Hkv, (long long)D, dtype_name(kv));
    printf("%-8s %5s %5s %6s %-10s %-5s | %10s %8s %8s\n", "kind", "seqs", "q", "ctx", "layout", "cache", "ms",
           "GFLOP/s", "KV GB/s");
    static const struct { const char *kind; int64_t S, n_q, ctx; int reps; } cases[] = {
        {"prefill", 1, 512, 512, 9},   {"prefill", 1, 2048, 2048, 3}, {"chunk", 1, 512, 2048, 5},
        {"decode", 1, 1, 512, 201},    {"decode", 1, 1, 4096, 51},    {"decode", 32, 1, 1024, 21},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (argc > 5 && strcmp(argv[5], "all") != 0 && strcmp(argv[5], cases[i].kind) != 0) continue;
        const bool decode = strcmp(cases[i].kind, "decode") == 0;
        for (int v = decode ? 0 : 3; v < 4; v++) {
            const cpu_kv_layout_t layout = v % 2 ? KV_HEAD_MAJOR : KV_SLOT_MAJOR;
            const bool cold = v < 2;
            double flops, bytes;
            double s = run(kv, layout, cold, cases[i].S, cases[i].n_q, cases[i].ctx, H, Hkv, D, cases[i].reps, &flops,
                           &bytes);
            printf("%-8s %5lld %5lld %6lld %-10s %-5s | %10.3f %8.2f %8.2f\n", cases[i].kind, (long long)cases[i].S,
                   (long long)cases[i].n_q, (long long)cases[i].ctx, layout == KV_HEAD_MAJOR ? "head-major" : "slot-major",
                   cold ? "cold" : "warm", s * 1e3, flops / s * 1e-9, bytes / s * 1e-9);
        }
    }
    parallel_set_threads(0);
    return 0;
}
