// Host entry points of the grouped_linear kernels (grouped_linear_kernels.cu); contracts are checked by the
// launcher in grouped_linear.cpp.
#pragma once

#include "kernels/cuda/grouped_linear/grouped_linear.h"

namespace dsv4::cuda {

// GroupedLinearPath::kMma with `tiles`; no workspace.
cudaError_t launch_grouped_linear_mma(const GroupedLinearParams& p, const bf16_act_mma::Tiles& tiles,
                                      cudaStream_t stream);
// GroupedLinearPath::kGeneric: one thread per output, no workspace.
cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
