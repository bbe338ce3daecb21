// The arithmetic of the indexer's rotation (spec §7.4: Hadamard x n^-0.5, bf16, FP4 round trip per 32-block), one warp
// per row: shared by quant.cu's kernels (the queries' rotation, the keys' packing) and the indexer's scores kernel,
// which rotates a decode step's queries as it stages them, so that every path gives the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"

namespace dsv4::cuda {

inline constexpr float kE2M1AmaxFloor = 6.0f * 0x1p-126f;  // official fp4_act_quant: 6 * 2^-126

// The biased UE8M0 exponent of an FP4 block whose |x| maximum is amax (before the floor).
__device__ __forceinline__ uint32_t fp4_scale_exponent(float amax) {
    return ue8m0_ceil_exponent(__fmul_rn(fmaxf(amax, kE2M1AmaxFloor), kE2M1MaxInv));
}
__device__ __forceinline__ float fp4_scaled(float x, float s) {
    return fminf(fmaxf(__fdiv_rn(x, s), -kE2M1Max), kE2M1Max);
}
__device__ __forceinline__ float fp4_value(float x, float s) {
    return round_e2m1(fp4_scaled(x, s));
}

// Hadamard + bf16 + FP4, one warp per row of kDim values; lane l holds x[l * kVals .. + kVals).
// Returns the FP4 scale exponent of the lane's 32-block and leaves the rotated bf16 values in v.
template <int kDim>
__device__ __forceinline__ uint32_t hadamard_bf16_fp4_exponent(float (&v)[kDim / 32], float scale) {
    constexpr int kVals = kDim / 32;
    static_assert(kDim == 32 || kDim == 64 || kDim == 128, "index_head_dim is 32, 64 or 128");
    const int lane = threadIdx.x % 32;
    // Butterflies x[j], x[j + h] <- x[j] + x[j + h], x[j] - x[j + h] (Sylvester order, as cpu::hadamard_transform):
    // inside the lane while h < kVals, across lanes (partner lane ^ h / kVals) after.
#pragma unroll
    for (int h = 1; h < kVals; h *= 2)
#pragma unroll
        for (int j = 0; j < kVals; ++j)
            if ((j & h) == 0) {
                const float a = v[j], b = v[j + h];
                v[j] = __fadd_rn(a, b);
                v[j + h] = __fsub_rn(a, b);
            }
#pragma unroll
    for (int m = 1; m < 32; m *= 2) {
        const bool upper = lane & m;
#pragma unroll
        for (int j = 0; j < kVals; ++j) {
            const float other = __shfl_xor_sync(0xFFFFFFFFu, v[j], m);
            v[j] = upper ? __fsub_rn(other, v[j]) : __fadd_rn(v[j], other);
        }
    }
    float amax = 0.0f;
#pragma unroll
    for (int j = 0; j < kVals; ++j) {
        v[j] = round_bf16(__fmul_rn(v[j], scale));
        amax = fmaxf(amax, fabsf(v[j]));
    }
    // A 32-block spans 32 / kVals consecutive lanes.
    return fp4_scale_exponent(group_max<32 / kVals>(amax));
}

}  // namespace dsv4::cuda
