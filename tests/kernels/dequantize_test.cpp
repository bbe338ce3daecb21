// dequantize_row against hand-encoded bytes: every weight format, FP4 nibble order, scale indexing at block
// boundaries, and FP8 shapes that are not multiples of 128 (ceil scale grid).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/cpu/dequantize.h"

using namespace dsv4;

namespace {

std::vector<float> row_of(const QuantizedMatrix& w, int64_t row) {
    std::vector<float> out(static_cast<size_t>(w.cols), std::nanf(""));
    cpu::dequantize_row(w, row, out.data());
    return out;
}

template <typename T>
std::vector<uint8_t> bytes_of(const std::vector<T>& v) {
    std::vector<uint8_t> b(v.size() * sizeof(T));
    std::memcpy(b.data(), v.data(), b.size());
    return b;
}

}  // namespace

TEST(Dequantize, DenseFormats) {
    std::vector<float> f32 = {1.5f, -2.0f, 0.0f, 3.25f, 7.0f, -0.125f};  // [2, 3]
    auto f32_bytes = bytes_of(f32);
    QuantizedMatrix w{.name = "f32", .format = WeightFormat::kF32, .rows = 2, .cols = 3, .data = f32_bytes.data()};
    EXPECT_EQ(row_of(w, 1), (std::vector<float>{3.25f, 7.0f, -0.125f}));

    // bf16: 0x3FC0 = 1.5, 0xC000 = -2, 0x4050 = 3.25; f16: 0x3E00 = 1.5, 0xC000 = -2, 0x4280 = 3.25.
    std::vector<uint16_t> bf16 = {0x0000, 0x0000, 0x0000, 0x3FC0, 0xC000, 0x4050};
    auto bf16_bytes = bytes_of(bf16);
    QuantizedMatrix wb{.name = "bf16", .format = WeightFormat::kBF16, .rows = 2, .cols = 3, .data = bf16_bytes.data()};
    EXPECT_EQ(row_of(wb, 1), (std::vector<float>{1.5f, -2.0f, 3.25f}));

    std::vector<uint16_t> f16 = {0x3E00, 0xC000, 0x4280};
    auto f16_bytes = bytes_of(f16);
    QuantizedMatrix wh{.name = "f16", .format = WeightFormat::kF16, .rows = 1, .cols = 3, .data = f16_bytes.data()};
    EXPECT_EQ(row_of(wh, 0), (std::vector<float>{1.5f, -2.0f, 3.25f}));
}

// A [130, 131] FP8 weight has a 2 x 2 scale grid; row 127/128 and column 127/128 straddle its blocks.
class Fp8Block : public ::testing::Test {
  protected:
    static constexpr int64_t kRows = 130, kCols = 131;
    void SetUp() override {
        data.assign(size_t(kRows * kCols), 0x38);  // e4m3 0x38 = 1.0 everywhere
        at(0, 0) = 0x3C;                           // 1.5 (e = 7, m = 4)
        at(127, 127) = 0xC0;                       // -2 (sign, e = 8, m = 0)
        at(128, 127) = 0x01;                       // 2^-9, smallest subnormal
        at(127, 128) = 0x7E;                       // 448
        at(129, 130) = 0xBC;                       // -1.5
    }
    uint8_t& at(int64_t r, int64_t c) { return data[size_t(r * kCols + c)]; }
    QuantizedMatrix matrix(const uint8_t* scale, DType scale_dtype) {
        return QuantizedMatrix{.name = "fp8",
                               .format = WeightFormat::kFp8Block,
                               .rows = kRows,
                               .cols = kCols,
                               .data = data.data(),
                               .scale = scale,
                               .scale_dtype = scale_dtype,
                               .scale_cols = 2,
                               .block_rows = 128,
                               .block_cols = 128};
    }
    std::vector<uint8_t> data;
};

TEST_F(Fp8Block, E8M0ScalesAtBlockBoundaries) {
    // scale[0][0] = 2^0, scale[0][1] = 2^-3, scale[1][0] = 2^4, scale[1][1] = 2^-1
    std::vector<uint8_t> scale = {127, 124, 131, 126};
    QuantizedMatrix w = matrix(scale.data(), DType::kF8E8M0);
    auto r0 = row_of(w, 0), r127 = row_of(w, 127), r128 = row_of(w, 128), r129 = row_of(w, 129);
    EXPECT_EQ(r0[0], 1.5f);
    EXPECT_EQ(r0[127], 1.0f);
    EXPECT_EQ(r0[128], 0.125f);
    EXPECT_EQ(r0[130], 0.125f);
    EXPECT_EQ(r127[127], -2.0f);
    EXPECT_EQ(r127[128], 448.0f * 0.125f);
    EXPECT_EQ(r128[127], std::ldexp(1.0f, -9 + 4));
    EXPECT_EQ(r128[128], 0.5f);
    EXPECT_EQ(r129[0], 16.0f);
    EXPECT_EQ(r129[130], -0.75f);
}

