// Sampling weights: see sampling_weights.h. Built with -O3 -fno-trapping-math (src/CMakeLists.txt): the selects on
// comparisons then vectorize (GCC does not if-convert them while comparisons may raise FP exception flags); no
// result changes, vector lanes round as the scalar code does.
#include "runtime/sampling_weights.h"

namespace dsv4 {
namespace {

// Both sides computed, then one chosen: branch-free, so the loop vectorizes (for +inf == max_logit the quotient is
// NaN, which exp_nonpositive takes as tiny).
inline float weight(float logit, float max_logit, float temperature) {
    const float e = exp_nonpositive((logit - max_logit) / temperature);
    return logit == max_logit ? 1.0f : e;
}

}  // namespace

void sampling_weights(const float* logits, int64_t vocab, float max_logit, float temperature, float* weights) {
    for (int64_t i = 0; i < vocab; ++i) weights[i] = weight(logits[i], max_logit, temperature);
}

}  // namespace dsv4
