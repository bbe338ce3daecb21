// l2_prefetch's kernel (l2_prefetch.h): one thread per chunk, over every range of the call.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

namespace dsv4::cuda::detail {
namespace {

constexpr int kThreads = 128;

__global__ void __launch_bounds__(kThreads) l2_prefetch_kernel(L2PrefetchRanges r) {
    const int64_t chunk = int64_t(blockIdx.x) * kThreads + threadIdx.x;
    int i = 0;
    while (i < r.count && chunk >= r.chunk_end[i]) ++i;
    if (i == r.count) return;
    const int64_t offset = (chunk - (i ? r.chunk_end[i - 1] : 0)) * r.chunk, left = r.bytes[i] - offset;
    const uint32_t size = uint32_t(left < r.chunk ? left : r.chunk);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(r.first[i] + uint64_t(offset)), "r"(size)
                 : "memory");
#endif
}

}  // namespace

void launch_l2_prefetch_kernel(const L2PrefetchRanges& r, cudaStream_t stream) {
    const int64_t chunks = r.count ? r.chunk_end[r.count - 1] : 0;
    if (chunks == 0) return;
    l2_prefetch_kernel<<<unsigned((chunks + kThreads - 1) / kThreads), kThreads, 0, stream>>>(r);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace dsv4::cuda::detail
