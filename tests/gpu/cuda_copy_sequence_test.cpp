// CudaModel::copy_sequence (the prefix cache's copies, runtime/prefix_cache.h) on every fixture: a sequence copied
// at several positions (inside the first cache page, on a page boundary, past it, after decode steps) and then fed
// the rest of the prompt and greedy decode steps gives the same logits, bit for bit, as the original run without a
// copy; so does the copy after its source was released (nothing is shared), and the source itself continued after
// the copy. A copy that the pool has no slot for is refused with a clear error.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "model/golden_io.h"
#include "runtime/cuda/cuda_model.h"

namespace dsv4 {
namespace {

using cuda_fixtures::fixture_dir;

class CudaCopySequence : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        DSV4_REQUIRE_GPU();
        const std::string dir = fixture_dir(GetParam());
        const testing::Golden golden(dir + "/golden.safetensors");
        ids_ = testing::to_ids(golden.ints("input_ids"));
        auto checkpoint = Checkpoint::open(dir);
        CudaOptions options;
        options.max_sequences = 3;
        options.max_context = 512;
        options.max_chunk_tokens = 64;
        options.print_plan = false;
        gpu_ = std::make_unique<CudaModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                           Numerics::kModel, options);
    }

    // Logits of ids_[from, to) fed in one call (last position only), then `steps` greedy decode steps.
    std::vector<float> continue_run(SequenceState& s, int64_t to, int steps) {
        std::vector<float> all;
        std::vector<float> logits;
        if (to > s.position)
            logits = gpu_->forward(s, std::span(ids_).subspan(size_t(s.position), size_t(to - s.position)), false);
        for (int i = 0; i <= steps; ++i) {
            if (logits.empty()) break;
            all.insert(all.end(), logits.begin(), logits.end());
            if (i == steps) break;
            const int32_t id = int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
            logits = gpu_->forward(s, std::span(&id, 1), false);
        }
        return all;
    }

    std::vector<int32_t> ids_;
    std::unique_ptr<CudaModel> gpu_;
};

TEST_P(CudaCopySequence, CopiesContinueBitwiseLikeTheOriginal) {
    const int64_t prompt = std::min<int64_t>(int64_t(ids_.size()), 300);
    constexpr int kSteps = 6;
    std::vector<float> want;
    {
        SequenceState s = gpu_->new_sequence();
        want = continue_run(s, prompt, kSteps);
    }
    for (int64_t cut : {int64_t(1), int64_t(37), int64_t(256), prompt - 1}) {
        if (cut >= prompt) continue;
        SequenceState source = gpu_->new_sequence();
        gpu_->forward(source, std::span(ids_).first(size_t(cut)), false);
        SequenceState copy = gpu_->copy_sequence(source);
        EXPECT_EQ(copy.position, cut);
        const std::string what = GetParam() + " copied at " + std::to_string(cut);
        gpu_test::expect_bitwise_f32(what + ": the source continued", continue_run(source, prompt, kSteps), want);
        source = gpu_->new_sequence();  // the source's slot and pages go back (and are reused) before the copy runs
        gpu_->forward(source, std::span(ids_).first(7), false);
        gpu_test::expect_bitwise_f32(what + ": the copy continued", continue_run(copy, prompt, kSteps), want);
    }
}

TEST_P(CudaCopySequence, RefusedWithoutAFreeSlot) {
    SequenceState a = gpu_->new_sequence(), b = gpu_->new_sequence(), c = gpu_->new_sequence();
    gpu_->forward(a, std::span(ids_).first(10), false);
    try {
        gpu_->copy_sequence(a);
        ADD_FAILURE() << "a copy into a full pool was accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("slots"), std::string::npos) << e.what();
    }
    c = SequenceState{};
    SequenceState copy = gpu_->copy_sequence(a);
    EXPECT_EQ(copy.position, 10);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaCopySequence, ::testing::ValuesIn(cuda_fixtures::fixtures()),
                         [](const auto& info) {
                             std::string name = info.param;
                             std::replace(name.begin(), name.end(), '-', '_');
                             return name;
                         });

}  // namespace
}  // namespace dsv4
