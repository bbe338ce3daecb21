// The routed experts' tiled layout (kernels/cuda/expert_layout): the repack kernel puts every byte where
// expert_chunk_offset says, and every tensor-core expert kernel reading tiled weights gives the bits it gives on the
// same weights row by row: the single-slot passes (bulk copies at 64-row tiles, the pair launch, the SwiGLU input;
// 32- and 16-row tiles by 16-byte copies), the passes for any slots, the 8-slot passes of small batches, the warpgroup
// kernel's wide passes, the general path, MXFP4 and NVFP4, checkpoint-like and every scale code.
#include <gtest/gtest.h>

#include "core/error.h"
#include "gemm_test_common.h"
#include "kernels/cuda/expert_layout/expert_layout.h"
#include "kernels/cuda/moe_gemm/moe_gemm.h"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "moe_test_common.h"

namespace dsv4::gpu_test {
namespace {

using cuda::detail::MoeMmaVariant;

TEST(ExpertLayout, RepackPutsEveryChunkWhereItsOffsetSays) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t k_half : {64, 1024, 2048}) {  // K 128, 2048 (w2 of V4-Flash), 4096 (w1 / w3)
        const int64_t rows = 3 * cuda::kExpertTileRows;
        std::vector<uint8_t> bytes(size_t(rows * k_half));
        for (uint8_t& b : bytes) b = uint8_t(rng.engine()());
        auto d = to_device(bytes);
        cuda::repack_expert_tiles(d.get(), rows, k_half, nullptr);
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint8_t> tiled = to_host(d);
        int64_t wrong = 0;
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < k_half; ++c) {
                const int64_t at = cuda::expert_chunk_offset(true, r, k_half, c / 64, int(c % 64 / 16)) + c % 16;
                wrong += tiled[size_t(at)] != bytes[size_t(r * k_half + c)];
            }
        EXPECT_EQ(wrong, 0) << "k_half " << k_half;
    }
    EXPECT_THROW(cuda::repack_expert_tiles(nullptr, 96, 64, nullptr), dsv4::Error);  // not whole tiles
}

// The kernels' addresses from a group's first row (expert_tile_place_offset, expert_tile_chunk_at) are
// expert_chunk_offset's: every place of every row of two groups, blocks of V4's K and a small one. No GPU needed.
TEST(ExpertLayout, GroupPlacesAreTheChunkOffsets) {
    for (int64_t k_half : {64, 2048})
        for (int64_t group_row : {int64_t(0), int64_t(64), int64_t(2048 * 255 + 64 * 7)})
            for (int64_t block = 0; block < k_half / 64; ++block)
                for (int rr = 0; rr < cuda::kExpertTileRows; ++rr)
                    for (int place = 0; place < 4; ++place) {
                        const int chunk = cuda::expert_tile_chunk_at(rr, place);
                        ASSERT_EQ(cuda::expert_tile_place_offset(group_row, k_half, block, rr, place),
                                  cuda::expert_chunk_offset(true, group_row + rr, k_half, block, chunk))
                            << "group " << group_row << " block " << block << " row " << rr << " place " << place;
                        ASSERT_EQ(cuda::expert_tile_chunk_at(rr, chunk), place);  // its own inverse
                    }
}

TEST(ExpertLayout, LaunchesRefuseWhatTheLayoutCannotServe) {
    cuda::MoeGemmParams p;
    alignas(16) static uint8_t bytes[16];
    alignas(16) static float f[4];
    static int32_t offsets[2] = {0, 0};
    p.a = p.w = p.w_scale = bytes;
    p.a_scale = f;
    p.expert_offsets = offsets;
    p.y = reinterpret_cast<__nv_bfloat16*>(bytes);
    p.experts = 1, p.n = 64, p.k = 128;
    p.tiled = true;
    EXPECT_EQ(cuda::moe_gemm_can_implement(p), "");
    p.path = cuda::MoeGemmPath::kCudaCore;
    EXPECT_NE(cuda::moe_gemm_can_implement(p).find("row by row"), std::string::npos);
    p.path = cuda::MoeGemmPath::kMma;
    p.n = 72;
    EXPECT_NE(cuda::moe_gemm_can_implement(p).find("N % 64"), std::string::npos);
    p.n = 64, p.k = 96;
    EXPECT_NE(cuda::moe_gemm_can_implement(p).find("K % 128"), std::string::npos);
}

