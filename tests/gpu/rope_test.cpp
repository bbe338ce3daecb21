// RoPE (kernels/cuda/rope) against cpu::apply_rope + bf16 on random bf16 heads, forward and inverse, with the
// plain and the YaRN tables of cpu::make_rope_table and positions up to 2^20. The device evaluates cos/sin in
// double and rounds (error <= 0.5 ulp); glibc's cosf/sinf are within 1 ulp; so the f32 pair results may differ by
// at most 2^-22 (|a| + |b|) before the bf16 cast (two ulps of c and s times the inputs, plus the product and sum
// roundings). The device value must be a bf16 rounding within that; channels outside the rope slice must be
// untouched bit for bit. Both paths: paired (even head_dim and stride) and generic (odd head_dim or stride, rope_dim
// above 1024), which rotates with the same operations. Two tensors in one apply_ropes launch: each bitwise as alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cpu/rope.h"
#include "kernels/cuda/rope/rope.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

TEST(GpuRope, MatchesCpuApplyRopeThenBf16) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    RopeParams yarn{160000.0, YarnParams{16.0, 65536, 32.0, 1.0}};
    RopeParams plain{10000.0, std::nullopt};
    struct Case {
        int64_t heads, head_dim, rope_dim;
        const RopeParams* params;
    };
    for (int64_t tokens : {1, 7, 33})
        for (Case c :
             {Case{64, 512, 64, &yarn}, Case{1, 512, 64, &yarn}, Case{3, 96, 32, &plain}, Case{5, 80, 16, &plain},
              Case{4, 33, 16, &plain}, Case{2, 35, 10, &yarn}, Case{3, 32, 32, &plain}, Case{1, 1100, 1040, &plain}})
            for (bool inverse : {false, true}) {
                const cpu::RopeTable table = cpu::make_rope_table(c.rope_dim, *c.params);
                const int64_t stride = c.heads * c.head_dim + 2 * (tokens % 3) + (c.head_dim % 2 ? tokens % 2 : 0);
                std::vector<float> x = rng.normal_bf16(tokens * stride, 2.0f);
                std::vector<int32_t> positions(static_cast<size_t>(tokens));
                for (int64_t t = 0; t < tokens; ++t)
                    positions[size_t(t)] = t == 0 ? 0 : int32_t(rng.engine()() % (1u << (4 + 2 * (t % 9))));
                auto d_x = to_device(to_bf16(x));
                auto d_freq = to_device(table.inv_freq);
                auto d_pos = to_device(positions);
                const cuda::ApplyRopeParams p{reinterpret_cast<__nv_bfloat16*>(d_x.get()),
                                              d_freq.get(),
                                              d_pos.get(),
                                              tokens,
                                              c.heads,
                                              c.head_dim,
                                              c.rope_dim,
                                              stride,
                                              inverse};
                const bool generic = cuda::rope_path(p) == cuda::RopePath::kGeneric;
                cuda::apply_rope(p, nullptr);
                const std::vector<float> got = from_bf16(to_host(d_x));

                const std::string what = "rope tokens " + std::to_string(tokens) + " heads " + std::to_string(c.heads) +
                                         " head_dim " + std::to_string(c.head_dim) + " rope " +
                                         std::to_string(c.rope_dim) + (inverse ? " inverse" : "") +
                                         (generic ? " (generic)" : " (paired)");
                Bf16Bracket check(what);
                std::vector<float> untouched_got, untouched_want;
                for (int64_t t = 0; t < tokens; ++t) {
                    for (int64_t h = 0; h < c.heads; ++h) {
                        const int64_t base = t * stride + h * c.head_dim, rope0 = base + c.head_dim - c.rope_dim;
                        std::vector<float> ref(x.begin() + rope0, x.begin() + rope0 + c.rope_dim);
                        cpu::apply_rope(ref.data(), table, positions[size_t(t)], inverse);
                        for (int64_t i = 0; i < c.rope_dim; ++i) {
                            const int64_t pair = rope0 + (i & ~int64_t(1));
                            const double tol = 0x1p-22 * (std::fabs(x[size_t(pair)]) + std::fabs(x[size_t(pair + 1)]));
                            check.add(rope0 + i, got[size_t(rope0 + i)], ref[size_t(i)], tol);
                        }
                        for (int64_t i = base; i < rope0; ++i) {
                            untouched_got.push_back(got[size_t(i)]);
                            untouched_want.push_back(x[size_t(i)]);
                        }
                    }
                    for (int64_t i = t * stride + c.heads * c.head_dim; i < (t + 1) * stride; ++i) {
                        untouched_got.push_back(got[size_t(i)]);
                        untouched_want.push_back(x[size_t(i)]);
                    }
                }
                check.expect_ok();
                expect_bitwise_f32(what + " nope channels and padding", untouched_got, untouched_want);
            }
}

