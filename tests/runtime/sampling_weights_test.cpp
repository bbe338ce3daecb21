// exp_nonpositive against std::exp in double over [-87, 0] (a geometric sweep, every float of two ranges), its exact
// values (1 at 0, 0 at and below -87 and at -inf), and sampling_weights' rows: each weight equals exp_nonpositive of
// its scaled logit (vector lanes too), the largest logit weighs exactly 1, +inf logits take all the weight; every
// vector instruction set the machine runs gives the scalar function's bits on V4-sized rows.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
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

TEST(SamplingWeights, EveryVectorBuildGivesTheScalarBits) {
    // Rows of V4's vocabulary (129,280: not a multiple of any vector width's unroll) with specials mixed in, at
    // temperatures from sharp to flat; each build this CPU runs (core/vector_isa.h), lane for lane, against
    // exp_nonpositive compiled here. A build that fused a multiply and an add, or vectorized a select differently,
    // would differ in the last bits of some weights.
    const float inf = std::numeric_limits<float>::infinity();
    const int64_t vocab = 129280;
    std::mt19937_64 rng(11);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& x : logits) {
        x = normal(rng);
        switch (rng() % 64) {
            case 0:
                x = -inf;
                break;
            case 1:
                x = 0.0f;
                break;
            case 2:
                x = -0.0f;
                break;
            case 3:
                x = std::numeric_limits<float>::denorm_min();
                break;
            case 4:
                x = -1e30f;
                break;
            default:
                break;
        }
    }
    logits[77] = 40.0f;  // the maximum, once
    const std::vector<VectorIsa> isas = runnable_vector_isas();
    std::printf("vector builds run here:");
    for (VectorIsa isa : isas) std::printf(" %s", vector_isa_name(isa));
    std::printf("\n");
    std::vector<float> w(static_cast<size_t>(vocab));
    for (float temperature : {0.05f, 0.6f, 1.0f, 1.7f, 40.0f})
        for (VectorIsa isa : isas) {
            std::fill(w.begin(), w.end(), -1.0f);
            sampling_weights(logits.data(), vocab, 40.0f, temperature, w.data(), isa);
            for (int64_t i = 0; i < vocab; ++i) {
                const float want =
                    logits[size_t(i)] == 40.0f ? 1.0f : exp_nonpositive((logits[size_t(i)] - 40.0f) / temperature);
                ASSERT_EQ(std::bit_cast<uint32_t>(w[size_t(i)]), std::bit_cast<uint32_t>(want))
                    << vector_isa_name(isa) << ", temperature " << temperature << ", id " << i;
            }
        }
}

TEST(SamplingWeights, SumOfWeightsInItsOrderAndNearTheExactSum) {
    // sum_of_weights' order (eight interleaved partial sums, then those and the tail in order), computed here, bit for
    // bit by every vector build this CPU runs; and within its error bound of the sum in long double: each weight goes
    // through at most n / 8 + 8 double additions, each off by at most 2^-53 of the partial sum (weights from 2^-40
    // to 1).
    std::mt19937_64 rng(3);
    std::uniform_real_distribution<float> exponent(-40.0f, 0.0f);
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(8), int64_t(9), int64_t(1001), int64_t(129280)}) {
        std::vector<float> w(static_cast<size_t>(n));
        for (float& x : w) x = std::exp2(exponent(rng));
        double lane[8] = {};
        int64_t i = 0;
        for (; i + 8 <= n; i += 8)
            for (int k = 0; k < 8; ++k) lane[k] += double(w[size_t(i + k)]);
        double want = 0.0;
        for (double l : lane) want += l;
        for (; i < n; ++i) want += double(w[size_t(i)]);
        const double got = sum_of_weights(w.data(), n);
        EXPECT_EQ(std::bit_cast<uint64_t>(got), std::bit_cast<uint64_t>(want)) << n;
        for (const VectorIsa isa : runnable_vector_isas())
            EXPECT_EQ(std::bit_cast<uint64_t>(sum_of_weights(w.data(), n, isa)), std::bit_cast<uint64_t>(want))
                << n << ", " << vector_isa_name(isa);
        long double exact = 0.0L;
        for (float x : w) exact += x;
        EXPECT_LE(std::abs(double(exact) - got), double(n / 8 + 8) * 0x1p-53 * double(exact)) << n;
    }
}
