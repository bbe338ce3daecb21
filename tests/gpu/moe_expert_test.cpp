// moe_combine (kernels/cuda/moe_expert) bitwise against the CPU's accumulation (src/model/moe.cpp moe_forward:
// routed outputs added in f32 in ascending expert order, then the shared expert's, then bf16), on odd sizes, with
// dropped assignments (expert -1 or slot -1) and tokens whose experts arrive unsorted; output poisoned first. swiglu
// reading gate and up as halves of stacked rows, bitwise against dense gate and up; its quantized copy of the output
// bitwise against act_quant_fp8 of it.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "gpu_test_util.h"
#include "kernels/cuda/moe_expert/moe_expert.h"
#include "kernels/cuda/quant/quant.h"
#include "moe_combine_inputs.h"

namespace dsv4::gpu_test {
namespace {

void combine_case(Rng& rng, int64_t tokens, int64_t dim, int32_t k, int64_t experts) {
    const MoeCombineInputs in = random_moe_combine_inputs(rng, tokens, dim, k, experts);
    std::vector<float> want(static_cast<size_t>(tokens * dim));
    for (int64_t t = 0; t < tokens; ++t)
        for (int64_t c = 0; c < dim; ++c) {
            float acc = 0.0f;
            for (int64_t e = 0; e < experts; ++e)
                for (int32_t j = 0; j < k; ++j) {
                    const size_t a = size_t(t * k + j);
                    if (in.chosen[a] == e && in.slot[a] >= 0) acc += in.routed[size_t(in.slot[a] * dim + c)];
                }
            want[size_t(t * dim + c)] = acc + in.shared[size_t(t * dim + c)];
        }
    auto d_out = poisoned<uint16_t>(size_t(tokens * dim));
    cuda::moe_combine(in.params(d_out), nullptr);
    expect_bitwise_bf16(
        "moe_combine tokens " + std::to_string(tokens) + " dim " + std::to_string(dim) + " k " + std::to_string(k),
        to_host(d_out), to_bf16(want));
}

TEST(GpuMoeExpert, CombineMatchesCpuBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    combine_case(rng, 1, 4096, 6, 256);  // V4-Flash decode
    combine_case(rng, 7, 1000 + 3, 6, 64);
    combine_case(rng, 33, 300, 2, 8);
    combine_case(rng, 3, 7, 16, 16);
}

// The shared expert's stacked gate/up GEMM leaves [rows, 2 inter], gate | up per row: swiglu reading the halves with
// the row stride 2 inter gives the bits of the same values stored as two dense [rows, inter] buffers.
TEST(GpuMoeExpert, SwigluWithARowStrideEqualsDenseBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (const auto& [rows, inter] : {std::pair<int64_t, int64_t>{1, 2048}, {7, 128}, {33, 300}, {3, 17}})
        for (float limit : {0.0f, 7.0f}) {
            const std::vector<float> stacked = rng.normal_bf16(rows * 2 * inter, 4.0f);
            std::vector<float> gate, up;
            for (int64_t r = 0; r < rows; ++r) {
                gate.insert(gate.end(), stacked.begin() + r * 2 * inter, stacked.begin() + r * 2 * inter + inter);
                up.insert(up.end(), stacked.begin() + r * 2 * inter + inter, stacked.begin() + (r + 1) * 2 * inter);
            }
            auto d_stacked = to_device(to_bf16(stacked));
            auto d_gate = to_device(to_bf16(gate));
            auto d_up = to_device(to_bf16(up));
            auto from_stacked = poisoned<uint16_t>(size_t(rows * inter));
            auto from_dense = poisoned<uint16_t>(size_t(rows * inter));
            const auto* y = reinterpret_cast<const __nv_bfloat16*>(d_stacked.get());
            cuda::SwigluParams p;
            p.rows = rows;
            p.inter = inter;
            p.limit = limit;
            p.gate = y;
            p.up = y + inter;
            p.gate_up_stride = 2 * inter;
            p.out = reinterpret_cast<__nv_bfloat16*>(from_stacked.get());
            cuda::swiglu(p, nullptr);
            p.gate = reinterpret_cast<const __nv_bfloat16*>(d_gate.get());
            p.up = reinterpret_cast<const __nv_bfloat16*>(d_up.get());
            p.gate_up_stride = 0;
            p.out = reinterpret_cast<__nv_bfloat16*>(from_dense.get());
            cuda::swiglu(p, nullptr);
            expect_bitwise_bf16("swiglu rows " + std::to_string(rows) + " inter " + std::to_string(inter) + " limit " +
                                    std::to_string(limit) + ": stacked gate | up vs dense",
                                to_host(from_stacked), to_host(from_dense));
        }
}

// swiglu's output feeds w2 (and the shared expert's s2) through act_quant; swiglu writes it quantized as well
// (SwigluParams::q): codes and scales equal act_quant_fp8 of the bf16 output, bit for bit, with routing weights, for
// inter sizes of one chunk (V4's 2048), several chunks with a partial 128-block (3000) and a small one; skipped rows
// (outside the row bounds) are left as they were, and their zero_rows rows set to +0.
TEST(GpuMoeExpert, SwigluQuantizedOutputEqualsActQuantOfItBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (const auto& [rows, inter] : {std::pair<int64_t, int64_t>{6, 2048}, {5, 3000}, {9, 320}}) {
        const int64_t nb = (inter + 127) / 128;
        auto d_gate = to_device(to_bf16(rng.normal_bf16(rows * inter, 4.0f)));
        auto d_up = to_device(to_bf16(rng.normal_bf16(rows * inter, 4.0f)));
        std::vector<float> weights(static_cast<size_t>(rows));
        for (float& w : weights) w = rng.uniform(0.01f, 2.0f);
        std::vector<int32_t> assignment(static_cast<size_t>(rows));
        std::iota(assignment.begin(), assignment.end(), 0);
        std::shuffle(assignment.begin(), assignment.end(), rng.engine());
        const std::vector<int32_t> bounds = {1, int32_t(rows - 1)};  // rows 0 and rows - 1 are skipped
        auto d_weights = to_device(weights);
        auto d_assignment = to_device(assignment);
        auto d_bounds = to_device(bounds);
        auto out = poisoned<uint16_t>(size_t(rows * inter));
        auto q = poisoned<uint8_t>(size_t(rows * inter));
        auto scales = poisoned<float>(size_t(rows * nb));
        const int64_t zero_cols = 96;  // the skipped rows' zeros (expert parallelism's routed outputs)
        auto zeros = poisoned<uint16_t>(size_t(rows * zero_cols));
        cuda::SwigluParams p;
        p.gate = reinterpret_cast<const __nv_bfloat16*>(d_gate.get());
        p.up = reinterpret_cast<const __nv_bfloat16*>(d_up.get());
        p.out = reinterpret_cast<__nv_bfloat16*>(out.get());
        p.routing_weights = d_weights.get();
        p.sorted_assignment = d_assignment.get();
        p.row_first = d_bounds.get();
        p.row_count = d_bounds.get() + 1;
        p.rows = rows;
        p.inter = inter;
        p.limit = 7.0f;
        p.q = q.get();
        p.q_scales = scales.get();
        p.zero_rows = reinterpret_cast<__nv_bfloat16*>(zeros.get());
        p.zero_cols = zero_cols;
        cuda::swiglu(p, nullptr);
        auto want_q = poisoned<uint8_t>(size_t(rows * inter));
        auto want_scales = poisoned<float>(size_t(rows * nb));
        cuda::act_quant_fp8({p.out, want_q.get(), want_scales.get(), rows, inter, inter}, nullptr);
        // Compare the computed rows; the skipped ones must still hold the poison.
        const std::vector<uint8_t> got_q = to_host(q), expect_q = to_host(want_q);
        const std::vector<float> got_s = to_host(scales), expect_s = to_host(want_scales);
        const std::string what = "swiglu rows " + std::to_string(rows) + " inter " + std::to_string(inter);
        expect_bitwise_bytes(what + " e4m3 codes of rows 1 .. rows - 2",
                             std::vector<uint8_t>(got_q.begin() + inter, got_q.end() - inter),
                             std::vector<uint8_t>(expect_q.begin() + inter, expect_q.end() - inter));
        expect_bitwise_f32(what + " scales of rows 1 .. rows - 2",
                           std::vector<float>(got_s.begin() + nb, got_s.end() - nb),
                           std::vector<float>(expect_s.begin() + nb, expect_s.end() - nb));
        EXPECT_TRUE(std::all_of(got_q.begin(), got_q.begin() + inter, [](uint8_t b) { return b == 0xFF; }) &&
                    std::all_of(got_q.end() - inter, got_q.end(), [](uint8_t b) { return b == 0xFF; }))
            << what << ": a skipped row was written";
        // zero_rows: +0 in the skipped rows (0 and rows - 1), untouched (the poison) in the computed ones.
        const std::vector<uint16_t> got_zeros = to_host(zeros);
        for (int64_t r = 0; r < rows; ++r) {
            const bool skipped = r == 0 || r == rows - 1;
            const auto first = got_zeros.begin() + r * zero_cols;
            EXPECT_TRUE(std::all_of(first, first + zero_cols,
                                    [&](uint16_t v) { return v == (skipped ? uint16_t(0) : uint16_t(0xFFFF)); }))
                << what << ": zero_rows row " << r << (skipped ? " is not +0" : " was written");
        }
    }
}

}  // namespace
}  // namespace dsv4::gpu_test
