/* emu_runtime.cc - the CUDA emulator's runtime: fibers that run one block's
 * threads with a random interleaving, the barrier and warp-collective checks,
 * shared and device memory behind guard pages, and the CUDA runtime API
 * subset of cuda_runtime_api.h.
 *
 * One block runs at a time, on the calling thread. Each of its threads is a
 * ucontext fiber; a fiber runs until it reaches __syncthreads, a warp
 * collective or its end, then the scheduler resumes a runnable fiber picked
 * at random (xorshift seeded by SERVELAB_EMU_SEED, printed). Everything the
 * emulator can tell is wrong (divergent barriers, a collective some lane of
 * its mask never reaches or reaches with other arguments, a deadlock, an
 * access that hits a guard page) ends the process with a message naming the
 * kernel, the block, the thread, the source line and the seed.
 */
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <vector>

#include "slemu_device.h"

namespace slemu {

uint3 g_threadIdx, g_blockIdx;
dim3 g_blockDim, g_gridDim;

namespace {

constexpr size_t STACK_BYTES = 256 * 1024;
constexpr int MAX_THREADS = 1024;
constexpr size_t OPTIN_SMEM = 232448; /* H100: 227 KB of dynamic shared memory per block */
constexpr int N_SMS = 132;

size_t page_bytes() {
    static const size_t p = (size_t)sysconf(_SC_PAGESIZE);
    return p;
}
size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* ---- seed and generator ---------------------------------------------------------- */
uint64_t g_seed, g_rng;
bool g_seeded;
void seed_once() {
    if (g_seeded) return;
    g_seeded = true;
    const char *s = getenv("SERVELAB_EMU_SEED");
    if (s && *s) g_seed = strtoull(s, nullptr, 0);
    else {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        g_seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ (uint64_t)getpid();
    }
    g_rng = g_seed * 0x9e3779b97f4a7c15ull + 0x632be59bd9b4e019ull;
    if (!g_rng) g_rng = 1;
    printf("cuda-emu: interleaving seed %llu (SERVELAB_EMU_SEED)\n", (unsigned long long)g_seed);
    fflush(stdout);
}
uint64_t rnd() {
    g_rng ^= g_rng << 13, g_rng ^= g_rng >> 7, g_rng ^= g_rng << 17;
    return g_rng;
}

/* ---- fibers ------------------------------------------------------------------------- */
enum State { RUNNABLE, AT_BARRIER, AT_WARP, DONE };

struct Fiber {
#if !defined(__x86_64__)
    ucontext_t ctx; /* the portable switch */
#endif
    void *sp;       /* the x86-64 switch's saved stack pointer */
    char *stack;
    uint3 tid;
    int linear, warp, lane;
    State state;
    const char *file; /* where it waits */
    int line;
    uint64_t result;  /* of its last warp collective */
};

struct Warp {
    unsigned arrived, expect, exited, lanes; /* lanes: the lanes this warp has */
    Coll first;                              /* the first arrival's arguments */
    const char *file;
    int line;
    uint64_t vals[32];
    void *payloads[32];
};

struct Block {
    const char *kernel, *launcher;
    int n_threads, n_warps, arrived, exited;
    const char *bar_file;
    int bar_line;
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    std::vector<int> runnable;
    Fiber *cur;
    void (*body)(void *);
    void *ctx;
};

#if !defined(__x86_64__)
ucontext_t g_sched;
#endif
void *g_sched_sp;

void fiber_entry();

#if defined(__x86_64__)
/* A context switch without ucontext's signal-mask system calls (they made
 * the tier ten times slower): saves the callee-saved registers, MXCSR and
 * the x87 control word on the current stack, stores its pointer in *save,
 * and resumes the stack `next` in the same layout. */
extern "C" void slemu_switch(void **save, void *next);
asm(".text\n.globl slemu_switch\n.type slemu_switch,@function\nslemu_switch:\n"
    "pushq %rbp\npushq %rbx\npushq %r12\npushq %r13\npushq %r14\npushq %r15\n"
    "subq $8, %rsp\nstmxcsr (%rsp)\nfnstcw 4(%rsp)\n"
    "movq %rsp, (%rdi)\nmovq %rsi, %rsp\n"
    "ldmxcsr (%rsp)\nfldcw 4(%rsp)\naddq $8, %rsp\n"
    "popq %r15\npopq %r14\npopq %r13\npopq %r12\npopq %rbx\npopq %rbp\nret\n"
    ".size slemu_switch, .-slemu_switch\n");
extern "C" void slemu_fiber_start() {
    fiber_entry();
    abort(); /* fiber_entry never returns */
}
#endif
Block g_block;
bool g_in_kernel;
std::recursive_mutex g_launch_mu;
char *g_stacks;
cudaError_t g_last_error = cudaSuccess;

void sleep_to_scheduler() {
    Fiber *f = g_block.cur;
#if defined(__x86_64__)
    slemu_switch(&f->sp, g_sched_sp);
#else
    swapcontext(&f->ctx, &g_sched);
#endif
}

void fiber_init(Fiber &f, char *stack, size_t bytes) {
#if defined(__x86_64__)
    uintptr_t top = ((uintptr_t)stack + bytes) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 72);
    uint32_t ctl[2] = {0x1f80u, 0x037fu}; /* default MXCSR, x87 control word */
    memcpy(sp, ctl, 8);
    for (int i = 1; i <= 6; i++) sp[i] = 0;              /* r15 .. rbp */
    sp[7] = (uint64_t)(uintptr_t)&slemu_fiber_start;     /* returned to; rsp % 16 == 8 there */
    f.sp = sp;
#else
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = stack;
    f.ctx.uc_stack.ss_size = bytes;
    f.ctx.uc_link = nullptr;
    makecontext(&f.ctx, fiber_entry, 0);
#endif
}

void resume(Fiber &f) {
#if defined(__x86_64__)
    slemu_switch(&g_sched_sp, f.sp);
#else
    swapcontext(&g_sched, &f.ctx);
#endif
}

void make_runnable(Fiber &f) {
    f.state = RUNNABLE;
    g_block.runnable.push_back(f.linear);
}

/* ---- guard-paged regions: [guard][data ... | end at the guard][guard] ---------------- */
struct Region {
    char *map;
    size_t map_bytes;
};
std::map<uintptr_t, Region> g_allocs; /* device pointer -> mapping */

char *guarded_alloc(size_t bytes, size_t align, Region *r) {
    const size_t pg = page_bytes(), data = round_up(bytes ? bytes : 1, align);
    const size_t body = round_up(data, pg);
    r->map_bytes = body + 2 * pg;
    r->map = (char *)mmap(nullptr, r->map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r->map == MAP_FAILED) return nullptr;
    mprotect(r->map, pg, PROT_NONE);
    mprotect(r->map + pg + body, pg, PROT_NONE);
    return r->map + pg + body - data; /* the data ends where the guard page begins */
}

/* dynamic shared memory of the running launch */
Region g_dyn_region;
char *g_dyn;
size_t g_dyn_bytes, g_dyn_align;
bool g_dyn_handed;
std::map<const void *, size_t> g_func_smem; /* cudaFuncAttributeMaxDynamicSharedMemorySize */

void fiber_entry() {
    g_block.body(g_block.ctx);
    Fiber *f = g_block.cur;
    Warp &w = g_block.warps[f->warp];
    if (g_block.arrived)
        fail(nullptr, 0, "thread exits while %d thread(s) wait at __syncthreads (%s:%d)", g_block.arrived,
             g_block.bar_file, g_block.bar_line);
    if (w.arrived && (w.expect >> f->lane & 1))
        fail(nullptr, 0, "lane %d exits while its warp waits for it at a collective (%s:%d)", f->lane, w.file, w.line);
    w.exited |= 1u << f->lane;
    g_block.exited++;
    f->state = DONE;
    sleep_to_scheduler();
}

}  // namespace

