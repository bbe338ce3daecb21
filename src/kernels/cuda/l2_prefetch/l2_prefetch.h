// Weights fetched into L2 ahead of the kernel that reads them. At batch 1 a decode layer is a chain of
// latency-bound kernels (the mHC pre-mix, the norms, the router, the attention) between the weight streams of its
// GEMVs, so DRAM idles most of the step. A prefetch launched before such a stretch asks L2 for the next GEMV's
// weights (cp.async.bulk.prefetch.L2: the copy engine of each SM issues the requests; the kernel returns once they
// are issued and no result is waited for), so the GEMV reads them from L2 instead of DRAM.
//
// A prefetch is a hint: it changes no value, only where the bytes come from, and L2 may drop it under pressure.
// Ranges should start 16-byte aligned (the start is rounded down and the end up to 16 bytes). Timed in
// bench/l2_prefetch_bench.cu.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>

namespace dsv4::cuda {

struct L2Range {
    const void* data = nullptr;
    size_t bytes = 0;
};

// Up to kMaxL2Ranges ranges in one launch (empty ones are skipped); throws dsv4::Error on more.
inline constexpr int kMaxL2Ranges = 8;
void l2_prefetch(std::span<const L2Range> ranges, cudaStream_t stream);

}  // namespace dsv4::cuda