// The executor rotates q and the window kv in one apply_ropes launch: each tensor gets the bits apply_rope gives it
// alone, on the paired path (V4's q [T, 64, 512] with kv [T, 1, 512]), the generic path (odd head_dims), mixed paths
// (two launches) and tensors of different token counts.
TEST(GpuRope, TwoTensorsInOneLaunchEqualEachAloneBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    RopeParams yarn{160000.0, YarnParams{16.0, 65536, 32.0, 1.0}};
    const cpu::RopeTable table = cpu::make_rope_table(64, yarn);
    auto d_freq = to_device(table.inv_freq);
    struct Shape {
        int64_t tokens, heads, head_dim;
    };
    for (const auto& [first, second] : {std::pair<Shape, Shape>{{1, 64, 512}, {1, 1, 512}},
                                        {{33, 8, 128}, {33, 1, 128}},
                                        {{7, 3, 97}, {7, 1, 65}},
                                        {{7, 4, 96}, {7, 1, 65}},
                                        {{5, 2, 128}, {9, 1, 128}}})
        for (bool inverse : {false, true}) {
            const int64_t tokens = std::max(first.tokens, second.tokens);
            std::vector<int32_t> positions(static_cast<size_t>(tokens));
            for (auto& p : positions) p = int32_t(rng.engine()() % (1u << 20));
            auto d_pos = to_device(positions);
            const std::vector<uint16_t> a = random_bf16(rng, first.tokens * first.heads * first.head_dim, 2.0f);
            const std::vector<uint16_t> b = random_bf16(rng, second.tokens * second.heads * second.head_dim, 2.0f);
            auto a_alone = to_device(a), b_alone = to_device(b), a_paired = to_device(a), b_paired = to_device(b);
            auto params = [&](cuda::DeviceBuffer<uint16_t>& x, const Shape& s) {
                return cuda::ApplyRopeParams{reinterpret_cast<__nv_bfloat16*>(x.get()),
                                             d_freq.get(),
                                             d_pos.get(),
                                             s.tokens,
                                             s.heads,
                                             s.head_dim,
                                             64,
                                             s.heads * s.head_dim,
                                             inverse};
            };
            cuda::apply_rope(params(a_alone, first), nullptr);
            cuda::apply_rope(params(b_alone, second), nullptr);
            const cuda::ApplyRopeParams pair[] = {params(a_paired, first), params(b_paired, second)};
            cuda::apply_ropes(pair, nullptr);
            const std::string what = "apply_ropes " + std::to_string(first.tokens) + "x" + std::to_string(first.heads) +
                                     "x" + std::to_string(first.head_dim) + " with " + std::to_string(second.tokens) +
                                     "x" + std::to_string(second.heads) + "x" + std::to_string(second.head_dim) +
                                     (inverse ? " inverse" : "");
            expect_bitwise_bf16(what + ": first vs alone", to_host(a_paired), to_host(a_alone));
            expect_bitwise_bf16(what + ": second vs alone", to_host(b_paired), to_host(b_alone));
        }
}
