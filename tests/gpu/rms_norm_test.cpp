// RMSNorm kernels (kernels/cuda/rms_norm) against the CPU reference on random bf16 rows with odd sizes:
// the weighted (and unweighted) row norm as cpu::rms_norm + bf16 cast, checked as a bf16 rounding of the CPU's f32
// value within 8 f32 unit roundoffs (both accumulate the mean of squares in double, so only a one-ulp flip of
// the f32 mean can separate them); and the model-numerics per-head q norm, bitwise against
// Precision::head_rms_norm (head_dims up to 1024 staged in shared memory, larger ones on the generic kernel). A
// column range of wider rows normalizes to the bits of the same rows stored densely, and two norms in one rms_norms
// launch to the bits of each alone. A norm's quantized copy of its output equals act_quant_fp8 of it, bitwise.
#include <gtest/gtest.h>

#include <vector>

#include "core/thread_pool.h"
#include "gpu_test_util.h"
#include "kernels/cpu/norms.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "model/numerics.h"

using namespace dsv4;
using namespace dsv4::gpu_test;

namespace {
constexpr float kEps = 1e-6f;
}

TEST(GpuRmsNorm, RowsMatchCpuRmsNormThenBf16) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    struct Case {
        int64_t dim;
        bool weighted, in_place;
    };
    for (int64_t rows : {1, 7, 33})
        for (Case c : {Case{64, true, false}, Case{320, true, true}, Case{1536, false, false}, Case{4099, true, false},
                       Case{7168, true, false}, Case{9001, true, false} /* past the register path */}) {
            const int64_t stride = c.dim + 8 * (rows % 2);
            std::vector<float> x(static_cast<size_t>(rows * stride));
            for (int64_t r = 0; r < rows; ++r) {
                const float scale = std::ldexp(1.0f, int(rng.uniform(-8.0f, 8.0f)));
                for (int64_t i = 0; i < stride; ++i) x[size_t(r * stride + i)] = round_bf16(rng.normal(scale));
            }
            std::vector<float> weight(static_cast<size_t>(c.dim));
            for (float& w : weight) w = 1.0f + rng.normal(0.2f);
            auto d_x = to_device(to_bf16(x));
            auto d_w = to_device(weight);
            auto d_y = poisoned<uint16_t>(size_t(rows * stride));
            __nv_bfloat16* y = reinterpret_cast<__nv_bfloat16*>(c.in_place ? d_x.get() : d_y.get());
            cuda::rms_norm({reinterpret_cast<const __nv_bfloat16*>(d_x.get()), c.weighted ? d_w.get() : nullptr, y,
                            rows, c.dim, stride, stride, kEps},
                           nullptr);
            const std::vector<float> got = from_bf16(to_host(c.in_place ? d_x : d_y));

            Bf16Bracket check("rms_norm rows " + std::to_string(rows) + " dim " + std::to_string(c.dim) +
                              (c.weighted ? " weighted" : " unweighted") + (c.in_place ? " in place" : ""));
            std::vector<float> ref(static_cast<size_t>(c.dim));
            for (int64_t r = 0; r < rows; ++r) {
                cpu::rms_norm(x.data() + r * stride, c.weighted ? weight.data() : nullptr, c.dim, kEps, ref.data());
                for (int64_t i = 0; i < c.dim; ++i)
                    check.add(r * c.dim + i, got[size_t(r * stride + i)], ref[size_t(i)],
                              8 * kF32Unit * std::fabs(ref[size_t(i)]));
            }
            check.expect_ok();
        }
}

// The executor's norms before FP8 GEMMs also write their output quantized (RmsNormParams::q): the codes and scales
// must be act_quant_fp8's of the bf16 output, bit for bit, on the register path (dims up to 8192, a partial last
// 128-block included), the looping path (which runs act_quant after the norm) and in a paired rms_norms launch.
TEST(GpuRmsNorm, QuantizedOutputEqualsActQuantOfItBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t rows : {1, 7})
        for (int64_t dim : {int64_t(64), int64_t(320), int64_t(1024), int64_t(4096), int64_t(7168), int64_t(9001)}) {
            const int64_t stride = dim + 8 * (rows % 2), nb = (dim + 127) / 128;
            std::vector<float> x(static_cast<size_t>(rows * stride));
            for (int64_t r = 0; r < rows; ++r) {
                const float scale = std::ldexp(1.0f, int(rng.uniform(-20.0f, 20.0f)));
                for (int64_t i = 0; i < stride; ++i) x[size_t(r * stride + i)] = round_bf16(rng.normal(scale));
            }
            std::vector<float> weight(static_cast<size_t>(dim));
            for (float& w : weight) w = rng.normal(1.0f);
            auto d_x = to_device(to_bf16(x));
            auto d_w = to_device(weight);
            auto d_y = poisoned<uint16_t>(size_t(rows * stride));
            auto d_q = poisoned<uint8_t>(size_t(rows * dim));
            auto d_s = poisoned<float>(size_t(rows * nb));
            auto want_q = poisoned<uint8_t>(size_t(rows * dim));
            auto want_s = poisoned<float>(size_t(rows * nb));
            const auto* x_in = reinterpret_cast<const __nv_bfloat16*>(d_x.get());
            auto* y = reinterpret_cast<__nv_bfloat16*>(d_y.get());
            // Paired with an unquantized norm of the same rows into a scratch output (the executor's q_norm | kv_norm).
            auto d_other = poisoned<uint16_t>(size_t(rows * stride));
            const cuda::RmsNormParams norms[] = {
                {x_in, d_w.get(), y, rows, dim, stride, stride, kEps, d_q.get(), d_s.get()},
                {x_in, nullptr, reinterpret_cast<__nv_bfloat16*>(d_other.get()), rows, dim, stride, stride, kEps}};
            cuda::rms_norms(norms, nullptr);
            cuda::act_quant_fp8({y, want_q.get(), want_s.get(), rows, dim, stride}, nullptr);
            const std::string what = "rms_norm rows " + std::to_string(rows) + " dim " + std::to_string(dim);
            expect_bitwise_bytes(what + " e4m3 codes", to_host(d_q), to_host(want_q));
            expect_bitwise_f32(what + " scales", to_host(d_s), to_host(want_s));
        }
}

