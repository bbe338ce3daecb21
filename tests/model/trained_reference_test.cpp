// `model` numerics on the CPU against DeepSeek's reference on the trained fixture (tests/fixtures/
// official-trained-bytes: a tiny DeepSeek-V4 trained on English bytes, FP8 weights and MXFP4 experts in the Hub
// layout, every layer type, hash and score routing). The bound is the reference's own one-ulp sensitivity (reference_yardstick.h); a calm
// trained model makes it tight (per-step cosines 0.9975-0.99997) where tiny random models are chaotic.
#include <gtest/gtest.h>

#include <filesystem>

#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "model/reference_yardstick.h"

using namespace dsv4;
using namespace dsv4::testing;

namespace {

const std::string kFixture = test_fixtures::dir("official-trained-bytes");

std::unique_ptr<CpuModel> load_cpu_model() {
    auto checkpoint = Checkpoint::open(kFixture);
    return std::make_unique<CpuModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                      Numerics::kModel);
}

}  // namespace

TEST(TrainedReference, CpuModelNumericsWithinTheReferenceOwnUlpNoise) {
    ReferenceRun reference = load_reference_run(kFixture);
    ASSERT_GE(reference.perturbations, 4);
    auto model = load_cpu_model();
    expect_within_reference_yardstick(reference, run_teacher_forced(*model, reference), "cpu");
}

// The yardstick can fail: each perturbed rerun of the reference, judged as if it were an engine, is not closer
// than every rerun (itself included), and the teacher-forced logits of a neighbouring step are far outside.
TEST(TrainedReference, YardstickRejectsWhatIsNotCloser) {
    ReferenceRun reference = load_reference_run(kFixture);
    const int64_t n = reference.steps * reference.vocab;
    for (int64_t p = 0; p < reference.perturbations; ++p) {
        std::vector<float> rerun(reference.perturbed.begin() + p * n, reference.perturbed.begin() + (p + 1) * n);
        EXPECT_TRUE(judge(reference, rerun).every_step_inside()) << "rerun " << p;
        EXPECT_FALSE(judge(reference, rerun).closer_than_every_rerun()) << "rerun " << p;
    }
    std::vector<float> shifted(reference.logits.begin() + reference.vocab, reference.logits.end());
    shifted.insert(shifted.end(), reference.logits.end() - reference.vocab, reference.logits.end());
    EXPECT_FALSE(judge(reference, shifted).every_step_inside());
}
