// CudaModel against CpuModel in `model` numerics on every fixture (tests/fixtures/* and, when present,
// DSV4_SHARED_DIR/fixtures/official-numerics-a): per-position logit cosine >= 0.9999 and max|diff| <= 1 % of the
// position's max|logit| for the full prefill and the fixture's mixed chunk schedule, and the same greedy tokens.
// A position that misses is printed with the smallest router and indexer top-k margins the CPU saw up to it
// (ffn.router_margin, attn.index_margin), so a discrete near-tie shows as such; nothing is loosened for it.
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
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "model/golden_io.h"
#include "runtime/cuda/cuda_model.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using testing::compare;
using testing::Comparison;
using testing::Golden;

constexpr double kMinCosine = 0.9999;
constexpr double kMaxRelDiff = 0.01;  // of the position's max|logit| (CPU)
constexpr int kGreedySteps = 16;

const std::string kOfficial = "official-numerics-a";

std::string fixture_dir(const std::string& name) {
    if (name == kOfficial) return std::string(DSV4_SHARED_DIR) + "/fixtures/" + kOfficial;
    return (fs::path(DSV4_SOURCE_DIR) / "tests" / "fixtures" / name).string();
}

std::vector<std::string> fixtures() {
    std::vector<std::string> names;
    const fs::path root = fs::path(DSV4_SOURCE_DIR) / "tests" / "fixtures";
    if (fs::exists(root))
        for (const auto& entry : fs::directory_iterator(root))
            if (fs::exists(entry.path() / "golden.safetensors")) names.push_back(entry.path().filename().string());
    std::sort(names.begin(), names.end());
    names.push_back(kOfficial);  // skipped at run time when the shared folder is absent
    return names;
}

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

// Per-position GPU vs CPU; prints the worst position and every miss with the CPU's margins.
void expect_close(const std::string& what, const Logits& gpu, const Logits& cpu, int64_t V) {
    ASSERT_EQ(gpu.logits.size(), cpu.logits.size()) << what;
    const size_t rows = cpu.logits.size() / size_t(V);
    double worst_cos = 1, worst_rel = 0;
    size_t at_cos = 0, at_rel = 0, misses = 0;
    for (size_t p = 0; p < rows; ++p) {
        const Comparison c = compare(gpu.logits.data() + p * V, cpu.logits.data() + p * V, size_t(V));
        ASSERT_FALSE(c.has_nan) << what << " position " << p;
        if (c.cosine < worst_cos) worst_cos = c.cosine, at_cos = p;
        if (c.relative() > worst_rel) worst_rel = c.relative(), at_rel = p;
        if (c.cosine < kMinCosine || c.relative() > kMaxRelDiff) {
            ++misses;
            std::printf(
                "  %s position %zu: cosine %.6f, max|diff| %.3g of max|logit|; CPU margins here: router %.3g "
                "indexer %.3g; smallest up to here: router %.3g indexer %.3g\n",
                what.c_str(), p, c.cosine, c.relative(), p < cpu.router.size() ? cpu.router[p] : INFINITY,
                p < cpu.index.size() ? cpu.index[p] : INFINITY, smallest_up_to(cpu.router, p),
                smallest_up_to(cpu.index, p));
        }
    }
    std::printf(
        "[ gpu vs cpu] %-40s %zu positions: worst cosine %.7f (position %zu), worst max|diff| %.3g of "
        "max|logit| (position %zu), %zu misses\n",
        what.c_str(), rows, worst_cos, at_cos, worst_rel, at_rel, misses);
    EXPECT_EQ(misses, 0u) << what;
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

    std::vector<int64_t> schedule() const {
        if (golden_->has("chunk_sizes")) return golden_->ints("chunk_sizes");
        return {37, 1, 1, 20, 69, 3, 1, 128, 5, 1, 1, 1, 2, 31, 74};  // official-numerics-a (375 ids)
    }

    std::string dir_;
    std::unique_ptr<Golden> golden_;
    std::vector<int32_t> ids_;
    std::unique_ptr<CpuModel> cpu_;
    std::unique_ptr<CudaModel> gpu_;
};

TEST_P(CudaModelFixture, FullPrefillMatchesCpu) {
    const int64_t V = cpu_->config().vocab_size, n = int64_t(ids_.size());
    const Logits cpu = Recorder(*cpu_, true).chunks(ids_, {n});
    const Logits gpu = Recorder(*gpu_, false).chunks(ids_, {n});
    expect_close(GetParam() + " full prefill", gpu, cpu, V);
}

TEST_P(CudaModelFixture, ChunkScheduleMatchesCpuAndFullPrefill) {
    const int64_t V = cpu_->config().vocab_size, n = int64_t(ids_.size());
    const std::vector<int64_t> chunks = schedule();
    int64_t total = 0;
    for (int64_t c : chunks) total += c;
    ASSERT_EQ(total, n);
    const Logits cpu = Recorder(*cpu_, true).chunks(ids_, chunks);
    const Logits gpu = Recorder(*gpu_, false).chunks(ids_, chunks);
    expect_close(GetParam() + " chunk schedule", gpu, cpu, V);
    // Chunk invariance of the GPU path itself (GEMM tilings may change with the chunk length, so this is the
    // same tolerance, not bitwise).
    Logits gpu_full = Recorder(*gpu_, false).chunks(ids_, {n});
    gpu_full.router = cpu.router;
    gpu_full.index = cpu.index;
    expect_close(GetParam() + " gpu chunked vs gpu full", gpu, gpu_full, V);
}

TEST_P(CudaModelFixture, GreedyTokensMatchCpu) {
    const int64_t V = cpu_->config().vocab_size;
    const int64_t prompt_len =
        golden_->has("greedy_prompt_len") ? golden_->ints("greedy_prompt_len")[0] : int64_t(ids_.size());
    const std::vector<int32_t> prompt(ids_.begin(), ids_.begin() + prompt_len);
    std::vector<int32_t> cpu_tokens, gpu_tokens;
    const Logits cpu = Recorder(*cpu_, true).greedy(prompt, cpu_tokens);
    const Logits gpu = Recorder(*gpu_, false).greedy(prompt, gpu_tokens);
    int agree = 0;
    while (agree < kGreedySteps && cpu_tokens[size_t(agree)] == gpu_tokens[size_t(agree)]) ++agree;
    std::printf("[ gpu vs cpu] %-40s greedy: %d of %d tokens identical\n", (GetParam() + " greedy").c_str(), agree,
                kGreedySteps);
    if (agree < kGreedySteps) {
        std::vector<float> row(cpu.logits.begin() + agree * V, cpu.logits.begin() + (agree + 1) * V);
        std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
        float max_abs = 0;
        for (float v : row) max_abs = std::max(max_abs, std::fabs(v));
        std::printf("  first difference at step %d: CPU top-1/top-2 gap %.3g of max|logit|\n", agree,
                    (row[0] - row[1]) / max_abs);
    }
    EXPECT_EQ(gpu_tokens, cpu_tokens);
    // The logits along the shared prefix of the two token streams.
    Logits cpu_prefix = cpu, gpu_prefix = gpu;
    cpu_prefix.logits.resize(size_t(agree) * V);
    gpu_prefix.logits.resize(size_t(agree) * V);
    expect_close(GetParam() + " greedy steps", gpu_prefix, cpu_prefix, V);
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

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaModelFixture, ::testing::ValuesIn(fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             std::string name = info.param;
                             std::replace(name.begin(), name.end(), '-', '_');
                             return name;
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