// Stacked experts in row order and a tiled copy of them on the device.
struct TwoLayouts {
    cuda::DeviceBuffer<uint8_t> rows, tiled, scale;
    cuda::DeviceBuffer<float> global;
};
TwoLayouts two_layouts(Rng& rng, int64_t experts, int64_t n, int64_t k, bool nvfp4, bool every_scale) {
    const StackedExperts stacked = stacked_experts(rng, experts, n, k, nvfp4, every_scale ? kEvery : kCkpt);
    TwoLayouts t{to_device(stacked.data), to_device(stacked.data), to_device(stacked.scale), to_device(stacked.global)};
    cuda::repack_expert_tiles(t.tiled.get(), experts * n, k / 2, nullptr);
    return t;
}

// A launch over `w` in one of its layouts (no activations yet), outputs into y.
cuda::MoeGemmParams layout_params(const TwoLayouts& w, bool tiled, bool nvfp4, const int32_t* offsets, int64_t experts,
                                  int64_t n, int64_t k, uint16_t* y) {
    cuda::MoeGemmParams p;
    p.expert_offsets = offsets;
    p.format = nvfp4 ? cuda::ExpertFormat::kNvfp4 : cuda::ExpertFormat::kMxfp4;
    p.w = tiled ? w.tiled.get() : w.rows.get();
    p.w_scale = w.scale.get();
    p.w_global = nvfp4 ? w.global.get() : nullptr;
    p.y = reinterpret_cast<__nv_bfloat16*>(y);
    p.experts = experts, p.n = n, p.k = k;
    p.tiled = tiled;
    return p;
}

struct Case {
    int64_t tokens, experts, topk, n, k;
    int slot_bound;          // the host's bound on an expert's slots (1: single-slot passes where they apply)
    MoeMmaVariant variant;   // kChosen: through cuda::moe_gemm (the launcher's kernel, its checks)
    int row_groups;          // the warp-MMA kernel's row tile (0: the launcher's)
    bool pair, every_scale;  // a second matrix in the launch (w3 beside w1); every scale code
    const char* what;
};

void expect_layouts_agree(Rng& rng, const Case& c, bool nvfp4) {
    const Routing routing = route(rng, c.tokens, c.experts, c.topk, false);
    const int64_t slots = int64_t(routing.row_index.size());
    const TwoLayouts w1 = two_layouts(rng, c.experts, c.n, c.k, nvfp4, c.every_scale);
    const TwoLayouts w3 = two_layouts(rng, c.experts, c.n, c.k, nvfp4, c.every_scale);
    std::vector<float> x = random_activations(rng, c.tokens, c.k);
    if (c.every_scale)
        for (size_t i = 0; i < x.size(); ++i) x[i] = round_bf16(x[i] * std::ldexp(1.0f, int(i % 61) - 30));
    DeviceFp8Act a = quantize_on_device(x, c.tokens, c.k);
    auto od = to_device(routing.offsets);
    auto rd = to_device(routing.row_index);
    std::vector<uint16_t> out[2][2];  // [tiled][matrix]
    for (bool tiled : {false, true}) {
        auto y1 = poisoned<uint16_t>(size_t(slots * c.n), tiled ? 0x7F : 0xFF);
        auto y3 = poisoned<uint16_t>(size_t(slots * c.n), tiled ? 0x7F : 0xFF);
        cuda::MoeGemmParams p = layout_params(w1, tiled, nvfp4, od.get(), c.experts, c.n, c.k, y1.get());
        p.a = a.q.get();
        p.a_scale = a.scale.get();
        p.row_index = rd.get();
        if (c.pair) {
            const cuda::MoeGemmParams q = layout_params(w3, tiled, nvfp4, od.get(), c.experts, c.n, c.k, y3.get());
            p.second = {q.w, q.w_scale, q.w_global, q.y};
        }
        p.max_slots_per_expert = std::max(routing.max_slots, c.slot_bound);
        if (c.variant == MoeMmaVariant::kChosen && c.row_groups == 0)
            cuda::moe_gemm(p, nullptr);
        else
            DSV4_CUDA_CHECK(cuda::detail::launch_moe_mma(p, c.variant, nullptr, c.row_groups));
        DSV4_CUDA_CHECK(cudaDeviceSynchronize());
        out[tiled][0] = to_host(y1);
        if (c.pair) out[tiled][1] = to_host(y3);
    }
    const std::string what = std::string(c.what) + (nvfp4 ? " nvfp4" : " mxfp4") + " tiled vs rows";
    expect_bitwise_bf16(what, out[1][0], out[0][0]);
    if (c.pair) expect_bitwise_bf16(what + " (second matrix)", out[1][1], out[0][1]);
}

