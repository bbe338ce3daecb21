// CudaModel against CpuModel end to end, in `model` numerics, on every fixture (tests/fixtures/* and, when present,
// DSV4_SHARED_DIR/fixtures/official-numerics-a). What the logits can show is limited: on these random tiny models
// ulp-level differences of f32 summation order are amplified by FP8 activation quantization, the KV / indexer round
// trips and the top-k choices and compound across layers (docs/numerics.md, "GPU vs CPU"), so GPU-vs-CPU logits
// are printed as a report, not bounded; that every block computes the CPU's function is proven by teacher forcing
// in cuda_layer_test.cpp. Asserted here is only what that noise cannot move: no NaN, bitwise chunk invariance of
// the GPU path itself, and the greedy token wherever the CPU's choice is clear (top-1/top-2 gap >= 1 % of
// max|logit|, no router or indexer near-tie recorded).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "model/golden_io.h"
#include "runtime/cuda/cuda_model.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using cuda_fixtures::fixture_dir;
using testing::compare;
using testing::Comparison;
using testing::Golden;

constexpr int kGreedySteps = 16;
// A greedy step is asserted while the CPU's choice is clear: its top-1/top-2 gap at least this share of
// max|logit|, and no router / indexer margin below kNearTie recorded so far (a near-tie can send the GPU's state
// elsewhere, see cuda_layer_test.cpp).
constexpr double kClearGap = 0.01;
constexpr float kNearTie = 1e-3f;

// Logits of one run plus, per position, the smallest router / indexer margin over the layers.
struct Logits {
    std::vector<float> logits;
    std::vector<float> router, index;
};

class Recorder {
  public:
    // With `margins`, an observer collects the router / indexer margins (the CPU runs; the GPU runs go without an
    // observer, the path that never synchronizes).
    Recorder(Backend& model, bool margins) : model_(model), margins_(margins) {
        if (!margins_) return;
        model_.set_observer([this](std::string_view name, int64_t, const float* data, int64_t rows, int64_t) {
            std::vector<float>* into = name == "ffn.router_margin"   ? &run_.router
                                       : name == "attn.index_margin" ? &run_.index
                                                                     : nullptr;
            if (!into) return;
            if (int64_t(into->size()) < offset_ + rows)
                into->resize(size_t(std::max<int64_t>(offset_ + rows, 0)), kInf);
            for (int64_t r = std::max<int64_t>(0, -offset_); r < rows; ++r)
                (*into)[size_t(offset_ + r)] = std::min((*into)[size_t(offset_ + r)], data[r]);
        });
    }
    ~Recorder() {
        if (margins_) model_.set_observer(nullptr);
    }

    // Feeds ids in the given chunks; keeps all logits.
    Logits chunks(const std::vector<int32_t>& ids, const std::vector<int64_t>& schedule) {
        run_ = Logits{};
        SequenceState state = model_.new_sequence();
        offset_ = 0;
        for (int64_t n : schedule) {
            std::vector<float> part = model_.forward(state, std::span(ids).subspan(size_t(offset_), size_t(n)), true);
            run_.logits.insert(run_.logits.end(), part.begin(), part.end());
            offset_ += n;
        }
        return run_;
    }

    // Greedy decoding from `prompt`: the tokens and the logits each was taken from; margins per step (the
    // prompt's last position is step 0).
    Logits greedy(const std::vector<int32_t>& prompt, std::vector<int32_t>& tokens) {
        run_ = Logits{};
        const int64_t V = model_.config().vocab_size;
        SequenceState state = model_.new_sequence();
        offset_ = -int64_t(prompt.size()) + 1;  // margins of the prompt's last row land at index 0
        std::vector<float> logits = model_.forward(state, prompt, false);
        for (int step = 0; step < kGreedySteps; ++step) {
            run_.logits.insert(run_.logits.end(), logits.begin(), logits.end());
            const int32_t next = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            tokens.push_back(next);
            if (step + 1 == kGreedySteps) break;
            offset_ = step + 1;
            logits = model_.forward(state, std::span(&next, 1), false);
        }
        (void)V;
        return run_;
    }

