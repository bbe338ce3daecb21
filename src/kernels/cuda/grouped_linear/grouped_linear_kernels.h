// Host entry points of the grouped_linear kernels (grouped_linear_kernels.cu); contracts are checked by the
// launcher in grouped_linear.cpp.
#pragma once

#include <cstddef>

#include "kernels/cuda/grouped_linear/grouped_linear.h"

namespace dsv4::cuda {

// GroupedLinearPath::kMma with the config's tile; no workspace.
cudaError_t launch_grouped_linear_mma(const GroupedLinearParams& p, const GroupedLinearConfig& config,
                                      cudaStream_t stream);
// Dynamic shared memory of that launch: 16-row tiles stage [ceil(in/128), min(m, 16), block_n] f32.
size_t grouped_linear_mma_smem_bytes(const GroupedLinearConfig& config, int64_t m, int64_t in);
// GroupedLinearPath::kGeneric: one thread per output, no workspace.
cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
