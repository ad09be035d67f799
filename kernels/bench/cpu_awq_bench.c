/* cpu_awq_bench.c - decode (T = 1) speed of the CPU AWQ 4-bit linear against
 * the packed bf16 linear on the same shapes, on 1 and 2 threads of the pool.
 *
 * Prints, per shape and thread count, the median time of each op and the
 * GB/s of packed weight bytes it reads, and the ratio of times (bf16 / AWQ).
 * The bf16 weights are the dequantized AWQ weights rounded; the level is
 * cpu_isa()'s (SERVELAB_CPU_ISA to force a lower one). A printout, not a
 * check: the first two shapes (0.8 MiB AWQ, 3 MiB bf16) sit in the last-level
 * cache, so their GB/s are not DRAM's; the third does not.
 * Usage: cpu_awq_bench [reps]
 */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>

#include "cpu_bench.h"
#include "cpu_isa.h"
#include "ops_cpu.h"
#include "servelab/core.h"

static uint64_t rng_state = 88172645463325252ull;
static uint32_t rng(void) {
    rng_state ^= rng_state << 13, rng_state ^= rng_state >> 7, rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

int main(int argc, char **argv) {
    int reps = argc > 1 ? atoi(argv[1]) : 2000;
    if (reps < 1) reps = 1;
    /* The brief's two decode shapes (cache-resident), then one past the last-level
     * cache (32 MiB AWQ, 128 MiB bf16), where the weights stream from DRAM. */
    static const struct { int64_t N, K, G; } shapes[] = {{2048, 768, 128}, {768, 2048, 128}, {8192, 8192, 128}};
    printf("cpu_awq_bench: level %s, T = 1, median of %d calls (fewer for larger shapes)\n", cpu_isa_name(cpu_isa()), reps);
    printf("%6s %6s %4s %3s | %10s %8s | %10s %8s | %s\n", "N", "K", "G", "thr", "awq us", "awq GB/s", "bf16 us",
           "bf16 GB/s", "bf16/awq time");
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int64_t N = shapes[si].N, K = shapes[si].K, G = shapes[si].G;
        int32_t *qw = sl_malloc((size_t)(K * N / 8) * sizeof *qw), *qz = sl_malloc((size_t)(K / G * N / 8) * sizeof *qz);
        uint16_t *sc = sl_malloc((size_t)(K / G * N) * sizeof *sc), *wb = sl_malloc((size_t)(N * K) * sizeof *wb);
        float *w = sl_malloc((size_t)(N * K) * sizeof *w), *x = sl_malloc((size_t)K * sizeof *x);
        float *out = sl_malloc((size_t)N * sizeof *out);
        for (int64_t i = 0; i < K * N / 8; i++) qw[i] = (int32_t)rng();
        for (int64_t i = 0; i < K / G * N / 8; i++) qz[i] = (int32_t)rng();
        for (int64_t i = 0; i < K / G * N; i++) sc[i] = f32_to_f16(0.01f + 0.09f * (float)(rng() % 1000) / 1000.0f);
        for (int64_t i = 0; i < K; i++) x[i] = (float)(rng() % 2001) / 1000.0f - 1.0f;
        cpu_awq_dequantize(w, qw, qz, sc, N, K, G);
        for (int64_t i = 0; i < N * K; i++) wb[i] = f32_to_bf16(w[i]);
        size_t awq_bytes = cpu_awq_packed_bytes(N, K, G), bf16_bytes = cpu_bf16_packed_bytes(N, K);
        void *pa = sl_malloc(awq_bytes), *pb = sl_malloc(bf16_bytes);
        cpu_awq_pack(pa, qw, qz, sc, N, K, G);
        cpu_bf16_pack(pb, wb, N, K);
        /* The same bytes per shape: a big shape gets fewer calls. */
        int n_calls = (int)((double)reps * 2048.0 * 768.0 / (double)(N * K));
        if (n_calls < 20) n_calls = 20;
        for (int threads = 1; threads <= 2; threads++) {
            parallel_set_threads(threads);
            double ta, tb;
            CPU_BENCH_MEDIAN(ta, n_calls, 10, cpu_linear_awq_packed(out, x, pa, 1, N, K, G));
            CPU_BENCH_MEDIAN(tb, n_calls, 10, cpu_linear_bf16_packed(out, x, pb, 1, N, K));
            printf("%6lld %6lld %4lld %3d | %10.1f %8.1f | %10.1f %8.1f | %.2fx\n", (long long)N, (long long)K,
                   (long long)G, threads, ta * 1e6, (double)awq_bytes / ta * 1e-9, tb * 1e6,
                   (double)bf16_bytes / tb * 1e-9, tb / ta);
        }
        printf("%6s packed bytes: awq %zu, bf16 %zu (%.2fx)\n", "", awq_bytes, bf16_bytes,
               (double)bf16_bytes / (double)awq_bytes);
        free(qw), free(qz), free(sc), free(wb), free(w), free(x), free(out), free(pa), free(pb);
    }
    parallel_set_threads(0);
    return 0;
}
