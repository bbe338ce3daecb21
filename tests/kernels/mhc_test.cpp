// mHC (HC_pre with Sinkhorn, HC_post, HC_head) against an independent double-precision implementation of
// spec §5 written here with plain loops, on random inputs with n_hc 2 and 4; plus Sinkhorn's doubly-stochastic
// output and the direction of the HC_post contraction on a hand-made matrix.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernel_test_util.h"
#include "kernels/cpu/mhc.h"

using namespace dsv4;
using cpu::HcMix;
using cpu::HcParams;

namespace {

struct DoubleMix {
    std::vector<double> pre, post, comb;
};

double sigmoid(double z) {
    return 1.0 / (1.0 + std::exp(-z));
}

// Spec §5 steps 1-7 in double.
std::vector<double> mixes(const std::vector<float>& X, const std::vector<float>& fn, int64_t rows, double eps) {
    const size_t width = X.size();
    double sum_sq = 0.0;
    for (float v : X) sum_sq += double(v) * v;
    double rho = 1.0 / std::sqrt(sum_sq / double(width) + eps);
    std::vector<double> mix(static_cast<size_t>(rows));
    for (int64_t m = 0; m < rows; ++m) {
        double dot = 0.0;
        for (size_t i = 0; i < width; ++i) dot += double(fn[size_t(m) * width + i]) * X[i];
        mix[size_t(m)] = dot * rho;
    }
    return mix;
}

void sinkhorn_double(std::vector<double>& c, int64_t n, int64_t iters, double eps) {
    auto at = [&](int64_t j, int64_t k) -> double& { return c[size_t(j * n + k)]; };
    for (int64_t j = 0; j < n; ++j) {
        double mx = -INFINITY, sum = 0.0;
        for (int64_t k = 0; k < n; ++k) mx = std::max(mx, at(j, k));
        for (int64_t k = 0; k < n; ++k) sum += std::exp(at(j, k) - mx);
        for (int64_t k = 0; k < n; ++k) at(j, k) = std::exp(at(j, k) - mx) / sum + eps;
    }
    auto columns = [&] {
        for (int64_t k = 0; k < n; ++k) {
            double sum = 0.0;
            for (int64_t j = 0; j < n; ++j) sum += at(j, k);
            for (int64_t j = 0; j < n; ++j) at(j, k) /= sum + eps;
        }
    };
    columns();
    for (int64_t it = 1; it < iters; ++it) {
        for (int64_t j = 0; j < n; ++j) {
            double sum = 0.0;
            for (int64_t k = 0; k < n; ++k) sum += at(j, k);
            for (int64_t k = 0; k < n; ++k) at(j, k) /= sum + eps;
        }
        columns();
    }
}

DoubleMix hc_pre_double(const std::vector<float>& X, const std::vector<float>& fn, const std::vector<float>& base,
                        const std::vector<float>& scale, const HcParams& p) {
    const int64_t n = p.n_hc;
    std::vector<double> mix = mixes(X, fn, (2 + n) * n, p.norm_eps);
    DoubleMix out;
    for (int64_t j = 0; j < n; ++j) {
        out.pre.push_back(sigmoid(mix[size_t(j)] * scale[0] + base[size_t(j)]) + p.hc_eps);
        out.post.push_back(2.0 * sigmoid(mix[size_t(n + j)] * scale[1] + base[size_t(n + j)]));
    }
    for (int64_t jk = 0; jk < n * n; ++jk)
        out.comb.push_back(mix[size_t(2 * n + jk)] * scale[2] + base[size_t(2 * n + jk)]);
    sinkhorn_double(out.comb, n, p.sinkhorn_iters, p.hc_eps);
    return out;
}

struct Inputs {
    HcParams p;
    std::vector<float> X, fn, base, scale;
};

Inputs random_inputs(test::Rng& rng, int64_t n_hc, int64_t dim, int64_t mix_rows, int64_t n_scales) {
    Inputs in;
    in.p = HcParams{.n_hc = n_hc, .dim = dim, .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-6f};
    in.X = rng.normal_bf16(n_hc * dim);
    for (int64_t i = 0; i < mix_rows * n_hc * dim; ++i)
        in.fn.push_back(rng.normal(1.0f / std::sqrt(float(n_hc * dim))));
    for (int64_t i = 0; i < mix_rows; ++i) in.base.push_back(rng.normal(0.5f));
    for (int64_t i = 0; i < n_scales; ++i) in.scale.push_back(rng.uniform(0.5f, 1.5f));
    return in;
}

// Tolerances (u = 2^-24). The mix logits are within a few u of exact (double sums, rsqrt chain <= 3 u, one
// product), with |logit * scale + base| of order 5 for these inputs, so pre and post (sigmoid slope <= 1/4, 2 for
// post, plus exp, add and divide) are within 16 u absolute. Sinkhorn: softmax and 39 normalizations of n_hc
// entries, each rounding <= (n_hc + 2) u relative, and the projection does not amplify them: (n_hc + 2) * 40 u
// relative per entry, on entries <= 1. The collapse and HC_post sum n_hc f32 products of f32 weights with
// bf16 streams: (error of the weights + (n_hc + 1) u) times sum_j |w_j X_j|.
void check_hc_pre(int64_t n_hc, int64_t dim) {
    test::Rng rng;
    Inputs in = random_inputs(rng, n_hc, dim, (2 + n_hc) * n_hc, 3);
    std::vector<float> x(static_cast<size_t>(dim));
    HcMix mix;
    cpu::hc_pre(in.X.data(), in.fn.data(), in.base.data(), in.scale.data(), in.p, x.data(), mix);
    DoubleMix want = hc_pre_double(in.X, in.fn, in.base, in.scale, in.p);

    const double u = test::kF32Unit, comb_tol = double(n_hc + 2) * 40.0 * u;
    std::string shape = " n_hc=" + std::to_string(n_hc) + " D=" + std::to_string(dim);
    test::Worst pre("hc_pre pre" + shape), post("hc_pre post" + shape), comb("hc_pre comb" + shape),
        out("hc_pre x" + shape);
    for (int64_t j = 0; j < n_hc; ++j) {
        pre.add(j, mix.pre[size_t(j)], want.pre[size_t(j)], 16.0 * u);
        post.add(j, mix.post[size_t(j)], want.post[size_t(j)], 16.0 * u);
    }
    for (int64_t jk = 0; jk < n_hc * n_hc; ++jk) comb.add(jk, mix.comb[size_t(jk)], want.comb[size_t(jk)], comb_tol);
    for (int64_t d = 0; d < dim; ++d) {
        double exact = 0.0, magnitude = 0.0;
        for (int64_t j = 0; j < n_hc; ++j) {
            exact += want.pre[size_t(j)] * in.X[size_t(j * dim + d)];
            magnitude += std::fabs(want.pre[size_t(j)] * in.X[size_t(j * dim + d)]);
        }
        out.add(d, x[size_t(d)], exact, (16.0 + double(n_hc + 1)) * u * magnitude + 1e-30);
    }
    pre.expect_ok();
    post.expect_ok();
    comb.expect_ok();
    out.expect_ok();
}

}  // namespace

