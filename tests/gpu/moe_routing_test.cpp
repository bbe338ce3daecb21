// MoE routing on the device vs a transcription of route_tokens (src/model/moe.cpp) from the router logits, and
// the permutation checked for consistency with the device's own choices (counts, offsets, ascending assignments
// inside each expert, inverse map). Score routing (Flash 256/6, Pro 384/6, tiny 12/3 with exact ties) and hash
// routing (including an out-of-vocabulary id, which the device marks -1 where the CPU reference throws). Calls small
// enough for the one-CTA launch are repeated on the grid launch and must give the same bits. Under expert parallelism,
// the rank the routing chooses for the shared expert (the least loaded).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "core/int_math.h"
#include "gpu_test_util.h"
#include "kernels/cuda/bf16_linear/bf16_linear.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/moe_routing/moe_routing.h"
#include "model/expert_range.h"

namespace dsv4 {
namespace {

using gpu_test::Rng;

float sqrt_softplus(float z) { return std::sqrt(z > 20.0f ? z : std::log1p(std::exp(z))); }

struct Case {
    int tokens, experts, k;
    bool hash;
    bool ties = false;  // logits and bias drawn from a few values: many exact ties
};

// MoeRoutingParams::shared_rows over 2 and 3 ranks (expert_range's split), on both launches: the tokens on the rank
// whose experts hold the fewest of the call's slots (the lowest rank on a tie), 0 on every other rank.
void expect_shared_rows_on_the_least_loaded_rank(const cuda::MoeRoutingParams& routed,
                                                 const std::vector<int32_t>& counts, const std::string& what) {
    for (int ranks : {2, 3}) {
        if (ranks > routed.num_experts) continue;
        int least = 0;
        int64_t least_slots = 0;
        for (int r = 0; r < ranks; ++r) {
            const ExpertRange held = expert_range(routed.num_experts, r, ranks);
            const int64_t slots =
                std::accumulate(counts.begin() + held.first, counts.begin() + held.first + held.count, int64_t{0});
            if (r == 0 || slots < least_slots) least = r, least_slots = slots;
        }
        for (int rank = 0; rank < ranks; ++rank)
            for (auto launch : {cuda::detail::MoeRoutingLaunch::kOneBlock, cuda::detail::MoeRoutingLaunch::kGrid}) {
                const bool one_block = launch == cuda::detail::MoeRoutingLaunch::kOneBlock;
                if (one_block && !cuda::detail::moe_routing_fits_one_block(routed)) continue;
                auto shared_rows = gpu_test::poisoned<int32_t>(1);
                cuda::MoeRoutingParams p = routed;  // the same outputs again
                p.shared_rows = shared_rows.get();
                p.ranks = ranks;
                p.rank = rank;
                cuda::detail::moe_routing_launch(p, nullptr, launch);
                EXPECT_EQ(gpu_test::to_host(shared_rows)[0], rank == least ? routed.tokens : 0)
                    << what << ", " << (one_block ? "one CTA" : "grid") << ": shared rows of rank " << rank << " of "
                    << ranks << " (the least loaded: " << least << ", " << least_slots << " slots)";
            }
    }
}

void run_case(const Case& c) {
    Rng rng;
    const int vocab = 1000;
    const float route_scale = 1.5f;
    std::vector<float> logits(size_t(c.tokens) * c.experts), bias(size_t(c.experts));
    for (float& l : logits) l = c.ties ? float(int(rng.engine()() % 4)) - 1.5f : rng.normal(2.0f);
    for (float& b : bias) b = c.ties ? 0.0f : rng.normal(0.1f);
    std::vector<int32_t> tid2eid(size_t(vocab) * c.k), ids(size_t(c.tokens));
    for (int v = 0; v < vocab; ++v) {
        std::vector<int32_t> all(static_cast<size_t>(c.experts));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng.engine());
        std::copy_n(all.begin(), c.k, tid2eid.begin() + int64_t(v) * c.k);
    }
    for (int32_t& id : ids) id = int32_t(rng.engine()() % vocab);
    if (c.hash && c.tokens > 2) ids[1] = vocab + 5;  // out of the vocabulary

