// The GPU backend in `model` numerics against DeepSeek's reference on the trained fixture
// (tests/fixtures/official-trained-bytes), held to the reference's own one-ulp noise exactly as the CPU is
// (tests/model/reference_yardstick.h, trained_reference_test.cpp): every step inside the perturbed reruns' spread,
// the whole run closer than every rerun, identical greedy tokens. Decode steps run as graph replays.
#include <gtest/gtest.h>

#include <filesystem>

#include "gpu_test_util.h"
#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "model/reference_yardstick.h"
#include "runtime/cuda/cuda_model.h"

using namespace dsv4;
using namespace dsv4::testing;

TEST(CudaTrainedReference, GpuModelNumericsWithinTheReferenceOwnUlpNoise) {
    DSV4_REQUIRE_GPU();
    const std::string dir = test_fixtures::dir("official-trained-bytes");
    ReferenceRun reference = load_reference_run(dir);
    auto checkpoint = Checkpoint::open(dir);
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_context = 1024;
    options.max_chunk_tokens = 128;  // the 321-token prompt runs as three pieces
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    expect_within_reference_yardstick(reference, run_teacher_forced(gpu, reference), "gpu");
}
