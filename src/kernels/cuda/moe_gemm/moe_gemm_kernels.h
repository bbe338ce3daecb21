// Host entry point of the moe_gemm kernels (moe_gemm_kernels.cu); the contract is checked in moe_gemm.cpp.
#pragma once

#include "kernels/cuda/moe_gemm/moe_gemm.h"

namespace dsv4::cuda {

cudaError_t launch_moe_gemm(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);

}  // namespace dsv4::cuda
