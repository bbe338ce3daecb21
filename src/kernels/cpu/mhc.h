// Manifold-constrained hyper-connections (spec §5), one token at a time, all f32: HC_pre (mixer, Sinkhorn),
// HC_post and HC_head. Streams X are [n_hc, D] row-major (stream-major). Tested in tests/kernels/mhc_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

namespace dsv4::cpu {

struct HcParams {
    int64_t n_hc = 0;
    int64_t dim = 0;             // D
    int64_t sinkhorn_iters = 0;
    float hc_eps = 0;
    float norm_eps = 0;
};

struct HcMix {
    std::vector<float> pre;   // [n_hc]
    std::vector<float> post;  // [n_hc]
    std::vector<float> comb;  // [n_hc * n_hc], C[j][k] at j * n_hc + k (after Sinkhorn)
};

// Sinkhorn projection of C (row j, column k), in place: row softmax + eps, column normalize, then
// (iters - 1) times row normalize and column normalize.
void sinkhorn(float* c, int64_t n_hc, int64_t iters, float eps);

// x_out [D] = sum_j pre_j X_j, and the mix for HC_post. fn [(2+n_hc)*n_hc, n_hc*D], base [(2+n_hc)*n_hc],
// scale [3].
void hc_pre(const float* X, const float* fn, const float* base, const float* scale, const HcParams& p,
            float* x_out, HcMix& mix);

// X_out[k] = post_k * f + sum_j C[j][k] X[j]   (X_out may not alias X)
void hc_post(const float* f, const float* X, const HcMix& mix, const HcParams& p, float* X_out);

// y [D] = sum_j (sigmoid(mix_j * scale + base_j) + eps) X_j with fn [n_hc, n_hc*D], base [n_hc], scale [1].
void hc_head(const float* X, const float* fn, const float* base, const float* scale, const HcParams& p, float* y);

}  // namespace dsv4::cpu