TEST(Mhc, HcPreMatchesDouble) {
    check_hc_pre(4, 64);
    check_hc_pre(4, 37);
    check_hc_pre(2, 129);
}

TEST(Mhc, SinkhornIsDoublyStochasticAfter20Iterations) {
    // After the final column normalization every column sums to S / (S + eps) = 1 - O(eps). Rows converge at a
    // rate set by the spread of the logits: for logits N(0, 0.5^2) the worst row-sum error after 20 iterations
    // in 1e5 numpy trials was 7e-6 (n 2) and 1e-6 (n 4). With spread >= 1, 20 iterations can leave rows 1e-2
    // off: that is the official algorithm (a fixed iteration count, no convergence test), reproduced as is.
    test::Rng rng;
    for (int64_t n : {2, 4}) {
        std::vector<float> c(static_cast<size_t>(n * n));
        for (float& v : c) v = rng.normal(0.5f);
        cpu::sinkhorn(c.data(), n, 20, 1e-6f);
        test::Worst rows("sinkhorn row sums n=" + std::to_string(n)),
            cols("sinkhorn column sums n=" + std::to_string(n));
        for (int64_t j = 0; j < n; ++j) {
            double row = 0.0, col = 0.0;
            for (int64_t k = 0; k < n; ++k) {
                EXPECT_GT(c[size_t(j * n + k)], 0.0f);
                row += c[size_t(j * n + k)];
                col += c[size_t(k * n + j)];
            }
            rows.add(j, row, 1.0, 1e-4);
            cols.add(j, col, 1.0, 4e-6);
        }
        rows.expect_ok();
        cols.expect_ok();
    }
}