TEST_F(Fp8Block, F32ScalesOfBaseCheckpoints) {
    std::vector<float> scale = {0.5f, 3.0f, -0.25f, 1e-3f};
    auto scale_bytes = bytes_of(scale);
    QuantizedMatrix w = matrix(scale_bytes.data(), DType::kF32);
    auto r127 = row_of(w, 127), r129 = row_of(w, 129);
    EXPECT_EQ(r127[127], -1.0f);
    EXPECT_EQ(r127[128], 448.0f * 3.0f);
    EXPECT_EQ(r129[127], -0.25f);
    EXPECT_EQ(r129[130], -1.5f * 1e-3f);
}

TEST(Dequantize, Fp4LowNibbleIsEvenColumn) {
    // [2, 64]: 32 bytes per row, one E8M0 scale per 32 columns.
    std::vector<uint8_t> data(64, 0x00);
    data[0] = 0x72;                                     // col 0 = nibble 2 (1.0), col 1 = nibble 7 (6.0)
    data[15] = 0x9C;                                    // col 30 = nibble 0xC (-2), col 31 = nibble 9 (-0.5)
    data[16] = 0x3D;                                    // col 32 = nibble 0xD (-3), col 33 = nibble 3 (1.5)
    data[32 + 31] = 0xF1;                               // row 1: col 62 = nibble 1 (0.5), col 63 = nibble 0xF (-6)
    std::vector<uint8_t> scale = {127, 129, 126, 120};  // row 0: 1, 4; row 1: 0.5, 2^-7
    QuantizedMatrix w{.name = "fp4",
                      .format = WeightFormat::kFp4Mx,
                      .rows = 2,
                      .cols = 64,
                      .data = data.data(),
                      .scale = scale.data(),
                      .scale_dtype = DType::kF8E8M0,
                      .scale_cols = 2,
                      .block_rows = 1,
                      .block_cols = 32};
    auto r0 = row_of(w, 0), r1 = row_of(w, 1);
    EXPECT_EQ(r0[0], 1.0f);
    EXPECT_EQ(r0[1], 6.0f);
    EXPECT_EQ(r0[2], 0.0f);
    EXPECT_EQ(r0[30], -2.0f);
    EXPECT_EQ(r0[31], -0.5f);
    EXPECT_EQ(r0[32], -12.0f);
    EXPECT_EQ(r0[33], 6.0f);
    EXPECT_EQ(r1[0], 0.0f);
    EXPECT_EQ(r1[62], std::ldexp(0.5f, -7));
    EXPECT_EQ(r1[63], std::ldexp(-6.0f, -7));
}

TEST(Dequantize, Nvfp4TwoLevelScales) {
    // [1, 32]: 16 bytes, two E4M3 scales of 16 columns, global scale 0.25.
    std::vector<uint8_t> data(16, 0x00);
    data[0] = 0x57;                             // col 0 = 6.0, col 1 = 3.0
    data[7] = 0xA4;                             // col 14 = 2.0, col 15 = -1.0
    data[8] = 0x1E;                             // col 16 = -4.0, col 17 = 0.5
    std::vector<uint8_t> scale = {0x40, 0x34};  // e4m3: 2.0, 0.75
    QuantizedMatrix w{.name = "nvfp4",
                      .format = WeightFormat::kNvfp4,
                      .rows = 1,
                      .cols = 32,
                      .data = data.data(),
                      .scale = scale.data(),
                      .scale_dtype = DType::kF8E4M3,
                      .scale_cols = 2,
                      .block_rows = 1,
                      .block_cols = 16,
                      .global_scale = 0.25f};
    auto r = row_of(w, 0);
    EXPECT_EQ(r[0], 3.0f);
    EXPECT_EQ(r[1], 1.5f);
    EXPECT_EQ(r[14], 1.0f);
    EXPECT_EQ(r[15], -0.5f);
    EXPECT_EQ(r[16], -0.75f);
    EXPECT_EQ(r[17], 0.09375f);
    EXPECT_EQ(r[31], 0.0f);
}
