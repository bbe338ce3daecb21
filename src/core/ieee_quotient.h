// quotient_rn: a / d rounded as IEEE division rounds it (to nearest even), for many numerators over one denominator,
// from its reciprocal inv_d = RN(1 / d) computed once: q = RN(a inv_d), then one FMA of q's exact remainder
// a - q d (Markstein's correction). Three instructions and a range check on a GPU, where a division is a reciprocal,
// four FMAs, a range check and a branch to its slow path; the sparse attention's epilogue divides 128 outputs a thread
// by two denominators (docs/perf.md). Where |a| lies below 2^-100 or |q| outside [2^-100, 2^100] (near the
// subnormals the remainder would be inexact, and a zero's sign would be lost; an infinite or huge quotient), or either
// is not a number, it divides. The same bits as a / d for every pair (subnormals kept, as the build keeps them: no
// flush to zero): tests/core/ieee_quotient_test.cpp checks every denominator significand on the host,
// tests/gpu/ieee_quotient_test.cu on the device.
#pragma once

#include <cmath>

#if defined(__CUDACC__)
#define DSV4_IEEE_QUOTIENT_FN __host__ __device__ __forceinline__
#else
#define DSV4_IEEE_QUOTIENT_FN inline
#endif

namespace dsv4 {

// The corrected quotient alone: a / d's bits wherever the checked form below would take it (|a| >= 2^-100, |q| in
// [2^-100, 2^100]); a caller that divides many numerators by one d may check their range once (quotients_exact).
DSV4_IEEE_QUOTIENT_FN float quotient_corrected(float a, float d, float inv_d) {
#if defined(__CUDA_ARCH__)
    const float q = __fmul_rn(a, inv_d);
    return __fmaf_rn(__fmaf_rn(-q, d, a), inv_d, q);
#else
    const float q = a * inv_d;
    return std::fma(std::fma(-q, d, a), inv_d, q);
#endif
}

// Whether quotient_corrected(a, d, 1 / d) is a / d for every a with lo <= |a| <= hi: for d in [1, 2^100] the
// quotients then lie in [2^-100, 2^100], the numerators above 2^-100 and 1 / d is normal (d infinite or NaN: false).
DSV4_IEEE_QUOTIENT_FN bool quotients_exact(float lo, float hi, float d) {
    return d >= 1.0f && d <= 0x1p100f && lo >= 0x1p-99f * d && hi <= 0x1p99f;
}

// a / d for any finite non-zero d (inv_d: 1.0f / d), checked pair by pair: corrected where that is exact, else
// divided.
DSV4_IEEE_QUOTIENT_FN float quotient_rn(float a, float d, float inv_d) {
#if defined(__CUDA_ARCH__)
    const float q = __fmul_rn(a, inv_d), m = fabsf(q);
    if (fminf(fabsf(a), m) >= 0x1p-100f && m <= 0x1p100f) return __fmaf_rn(__fmaf_rn(-q, d, a), inv_d, q);
    return __fdiv_rn(a, d);
#else
    const float q = a * inv_d, m = std::fabs(q);
    if (std::fmin(std::fabs(a), m) >= 0x1p-100f && m <= 0x1p100f) return std::fma(std::fma(-q, d, a), inv_d, q);
    return a / d;
#endif
}

}  // namespace dsv4

#undef DSV4_IEEE_QUOTIENT_FN
