// MoE routing kernels (see moe_routing.h):
//   moe_route_kernel:   one warp per token: scores, top-k by k rounds of a warp argmax (ties -> lower index),
//                       weights normalized in selection order (the CPU's f32 order), per-expert counts (atomics
//                       on integers: the counts do not depend on their order).
//   moe_offsets_kernel: exclusive prefix sum of the counts (one thread; at most 512 experts).
//   moe_scatter_kernel: one CTA per expert: an ordered compaction of the assignments routed to it, so the
//                       permutation is deterministic (ascending assignment id inside each expert).
#include <cstdint>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe_routing/moe_routing.h"

namespace dsv4::cuda {
namespace {

constexpr int kRouteWarps = 8;
constexpr int kMaxExperts = 512, kMaxK = 16;
constexpr int kScatterThreads = 256;

// torch's softplus threshold (20), then sqrt, as dsv4::route_tokens.
__device__ __forceinline__ float sqrt_softplus(float z) { return sqrtf(z > 20.0f ? z : log1pf(expf(z))); }

__global__ void __launch_bounds__(kRouteWarps * 32) moe_route_kernel(const MoeRoutingParams p) {
    __shared__ float scores[kRouteWarps][kMaxExperts];
    __shared__ int chosen[kRouteWarps][kMaxK];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int token = blockIdx.x * kRouteWarps + warp;
    if (token >= p.tokens) return;
    const int E = p.num_experts, k = p.k;
    const float* logits = p.logits + int64_t(token) * E;
    for (int e = lane; e < E; e += 32) scores[warp][e] = sqrt_softplus(logits[e]);
    __syncwarp();

    if (p.tid2eid) {
        const int id = p.token_ids[token];
        const bool valid = id >= 0 && id < p.vocab;
        if (lane < k) chosen[warp][lane] = valid ? p.tid2eid[int64_t(id) * k + lane] : -1;
    } else {
        // k rounds: the best (score + bias, lower index on ties) among the experts not chosen yet.
        uint32_t taken = 0;  // bit i: expert lane + 32 i is chosen (E <= 512 -> 16 bits)
        for (int j = 0; j < k; ++j) {
            float best = -INFINITY;
            int best_e = E;
            for (int i = 0, e = lane; e < E; ++i, e += 32) {
                const float v = scores[warp][e] + p.bias[e];
                if (!(taken >> i & 1u) && (v > best || best_e == E)) {
                    best = v;
                    best_e = e;
                }
            }
            for (int o = 16; o > 0; o >>= 1) {
                const float ov = __shfl_xor_sync(0xffffffffu, best, o);
                const int oe = __shfl_xor_sync(0xffffffffu, best_e, o);
                if (oe < E && (best_e == E || ov > best || (ov == best && oe < best_e))) {
                    best = ov;
                    best_e = oe;
                }
            }
            if (best_e % 32 == lane) taken |= 1u << (best_e / 32);
            if (lane == 0) chosen[warp][j] = best_e;
        }
    }
    __syncwarp();
    if (lane == 0) {
        float sum = 0.0f;
        for (int j = 0; j < k; ++j)
            if (chosen[warp][j] >= 0) sum += scores[warp][chosen[warp][j]];
        for (int j = 0; j < k; ++j) {
            const int e = chosen[warp][j];
            const int64_t a = int64_t(token) * k + j;
            p.experts[a] = e;
            p.weights[a] = e >= 0 ? __fmul_rn(__fdiv_rn(scores[warp][e], sum), p.routed_scaling_factor) : 0.0f;
            if (e >= 0)
                atomicAdd(&p.expert_counts[e], 1);
            else
                p.assignment_slot[a] = -1;
        }
    }
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
        int inclusive = count;
#pragma unroll
        for (int d = 1; d < 32; d *= 2) {
            const int v = __shfl_up_sync(0xffffffffu, inclusive, d);
            if (lane >= d) inclusive += v;
        }
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
    if (threadIdx.x == 0) p.expert_offsets[p.num_experts] = carry;
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
        }
        base += total;
        __syncthreads();
    }
}

}  // namespace

namespace detail {

void moe_routing_launch(const MoeRoutingParams& p, cudaStream_t stream) {
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
