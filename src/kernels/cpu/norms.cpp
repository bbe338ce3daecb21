// RMSNorm in f32. The mean of squares is accumulated in double so the reference is at least as accurate as
// torch's cascade-summed f32 mean; rsqrt, scaling and the weight product are f32 like the official RMSNorm
// (x * rsqrt(mean(x^2) + eps), then weight * that). Tested in tests/kernels/norms_test.cpp.
#include "kernels/cpu/norms.h"

#include <cmath>

namespace dsv4::cpu {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y) {
    double sum_sq = 0.0;
    for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * double(x[i]);
    const float mean_sq = float(sum_sq / double(n));
    const float rsqrt = 1.0f / std::sqrt(mean_sq + eps);
    for (int64_t i = 0; i < n; ++i) {
        float normed = x[i] * rsqrt;
        y[i] = weight ? weight[i] * normed : normed;
    }
}

}  // namespace dsv4::cpu
