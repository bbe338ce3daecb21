// Host-side contract of l2_prefetch (l2_prefetch.h): the ranges' aligned interiors cut into chunks.
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

#include "core/error.h"
#include <cstdlib>

namespace dsv4::cuda {

void l2_prefetch(std::span<const L2Range> ranges, cudaStream_t stream) {
    static const int64_t chunk = getenv("DSV4_PF_CHUNK") ? atoll(getenv("DSV4_PF_CHUNK")) : kL2PrefetchChunk;  // EXPERIMENT
    detail::launch_l2_prefetch(ranges, chunk, stream);
}

namespace detail {
void launch_l2_prefetch(std::span<const L2Range> ranges, int64_t chunk_bytes, cudaStream_t stream) {
    DSV4_CHECK(chunk_bytes >= 16 && chunk_bytes % 16 == 0 && chunk_bytes <= (int64_t(1) << 30),
               "l2_prefetch: chunk of {} bytes", chunk_bytes);
    DSV4_CHECK(ranges.size() <= size_t(kL2PrefetchMaxRanges), "l2_prefetch: {} ranges (at most {})", ranges.size(),
               kL2PrefetchMaxRanges);
    L2PrefetchRanges r;
    r.chunk = chunk_bytes;
    int64_t chunks = 0;
    for (const L2Range& range : ranges) {
        DSV4_CHECK(range.bytes >= 0 && (range.bytes == 0 || range.data), "l2_prefetch: a range of {} bytes at null",
                   range.bytes);
        const uint64_t at = reinterpret_cast<uint64_t>(range.data);
        const uint64_t begin = (at + 15) / 16 * 16, end = (at + uint64_t(range.bytes)) / 16 * 16;
        if (range.bytes == 0 || end <= begin) continue;
        r.first[r.count] = begin;
        r.bytes[r.count] = int64_t(end - begin);
        chunks += (r.bytes[r.count] + chunk_bytes - 1) / chunk_bytes;
        r.chunk_end[r.count] = chunks;
        ++r.count;
    }
    launch_l2_prefetch_kernel(r, stream);
}
}  // namespace detail

}  // namespace dsv4::cuda
