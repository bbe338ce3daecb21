// Expert parallelism inside one process (CudaOptions::expert_parallel): n CudaModels on one GPU, each holding its
// share of the routed experts, in n threads, their routed slots summed through the host (HostRankSum below instead
// of NCCL, so the test needs one GPU and no second process). On every fixture, over the fixture's mixed chunk
// schedule and a batch of three sequences decoded together, every rank's logits must equal one GPU's holding all
// experts, bit for bit: each slot is non-zero on one rank only, so the sum is exact (docs/parallel.md). Two ranks
// split the experts evenly, three unevenly. NCCL and separate processes are tested by tests/gpu/
// multi_process_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "kernels/cuda/common/cuda_check.h"
#include "runtime/cuda/cuda_model.h"

namespace dsv4 {
namespace {

// The ranks' sums through host memory: each rank waits for its stream, publishes its buffer, and once every rank
// has, adds them in rank order in f32 and rounds to bf16 (what NCCL's bf16 sum gives when one addend is non-zero).
// Synchronizes the stream, so the models run without decode graphs.
class HostRankGroup {
  public:
    explicit HostRankGroup(int ranks) : barrier_(ranks), buffers_(static_cast<size_t>(ranks)) {}

    void sum(int rank, void* data, int64_t count, cudaStream_t stream) {
        std::vector<uint16_t>& mine = buffers_[size_t(rank)];
        mine.resize(size_t(count));
        DSV4_CUDA_CHECK(cudaMemcpyAsync(mine.data(), data, size_t(count) * 2, cudaMemcpyDeviceToHost, stream));
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
        barrier_.arrive_and_wait();
        std::vector<uint16_t> total(static_cast<size_t>(count));
        for (size_t i = 0; i < total.size(); ++i) {
            float s = 0.0f;
            for (const std::vector<uint16_t>& b : buffers_) s += bf16_to_f32(b[i]);
            total[i] = f32_to_bf16(s);
        }
        barrier_.arrive_and_wait();  // every rank has read the others' buffers
        DSV4_CUDA_CHECK(cudaMemcpyAsync(data, total.data(), total.size() * 2, cudaMemcpyHostToDevice, stream));
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
    }

  private:
    std::barrier<> barrier_;
    std::vector<std::vector<uint16_t>> buffers_;
};

class HostRankSum final : public RankSum {
  public:
    HostRankSum(HostRankGroup& group, int rank) : group_(group), rank_(rank) {}
    void sum_bf16(void* data, int64_t count, cudaStream_t stream) override { group_.sum(rank_, data, count, stream); }

