// Sampling weights: see sampling_weights.h. Built with -O3 -fno-trapping-math (src/CMakeLists.txt): the selects on
// comparisons then vectorize (GCC does not if-convert them while comparisons may raise FP exception flags); no
// result changes, vector lanes round as the scalar code does. The loop is built for AVX-512 and AVX2 besides the
// baseline's SSE2 (core/vector_isa.h; V4's row 164 -> 50 us on an AVX-512 machine); the project's -ffp-contract=off
// keeps every build from fusing exp_nonpositive's multiplies and adds into FMAs, so every build and lane gives the
// scalar function's bits (tests/runtime/sampling_weights_test.cpp runs each build the machine has).
#include "runtime/sampling_weights.h"

#include "runtime/lane_sums.h"

namespace dsv4 {
namespace {

// Both sides computed, then one chosen: branch-free, so the loop vectorizes (for +inf == max_logit the quotient is
// NaN, which exp_nonpositive takes as tiny).
inline float weight(float logit, float max_logit, float temperature) {
    const float e = exp_nonpositive((logit - max_logit) / temperature);
    return logit == max_logit ? 1.0f : e;
}

[[gnu::always_inline]] inline void weights_loop(const float* logits, int64_t vocab, float max_logit, float temperature,
                                                float* weights) {
    for (int64_t i = 0; i < vocab; ++i) weights[i] = weight(logits[i], max_logit, temperature);
}

void weights_baseline(const float* logits, int64_t vocab, float max_logit, float temperature, float* weights) {
    weights_loop(logits, vocab, max_logit, temperature, weights);
}
DSV4_TARGET_AVX2 void weights_avx2(const float* logits, int64_t vocab, float max_logit, float temperature,
                                   float* weights) {
    weights_loop(logits, vocab, max_logit, temperature, weights);
}
DSV4_TARGET_AVX512 void weights_avx512(const float* logits, int64_t vocab, float max_logit, float temperature,
                                       float* weights) {
    weights_loop(logits, vocab, max_logit, temperature, weights);
}

// Eight interleaved partial sums (runtime/lane_sums.h).
[[gnu::always_inline]] inline double sum_loop(const float* weights, int64_t n) {
    return eight_lane_sum(n, [weights](int64_t i) { return double(weights[i]); });
}

double sum_baseline(const float* weights, int64_t n) {
    return sum_loop(weights, n);
}
DSV4_TARGET_AVX2 double sum_avx2(const float* weights, int64_t n) {
    return sum_loop(weights, n);
}

}  // namespace

double sum_of_weights(const float* weights, int64_t n) {
    return sum_of_weights(weights, n, host_vector_isa());
}

double sum_of_weights(const float* weights, int64_t n, VectorIsa isa) {
    return isa == VectorIsa::kBaseline ? sum_baseline(weights, n) : sum_avx2(weights, n);
}

void sampling_weights(const float* logits, int64_t vocab, float max_logit, float temperature, float* weights,
                      VectorIsa isa) {
    switch (isa) {
        case VectorIsa::kAvx512:
            return weights_avx512(logits, vocab, max_logit, temperature, weights);
        case VectorIsa::kAvx2:
            return weights_avx2(logits, vocab, max_logit, temperature, weights);
        case VectorIsa::kBaseline:
            return weights_baseline(logits, vocab, max_logit, temperature, weights);
    }
}

void sampling_weights(const float* logits, int64_t vocab, float max_logit, float temperature, float* weights) {
    sampling_weights(logits, vocab, max_logit, temperature, weights, host_vector_isa());
}

}  // namespace dsv4
