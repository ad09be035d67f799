/* emu_selftest.cu - the emulator's own checks, each on a small kernel with
 * one known defect (and one without): ctest runs one case per process and
 * expects the emulator's message (or, for the race, a wrong result in some
 * block). Compiled like kernels/cuda: through emu_rewrite.py.
 *
 * usage: emu_selftest CASE
 */
#include <cuda_runtime.h>
#include <mma.h>
#include <stdio.h>
#include <string.h>

#include <type_traits>

/* thread 0 publishes a value; every thread reads it, with or without the barrier */
template <bool SYNC> __global__ void publish_kernel(int *out) {
    __shared__ int v;
    if (threadIdx.x == 0) v = (int)blockIdx.x;
    if (SYNC) __syncthreads();
    out[blockIdx.x * blockDim.x + threadIdx.x] = v;
}

__global__ void divergent_barrier_kernel() {
    if (threadIdx.x < 32) __syncthreads();
    else __syncthreads();
}

__global__ void early_exit_kernel() {
    if (threadIdx.x == 5) return;
    __syncthreads();
}

__global__ void mask_kernel(float *out, unsigned mask) {
    out[threadIdx.x] = __shfl_xor_sync(mask, (float)threadIdx.x, 1);
}

__global__ void partial_warp_kernel(float *out) {
    if (threadIdx.x < 16) out[threadIdx.x] = __shfl_down_sync(0xffffu, (float)threadIdx.x, 8);
}

__global__ void dyn_smem_kernel(float *out, int n) {
    extern __shared__ float s[];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    out[threadIdx.x] = s[threadIdx.x + n]; /* n past the end when n > 0 */
}

__global__ void misaligned_kernel(const float *in, float *out) {
    const float4 v = *reinterpret_cast<const float4 *>(in + 1); /* 4 bytes off 16 */
    out[threadIdx.x] = v.x;
}

/* D = A B through wmma, then each lane reads "its" elements assuming lane l
 * holds row l / 2 (a layout CUDA does not promise) */
__global__ void wmma_kernel(const __half *a, const __half *b, float *out, bool assume_layout) {
    using namespace nvcuda;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> fb;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;
    wmma::fill_fragment(fc, 0.0f);
    wmma::load_matrix_sync(fa, a, 16);
    wmma::load_matrix_sync(fb, b, 16);
    wmma::mma_sync(fc, fa, fb, fc);
    if (!assume_layout) {
        wmma::store_matrix_sync(out, fc, 16, wmma::mem_row_major);
    } else {
        const int lane = threadIdx.x;
        for (int i = 0; i < fc.num_elements; i++) out[(lane / 2) * 16 + (lane % 2) * 8 + i] = fc.x[i];
    }
}

/* ---- PTX ldmatrix and mma.sync m16n8k16 ------------------------------------
 * The expectations here are written from the PTX ISA's text, apart from the
 * emulator's: ldmatrix gives lane l, from each 8x8 matrix, row l / 4, columns
 * 2 (l % 4) + 0, 1 (.trans: the transposed matrix's); mma.m16n8k16 A is
 * a0..a3 = (row g, columns 2t..), (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..),
 * B b0, b1 = (rows 2t.., column g), (rows 2t + 8.., column g), C / D rows g
 * (c0, c1) and g + 8 (c2, c3), columns 2t, 2t + 1; g = lane / 4, t = lane % 4. */
__device__ unsigned sm_addr(const void *p) { return (unsigned)__cvta_generic_to_shared(p); }

enum { LDM_X1, LDM_X2, LDM_X4, LDM_X4_TRANS, LDM_X2_TRANS };
/* in: 32 rows of 8 16-bit values; lane l gives row l (for x1 / x2, lanes past
 * 8 / 16 give rows too, unused); out: lane l's registers, 4 per lane */
__global__ void ldmatrix_kernel(const uint16_t *in, unsigned *out, int form, int offset) {
    extern __shared__ __align__(16) uint16_t m[];
    for (int i = threadIdx.x; i < 256; i += 32) m[i] = in[i];
    __syncwarp();
    const int l = threadIdx.x;
    const unsigned a = sm_addr(m + 8 * l) + offset;
    unsigned r[4] = {0, 0, 0, 0};
    if (form == LDM_X1)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
    else if (form == LDM_X2)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    else if (form == LDM_X2_TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(r[0]), "=r"(r[1])
                     : "r"(a));
    else if (form == LDM_X4)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(a));
    for (int i = 0; i < 4; i++) out[4 * l + i] = r[i];
}

