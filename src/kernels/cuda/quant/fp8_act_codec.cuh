// The FP8 GEMM input's block quantization, device side (the official act_quant, spec §3): a block of 128 values gets
// the UE8M0 scale s = 2^ceil(log2(max(amax, 1e-4) / 448)) and each value the e4m3 code of x / s, clamped to +-448,
// rounded to nearest even. Shared by act_quant_fp8 (quant.cu) and the norms that emit their output quantized as well
// (rms_norm.cu), so both give the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/numeric.cuh"

namespace dsv4::cuda {

inline constexpr float kE4M3AmaxFloor = 1e-4f;  // official act_quant: amax.clamp(1e-4)

// Max over the lanes whose index differs only in the bits of `width - 1` (width a power of two <= 32).
template <int kWidth>
__device__ __forceinline__ float group_max(float v) {
    static_assert(kWidth >= 1 && kWidth <= 32 && (kWidth & (kWidth - 1)) == 0);
#pragma unroll
    for (int m = 1; m < kWidth; m *= 2) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, m));
    return v;
}

// The biased UE8M0 exponent of a block whose |x| maximum is amax (before the floor).
__device__ __forceinline__ uint32_t fp8_scale_exponent(float amax) {
    return ue8m0_ceil_exponent(__fmul_rn(fmaxf(amax, kE4M3AmaxFloor), kE4M3MaxInv));
}
__device__ __forceinline__ uint8_t fp8_code(float x, float s) {
    return f32_to_e4m3(fminf(fmaxf(__fdiv_rn(x, s), -kE4M3Max), kE4M3Max));
}

}  // namespace dsv4::cuda
