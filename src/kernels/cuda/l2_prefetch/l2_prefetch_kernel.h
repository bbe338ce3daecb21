// The launch behind l2_prefetch (l2_prefetch.cpp builds the pieces, l2_prefetch.cu issues them).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

namespace dsv4::cuda {

inline constexpr uint32_t kL2PieceBytes = 32 << 10;  // bytes one bulk prefetch asks for

struct L2Ranges {
    uintptr_t begin[kMaxL2Ranges];             // 16-byte aligned
    uint64_t pieces_before[kMaxL2Ranges + 1];  // prefix sums of the ranges' pieces
    uint32_t last_bytes[kMaxL2Ranges];         // bytes of each range's last piece (a multiple of 16)
    int count;
};

cudaError_t launch_l2_prefetch(const L2Ranges& ranges, cudaStream_t stream);

}  // namespace dsv4::cuda