/* A lane that leaves before an ldmatrix the others reach. */
__global__ void ldmatrix_lane_missing_kernel(unsigned *out) {
    extern __shared__ __align__(16) uint16_t m[];
    for (int i = threadIdx.x; i < 256; i += 32) m[i] = (uint16_t)i;
    __syncwarp();
    if (threadIdx.x == 31) return;
    unsigned r;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(r) : "r"(sm_addr(m + 8 * (threadIdx.x % 8))));
    out[threadIdx.x] = r;
}

/* An ldmatrix given a global-memory address. */
__global__ void ldmatrix_global_kernel(const uint16_t *in, unsigned *out) {
    unsigned r;
    asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];"
                 : "=r"(r) : "r"(sm_addr(in + 8 * (threadIdx.x % 8))));
    out[threadIdx.x] = r;
}

enum { MMA_RIGHT, MMA_RIGHT_TRANS, MMA_B_TRANSPOSED, MMA_A_SWAPPED };
/* D (16x8) = A (16x16) B (16x8) in fp32: A row-major at a; B as bt = B^T
 * (8 rows of 16 k values), or row-major (16 rows of 8) at b for the .trans
 * forms; D row-major to d. MMA_B_TRANSPOSED loads row-major B without .trans
 * (as if B's fragment were row-major), MMA_A_SWAPPED swaps a1 and a2. */
template <typename T>
__global__ void mma_kernel(const T *a, const T *bt, const T *b, float *d, int form) {
    extern __shared__ __align__(16) uint16_t m[];
    uint16_t *sa = m, *sbt = m + 256, *sb = m + 384; /* 16x16, 8x16, 16x8 */
    for (int i = threadIdx.x; i < 256; i += 32) memcpy(&sa[i], &a[i], 2);
    for (int i = threadIdx.x; i < 128; i += 32) memcpy(&sbt[i], &bt[i], 2), memcpy(&sb[i], &b[i], 2);
    __syncwarp();
    const int l = threadIdx.x, g = l >> 2, t = l & 3;
    unsigned ra[4], rb[2];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(ra[0]), "=r"(ra[1]), "=r"(ra[2]), "=r"(ra[3])
                 : "r"(sm_addr(sa + 16 * (l & 15) + 8 * (l >> 4))));
    if (form == MMA_RIGHT || form == MMA_A_SWAPPED) /* lanes 0-7: k 0-7 of row n = l; 8-15: k 8-15 */
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(rb[0]), "=r"(rb[1])
                     : "r"(sm_addr(sbt + 16 * (l & 7) + 8 * ((l >> 3) & 1))));
    else if (form == MMA_RIGHT_TRANS) /* lanes 0-15: row k = l of B */
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];" : "=r"(rb[0]), "=r"(rb[1])
                     : "r"(sm_addr(sb + 8 * (l & 15))));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];" : "=r"(rb[0]), "=r"(rb[1])
                     : "r"(sm_addr(sb + 8 * (l & 15))));
    if (form == MMA_A_SWAPPED) {
        const unsigned x = ra[1];
        ra[1] = ra[2], ra[2] = x;
    }
    float c[4] = {0.5f, 0.5f, 0.5f, 0.5f}, o[4];
    if (std::is_same<T, __nv_bfloat16>::value)
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %11, %12, %13};"
                     : "=f"(o[0]), "=f"(o[1]), "=f"(o[2]), "=f"(o[3])
                     : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
    else
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                     "{%8, %9}, {%10, %11, %12, %13};"
                     : "=f"(o[0]), "=f"(o[1]), "=f"(o[2]), "=f"(o[3])
                     : "r"(ra[0]), "r"(ra[1]), "r"(ra[2]), "r"(ra[3]), "r"(rb[0]), "r"(rb[1]), "f"(c[0]), "f"(c[1]),
                       "f"(c[2]), "f"(c[3]));
    for (int i = 0; i < 4; i++) d[8 * (i < 2 ? g : g + 8) + 2 * t + (i & 1)] = o[i];
}

static int fail(const char *what) {
    printf("selftest: %s\n", what);
    return 1;
}

