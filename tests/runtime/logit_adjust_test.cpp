// LogitAdjustments (runtime/logit_adjust.h) on hand-computed rows: the bias first, the repetition penalty once per id
// seen in the prompt or the output (positive logits divided, negative ones multiplied), then the frequency and
// presence penalties of the output's ids; every other id untouched; the ranges a client is held to.
#include "runtime/logit_adjust.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "core/error.h"

namespace dsv4 {
namespace {

TEST(LogitAdjust, EachAdjustmentAsDefined) {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 4.0f, 0.0f, -3.0f, 1.0f, 6.0f, 2.5f, -1.0f};
    LogitAdjustments a;
    a.logit_bias = {{5, 3.0f}, {9, 2.0f}};
    a.repetition_penalty = 2.0f;
    a.frequency_penalty = 0.5f;
    a.presence_penalty = 0.25f;
    const std::vector<int32_t> prompt = {1, 2, 9, 1};
    TokenHistory h(a, prompt);
    for (int32_t id : {2, 3, 3, 7}) h.add_output(id);
    std::vector<float> out(logits.size());
    h.apply(a, logits.data(), out.data(), int64_t(logits.size()));
    std::vector<float> want = logits;
    want[5] = -3.0f + 3.0f;                       // bias alone: 0 (not seen)
    want[9] = (-1.0f + 2.0f) / 2.0f;              // bias, then the prompt's repetition penalty: 1 / 2
    want[1] = 2.0f / 2.0f;                        // prompt: positive, divided
    want[2] = (-1.0f * 2.0f - 0.5f * 1) - 0.25f;  // prompt and output: penalized once, then one output
    want[3] = (4.0f / 2.0f - 0.5f * 2) - 0.25f;   // output twice
    want[7] = (6.0f / 2.0f - 0.5f * 1) - 0.25f;   // output once
    EXPECT_EQ(out, want);

    std::vector<float> in_place = logits;  // out may be the row itself
    h.apply(a, in_place.data(), in_place.data(), int64_t(logits.size()));
    EXPECT_EQ(in_place, want);
}

// allowed_ids: every other id -inf, the allowed ones as the other adjustments leave them.
TEST(LogitAdjust, AllowedIdsLeaveOnlyThem) {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 4.0f, 0.0f, -3.0f};
    LogitAdjustments a;
    a.allowed_ids = {1, 2, 5};
    a.logit_bias = {{2, 1.0f}, {3, 9.0f}};
    EXPECT_TRUE(a.any());
    TokenHistory h(a, std::vector<int32_t>{0});
    std::vector<float> out(logits.size());
    h.apply(a, logits.data(), out.data(), int64_t(logits.size()));
    const float inf = std::numeric_limits<float>::infinity();
    EXPECT_EQ(out, (std::vector<float>{-inf, 2.0f, 0.0f, -inf, -inf, -3.0f}));
    EXPECT_NO_THROW(validate_adjustments(a, 6));
    a.allowed_ids = {1, 6};
    EXPECT_THROW(validate_adjustments(a, 6), Error);
    a.allowed_ids = {2, 1};
    EXPECT_THROW(validate_adjustments(a, 6), Error);
}

// bad_words: a one-id word is always banned; a longer word's last id only where the output ends with its others.
TEST(LogitAdjust, BadWordsBanTheirLastIdAfterTheirStart) {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 4.0f, 0.0f, -3.0f};
    LogitAdjustments a;
    a.bad_words = {{4}, {1, 2, 3}, {2, 5}};
    TokenHistory h(a, std::vector<int32_t>{1, 2});  // the prompt does not count
    const float inf = std::numeric_limits<float>::infinity();
    auto row = [&] {
        std::vector<float> out(logits.size());
        h.apply(a, logits.data(), out.data(), int64_t(logits.size()));
        return out;
    };
    EXPECT_EQ(row(), (std::vector<float>{0.5f, 2.0f, -1.0f, 4.0f, -inf, -3.0f}));
    h.add_output(1);
    EXPECT_EQ(row(), (std::vector<float>{0.5f, 2.0f, -1.0f, 4.0f, -inf, -3.0f}));
    h.add_output(2);  // the output ends with 1, 2 (word 2's start) and with 2 (word 3's)
    EXPECT_EQ(row(), (std::vector<float>{0.5f, 2.0f, -1.0f, -inf, -inf, -inf}));
    h.add_output(0);
    EXPECT_EQ(row(), (std::vector<float>{0.5f, 2.0f, -1.0f, 4.0f, -inf, -3.0f}));
    a.bad_words = {{}};
    EXPECT_THROW(validate_adjustments(a, 6), Error);
    a.bad_words = {{1, 6}};
    EXPECT_THROW(validate_adjustments(a, 6), Error);
}

TEST(LogitAdjust, OffIsTheRowItself) {
    const std::vector<float> logits = {0.5f, -2.0f, 3.0f};
    LogitAdjustments a;
    EXPECT_FALSE(a.any());
    TokenHistory h(a, std::vector<int32_t>{0, 1});
    h.add_output(2);
    std::vector<float> out(3);
    h.apply(a, logits.data(), out.data(), 3);
    EXPECT_EQ(out, logits);
}

TEST(LogitAdjust, RangesAreChecked) {
    auto with = [](auto set) {
        LogitAdjustments a;
        set(a);
        return a;
    };
    EXPECT_NO_THROW(
        validate_adjustments(with([](auto& a) { a.presence_penalty = -2.0f, a.frequency_penalty = 2.0f; }), 10));
    EXPECT_THROW(validate_adjustments(with([](auto& a) { a.presence_penalty = 2.5f; }), 10), Error);
    EXPECT_THROW(validate_adjustments(with([](auto& a) { a.frequency_penalty = -2.01f; }), 10), Error);
    EXPECT_THROW(validate_adjustments(with([](auto& a) { a.repetition_penalty = 0.0f; }), 10), Error);
    EXPECT_THROW(validate_adjustments(with([](auto& a) { a.logit_bias = {{10, 1.0f}}; }), 10), Error);
    EXPECT_THROW(validate_adjustments(with([](auto& a) { a.logit_bias = {{3, 100.5f}}; }), 10), Error);
    EXPECT_NO_THROW(validate_adjustments(with([](auto& a) { a.logit_bias = {{9, -100.0f}}; }), 10));
}

}  // namespace
}  // namespace dsv4
