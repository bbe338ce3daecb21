// Brings byte ranges (weights a later kernel of the stream's consumers will read) into the L2 cache ahead of their
// readers: a hint to the memory system, no result. A decode step at a small batch runs chains of latency-bound
// kernels (the mHC mixes, the norms, the sparse attention) during which the HBM is mostly idle; a launch of this op
// on a lane of its own beside them loads the next projections' weights (tens of MB; the H200's L2 holds 60 MB), so
// that those GEMMs read from the L2 instead of the HBM. Nothing it does changes a value anywhere
// (CudaOptions::prefetch_weights, Impl::prefetch_weights).
// sm_90: the Tensor Memory Accelerator's bulk prefetch (cp.async.bulk.prefetch.L2), one instruction per 16 KiB chunk;
// older devices: one prefetch.global.L2 per 128-byte line.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace dsv4::cuda {

struct L2PrefetchRange {
    const void* data = nullptr;
    size_t bytes = 0;
};

inline constexpr int kMaxL2PrefetchRanges = 8;

struct L2PrefetchParams {
    L2PrefetchRange ranges[kMaxL2PrefetchRanges];
    int count = 0;
    // Appends a range (a null or empty one is skipped); false when the params hold kMaxL2PrefetchRanges already.
    bool add(const void* data, size_t bytes);
    size_t bytes() const;  // the sum of the ranges' bytes
};

// Prefetches the ranges into L2 (their 16-byte-aligned interiors: no byte outside a range is touched), in order. No-op
// when they hold no byte. Throws on a count outside [0, kMaxL2PrefetchRanges] or a non-empty range at null.
void l2_prefetch(const L2PrefetchParams& params, cudaStream_t stream);

namespace detail {
void check_l2_prefetch(const L2PrefetchParams& params);
void launch_l2_prefetch(const L2PrefetchParams& params, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
