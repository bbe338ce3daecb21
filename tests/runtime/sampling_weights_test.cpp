// exp_nonpositive against std::exp in double over [-87, 0] (a geometric sweep, every float of two ranges), its exact
// values (1 at 0, 0 at and below -87 and at -inf), and sampling_weights' rows: each weight equals exp_nonpositive of
// its scaled logit (vector lanes too), the largest logit weighs exactly 1, +inf logits take all the weight.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/sampling_weights.h"

using namespace dsv4;

namespace {

double relative_error(float x) {
    const double want = std::exp(double(x));
    return std::abs(double(exp_nonpositive(x)) - want) / want;
}

}  // namespace

TEST(SamplingWeights, ExpWithinFourTenthsOfAMillionth) {
    double worst = 0.0;
    float worst_at = 0.0f;
    auto check = [&](float x) {
        const double e = relative_error(x);
        if (e > worst) worst = e, worst_at = x;
    };
    for (float x = -1e-30f; x > -86.9f; x *= 1.000003f) check(x);                  // a geometric sweep
    for (float x = -0.5f; x > -0.75f; x = std::nextafter(x, -1.0f)) check(x);      // every float here
    for (float x = -86.0f; x > -86.99f; x = std::nextafter(x, -100.0f)) check(x);  // and near the cut-off
    EXPECT_LT(worst, 4e-7) << "at " << worst_at;
}

TEST(SamplingWeights, ExactValues) {
    EXPECT_EQ(exp_nonpositive(0.0f), 1.0f);
    EXPECT_EQ(exp_nonpositive(-0.0f), 1.0f);
    EXPECT_EQ(exp_nonpositive(-87.5f), 0.0f);
    EXPECT_EQ(exp_nonpositive(-1000.0f), 0.0f);
    EXPECT_EQ(exp_nonpositive(-std::numeric_limits<float>::infinity()), 0.0f);
    EXPECT_GT(exp_nonpositive(-86.9f), 0.0f);
}

TEST(SamplingWeights, RowsOfLogits) {
    const float inf = std::numeric_limits<float>::infinity();
    std::vector<float> logits = {1.5f, -2.0f, 3.25f, 3.25f, -inf, 0.0f, 2.0f};
    std::vector<float> w(logits.size());
    sampling_weights(logits.data(), int64_t(logits.size()), 3.25f, 0.7f, w.data());
    for (size_t i = 0; i < logits.size(); ++i) EXPECT_EQ(w[i], exp_nonpositive((logits[i] - 3.25f) / 0.7f)) << i;
    EXPECT_EQ(w[2], 1.0f);
    EXPECT_EQ(w[3], 1.0f);
    EXPECT_EQ(w[4], 0.0f);
    // A vectorized row: its odd length and every lane equal to the scalar function.
    std::vector<float> long_row(1001), long_w(1001);
    for (size_t i = 0; i < long_row.size(); ++i) long_row[i] = float(int(i % 97) - 60) * 0.37f;
    sampling_weights(long_row.data(), 1001, 35.52f, 1.3f, long_w.data());
    for (size_t i = 0; i < long_row.size(); ++i)
        ASSERT_EQ(long_w[i], exp_nonpositive((long_row[i] - 35.52f) / 1.3f)) << i;
    // +inf logits share all the weight.
    std::vector<float> with_inf = {1.0f, inf, 5.0f, inf};
    sampling_weights(with_inf.data(), 4, inf, 1.0f, w.data());
    EXPECT_EQ(w[0], 0.0f);
    EXPECT_EQ(w[1], 1.0f);
    EXPECT_EQ(w[2], 0.0f);
    EXPECT_EQ(w[3], 1.0f);
}
