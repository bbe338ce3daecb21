// Sampler: see sampler.h, which defines a draw step by step; this computes it without sorting the vocabulary. The
// weights are one vectorized pass; the candidates a selection (top-k) or a filter (min-p); the sums run over blocks,
// so a draw without top-p walks the block sums and then one block; with top-p only the tokens that can be in the
// nucleus are put in order (token_order.h).
#include "runtime/sampler.h"

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "runtime/sampling_weights.h"

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
    return int32_t(scan_logits(logits, vocab).argmax);
}

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
    validate_sampling(params);
}

int32_t Sampler::sample(const float* logits, int64_t vocab) {
    return sample(logits, vocab, params_.greedy ? 0.0 : next_uniform());
}

int32_t Sampler::sample(const float* logits, int64_t vocab, double u) {
    const LogitScan scan = scan_logits(logits, vocab);
    if (scan.has_nan) {
        const int64_t at = std::find_if(logits, logits + vocab, [](float x) { return std::isnan(x); }) - logits;
        fail("the model produced a NaN logit (token {}): refusing to sample", at);
    }
    if (params_.greedy) return int32_t(scan.argmax);

    // 1. Weights.
    weights_.resize(size_t(vocab));
    const float max_logit = logits[scan.argmax];
    sampling_weights(logits, vocab, max_logit, params_.temperature, weights_.data());
    const float* w = weights_.data();

    // 2. Candidates: all ids, or a list in ascending id order (order_ keeps the top-k ones in the order). The most
    //    likely token is always one (it is first in the order and weighs 1 >= min_p).
    all_candidates_ = true;
    candidates_.clear();
    order_.clear();
    if (params_.top_k > 0 && params_.top_k < vocab) {
        most_likely(logits, vocab, params_.top_k, order_, order_scratch_);
        candidates_.assign(order_.begin(), order_.end());
        std::sort(candidates_.begin(), candidates_.end());
        all_candidates_ = false;
    }
    if (params_.min_p > 0.0f) {
        const auto light = [&](int32_t id) { return w[id] < params_.min_p; };
        if (all_candidates_) {
            for (int64_t i = 0; i < vocab; ++i)
                if (w[i] >= params_.min_p) candidates_.push_back(int32_t(i));
            all_candidates_ = false;
        } else {
            std::erase_if(candidates_, light);
            std::erase_if(order_, light);
        }
    }

    // 3. Block sums and the total.
    const int64_t n = all_candidates_ ? vocab : int64_t(candidates_.size());
    if (all_candidates_)
        sum_blocks(n, [w](int64_t i) { return w[i]; });
    else
        sum_blocks(n, [w, c = candidates_.data()](int64_t j) { return w[c[j]]; });
    double total = 0.0;
    for (double s : block_sums_) total += s;

    // 4, 5. The draw.
    if (params_.top_p < 1.0f) return draw_nucleus(logits, max_logit, w, total, u);
    return draw_in_blocks(w, u * total);
}

// Each block's sum is one chain of double additions in candidate order (step 3); the chains of kChains whole blocks
// are independent, so they are added side by side, their latencies overlapped (a block at a time waited for each
// addition: 71 us of a V4 draw, now ~10), each chain still its own additions in its own order.
template <typename Weight>
void Sampler::sum_blocks(int64_t n, Weight weight) {
    constexpr int kChains = 8;
    block_sums_.clear();
    int64_t begin = 0;
    for (; begin + kChains * kSampleBlock <= n; begin += kChains * kSampleBlock) {
        double s[kChains] = {};
        for (int64_t i = 0; i < kSampleBlock; ++i)
            for (int c = 0; c < kChains; ++c) s[c] += weight(begin + c * kSampleBlock + i);
        block_sums_.insert(block_sums_.end(), s, s + kChains);
    }
    for (; begin < n; begin += kSampleBlock) {
        const int64_t end = std::min(n, begin + kSampleBlock);
        double s = 0.0;
        for (int64_t i = begin; i < end; ++i) s += weight(i);
        block_sums_.push_back(s);
    }
}

int32_t Sampler::draw_in_blocks(const float* w, double target) {
    const int64_t n = all_candidates_ ? int64_t(weights_.size()) : int64_t(candidates_.size());
    auto id_at = [&](int64_t j) { return all_candidates_ ? int32_t(j) : candidates_[size_t(j)]; };
    double before = 0.0;
    for (size_t b = 0; b < block_sums_.size(); ++b) {
        if (before + block_sums_[b] > target) {
            // The block's running sum ends at block_sums_[b] (the same additions), so some j exceeds the target.
            const int64_t begin = int64_t(b) * kSampleBlock, end = std::min(n, begin + kSampleBlock);
            double run = 0.0;
            for (int64_t j = begin; j < end; ++j)
                if (before + (run += w[id_at(j)]) > target) return id_at(j);
            return id_at(end - 1);
        }
        before += block_sums_[b];
    }
    return id_at(n - 1);
}

int32_t Sampler::draw_nucleus(const float* logits, float max_logit, const float* w, double total, double u) {
    const double goal = double(params_.top_p) * total;
    if (order_.empty())  // top-k gave them in the order already; otherwise the tokens that can be in the nucleus
        ordered_to_mass(logits, w, int64_t(weights_.size()), all_candidates_ ? nullptr : &candidates_, goal, max_logit,
                        8.0f * params_.temperature, order_, order_scratch_);
    double mass = 0.0;
    size_t cut = order_.size() - 1;
    for (size_t j = 0; j < order_.size(); ++j)
        if ((mass += w[order_[j]]) >= goal) {
            cut = j;
            break;
        }
    const double target = u * mass;
    double run = 0.0;
    for (size_t j = 0; j <= cut; ++j)
        if ((run += w[order_[j]]) > target) return order_[j];
    return order_[cut];
}

}  // namespace dsv4