    const int n = c.tokens * c.k;
    auto d_logits = gpu_test::to_device(logits);
    auto d_bias = gpu_test::to_device(bias);
    auto d_tid = gpu_test::to_device(tid2eid);
    auto d_ids = gpu_test::to_device(ids);
    auto d_experts = gpu_test::poisoned<int32_t>(size_t(n));
    auto d_weights = gpu_test::poisoned<float>(size_t(n));
    auto d_counts = gpu_test::poisoned<int32_t>(size_t(c.experts));
    auto d_offsets = gpu_test::poisoned<int32_t>(size_t(c.experts + 1));
    auto d_sorted = gpu_test::poisoned<int32_t>(size_t(n));
    auto d_slot = gpu_test::poisoned<int32_t>(size_t(n));
    auto d_rows = gpu_test::poisoned<int32_t>(size_t(n));
    cuda::MoeRoutingParams p;
    p.logits = d_logits.get();
    p.bias = c.hash ? nullptr : d_bias.get();
    p.tid2eid = c.hash ? d_tid.get() : nullptr;
    p.token_ids = d_ids.get();
    p.experts = d_experts.get();
    p.weights = d_weights.get();
    p.expert_counts = d_counts.get();
    p.expert_offsets = d_offsets.get();
    p.sorted_assignment = d_sorted.get();
    p.assignment_slot = d_slot.get();
    p.row_index = d_rows.get();
    p.tokens = c.tokens;
    p.num_experts = c.experts;
    p.k = c.k;
    p.vocab = vocab;
    p.routed_scaling_factor = route_scale;
    cuda::Event start, stop;
    start.record(nullptr);
    cuda::moe_routing(p, nullptr);
    stop.record(nullptr);
    const float ms = stop.elapsed_since(start);
    const auto experts = gpu_test::to_host(d_experts);
    const auto weights = gpu_test::to_host(d_weights);
    const auto counts = gpu_test::to_host(d_counts);
    const auto offsets = gpu_test::to_host(d_offsets);
    const auto sorted = gpu_test::to_host(d_sorted);
    const auto slot = gpu_test::to_host(d_slot);
    const auto rows = gpu_test::to_host(d_rows);

    char what[128];
    std::snprintf(what, sizeof what, "moe_routing %s tokens %d experts %d k %d%s", c.hash ? "hash" : "score", c.tokens,
                  c.experts, c.k, c.ties ? " ties" : "");
    std::printf("[ time     ] %s: %.1f us (first launch)\n", what, ms * 1e3);

