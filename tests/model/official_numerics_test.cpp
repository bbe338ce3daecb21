// `model` numerics against DeepSeek's own reference code (tests/fixtures/official-numerics-a: FP8 weights, FP4
// experts, MTP layer, two shards): prefill then decode of the recorded greedy tokens, per-step logit cosine and
// greedy tokens within the official implementation's own spread (see the thresholds below). Also chunk invariance
// in model numerics on the same checkpoint.
#include <gtest/gtest.h>

#include <cstdio>
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "fixture_paths.h"
#include "golden_io.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "runtime/sampler.h"

using namespace dsv4;
using namespace dsv4::testing;

namespace {

const std::string kFixture = test_fixtures::official_numerics_a();

std::unique_ptr<CpuModel> load(Numerics numerics) {
    auto checkpoint = Checkpoint::open(kFixture);
    return std::make_unique<CpuModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                      numerics);
}

}  // namespace

// Thresholds come from the official implementation's own spread on this fixture (docs/numerics.md, "How closely
// model numerics can match the official reference"): DeepSeek's model.py run with ulp-level changes only (f32 vs
// f64 GEMM sums, RoPE table on CPU vs GPU) agrees with this golden at 0.997-0.9998 per step and falls to ~0.92 at
// one step where a router or indexer near-tie resolves the other way. The fixture's own ">= 0.999 on every step"
// is below that noise floor. Semantic or rounding-point errors land far outside these bounds (q head norm in f32:
// 0.991 prefill; no P rounding: 0.92; normalized P rounding: 0.989; any missing QAT simulation: <= 0.92).
constexpr double kMedianCosine = 0.997;  // over prefill + 16 decode steps
constexpr double kStepCosine = 0.99;     // every step not decided by a flipped near-tie
constexpr int kMaxFlippedSteps = 1;      // steps below kStepCosine
constexpr double kFlippedCosine = 0.9;   // a flipped step still stays this close
// Greedy tokens must agree wherever the golden's own top-1/top-2 gap is at least this fraction of max|logit|
// (its decode step 6 has a gap of 0.18 %, a near-tie of the logits themselves; golden.json's logit_gap_rel_min).
constexpr double kDecisiveGap = 0.01;

// (top-1 - top-2) / max|logit| of a logit vector.
double relative_top_gap(const float* logits, int64_t vocab) {
    std::vector<float> v(logits, logits + vocab);
    std::partial_sort(v.begin(), v.begin() + 2, v.end(), std::greater<float>());
    float max_abs = 0;
    for (int64_t i = 0; i < vocab; ++i) max_abs = std::max(max_abs, std::fabs(logits[i]));
    return (v[0] - v[1]) / max_abs;
}

TEST(OfficialNumerics, PrefillAndDecodeMatchDeepSeekReference) {
    Golden golden(kFixture + "/golden.safetensors");
    const std::vector<int32_t> prompt = to_ids(golden.ints("input_ids"));
    const std::vector<int64_t> greedy = golden.ints("greedy_tokens");
    const std::vector<float> prefill_ref = golden.floats("prefill_last_logits");
    const std::vector<float> decode_ref = golden.floats("decode_logits");
    auto model = load(Numerics::kModel);
    const int64_t V = model->config().vocab_size;
    float router_margin = 0, index_margin = 0;  // smallest over layers, at the last position of the latest call
    model->set_observer([&](std::string_view name, int64_t, const float* data, int64_t rows, int64_t) {
        if (name == "ffn.router_margin") router_margin = std::min(router_margin, data[rows - 1]);
        if (name == "attn.index_margin") index_margin = std::min(index_margin, data[rows - 1]);
    });

    // Step 0 is the prefill (its argmax is greedy[0]); step i + 1 feeds greedy[i] (its argmax is greedy[i + 1]).
    SequenceState state = model->new_sequence();
    std::vector<double> cosines;
    int flipped = 0;
    for (size_t step = 0; step <= greedy.size(); ++step) {
        router_margin = index_margin = std::numeric_limits<float>::infinity();
        std::vector<float> logits;
        const float* ref = nullptr;
        if (step == 0) {
            logits = model->forward(state, prompt, false);
            ref = prefill_ref.data();
        } else {
            int32_t token = int32_t(greedy[step - 1]);
            logits = model->forward(state, std::span(&token, 1), false);
            ref = decode_ref.data() + (step - 1) * size_t(V);
        }
        Comparison c = compare(logits.data(), ref, size_t(V));
        cosines.push_back(c.cosine);
        const bool is_flipped = c.cosine < kStepCosine;
        const double gap = relative_top_gap(ref, V);
        const bool decisive = !is_flipped && gap >= kDecisiveGap && step < greedy.size();
        flipped += is_flipped;
        std::printf("step %2zu: cosine %.6f, max|diff| %.3g of max|logit|, golden top-2 gap %.4f, smallest margins: "
                    "router %.3g, indexer %.3g%s\n", step, c.cosine, c.relative(), gap, router_margin, index_margin,
                    is_flipped ? "  <- a near-tie resolved the other way" : (decisive ? "" : "  (token not decisive)"));
        ASSERT_FALSE(c.has_nan) << "step " << step;
        EXPECT_GE(c.cosine, kFlippedCosine) << "step " << step;
        if (decisive) {
            EXPECT_EQ(argmax(logits.data(), V), greedy[step]) << "step " << step;
        }
    }
    std::vector<double> sorted = cosines;
    std::sort(sorted.begin(), sorted.end());
    const double median = sorted[sorted.size() / 2];
    std::printf("median cosine %.6f, steps below %.2f: %d\n", median, kStepCosine, flipped);
    EXPECT_GE(median, kMedianCosine);
    EXPECT_LE(flipped, kMaxFlippedSteps);
}

TEST(OfficialNumerics, ChunkedPrefillEqualsFullPrefill) {
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
