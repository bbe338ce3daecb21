// MoE routing on the device (spec §9, src/model/moe.cpp route_tokens): scores sqrt(softplus(logit)) in f32,
// selection by score + bias (ties -> lower expert index) or through tid2eid (hash layers), weights s / sum(s of the
// chosen, in selection order) * routed_scaling_factor; then the token -> expert permutation the grouped expert GEMM
// needs (counts, offsets, assignments grouped by expert in ascending (token, j) order, the inverse map, and each slot's
// token).
// Everything stays on the device (no host synchronization): capturable in a CUDA graph.
// Tested in tests/gpu/moe_routing_test.cpp against dsv4::route_tokens.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/bf16_linear/bf16_linear.h"

namespace dsv4::cuda {

struct MoeRoutingParams {
    const float* logits;       // [tokens, num_experts] f32 router logits (gate GEMM in f32)
    const float* bias;         // [num_experts] f32 selection bias (score routing); null for hash routing
    const int32_t* tid2eid;    // [vocab, k] int32 expert ids per token id (hash routing); null for score routing
    const int32_t* token_ids;  // [tokens] int32 (hash routing)
    int32_t* experts;          // [tokens, k] chosen experts in selection order; -1 for an out-of-vocabulary id
    float* weights;            // [tokens, k] f32 routing weights (0 where experts is -1)
    int32_t* expert_counts;    // [num_experts] assignments per expert
    int32_t* expert_offsets;   // [num_experts + 1] exclusive prefix sum of the counts
    int32_t* sorted_assignment;  // [tokens * k] assignment ids t * k + j grouped by expert (ascending inside one);
                                 // the row to gather is sorted_assignment / k; entries past offsets[E] untouched
    int32_t* assignment_slot;    // [tokens * k] position of each assignment in sorted_assignment, -1 if dropped
    int32_t* row_index = nullptr;  // optional [tokens * k]: the token of each slot (sorted_assignment / k), the row
                                   // the expert GEMMs gather; entries past offsets[E] untouched
    // Optional, under expert parallelism (`ranks` ranks, this one `rank`; rank r holds experts
    // [E r / ranks, E (r + 1) / ranks), as dsv4::expert_range): *shared_rows = tokens on the rank holding the fewest
    // of the step's slots (the lowest rank on a tie), 0 on every other. Every rank routes the same tokens, so
    // exactly one rank computes the shared expert, with no host synchronization (the launches' row counts).
    int32_t* shared_rows = nullptr;
    int32_t ranks = 1, rank = 0;
    int32_t tokens = 0;
    int32_t num_experts = 0;  // at most 512
    int32_t k = 0;            // experts per token, at most 16
    int32_t vocab = 0;        // rows of tid2eid
    float routed_scaling_factor = 1.0f;
    // Optional instrument of the one-CTA routing (common/phase_clock.cuh; null in the model): marks 5 (the tokens
    // routed), 6 (counts and offsets) and 7 (the slots written); router_and_routing adds the router's marks 0-3 and
    // 4 (each CTA's arrival counted), dsv4_bench_decode_kernels phases reads them.
    int64_t* phase_clock = nullptr;
};

void moe_routing(const MoeRoutingParams& params, cudaStream_t stream);

// The router's f32 product and the routing in one launch, for calls the one-CTA routing takes
// (detail::moe_routing_fits_one_block: decode steps): `router` computed with bf16_linear's kernel and tiles (the
// same bits; a tile's K blocks shared out over up to four CTAs where the tiles alone would leave SMs idle, their
// products summed in the same ascending order), router.y being params.logits with row stride num_experts; then the
// last of its CTAs to finish routes the tokens with the one-CTA launch's code (the same bits). Throws where
// bf16_linear or the one-CTA routing would refuse, or where router.y is not params.logits.
struct RouterScratch {
    int32_t* arrivals = nullptr;  // `ints` of them (router_scratch_ints): zero before the first launch, left zero
    float* staged = nullptr;      // `floats` of them (router_scratch_floats)
    int64_t ints = 0, floats = 0;
};
// The scratch for up to `tokens` tokens (at most the one-CTA routing's) of a router of `experts` x `cols`.
int64_t router_scratch_ints(int64_t tokens, int64_t experts, int64_t cols, int num_sms);
int64_t router_scratch_floats(int64_t tokens, int64_t experts, int64_t cols, int num_sms);
void router_and_routing(const Bf16LinearParams& router, const MoeRoutingParams& params, const RouterScratch& scratch,
                        cudaStream_t stream);

namespace detail {
// kOneBlock: one CTA does everything (moe_routing takes it up to 32 tokens: decode steps); kGrid: a warp per
// token, then the offsets and a CTA per expert for the permutation. Both give the same bits (tests compare them).
enum class MoeRoutingLaunch { kOneBlock, kGrid };
bool moe_routing_fits_one_block(const MoeRoutingParams& params);
void moe_routing_launch(const MoeRoutingParams& params, cudaStream_t stream, MoeRoutingLaunch launch);
// The CTAs a tile's K blocks are shared out over (1 for 64-row tiles): enough to give every SM one.
int router_splits(const bf16_act_mma::Tiles& tiles, int64_t tokens, int64_t experts, int64_t cols, int num_sms);
cudaError_t launch_router_and_routing(const Bf16LinearParams& router, const bf16_act_mma::Tiles& tiles, int splits,
                                      const MoeRoutingParams& params, const RouterScratch& scratch,
                                      cudaStream_t stream);
}

}  // namespace dsv4::cuda