    // The CPU reference. Scores differ from the device's by libm ulps (expf, log1pf: <= 2 ulps each; sqrt
    // halves the relative error): selection and order are compared only where every gap among the top k + 1
    // biased scores exceeds 8 ulps of the score; the weights (s / sum * scale, f32) within 16 ulps.
    gpu_test::Worst worst(std::string(what) + " weights");
    int64_t compared = 0, skipped = 0;
    for (int t = 0; t < c.tokens; ++t) {
        std::vector<float> s(static_cast<size_t>(c.experts));
        for (int e = 0; e < c.experts; ++e) s[size_t(e)] = sqrt_softplus(logits[size_t(t) * c.experts + e]);
        std::vector<int32_t> chosen(static_cast<size_t>(c.k));
        bool clear = true;
        if (c.hash) {
            if (ids[size_t(t)] >= vocab) {  // the device's answer to an id the CPU rejects
                for (int j = 0; j < c.k; ++j) {
                    EXPECT_EQ(experts[size_t(t) * c.k + j], -1) << what;
                    EXPECT_EQ(weights[size_t(t) * c.k + j], 0.0f) << what;
                    EXPECT_EQ(slot[size_t(t) * c.k + j], -1) << what;
                }
                continue;
            }
            std::copy_n(tid2eid.begin() + int64_t(ids[size_t(t)]) * c.k, c.k, chosen.begin());
        } else {
            std::vector<int32_t> order(static_cast<size_t>(c.experts));
            std::iota(order.begin(), order.end(), 0);
            auto biased = [&](int32_t e) { return s[size_t(e)] + bias[size_t(e)]; };
            std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
                return biased(a) > biased(b) || (biased(a) == biased(b) && a < b);
            });
            std::copy_n(order.begin(), c.k, chosen.begin());
            for (int j = 0; j < std::min(c.k + 1, c.experts) - 1 && !c.ties; ++j) {
                const float a = biased(order[size_t(j)]), b = biased(order[size_t(j + 1)]);
                if (a - b <= 8 * std::fabs(a) * 0x1p-23f) clear = false;
            }
        }
        if (!clear) {
            ++skipped;
            continue;
        }
        ++compared;
        float sum = 0.0f;
        for (int j = 0; j < c.k; ++j) sum += s[size_t(chosen[size_t(j)])];
        for (int j = 0; j < c.k; ++j) {
            EXPECT_EQ(experts[size_t(t) * c.k + j], chosen[size_t(j)]) << what << " token " << t << " rank " << j;
            const float want = s[size_t(chosen[size_t(j)])] / sum * route_scale;
            worst.add(int64_t(t) * c.k + j, weights[size_t(t) * c.k + j], want, 16 * std::fabs(want) * 0x1p-23);
        }
    }
    std::printf("[ routing  ] %s: %lld tokens compared, %lld skipped (gap within rounding)\n", what,
                (long long)compared, (long long)skipped);
    if (compared) worst.expect_ok();

    // The permutation, from the device's own choices.
    std::vector<int32_t> want_counts(size_t(c.experts), 0);
    for (int i = 0; i < n; ++i)
        if (experts[size_t(i)] >= 0) ++want_counts[size_t(experts[size_t(i)])];
    EXPECT_TRUE(counts == want_counts) << what << ": counts";
    int32_t running = 0;
    for (int e = 0; e < c.experts; ++e) {
        ASSERT_EQ(offsets[size_t(e)], running) << what << ": offset of expert " << e;
        int32_t prev = -1;
        for (int32_t i = running; i < running + want_counts[size_t(e)]; ++i) {
            const int32_t a = sorted[size_t(i)];
            ASSERT_TRUE(a > prev && a < n && experts[size_t(a)] == e) << what << ": sorted position " << i;
            ASSERT_EQ(slot[size_t(a)], i) << what << ": inverse map of assignment " << a;
            ASSERT_EQ(rows[size_t(i)], a / c.k) << what << ": row of slot " << i;
            prev = a;
        }
        running += want_counts[size_t(e)];
    }
    EXPECT_EQ(offsets[size_t(c.experts)], running) << what;
    expect_shared_rows_on_the_least_loaded_rank(p, want_counts, what);

    // Decode-sized calls run in one CTA; the grid path must give the same bits.
    if (!cuda::detail::moe_routing_fits_one_block(p)) return;
    auto g_experts = gpu_test::poisoned<int32_t>(size_t(n));
    auto g_weights = gpu_test::poisoned<float>(size_t(n));
    auto g_counts = gpu_test::poisoned<int32_t>(size_t(c.experts));
    auto g_offsets = gpu_test::poisoned<int32_t>(size_t(c.experts + 1));
    auto g_sorted = gpu_test::poisoned<int32_t>(size_t(n));
    auto g_slot = gpu_test::poisoned<int32_t>(size_t(n));
    auto g_rows = gpu_test::poisoned<int32_t>(size_t(n));
    cuda::MoeRoutingParams g = p;
    g.experts = g_experts.get();
    g.weights = g_weights.get();
    g.expert_counts = g_counts.get();
    g.expert_offsets = g_offsets.get();
    g.sorted_assignment = g_sorted.get();
    g.assignment_slot = g_slot.get();
    g.row_index = g_rows.get();
    cuda::detail::moe_routing_launch(g, nullptr, cuda::detail::MoeRoutingLaunch::kGrid);
    const std::string one_vs_grid = std::string(what) + ": one CTA vs the grid";
    EXPECT_EQ(gpu_test::to_host(g_experts), experts) << one_vs_grid << ", experts";
    gpu_test::expect_bitwise_f32(one_vs_grid + ", weights", gpu_test::to_host(g_weights), weights);
    EXPECT_EQ(gpu_test::to_host(g_counts), counts) << one_vs_grid << ", counts";
    EXPECT_EQ(gpu_test::to_host(g_offsets), offsets) << one_vs_grid << ", offsets";
    const auto g_sorted_host = gpu_test::to_host(g_sorted);
    EXPECT_TRUE(std::equal(sorted.begin(), sorted.begin() + running, g_sorted_host.begin()))
        << one_vs_grid << ", permutation";
    EXPECT_EQ(gpu_test::to_host(g_slot), slot) << one_vs_grid << ", inverse map";
    const auto g_rows_host = gpu_test::to_host(g_rows);
    EXPECT_TRUE(std::equal(rows.begin(), rows.begin() + running, g_rows_host.begin())) << one_vs_grid << ", rows";
}

