// Host entry point of the bf16_linear kernel (bf16_linear_kernels.cu), for the launcher in bf16_linear.cpp and for
// tests that run every tile; the contract is checked by the caller (bf16_linear_can_run, tiles_can_run).
#pragma once

#include "kernels/cuda/bf16_linear/bf16_linear.h"

namespace dsv4::cuda {

// bf16_act_mma.cuh with bf16 weights and f32 outputs, one column group, with `tiles`.
cudaError_t launch_bf16_linear(const Bf16LinearParams& p, const bf16_act_mma::Tiles& tiles, cudaStream_t stream);

}  // namespace dsv4::cuda
