// The sampler as first written: a stable sort of the whole vocabulary by logit, then top-k, min-p, top-p and one
// draw. It is the specification runtime/sampler.cpp must equal draw for draw (sampler_test.cpp), and the baseline
// of bench/sampler_bench.cpp. Plain and slow on purpose (~25 ms a draw at V4's 129,280 ids).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/sampler.h"

namespace dsv4::test_reference {

class SortingSampler {
  public:
    explicit SortingSampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

    int32_t sample(const float* logits, int64_t vocab) {
        if (params_.greedy) {
            int64_t best = 0;
            for (int64_t i = 1; i < vocab; ++i)
                if (logits[i] > logits[best]) best = i;
            return int32_t(best);
        }
        std::vector<int32_t> ids(static_cast<size_t>(vocab));
        std::iota(ids.begin(), ids.end(), 0);
        std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });
        size_t keep = ids.size();
        if (params_.top_k > 0) keep = std::min(keep, static_cast<size_t>(params_.top_k));
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

  private:
    SamplingParams params_;
    std::mt19937_64 rng_;
};

}  // namespace dsv4::test_reference
