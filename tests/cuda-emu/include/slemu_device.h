/* slemu_device.h - the device side of CUDA as tests/cuda-emu emulates it on
 * the host: qualifiers, vector types, the thread built-ins, bf16/f16, the
 * intrinsics kernels/cuda uses, warp collectives, __syncthreads, atomics,
 * wmma fragments and the launch that tests/cuda-emu/emu_rewrite.py writes
 * in place of <<<...>>>.
 *
 * Every CUDA thread of a block is a fiber (emu_runtime.cc); fibers switch
 * only at __syncthreads and at warp collectives, so everything between two
 * such points runs as one uninterrupted step of one thread, in an order the
 * scheduler picks at random. Collectives check their participants (mask,
 * kind, arguments) and report misuse instead of guessing what a GPU would do.
 */
#ifndef SLEMU_DEVICE_H
#define SLEMU_DEVICE_H

#include <math.h>
#include <stdint.h>
#include <string.h>
#include <strings.h>

#include <initializer_list>
#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_runtime_api.h"

/* ---- qualifiers -------------------------------------------------------------- */
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline __attribute__((always_inline))
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
#define __grid_constant__
#define __align__(n) __attribute__((aligned(n)))
/* Static shared memory: one block runs at a time, so one static object per
 * declaration is the block's. The section lets the runtime poison all of it
 * before every block (shared memory starts undefined on a GPU). */
#define __shared__ static __attribute__((section("slemu_shared")))

/* ---- vector types (the CUDA alignments: misaligned vector accesses trap in UBSan) ---- */
struct __attribute__((aligned(8))) float2 { float x, y; };
struct __attribute__((aligned(16))) float4 { float x, y, z, w; };
struct __attribute__((aligned(8))) uint2 { unsigned x, y; };
struct uint3 { unsigned x, y, z; };
struct __attribute__((aligned(16))) uint4 { unsigned x, y, z, w; };
struct __attribute__((aligned(8))) int2 { int x, y; };
struct __attribute__((aligned(16))) int4 { int x, y, z, w; };
struct dim3 {
    unsigned x, y, z;
    constexpr dim3(unsigned x_ = 1, unsigned y_ = 1, unsigned z_ = 1) : x(x_), y(y_), z(z_) {}
};
static inline float2 make_float2(float x, float y) { return {x, y}; }
static inline float4 make_float4(float x, float y, float z, float w) { return {x, y, z, w}; }
static inline uint2 make_uint2(unsigned x, unsigned y) { return {x, y}; }
static inline uint4 make_uint4(unsigned x, unsigned y, unsigned z, unsigned w) { return {x, y, z, w}; }
static inline int2 make_int2(int x, int y) { return {x, y}; }
static inline int4 make_int4(int x, int y, int z, int w) { return {x, y, z, w}; }

namespace slemu {
extern uint3 g_threadIdx, g_blockIdx;
extern dim3 g_blockDim, g_gridDim;
}  // namespace slemu
#define threadIdx (::slemu::g_threadIdx)
#define blockIdx (::slemu::g_blockIdx)
#define blockDim (::slemu::g_blockDim)
#define gridDim (::slemu::g_gridDim)
#define warpSize 32

/* ---- bf16 and f16 ------------------------------------------------------------ */
static inline unsigned short slemu_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (unsigned short)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (unsigned short)(u >> 16);
}
static inline float slemu_bf16_to_f32(unsigned short h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline unsigned short slemu_f32_to_f16(float f) {
    _Float16 h = (_Float16)f; /* round to nearest even, subnormals and overflow included */
    unsigned short u;
    memcpy(&u, &h, 2);
    return u;
}
static inline float slemu_f16_to_f32(unsigned short u) {
    _Float16 h;
    memcpy(&h, &u, 2);
    return (float)h;
}

struct __attribute__((aligned(2))) __nv_bfloat16 {
    unsigned short __x;
    __nv_bfloat16() = default;
    __nv_bfloat16(float f) : __x(slemu_f32_to_bf16(f)) {}
    operator float() const { return slemu_bf16_to_f32(__x); }
};
struct __attribute__((aligned(2))) __half {
    unsigned short __x;
    __half() = default;
    __half(float f) : __x(slemu_f32_to_f16(f)) {}
    operator float() const { return slemu_f16_to_f32(__x); }
};
struct __attribute__((aligned(4))) __nv_bfloat162 { __nv_bfloat16 x, y; };
struct __attribute__((aligned(4))) __half2 { __half x, y; };

static inline float __bfloat162float(__nv_bfloat16 h) { return slemu_bf16_to_f32(h.__x); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16(f); }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __nv_bfloat16(f); }
static inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 h) { return h.__x; }
static inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { __nv_bfloat16 h; h.__x = u; return h; }
static inline float2 __bfloat1622float2(__nv_bfloat162 h) { return {__bfloat162float(h.x), __bfloat162float(h.y)}; }
static inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) { return {__nv_bfloat16(a), __nv_bfloat16(b)}; }
static inline float __half2float(__half h) { return slemu_f16_to_f32(h.__x); }
static inline __half __float2half_rn(float f) { return __half(f); }
static inline __half __float2half(float f) { return __half(f); }
static inline unsigned short __half_as_ushort(__half h) { return h.__x; }
static inline __half __ushort_as_half(unsigned short u) { __half h; h.__x = u; return h; }
static inline float2 __half22float2(__half2 h) { return {__half2float(h.x), __half2float(h.y)}; }
static inline __half2 __floats2half2_rn(float a, float b) { return {__half(a), __half(b)}; }

