// The GPU backend in `model` numerics against DeepSeek's reference on the trained fixture
// (tests/fixtures/official-trained-bytes), held to the reference's own one-ulp noise exactly as the CPU is
// (tests/model/reference_yardstick.h, trained_reference_test.cpp): every step inside the perturbed reruns' spread,
// the whole run closer than every rerun, identical greedy tokens. Decode steps run as graph replays. The same with
// the routed experts on the FP8 MMAs (CudaOptions::fp8_expert_mma).
#include <gtest/gtest.h>

#include <filesystem>

#include "gpu_test_util.h"
#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "model/reference_yardstick.h"
#include "runtime/cuda/cuda_model.h"

using namespace dsv4;
using namespace dsv4::testing;

namespace {
void expect_gpu_within_reference_noise(bool fp8_expert_mma) {
    const std::string dir = test_fixtures::dir("official-trained-bytes");
    ReferenceRun reference = load_reference_run(dir);
    auto checkpoint = Checkpoint::open(dir);
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_context = 1024;
    options.max_chunk_tokens = 128;  // the 321-token prompt runs as three pieces
    options.fp8_expert_mma = fp8_expert_mma;
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    expect_within_reference_yardstick(reference, run_teacher_forced(gpu, reference),
                                      fp8_expert_mma ? "gpu, routed experts on FP8 MMAs" : "gpu");
}
}  // namespace

TEST(CudaTrainedReference, GpuModelNumericsWithinTheReferenceOwnUlpNoise) {
    DSV4_REQUIRE_GPU();
    expect_gpu_within_reference_noise(false);
}

// --expert-mma fp8 (the routed experts' sums rounded by the FP8 MMAs, as DeepSeek's own Hopper kernel rounds them)
// is held to the same bound: its own check against the reference, not the CPU's bits.
TEST(CudaTrainedReference, Fp8ExpertMmaWithinTheReferenceOwnUlpNoise) {
    DSV4_REQUIRE_GPU();
    expect_gpu_within_reference_noise(true);
}