TEST(MoeRoutingGpu, ScoreRoutingFlashAndPro) {
    DSV4_REQUIRE_GPU();
    for (int tokens : {1, 5, 32, 37, 300}) run_case({tokens, 256, 6, false});
    run_case({37, 384, 6, false});
}
TEST(MoeRoutingGpu, TiesGoToTheLowerIndex) {
    DSV4_REQUIRE_GPU();
    run_case({37, 12, 3, false, true});
    run_case({5, 256, 6, false, true});
}
TEST(MoeRoutingGpu, HashRouting) {
    DSV4_REQUIRE_GPU();
    run_case({1, 256, 6, true});
    run_case({9, 256, 6, true});
    run_case({37, 384, 6, true});
}

// router_and_routing against the two launches it replaces (bf16_linear, then moe_routing), bit for bit: the router's
// logits and every routing output, at V4-Flash's router shape (256 experts over 4096 columns) and V4-Pro's expert
// count, 1 to 32 tokens (tiles split over 4, 4, 4, 2 and 1 CTAs on an H100 or H200), score and hash routing; three
// eager launches, then a captured graph replayed twice (each launch must leave the arrival counters at zero).
TEST(MoeRoutingGpu, RouterAndRoutingInOneLaunchEqualTheTwoBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const int64_t D = 4096;
    const int k = 6, vocab = 1000;
    struct Shape {
        int tokens, experts;
        bool hash;
    };
    for (const Shape& shape : {Shape{1, 256, false}, Shape{5, 256, false}, Shape{16, 256, true}, Shape{32, 256, false},
                               Shape{32, 384, false}}) {
        const int T = shape.tokens, E = shape.experts, n = T * k;
        const auto x = gpu_test::to_device(gpu_test::random_bf16(rng, T * D));
        const auto w = gpu_test::to_device(gpu_test::random_bf16(rng, E * D, 1.0f / 64.0f));
        std::vector<float> bias(size_t(E), 0.0f);
        for (float& b : bias) b = rng.normal(0.1f);
        std::vector<int32_t> tid2eid(static_cast<size_t>(vocab) * k), ids(static_cast<size_t>(T));
        for (int v = 0; v < vocab; ++v)
            for (int j = 0; j < k; ++j) tid2eid[size_t(v) * k + j] = (v * 7 + j * 37) % E;  // k distinct experts
        for (int32_t& id : ids) id = int32_t(rng.engine()() % vocab);
        const auto d_bias = gpu_test::to_device(bias);
        const auto d_tid = gpu_test::to_device(tid2eid);
        const auto d_ids = gpu_test::to_device(ids);

        struct Outputs {
            cuda::DeviceBuffer<float> logits, weights;
            cuda::DeviceBuffer<int32_t> experts, counts, offsets, sorted, slot, rows;
        };
        auto outputs = [&] {
            return Outputs{gpu_test::poisoned<float>(size_t(T) * E),   gpu_test::poisoned<float>(size_t(n)),
                           gpu_test::poisoned<int32_t>(size_t(n)),     gpu_test::poisoned<int32_t>(size_t(E)),
                           gpu_test::poisoned<int32_t>(size_t(E + 1)), gpu_test::poisoned<int32_t>(size_t(n)),
                           gpu_test::poisoned<int32_t>(size_t(n)),     gpu_test::poisoned<int32_t>(size_t(n))};
        };
        auto routing = [&](Outputs& o) {
            cuda::MoeRoutingParams p;
            p.logits = o.logits.get();
            p.bias = shape.hash ? nullptr : d_bias.get();
            p.tid2eid = shape.hash ? d_tid.get() : nullptr;
            p.token_ids = d_ids.get();
            p.experts = o.experts.get();
            p.weights = o.weights.get();
            p.expert_counts = o.counts.get();
            p.expert_offsets = o.offsets.get();
            p.sorted_assignment = o.sorted.get();
            p.assignment_slot = o.slot.get();
            p.row_index = o.rows.get();
            p.tokens = T;
            p.num_experts = E;
            p.k = k;
            p.vocab = vocab;
            p.routed_scaling_factor = 2.5f;
            return p;
        };
        auto router = [&](Outputs& o) {
            cuda::Bf16LinearParams p;
            p.x = reinterpret_cast<const __nv_bfloat16*>(x.get());
            p.w = reinterpret_cast<const __nv_bfloat16*>(w.get());
            p.y = o.logits.get();
            p.m = T;
            p.n = E;
            p.k = D;
            p.ldx = D;
            p.ldy = E;
            return p;
        };
        Outputs two = outputs();
        cuda::bf16_linear(router(two), nullptr);
        cuda::moe_routing(routing(two), nullptr);
        const int sms = cuda::multiprocessor_count();
        auto arrivals = gpu_test::poisoned<int32_t>(size_t(cuda::router_scratch_ints(T, E, D, sms)), 0);
        auto staged =
            gpu_test::poisoned<float>(size_t(std::max<int64_t>(cuda::router_scratch_floats(T, E, D, sms), 1)));
        const cuda::RouterScratch scratch{arrivals.get(), staged.get(), int64_t(arrivals.size()),
                                          cuda::router_scratch_floats(T, E, D, sms)};
        const int splits = cuda::detail::router_splits(cuda::bf16_linear_tiles(T, E, D, sms), T, E, D, sms);
        char what[96];
        auto expect_equal = [&](Outputs& one, const std::string& how) {
            const std::string label = std::string(what) + ", " + how;
            gpu_test::expect_bitwise_f32(label + ": logits", gpu_test::to_host(one.logits),
                                         gpu_test::to_host(two.logits));
            gpu_test::expect_bitwise_f32(label + ": weights", gpu_test::to_host(one.weights),
                                         gpu_test::to_host(two.weights));
            EXPECT_EQ(gpu_test::to_host(one.experts), gpu_test::to_host(two.experts)) << label << ": experts";
            EXPECT_EQ(gpu_test::to_host(one.counts), gpu_test::to_host(two.counts)) << label << ": counts";
            EXPECT_EQ(gpu_test::to_host(one.offsets), gpu_test::to_host(two.offsets)) << label << ": offsets";
            EXPECT_EQ(gpu_test::to_host(one.sorted), gpu_test::to_host(two.sorted)) << label << ": permutation";
            EXPECT_EQ(gpu_test::to_host(one.slot), gpu_test::to_host(two.slot)) << label << ": inverse map";
            EXPECT_EQ(gpu_test::to_host(one.rows), gpu_test::to_host(two.rows)) << label << ": rows";
            const auto left = gpu_test::to_host(arrivals);
            EXPECT_EQ(std::count(left.begin(), left.end(), 0), int64_t(left.size())) << label << ": arrival counters";
        };
        std::snprintf(what, sizeof what, "router_and_routing %s, %d tokens, %d experts, %d-way split",
                      shape.hash ? "hash" : "score", T, E, splits);
        std::printf("[ router   ] %s\n", what);
        for (int i = 0; i < 3; ++i) {
            Outputs one = outputs();
            cuda::router_and_routing(router(one), routing(one), scratch, nullptr);
            expect_equal(one, "eager launch " + std::to_string(i + 1));
        }
        Outputs one = outputs();
        cuda::Stream stream;
        cudaGraph_t graph = nullptr;
        cudaGraphExec_t exec = nullptr;
        DSV4_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeGlobal));
        cuda::router_and_routing(router(one), routing(one), scratch, stream.get());
        DSV4_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &graph));
        DSV4_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        for (int i = 0; i < 2; ++i) {
            DSV4_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
            stream.synchronize();
            expect_equal(one, "graph replay " + std::to_string(i + 1));
        }
        cudaGraphExecDestroy(exec);
        cudaGraphDestroy(graph);
    }
}

