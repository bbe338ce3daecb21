// l2_prefetch kernel (see l2_prefetch.h): one warp per CTA, each lane prefetching whole chunks of the ranges, the
// chunks dealt out over every lane of the grid (a chunk per lane in flight at a time on the TMA path: the bulk
// prefetch returns at once).
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 32;
constexpr uint32_t kChunk = 16u << 10;              // bytes per bulk prefetch
constexpr size_t kBytesPerCta = size_t(512) << 10;  // 32 chunks: one per lane
constexpr size_t kMaxCtas = 256;

__device__ __forceinline__ void prefetch_chunk(const char* at, uint32_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(at), "r"(bytes) : "memory");
#else
    constexpr uint32_t kLine = 128;  // bytes per line prefetch
    for (uint32_t o = 0; o < bytes; o += kLine) asm volatile("prefetch.global.L2 [%0];" ::"l"(at + o));
#endif
}

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(const L2PrefetchParams p) {
    const size_t lane = size_t(blockIdx.x) * kThreads + threadIdx.x, lanes = size_t(gridDim.x) * kThreads;
    for (int r = 0; r < p.count; ++r) {
        // The range's 16-byte-aligned interior: the bulk prefetch takes 16-byte addresses and sizes.
        const uintptr_t first = (reinterpret_cast<uintptr_t>(p.ranges[r].data) + 15) & ~uintptr_t(15);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(p.ranges[r].data) + p.ranges[r].bytes) & ~uintptr_t(15);
        if (end <= first) continue;
        const size_t bytes = end - first, chunks = (bytes + kChunk - 1) / kChunk;
        for (size_t c = lane; c < chunks; c += lanes) {
            const size_t offset = c * kChunk;
            prefetch_chunk(reinterpret_cast<const char*>(first + offset),
                           uint32_t(bytes - offset < kChunk ? bytes - offset : kChunk));
        }
    }
}

}  // namespace

namespace detail {
void launch_l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream) {
    const size_t ctas = (p.bytes() + kBytesPerCta - 1) / kBytesPerCta;
    l2_prefetch_kernel<<<unsigned(ctas < kMaxCtas ? ctas : kMaxCtas), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