static int publish(bool sync) {
    const int blocks = 64, threads = 128;
    int *out;
    cudaMalloc((void **)&out, sizeof(int) * blocks * threads);
    if (sync) publish_kernel<true><<<blocks, threads>>>(out);
    else publish_kernel<false><<<blocks, threads>>>(out);
    int wrong = 0;
    for (int i = 0; i < blocks * threads; i++) wrong += out[i] != i / threads;
    printf("selftest: %d of %d reads saw a value not yet written\n", wrong, blocks * threads);
    cudaFree(out);
    return wrong;
}

static int wmma(bool assume_layout) {
    __half *a, *b;
    float *out;
    cudaMalloc((void **)&a, 256 * sizeof(__half));
    cudaMalloc((void **)&b, 256 * sizeof(__half));
    cudaMalloc((void **)&out, 256 * sizeof(float));
    float A[256], B[256];
    for (int i = 0; i < 256; i++) {
        A[i] = (float)((i * 7) % 13 - 6), B[i] = (float)((i * 5) % 11 - 5);
        a[i] = __half(A[i]), b[i] = __half(B[i]);
    }
    wmma_kernel<<<1, 32>>>(a, b, out, assume_layout);
    int wrong = 0;
    for (int r = 0; r < 16; r++)
        for (int c = 0; c < 16; c++) {
            float s = 0;
            for (int k = 0; k < 16; k++) s += A[16 * r + k] * B[16 * k + c];
            wrong += out[16 * r + c] != s;
        }
    printf("selftest: %d of 256 products wrong\n", wrong);
    return wrong;
}

/* Every ldmatrix form against the PTX ISA's layout; 0 when all registers match. */
static int ldmatrix_forms(void) {
    uint16_t *in;
    unsigned *out;
    cudaMalloc((void **)&in, 256 * 2);
    cudaMalloc((void **)&out, 128 * 4);
    for (int i = 0; i < 256; i++) in[i] = (uint16_t)(1000 + i); /* row r, column c: 1000 + 8 r + c */
    const struct { int form, n, trans; const char *name; } forms[] = {
        {LDM_X1, 1, 0, "x1"}, {LDM_X2, 2, 0, "x2"}, {LDM_X4, 4, 0, "x4"},
        {LDM_X2_TRANS, 2, 1, "x2.trans"}, {LDM_X4_TRANS, 4, 1, "x4.trans"}};
    int wrong = 0;
    for (const auto &f : forms) {
        ldmatrix_kernel<<<1, 32, 512>>>(in, out, f.form, 0);
        for (int l = 0; l < 32; l++)
            for (int i = 0; i < f.n; i++) { /* matrix i is rows 8 i .. 8 i + 7 of in */
                const int r = f.trans ? 2 * (l % 4) : l / 4, c = f.trans ? l / 4 : 2 * (l % 4);
                const unsigned lo = 1000 + 8 * (8 * i + r) + c;
                const unsigned hi = f.trans ? lo + 8 : lo + 1;
                if (out[4 * l + i] != (lo | hi << 16)) {
                    if (wrong++ < 4)
                        printf("selftest: ldmatrix %s lane %d register %d: %#x, expected %#x\n", f.name, l, i,
                               out[4 * l + i], lo | hi << 16);
                }
            }
    }
    printf("selftest: %d ldmatrix registers wrong\n", wrong);
    cudaFree(in), cudaFree(out);
    return wrong;
}

/* D = A B + 0.5 through ldmatrix and mma.sync in dtype T; returns the number
 * of wrong elements (small integers: every product and sum is exact). */
template <typename T> static int mma_case(int form) {
    T *a, *bt, *b;
    float *d;
    cudaMalloc((void **)&a, 256 * 2);
    cudaMalloc((void **)&bt, 128 * 2);
    cudaMalloc((void **)&b, 128 * 2);
    cudaMalloc((void **)&d, 128 * 4);
    float A[16][16], B[16][8];
    for (int r = 0; r < 16; r++)
        for (int k = 0; k < 16; k++) A[r][k] = (float)((r * 7 + k * 3) % 11 - 5), a[16 * r + k] = T(A[r][k]);
    for (int k = 0; k < 16; k++)
        for (int n = 0; n < 8; n++) {
            B[k][n] = (float)((k * 5 + n * 9) % 13 - 6);
            b[8 * k + n] = T(B[k][n]), bt[16 * n + k] = T(B[k][n]);
        }
    mma_kernel<T><<<1, 32, 1024>>>(a, bt, b, d, form);
    int wrong = 0;
    for (int r = 0; r < 16; r++)
        for (int n = 0; n < 8; n++) {
            float s = 0.5f;
            for (int k = 0; k < 16; k++) s += A[r][k] * B[k][n];
            wrong += d[8 * r + n] != s;
        }
    printf("selftest: %d of 128 products wrong\n", wrong);
    cudaFree(a), cudaFree(bt), cudaFree(b), cudaFree(d);
    return wrong;
}

