// Host-side contract of the MoE routing launcher (see moe_routing.h); kernels in moe_routing.cu.
#include "kernels/cuda/moe_routing/moe_routing.h"

#include "core/error.h"

namespace dsv4::cuda {

void moe_routing(const MoeRoutingParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0, "moe_routing: negative token count {}", p.tokens);
    DSV4_CHECK(p.num_experts > 0 && p.num_experts <= 512, "moe_routing: {} experts (1 to 512 supported)",
               p.num_experts);
    DSV4_CHECK(p.k > 0 && p.k <= 16 && p.k <= p.num_experts, "moe_routing: k {} must be in [1, min(16, {})]", p.k,
               p.num_experts);
    DSV4_CHECK(int64_t(p.tokens) * p.k < (int64_t(1) << 31), "moe_routing: {} tokens x k {} overflows int32",
               p.tokens, p.k);
    const bool hash = p.tid2eid != nullptr;
    DSV4_CHECK(hash ? (p.token_ids && p.vocab > 0) : p.bias != nullptr,
               "moe_routing: hash routing needs token_ids and vocab, score routing needs the bias");
    DSV4_CHECK(p.logits && p.experts && p.weights && p.expert_counts && p.expert_offsets && p.sorted_assignment &&
                   p.assignment_slot,
               "moe_routing: null pointer");
    DSV4_CHECK(!p.shared_rows || (p.ranks >= 1 && p.ranks <= p.num_experts && p.rank >= 0 && p.rank < p.ranks),
               "moe_routing: rank {} of {} ranks over {} experts", p.rank, p.ranks, p.num_experts);
    detail::moe_routing_launch(
        p, stream,
        detail::moe_routing_fits_one_block(p) ? detail::MoeRoutingLaunch::kOneBlock : detail::MoeRoutingLaunch::kGrid);
}

}  // namespace dsv4::cuda
