// The small-shape models of small_shapes.h on the CPU backend in `model` numerics: the config reader accepts what
// the synthetic writer wrote (the same ModelConfig back), the forward runs without NaN or inf, and the mixed chunk
// schedule gives the full prefill's logits bit for bit. The GPU backend is held to this CPU on the same models in
// tests/gpu/cuda_model_test.cpp and cuda_layer_test.cpp (SmallShapes instances).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "model/small_shapes.h"
#include "model/synthetic_checkpoint.h"

namespace dsv4 {
namespace {

class SmallShape : public ::testing::TestWithParam<std::string> {};

TEST_P(SmallShape, CpuModelNumericsRunsAndIsChunkInvariant) {
    const ModelConfig want = small_shapes::config(small_shapes::shape(GetParam()));
    auto checkpoint = Checkpoint::open(small_shapes::checkpoint_dir(GetParam()));
    const ModelConfig& config = checkpoint->config();
    EXPECT_EQ(hub_config_json(config), hub_config_json(want)) << "the config reader gives back another config";
    CpuModel cpu(config, load_model_weights(checkpoint, config), Numerics::kModel);
    const std::vector<int32_t> ids = small_shapes::ids();

    SequenceState whole = cpu.new_sequence();
    const std::vector<float> full = cpu.forward(whole, ids, true);
    SequenceState pieces = cpu.new_sequence();
    std::vector<float> chunked;
    int64_t at = 0;
    for (int64_t n : small_shapes::schedule()) {
        const std::vector<float> part = cpu.forward(pieces, std::span(ids).subspan(size_t(at), size_t(n)), true);
        chunked.insert(chunked.end(), part.begin(), part.end());
        at += n;
    }
    ASSERT_EQ(at, int64_t(ids.size()));
    ASSERT_EQ(full.size(), ids.size() * size_t(config.vocab_size));
    int64_t non_finite = 0;
    float max_abs = 0.0f;
    for (float v : full) {
        non_finite += !std::isfinite(v);
        max_abs = std::max(max_abs, std::fabs(v));
    }
    EXPECT_EQ(non_finite, 0) << GetParam();
    EXPECT_GT(max_abs, 0.0f) << GetParam() << ": all logits zero";
    ASSERT_EQ(chunked.size(), full.size());
    EXPECT_EQ(std::memcmp(chunked.data(), full.data(), full.size() * sizeof(float)), 0)
        << GetParam() << ": the chunk schedule changes the logits";
}

INSTANTIATE_TEST_SUITE_P(SmallShapes, SmallShape, ::testing::ValuesIn(small_shapes::names()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace dsv4
