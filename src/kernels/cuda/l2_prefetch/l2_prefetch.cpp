// l2_prefetch (see l2_prefetch.h): the ranges cut into pieces of kL2PieceBytes, one launch.
#include "kernels/cuda/l2_prefetch/l2_prefetch.h"

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/l2_prefetch/l2_prefetch_kernel.h"

namespace dsv4::cuda {

void l2_prefetch(std::span<const L2Range> ranges, cudaStream_t stream) {
    DSV4_CHECK(ranges.size() <= size_t(kMaxL2Ranges), "l2_prefetch: {} ranges, at most {}", ranges.size(),
               kMaxL2Ranges);
    L2Ranges r{};
    for (const L2Range& range : ranges) {
        if (!range.data || range.bytes == 0) continue;
        const uintptr_t begin = reinterpret_cast<uintptr_t>(range.data) & ~uintptr_t(15);
        const uintptr_t end = (reinterpret_cast<uintptr_t>(range.data) + range.bytes + 15) & ~uintptr_t(15);
        const uint64_t span = end - begin, pieces = (span + kL2PieceBytes - 1) / kL2PieceBytes;
        r.begin[r.count] = begin;
        r.last_bytes[r.count] = uint32_t(span - (pieces - 1) * kL2PieceBytes);
        r.pieces_before[r.count + 1] = r.pieces_before[r.count] + pieces;
        ++r.count;
    }
    if (r.count > 0) DSV4_CUDA_CHECK(launch_l2_prefetch(r, stream));
}

}  // namespace dsv4::cuda
