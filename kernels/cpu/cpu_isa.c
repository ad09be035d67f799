/* cpu_isa.c - CPU feature detection and the SERVELAB_CPU_ISA override (cpu_isa.h). */
#include "cpu_isa.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "servelab/core.h"

static const char *const isa_names[CPU_ISA_COUNT] = {"portable", "avx2", "avx512", "avx512_bf16"};

const char *cpu_isa_name(cpu_isa_t isa) { return (unsigned)isa < CPU_ISA_COUNT ? isa_names[isa] : "?"; }

cpu_isa_t cpu_isa_detect(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    /* __builtin_cpu_supports also checks that the OS saves the vector state (XCR0). */
    __builtin_cpu_init();
    bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                  __builtin_cpu_supports("avx512vl");
    if (avx512 && __builtin_cpu_supports("avx512bf16")) return CPU_ISA_AVX512_BF16;
    if (avx512) return CPU_ISA_AVX512;
    if (avx2) return CPU_ISA_AVX2;
#endif
    return CPU_ISA_PORTABLE;
}

static _Atomic int isa_chosen = -1;

static cpu_isa_t choose(void) {
    cpu_isa_t best = cpu_isa_detect();
    const char *env = getenv("SERVELAB_CPU_ISA");
    if (!env || !*env) return best;
    for (int i = 0; i < CPU_ISA_COUNT; i++) {
        if (strcmp(env, isa_names[i])) continue;
        if ((cpu_isa_t)i > best)
            sl_die("SERVELAB_CPU_ISA=%s: this CPU supports up to %s", env, isa_names[best]);
        return (cpu_isa_t)i;
    }
    sl_die("SERVELAB_CPU_ISA=%s: expected portable, avx2, avx512 or avx512_bf16", env);
}

cpu_isa_t cpu_isa(void) {
    int isa = atomic_load_explicit(&isa_chosen, memory_order_relaxed);
    if (isa < 0) {
        isa = (int)choose();
        atomic_store_explicit(&isa_chosen, isa, memory_order_relaxed);
    }
    return (cpu_isa_t)isa;
}

void cpu_isa_reload(void) { atomic_store(&isa_chosen, (int)choose()); }