/* ---- errors -------------------------------------------------------------------------- */
void fail(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "cuda-emu: ");
    if (g_in_kernel) {
        const Fiber *f = g_block.cur;
        fprintf(stderr, "kernel %s launched by %s, block (%u,%u,%u)", g_block.kernel, g_block.launcher, g_blockIdx.x, g_blockIdx.y, g_blockIdx.z);
        if (f) fprintf(stderr, ", thread (%u,%u,%u)", f->tid.x, f->tid.y, f->tid.z);
        fprintf(stderr, ": ");
    }
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    if (file) fprintf(stderr, " at %s:%d", file, line);
    fprintf(stderr, " (seed %llu)\n", (unsigned long long)g_seed);
    fflush(stderr);
    /* an exit status, not abort(): ctest can then match the message (the
     * emulator's self-tests); _exit, because this may run on a fiber's stack */
    _exit(3);
}

int lane_id() { return g_block.cur->lane; }

/* The launch's dynamic shared memory, `align`-byte aligned (the kernel's
 * declaration says how much): placed so that it ends at the guard page when
 * its size is a multiple of the alignment. */
void *dyn_smem(size_t align) {
    if (align < 16) align = 16;
    if (align > g_dyn_align) {
        if (g_dyn_handed)
            fail(nullptr, 0, "dynamic shared memory declared with alignments %zu and %zu in one launch", g_dyn_align, align);
        munmap(g_dyn_region.map, g_dyn_region.map_bytes);
        g_dyn = guarded_alloc(g_dyn_bytes, align, &g_dyn_region);
        g_dyn_align = align;
        memset(g_dyn, 0xff, round_up(g_dyn_bytes ? g_dyn_bytes : 1, align));
    }
    g_dyn_handed = true;
    return g_dyn;
}

