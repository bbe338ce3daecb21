// Sampler: see sampler.h. Top-k and min-p (both cut the sorted list), then top-p over the tempered softmax of what
// is left, then one draw: vLLM's order (min-p before top-p, so the nucleus is taken of the renormalized rest).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace dsv4 {

void validate_sampling(const SamplingParams& p) {
    if (p.greedy) return;
    DSV4_CHECK(p.temperature > 0.0f && std::isfinite(p.temperature),
               "--temp must be a positive number (use --greedy for argmax decoding), got {}", p.temperature);
    DSV4_CHECK(p.top_p > 0.0f && p.top_p <= 1.0f, "--top-p must be in (0, 1], got {}", p.top_p);
    DSV4_CHECK(p.top_k >= 0, "--top-k must be >= 0 (0 disables it), got {}", p.top_k);
    DSV4_CHECK(p.min_p >= 0.0f && p.min_p <= 1.0f, "min_p must be in [0, 1] (0 disables it), got {}", p.min_p);
}

int32_t argmax(const float* logits, int64_t vocab) {
    int64_t best = 0;
    for (int64_t i = 1; i < vocab; ++i)
        if (logits[i] > logits[best]) best = i;
    return int32_t(best);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate_sampling(params); }

int32_t Sampler::sample(const float* logits, int64_t vocab) {
    for (int64_t i = 0; i < vocab; ++i)
        DSV4_CHECK(!std::isnan(logits[i]), "the model produced a NaN logit (token {}): refusing to sample", i);
    if (params_.greedy) return argmax(logits, vocab);

    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
    size_t keep = ids.size();
    if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));

    // probs[i] is relative to the most likely token (probs[0] == 1), so min-p compares it with min_p directly.
    std::vector<double> probs(keep);
    const double max_logit = logits[ids[0]];
    for (size_t i = 0; i < keep; ++i) probs[i] = std::exp((logits[ids[i]] - max_logit) / params_.temperature);
    if (params_.min_p > 0.0f)
        keep = size_t(std::find_if(probs.begin(), probs.end(), [&](double p) { return p < params_.min_p; }) -
                      probs.begin());
    double total = 0.0;
    for (size_t i = 0; i < keep; ++i) total += probs[i];
    double cumulative = 0.0;
    size_t nucleus = keep;
    for (size_t i = 0; i < keep; ++i) {
        cumulative += probs[i] / total;
        if (cumulative >= params_.top_p) {
            nucleus = i + 1;
            break;
        }
    }
    std::discrete_distribution<size_t> pick(probs.begin(), probs.begin() + long(nucleus));
    return ids[pick(rng_)];
}

}  // namespace dsv4
