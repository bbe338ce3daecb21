// Inclusive prefix sum of an int over the 32 lanes of a full warp (Hillis-Steele, 5 shuffles), shared by the block
// scans of the routing, the indexer's radix select and its top-k.
#pragma once

namespace dsv4::cuda {

__device__ __forceinline__ int warp_inclusive_sum(int v) {
    const int lane = threadIdx.x % 32;
#pragma unroll
    for (int d = 1; d < 32; d *= 2) {
        const int up = __shfl_up_sync(0xffffffffu, v, d);
        if (lane >= d) v += up;
    }
    return v;
}

}  // namespace dsv4::cuda
