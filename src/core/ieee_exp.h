// ieee_expf: e^x in f32 from correctly rounded IEEE operations only (fma, add, mul) and exact bit moves, so the CPU
// reference and a CUDA kernel including this header compute the same bits (glibc's expf and the device's expf each
// round a few results to the other neighbour). Error below 1 ulp. Every product that feeds a sum is an explicit fma
// and no plain product feeds a sum, so no compiler can contract anything. Used by the compressor's pooling softmax
// (model/compressor.cpp, kernels/cuda/compressor). Tested on every f32 in a range: tests/core/ieee_exp_test.cpp.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define DSV4_IEEE_EXP_FN __host__ __device__ __forceinline__
#else
#define DSV4_IEEE_EXP_FN inline
#endif

namespace dsv4 {
namespace ieee_exp_detail {

DSV4_IEEE_EXP_FN float fma(float a, float b, float c) {
#if defined(__CUDA_ARCH__)
    return __fmaf_rn(a, b, c);
#else
    return std::fma(a, b, c);
#endif
}
DSV4_IEEE_EXP_FN float add(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
DSV4_IEEE_EXP_FN float mul(float a, float b) {
#if defined(__CUDA_ARCH__)
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
DSV4_IEEE_EXP_FN float from_bits(uint32_t b) {
#if defined(__CUDA_ARCH__)
    return __uint_as_float(b);
#else
    return std::bit_cast<float>(b);
#endif
}
// 2^n for n in [-126, 127], exactly.
DSV4_IEEE_EXP_FN float pow2(int n) {
    return from_bits(uint32_t(n + 127) << 23);
}

}  // namespace ieee_exp_detail

// e^x = 2^n e^(r1 + t): n = round(x / ln2); r1 = x - n ln2_head, exact in one fma (ln2_head has 21 significant
// bits); t = -n ln2_tail (|t| < 3e-7). e^(r1 + t) = 1 + r1 + w with w = t + r^2 q(r), r = r1 + t and q the Taylor
// series (e^r - 1 - r) / r^2 to the r^6 term (truncation below 0.01 ulp on |r| <= ln2 / 2); 1 + r1 is summed exactly
// as hi + lo (Fast2Sum), so the final addition is the only rounding of the order of an ulp. Then times 2^n in two
// exact halves, so a subnormal result is rounded once. NaN passes, x > 89 gives +inf, x < -104 gives 0 (e^x below
// half the smallest subnormal).
DSV4_IEEE_EXP_FN float ieee_expf(float x) {
    using namespace ieee_exp_detail;
    if (x != x) return x;
    if (x > 89.0f) return from_bits(0x7F800000u);
    if (x < -104.0f) return 0.0f;
    constexpr float kShifter = 0x1.8p23f;         // adding it rounds a value of magnitude < 2^22 to an integer
    constexpr float kLog2e = 0x1.715476p+0f;      // 1 / ln2
    constexpr float kLn2Head = 0x1.62e430p-1f;    // ln2 rounded to 24 bits (the last 3 are zero)
    constexpr float kLn2Tail = -0x1.05c610p-29f;  // ln2 - kLn2Head, rounded
    const float n = add(fma(x, kLog2e, kShifter), -kShifter);
    const float r1 = fma(n, -kLn2Head, x);
    const float t = fma(n, -kLn2Tail, 0.0f);
    const float r = fma(n, -kLn2Tail, r1);
    float q = 1.0f / 40320.0f;  // 1/8!
    q = fma(q, r, 1.0f / 5040.0f);
    q = fma(q, r, 1.0f / 720.0f);
    q = fma(q, r, 1.0f / 120.0f);
    q = fma(q, r, 1.0f / 24.0f);
    q = fma(q, r, 1.0f / 6.0f);
    q = fma(q, r, 0.5f);
    const float w = fma(q, mul(r, r), t);
    const float hi = add(1.0f, r1);
    const float lo = add(add(1.0f, -hi), r1);  // 1 + r1 - hi, exactly
    const float p = add(hi, add(lo, w));
    const int k = int(n), k1 = k / 2, k2 = k - k1;  // k in [-150, 128]: both halves in [-75, 64]
    return mul(mul(p, pow2(k1)), pow2(k2));
}

}  // namespace dsv4

#undef DSV4_IEEE_EXP_FN