  private:
    static constexpr float kInf = std::numeric_limits<float>::infinity();
    Backend& model_;
    bool margins_;
    Logits run_;
    int64_t offset_ = 0;
};

float smallest_up_to(const std::vector<float>& v, size_t p) {
    float m = std::numeric_limits<float>::infinity();
    for (size_t i = 0; i <= p && i < v.size(); ++i) m = std::min(m, v[i]);
    return m;
}

// Per-position GPU vs CPU, printed (the worst position and how many miss cosine 0.9999 / 1 % of max|logit|, with
// the CPU's smallest margins there); asserts only that no logit is NaN.
void report_close(const std::string& what, const Logits& gpu, const Logits& cpu, int64_t V) {
    ASSERT_EQ(gpu.logits.size(), cpu.logits.size()) << what;
    const size_t rows = cpu.logits.size() / size_t(V);
    double worst_cos = 1, worst_rel = 0;
    size_t at_cos = 0, at_rel = 0, misses = 0;
    for (size_t p = 0; p < rows; ++p) {
        const Comparison c = compare(gpu.logits.data() + p * V, cpu.logits.data() + p * V, size_t(V));
        ASSERT_FALSE(c.has_nan) << what << " position " << p;
        if (c.cosine < worst_cos) worst_cos = c.cosine, at_cos = p;
        if (c.relative() > worst_rel) worst_rel = c.relative(), at_rel = p;
        misses += c.cosine < 0.9999 || c.relative() > 0.01;
    }
    std::printf(
        "[ gpu vs cpu] %-40s %zu positions: worst cosine %.7f (position %zu; CPU margins up to there: router %.3g "
        "indexer %.3g), worst max|diff| %.3g of max|logit| (position %zu), %zu positions below cosine 0.9999 or "
        "above 1 %%\n",
        what.c_str(), rows, worst_cos, at_cos, smallest_up_to(cpu.router, at_cos), smallest_up_to(cpu.index, at_cos),
        worst_rel, at_rel, misses);
}

class CudaModelFixture : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        DSV4_REQUIRE_GPU();
        dir_ = fixture_dir(GetParam());
        if (!fs::exists(dir_ + "/golden.safetensors")) GTEST_SKIP() << "no fixture at " << dir_;
        golden_ = std::make_unique<Golden>(dir_ + "/golden.safetensors");
        ids_ = testing::to_ids(golden_->ints("input_ids"));
        auto checkpoint = Checkpoint::open(dir_);
        const ModelConfig& config = checkpoint->config();
        cpu_ = std::make_unique<CpuModel>(config, load_model_weights(checkpoint, config), Numerics::kModel);
        CudaOptions options;
        options.max_context = 1024;
        options.max_chunk_tokens = 128;  // the longer chunks run as several pieces
        gpu_ = std::make_unique<CudaModel>(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    }

    std::string dir_;
    std::unique_ptr<Golden> golden_;
    std::vector<int32_t> ids_;
    std::unique_ptr<CpuModel> cpu_;
    std::unique_ptr<CudaModel> gpu_;
};

TEST_P(CudaModelFixture, FullPrefillReport) {
    const int64_t V = cpu_->config().vocab_size, n = int64_t(ids_.size());
    const Logits cpu = Recorder(*cpu_, true).chunks(ids_, {n});
    const Logits gpu = Recorder(*gpu_, false).chunks(ids_, {n});
    report_close(GetParam() + " full prefill", gpu, cpu, V);
}

