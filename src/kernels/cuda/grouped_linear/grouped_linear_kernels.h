// Host entry point of the grouped_linear kernel (grouped_linear_kernels.cu); the contract is checked by the
// launcher in grouped_linear.cpp.
#pragma once

#include "kernels/cuda/grouped_linear/grouped_linear.h"

namespace dsv4::cuda {

// `partial` ([splits, m, groups * out] f32) is used when config.splits > 1.
cudaError_t launch_grouped_linear(const GroupedLinearParams& p, const Fp8GemmConfig& config, float* partial,
                                  cudaStream_t stream);
// GroupedLinearPath::kGeneric: one thread per output, no workspace.
cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
