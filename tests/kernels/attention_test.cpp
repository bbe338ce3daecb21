// sparse_attention_head against a double-precision softmax that includes the sink in the denominator only;
// the bf16-probability mode against the same exact result within bf16 rounding of P; hand cases for the sink
// and an empty key set.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/attention.h"

using namespace dsv4;

namespace {

struct Case {
    int64_t d = 0, count = 0;
    float scale = 0, sink = 0;
    std::vector<float> q;
    std::vector<std::vector<float>> keys;
    std::vector<const float*> ptrs;
};

Case random_case(test::Rng& rng, int64_t d, int64_t count) {
    Case c;
    c.d = d;
    c.count = count;
    c.scale = 1.0f / std::sqrt(float(d));
    c.sink = rng.normal(1.0f);
    c.q = rng.normal_bf16(d, 1.5f);
    for (int64_t j = 0; j < count; ++j) c.keys.push_back(rng.normal_bf16(d));
    for (auto& k : c.keys) c.ptrs.push_back(k.data());
    return c;
}

// Exact output in double, plus the error budget of the f32 path:
// logits: a length-d f32 dot is within d u sum|q k| (then * scale); an error dl in the logits (and in M) moves
// each probability by <= 2 dl relative; exp, the running sums of count terms and the final division add
// (count + 4) u relative. The output error is then <= that relative error times sum_j p_j |v_j| / Z, and with
// bf16 probabilities 2^-9 more (bf16 unit roundoff) of the same magnitude.
struct Exact {
    std::vector<double> out, magnitude;
    double relative_error = 0;
};

Exact exact_attention(const Case& c) {
    const double u = test::kF32Unit;
    std::vector<double> logits;
    double max_logit = -INFINITY, max_dl = 0.0;
    for (const auto& k : c.keys) {
        double dot = 0.0, abs_dot = 0.0;
        for (int64_t i = 0; i < c.d; ++i) {
            dot += double(c.q[size_t(i)]) * k[size_t(i)];
            abs_dot += std::fabs(double(c.q[size_t(i)]) * k[size_t(i)]);
        }
        logits.push_back(dot * c.scale);
        max_logit = std::max(max_logit, logits.back());
        max_dl = std::max(max_dl, (double(c.d) * u * abs_dot + u * std::fabs(dot)) * c.scale);
    }
    Exact e;
    e.out.assign(size_t(c.d), 0.0);
    e.magnitude.assign(size_t(c.d), 0.0);
    double z = std::exp(double(c.sink) - max_logit);
    for (double l : logits) z += std::exp(l - max_logit);
    for (int64_t j = 0; j < c.count; ++j) {
        double p = std::exp(logits[size_t(j)] - max_logit) / z;
        for (int64_t i = 0; i < c.d; ++i) {
            e.out[size_t(i)] += p * c.keys[size_t(j)][size_t(i)];
            e.magnitude[size_t(i)] += p * std::fabs(c.keys[size_t(j)][size_t(i)]);
        }
    }
    e.relative_error = 2.0 * max_dl + double(c.count + 4) * u;
    return e;
}

}  // namespace

TEST(SparseAttention, MatchesDoubleSoftmaxWithSink) {
    test::Rng rng;
    for (auto [d, count] : {std::pair<int64_t, int64_t>{64, 1}, {64, 7}, {512, 130}, {512, 640}}) {
        Case c = random_case(rng, d, count);
        std::vector<float> out(size_t(d), std::nanf(""));
        cpu::sparse_attention_head(c.q.data(), c.ptrs.data(), count, d, c.scale, c.sink, false, out.data());
        Exact e = exact_attention(c);
        test::Worst worst("sparse attention f32 d=" + std::to_string(d) + " keys=" + std::to_string(count));
        for (int64_t i = 0; i < d; ++i)
            worst.add(i, out[size_t(i)], e.out[size_t(i)], e.relative_error * e.magnitude[size_t(i)] + 1e-30);
        worst.expect_ok();
    }
}

