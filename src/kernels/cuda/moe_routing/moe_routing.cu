// MoE routing kernels (see moe_routing.h):
//   moe_route_kernel:   one warp per token: scores, top-k by k rounds of a warp argmax (ties -> lower index),
//                       weights normalized in selection order (the CPU's f32 order), per-expert counts (atomics
//                       on integers: the counts do not depend on their order).
//   moe_route_one_block_kernel: all of it (route, counts, offsets, permutation) in one CTA for up to 32 tokens
//                       (decode), the same results as the grid kernels below.
//   moe_offsets_kernel: exclusive prefix sum of the counts (one thread; at most 512 experts).
//   moe_scatter_kernel: one CTA per expert: an ordered compaction of the assignments routed to it, so the
//                       permutation is deterministic (ascending assignment id inside each expert).
#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/warp_scan.cuh"
#include "kernels/cuda/moe_routing/moe_routing.h"
#include "kernels/cuda/moe_routing/route_one_block.cuh"

namespace dsv4::cuda {
namespace {

using namespace routing;

constexpr int kRouteWarps = 8;
constexpr int kScatterThreads = 256;

__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(const MoeRoutingParams p) {
    __shared__ float scores[kRouteWarps][kMaxExperts];
    __shared__ int chosen[kRouteWarps][kMaxK];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int token = blockIdx.x * kRouteWarps + warp;
    if (token >= p.tokens) return;
    route_token(p, token, scores[warp], chosen[warp]);
    if (lane == 0)
        for (int j = 0; j < p.k; ++j)
            if (chosen[warp][j] >= 0) atomicAdd(&p.expert_counts[chosen[warp][j]], 1);
}

// Everything for a few tokens in one CTA: route_one_block.cuh.
__global__ void __launch_bounds__(kOneBlockThreads) moe_route_one_block_kernel(const MoeRoutingParams p) {
    route_one_block(p);
}

// Exclusive prefix sum of the expert counts, one block: chunks of kOffsetThreads experts, a warp shuffle scan per
// warp, the warps' totals through shared memory, a carry between chunks (integers: any order gives the same sums).
// One thread walking the experts took ~15 us per layer: 256 dependent additions behind global loads.
constexpr int kOffsetThreads = 256;
__global__ void __launch_bounds__(kOffsetThreads) moe_offsets_kernel(const MoeRoutingParams p) {
    __shared__ int warp_totals[kOffsetThreads / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int carry = 0;
    for (int base = 0; base < p.num_experts; base += kOffsetThreads) {
        const int e = base + int(threadIdx.x);
        const int count = e < p.num_experts ? p.expert_counts[e] : 0;
        const int inclusive = warp_inclusive_sum(count);
        if (lane == 31) warp_totals[warp] = inclusive;
        __syncthreads();
        int before = carry, total = carry;
        for (int w = 0; w < kOffsetThreads / 32; ++w) {
            if (w < warp) before += warp_totals[w];
            total += warp_totals[w];
        }
        if (e < p.num_experts) p.expert_offsets[e] = before + inclusive - count;
        carry = total;
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        p.expert_offsets[p.num_experts] = carry;
        // Every thread's offsets were written before the loop's last barrier.
        write_shared_rows(p, [&](int e) { return p.expert_offsets[e]; });
    }
}

__global__ void __launch_bounds__(kScatterThreads) moe_scatter_kernel(const MoeRoutingParams p) {
    __shared__ int warp_sums[kScatterThreads / 32];
    const int expert = blockIdx.x, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int n = p.tokens * p.k;
    int base = p.expert_offsets[expert];
    for (int i0 = 0; i0 < n; i0 += kScatterThreads) {
        const int i = i0 + threadIdx.x;
        const bool mine = i < n && p.experts[i] == expert;
        const uint32_t ballot = __ballot_sync(0xffffffffu, mine);
        if (lane == 0) warp_sums[warp] = __popc(ballot);
        __syncthreads();
        int before = 0, total = 0;
        for (int w = 0; w < kScatterThreads / 32; ++w) {
            if (w < warp) before += warp_sums[w];
            total += warp_sums[w];
        }
        if (mine) {
            const int slot = base + before + __popc(ballot & ((1u << lane) - 1u));
            p.sorted_assignment[slot] = i;
            p.assignment_slot[i] = slot;
            if (p.row_index) p.row_index[slot] = i / p.k;
        }
        base += total;
        __syncthreads();
    }
}

}  // namespace

namespace detail {

bool moe_routing_fits_one_block(const MoeRoutingParams& p) {
    // Each warp routes its tokens one after another (about a memory round trip and k warp argmaxes each): past 4
    // tokens per warp the grid path, a warp per token, is sooner.
    return p.tokens <= 4 * (kOneBlockThreads / 32) && int64_t(p.tokens) * p.k <= kOneBlockAssignments;
}

void moe_routing_launch(const MoeRoutingParams& p, cudaStream_t stream, MoeRoutingLaunch launch) {
    if (launch == MoeRoutingLaunch::kOneBlock) {
        moe_route_one_block_kernel<<<1, kOneBlockThreads, 0, stream>>>(p);
        DSV4_CUDA_CHECK(cudaGetLastError());
        return;
    }
    DSV4_CUDA_CHECK(cudaMemsetAsync(p.expert_counts, 0, sizeof(int32_t) * size_t(p.num_experts), stream));
    if (p.tokens > 0) {
        moe_route_kernel<<<(p.tokens + kRouteWarps - 1) / kRouteWarps, kRouteWarps * 32, 0, stream>>>(p);
        DSV4_CUDA_CHECK(cudaGetLastError());
    }
    moe_offsets_kernel<<<1, kOffsetThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
    if (p.tokens > 0) {
        moe_scatter_kernel<<<p.num_experts, kScatterThreads, 0, stream>>>(p);
        DSV4_CUDA_CHECK(cudaGetLastError());
    }
}

}  // namespace detail
}  // namespace dsv4::cuda