TEST(ExpertLayout, EveryKernelReadsTiledWeightsBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    constexpr MoeMmaVariant kChosen = MoeMmaVariant::kChosen, kWarp = MoeMmaVariant::kWarpMma,
                            kAll = MoeMmaVariant::kAllSlots, kGeneral = MoeMmaVariant::kGeneral;
    const Case cases[] = {
        {1, 12, 6, 2048, 4096, 1, kChosen, 0, true, false, "w1 | w3 at batch 1 (single-slot, bulk)"},
        {1, 12, 6, 4096, 2048, 1, kChosen, 0, false, false, "w2 at batch 1 (single-slot, bulk)"},
        {1, 8, 3, 2048, 4096, 1, kWarp, 2, true, false, "batch 1, 32-row tiles"},
        {1, 8, 3, 4096, 2048, 1, kWarp, 1, false, false, "batch 1, 16-row tiles"},
        {1, 12, 6, 2048, 4096, 1, kAll, 0, true, false, "batch 1 through the passes for any slots"},
        {4, 64, 6, 1024, 2048, 4, kChosen, 0, true, false, "batch 4 (8-slot passes)"},
        {40, 16, 6, 256, 1024, 40, kChosen, 0, false, false, "40 tokens (warpgroup passes of 16)"},
        {300, 8, 3, 128, 512, 300, kChosen, 0, true, false, "300 tokens (warpgroup passes of 64)"},
        {40, 16, 6, 256, 1024, 40, kGeneral, 0, false, false, "40 tokens, general stages"},
        {1, 32, 4, 320, 2048, 1, kChosen, 0, false, true, "batch 1, every scale code"},
        {5, 32, 4, 320, 2048, 5, kChosen, 0, true, true, "5 tokens, every scale code"},
    };
    for (bool nvfp4 : {false, true})
        for (const Case& c : cases) expect_layouts_agree(rng, c, nvfp4);
}

// w2 computing its input from W1 x and W3 x (the batch-1 step's single-slot passes with bulk copies) reads tiled
// weights with the bits of row order.
TEST(ExpertLayout, SwigluInputPassesReadTiledWeightsBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (bool nvfp4 : {false, true}) {
        const int64_t experts = 12, topk = 6, n = 4096, k = 2048;
        const Routing routing = route(rng, 1, experts, topk, false);
        const int64_t slots = int64_t(routing.row_index.size());
        const TwoLayouts w2 = two_layouts(rng, experts, n, k, nvfp4, false);
        std::vector<float> gate(size_t(slots * k)), up(gate.size());
        for (size_t i = 0; i < gate.size(); ++i) {
            gate[i] = round_bf16(rng.uniform(-14.0f, 14.0f));
            up[i] = round_bf16(rng.uniform(-14.0f, 14.0f));
        }
        auto gd = to_device(to_bf16(gate));
        auto ud = to_device(to_bf16(up));
        auto od = to_device(routing.offsets);
        std::vector<uint16_t> out[2];
        for (bool tiled : {false, true}) {
            auto y = poisoned<uint16_t>(size_t(slots * n), tiled ? 0x7F : 0xFF);
            cuda::MoeGemmParams p = layout_params(w2, tiled, nvfp4, od.get(), experts, n, k, y.get());
            p.max_slots_per_expert = 1;
            p.swiglu = {reinterpret_cast<const __nv_bfloat16*>(gd.get()),
                        reinterpret_cast<const __nv_bfloat16*>(ud.get()),
                        0,
                        nullptr,
                        nullptr,
                        10.0f};
            ASSERT_TRUE(cuda::moe_gemm_computes_swiglu(p));
            cuda::moe_gemm(p, nullptr);
            DSV4_CUDA_CHECK(cudaDeviceSynchronize());
            out[tiled] = to_host(y);
        }
        expect_bitwise_bf16(
            std::string("w2 with its SwiGLU input at batch 1 ") + (nvfp4 ? "nvfp4" : "mxfp4") + " tiled vs rows",
            out[1], out[0]);
    }
}

}  // namespace
}  // namespace dsv4::gpu_test
