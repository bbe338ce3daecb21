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

// act_quant_fp8 of a row a CTA of 256 threads holds: thread t holds the bf16 values (as f32) of elements
// first + t + 256 j, j < kHeld, of a row of `cols` (elements past cols hold 0). For each j, warps 0-3 hold one
// 128-block and warps 4-7 the next, so a block's amax is the max of four warp maxima (exact in any order); every
// value is then encoded with its block's scale into q_row[i], and each block's scale into scales_row. All 256
// threads must call it (it synchronizes, and again before returning, so it may be called once per chunk of a row).
template <int kHeld>
__device__ void quantize_held_row(const float (&held)[kHeld], int64_t first, int64_t cols, uint8_t* q_row,
                                  float* scales_row) {
    constexpr int kThreads = 256, kBlock = 128;
    __shared__ float warp_amax[kHeld][kThreads / 32];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
#pragma unroll
    for (int j = 0; j < kHeld; ++j) {
        const float amax = group_max<32>(fabsf(held[j]));
        if (lane == 0) warp_amax[j][warp] = amax;
    }
    __syncthreads();
    const int64_t n_blocks = (cols + kBlock - 1) / kBlock;
    const int lead = warp / 4 * 4;
#pragma unroll
    for (int j = 0; j < kHeld; ++j) {
        const int64_t i = first + threadIdx.x + int64_t(j) * kThreads, block = i / kBlock;
        if (block >= n_blocks) break;  // uniform over the block's four warps
        const float amax = fmaxf(fmaxf(warp_amax[j][lead], warp_amax[j][lead + 1]),
                                 fmaxf(warp_amax[j][lead + 2], warp_amax[j][lead + 3]));
        const float s = e8m0_to_f32(fp8_scale_exponent(amax));
        if (i < cols) q_row[i] = fp8_code(held[j], s);
        if (warp == lead && lane == 0) scales_row[block] = s;
    }
    __syncthreads();  // warp_amax may be rewritten by the next call
}

}  // namespace dsv4::cuda