// The GPU path is chunk-invariant bitwise (every output row computed the same way whatever the piece length:
// docs/numerics.md, "Chunk invariance"); GPU vs CPU under the schedule is a report.
TEST_P(CudaModelFixture, ChunkScheduleIsBitwiseChunkInvariant) {
    const int64_t V = cpu_->config().vocab_size, n = int64_t(ids_.size());
    const std::vector<int64_t> chunks = cuda_fixtures::chunk_schedule(*golden_);
    int64_t total = 0;
    for (int64_t c : chunks) total += c;
    ASSERT_EQ(total, n);
    const Logits cpu = Recorder(*cpu_, true).chunks(ids_, chunks);
    const Logits gpu = Recorder(*gpu_, false).chunks(ids_, chunks);
    report_close(GetParam() + " chunk schedule", gpu, cpu, V);
    const Logits gpu_full = Recorder(*gpu_, false).chunks(ids_, {n});
    ASSERT_EQ(gpu.logits.size(), gpu_full.logits.size());
    size_t differ = 0, first = 0;
    for (size_t i = gpu.logits.size(); i-- > 0;)
        if (float_bits(gpu.logits[i]) != float_bits(gpu_full.logits[i])) ++differ, first = i;
    EXPECT_EQ(differ, 0u) << GetParam() << ": GPU chunked vs full prefill, first difference at position "
                          << first / size_t(V);
}

TEST_P(CudaModelFixture, GreedyTokensMatchCpuWhereClear) {
    const int64_t V = cpu_->config().vocab_size;
    const int64_t prompt_len =
        golden_->has("greedy_prompt_len") ? golden_->ints("greedy_prompt_len")[0] : int64_t(ids_.size());
    const std::vector<int32_t> prompt(ids_.begin(), ids_.begin() + prompt_len);
    std::vector<int32_t> cpu_tokens, gpu_tokens;
    const Logits cpu = Recorder(*cpu_, true).greedy(prompt, cpu_tokens);
    const Logits gpu = Recorder(*gpu_, false).greedy(prompt, gpu_tokens);
    int agree = 0, clear = 0;
    while (agree < kGreedySteps && cpu_tokens[size_t(agree)] == gpu_tokens[size_t(agree)]) ++agree;
    // The clear steps: from the first, while the CPU's gap stays >= kClearGap and no near-tie has been recorded.
    for (; clear < kGreedySteps; ++clear) {
        std::vector<float> row(cpu.logits.begin() + clear * V, cpu.logits.begin() + (clear + 1) * V);
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        float max_abs = 0;
        for (float v : row) max_abs = std::max(max_abs, std::fabs(v));
        const double gap = (row[0] - row[1]) / std::max(max_abs, 1e-30f);
        const float tie = std::min(smallest_up_to(cpu.router, size_t(clear)), smallest_up_to(cpu.index, size_t(clear)));
        if (gap < kClearGap || tie < kNearTie) {
            std::printf("  %s greedy step %d is the first unclear one: CPU gap %.3g of max|logit|, smallest margin so "
                        "far %.3g\n",
                        GetParam().c_str(), clear, gap, double(tie));
            break;
        }
    }
    std::printf("[ gpu vs cpu] %-40s greedy: %d of %d tokens identical; the first %d steps are clear and asserted\n",
                (GetParam() + " greedy").c_str(), agree, kGreedySteps, clear);
    for (int i = 0; i < clear; ++i) EXPECT_EQ(gpu_tokens[size_t(i)], cpu_tokens[size_t(i)]) << "greedy step " << i;
    Logits cpu_prefix = cpu, gpu_prefix = gpu;  // the logits along the shared prefix of the two token streams
    cpu_prefix.logits.resize(size_t(agree) * V);
    gpu_prefix.logits.resize(size_t(agree) * V);
    report_close(GetParam() + " greedy steps", gpu_prefix, cpu_prefix, V);
}

