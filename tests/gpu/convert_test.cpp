// f32_to_bf16 (kernels/cuda/convert) bitwise against the host's dsv4::f32_to_bf16: strided rows (a column range of
// wider f32 rows into a narrower bf16 buffer), with and without the scale that the indexer head weights take
// (bf16(bf16(x) * s): two roundings, as the CPU's Precision::linear then `*=` and the bf16 activation), on random
// values plus ties, subnormals, infinities and (unscaled: a device multiply returns the canonical NaN where the host
// keeps the payload) NaN.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <limits>
#include <vector>

#include "gpu_test_util.h"
#include "kernels/cuda/convert/convert.h"

namespace dsv4::gpu_test {
namespace {

TEST(GpuConvert, F32ToBf16StridedAndScaledMatchesHostBitwise) {
    DSV4_REQUIRE_GPU();
    Rng rng;
    const float specials[] = {0.0f,
                              -0.0f,
                              1.00390625f,  // a bf16 tie (1 + 2^-8): rounds to even
                              1.01171875f,  // 1 + 3 * 2^-8: the other tie
                              std::numeric_limits<float>::denorm_min(),
                              -1e-39f,
                              std::numeric_limits<float>::max(),
                              std::numeric_limits<float>::infinity(),
                              -std::numeric_limits<float>::infinity()};
    const float weight_scale = float(std::pow(128.0, -0.5) * std::pow(64.0, -0.5));  // V4's head-weight scale
    for (const auto& [rows, cols, x_stride, y_stride] :
         {std::array<int64_t, 4>{1, 64, 2624, 64}, {7, 8, 13, 8}, {33, 100, 260, 101}, {3, 5, 5, 5}})
        for (float scale : {1.0f, weight_scale, 3.0f}) {
            std::vector<float> x(static_cast<size_t>(rows * x_stride));
            for (size_t i = 0; i < x.size(); ++i)
                x[i] =
                    i % 7 == 3 ? specials[(i / 7) % std::size(specials)] : rng.normal(std::ldexp(1.0f, int(i % 9) - 4));
            if (scale == 1.0f) x[0] = std::numeric_limits<float>::quiet_NaN();
            std::vector<uint16_t> want(static_cast<size_t>(rows * y_stride), 0xFFFF);
            for (int64_t r = 0; r < rows; ++r)
                for (int64_t c = 0; c < cols; ++c) {
                    const uint16_t v = f32_to_bf16(x[size_t(r * x_stride + c)]);
                    want[size_t(r * y_stride + c)] = scale == 1.0f ? v : f32_to_bf16(bf16_to_f32(v) * scale);
                }
            auto d_x = to_device(x);
            auto d_y = poisoned<uint16_t>(want.size());
            cuda::f32_to_bf16(
                {d_x.get(), reinterpret_cast<__nv_bfloat16*>(d_y.get()), rows, cols, x_stride, y_stride, scale},
                nullptr);
            expect_bitwise_bf16("f32_to_bf16 " + std::to_string(rows) + " x " + std::to_string(cols) + " strides " +
                                    std::to_string(x_stride) + " / " + std::to_string(y_stride) + " scale " +
                                    std::to_string(scale),
                                to_host(d_y), want);
        }
}

}  // namespace
}  // namespace dsv4::gpu_test
