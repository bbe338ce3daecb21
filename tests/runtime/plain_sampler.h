// The sampler's definition (runtime/sampler.h, steps 1-5) computed the plain way: every id sorted by logit, the
// candidates cut from that order, the sums in the loops the definition names. runtime/sampler.cpp must draw the same
// id at every step (sampler_test.cpp); bench/sampler_bench.cpp times both. Slow on purpose (a stable sort of the
// whole vocabulary per draw). It shares the definition's arithmetic primitives: sampling_weights (tested against
// std::exp in sampling_weights_test.cpp) and uniform_53.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

#include "runtime/sampler.h"
#include "runtime/sampling_weights.h"

namespace dsv4::test_reference {

class PlainSampler {
  public:
    explicit PlainSampler(const SamplingParams& params) : params_(params), rng_(params.seed) {}

    int32_t sample(const float* logits, int64_t vocab) {
        return sample(logits, vocab, params_.greedy ? 0.0 : uniform_53(rng_));
    }

    // A draw with step 4's uniform given (ignored when greedy).
    int32_t sample(const float* logits, int64_t vocab, double u) const {
        int64_t best = 0;
        for (int64_t i = 1; i < vocab; ++i)
            if (logits[i] > logits[best]) best = i;
        if (params_.greedy) return int32_t(best);

        std::vector<float> w(static_cast<size_t>(vocab));
        sampling_weights(logits, vocab, logits[best], params_.temperature, w.data());
        std::vector<int32_t> order(static_cast<size_t>(vocab));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return logits[a] > logits[b]; });

        std::vector<int32_t> candidates = order;  // in the order
        if (params_.top_k > 0 && params_.top_k < vocab) candidates.resize(size_t(params_.top_k));
        if (params_.min_p > 0.0f) std::erase_if(candidates, [&](int32_t id) { return w[id] < params_.min_p; });
        std::vector<int32_t> by_id = candidates;
        std::sort(by_id.begin(), by_id.end());

        std::vector<double> blocks;
        double total = 0.0;
        for (size_t begin = 0; begin < by_id.size(); begin += kSampleBlock) {
            double s = 0.0;
            for (size_t j = begin; j < std::min(by_id.size(), begin + kSampleBlock); ++j) s += w[by_id[j]];
            blocks.push_back(s);
            total += s;
        }

        if (params_.top_p < 1.0f) {
            const double goal = double(params_.top_p) * total;
            double mass = 0.0;
            size_t cut = candidates.size() - 1;
            for (size_t j = 0; j < candidates.size(); ++j) {
                mass += w[candidates[j]];
                if (mass >= goal) {
                    cut = j;
                    break;
                }
            }
            double run = 0.0;
            for (size_t j = 0; j <= cut; ++j) {
                run += w[candidates[j]];
                if (run > u * mass) return candidates[j];
            }
            return candidates[cut];
        }
        double before = 0.0;
        for (size_t b = 0; b < blocks.size(); ++b) {
            if (before + blocks[b] > u * total) {
                double run = 0.0;
                for (size_t j = b * kSampleBlock; j < std::min(by_id.size(), (b + 1) * kSampleBlock); ++j) {
                    run += w[by_id[j]];
                    if (before + run > u * total) return by_id[j];
                }
            }
            before += blocks[b];
        }
        return by_id.back();
    }

  private:
    SamplingParams params_;
    std::mt19937_64 rng_;
};

}  // namespace dsv4::test_reference