/* ---- __syncthreads ------------------------------------------------------------------- */
void syncthreads(const char *file, int line) {
    Block &b = g_block;
    Fiber *f = b.cur;
    if (b.exited)
        fail(file, line, "__syncthreads after %d thread(s) of the block exited (a barrier in divergent code)", b.exited);
    if (b.warps[f->warp].arrived)
        fail(file, line, "__syncthreads while lanes of this warp wait at a collective (%s:%d)", b.warps[f->warp].file,
             b.warps[f->warp].line);
    if (b.arrived == 0) b.bar_file = file, b.bar_line = line;
    else if (b.bar_line != line || strcmp(b.bar_file, file) != 0)
        fail(file, line, "__syncthreads here while other threads wait at __syncthreads %s:%d (divergent barriers)",
             b.bar_file, b.bar_line);
    f->state = AT_BARRIER;
    f->file = file, f->line = line;
    if (++b.arrived == b.n_threads) {
        b.arrived = 0;
        for (Fiber &o : b.fibers) make_runnable(o);
    }
    sleep_to_scheduler();
}

/* ---- warp collectives ---------------------------------------------------------------- */
static const char *kind_name(int k) {
    static const char *names[] = {"__shfl_sync", "__shfl_up_sync", "__shfl_down_sync", "__shfl_xor_sync",
                                  "__ballot_sync", "__any_sync", "__all_sync", "__syncwarp",
                                  "wmma::load_matrix_sync", "wmma::store_matrix_sync", "wmma::mma_sync",
                                  "ldmatrix", "mma.sync"};
    return names[k];
}

static int shfl_src(const Coll &c, int lane) {
    const int w = c.width, base = lane & ~(w - 1), off = lane & (w - 1);
    switch (c.kind) {
    case C_SHFL_IDX: return base + (c.arg & (w - 1));
    case C_SHFL_UP: return off >= c.arg ? lane - c.arg : lane;
    case C_SHFL_DOWN: return off + c.arg < w ? lane + c.arg : lane;
    default: {
        const int s = lane ^ c.arg;
        return (s & ~(w - 1)) == base ? s : lane;
    }
    }
}

static void complete(Warp &w) {
    const Coll &c = w.first;
    unsigned vote = 0;
    for (int l = 0; l < 32; l++)
        if ((w.expect >> l & 1) && w.vals[l]) vote |= 1u << l;
    for (int l = 0; l < 32; l++) {
        if (!(w.expect >> l & 1)) continue;
        Fiber &f = g_block.fibers[(size_t)(&w - &g_block.warps[0]) * 32 + l];
        switch (c.kind) {
        case C_SHFL_IDX:
        case C_SHFL_UP:
        case C_SHFL_DOWN:
        case C_SHFL_XOR: {
            const int s = shfl_src(c, l);
            if (s != l && !(w.expect >> s & 1)) {
                g_block.cur = &f;
                fail(w.file, w.line, "%s: lane %d reads lane %d, which is not in the mask %#x", kind_name(c.kind), l,
                     s, w.expect);
            }
            f.result = w.vals[s];
            break;
        }
        case C_BALLOT: f.result = vote; break;
        case C_ANY: f.result = vote != 0; break;
        case C_ALL: f.result = vote == w.expect; break;
        default: f.result = 0;
        }
        make_runnable(f);
    }
    if (c.complete) c.complete(w.payloads);
    w.arrived = 0;
}