TEST(SparseAttention, Bf16ProbabilitiesStayWithinBf16Rounding) {
    test::Rng rng;
    Case c = random_case(rng, 512, 200);
    std::vector<float> rounded(512), full(512);
    cpu::sparse_attention_head(c.q.data(), c.ptrs.data(), c.count, c.d, c.scale, c.sink, true, rounded.data());
    cpu::sparse_attention_head(c.q.data(), c.ptrs.data(), c.count, c.d, c.scale, c.sink, false, full.data());
    Exact e = exact_attention(c);
    test::Worst worst("sparse attention bf16 P d=512 keys=200");
    bool differs = false;
    for (int64_t i = 0; i < 512; ++i) {
        double tol = (e.relative_error + test::kBf16Unit) * e.magnitude[size_t(i)] + 1e-30;
        worst.add(i, rounded[size_t(i)], e.out[size_t(i)], tol);
        differs |= rounded[size_t(i)] != full[size_t(i)];
    }
    worst.expect_ok();
    EXPECT_TRUE(differs) << "rounding P to bf16 changed nothing";
}

TEST(SparseAttention, SinkIsOnlyInTheDenominator) {
    // One key orthogonal to q: l = 0 = M. Sink 0 gives o = v / (1 + 1); sink -inf gives o = v;
    // sink ln(3) gives o = v / 4.
    std::vector<float> q = {1.0f, 0.0f, 0.0f, 0.0f}, v = {0.0f, 2.0f, -4.0f, 8.0f}, out(4);
    const float* keys[] = {v.data()};
    cpu::sparse_attention_head(q.data(), keys, 1, 4, 0.5f, 0.0f, false, out.data());
    EXPECT_EQ(out, (std::vector<float>{0.0f, 1.0f, -2.0f, 4.0f}));
    cpu::sparse_attention_head(q.data(), keys, 1, 4, 0.5f, -INFINITY, true, out.data());
    EXPECT_EQ(out, v);
    cpu::sparse_attention_head(q.data(), keys, 1, 4, 0.5f, std::log(3.0f), false, out.data());
    for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[size_t(i)], v[size_t(i)] / 4.0, 4 * test::kF32Unit * 2.0);
}

TEST(SparseAttention, RoundsProbabilitiesButNotTheDenominator) {
    // Keys k0 = (1, 0), k1 = (0, 1), q = (0, -x): l0 = 0 = M, l1 = -x * scale. p1 = exp(-0.3) = 0.7408...
    // is not a bf16 value (between 189/256 and 190/256, nearer the latter); bf16 mode uses 0.7421875 in P.V
    // but the exact f32 p1 in Z.
    std::vector<float> q = {0.0f, -0.3f}, k0 = {1.0f, 0.0f}, k1 = {0.0f, 1.0f}, out(2);
    const float* keys[] = {k0.data(), k1.data()};
    cpu::sparse_attention_head(q.data(), keys, 2, 2, 1.0f, -INFINITY, true, out.data());
    const float p1 = std::exp(-0.3f);
    ASSERT_NE(round_bf16(p1), p1);
    EXPECT_EQ(round_bf16(p1), 0.7421875f);
    const double z = 1.0 + double(p1);
    EXPECT_NEAR(out[0], 1.0 / z, 2 * test::kF32Unit);
    EXPECT_NEAR(out[1], 0.7421875 / z, 2 * test::kF32Unit);
}

TEST(SparseAttention, NoKeysGivesZeros) {
    std::vector<float> q = {1.0f, 2.0f}, out = {std::nanf(""), std::nanf("")};
    cpu::sparse_attention_head(q.data(), nullptr, 0, 2, 1.0f, 0.5f, true, out.data());
    EXPECT_EQ(out, (std::vector<float>{0.0f, 0.0f}));
}
