/* attention_decode.cu - the decode kernel (attention_decode.cuh) with the
 * cache in the activation dtype, the launchers slk_attention calls (an fp8
 * cache goes on to attention_decode_fp8.cu), and the layouts' shared-memory
 * sizes for the host-side plan.
 */
#include "attention_decode.cuh"

namespace slattn {

cudaError_t launch_decode_f32(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return a.kv == KV_AS_T ? launch_decode_kv<float, float>(pl, a, st) : cudaErrorInvalidValue;
}
cudaError_t launch_decode_bf16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return a.kv == KV_AS_T ? launch_decode_kv<__nv_bfloat16, __nv_bfloat16>(pl, a, st)
                           : launch_decode_fp8_bf16(pl, a, st);
}
cudaError_t launch_decode_f16(const attn_plan_t *pl, const AttnArgs &a, cudaStream_t st) {
    return a.kv == KV_AS_T ? launch_decode_kv<__half, __half>(pl, a, st) : launch_decode_fp8_f16(pl, a, st);
}

} // namespace slattn

/* ---- the layouts, for the host-side check (attention_plan.h) ----------------- */

template <typename T, int D> static size_t decode_bytes_d(int64_t head_tile) {
    switch (head_tile) {
    case 1: return slattn::DecodeLayout<T, D, 1>::BYTES;
    case 2: return slattn::DecodeLayout<T, D, 2>::BYTES;
    case 4: return slattn::DecodeLayout<T, D, 4>::BYTES;
    case 8: return slattn::DecodeLayout<T, D, 8>::BYTES;
    default: return 0;
    }
}

template <typename T> static size_t decode_bytes(int64_t D, int64_t head_tile) {
    switch (D) {
    case 32: return decode_bytes_d<T, 32>(head_tile);
    case 64: return decode_bytes_d<T, 64>(head_tile);
    case 128: return decode_bytes_d<T, 128>(head_tile);
    case 256: return decode_bytes_d<T, 256>(head_tile);
    default: return 0;
    }
}

extern "C" size_t attn_kernel_decode_smem_bytes(int64_t elem_bytes, int64_t D, int64_t head_tile) {
    if (elem_bytes == 4) return decode_bytes<float>(D, head_tile);
    if (elem_bytes == 2) return decode_bytes<__nv_bfloat16>(D, head_tile); /* f16's layout is the same */
    return 0;
}
