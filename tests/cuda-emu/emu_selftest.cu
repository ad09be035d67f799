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
    else return fail("unknown case");
    if (cudaGetLastError() != cudaSuccess) return fail("launch error");
    printf("selftest: %s ran to the end\n", c);
    return 0;
}