  private:
    HostRankGroup& group_;
    int rank_;
};

int32_t argmax(const std::vector<float>& logits, int64_t offset, int64_t n) {
    const auto first = logits.begin() + offset;
    return int32_t(std::max_element(first, first + n) - first);
}

// What one model computes: the fixture's ids over its chunk schedule (every position's logits), then three
// sequences (prefixes of the ids) prefilled together and decoded greedily together for a few steps.
std::vector<float> session(CudaModel& gpu, const cuda_fixtures::ModelInputs& in) {
    const int64_t V = gpu.config().vocab_size;
    std::vector<float> out;
    SequenceState state = gpu.new_sequence();
    size_t at = 0;
    for (int64_t chunk : in.schedule) {
        const size_t n = std::min(size_t(chunk), in.ids.size() - at);
        if (n == 0) break;
        const std::vector<float> l = gpu.forward(state, std::span(in.ids).subspan(at, n), true);
        out.insert(out.end(), l.begin(), l.end());
        at += n;
    }
    const std::vector<int64_t> lengths = {1, 9, 23};
    std::vector<SequenceState> states;
    std::vector<std::vector<int32_t>> next(lengths.size());
    std::vector<BatchItem> items;
    for (size_t i = 0; i < lengths.size(); ++i) states.push_back(gpu.new_sequence());
    for (size_t i = 0; i < lengths.size(); ++i)
        items.push_back(
            {&states[i], std::span(in.ids).first(size_t(std::min<int64_t>(lengths[i], in.ids.size()))), false});
    for (int step = 0; step < 4; ++step) {
        const std::vector<std::vector<float>> logits = gpu.forward_batch(items);
        for (size_t i = 0; i < lengths.size(); ++i) {
            out.insert(out.end(), logits[i].begin(), logits[i].end());
            next[i] = {argmax(logits[i], 0, V)};
            items[i].ids = next[i];
        }
    }
    return out;
}

std::unique_ptr<CudaModel> model(const std::shared_ptr<const Checkpoint>& checkpoint, ExpertParallel ep) {
    CudaOptions options;
    options.max_sequences = 4;
    options.max_context = 512;
    options.max_chunk_tokens = 64;
    options.decode_graphs = false;  // HostRankSum synchronizes
    options.print_plan = false;
    options.expert_parallel = ep;
    const ModelConfig& config = checkpoint->config();
    return std::make_unique<CudaModel>(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
}

class ExpertParallelRanks : public ::testing::TestWithParam<std::string> {
  protected:
    void expect_ranks_equal_one_gpu(int ranks) {
        DSV4_REQUIRE_GPU();
        const cuda_fixtures::ModelInputs in = cuda_fixtures::model_inputs(GetParam());
        if (!in.found) GTEST_SKIP() << "fixture " << GetParam() << " absent";
        const auto checkpoint = Checkpoint::open(in.dir);
        const int64_t E = checkpoint->config().n_routed_experts;
        if (E < ranks)
            GTEST_SKIP() << GetParam() << " has " << E << " routed experts, fewer than " << ranks << " ranks";
        const std::vector<float> want = session(*model(checkpoint, {}), in);

        HostRankGroup group(ranks);
        std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
        std::vector<std::string> errors(static_cast<size_t>(ranks));
        std::vector<std::thread> threads;
        for (int r = 0; r < ranks; ++r)
            threads.emplace_back([&, r] {
                try {
                    HostRankSum sum(group, r);
                    got[size_t(r)] = session(*model(checkpoint, {r, ranks, &sum}), in);
                } catch (const std::exception& e) {
                    errors[size_t(r)] = e.what();
                }
            });
        for (std::thread& t : threads) t.join();
        for (int r = 0; r < ranks; ++r) {
            ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
            const ExpertRange held = expert_range(E, r, ranks);
            gpu_test::expect_bitwise_f32(GetParam() + ": rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                             " (experts " + std::to_string(held.first) + ".." +
                                             std::to_string(held.first + held.count - 1) + ") vs one GPU",
                                         got[size_t(r)], want);
        }
        std::printf("[ bitwise  ] %s: %d ranks of %lld experts equal one GPU (%zu logits)\n", GetParam().c_str(), ranks,
                    (long long)E, want.size());
    }
};

TEST_P(ExpertParallelRanks, TwoRanksEqualOneGpu) {
    expect_ranks_equal_one_gpu(2);
}

TEST_P(ExpertParallelRanks, ThreeUnevenRanksEqualOneGpu) {
    expect_ranks_equal_one_gpu(3);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertParallelRanks, ::testing::ValuesIn(cuda_fixtures::fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return cuda_fixtures::test_name(info.param);
                         });

TEST(ExpertParallelOptions, RejectsBadRanks) {
    DSV4_REQUIRE_GPU();
    const auto checkpoint = Checkpoint::open(cuda_fixtures::fixture_dir("hf-tiny-hc2-hca16"));
    HostRankGroup group(2);
    HostRankSum sum(group, 0);
    EXPECT_THROW(model(checkpoint, {2, 2, &sum}), Error);
    EXPECT_THROW(model(checkpoint, {0, 2, nullptr}), Error);    // no RankSum
    EXPECT_THROW(model(checkpoint, {0, 100000, &sum}), Error);  // more ranks than experts
}

}  // namespace
}  // namespace dsv4