TEST(Mhc, HcPostContractsOverTheFirstIndex) {
    // n_hc 2, C = [[0.9, 0.1], [0.3, 0.7]] (not symmetric), X_0 = 1, X_1 = 2, f = 10, post = (0.5, 2):
    // X'_0 = 0.5 * 10 + 0.9 * 1 + 0.3 * 2 = 6.5; X'_1 = 2 * 10 + 0.1 * 1 + 0.7 * 2 = 21.5.
    HcParams p{.n_hc = 2, .dim = 3, .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-6f};
    HcMix mix{.pre = {1.0f, 1.0f}, .post = {0.5f, 2.0f}, .comb = {0.9f, 0.1f, 0.3f, 0.7f}};
    std::vector<float> X = {1, 1, 1, 2, 2, 2}, f = {10, 10, 10}, out(6);
    cpu::hc_post(f.data(), X.data(), mix, p, out.data());
    for (int d = 0; d < 3; ++d) {
        EXPECT_FLOAT_EQ(out[size_t(d)], 6.5f);
        EXPECT_FLOAT_EQ(out[size_t(3 + d)], 21.5f);
    }
}

TEST(Mhc, HcPostMatchesDouble) {
    test::Rng rng;
    for (int64_t n : {2, 4}) {
        const int64_t dim = 45;
        HcParams p{.n_hc = n, .dim = dim, .sinkhorn_iters = 20, .hc_eps = 1e-6f, .norm_eps = 1e-6f};
        HcMix mix;
        for (int64_t j = 0; j < n; ++j) mix.post.push_back(rng.uniform(0.0f, 2.0f));
        for (int64_t jk = 0; jk < n * n; ++jk) mix.comb.push_back(rng.uniform(0.0f, 1.0f));
        std::vector<float> X = rng.normal_bf16(n * dim), f = rng.normal_bf16(dim), out(static_cast<size_t>(n * dim));
        cpu::hc_post(f.data(), X.data(), mix, p, out.data());
        test::Worst worst("hc_post n_hc=" + std::to_string(n));
        for (int64_t k = 0; k < n; ++k) {
            for (int64_t d = 0; d < dim; ++d) {
                double exact = double(mix.post[size_t(k)]) * f[size_t(d)];
                double magnitude = std::fabs(exact);
                for (int64_t j = 0; j < n; ++j) {
                    double t = double(mix.comb[size_t(j * n + k)]) * X[size_t(j * dim + d)];
                    exact += t;
                    magnitude += std::fabs(t);
                }
                // n_hc + 1 products and n_hc + 1 sums, each <= u of the magnitude.
                worst.add(k * dim + d, out[size_t(k * dim + d)], exact,
                          2.0 * double(n + 1) * test::kF32Unit * magnitude + 1e-30);
            }
        }
        worst.expect_ok();
    }
}

TEST(Mhc, HcHeadMatchesDouble) {
    test::Rng rng;
    for (int64_t n : {2, 4}) {
        const int64_t dim = 50;
        Inputs in = random_inputs(rng, n, dim, n, 1);
        HcParams p = in.p;
        std::vector<float> y(static_cast<size_t>(dim));
        cpu::hc_head(in.X.data(), in.fn.data(), in.base.data(), in.scale.data(), p, y.data());
        std::vector<double> mix = mixes(in.X, in.fn, n, p.norm_eps);
        test::Worst worst("hc_head n_hc=" + std::to_string(n));
        for (int64_t d = 0; d < dim; ++d) {
            double exact = 0.0, magnitude = 0.0;
            for (int64_t j = 0; j < n; ++j) {
                double pre = sigmoid(mix[size_t(j)] * in.scale[0] + in.base[size_t(j)]) + p.hc_eps;
                exact += pre * in.X[size_t(j * dim + d)];
                magnitude += std::fabs(pre * in.X[size_t(j * dim + d)]);
            }
            worst.add(d, y[size_t(d)], exact, (16.0 + double(n + 1)) * test::kF32Unit * magnitude + 1e-30);
        }
        worst.expect_ok();
    }
}
