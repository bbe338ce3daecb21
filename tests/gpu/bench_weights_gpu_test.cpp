// dsv4 bench's routed experts generated on the GPU (BenchWeights with ExpertBytes::kDevice and
// CudaOptions::random_experts_seed) against the same weights made on the host and uploaded (ExpertBytes::kHost): on
// the tiny preset with 2 layers, a prefill of 20 random ids (every position's logits) and 4 greedy decode steps give
// bitwise-equal logits. Without the option, experts without host bytes are refused with their name.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/mix64.h"
#include "core/thread_pool.h"
#include "gpu_test_util.h"
#include "model/bench_weights.h"
#include "model/synthetic_checkpoint.h"
#include "runtime/cuda/cuda_model.h"

namespace dsv4 {
namespace {

constexpr uint64_t kSeed = 5;

ModelConfig tiny() {
    ModelConfig c = synthetic_preset("tiny", 2);
    c.num_mtp_layers = 0;  // BenchWeights makes no MTP weights; the forward does not run them
    c.mtp_compress_ratios.clear();
    return c;
}

std::unique_ptr<CudaModel> model(const ModelConfig& c, ModelWeights w, std::optional<uint64_t> random_experts_seed) {
    CudaOptions options;
    options.max_context = 512;
    options.max_chunk_tokens = 64;
    options.print_plan = false;
    options.random_experts_seed = random_experts_seed;
    return std::make_unique<CudaModel>(c, std::move(w), Numerics::kModel, options);
}

// Every logit of a 20-token prefill, then of 4 greedy decode steps.
std::vector<float> session(CudaModel& gpu) {
    const int64_t V = gpu.config().vocab_size;
    std::vector<int32_t> ids(20);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(mix64(kSeed + i) % uint64_t(V));
    SequenceState state = gpu.new_sequence();
    std::vector<float> out = gpu.forward(state, ids, true);
    int32_t next = int32_t(std::max_element(out.end() - V, out.end()) - (out.end() - V));
    for (int step = 0; step < 4; ++step) {
        const std::vector<float> l = gpu.forward(state, std::span<const int32_t>(&next, 1), false);
        out.insert(out.end(), l.begin(), l.end());
        next = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
    }
    return out;
}

TEST(GpuBenchWeights, ExpertsGeneratedOnTheGpuEqualHostExperts) {
    DSV4_REQUIRE_GPU();
    const ModelConfig c = tiny();
    const ExpertRange all{0, c.n_routed_experts};
    ThreadPool pool(0);
    BenchWeights host(kSeed, pool), device(kSeed, pool);
    const std::vector<float> want = session(*model(c, host.build(c, all, ExpertBytes::kHost), std::nullopt));
    const std::vector<float> got = session(*model(c, device.build(c, all, ExpertBytes::kDevice), kSeed));
    EXPECT_TRUE(std::all_of(want.begin(), want.end(), [](float x) { return std::isfinite(x); }));
    EXPECT_NE(*std::min_element(want.begin(), want.end()), *std::max_element(want.begin(), want.end()));
    gpu_test::expect_bitwise_f32("tiny, 2 layers: experts generated on the GPU vs uploaded from the host", got, want);
}

TEST(GpuBenchWeights, ExpertsWithoutBytesNeedTheSeed) {
    DSV4_REQUIRE_GPU();
    const ModelConfig c = tiny();
    ThreadPool pool(0);
    BenchWeights bench(kSeed, pool);
    try {
        model(c, bench.build(c, {0, c.n_routed_experts}, ExpertBytes::kDevice), std::nullopt);
        ADD_FAILURE() << "a model without routed-expert bytes and without random_experts_seed was built";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("layers.0.ffn.experts.0.w1.weight"), std::string::npos) << e.what();
    }
}

}  // namespace
}  // namespace dsv4
