// Draws made where the logits are (CudaModel with BatchItem::draw, kernels/cuda/sampling) against the host Sampler
// on the same step's logits: two models of the same weights run the same six sequences; one returns every logit,
// the other draws for four of them (greedy, temperature, min-p, a flat temperature) and returns the logits of two
// (one with every position's), through a staging buffer of one row so the rows left to copy go in slices around the
// drawn ones. A prefill step (pieces enqueued directly), then decode steps (graph replay): every drawn id is the
// host Sampler's for the other model's logits and the same uniform, and the returned logits are the same bits.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/sampler.h"

namespace dsv4 {
namespace {

using cuda_fixtures::fixture_dir;

SamplingParams sampling(bool greedy, float temperature, float min_p) {
    SamplingParams p;
    p.greedy = greedy;
    p.temperature = temperature;
    p.min_p = min_p;
    return p;
}

TEST(CudaDraw, DrawsEqualTheHostSamplerOnTheSameLogits) {
    DSV4_REQUIRE_GPU();
    auto checkpoint = Checkpoint::open(fixture_dir("hf-tiny-hc2-hca16"));
    const ModelConfig& config = checkpoint->config();
    const int64_t V = config.vocab_size;
    CudaOptions options;
    options.max_sequences = 6;
    options.max_context = 64;
    options.print_plan = false;
    CudaModel logits_model(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    options.logit_staging_bytes = sizeof(float) * size_t(V);
    CudaModel drawing_model(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    ASSERT_TRUE(drawing_model.draws_tokens());

    // Sequence i: its prompt, its draw's parameters (none: its logits are returned) and its generator.
    const std::vector<std::vector<int32_t>> prompts = {{5, 6, 7}, {9},          {3, 4, 5, 6, 7, 8, 9, 10},
                                                       {11, 12},  {20, 21, 22}, {30, 31, 32, 33}};
    const std::vector<std::optional<SamplingParams>> params = {
        sampling(true, 1.0f, 0.0f),  sampling(false, 0.7f, 0.0f), std::nullopt,
        sampling(false, 1.0f, 0.1f), sampling(false, 5.0f, 0.0f), std::nullopt};
    const size_t n = prompts.size();
    std::vector<std::mt19937_64> generators;
    for (size_t i = 0; i < n; ++i) generators.emplace_back(1000 + i);
    std::vector<SequenceState> plain, drawn;
    for (size_t i = 0; i < n; ++i)
        plain.push_back(logits_model.new_sequence()), drawn.push_back(drawing_model.new_sequence());

    std::vector<std::vector<int32_t>> inputs = prompts;
    int64_t draws = 0;
    for (int step = 0; step < 4; ++step) {
        std::vector<BatchItem> plain_items, drawn_items;
        std::vector<TokenDraw> token_draws(n);
        for (size_t i = 0; i < n; ++i) {
            const bool all_logits = step == 0 && i == 5;
            plain_items.push_back({&plain[i], inputs[i], all_logits});
            BatchItem item{&drawn[i], inputs[i], all_logits};
            if (params[i]) {
                token_draws[i].greedy = params[i]->greedy;
                token_draws[i].temperature = params[i]->temperature;
                token_draws[i].min_p = params[i]->min_p;
                token_draws[i].u = params[i]->greedy ? 0.0 : uniform_53(generators[i]);
                item.draw = &token_draws[i];
            }
            drawn_items.push_back(item);
        }
        const std::vector<std::vector<float>> want = logits_model.forward_batch(plain_items);
        const std::vector<std::vector<float>> got = drawing_model.forward_batch(drawn_items);
        ASSERT_EQ(got.size(), n);
        for (size_t i = 0; i < n; ++i) {
            const std::string what = "step " + std::to_string(step) + ", sequence " + std::to_string(i);
            const std::vector<float>& row = want[i];
            const float* last = row.data() + row.size() - size_t(V);
            int32_t next = 0;
            if (params[i]) {
                EXPECT_TRUE(got[i].empty()) << what << ": a drawn item returns no logits";
                const int32_t host = Sampler(*params[i]).sample(last, V, token_draws[i].u);
                EXPECT_EQ(token_draws[i].id, host) << what;
                next = token_draws[i].id;
                ++draws;
            } else {
                gpu_test::expect_bitwise_f32(what + " logits", got[i], row);
                next = argmax(last, V);
            }
            inputs[i] = {next};
        }
    }
    std::printf("[ exact    ] %lld GPU draws (prefill and decode steps) equal the host Sampler's\n", (long long)draws);
}

// A draw is refused where it cannot be made: with the logits of every position, or on a rank whose logits nobody
// reads (a follower).
TEST(CudaDraw, RefusesADrawItCannotMake) {
    DSV4_REQUIRE_GPU();
    auto checkpoint = Checkpoint::open(fixture_dir("hf-tiny-hc2-hca16"));
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_sequences = 2;
    options.max_context = 64;
    options.print_plan = false;
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    SequenceState a = gpu.new_sequence();
    const std::vector<int32_t> ids = {5, 6};
    TokenDraw draw;
    EXPECT_THROW(gpu.forward_batch(std::vector<BatchItem>{{&a, ids, true, &draw}}), Error);
    EXPECT_EQ(a.position, 0) << "a refused batch advances nothing";
    options.expert_parallel.host_logits = false;
    CudaModel follower(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    EXPECT_FALSE(follower.draws_tokens());
    SequenceState b = follower.new_sequence();
    EXPECT_THROW(follower.forward_batch(std::vector<BatchItem>{{&b, ids, false, &draw}}), Error);
    EXPECT_EQ(b.position, 0);
}

}  // namespace
}  // namespace dsv4