uint64_t warp_collective(const Coll &c, const char *file, int line) {
    Block &b = g_block;
    Fiber *f = b.cur;
    Warp &w = b.warps[f->warp];
    const char *name = kind_name(c.kind);
    if (!(c.mask >> f->lane & 1)) fail(file, line, "%s: the calling lane %d is not in the mask %#x", name, f->lane, c.mask);
    if (c.mask & ~w.lanes)
        fail(file, line, "%s: the mask %#x names lanes the warp does not have (%#x)", name, c.mask, w.lanes);
    if (c.mask & w.exited)
        fail(file, line, "%s: the mask %#x names lanes that have exited (%#x)", name, c.mask, w.exited);
    if (c.width < 1 || c.width > 32 || (c.width & (c.width - 1)))
        fail(file, line, "%s: width %d is not a power of 2 up to 32", name, c.width);
    if (w.arrived == 0) {
        w.first = c, w.expect = c.mask, w.file = file, w.line = line;
    } else {
        if (c.kind != w.first.kind || c.mask != w.expect)
            fail(file, line, "%s with mask %#x while lanes %#x of the warp wait at %s with mask %#x (%s:%d)", name,
                 c.mask, w.arrived, kind_name(w.first.kind), w.expect, w.file, w.line);
        if (c.width != w.first.width || c.key != w.first.key)
            fail(file, line, "%s: lanes disagree on its uniform arguments (first at %s:%d)", name, w.file, w.line);
    }
    w.vals[f->lane] = c.val;
    w.payloads[f->lane] = c.payload;
    w.arrived |= 1u << f->lane;
    f->state = AT_WARP;
    f->file = file, f->line = line;
    if (w.arrived == w.expect) complete(w);
    sleep_to_scheduler();
    return f->result;
}

/* ---- launches -------------------------------------------------------------------------- */
static void run_block(const LaunchCfg &c) {
    Block &b = g_block;
    const int n = (int)(c.block.x * c.block.y * c.block.z);
    b.n_threads = n;
    b.n_warps = (n + 31) / 32;
    b.arrived = b.exited = 0;
    b.fibers.resize((size_t)n);
    b.warps.resize((size_t)b.n_warps);
    for (int i = 0; i < b.n_warps; i++) {
        b.warps[i].arrived = b.warps[i].exited = 0;
        const int lanes = n - 32 * i < 32 ? n - 32 * i : 32;
        b.warps[i].lanes = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    }
    b.runnable.clear();
    /* shared memory starts undefined: all bits set (NaN as floats, -1 as ints) */
    extern char __start_slemu_shared[] __attribute__((weak)), __stop_slemu_shared[] __attribute__((weak));
    if (__start_slemu_shared) memset(__start_slemu_shared, 0xff, (size_t)(__stop_slemu_shared - __start_slemu_shared));
    if (g_dyn_bytes) memset(g_dyn, 0xff, g_dyn_bytes);
    for (int i = 0; i < n; i++) {
        Fiber &f = b.fibers[i];
        f.file = nullptr, f.line = 0, f.result = 0;
        f.linear = i, f.warp = i / 32, f.lane = i % 32;
        f.tid = {(unsigned)i % c.block.x, (unsigned)(i / c.block.x) % c.block.y, (unsigned)(i / (c.block.x * c.block.y))};
        f.stack = g_stacks + (size_t)i * (STACK_BYTES + page_bytes()) + page_bytes();
        fiber_init(f, f.stack, STACK_BYTES);
        make_runnable(f);
    }
    int done = 0;
    while (done < n) {
        if (b.runnable.empty()) {
            b.cur = nullptr;
            for (Fiber &f : b.fibers)
                if (f.state != DONE) {
                    b.cur = &f;
                    fail(f.file, f.line, "deadlock: no thread can run; this one waits at %s",
                         f.state == AT_BARRIER ? "__syncthreads" : "a warp collective");
                }
        }
        const size_t k = (size_t)(rnd() % b.runnable.size());
        const int i = b.runnable[k];
        b.runnable[k] = b.runnable.back();
        b.runnable.pop_back();
        Fiber &f = b.fibers[i];
        b.cur = &f;
        g_threadIdx = f.tid;
        resume(f);
        if (f.state == DONE) done++;
    }
    b.cur = nullptr;
}