// Every named activation of a prefill, GPU against CPU: the share of bit-identical values and the worst |diff|
// relative to the activation's max|value|, per layer, so a divergence shows where it starts. The first layer's
// mHC + norm output (attn_in) depends only on the embedding and one mixer reduction: it must be nearly bitwise.
TEST_P(CudaModelFixture, ActivationsTrackCpu) {
    using Key = std::pair<std::string, int64_t>;
    auto collect = [&](Backend& model, std::vector<Key>& order, std::map<Key, std::vector<float>>& values) {
        model.set_observer([&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
            Key key{std::string(name), layer};
            if (!values.count(key)) order.push_back(key);
            values[key].insert(values[key].end(), data, data + rows * cols);  // the GPU runs pieces
        });
        SequenceState state = model.new_sequence();
        model.forward(state, ids_, true);
        model.set_observer(nullptr);
    };
    std::vector<Key> order, gpu_order;
    std::map<Key, std::vector<float>> cpu, gpu;
    collect(*cpu_, order, cpu);
    collect(*gpu_, gpu_order, gpu);
    ASSERT_EQ(order, gpu_order);
    double attn_in_identical = 0;
    for (const Key& key : order) {
        const std::vector<float>& a = gpu[key];
        const std::vector<float>& b = cpu[key];
        ASSERT_EQ(a.size(), b.size()) << key.first;
        size_t same = 0;
        double diff = 0, ref = 0;
        for (size_t i = 0; i < a.size(); ++i) {
            same += a[i] == b[i] || (std::isinf(a[i]) && std::isinf(b[i]));
            if (std::isfinite(a[i]) && std::isfinite(b[i])) {
                diff = std::max(diff, std::fabs(double(a[i]) - b[i]));
                ref = std::max(ref, std::fabs(double(b[i])));
            }
        }
        const double identical = double(same) / double(std::max<size_t>(a.size(), 1));
        if (key == Key{"attn_in", 0}) attn_in_identical = identical;
        std::printf("  %-24s layer %lld: %8.4f %% identical, max|diff| %.3g of max|value|\n", key.first.c_str(),
                    (long long)key.second, 100 * identical, diff / std::max(ref, 1e-30));
    }
    EXPECT_GE(attn_in_identical, 0.99) << "layer 0 attn_in (embedding, hc_pre, attn_norm)";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelFixture, ::testing::ValuesIn(cuda_fixtures::fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return cuda_fixtures::test_name(info.param);
                         });

TEST(CudaModel, RefusesReferenceNumericsAndForeignSequences) {
    DSV4_REQUIRE_GPU();
    const std::string dir = fixture_dir("hf-tiny-hc2-hca16");
    auto checkpoint = Checkpoint::open(dir);
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_context = 256;
    options.print_plan = false;
    EXPECT_THROW(CudaModel(config, load_model_weights(checkpoint, config), Numerics::kReference, options), Error);
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    CpuModel cpu(config, load_model_weights(checkpoint, config), Numerics::kModel);
    SequenceState cpu_state = cpu.new_sequence();
    const int32_t id = 5;
    EXPECT_THROW(gpu.forward(cpu_state, std::span(&id, 1), false), Error);
    SequenceState a = gpu.new_sequence(), b = gpu.new_sequence();
    EXPECT_THROW(gpu.new_sequence(), Error) << "the pool holds two sequences";
    EXPECT_THROW(cpu.forward(a, std::span(&id, 1), false), Error);
    std::vector<int32_t> long_ids(257, 5);
    EXPECT_THROW(gpu.forward(b, long_ids, false), Error) << "past the pool's context";
}

// The observer sees the same named activations on both backends (the GPU downloads them on request).
TEST(CudaModel, ObserverNamesMatchCpu) {
    DSV4_REQUIRE_GPU();
    const std::string dir = fixture_dir("native-mxfp4-mtp");
    auto checkpoint = Checkpoint::open(dir);
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_context = 256;
    options.print_plan = false;
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    CpuModel cpu(config, load_model_weights(checkpoint, config), Numerics::kModel);
    std::vector<int32_t> ids(21);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t(2 + 7 * i % 200);
    auto names = [&](Backend& model) {
        std::vector<std::string> seen;
        model.set_observer([&](std::string_view name, int64_t layer, const float* data, int64_t rows, int64_t cols) {
            seen.push_back(std::string(name) + "/" + std::to_string(layer) + "/" + std::to_string(rows) + "x" +
                           std::to_string(cols));
            if (name.find("margin") == std::string_view::npos) {
                for (int64_t i = 0; i < rows * cols; ++i) ASSERT_TRUE(std::isfinite(data[i])) << name;
            }
        });
        SequenceState state = model.new_sequence();
        model.forward(state, ids, false);
        model.set_observer(nullptr);
        return seen;
    };
    EXPECT_EQ(names(gpu), names(cpu));
}

}  // namespace
}  // namespace dsv4
