// RMSNorm in f32: y = x * rsqrt(mean(x^2) + eps) * weight (weight may be null: unweighted).
// Tested in tests/kernels/norms_test.cpp.
#pragma once

#include <cstdint>

namespace dsv4::cpu {

void rms_norm(const float* x, const float* weight, int64_t n, float eps, float* y);

}  // namespace dsv4::cpu