static void on_segv(int sig, siginfo_t *si, void *) {
    if (g_in_kernel)
        fail(nullptr, 0, "memory fault at %p (an access past a device buffer or the dynamic shared memory hits a "
                         "guard page; or a stack overflow)", si->si_addr);
    signal(sig, SIG_DFL);
    raise(sig);
}

static void init_once() {
    static bool done;
    if (done) return;
    done = true;
    seed_once();
    const size_t per = STACK_BYTES + page_bytes();
    g_stacks = (char *)mmap(nullptr, per * MAX_THREADS, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                            -1, 0);
    if (g_stacks == MAP_FAILED) {
        fprintf(stderr, "cuda-emu: cannot map fiber stacks\n");
        abort();
    }
    for (int i = 0; i < MAX_THREADS; i++) mprotect(g_stacks + (size_t)i * per, page_bytes(), PROT_NONE);
    static char altstack[64 * 1024];
    stack_t ss{};
    ss.ss_sp = altstack, ss.ss_size = sizeof altstack;
    sigaltstack(&ss, nullptr);
    struct sigaction sa{};
    sa.sa_sigaction = on_segv;
    sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
    sigaction(SIGSEGV, &sa, nullptr);
    sigaction(SIGBUS, &sa, nullptr);
}

void run_grid(const char *name, const char *launcher, const void *func, const LaunchCfg &c, void (*body)(void *), void *ctx) {
    std::lock_guard<std::recursive_mutex> lock(g_launch_mu);
    init_once();
    if (g_in_kernel) fail(nullptr, 0, "a launch from inside a kernel");
    const uint64_t n = (uint64_t)c.block.x * c.block.y * c.block.z;
    if (n == 0 || n > MAX_THREADS || c.block.z > 64 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0 ||
        c.grid.x > 0x7fffffffu || c.grid.y > 65535 || c.grid.z > 65535) {
        g_last_error = cudaErrorInvalidConfiguration;
        return;
    }
    size_t limit = 48 * 1024;
    auto it = g_func_smem.find(func);
    if (it != g_func_smem.end() && it->second > limit) limit = it->second;
    if (c.smem > limit) {
        g_last_error = cudaErrorInvalidValue;
        return;
    }
    g_dyn_bytes = c.smem, g_dyn_align = 16, g_dyn_handed = false;
    g_dyn = guarded_alloc(c.smem, 16, &g_dyn_region);
    g_block.kernel = name, g_block.launcher = launcher, g_block.body = body, g_block.ctx = ctx;
    g_gridDim = c.grid, g_blockDim = c.block;
    g_in_kernel = true;
    for (unsigned z = 0; z < c.grid.z; z++)
        for (unsigned y = 0; y < c.grid.y; y++)
            for (unsigned x = 0; x < c.grid.x; x++) {
                g_blockIdx = {x, y, z};
                run_block(c);
            }
    g_in_kernel = false;
    munmap(g_dyn_region.map, g_dyn_region.map_bytes);
    g_dyn = nullptr;
}

/* ---- inline PTX ---------------------------------------------------------------------------- */
size_t smem_offset(const void *p) {
    const char *c = static_cast<const char *>(p);
    if (!g_in_kernel || !g_dyn || c < g_dyn || c > g_dyn + g_dyn_bytes) return 0xffffffffu;
    return (size_t)(c - g_dyn);
}

