// Manifold-constrained hyper-connections (spec §5), one token at a time, following DeepSeek's Block.hc_pre /
// hc_post, ParallelHead.hc_head and the hc_split_sinkhorn kernel. Elementwise math is f32; the two long
// reductions (sum of squares and fn . v over n_hc * D values) accumulate in double, then round to f32.
// Tested in tests/kernels/mhc_test.cpp against an independent double-precision implementation.
#include "kernels/cpu/mhc.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace dsv4::cpu {
namespace {

float sigmoid(float z) {
    return 1.0f / (1.0f + std::exp(-z));
}

// rho = rsqrt(mean(v^2) + eps) over the flattened streams v = X [n_hc * D].
float stream_rsqrt(const float* v, int64_t n, float eps) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += double(v[i]) * double(v[i]);
    return 1.0f / std::sqrt(float(sum_sq / double(n)) + eps);
}

// mix[m] = (fn[m, :] . v) * rho for m < rows; fn is [rows, n].
void mix_logits(const float* fn, int64_t rows, const float* v, int64_t n, float rho, float* mix) {
    for (int64_t m = 0; m < rows; ++m) {
        const float* f = fn + m * n;
        double dot = 0.0;
        for (int64_t i = 0; i < n; ++i) dot += double(f[i]) * double(v[i]);
        mix[m] = float(dot) * rho;
    }
}

// x_out [D] = sum_j pre_j X_j in f32, streams in order.
void collapse(const float* X, const float* pre, int64_t n_hc, int64_t dim, float* x_out) {
    for (int64_t d = 0; d < dim; ++d) {
        float acc = 0.0f;
        for (int64_t j = 0; j < n_hc; ++j) acc += pre[j] * X[j * dim + d];
        x_out[d] = acc;
    }
}

void normalize_rows(float* c, int64_t n, float eps) {
    for (int64_t j = 0; j < n; ++j) {
        float sum = 0.0f;
        for (int64_t k = 0; k < n; ++k) sum += c[j * n + k];
        for (int64_t k = 0; k < n; ++k) c[j * n + k] /= (sum + eps);
    }
}

void normalize_columns(float* c, int64_t n, float eps) {
    for (int64_t k = 0; k < n; ++k) {
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) sum += c[j * n + k];
        for (int64_t j = 0; j < n; ++j) c[j * n + k] /= (sum + eps);
    }
}

}  // namespace

void sinkhorn(float* c, int64_t n_hc, int64_t iters, float eps) {
    // Row softmax, then eps added to every entry (after the division, as the kernel does).
    for (int64_t j = 0; j < n_hc; ++j) {
        float* row = c + j * n_hc;
        float row_max = *std::max_element(row, row + n_hc);
        float sum = 0.0f;
        for (int64_t k = 0; k < n_hc; ++k) {
            row[k] = std::exp(row[k] - row_max);
            sum += row[k];
        }
        for (int64_t k = 0; k < n_hc; ++k) row[k] = row[k] / sum + eps;
    }
    normalize_columns(c, n_hc, eps);
    for (int64_t it = 1; it < iters; ++it) {
        normalize_rows(c, n_hc, eps);
        normalize_columns(c, n_hc, eps);
    }
}

void hc_pre(const float* X, const float* fn, const float* base, const float* scale, const HcParams& p, float* x_out,
            HcMix& mix) {
    const int64_t n = p.n_hc, width = p.n_hc * p.dim, n_mix = (2 + n) * n;
    std::vector<float> logits(static_cast<size_t>(n_mix));
    mix_logits(fn, n_mix, X, width, stream_rsqrt(X, width, p.norm_eps), logits.data());

    // logits = [pre (n) | post (n) | comb (n * n)], base split the same way; scale = (s_pre, s_post, s_comb).
    mix.pre.resize(size_t(n));
    mix.post.resize(size_t(n));
    mix.comb.resize(size_t(n * n));
    for (int64_t j = 0; j < n; ++j) {
        mix.pre[size_t(j)] = sigmoid(logits[size_t(j)] * scale[0] + base[j]) + p.hc_eps;
        mix.post[size_t(j)] = 2.0f * sigmoid(logits[size_t(n + j)] * scale[1] + base[n + j]);
    }
    for (int64_t jk = 0; jk < n * n; ++jk)
        mix.comb[size_t(jk)] = logits[size_t(2 * n + jk)] * scale[2] + base[2 * n + jk];
    sinkhorn(mix.comb.data(), n, p.sinkhorn_iters, p.hc_eps);

    collapse(X, mix.pre.data(), n, p.dim, x_out);  // from the un-normalized streams
}

void hc_post(const float* f, const float* X, const HcMix& mix, const HcParams& p, float* X_out) {
    DSV4_ASSERT(X_out != X, "hc_post: X_out may not alias X");
    const int64_t n = p.n_hc, dim = p.dim;
    for (int64_t k = 0; k < n; ++k) {
        for (int64_t d = 0; d < dim; ++d) {
            float residual = 0.0f;  // sum over the FIRST index of C: C[j][k] X_j
            for (int64_t j = 0; j < n; ++j) residual += mix.comb[size_t(j * n + k)] * X[j * dim + d];
            X_out[k * dim + d] = mix.post[size_t(k)] * f[d] + residual;
        }
    }
}

void hc_head(const float* X, const float* fn, const float* base, const float* scale, const HcParams& p, float* y) {
    const int64_t n = p.n_hc, width = p.n_hc * p.dim;
    std::vector<float> pre(static_cast<size_t>(n));
    mix_logits(fn, n, X, width, stream_rsqrt(X, width, p.norm_eps), pre.data());
    for (int64_t j = 0; j < n; ++j) pre[size_t(j)] = sigmoid(pre[size_t(j)] * scale[0] + base[j]) + p.hc_eps;
    collapse(X, pre.data(), n, p.dim, y);
}

}  // namespace dsv4::cpu
