// l2_prefetch's kernel (see l2_prefetch.h): one thread per piece of the ranges, one bulk prefetch each.
#include "kernels/cuda/l2_prefetch/l2_prefetch_kernel.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 32;

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(L2Ranges r) {
    const uint64_t total = r.pieces_before[r.count];
    for (uint64_t piece = uint64_t(blockIdx.x) * kThreads + threadIdx.x; piece < total;
         piece += uint64_t(gridDim.x) * kThreads) {
        int i = 0;
        while (piece >= r.pieces_before[i + 1]) ++i;
        const uint64_t within = piece - r.pieces_before[i];
        const bool last = within + 1 == r.pieces_before[i + 1] - r.pieces_before[i];
        const uintptr_t at = r.begin[i] + within * kL2PieceBytes;
        const uint32_t bytes = last ? r.last_bytes[i] : kL2PieceBytes;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(bytes) : "memory");
    }
}

}  // namespace

cudaError_t launch_l2_prefetch(const L2Ranges& r, cudaStream_t stream) {
    const uint64_t pieces = r.pieces_before[r.count];
    const unsigned grid = unsigned((pieces + kThreads - 1) / kThreads);
    l2_prefetch_kernel<<<grid, kThreads, 0, stream>>>(r);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
