// LogitAdjustments: see logit_adjust.h. Only the ids a request names or has seen change, so a row is one copy and a
// few writes.
#include "runtime/logit_adjust.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace dsv4 {

void validate_adjustments(const LogitAdjustments& a, int64_t vocab) {
    DSV4_CHECK(a.repetition_penalty > 0.0f && std::isfinite(a.repetition_penalty),
               "'repetition_penalty' must be a positive number (1: off), got {}", a.repetition_penalty);
    DSV4_CHECK(a.frequency_penalty >= -2.0f && a.frequency_penalty <= 2.0f,
               "'frequency_penalty' must be in [-2, 2], got {}", a.frequency_penalty);
    DSV4_CHECK(a.presence_penalty >= -2.0f && a.presence_penalty <= 2.0f,
               "'presence_penalty' must be in [-2, 2], got {}", a.presence_penalty);
    for (const auto& [id, bias] : a.logit_bias) {
        DSV4_CHECK(id >= 0 && id < vocab, "'logit_bias' names token {}, outside the vocabulary [0, {})", id, vocab);
        DSV4_CHECK(bias >= -100.0f && bias <= 100.0f, "'logit_bias' values must be in [-100, 100], got {} for token {}",
                   bias, id);
    }
    for (size_t i = 0; i < a.allowed_ids.size(); ++i) {
        const int32_t id = a.allowed_ids[i];
        DSV4_CHECK(id >= 0 && id < vocab, "'allowed_token_ids' names token {}, outside the vocabulary [0, {})", id,
                   vocab);
        DSV4_CHECK(i == 0 || id > a.allowed_ids[i - 1], "allowed ids must be sorted and distinct");
    }
    for (const std::vector<int32_t>& word : a.bad_words) {
        DSV4_CHECK(!word.empty(), "a bad word has no tokens");
        for (const int32_t id : word)
            DSV4_CHECK(id >= 0 && id < vocab, "a bad word's token {} is outside the vocabulary [0, {})", id, vocab);
    }
}

TokenHistory::TokenHistory(const LogitAdjustments& a, std::span<const int32_t> prompt)
    : on_(a.any()), keep_output_(!a.bad_words.empty()) {
    if (a.repetition_penalty == 1.0f) return;
    prompt_ids_.assign(prompt.begin(), prompt.end());
    std::sort(prompt_ids_.begin(), prompt_ids_.end());
    prompt_ids_.erase(std::unique(prompt_ids_.begin(), prompt_ids_.end()), prompt_ids_.end());
}

void TokenHistory::apply(const LogitAdjustments& a, const float* logits, float* out, int64_t vocab) const {
    if (out != logits) std::memcpy(out, logits, sizeof(float) * size_t(vocab));
    for (const auto& [id, bias] : a.logit_bias) out[id] += bias;
    if (a.repetition_penalty != 1.0f) {
        const float r = a.repetition_penalty;
        auto penalize = [&](int32_t id) { out[id] = out[id] > 0.0f ? out[id] / r : out[id] * r; };
        // An id in both the prompt and the output is penalized once.
        for (const int32_t id : prompt_ids_) penalize(id);
        for (const auto& [id, count] : output_counts_)
            if (!std::binary_search(prompt_ids_.begin(), prompt_ids_.end(), id)) penalize(id);
    }
    if (a.frequency_penalty != 0.0f || a.presence_penalty != 0.0f)
        for (const auto& [id, count] : output_counts_)
            out[id] = (out[id] - a.frequency_penalty * float(count)) - a.presence_penalty;
    if (!a.allowed_ids.empty()) {  // the ids between two allowed ones go to -inf
        constexpr float kNegInf = -std::numeric_limits<float>::infinity();
        int64_t next = 0;
        for (const int32_t id : a.allowed_ids) {
            std::fill(out + next, out + id, kNegInf);
            next = int64_t(id) + 1;
        }
        std::fill(out + next, out + vocab, kNegInf);
    }
    for (const std::vector<int32_t>& word : a.bad_words) {  // the word's last id, where the output ends with the rest
        const size_t before = word.size() - 1;
        if (output_.size() >= before && std::equal(word.begin(), word.end() - 1, output_.end() - before))
            out[word.back()] = -std::numeric_limits<float>::infinity();
    }
}

const float* TokenHistory::row_for_draw(const LogitAdjustments& a, const float* logits, int64_t vocab,
                                        std::vector<float>& scratch) const {
    if (!on_) return logits;
    scratch.resize(size_t(vocab));
    apply(a, logits, scratch.data(), vocab);
    return scratch.data();
}

}  // namespace dsv4
