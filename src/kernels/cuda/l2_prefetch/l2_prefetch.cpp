// Host side of l2_prefetch (see l2_prefetch.h); kernel in l2_prefetch.cu.
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

#include "core/error.h"

namespace dsv4::cuda {

bool L2PrefetchParams::add(const void* data, size_t n) {
    if (!data || n == 0) return true;
    if (count >= kMaxL2PrefetchRanges) return false;
    ranges[count++] = {data, n};
    return true;
}

size_t L2PrefetchParams::bytes() const {
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += ranges[i].bytes;
    return total;
}

void detail::check_l2_prefetch(const L2PrefetchParams& p) {
    DSV4_CHECK(p.count >= 0 && p.count <= kMaxL2PrefetchRanges, "l2_prefetch: {} ranges (at most {})", p.count,
               kMaxL2PrefetchRanges);
    for (int i = 0; i < p.count; ++i)
        DSV4_CHECK(p.ranges[i].data || p.ranges[i].bytes == 0, "l2_prefetch: range {} of {} bytes at null", i,
                   p.ranges[i].bytes);
}

void l2_prefetch(const L2PrefetchParams& p, cudaStream_t stream) {
    detail::check_l2_prefetch(p);
    if (p.bytes() == 0) return;
    detail::launch_l2_prefetch(p, stream);
}

}  // namespace dsv4::cuda