// The executor normalizes the two column ranges of a stacked projection ([T, q + d]: wq_a x | wkv x) into dense
// buffers, both in one rms_norms launch: a row's bits do not depend on the strides it is read and written with, nor
// on sharing the launch with another norm.
TEST(GpuRmsNorm, ColumnRangesOfWiderRowsInOneLaunchEqualDenseRowsBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    for (int64_t rows : {1, 7, 33})
        for (const auto& [left, dim] : {std::pair<int64_t, int64_t>{1024, 512}, {128, 128}, {64, 96}, {40, 33}}) {
            const int64_t stride = left + dim;
            std::vector<float> wide(static_cast<size_t>(rows * stride)), dense(static_cast<size_t>(rows * dim));
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t i = 0; i < stride; ++i) {
                    const float v = round_bf16(rng.normal(std::ldexp(1.0f, int(r % 9) - 4)));
                    wide[size_t(r * stride + i)] = v;
                    if (i >= left) dense[size_t(r * dim + i - left)] = v;
                }
            std::vector<float> weight(static_cast<size_t>(dim));
            for (float& w : weight) w = 1.0f + rng.normal(0.2f);
            auto d_wide = to_device(to_bf16(wide));
            auto d_dense = to_device(to_bf16(dense));
            auto d_w = to_device(weight);
            auto from_wide = poisoned<uint16_t>(size_t(rows * dim));
            auto from_dense = poisoned<uint16_t>(size_t(rows * dim));
            auto left_alone = poisoned<uint16_t>(size_t(rows * left));
            auto left_paired = poisoned<uint16_t>(size_t(rows * left));
            const auto* wide_x = reinterpret_cast<const __nv_bfloat16*>(d_wide.get());
            // The left columns normalized unweighted, alone and in one launch with the right columns.
            cuda::rms_norm(
                {wide_x, nullptr, reinterpret_cast<__nv_bfloat16*>(left_alone.get()), rows, left, stride, left, kEps},
                nullptr);
            const cuda::RmsNormParams pair[] = {
                {wide_x, nullptr, reinterpret_cast<__nv_bfloat16*>(left_paired.get()), rows, left, stride, left, kEps},
                {wide_x + left, d_w.get(), reinterpret_cast<__nv_bfloat16*>(from_wide.get()), rows, dim, stride, dim,
                 kEps}};
            cuda::rms_norms(pair, nullptr);
            cuda::rms_norm({reinterpret_cast<const __nv_bfloat16*>(d_dense.get()), d_w.get(),
                            reinterpret_cast<__nv_bfloat16*>(from_dense.get()), rows, dim, dim, dim, kEps},
                           nullptr);
            const std::string what = "columns [" + std::to_string(left) + ", " + std::to_string(stride) + ") of " +
                                     std::to_string(rows) + " rows";
            expect_bitwise_bf16("rms_norms " + what + " vs dense rows", to_host(from_wide), to_host(from_dense));
            expect_bitwise_bf16("rms_norms left columns vs rms_norm alone", to_host(left_paired), to_host(left_alone));
        }
}

TEST(GpuRmsNorm, HeadNormMatchesModelNumericsBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    ThreadPool pool(1);
    const Precision precision(Numerics::kModel, pool);
    struct Case {
        int64_t heads, head_dim;
    };
    for (int64_t rows : {1, 7, 33})
        for (Case c : {Case{64, 512}, Case{3, 96}, Case{5, 80}, Case{2, 1024}, Case{4, 33}, Case{3, 1500}}) {
            const int64_t stride = c.heads * c.head_dim + 16;
            std::vector<float> q(static_cast<size_t>(rows * stride));
            for (int64_t h = 0; h < rows * c.heads; ++h) {
                const float scale = std::ldexp(1.0f, int(rng.uniform(-6.0f, 6.0f)));
                for (int64_t i = 0; i < c.head_dim; ++i)
                    q[size_t((h / c.heads) * stride + (h % c.heads) * c.head_dim + i)] = round_bf16(rng.normal(scale));
            }
            std::vector<float> want = q;
            for (int64_t h = 0; h < rows * c.heads; ++h)
                precision.head_rms_norm(want.data() + (h / c.heads) * stride + (h % c.heads) * c.head_dim, c.head_dim,
                                        kEps);
            auto d_q = to_device(to_bf16(q));
            cuda::head_rms_norm({reinterpret_cast<__nv_bfloat16*>(d_q.get()), rows, c.heads, c.head_dim, stride, kEps},
                                nullptr);
            expect_bitwise_bf16("head_rms_norm rows " + std::to_string(rows) + " heads " + std::to_string(c.heads) +
                                    " head_dim " + std::to_string(c.head_dim),
                                to_host(d_q), to_bf16(want));
        }
}
