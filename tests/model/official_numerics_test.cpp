// `model` numerics against DeepSeek's own reference code (shared/fixtures/official-numerics-a: FP8 weights, FP4
// experts, MTP layer, two shards): prefill then decode of the recorded greedy tokens; per-step logit cosine
// >= 0.999 and the same greedy tokens. Also chunk invariance in model numerics on the same checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>

#include "golden_io.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "runtime/sampler.h"

using namespace dsv4;
using namespace dsv4::testing;

namespace {

const std::string kFixture = std::string(DSV4_SHARED_DIR) + "/fixtures/official-numerics-a";

std::unique_ptr<CpuModel> load(Numerics numerics) {
    auto checkpoint = Checkpoint::open(kFixture);
    return std::make_unique<CpuModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                      numerics);
}

}  // namespace

TEST(OfficialNumerics, PrefillAndDecodeMatchDeepSeekReference) {
    if (!std::filesystem::exists(kFixture)) GTEST_SKIP() << "no shared fixture at " << kFixture;
    Golden golden(kFixture + "/golden.safetensors");
    const std::vector<int32_t> prompt = to_ids(golden.ints("input_ids"));
    const std::vector<int64_t> greedy = golden.ints("greedy_tokens");
    const std::vector<float> prefill_ref = golden.floats("prefill_last_logits");
    const std::vector<float> decode_ref = golden.floats("decode_logits");
    auto model = load(Numerics::kModel);
    const int64_t V = model->config().vocab_size;

    SequenceState state = model->new_sequence();
    std::vector<float> logits = model->forward(state, prompt, false);
    Comparison c = compare(logits.data(), prefill_ref.data(), static_cast<size_t>(V));
    std::printf("prefill: cosine %.6f, max|diff| %.4g (%.3g of max|logit|)\n", c.cosine, c.max_abs_diff, c.relative());
    EXPECT_FALSE(c.has_nan);
    EXPECT_GE(c.cosine, 0.999);
    EXPECT_EQ(argmax(logits.data(), V), greedy[0]);

    double worst_cosine = 1.0;
    for (size_t i = 0; i < greedy.size(); ++i) {
        int32_t token = int32_t(greedy[i]);
        logits = model->forward(state, std::span(&token, 1), false);
        c = compare(logits.data(), decode_ref.data() + i * static_cast<size_t>(V), static_cast<size_t>(V));
        worst_cosine = std::min(worst_cosine, c.cosine);
        std::printf("decode %2zu: cosine %.6f, max|diff| %.4g (%.3g of max|logit|)\n", i, c.cosine, c.max_abs_diff,
                    c.relative());
        EXPECT_FALSE(c.has_nan);
        EXPECT_GE(c.cosine, 0.999) << "decode step " << i;
        if (i + 1 < greedy.size()) EXPECT_EQ(argmax(logits.data(), V), greedy[i + 1]) << "decode step " << i;
    }
    std::printf("worst decode cosine %.6f\n", worst_cosine);
}

TEST(OfficialNumerics, ChunkedPrefillEqualsFullPrefill) {
    if (!std::filesystem::exists(kFixture)) GTEST_SKIP() << "no shared fixture at " << kFixture;
    Golden golden(kFixture + "/golden.safetensors");
    std::vector<int32_t> ids = to_ids(golden.ints("input_ids"));
    auto model = load(Numerics::kModel);
    const size_t V = static_cast<size_t>(model->config().vocab_size);

    SequenceState full_state = model->new_sequence();
    std::vector<float> full = model->forward(full_state, ids, true);
    // Chunks straddling the window (32), CSA windows (4) and the HCA window (128), with single-token steps.
    const std::vector<size_t> schedule = {37, 1, 1, 20, 69, 3, 1, 128, 5, 1, 1, 1, 2, 31, 74};
    SequenceState state = model->new_sequence();
    size_t offset = 0;
    double worst = 0;
    for (size_t n : schedule) {
        ASSERT_LE(offset + n, ids.size());
        std::vector<float> part = model->forward(state, std::span(ids).subspan(offset, n), true);
        Comparison c = compare(part.data(), full.data() + offset * V, n * V);
        worst = std::max(worst, c.max_abs_diff);
        offset += n;
    }
    ASSERT_EQ(offset, ids.size());
    std::printf("chunked vs full prefill, model numerics: max|diff| %.3g\n", worst);
    EXPECT_EQ(worst, 0.0) << "the CPU forward is deterministic per row, so chunking must not change a single bit";
}
