// Penalties and biases applied to a request's logits before its draw, with the OpenAI API's meaning and vLLM's
// order and arithmetic (every operation in float, as vLLM's float32 tensors):
//  1. logit_bias:          l[id] + bias                                  (OpenAI: added before sampling)
//  2. repetition_penalty:  for ids in the prompt or the output so far:  l > 0 ? l / r : l * r
//  3. frequency_penalty f, presence_penalty p, for ids in the output:   (l - f * count) - p
//  4. allowed_ids (vLLM's allowed_token_ids), when given: every other id -inf (EOS too, unless listed)
//  5. bad_words (vLLM's, as token sequences): a word's last id -inf where the output ends with the ids before it
// Logprobs stay those of the model's own logits (vLLM's default). Tested in tests/runtime/logit_adjust_test.cpp and,
// through the engine, tests/runtime/engine_test.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

namespace dsv4 {

struct LogitAdjustments {
    float repetition_penalty = 1.0f;                    // > 0; 1: off
    float frequency_penalty = 0.0f;                     // [-2, 2]; 0: off
    float presence_penalty = 0.0f;                      // [-2, 2]; 0: off
    std::vector<std::pair<int32_t, float>> logit_bias;  // ids in the vocabulary, biases in [-100, 100]
    std::vector<int32_t> allowed_ids;                   // sorted, distinct ids in the vocabulary; empty: all
    std::vector<std::vector<int32_t>> bad_words;        // non-empty id sequences in the vocabulary

    bool any() const {
        return repetition_penalty != 1.0f || frequency_penalty != 0.0f || presence_penalty != 0.0f ||
               !logit_bias.empty() || !allowed_ids.empty() || !bad_words.empty();
    }
};

// Throws dsv4::Error with a sentence for the client: a value out of its range, a bias on an id outside [0, vocab).
void validate_adjustments(const LogitAdjustments& a, int64_t vocab);

// What the penalties look at: the prompt's ids (the repetition penalty only) and each output id's count. Made
// for adjustments that are off (LogitAdjustments::any() false), it keeps nothing and changes nothing.
class TokenHistory {
  public:
    TokenHistory() = default;
    TokenHistory(const LogitAdjustments& a, std::span<const int32_t> prompt);
    void add_output(int32_t id) {
        if (on_) ++output_counts_[id];
        if (keep_output_) output_.push_back(id);
    }

    // `out` = `logits` [vocab] adjusted (out may be logits itself).
    void apply(const LogitAdjustments& a, const float* logits, float* out, int64_t vocab) const;
    // The row a draw reads: `logits` itself when the adjustments are off, else their adjusted copy in `scratch`.
    const float* row_for_draw(const LogitAdjustments& a, const float* logits, int64_t vocab,
                              std::vector<float>& scratch) const;

  private:
    bool on_ = false, keep_output_ = false;  // keep_output_: with bad words, whose prefixes are matched
    std::vector<int32_t> prompt_ids_;        // distinct, with the repetition penalty on
    std::vector<int32_t> output_;            // the output ids in order, with bad words
    std::unordered_map<int32_t, int32_t> output_counts_;
};

}  // namespace dsv4
