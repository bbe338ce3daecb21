// `reference` numerics against transformers' DeepseekV4ForCausalLM in float32, on every fixture under
// tests/fixtures/ (made by tools/fixtures/make_hf_fixtures.py; see its README): full-prefill logits, logits
// through the state in the recorded mixed chunk schedule, and greedy tokens. Tolerance: 1e-4 x max|logit|.
// Also chunk invariance at split points (all of them on short fixtures): a split never changes a bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "fixture_paths.h"
#include "golden_io.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "runtime/sampler.h"

using namespace dsv4;
using namespace dsv4::testing;

namespace {

constexpr double kTolerance = 1e-4;  // of max|logit|, the bound for f32 against f32

std::vector<std::string> fixture_dirs() { return test_fixtures::transformers_fixtures(); }

class HfFixture : public ::testing::TestWithParam<std::string> {
protected:
    void SetUp() override {
        dir_ = test_fixtures::dir(GetParam());
        golden_ = std::make_unique<Golden>(dir_ + "/golden.safetensors");
        auto checkpoint = Checkpoint::open(dir_);
        model_ = std::make_unique<CpuModel>(checkpoint->config(),
                                            load_model_weights(checkpoint, checkpoint->config()), Numerics::kReference);
        ids_ = to_ids(golden_->ints("input_ids"));
        prefill_ = golden_->floats("prefill_logits");
        vocab_ = static_cast<size_t>(model_->config().vocab_size);
        ASSERT_EQ(prefill_.size(), ids_.size() * vocab_);
    }

    // Runs `schedule` chunk by chunk and checks every position against transformers' full prefill.
    void check_schedule(const std::vector<int64_t>& schedule, const char* what) {
        SequenceState state = model_->new_sequence();
        size_t offset = 0;
        Comparison worst;
        for (int64_t n : schedule) {
            std::vector<float> part = model_->forward(state, std::span(ids_).subspan(offset, static_cast<size_t>(n)), true);
            for (int64_t r = 0; r < n; ++r) {
                Comparison c = compare(part.data() + r * vocab_, prefill_.data() + (offset + r) * vocab_, vocab_);
                EXPECT_FALSE(c.has_nan) << what << " position " << offset + r;
                EXPECT_LE(c.relative(), kTolerance) << what << " position " << offset + r;
                if (c.relative() > worst.relative()) worst = c;
            }
            offset += static_cast<size_t>(n);
        }
        std::printf("%s %s: worst max|diff| %.3g = %.3g of max|logit| (cosine %.8f)\n", GetParam().c_str(), what,
                    worst.max_abs_diff, worst.relative(), worst.cosine);
    }

    std::string dir_;
    std::unique_ptr<Golden> golden_;
    std::unique_ptr<CpuModel> model_;
    std::vector<int32_t> ids_;
    std::vector<float> prefill_;
    size_t vocab_ = 0;
};

}  // namespace

TEST_P(HfFixture, FullPrefillMatchesTransformers) { check_schedule({int64_t(ids_.size())}, "full prefill"); }

TEST_P(HfFixture, MixedChunkScheduleMatchesTransformers) {
    std::vector<int64_t> schedule = golden_->ints("chunk_sizes");
    check_schedule(schedule, "mixed chunks");
}

TEST_P(HfFixture, GreedyTokensMatchTransformers) {
    const size_t prompt_len = static_cast<size_t>(golden_->ints("greedy_prompt_len").at(0));
    const std::vector<int64_t> expected = golden_->ints("greedy_tokens");
    std::vector<int32_t> prompt(ids_.begin(), ids_.begin() + long(prompt_len));
    SequenceState state = model_->new_sequence();
    std::vector<float> logits = model_->forward(state, prompt, false);
    std::vector<int64_t> got;
    for (size_t i = 0; i < expected.size(); ++i) {
        int32_t next = argmax(logits.data(), int64_t(vocab_));
        got.push_back(next);
        logits = model_->forward(state, std::span(&next, 1), false);
    }
    EXPECT_EQ(got, expected);
}

// Every split of sequences up to 160 tokens; on longer ones every split within 2 tokens of a window boundary or
// a compressor window of the fixture plus an even sample of the rest (the full sweep of the 300-token fixtures
// takes minutes).
std::vector<size_t> split_points(size_t n, const ModelConfig& c) {
    std::vector<int64_t> periods = c.compress_ratios;
    periods.push_back(c.sliding_window);
    std::vector<size_t> splits;
    const size_t stride = n <= 160 ? 1 : 7;
    for (size_t s = 1; s < n; ++s) {
        bool near_boundary = false;
        for (int64_t m : periods)
            if (m > 0) near_boundary |= (s % size_t(m)) <= 1 || (s % size_t(m)) == size_t(m) - 1;
        if (s % stride == 0 || near_boundary) splits.push_back(s);
    }
    return splits;
}

TEST(HfFixtures, AreCommitted) {
    EXPECT_GE(fixture_dirs().size(), 7u) << "tests/fixtures/ lost its golden fixtures";
}

TEST_P(HfFixture, SplitPointsAreBitwiseChunkInvariant) {
    SequenceState full_state = model_->new_sequence();
    const std::vector<float> full = model_->forward(full_state, ids_, true);
    const size_t n = ids_.size();
    for (size_t split : split_points(n, model_->config())) {
        SequenceState state = model_->new_sequence();
        std::vector<float> a = model_->forward(state, std::span(ids_).subspan(0, split), true);
        std::vector<float> b = model_->forward(state, std::span(ids_).subspan(split), true);
        a.insert(a.end(), b.begin(), b.end());
        ASSERT_EQ(a, full) << "splitting at " << split << " changed the logits";
    }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFixture, ::testing::ValuesIn(fixture_dirs()),
                         [](const auto& info) {
                             std::string name = info.param;
                             std::replace_if(name.begin(), name.end(), [](char c) { return !std::isalnum(c); }, '_');
                             return name;
                         });
GTEST_ALLOW_UNINSTANTIATED_PARAMETERIZED_TEST(HfFixture);
