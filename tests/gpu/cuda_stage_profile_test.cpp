// CudaModel's stage profiler (runtime/cuda/stage_marks.h) on native-mxfp4-mtp (an SWA, a CSA and an HCA layer): with
// the profiler on, a prefill piece (eager launches) and decode steps (B = 3 and B = 1: the profiled graph captured,
// then replayed) record exactly the stages of runtime/stage_profile.h in forward order (block stages once per
// layer that has them: indexer on the CSA layer, compressor on the HCA layer), every interval finite and >= 0; the
// logits are bitwise those of the same calls on a model with the profiler off. Switched off, a step records nothing
// (the plain graph replays); switched on again, the profiled graph captured before replays with its marks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/stage_profile.h"

namespace dsv4 {
namespace {

using Marks = std::vector<std::pair<std::string, int64_t>>;

// The stages a piece with logits records on `c`, in order, with their layers. A decode step writes the window ring
// with the chunk's entries (q_proj), so it has no ring_update.
Marks expected_stages(const ModelConfig& c, bool decode) {
    Marks m = {{"upload", -1}, {"embed", -1}};
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const int64_t ratio = c.compress_ratios[size_t(l)];
        m.insert(m.end(), {{"attn_hc_pre", l}, {"q_proj", l}});
        if (ratio == 4) m.push_back({"indexer", l});  // with the main compressor: both on the side lane
        if (ratio > 0 && ratio != 4) m.push_back({"compressor", l});
        m.insert(m.end(), {{"sparse_attn", l}, {"o_proj", l}});
        if (!decode) m.push_back({"ring_update", l});
        m.insert(m.end(), {{"attn_hc_post", l},
                           {"ffn_hc_pre", l},
                           {"router", l},
                           {"routed_experts", l},
                           {"shared_expert", l},
                           {"ffn_hc_post", l}});
    }
    m.insert(m.end(), {{"head", -1}, {"logits_copy", -1}});
    return m;
}

// The last piece's intervals are exactly `want`, each finite and >= 0; the step's sum is printed.
void expect_stages(const CudaModel& model, const Marks& want, const std::string& what) {
    const std::vector<StageTime> times = model.stage_times();
    Marks got;
    double sum = 0;
    for (const StageTime& t : times) {
        got.push_back({t.stage, t.layer});
        EXPECT_TRUE(std::isfinite(t.ms) && t.ms >= 0) << what << ": " << t.stage << " layer " << t.layer << " " << t.ms;
        sum += t.ms;
    }
    EXPECT_EQ(got, want) << what;
    EXPECT_GT(sum, 0) << what;
    const StageTable table = stage_table(std::span(&times, 1));
    std::printf("[ stages   ] %s: %zu intervals, %zu stages, %.4f ms\n", what.c_str(), times.size(), table.rows.size(),
                sum);
}

TEST(CudaStageProfile, EveryStageTimedAndLogitsUnchanged) {
    DSV4_REQUIRE_GPU();
    auto checkpoint = Checkpoint::open(cuda_fixtures::fixture_dir("native-mxfp4-mtp"));
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_sequences = 3;
    options.max_context = 256;
    options.max_chunk_tokens = 64;
    options.print_plan = false;
    CudaModel on(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    CudaModel off(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    on.set_stage_profiling(true);
    const Marks prefill_stages = expected_stages(config, false), stages = expected_stages(config, true);
    const int64_t V = config.vocab_size;

    std::vector<SequenceState> a, b;
    std::vector<int32_t> last;
    for (int i = 0; i < 3; ++i) {
        a.push_back(on.new_sequence());
        b.push_back(off.new_sequence());
        std::vector<int32_t> prompt(size_t(5 + 7 * i));
        for (size_t j = 0; j < prompt.size(); ++j) prompt[j] = int32_t((11 * i + 3 * int(j) + 2) % V);
        const std::vector<float> got = on.forward(a.back(), prompt, false), want = off.forward(b.back(), prompt, false);
        gpu_test::expect_bitwise_f32("prefill " + std::to_string(i), got, want);
        expect_stages(on, prefill_stages, "prefill " + std::to_string(i) + " (eager)");
        last.push_back(int32_t(std::max_element(want.begin(), want.end()) - want.begin()));
    }

    // One token per sequence: `batch` sequences (B = 3 graph, or B = 1 on sequence 0); the next tokens are greedy.
    auto step = [&](int batch, const std::string& what) {
        std::vector<BatchItem> on_items, off_items;
        for (int i = 0; i < batch; ++i) {
            on_items.push_back({&a[size_t(i)], std::span(&last[size_t(i)], 1), false});
            off_items.push_back({&b[size_t(i)], std::span(&last[size_t(i)], 1), false});
        }
        const auto got = on.forward_batch(on_items), want = off.forward_batch(off_items);
        for (int i = 0; i < batch; ++i) {
            gpu_test::expect_bitwise_f32(what + " sequence " + std::to_string(i), got[size_t(i)], want[size_t(i)]);
            const std::vector<float>& l = want[size_t(i)];
            last[size_t(i)] = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
        }
    };
    for (int s = 0; s < 3; ++s) {
        step(3, "B = 3 step " + std::to_string(s));
        expect_stages(on, stages, "B = 3 step " + std::to_string(s) + (s ? " (replay)" : " (capture)"));
    }
    step(1, "B = 1 step");
    expect_stages(on, stages, "B = 1 step (capture)");

    on.set_stage_profiling(false);
    step(3, "B = 3 step, profiler off");
    EXPECT_TRUE(on.stage_times().empty()) << "a step with the profiler off records nothing";
    on.set_stage_profiling(true);
    step(3, "B = 3 step, profiler on again");
    expect_stages(on, stages, "B = 3 step (replay after off)");
}

}  // namespace
}  // namespace dsv4