/* ---- packed 16-bit arithmetic (sm_90's add/sub/mul/fma .bf16x2 and .f16x2,
 * round to nearest): each half computed exactly in double (every use in the
 * kernels is exact there: 16-bit operands, one product), then rounded once.
 * Rounding the double to float "to odd" first makes the rounding of that float
 * to the 16-bit type the single correct rounding of the double (float keeps
 * more than 2 bits beyond a 16-bit significand). ---- */
static inline float slemu_f64_to_f32_odd(double r) {
    float f = (float)r;
    if (r != r) return f;
    if (fabs((double)f) > fabs(r)) f = nextafterf(f, 0.0f); /* toward zero */
    if ((double)f != r) {
        unsigned u;
        memcpy(&u, &f, 4);
        u |= 1u; /* inexact: the odd neighbour */
        memcpy(&f, &u, 4);
    }
    return f;
}
#define SLEMU_PAIR_OP(P, H, name, expr)                                                                  \
    static inline P name(P a, P b) {                                                                     \
        auto op = [](double x, double y) { return H(slemu_f64_to_f32_odd(expr)); };                      \
        return {op((float)a.x, (float)b.x), op((float)a.y, (float)b.y)};                                 \
    }
SLEMU_PAIR_OP(__nv_bfloat162, __nv_bfloat16, __hadd2, x + y)
SLEMU_PAIR_OP(__nv_bfloat162, __nv_bfloat16, __hsub2, x - y)
SLEMU_PAIR_OP(__nv_bfloat162, __nv_bfloat16, __hmul2, x * y)
SLEMU_PAIR_OP(__half2, __half, __hadd2, x + y)
SLEMU_PAIR_OP(__half2, __half, __hsub2, x - y)
SLEMU_PAIR_OP(__half2, __half, __hmul2, x * y)
#undef SLEMU_PAIR_OP
static inline __nv_bfloat162 __hfma2(__nv_bfloat162 a, __nv_bfloat162 b, __nv_bfloat162 c) {
    auto op = [](double x, double y, double z) { return __nv_bfloat16(slemu_f64_to_f32_odd(x * y + z)); };
    return {op((float)a.x, (float)b.x, (float)c.x), op((float)a.y, (float)b.y, (float)c.y)};
}
static inline __half2 __hfma2(__half2 a, __half2 b, __half2 c) {
    auto op = [](double x, double y, double z) { return __half(slemu_f64_to_f32_odd(x * y + z)); };
    return {op((float)a.x, (float)b.x, (float)c.x), op((float)a.y, (float)b.y, (float)c.y)};
}

