// random_table_fill's kernel: one thread per hash (four output bytes), one 32-bit store where the four bytes are a
// whole aligned word, byte stores at a misaligned base or a ragged end. The table (64 KiB) is read through the
// read-only cache: per-expert launches of a few MiB each would spend more reloading it into shared memory.
#include "core/mix64.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/random_fill/random_fill.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
static_assert(kThreads % 32 == 0, "whole warps");

__global__ void __launch_bounds__(kThreads) random_table_fill_kernel(RandomTableFillParams p) {
    const int64_t first = (int64_t(blockIdx.x) * kThreads + threadIdx.x) * 4;
    if (first >= p.count) return;
    const uint64_t h = mix64(p.key + uint64_t(first));
    uint8_t b[4];
    for (int j = 0; j < 4; ++j) b[j] = __ldg(p.table + ((h >> (16 * j)) & 0xFFFF));
    uint8_t* out = p.out + first;
    if (first + 4 <= p.count && reinterpret_cast<uintptr_t>(out) % 4 == 0) {
        // Little-endian: byte j of the word is value first + j.
        *reinterpret_cast<uint32_t*>(out) =
            uint32_t(b[0]) | uint32_t(b[1]) << 8 | uint32_t(b[2]) << 16 | uint32_t(b[3]) << 24;
    } else {
        for (int j = 0; j < 4 && first + j < p.count; ++j) out[j] = b[j];
    }
}

}  // namespace

namespace detail {
void launch_random_table_fill(const RandomTableFillParams& p, cudaStream_t stream) {
    const int64_t hashes = (p.count + 3) / 4;
    random_table_fill_kernel<<<unsigned((hashes + kThreads - 1) / kThreads), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
