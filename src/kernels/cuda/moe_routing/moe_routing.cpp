// Host-side contract of the MoE routing launcher (see moe_routing.h); kernels in moe_routing.cu.
#include "kernels/cuda/moe_routing/moe_routing.h"

#include <algorithm>
#include <string>

#include "core/error.h"
#include "core/int_math.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"

namespace dsv4::cuda {

namespace {
void check_routing(const MoeRoutingParams& p) {
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
}
}  // namespace

void moe_routing(const MoeRoutingParams& p, cudaStream_t stream) {
    check_routing(p);
    detail::moe_routing_launch(
        p, stream,
        detail::moe_routing_fits_one_block(p) ? detail::MoeRoutingLaunch::kOneBlock : detail::MoeRoutingLaunch::kGrid);
}

namespace detail {
int router_splits(const bf16_act_mma::Tiles& tiles, int64_t tokens, int64_t experts, int64_t cols, int num_sms) {
    if (tiles.block_m != 16) return 1;
    const int64_t warps_per_tile = tiles.block_n == 32 ? 4 : 8;  // bf16_act_mma's decode tiles: WK
    const int64_t most = std::max<int64_t>(ceil_div(cols, 128) / warps_per_tile, 1);
    const int64_t wanted = num_sms / bf16_act_mma::split_tiles(tiles, tokens, experts);
    return int(std::clamp<int64_t>(wanted, 1, std::min<int64_t>(most, 4)));
}
}  // namespace detail

namespace {
// The scratch of every token count up to `tokens` (the decode graphs' pieces), the largest.
template <class Size>
int64_t largest_scratch(int64_t tokens, int64_t experts, int64_t cols, int num_sms, Size size) {
    int64_t most = 0;
    for (int64_t m = 1; m <= tokens; ++m) {
        const bf16_act_mma::Tiles tiles = bf16_linear_tiles(m, experts, cols, num_sms);
        if (detail::router_splits(tiles, m, experts, cols, num_sms) > 1) most = std::max(most, size(tiles, m));
    }
    return most;
}
}  // namespace

int64_t router_scratch_ints(int64_t tokens, int64_t experts, int64_t cols, int num_sms) {
    return 1 + largest_scratch(tokens, experts, cols, num_sms, [&](const bf16_act_mma::Tiles& t, int64_t m) {
               return bf16_act_mma::split_tiles(t, m, experts);
           });
}

int64_t router_scratch_floats(int64_t tokens, int64_t experts, int64_t cols, int num_sms) {
    return largest_scratch(tokens, experts, cols, num_sms, [&](const bf16_act_mma::Tiles& t, int64_t m) {
        return bf16_act_mma::split_staged_floats(t, m, experts, cols);
    });
}

void router_and_routing(const Bf16LinearParams& router, const MoeRoutingParams& p, const RouterScratch& scratch,
                        cudaStream_t stream) {
    check_routing(p);
    DSV4_CHECK(detail::moe_routing_fits_one_block(p), "router_and_routing: {} tokens x k {} do not fit one CTA",
               p.tokens, p.k);
    DSV4_CHECK(scratch.arrivals, "router_and_routing: no arrival counters");
    DSV4_CHECK(router.y == p.logits && router.m == p.tokens && router.n == p.num_experts && router.ldy == router.n,
               "router_and_routing: the router's output must be the routing's logits ([{}, {}], dense)", p.tokens,
               p.num_experts);
    if (std::string why = bf16_linear_can_run(router); !why.empty()) fail("router_and_routing: {}", why);
    const int sms = multiprocessor_count();
    const bf16_act_mma::Tiles tiles = bf16_linear_tiles(router.m, router.n, router.k, sms);
    if (std::string why = bf16_act_mma::tiles_can_run(tiles, router.m, router.n, router.k, router.n); !why.empty())
        fail("router_and_routing: {}", why);
    const int splits = detail::router_splits(tiles, router.m, router.n, router.k, sms);
    const int64_t ints = 1 + (splits > 1 ? bf16_act_mma::split_tiles(tiles, router.m, router.n) : 0),
                  floats = splits > 1 ? bf16_act_mma::split_staged_floats(tiles, router.m, router.n, router.k) : 0;
    DSV4_CHECK(scratch.ints >= ints && scratch.floats >= floats && (!floats || scratch.staged),
               "router_and_routing: {} tokens need {} arrival counters and {} staged floats; the scratch has {} and {}",
               router.m, ints, floats, scratch.ints, scratch.floats);
    DSV4_CUDA_CHECK(detail::launch_router_and_routing(router, tiles, splits, p, scratch, stream));
}

}  // namespace dsv4::cuda
