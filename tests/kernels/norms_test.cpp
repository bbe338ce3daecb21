// rms_norm (weighted and unweighted) against a double-precision RMSNorm on random inputs.
// After the double sum the f32 chain is six roundings of at most u = 2^-24 relative each: mean, + eps (these
// two enter through the square root at half weight), sqrt, reciprocal, x * rsqrt, weight *: <= 5 u relative.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/norms.h"

using namespace dsv4;

namespace {

void check(int64_t n, bool weighted, float eps) {
    test::Rng rng;
    std::vector<float> x = rng.normal_bf16(n, 3.0f), w(static_cast<size_t>(n)), y(static_cast<size_t>(n));
    for (float& v : w) v = rng.uniform(0.5f, 1.5f);
    cpu::rms_norm(x.data(), weighted ? w.data() : nullptr, n, eps, y.data());
    double sum_sq = 0.0;
    for (float v : x) sum_sq += double(v) * double(v);
    double rsqrt = 1.0 / std::sqrt(sum_sq / double(n) + double(eps));
    test::Worst worst(std::string("rms_norm n=") + std::to_string(n) + (weighted ? " weighted" : " unweighted"));
    for (int64_t i = 0; i < n; ++i) {
        double want = double(x[size_t(i)]) * rsqrt * (weighted ? double(w[size_t(i)]) : 1.0);
        worst.add(i, y[size_t(i)], want, 5.0 * test::kF32Unit * std::fabs(want) + 1e-38);
    }
    worst.expect_ok();
}

}  // namespace

TEST(RmsNorm, WeightedMatchesDouble) {
    check(4096, true, 1e-6f);
    check(1023, true, 1e-6f);
}

TEST(RmsNorm, UnweightedMatchesDouble) {
    check(512, false, 1e-6f);
    check(37, false, 1e-6f);
}

TEST(RmsNorm, HandWorked) {
    // x = (3, 4): mean(x^2) = 12.5; eps 0 gives y = x / sqrt(12.5), weight (2, 0.5) scales it.
    std::vector<float> x = {3.0f, 4.0f}, w = {2.0f, 0.5f}, y(2);
    cpu::rms_norm(x.data(), w.data(), 2, 0.0f, y.data());
    EXPECT_NEAR(y[0], 2.0 * 3.0 / std::sqrt(12.5), 5.0 * test::kF32Unit * 1.7);
    EXPECT_NEAR(y[1], 0.5 * 4.0 / std::sqrt(12.5), 5.0 * test::kF32Unit * 0.6);
    // eps matters for small inputs: all-zero input gives zeros, not NaN.
    std::vector<float> z = {0.0f, 0.0f};
    cpu::rms_norm(z.data(), nullptr, 2, 1e-6f, y.data());
    EXPECT_EQ(y[0], 0.0f);
    EXPECT_EQ(y[1], 0.0f);
}
