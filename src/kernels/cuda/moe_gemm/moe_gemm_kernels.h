// Host entry points of the moe_gemm kernels (moe_gemm_kernels.cu); the contract is checked in moe_gemm.cpp.
#pragma once

#include "kernels/cuda/moe_gemm/moe_gemm.h"

namespace dsv4::cuda {

// The compact grid over the active experts (what moe_gemm runs).
cudaError_t launch_moe_gemm(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);

namespace detail {
// The former grid over all experts, same bits: for the bitwise comparison in tests and benchmarks.
cudaError_t launch_moe_gemm_strided(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
