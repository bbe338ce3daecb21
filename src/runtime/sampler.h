// Next-token sampling from logits: greedy (argmax, ties to the lowest id) or temperature / top-k / min-p / top-p
// with a seeded generator, so a run is reproducible. The serving engine samples every running request at every step
// on the host, so a draw must cost a small fraction of a decode step: no sort of the whole vocabulary, one pass of
// vectorized weights, sums in blocks. Tested in tests/runtime/sampler_test.cpp against the plain sampler of
// tests/runtime/plain_sampler.h, which computes the same definition by sorting everything.
//
// A draw, exactly (it is what makes a seed reproduce the same ids on every machine):
//  1. order: the ids by descending logit, ties to the lower id. w_i = sampling_weights(): e^((l_i - max) / T) in
//     float (runtime/sampling_weights.h), so the most likely token weighs 1.
//  2. candidates: the first top_k ids of the order (top_k > 0), then those with w_i >= min_p (min_p > 0): min-p is
//     relative to the most likely token, after temperature, as vLLM's.
//  3. total: the candidates in ascending id order, in blocks of kSampleBlock; each block's weights summed in double
//     in that order from 0, then the block sums likewise.
//  4. u: one uniform double in [0, 1), (generator() >> 11) * 2^-53; every non-greedy draw takes exactly one.
//  5. top_p < 1: the nucleus is the shortest run of candidates in the order whose weights, summed in double in that
//     order, reach top_p * total (all of them if none does); the draw is the first of the run whose running sum
//     exceeds u * (the run's sum), else its last. top_p == 1: the first block whose running sum of block sums
//     exceeds u * total, then in it the first candidate where that running sum before the block plus the block's
//     own running sum exceeds u * total; else the last candidate.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "runtime/token_order.h"

namespace dsv4 {

struct SamplingParams {
    bool greedy = true;
    float temperature = 1.0f;  // > 0 when not greedy
    float top_p = 1.0f;        // (0, 1]
    int64_t top_k = 0;         // 0: no limit
    float min_p = 0.0f;        // [0, 1]: after temperature, drop tokens less likely than min_p times the most likely
                               // one (vLLM / OpenAI-compatible servers); 0: off
    uint64_t seed = 0;
};

constexpr int64_t kSampleBlock = 1024;  // candidates per block of the sums (step 3)

// Throws dsv4::Error for parameters a user cannot mean (temperature <= 0 without --greedy, top_p outside (0, 1],
// min_p outside [0, 1]).
void validate_sampling(const SamplingParams& params);

// Step 4's uniform number.
inline double uniform_53(std::mt19937_64& generator) {
    return double(generator() >> 11) * 0x1p-53;
}

class Sampler {
  public:
    explicit Sampler(const SamplingParams& params);
    // A draw: step 4's uniform from the generator (a non-greedy draw).
    int32_t sample(const float* logits, int64_t vocab);
    // A draw with step 4's uniform given: one the caller took with next_uniform() (the engine takes it so that the
    // draw can be made where the logits are, Backend::draws_tokens, and the generator advances alike either way).
    int32_t sample(const float* logits, int64_t vocab, double u);
    double next_uniform() { return uniform_53(rng_); }

  private:
    template <typename Weight>
    void sum_blocks(int64_t n, Weight weight);  // step 3's block sums into block_sums_
    int32_t draw_in_blocks(const float* w, double u);
    int32_t draw_nucleus(const float* logits, float max_logit, const float* w, double total, double u);

    SamplingParams params_;
    std::mt19937_64 rng_;
    // Reused from token to token (a request samples every step).
    std::vector<float> weights_;
    std::vector<int32_t> candidates_;  // ascending ids; empty with all_candidates_
    bool all_candidates_ = true;
    std::vector<double> block_sums_;
    std::vector<int32_t> order_;  // the top-k ids in the order; the nucleus' candidates in the order
    TokenOrderScratch order_scratch_;
};

int32_t argmax(const float* logits, int64_t vocab);

}  // namespace dsv4
