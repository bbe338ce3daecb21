// Host entry points of the moe_gemm kernels (moe_gemm_kernels.cu); the contract is checked in moe_gemm.cpp.
#pragma once

#include "kernels/cuda/moe_gemm/moe_gemm.h"

namespace dsv4::cuda {

// The tensor-core path (moe_mma.cu), both matrices when p.second is set.
cudaError_t launch_moe_mma(const MoeGemmParams& p, cudaStream_t stream);
// Slots per pass of the tensor-core kernel (8 to 64) from the host's bound on any expert's slot count and its
// expectation for an active expert (0: none).
int moe_mma_pass_tokens(int max_slots_per_expert, int expected_slots_per_expert);
// The warp-MMA kernel's row tile for decode passes (8 and 16 slots), in 16-row warp groups (4, 2 or 1), from the
// expected non-empty experts (0: unknown, 64 rows), the rows of a matrix, the matrices and the SM count.
int moe_mma_row_groups(int64_t active_experts, int64_t n, int mat_count, int sms);

// The CUDA-core compact grid over the active experts (p.second ignored).
cudaError_t launch_moe_gemm(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);

namespace detail {
// Which tensor-core kernel, all with the same bits (tests compare them): kChosen, the launcher's choice (the warpgroup
// kernel on sm_90 when K % 128 == 0, for passes of 16 slots or more and for passes of 8 from batches of 16 tokens;
// else the warp-MMA kernel with whole-stage loads where K % 128 == 0); kWarpMma, the warp-MMA kernel with the loads
// the launcher would pick; kGeneral, the warp-MMA kernel with the bounded loads any K takes; kAllSlots, kWarpMma
// without the single-slot passes it takes where no expert holds two slots.
enum class MoeMmaVariant { kChosen, kWarpMma, kGeneral, kAllSlots };
// row_groups: the warp-MMA kernel's row tile in 16-row warp groups (1, 2 or 4; 0: the launcher's); passes wider
// than 16 slots always take 4.
cudaError_t launch_moe_mma(const MoeGemmParams& p, MoeMmaVariant variant, cudaStream_t stream, int row_groups = 0);
// Whether kChosen takes the warpgroup kernel (moe_wgmma.cu) for these parameters on the current device.
bool moe_mma_takes_wgmma(const MoeGemmParams& p);
// Whether the warp-MMA kernel's single-slot passes of 64-row tiles copy their weight stages by the tensor-memory
// accelerator for these parameters on the current device (MoeGemmParams::tensor_copies, where the shape allows).
bool moe_mma_tensor_copies(const MoeGemmParams& p);
// The former grid over all experts, same bits: for the bitwise comparison in tests and benchmarks.
cudaError_t launch_moe_gemm_strided(const MoeGemmParams& p, const MoeGemmConfig& config, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
