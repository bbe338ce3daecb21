// The routing of a few tokens by one CTA (moe_routing.h, MoeRoutingLaunch::kOneBlock): the device code shared by
// moe_routing.cu's one-CTA kernel and router_and_routing.cu, where the router GEMV's last CTA runs it.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/common/warp_scan.cuh"
#include "kernels/cuda/moe_routing/moe_routing.h"

namespace dsv4::cuda::routing {

constexpr int kMaxExperts = 512, kMaxK = 16;
constexpr int kOneBlockThreads = 256, kOneBlockAssignments = 1024;

// torch's softplus threshold (20), then sqrt, as dsv4::route_tokens.
__device__ __forceinline__ float sqrt_softplus(float z) {
    return sqrtf(z > 20.0f ? z : log1pf(expf(z)));
}

// One token's routing by one warp: scores into `scores` ([E], shared), the chosen experts in selection order into
// `chosen` ([k], shared), experts and weights to global memory. Each lane holds its logits and biases (experts lane,
// lane + 32, ...) in registers, loaded before the first use. Returns through `chosen` only; the caller counts.
__device__ inline void route_token(const MoeRoutingParams& p, int token, float* scores, int* chosen) {
    constexpr int kPerLane = kMaxExperts / 32;
    const int lane = threadIdx.x % 32, E = p.num_experts, k = p.k;
    const float* logits = p.logits + int64_t(token) * E;
    float biased[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        biased[i] = e < E ? __ldcg(logits + e) : 0.0f;  // past L1: router_and_routing's other CTAs wrote them
    }
    float bias[kPerLane];
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        bias[i] = e < E && p.bias ? p.bias[e] : 0.0f;
    }
    const int hashed = p.tid2eid && lane < k ? p.token_ids[token] : 0;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) {
        const int e = lane + 32 * i;
        if (e >= E) break;
        const float score = sqrt_softplus(biased[i]);
        scores[e] = score;
        biased[i] = score + bias[i];
    }
    __syncwarp();

    if (p.tid2eid) {
        const bool valid = hashed >= 0 && hashed < p.vocab;
        if (lane < k) chosen[lane] = valid ? p.tid2eid[int64_t(hashed) * k + lane] : -1;
    } else {
        // k rounds: the best (score + bias, lower index on ties) among the experts not chosen yet.
        uint32_t taken = 0;  // bit i: expert lane + 32 i is chosen (E <= 512 -> 16 bits)
        for (int j = 0; j < k; ++j) {
            float best = -INFINITY;
            int best_e = E;
#pragma unroll
            for (int i = 0; i < kPerLane; ++i) {
                const int e = lane + 32 * i;
                if (e < E && !(taken >> i & 1u) && (biased[i] > best || best_e == E)) {
                    best = biased[i];
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
            if (lane == 0) chosen[j] = best_e;
        }
    }
    __syncwarp();
    if (lane == 0) {
        float sum = 0.0f;
        for (int j = 0; j < k; ++j)
            if (chosen[j] >= 0) sum += scores[chosen[j]];
        for (int j = 0; j < k; ++j) {
            const int e = chosen[j];
            const int64_t a = int64_t(token) * k + j;
            p.experts[a] = e;
            p.weights[a] = e >= 0 ? __fmul_rn(__fdiv_rn(scores[e], sum), p.routed_scaling_factor) : 0.0f;
            if (e < 0) p.assignment_slot[a] = -1;
        }
    }
    __syncwarp();
}

// MoeRoutingParams::shared_rows from the expert offsets (offset(e): the exclusive prefix sum of the counts,
// offset(E) the total): one thread.
template <class Offset>
__device__ inline void write_shared_rows(const MoeRoutingParams& p, Offset offset) {
    if (!p.shared_rows) return;
    int least = 0, least_slots = 0;
    for (int r = 0; r < p.ranks; ++r) {
        const int first = int(int64_t(p.num_experts) * r / p.ranks);
        const int end = int(int64_t(p.num_experts) * (r + 1) / p.ranks);
        const int slots = offset(end) - offset(first);
        if (r == 0 || slots < least_slots) least = r, least_slots = slots;
    }
    *p.shared_rows = least == p.rank ? p.tokens : 0;
}

// Everything for a few tokens in one CTA (at most 32 tokens and kOneBlockAssignments assignments): the warps route
// the tokens, count in shared memory, one block scan gives the offsets, and every assignment finds its slot as the
// number of earlier assignments to its expert: the grid path's counts, offsets and permutation, bit for bit, in one
// launch instead of a memset and three.
// Run by every thread of a CTA of kOneBlockThreads threads (the one-CTA kernel, and the last CTA of a router
// launch: router_and_routing.cu); the caller guarantees moe_routing_fits_one_block.
__device__ inline void route_one_block(const MoeRoutingParams& p) {
    constexpr int kWarps = kOneBlockThreads / 32;
    __shared__ float scores[kWarps][kMaxExperts];
    __shared__ int chosen[kWarps][kMaxK];
    __shared__ int assigned[kOneBlockAssignments];  // expert of each assignment, -1 dropped
    __shared__ int counts[kMaxExperts], offsets[kMaxExperts + 1];
    __shared__ int warp_totals[kWarps];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, E = p.num_experts, n = p.tokens * p.k;
    for (int e = threadIdx.x; e < E; e += kOneBlockThreads) counts[e] = 0;
    __syncthreads();
    for (int t = warp; t < p.tokens; t += kWarps) {
        route_token(p, t, scores[warp], chosen[warp]);
        if (lane < p.k) {
            const int e = chosen[warp][lane];
            assigned[t * p.k + lane] = e;
            if (e >= 0) atomicAdd(&counts[e], 1);
        }
    }
    __syncthreads();
    phase_mark(p.phase_clock, 5);
    // Exclusive scan of the counts: thread i owns experts 2 i, 2 i + 1 (E <= 512).
    static_assert(2 * kOneBlockThreads >= kMaxExperts);
    const int e0 = 2 * threadIdx.x;
    const int c0 = e0 < E ? counts[e0] : 0, c1 = e0 + 1 < E ? counts[e0 + 1] : 0;
    const int inclusive = warp_inclusive_sum(c0 + c1);
    if (lane == 31) warp_totals[warp] = inclusive;
    __syncthreads();
    int before = 0, total = 0;
    for (int w = 0; w < kWarps; ++w) {
        if (w < warp) before += warp_totals[w];
        total += warp_totals[w];
    }
    const int first = before + inclusive - c0 - c1;
    if (e0 < E) offsets[e0] = first, p.expert_offsets[e0] = first, p.expert_counts[e0] = c0;
    if (e0 + 1 < E) offsets[e0 + 1] = first + c0, p.expert_offsets[e0 + 1] = first + c0, p.expert_counts[e0 + 1] = c1;
    if (threadIdx.x == 0) p.expert_offsets[E] = total;
    __syncthreads();
    phase_mark(p.phase_clock, 6);
    if (threadIdx.x == 0) write_shared_rows(p, [&](int e) { return e < E ? offsets[e] : total; });
    for (int a = threadIdx.x; a < n; a += kOneBlockThreads) {
        const int e = assigned[a];
        if (e < 0) continue;
        int rank = 0;
        for (int b = 0; b < a; ++b) rank += assigned[b] == e;
        const int slot = offsets[e] + rank;
        p.sorted_assignment[slot] = a;
        p.assignment_slot[a] = slot;
        if (p.row_index) p.row_index[slot] = a / p.k;
    }
    phase_mark(p.phase_clock, 7);
}

}  // namespace dsv4::cuda::routing