/* ---- scalar intrinsics (round-to-nearest forms: the host's IEEE ops; the
 * tier compiles with -ffp-contract=off so nothing is fused behind them) ---- */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline float __fdividef(float a, float b) { return a / b; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
static inline float __saturatef(float a) { return a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
/* PRMT's default mode: byte i of the result is byte (s >> 4i) & 7 of the 8 bytes {y, x} (x the low
 * four), its sign bit replicated over the byte when bit 3 of that selector nibble is set. */
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const unsigned long long xy = (unsigned long long)y << 32 | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) {
        const unsigned sel = (s >> (4 * i)) & 15u;
        unsigned b = (unsigned)(xy >> (8 * (sel & 7u))) & 0xffu;
        if (sel & 8u) b = (b & 0x80u) ? 0xffu : 0u;
        r |= b << (8 * i);
    }
    return r;
}
static inline unsigned __float_as_uint(float f) { unsigned u; memcpy(&u, &f, 4); return u; }
static inline float __uint_as_float(unsigned u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __float_as_int(float f) { int u; memcpy(&u, &f, 4); return u; }
static inline float __int_as_float(int u) { float f; memcpy(&f, &u, 4); return f; }
static inline int __ffs(int x) { return ffs(x); }
static inline int __ffsll(long long x) { return ffsll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __clzll(long long x) { return x ? __builtin_clzll((unsigned long long)x) : 64; }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline unsigned __brev(unsigned x) {
    unsigned r = 0;
    for (int i = 0; i < 32; i++) r |= ((x >> i) & 1u) << (31 - i);
    return r;
}
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcs(const T *p) { return *p; }
static inline int min(int a, int b) { return a < b ? a : b; }
static inline int max(int a, int b) { return a > b ? a : b; }
static inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
static inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
static inline long long min(long long a, long long b) { return a < b ? a : b; }
static inline long long max(long long a, long long b) { return a > b ? a : b; }
static inline long min(long a, long b) { return a < b ? a : b; }
static inline long max(long a, long b) { return a > b ? a : b; }
static inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
static inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
static inline float min(float a, float b) { return fminf(a, b); }
static inline float max(float a, float b) { return fmaxf(a, b); }

/* ---- atomics: a fiber is never interrupted between two sync points, so a
 * plain read-modify-write is atomic with respect to every other thread ---- */
#define SLEMU_ATOMIC(T)                                                                          \
    static inline T atomicAdd(T *p, T v) { T o = *p; *p = (T)(o + v); return o; }                \
    static inline T atomicSub(T *p, T v) { T o = *p; *p = (T)(o - v); return o; }                \
    static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }                        \
    static inline T atomicMax(T *p, T v) { T o = *p; if (v > o) *p = v; return o; }              \
    static inline T atomicMin(T *p, T v) { T o = *p; if (v < o) *p = v; return o; }              \
    static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
SLEMU_ATOMIC(int)
SLEMU_ATOMIC(unsigned)
SLEMU_ATOMIC(unsigned long long)
#undef SLEMU_ATOMIC
static inline float atomicAdd(float *p, float v) { float o = *p; *p = o + v; return o; }
static inline double atomicAdd(double *p, double v) { double o = *p; *p = o + v; return o; }
static inline float atomicExch(float *p, float v) { float o = *p; *p = v; return o; }
static inline int atomicOr(int *p, int v) { int o = *p; *p = o | v; return o; }
static inline unsigned atomicOr(unsigned *p, unsigned v) { unsigned o = *p; *p = o | v; return o; }
static inline unsigned atomicAnd(unsigned *p, unsigned v) { unsigned o = *p; *p = o & v; return o; }
static inline unsigned atomicXor(unsigned *p, unsigned v) { unsigned o = *p; *p = o ^ v; return o; }
static inline void __threadfence() {}
static inline void __threadfence_block() {}

/* ---- barriers and warp collectives (emu_runtime.cc) ---------------------------- */
namespace slemu {
enum CollKind { C_SHFL_IDX, C_SHFL_UP, C_SHFL_DOWN, C_SHFL_XOR, C_BALLOT, C_ANY, C_ALL, C_SYNCWARP,
                C_WMMA_LOAD, C_WMMA_STORE, C_WMMA_MMA, C_LDMATRIX, C_MMA_SYNC };
/* One lane's part in a warp collective. `arg` is the shuffle's lane argument;
 * `width` the shuffle width; `key` a value every lane must pass equal (the
 * wmma pointer and ldm, the PTX instruction's shape); `payload` is handed to
 * `complete`, which the last lane to arrive runs with every lane's payload
 * (wmma::mma_sync, and the PTX ldmatrix and mma.sync). */
struct Coll {
    int kind;
    unsigned mask;
    uint64_t val;
    int arg, width;
    uint64_t key;
    void *payload;
    void (*complete)(void *const *payloads);
};
uint64_t warp_collective(const Coll &c, const char *file, int line);
void syncthreads(const char *file, int line);
int lane_id();
void fail(const char *file, int line, const char *fmt, ...) __attribute__((noreturn, format(printf, 3, 4)));
void *dyn_smem(size_t align);

template <typename T> static inline uint64_t to_bits(T v) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "a shuffle moves at most 8 bytes");
    uint64_t u = 0;
    memcpy(&u, &v, sizeof v);
    return u;
}
template <typename T> static inline T from_bits(uint64_t u) {
    T v;
    memcpy(&v, &u, sizeof v);
    return v;
}
template <typename T>
static inline T shfl(int kind, unsigned mask, T v, int arg, int width, const char *file, int line) {
    Coll c{kind, mask, to_bits(v), arg, width, 0, nullptr, nullptr};
    return from_bits<T>(warp_collective(c, file, line));
}
}  // namespace slemu

