// Next-token sampling from logits: greedy (argmax, ties to the lowest id) or temperature / top-k / min-p / top-p
// with a seeded generator, so a run is reproducible. Tested in tests/runtime/sampler_test.cpp, which also holds the
// plain sorting sampler every draw must equal (tests/runtime/sorting_sampler.h).
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

// Throws dsv4::Error for parameters a user cannot mean (temperature <= 0 without --greedy, top_p outside (0, 1],
// min_p outside [0, 1]).
void validate_sampling(const SamplingParams& params);

class Sampler {
public:
    explicit Sampler(const SamplingParams& params);
    int32_t sample(const float* logits, int64_t vocab);

private:
    SamplingParams params_;
    std::mt19937_64 rng_;
    // Reused from token to token (a request samples every step).
    TokenOrderScratch order_scratch_;
    std::vector<int32_t> ids_;
    std::vector<double> probs_;
};

int32_t argmax(const float* logits, int64_t vocab);

}  // namespace dsv4
