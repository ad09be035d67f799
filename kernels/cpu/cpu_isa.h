/* cpu_isa.h - which vector instructions the CPU kernels use, chosen once.
 *
 * The levels, each a superset of the one before:
 *   portable     plain C (whatever the compiler makes of it for the baseline target)
 *   avx2         AVX2 + FMA + F16C, 8 fp32 lanes
 *   avx512       AVX-512 F/BW/VL, 16 fp32 lanes
 *   avx512_bf16  + AVX512_BF16: vdpbf16ps, two bf16 products per fp32 lane
 * The level is the best the CPU (and the OS, for the vector state) supports,
 * or SERVELAB_CPU_ISA when set to one of the names above: a lower level is
 * how the tests run every kernel on one machine; a higher one than the CPU has
 * is refused at startup rather than dying of SIGILL mid-request.
 */
#ifndef SERVELAB_CPU_ISA_H
#define SERVELAB_CPU_ISA_H

typedef enum { CPU_ISA_PORTABLE, CPU_ISA_AVX2, CPU_ISA_AVX512, CPU_ISA_AVX512_BF16, CPU_ISA_COUNT } cpu_isa_t;

/* The best level this CPU supports. */
cpu_isa_t cpu_isa_detect(void);
/* The level in use: decided on the first call (SERVELAB_CPU_ISA or the
 * detected one). An unknown or unsupported SERVELAB_CPU_ISA is a fatal error
 * with one line naming the value and the choices. */
cpu_isa_t cpu_isa(void);
/* Decides again from the environment: for tests that run every level. */
void cpu_isa_reload(void);
const char *cpu_isa_name(cpu_isa_t isa);

/* The function attributes each x86 level's code is compiled with (one
 * definition for every kernel file); HAVE_X86_LEVELS where they exist. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define TARGET_BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,fma")))
#define TARGET_512 __attribute__((target("avx512f,avx512bw,avx512vl,fma")))
#define TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define HAVE_X86_LEVELS 1
#endif

#endif