// The split router's plan (host only, no GPU needed): for V4-Flash's and V4-Pro's routers and the fixtures' small
// ones, on devices of 78 to 132 SMs, every decode step of 1 to 32 tokens splits its tiles 1 to 4 ways, each split
// still holding a K block for every warp, and the scratch sized once for 32 tokens (as CudaModel sizes it) covers the
// counters and staging of every such step. V4-Flash at one token on an H100 or H200 splits four ways (128 CTAs).
TEST(RouterScratch, CoversEveryDecodeStep) {
    struct Router {
        int64_t experts, cols;
    };
    for (const Router& r : {Router{256, 4096}, Router{384, 7168}, Router{8, 64}, Router{16, 128}}) {
        for (int sms : {78, 114, 132}) {
            const int64_t ints = cuda::router_scratch_ints(32, r.experts, r.cols, sms);
            const int64_t floats = cuda::router_scratch_floats(32, r.experts, r.cols, sms);
            for (int64_t tokens = 1; tokens <= 32; ++tokens) {
                const auto tiles = cuda::bf16_linear_tiles(tokens, r.experts, r.cols, sms);
                const int splits = cuda::detail::router_splits(tiles, tokens, r.experts, r.cols, sms);
                const std::string what = std::to_string(r.experts) + " x " + std::to_string(r.cols) + ", " +
                                         std::to_string(sms) + " SMs, " + std::to_string(tokens) + " tokens";
                ASSERT_GE(splits, 1) << what;
                ASSERT_LE(splits, 4) << what;
                if (splits == 1) continue;
                ASSERT_EQ(tiles.block_m, 16) << what << ": only 16-row tiles split";
                const int64_t warps_per_tile = tiles.block_n == 32 ? 4 : 8;
                EXPECT_LE(splits * warps_per_tile, ceil_div(r.cols, 128)) << what;
                EXPECT_GE(ints, 1 + cuda::bf16_act_mma::split_tiles(tiles, tokens, r.experts)) << what;
                EXPECT_GE(floats, cuda::bf16_act_mma::split_staged_floats(tiles, tokens, r.experts, r.cols)) << what;
            }
        }
    }
    const auto flash_one = cuda::bf16_linear_tiles(1, 256, 4096, 132);
    EXPECT_EQ(cuda::detail::router_splits(flash_one, 1, 256, 4096, 132), 4);
}

}  // namespace
}  // namespace dsv4
