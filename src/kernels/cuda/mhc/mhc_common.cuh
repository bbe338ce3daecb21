// Device helpers shared by the mHC mix kernels (mhc.cu, mhc_spread.cu): the per-element operations of the mix, so
// that every path derives pre, post and comb's inputs from a logit with the same instructions.
#pragma once

#include "kernels/cuda/mhc/mhc.h"

namespace dsv4::cuda::mhc {

inline constexpr unsigned kFull = 0xFFFFFFFFu;
inline constexpr int kWarps = kHcThreads / 32;

__device__ __forceinline__ float sigmoid(float z) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}

// Mix element u of a token from its logit (cpu::hc_pre / hc_head): pre (u < n) = sigmoid(logit scale[0] + base) +
// hc_eps, post (u < 2n) = 2 sigmoid(logit scale[1] + base), comb's input (the rest) = logit scale[2] + base, which
// hc_sinkhorn normalizes later. `base` is base[u].
template <int kN, bool kHead>
__device__ __forceinline__ float mix_of_logit(int u, float logit, const float (&scale)[3], float base, float hc_eps) {
    if (u < kN) return __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(logit, scale[0]), base)), hc_eps);
    if (!kHead && u < 2 * kN) return __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(logit, scale[1]), base)));
    if (!kHead) return __fadd_rn(__fmul_rn(logit, scale[2]), base);
    return 0.0f;
}

// The inverse RMS of a token's streams from their sum of squares (the mixer logits' factor).
__device__ __forceinline__ float mixer_rho(float sum_of_squares, int64_t width, float norm_eps) {
    const float mean_sq = __fdiv_rn(sum_of_squares, float(width));
    return __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, norm_eps)));
}

}  // namespace dsv4::cuda::mhc
