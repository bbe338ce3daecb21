// l2_prefetch: asks L2 to fetch byte ranges of device memory ahead of the kernels that will read them (a hint: no
// result, no completion, nothing a kernel computes depends on it). A batch-1 decode step is a chain of kernels, many of
// them bound by latency rather than bytes (the mHC mixes, the norms, sparse attention, routing): DRAM idles while they
// run, and the next weight-streaming GEMV then starts cold. Launched on a stream of its own beside that chain (the
// executor's prefetch lane), the next weights arrive in L2 while the chain is busy elsewhere (docs/gpu-design.md,
// "Weights fetched into L2 ahead of their GEMVs"). Each CTA thread issues cp.async.bulk.prefetch.L2 (sm_90) for chunks
// of kL2PrefetchChunk bytes and exits; the copy engine finishes the fetches after the kernel has ended.
// Tested in tests/gpu/l2_prefetch_test.cpp (argument checks; the launch leaves memory as it was).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace dsv4::cuda {

struct L2Range {
    const void* data = nullptr;
    int64_t bytes = 0;
};

inline constexpr int kL2PrefetchMaxRanges = 8;
inline constexpr int64_t kL2PrefetchChunk = 64 << 10;

// Prefetches the 16-byte-aligned interior of each range (ranges of 0 bytes are skipped). At most
// kL2PrefetchMaxRanges ranges per call.
void l2_prefetch(std::span<const L2Range> ranges, cudaStream_t stream);

namespace detail {
// With another chunk size (a multiple of 16 bytes; the bench compares them).
void launch_l2_prefetch(std::span<const L2Range> ranges, int64_t chunk_bytes, cudaStream_t stream);

// The kernel's argument: the ranges' aligned interiors and where each one's chunks end.
struct L2PrefetchRanges {
    int64_t chunk = kL2PrefetchChunk;
    uint64_t first[kL2PrefetchMaxRanges] = {};      // 16-byte aligned
    int64_t bytes[kL2PrefetchMaxRanges] = {};       // multiples of 16
    int64_t chunk_end[kL2PrefetchMaxRanges] = {};   // running sum of the ranges' chunk counts
    int count = 0;
};
void launch_l2_prefetch_kernel(const L2PrefetchRanges& r, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