int main(int argc, char **argv) {
    if (argc != 2) return fail("usage: emu_selftest CASE");
    const char *c = argv[1];
    float *out;
    cudaMalloc((void **)&out, 1024 * sizeof(float));
    if (!strcmp(c, "barrier_orders")) return publish(true) ? fail("a read after the barrier was wrong") : 0;
    if (!strcmp(c, "race_is_seen")) return publish(false) ? 0 : fail("no interleaving exposed the race");
    if (!strcmp(c, "divergent_barrier")) divergent_barrier_kernel<<<1, 64>>>();
    else if (!strcmp(c, "barrier_after_exit")) early_exit_kernel<<<1, 64>>>();
    else if (!strcmp(c, "shfl_full_mask")) mask_kernel<<<1, 64>>>(out, 0xffffffffu);
    else if (!strcmp(c, "shfl_mask_shifted")) mask_kernel<<<1, 64>>>(out, 0xffffffffu << 1);
    else if (!strcmp(c, "shfl_reads_outside_mask")) partial_warp_kernel<<<1, 32>>>(out);
    else if (!strcmp(c, "dyn_smem_in_bounds")) dyn_smem_kernel<<<1, 64, 64 * sizeof(float)>>>(out, 0);
    else if (!strcmp(c, "dyn_smem_over_read")) dyn_smem_kernel<<<1, 64, 64 * sizeof(float)>>>(out, 4);
    else if (!strcmp(c, "dyn_smem_over_limit")) {
        dyn_smem_kernel<<<1, 64, 64 * 1024>>>(out, 0);
        const cudaError_t e = cudaGetLastError();
        return e == cudaErrorInvalidValue ? 0 : fail("a 64 KB launch without cudaFuncSetAttribute was accepted");
    } else if (!strcmp(c, "misaligned_vector")) misaligned_kernel<<<1, 32>>>(out, out);
    else if (!strcmp(c, "wmma_opaque")) return wmma(false) ? fail("wmma through store_matrix_sync was wrong") : 0;
    else if (!strcmp(c, "wmma_layout_assumed")) return wmma(true) ? 0 : fail("a layout assumption went unnoticed");
    else if (!strcmp(c, "ldmatrix_forms")) return ldmatrix_forms() ? fail("an ldmatrix layout is wrong") : 0;
    else if (!strcmp(c, "mma_ldmatrix_exact")) {
        const int w = mma_case<__half>(MMA_RIGHT) + mma_case<__nv_bfloat16>(MMA_RIGHT) +
                      mma_case<__half>(MMA_RIGHT_TRANS) + mma_case<__nv_bfloat16>(MMA_RIGHT_TRANS);
        return w ? fail("mma.sync through ldmatrix was wrong") : 0;
    } else if (!strcmp(c, "mma_b_transposed"))
        return mma_case<__nv_bfloat16>(MMA_B_TRANSPOSED) ? 0 : fail("a transposed B fragment went unnoticed");
    else if (!strcmp(c, "mma_a_swapped"))
        return mma_case<__half>(MMA_A_SWAPPED) ? 0 : fail("swapped A registers went unnoticed");
    else if (!strcmp(c, "ldmatrix_misaligned")) {
        uint16_t *in;
        cudaMalloc((void **)&in, 512);
        ldmatrix_kernel<<<1, 32, 528>>>(in, (unsigned *)out, LDM_X4, 8); /* rows 8 bytes off 16 */
    } else if (!strcmp(c, "ldmatrix_outside_smem")) {
        uint16_t *in;
        cudaMalloc((void **)&in, 512);
        ldmatrix_global_kernel<<<1, 32, 16>>>(in, (unsigned *)out);
    } else if (!strcmp(c, "ldmatrix_lane_missing")) ldmatrix_lane_missing_kernel<<<1, 32, 512>>>((unsigned *)out);
    else return fail("unknown case");
    if (cudaGetLastError() != cudaSuccess) return fail("launch error");
    printf("selftest: %s ran to the end\n", c);
    return 0;
}
