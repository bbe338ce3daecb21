// Sampler: see sampler.h. Top-k and min-p (both cut the ordered list), then top-p over the tempered softmax of what
// is left, then one draw: vLLM's order (min-p before top-p, so the nucleus is taken of the renormalized rest). The
// order comes from token_order.h; everything after it is the arithmetic of the sorting sampler, in its order, so
// the draws are the same.
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
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

namespace {

// The index std::discrete_distribution<size_t>(w, w + n) draws with `rng` in libstdc++ (the draws the sampler has
// always made), without its copy, normalized copy and cumulative table of all n weights: the same sum, the same
// quotients added in the same order, stopping at the first cumulative probability not below the uniform number
// (its lower_bound). One candidate draws no number; the last cumulative probability counts as 1.
size_t draw_index(const double* w, size_t n, std::mt19937_64& rng) {
    if (n < 2) return 0;
    double sum = 0.0;
    for (size_t i = 0; i < n; ++i) sum += w[i];
    const double u = std::generate_canonical<double, std::numeric_limits<double>::digits>(rng);
    double cumulative = 0.0;
    for (size_t i = 0; i + 1 < n; ++i) {
        cumulative += w[i] / sum;
        if (cumulative >= u) return i;
    }
    return n - 1;
}

}  // namespace

int32_t argmax(const float* logits, int64_t vocab) { return int32_t(scan_logits(logits, vocab).argmax); }

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) { validate_sampling(params); }

int32_t Sampler::sample(const float* logits, int64_t vocab) {
    const LogitScan scan = scan_logits(logits, vocab);
    if (scan.has_nan) {
        const int64_t at = std::find_if(logits, logits + vocab, [](float x) { return std::isnan(x); }) - logits;
        fail("the model produced a NaN logit (token {}): refusing to sample", at);
    }
    if (params_.greedy) return int32_t(scan.argmax);

    // Only the first `keep` ids of the order are read below: top-k needs just those (a selection, not a sort).
    size_t keep = size_t(vocab);
    if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
    most_likely(logits, vocab, int64_t(keep), ids_, order_scratch_);

    // probs[i] is relative to the most likely token (probs[0] == 1), so min-p compares it with min_p directly.
    std::vector<double>& probs = probs_;
    probs.resize(keep);
    const double max_logit = logits[ids_[0]];
    for (size_t i = 0; i < keep; ++i) probs[i] = std::exp((logits[ids_[i]] - max_logit) / params_.temperature);
    if (params_.min_p > 0.0f)
        keep = size_t(std::find_if(probs.begin(), probs.begin() + long(keep),
                                   [&](double p) { return p < params_.min_p; }) -
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
    return ids_[draw_index(probs.data(), nucleus, rng_)];
}

}  // namespace dsv4
