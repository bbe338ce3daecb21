// Host entry points of the moe_gemm kernels (moe_gemm_kernels.cu); the contract is checked in moe_gemm.cpp.
#pragma once

#include "kernels/cuda/moe_gemm/moe_gemm.h"

namespace dsv4::cuda {

// The tensor-core path (moe_mma.cu), both matrices when p.second is set.
cudaError_t launch_moe_mma(const MoeGemmParams& p, cudaStream_t stream);
// Slots per pass of the tensor-core kernel (8 to 64) from the host's bound on any expert's slot count and its
// expectation for an active expert (0: none).
int moe_mma_pass_tokens(int max_slots_per_expert, int expected_slots_per_expert);

// The CUDA-core compact grid over the active experts (p.second ignored).
cudaError_t launch_moe_gemm(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);

namespace detail {
// kChosen: whole-stage loads where K % 128 == 0 (the launcher's choice); kGeneral: the bounded loads any K takes,
// same bits (tests compare the two).
enum class MoeMmaStages { kChosen, kGeneral };
cudaError_t launch_moe_mma(const MoeGemmParams& p, MoeMmaStages stages, cudaStream_t stream);
// The former grid over all experts, same bits: for the bitwise comparison in tests and benchmarks.
cudaError_t launch_moe_gemm_strided(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
