// Expert parallelism over the machine's real GPUs in one process (a thread, a CudaModel and an NcclGroup per GPU,
// decode graphs on, so NCCL's all-reduce runs inside the replayed graphs over NVLink): on every fixture, 16 sequences
// of mixed lengths prefilled and decoded together give every rank the same logits, bit for bit, as each sequence
// alone on the same GPUs, and as the 16 together on one GPU holding every expert (docs/parallel.md: the slot sum is
// exact); greedy draws on the GPU (BatchItem::draw, from the gathered logits) give one GPU's tokens. Every GPU gets a
// rank, up to the fixture's routed experts (a fixture of 3 experts runs 3 ranks on a machine of 4). Skips on a
// machine with fewer than two GPUs; tests/gpu/multi_process_test.cpp covers the same layout through the binary with
// one process per GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "batch_trace.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "kernels/cuda/smoke/device_info.h"
#include "model/golden_io.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/nccl_group.h"

namespace dsv4 {
namespace {

using namespace batch_trace;

std::unique_ptr<CudaModel> model(const std::shared_ptr<const Checkpoint>& checkpoint, int device, ExpertParallel ep,
                                 int64_t max_decode_graphs = CudaOptions{}.max_decode_graphs) {
    CudaOptions options = batch_options(kSixteen);
    options.device = device;
    options.expert_parallel = ep;
    options.max_decode_graphs = max_decode_graphs;
    const ModelConfig& config = checkpoint->config();
    return std::make_unique<CudaModel>(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
}

// Data-parallel attention: a new sequence goes to the rank holding the fewest (the lowest on a tie), a prefix copy
// to its source's rank, and every rank counts every rank's sequences alike (the prefix cache asks the leader's).
void expect_placements_follow_the_load(CudaModel& gpu, int ranks, int rank) {
    const std::string who = "rank " + std::to_string(rank);
    std::vector<SequenceState> held;
    for (int i = 0; i < 2 * ranks; ++i) {
        held.push_back(gpu.new_sequence());
        EXPECT_EQ(gpu.placement(held.back()), i % ranks) << who << ", sequence " << i;
    }
    EXPECT_EQ(gpu.sequences_per_placement(), std::vector<int64_t>(size_t(ranks), 2)) << who;
    const SequenceState copy = gpu.copy_sequence(held[1]);
    EXPECT_EQ(gpu.placement(copy), 1) << who << ": a copy stays with its source";
    for (int i = 2 * ranks - 1; i >= 0; i -= ranks) held.erase(held.begin() + i);  // the last rank's two
    std::vector<int64_t> want(size_t(ranks), 2);
    want[1] += 1, want[size_t(ranks - 1)] -= 2;
    EXPECT_EQ(gpu.sequences_per_placement(), want) << who;
    held.push_back(gpu.new_sequence());
    EXPECT_EQ(gpu.placement(held.back()), ranks - 1) << who << ": the rank holding the fewest";
}

class EveryGpu : public ::testing::TestWithParam<std::string> {
  protected:
    void expect_together_equal_alone_and_one_gpu(AttentionLayout attention);
};

// With the attention replicated on every rank, and data-parallel: the 16 sequences spread over the ranks (each
// computes its own sequences' attention; the experts' input rows and the logits gathered over NVLink).
TEST_P(EveryGpu, SixteenSequencesTogetherEqualEachAloneAndOneGpu) {
    expect_together_equal_alone_and_one_gpu(AttentionLayout::kReplicated);
}

TEST_P(EveryGpu, DataParallelAttentionSixteenSequencesEqualEachAloneAndOneGpu) {
    expect_together_equal_alone_and_one_gpu(AttentionLayout::kDataParallel);
}

void EveryGpu::expect_together_equal_alone_and_one_gpu(AttentionLayout attention) {
    DSV4_REQUIRE_GPU();
    if (cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs, found " << cuda::device_count();
    const std::string dir = cuda_fixtures::fixture_dir(GetParam());
    const testing::Golden golden(dir + "/golden.safetensors");
    const std::vector<int32_t> ids = testing::to_ids(golden.ints("input_ids"));
    const auto checkpoint = Checkpoint::open(dir);
    if (checkpoint->config().n_routed_experts < 2) GTEST_SKIP() << GetParam() << " has fewer than 2 routed experts";
    const std::vector<Trace> one_gpu = together(*model(checkpoint, 0, {}), ids, kSixteen);

    const int ranks = int(std::min<int64_t>(cuda::device_count(), checkpoint->config().n_routed_experts));
    const std::vector<uint8_t> id = cuda::NcclGroup::unique_id();
    std::vector<std::unique_ptr<cuda::NcclGroup>> groups(ranks);
    std::vector<std::vector<Trace>> batched(ranks), alone_traces(ranks), drawn(ranks);
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                groups[size_t(r)] = std::make_unique<cuda::NcclGroup>(r, ranks, id, r);
                // Data-parallel: at most two decode graphs held, so the ranks evict (and capture again) together.
                const bool dp = attention == AttentionLayout::kDataParallel;
                auto gpu = model(checkpoint, r, {r, ranks, groups[size_t(r)].get(), attention},
                                 dp ? 2 : CudaOptions{}.max_decode_graphs);
                if (dp) expect_placements_follow_the_load(*gpu, ranks, r);
                batched[size_t(r)] = together(*gpu, ids, kSixteen);
                drawn[size_t(r)] = together(*gpu, ids, kSixteen, /*draw=*/true);  // greedy, on the GPU
                for (int i = 0; i < kSixteen.batch(); ++i)
                    alone_traces[size_t(r)].push_back(alone(*gpu, ids, kSixteen, i));
            } catch (const std::exception& e) {
                // The other rank may wait in a collective, or in its communicator's set-up, that this one never
                // joins; aborting its communicator from here would race its use. The test binary fails at once.
                std::fprintf(stderr, "EveryGpu: rank %d failed: %s\n", r, e.what());
                std::_Exit(1);
            }
        });
    for (std::thread& t : threads) t.join();
    for (int r = 0; r < ranks; ++r) {
        for (int i = 0; i < kSixteen.batch(); ++i) {
            const std::string what = GetParam() + " rank " + std::to_string(r) + " sequence " + std::to_string(i);
            expect_same(batched[size_t(r)][size_t(i)], alone_traces[size_t(r)][size_t(i)],
                        what + ": together vs alone");
            expect_same(batched[size_t(r)][size_t(i)], one_gpu[size_t(i)],
                        what + ": " + std::to_string(ranks) + " GPUs vs one");
            EXPECT_EQ(drawn[size_t(r)][size_t(i)].tokens, one_gpu[size_t(i)].tokens)
                << what << ": greedy draws on the GPU vs the argmax of one GPU's logits";
        }
    }
    std::printf(
        "[ bitwise  ] %s: 16 sequences on %d GPUs (NCCL, attention %s) equal each alone and one GPU on every "
        "rank; their greedy draws on the GPU too\n",
        GetParam().c_str(), ranks, attention == AttentionLayout::kDataParallel ? "data-parallel" : "replicated");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, EveryGpu, ::testing::ValuesIn(cuda_fixtures::fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return cuda_fixtures::test_name(info.param);
                         });

}  // namespace
}  // namespace dsv4
