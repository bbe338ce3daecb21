// linear against a naive double-precision product on random inputs of odd sizes. The f32 dot of length K has
// |error| <= K u sum_k |x_k w_k| (u = 2^-24, sequential summation), the tolerance used per element.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "core/number_formats.h"
#include "kernel_test_util.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/linear.h"

using namespace dsv4;

namespace {

// y = x W^T with W decoded row by row (dequantize_row is tested on its own), accumulated in double.
void check_against_double(const QuantizedMatrix& w, const std::vector<float>& x, int64_t tokens,
                          const std::vector<float>& y, const char* what) {
    test::Worst worst(what);
    std::vector<float> row(static_cast<size_t>(w.cols));
    for (int64_t n = 0; n < w.rows; ++n) {
        cpu::dequantize_row(w, n, row.data());
        for (int64_t t = 0; t < tokens; ++t) {
            double exact = 0.0, magnitude = 0.0;
            for (int64_t k = 0; k < w.cols; ++k) {
                double p = double(x[size_t(t * w.cols + k)]) * double(row[size_t(k)]);
                exact += p;
                magnitude += std::fabs(p);
            }
            double tolerance = double(w.cols) * test::kF32Unit * magnitude + 1e-30;
            worst.add(t * w.rows + n, y[size_t(t * w.rows + n)], exact, tolerance);
        }
    }
    worst.expect_ok();
}

}  // namespace

TEST(Linear, F32WeightOddSizes) {
    test::Rng rng;
    const int64_t tokens = 3, rows = 37, cols = 203;
    std::vector<float> wv(size_t(rows * cols)), x(size_t(tokens * cols));
    for (float& v : wv) v = rng.normal();
    for (float& v : x) v = rng.normal();
    QuantizedMatrix w{.name = "w",
                      .format = WeightFormat::kF32,
                      .rows = rows,
                      .cols = cols,
                      .data = reinterpret_cast<const uint8_t*>(wv.data())};
    ThreadPool pool(3);
    std::vector<float> y(size_t(tokens * rows), std::nanf(""));
    cpu::linear(pool, x.data(), tokens, w, y.data());
    check_against_double(w, x, tokens, y, "linear f32 [3x203] x [37x203]^T");

    // The result does not depend on the thread count.
    ThreadPool single(1);
    std::vector<float> y1(y.size(), std::nanf(""));
    cpu::linear(single, x.data(), tokens, w, y1.data());
    EXPECT_EQ(0, std::memcmp(y.data(), y1.data(), y.size() * sizeof(float)));
}

TEST(Linear, Fp8BlockWeightOddSizes) {
    test::Rng rng;
    const int64_t tokens = 5, rows = 131, cols = 257;  // scale grid 2 x 3
    std::vector<uint8_t> data(size_t(rows * cols));
    for (uint8_t& b : data) {
        b = uint8_t(rng.engine()() & 0xFF);
        if ((b & 0x7F) == 0x7F) b ^= 0x01;  // no NaN codes
    }
    std::vector<uint8_t> scale = {120, 121, 122, 119, 118, 123};
    std::vector<float> x = rng.normal_bf16(tokens * cols);
    QuantizedMatrix w{.name = "w_fp8",
                      .format = WeightFormat::kFp8Block,
                      .rows = rows,
                      .cols = cols,
                      .data = data.data(),
                      .scale = scale.data(),
                      .scale_dtype = DType::kF8E8M0,
                      .scale_cols = 3,
                      .block_rows = 128,
                      .block_cols = 128};
    ThreadPool pool(4);
    std::vector<float> y(size_t(tokens * rows), std::nanf(""));
    cpu::linear(pool, x.data(), tokens, w, y.data());
    check_against_double(w, x, tokens, y, "linear fp8 [5x257] x [131x257]^T");
}

TEST(Linear, Fp4WeightSingleToken) {
    test::Rng rng;
    const int64_t tokens = 1, rows = 9, cols = 96;
    std::vector<uint8_t> data(size_t(rows * cols / 2)), scale(size_t(rows * cols / 32));
    for (uint8_t& b : data) b = uint8_t(rng.engine()() & 0xFF);
    for (uint8_t& s : scale) s = uint8_t(120 + rng.engine()() % 10);
    std::vector<float> x = rng.normal_bf16(tokens * cols);
    QuantizedMatrix w{.name = "w_fp4",
                      .format = WeightFormat::kFp4Mx,
                      .rows = rows,
                      .cols = cols,
                      .data = data.data(),
                      .scale = scale.data(),
                      .scale_dtype = DType::kF8E8M0,
                      .scale_cols = 3,
                      .block_rows = 1,
                      .block_cols = 32};
    ThreadPool pool(2);
    std::vector<float> y(size_t(tokens * rows), std::nanf(""));
    cpu::linear(pool, x.data(), tokens, w, y.data());
    check_against_double(w, x, tokens, y, "linear fp4 [1x96] x [9x96]^T");
}