static inline void __syncthreads(const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    slemu::syncthreads(file, line);
}
static inline void __syncwarp(unsigned mask = 0xffffffffu, const char *file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    slemu::Coll c{slemu::C_SYNCWARP, mask, 0, 0, 32, 0, nullptr, nullptr};
    slemu::warp_collective(c, file, line);
}
template <typename T>
static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32, const char *file = __builtin_FILE(),
                            int line = __builtin_LINE()) {
    return slemu::shfl(slemu::C_SHFL_IDX, mask, v, src, width, file, line);
}
template <typename T>
static inline T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32,
                               const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return slemu::shfl(slemu::C_SHFL_UP, mask, v, (int)delta, width, file, line);
}
template <typename T>
static inline T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32,
                                 const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return slemu::shfl(slemu::C_SHFL_DOWN, mask, v, (int)delta, width, file, line);
}
template <typename T>
static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32,
                                const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    return slemu::shfl(slemu::C_SHFL_XOR, mask, v, lane_mask, width, file, line);
}
static inline unsigned __ballot_sync(unsigned mask, int pred, const char *file = __builtin_FILE(),
                                     int line = __builtin_LINE()) {
    slemu::Coll c{slemu::C_BALLOT, mask, (uint64_t)(pred != 0), 0, 32, 0, nullptr, nullptr};
    return (unsigned)slemu::warp_collective(c, file, line);
}
static inline int __any_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    slemu::Coll c{slemu::C_ANY, mask, (uint64_t)(pred != 0), 0, 32, 0, nullptr, nullptr};
    return (int)slemu::warp_collective(c, file, line);
}
static inline int __all_sync(unsigned mask, int pred, const char *file = __builtin_FILE(), int line = __builtin_LINE()) {
    slemu::Coll c{slemu::C_ALL, mask, (uint64_t)(pred != 0), 0, 32, 0, nullptr, nullptr};
    return (int)slemu::warp_collective(c, file, line);
}
static inline unsigned __activemask() { return 0xffffffffu; }

/* ---- inline PTX: emu_rewrite.py turns asm volatile(...) into slemu::ptx(...).
 * Only the templates kernels/cuda uses are known; any other fails loudly.
 * Operands travel as bits: a "f" input as its 32 bits, an "=r" or "=f"
 * output as a pointer to its 4 bytes. */
namespace slemu {
template <typename T> static inline uint64_t ptx_in(T v) {
    if constexpr (std::is_pointer<T>::value) return (uint64_t)(uintptr_t)v;
    else if constexpr (std::is_floating_point<T>::value) {
        static_assert(sizeof(T) == 4, "a \"f\" operand is 32 bits");
        uint32_t u;
        memcpy(&u, &v, 4);
        return u;
    } else return (uint64_t)v;
}
template <typename T> static inline uint32_t *ptx_out(T &v) {
    static_assert(sizeof(T) == 4 && std::is_trivially_copyable<T>::value, "an \"=r\" / \"=f\" operand is 32 bits");
    return reinterpret_cast<uint32_t *>(&v); /* written with memcpy only */
}
void ptx(const char *tpl, std::initializer_list<uint32_t *> outs, std::initializer_list<uint64_t> ins,
         const char *file = __builtin_FILE(), int line = __builtin_LINE());
/* The shared-window address of p (the dynamic shared memory's offset), or
 * 0xffffffff when p is not in the running launch's dynamic shared memory. */
size_t smem_offset(const void *p);
}  // namespace slemu
static inline size_t __cvta_generic_to_shared(const void *p) { return slemu::smem_offset(p); }

/* ---- launches ------------------------------------------------------------------ */
namespace slemu {
struct LaunchCfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t st;
};
static inline LaunchCfg cfg(dim3 g, dim3 b, size_t smem = 0, cudaStream_t st = nullptr) { return {g, b, smem, st}; }
/* Runs the grid now (launches are synchronous here), block after block, each
 * block's threads as fibers; sets the last error on a bad configuration. */
void run_grid(const char *name, const char *launcher, const void *func, const LaunchCfg &c, void (*body)(void *), void *ctx);

template <typename... P, typename... A>
void launch(const char *name, const char *launcher, void (*k)(P...), const LaunchCfg &c, A &&...a) {
    /* the arguments converted to the parameter types once, as a launch copies them */
    std::tuple<std::decay_t<P>...> params(std::forward<A>(a)...);
    struct Ctx {
        void (*k)(P...);
        std::tuple<std::decay_t<P>...> *params;
    } ctx{k, &params};
    run_grid(name, launcher, (const void *)k, c,
             [](void *v) {
                 Ctx *x = static_cast<Ctx *>(v);
                 std::apply(x->k, *x->params);
             },
             &ctx);
}
}  // namespace slemu

#include "slemu_wmma.h"

#endif
