// The mHC post-mix of one element (spec §5, cpu::hc_post's order of operations), shared by mhc_post.cu's hc_post
// kernels and the epilogue of gemm_fp8's tensor-core tiles (Fp8GemmParams::post_mix), so both give the same bits:
// stream k's new value at (token, d) = bf16(post_k f + sum_j comb[j][k] x_j), the sum from +0 in ascending j, where f
// is the sub-layer's output at (token, d), x_j the token's old streams at d and `mix` the token's row of hc_pre's mix
// (pre at 0, post at kN, comb at 2 kN, comb[j][k] at 2 kN + j kN + k; comb normalized by hc_sinkhorn).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/numeric.cuh"

namespace dsv4::cuda {

template <int kN>
__device__ __forceinline__ float hc_post_value(const float* mix, const float (&x)[kN], float f, int k) {
    float residual = 0.0f;  // sum over the first index of C: C[j][k] X_j
#pragma unroll
    for (int j = 0; j < kN; ++j) residual = __fadd_rn(residual, __fmul_rn(mix[2 * kN + j * kN + k], x[j]));
    return __fadd_rn(__fmul_rn(mix[kN + k], f), residual);
}

// Every stream of one element: reads x_j = streams[(token n_hc + j) dim + d], writes out[(token n_hc + k) dim + d].
template <int kN>
__device__ __forceinline__ void hc_post_element(const float* mix, const __nv_bfloat16* streams, __nv_bfloat16* out,
                                                int64_t token, int64_t dim, int64_t d, float f) {
    float x[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) x[j] = bf16_to_f32(streams[(token * kN + j) * dim + d]);
#pragma unroll
    for (int k = 0; k < kN; ++k) out[(token * kN + k) * dim + d] = f32_to_bf16(hc_post_value<kN>(mix, x, f, k));
}

}  // namespace dsv4::cuda
