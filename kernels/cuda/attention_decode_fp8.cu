/* attention_decode_fp8.cu - the decode kernel (attention_decode.cuh) over
 * an fp8 KV cache (e4m3, e5m2) with bf16 / f16 q and out: the same kernel,
 * its K / V loads 8 codes (8 bytes) per lane, widened in registers
 * (fp8.cuh). Its own translation unit so that it compiles beside
 * attention_decode.cu. ptxas (CUDA 13.0, sm_90, -O3): the 64 kernels use
 * 94 to 204 registers (the bf16 cache's: up to 236), no spills.
 * Unverified on a GPU: checked on the CUDA emulator only (tests/cuda-emu).
 */
#include "attention_decode.cuh"

namespace slattn {

template <typename T>
static cudaError_t launch_decode_fp8(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    switch (a.kv) {
    case KV_E4M3: return launch_decode_kv<T, slfp8::e4m3>(pl, a, st);
    case KV_E5M2: return launch_decode_kv<T, slfp8::e5m2>(pl, a, st);
    default: return cudaErrorInvalidValue;
    }
}

cudaError_t launch_decode_fp8_bf16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return launch_decode_fp8<__nv_bfloat16>(pl, a, st);
}
cudaError_t launch_decode_fp8_f16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return launch_decode_fp8<__half>(pl, a, st);
}

} // namespace slattn
