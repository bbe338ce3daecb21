// The arithmetic of sampling weights (runtime/sampler.h): e^x for x <= 0 in float, written out so that it is the
// same on every machine and compiler (no libm) and vectorizes, and the weight of every token of a row of logits.
// Tested in tests/runtime/sampling_weights_test.cpp against std::exp in double.
#pragma once

#include <bit>
#include <cstdint>

#include "core/vector_isa.h"

namespace dsv4 {

// e^x for x <= 0 within 4e-7 relative (about 3 ulp), exactly 1 at 0, and 0 below -87 (where e^x is under
// FLT_MIN) and at -inf. x = n ln 2 + r with |r| <= ln 2 / 2; e^r by its degree-6 Taylor polynomial (the remainder
// is under 1.2e-7 there), then scaled by 2^n through the exponent field.
inline float exp_nonpositive(float x) {
    const bool tiny = !(x >= -87.0f);  // also -inf
    const float xc = tiny ? -87.0f : x;
    const float magic = 12582912.0f;  // 1.5 * 2^23: adding and subtracting it rounds to an integer
    const float n = (xc * 1.44269504f + magic) - magic;
    const float r = (xc - n * 0.693145752f) - n * 1.42860677e-6f;  // ln 2 split so that n * hi is exact
    float p = 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const float scale = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);  // n in [-126, 0]
    return tiny ? 0.0f : p * scale;
}

// weights[i] = e^((logits[i] - max_logit) / temperature) by exp_nonpositive, and exactly 1 where logits[i] ==
// max_logit (also when that is +inf; every other token then weighs 0). max_logit: the row's largest value.
// Built for each vector instruction set (core/vector_isa.h); this CPU's widest, or `isa` (one it runs), all the
// same bits.
void sampling_weights(const float* logits, int64_t vocab, float max_logit, float temperature, float* weights);
void sampling_weights(const float* logits, int64_t vocab, float max_logit, float temperature, float* weights,
                      VectorIsa isa);

// The sum of n weights in double, in a fixed order that is not id order (eight interleaved partial sums, then those
// in order; the same on every machine): for a normalizer that needs no particular order of additions (a softmax's:
// within (n / 8 + 8) 2^-53 of the exact sum, relative, ~2^-39 at V4's vocabulary, where one chain's bound was
// n 2^-53). A draw's sums follow sampler.h's order instead. Built for the baseline and AVX2 (AVX-512 takes the AVX2
// build): this CPU's widest, or `isa` (one it runs), the same bits.
double sum_of_weights(const float* weights, int64_t n);
double sum_of_weights(const float* weights, int64_t n, VectorIsa isa);

}  // namespace dsv4