namespace {

void put32(uint32_t *dst, uint32_t v) { memcpy(dst, &v, 4); }
void putf(uint32_t *dst, float f) { memcpy(dst, &f, 4); }
float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* ldmatrix.sync.aligned.m8n8{.x1,.x2,.x4}{.trans}.shared.b16 (PTX ISA, "Warp-level
 * matrix load instruction: ldmatrix"): n 8x8 matrices of 16-bit elements, each
 * row 16 bytes of shared memory at an address that lane 8 i + r gives (row r
 * of matrix i; the other lanes' addresses are unused). Destination register i
 * of lane l holds, of matrix i, row l / 4, elements 2 (l % 4) and 2 (l % 4) + 1
 * (the lower-numbered one in the low half); with .trans, row 2 (l % 4) and
 * 2 (l % 4) + 1 of column l / 4, i.e. the matrix transposed. */
struct LdmLane {
    int n, trans;
    const unsigned char *row; /* this lane's row address, when it gives one */
    uint32_t *out[4];
};
void ldmatrix_complete(void *const *payloads) {
    const LdmLane *l0 = static_cast<const LdmLane *>(payloads[0]);
    const int n = l0->n, trans = l0->trans;
    for (int l = 0; l < 32; l++) {
        const LdmLane *x = static_cast<const LdmLane *>(payloads[l]);
        for (int i = 0; i < n; i++) {
            uint16_t e[2];
            for (int k = 0; k < 2; k++) {
                const int r = trans ? 2 * (l % 4) + k : l / 4, c = trans ? l / 4 : 2 * (l % 4) + k;
                memcpy(&e[k], static_cast<const LdmLane *>(payloads[8 * i + r])->row + 2 * c, 2);
            }
            put32(x->out[i], (uint32_t)e[0] | (uint32_t)e[1] << 16);
        }
    }
}

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32 (PTX ISA,
 * "Matrix Fragments for mma.m16n8k16 with floating point type"): D (16x8) =
 * A (16x16) B (16x8) + C, groupID g = lane >> 2, threadID_in_group t = lane % 4.
 * A: 4 .b32 registers of two 16-bit elements a0..a7 (a[2j] in the low half):
 *   row g for a0, a1, a4, a5, g + 8 for a2, a3, a6, a7; column 2t + (i & 1),
 *   + 8 for a4..a7.
 * B: 2 registers, b0..b3: row (k) 2t + (i & 1), + 8 for b2, b3; column g.
 * C, D: 4 f32 c0..c3: row g for c0, c1, g + 8 for c2, c3; column 2t + (i & 1).
 * The products of 16-bit inputs are exact in fp32; they are added to C in
 * k order in fp32 (the tensor core's order and internal width are its own). */
struct MmaLane {
    int bf16;
    uint32_t a[4], b[2], c[4];
    uint32_t *d[4];
};
float mma_elem(uint32_t reg, int hi, int bf16) {
    const uint16_t h = (uint16_t)(hi ? reg >> 16 : reg & 0xffffu);
    return bf16 ? slemu_bf16_to_f32(h) : slemu_f16_to_f32(h);
}
void mma_complete(void *const *payloads) {
    float A[16][16], B[16][8], C[16][8];
    for (int l = 0; l < 32; l++) {
        const MmaLane *x = static_cast<const MmaLane *>(payloads[l]);
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 8; i++) {
            const int row = (i < 2 || (i >= 4 && i < 6)) ? g : g + 8, col = 2 * t + (i & 1) + (i >= 4 ? 8 : 0);
            A[row][col] = mma_elem(x->a[i / 2], i & 1, x->bf16);
        }
        for (int i = 0; i < 4; i++) B[2 * t + (i & 1) + (i >= 2 ? 8 : 0)][g] = mma_elem(x->b[i / 2], i & 1, x->bf16);
        for (int i = 0; i < 4; i++) C[i < 2 ? g : g + 8][2 * t + (i & 1)] = bits_f32(x->c[i]);
    }
    for (int l = 0; l < 32; l++) {
        const MmaLane *x = static_cast<const MmaLane *>(payloads[l]);
        const int g = l >> 2, t = l & 3;
        for (int i = 0; i < 4; i++) {
            const int row = i < 2 ? g : g + 8, col = 2 * t + (i & 1);
            float s = C[row][col];
            for (int k = 0; k < 16; k++) s += A[row][k] * B[k][col];
            putf(x->d[i], s);
        }
    }
}

}  // namespace

void ptx(const char *tpl, std::initializer_list<uint32_t *> outs, std::initializer_list<uint64_t> ins,
         const char *file, int line) {
    int n = 0, trans = 0, bf16 = 0;
    char op[96];
    op[0] = 0;
    sscanf(tpl, "%95s", op);
    const bool ldm = !strncmp(op, "ldmatrix.sync.aligned.m8n8.x", 28) && op[28] &&
                     (!strcmp(op + 29, ".shared.b16") || !strcmp(op + 29, ".trans.shared.b16"));
    if (ldm) {
        n = op[28] - '0';
        trans = op[30] == 't';
        if ((n != 1 && n != 2 && n != 4) || (int)outs.size() != n || ins.size() != 1)
            fail(file, line, "%s: %zu outputs and %zu inputs", op, outs.size(), ins.size());
        LdmLane me{n, trans, nullptr, {}};
        int i = 0;
        for (uint32_t *o : outs) me.out[i++] = o;
        const int lane = lane_id();
        if (lane < 8 * n) { /* this lane gives row lane % 8 of matrix lane / 8 */
            const uint64_t off = *ins.begin();
            if (off > g_dyn_bytes || g_dyn_bytes - off < 16)
                fail(file, line, "%s: lane %d's row address %#llx is not within the dynamic shared memory (%zu bytes)",
                     op, lane, (unsigned long long)off, g_dyn_bytes);
            if (off % 16) fail(file, line, "%s: lane %d's row address %#llx is not 16-byte aligned", op, lane,
                                (unsigned long long)off);
            me.row = reinterpret_cast<const unsigned char *>(g_dyn + off);
        }
        /* lanes must agree on the form and the source line (.aligned: one instruction for the warp) */
        Coll c{C_LDMATRIX, 0xffffffffu, 0, 0, 32, (uint64_t)line << 8 | (uint64_t)(n * 2 + trans), &me,
               ldmatrix_complete};
        warp_collective(c, file, line);
        return;
    }
    if (!strcmp(op, "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32") ||
        !strcmp(op, "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32")) {
        bf16 = strstr(op, ".bf16.") != nullptr;
        if (outs.size() != 4 || ins.size() != 10)
            fail(file, line, "%s: %zu outputs and %zu inputs (4 and 4 + 2 + 4 expected)", op, outs.size(), ins.size());
        MmaLane me{};
        me.bf16 = bf16;
        const uint64_t *a = ins.begin();
        for (int i = 0; i < 4; i++) me.a[i] = (uint32_t)a[i], me.c[i] = (uint32_t)a[6 + i];
        me.b[0] = (uint32_t)a[4], me.b[1] = (uint32_t)a[5];
        int i = 0;
        for (uint32_t *o : outs) me.d[i++] = o;
        Coll c{C_MMA_SYNC, 0xffffffffu, 0, 0, 32, (uint64_t)line << 8 | (uint64_t)(1 + bf16), &me, mma_complete};
        warp_collective(c, file, line);
        return;
    }
    const bool ld = !strncmp(tpl, "ld.global.cs.v4.u32 ", 20) || !strncmp(tpl, "ld.global.nc.v4.u32 ", 20) ||
                    !strncmp(tpl, "ld.global.v4.u32 ", 17);
    const bool st = !strncmp(tpl, "st.global.v4.b32 ", 17);
    if (ld && outs.size() == 4 && ins.size() == 1) {
        const uint32_t *p = (const uint32_t *)(uintptr_t)*ins.begin();
        if ((uintptr_t)p % 16) fail(file, line, "%s: address %p is not 16-byte aligned", tpl, (const void *)p);
        uint32_t v[4];
        memcpy(v, p, 16);
        int i = 0;
        for (uint32_t *o : outs) *o = v[i++];
        return;
    }
    if (st && outs.size() == 0 && ins.size() == 5) {
        const uint64_t *a = ins.begin();
        uint32_t *p = (uint32_t *)(uintptr_t)a[0];
        if ((uintptr_t)p % 16) fail(file, line, "%s: address %p is not 16-byte aligned", tpl, (void *)p);
        const uint32_t v[4] = {(uint32_t)a[1], (uint32_t)a[2], (uint32_t)a[3], (uint32_t)a[4]};
        memcpy(p, v, 16);
        return;
    }
    fail(file, line, "inline PTX the emulator does not know: \"%s\"", tpl);
}

/* ---- wmma layouts ---------------------------------------------------------------------------- */
int wmma_type_id() {
    static int next;
    return next++;
}
const uint8_t *wmma_perm(int id) {
    static std::map<int, std::vector<uint8_t>> perms;
    std::vector<uint8_t> &p = perms[id];
    if (p.empty()) {
        seed_once();
        uint64_t s = g_seed * 0x2545f4914f6cdd1dull + (uint64_t)id * 0x9e3779b97f4a7c15ull + 1;
        p.resize(256);
        for (int i = 0; i < 256; i++) p[i] = (uint8_t)i;
        for (int i = 255; i > 0; i--) { /* Fisher-Yates on a private splitmix64 */
            s += 0x9e3779b97f4a7c15ull;
            uint64_t z = s;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            z ^= z >> 31;
            const int j = (int)(z % (uint64_t)(i + 1));
            const uint8_t t = p[i];
            p[i] = p[j], p[j] = t;
        }
    }
    return p.data();
}

}  // namespace slemu

/* ---- the runtime API --------------------------------------------------------------------------- */
using namespace slemu;

extern "C" {

cudaError_t cudaGetDeviceCount(int *n) {
    *n = 1;
    return cudaSuccess;
}
cudaError_t cudaGetDevice(int *dev) {
    *dev = 0;
    return cudaSuccess;
}
cudaError_t cudaSetDevice(int dev) { return dev == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int dev) {
    if (dev != 0) return cudaErrorInvalidDevice;
    switch (attr) {
    case cudaDevAttrMaxThreadsPerBlock: *value = MAX_THREADS; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrMultiProcessorCount: *value = N_SMS; break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = (int)OPTIN_SMEM; break;
    default: return cudaErrorInvalidValue;
    }
    return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }
cudaError_t cudaGetLastError(void) {
    const cudaError_t e = g_last_error;
    g_last_error = cudaSuccess;
    return e;
}
cudaError_t cudaPeekAtLastError(void) { return g_last_error; }
const char *cudaGetErrorName(cudaError_t err) {
    switch (err) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    }
    return "cudaErrorUnknown";
}
const char *cudaGetErrorString(cudaError_t err) { return cudaGetErrorName(err); }

/* Device memory: 16-byte aligned, ending at a guard page (an access past the
 * end beyond the 16-byte rounding faults), filled with all bits set. */
cudaError_t cudaMalloc(void **p, size_t bytes) {
    std::lock_guard<std::recursive_mutex> lock(g_launch_mu);
    Region r;
    char *d = guarded_alloc(bytes, 16, &r);
    if (!d) return cudaErrorMemoryAllocation;
    memset(d, 0xff, round_up(bytes ? bytes : 1, 16));
    g_allocs[(uintptr_t)d] = r;
    *p = d;
    return cudaSuccess;
}
cudaError_t cudaFree(void *p) {
    if (!p) return cudaSuccess;
    std::lock_guard<std::recursive_mutex> lock(g_launch_mu);
    auto it = g_allocs.find((uintptr_t)p);
    if (it == g_allocs.end()) return cudaErrorInvalidDevicePointer;
    munmap(it->second.map, it->second.map_bytes);
    g_allocs.erase(it);
    return cudaSuccess;
}
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    if ((int)kind < 0 || (int)kind > 4) return cudaErrorInvalidMemcpyDirection;
    if (bytes) memmove(dst, src, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t) {
    return cudaMemcpy(dst, src, bytes, kind);
}
cudaError_t cudaMemset(void *p, int value, size_t bytes) {
    if (bytes) memset(p, value, bytes);
    return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t) { return cudaMemset(p, value, bytes); }
cudaError_t cudaStreamCreate(cudaStream_t *st) {
    static char token;
    *st = (cudaStream_t)(void *)&token;
    return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || (size_t)value > OPTIN_SMEM) return cudaErrorInvalidValue;
    std::lock_guard<std::recursive_mutex> lock(g_launch_mu);
    g_func_smem[func] = (size_t)value;
    return cudaSuccess;
}

}  // extern "C"
