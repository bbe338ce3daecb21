// Expert parallelism inside one process (CudaOptions::expert_parallel): n CudaModels on one GPU, each holding its
// share of the routed experts, in n threads, their routed slots summed and their rows gathered through the host
// (HostRankComm below instead of NCCL, so the test needs one GPU and no second process). On every fixture, over the
// fixture's mixed chunk schedule and a batch of three sequences decoded together, every rank's logits must equal one
// GPU's holding all experts, bit for bit: each slot is non-zero on one rank only, so the sum is exact
// (docs/parallel.md). Two ranks split the experts evenly, three unevenly; with the attention replicated on every rank
// and data-parallel (each sequence's attention on one rank, the experts' input and the logits gathered). NCCL and
// separate processes are tested by tests/gpu/multi_process_test.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "kernels/cuda/common/cuda_check.h"
#include "runtime/auto_chunk.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/rank_agreement.h"

namespace dsv4 {
namespace {

// The ranks' sums and gathers through host memory: each rank waits for its stream, publishes its buffer, and once
// every rank has, adds them in rank order in f32 and rounds to bf16 (what NCCL's bf16 sum gives when one addend is
// non-zero), or copies every rank's rows to their places. Synchronizes the stream, so the models run without decode
// graphs.
class HostRankGroup {
  public:
    explicit HostRankGroup(int ranks)
        : barrier_(ranks), buffers_(static_cast<size_t>(ranks)), rows_(static_cast<size_t>(ranks)) {}

    void gather(int rank, std::span<const RankCollectives::Rows> buffers, std::span<const int64_t> rank_rows,
                cudaStream_t stream) {
        std::vector<std::vector<uint8_t>>& mine = rows_[size_t(rank)];
        mine.assign(buffers.size(), {});
        for (size_t b = 0; b < buffers.size(); ++b) {
            mine[b].resize(size_t(rank_rows[size_t(rank)] * buffers[b].row_bytes));
            if (!mine[b].empty())
                DSV4_CUDA_CHECK(
                    cudaMemcpyAsync(mine[b].data(), buffers[b].local, mine[b].size(), cudaMemcpyDeviceToHost, stream));
        }
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
        barrier_.arrive_and_wait();
        for (size_t b = 0; b < buffers.size(); ++b) {
            int64_t first = 0;
            for (size_t r = 0; r < rows_.size(); ++r) {
                const std::vector<uint8_t>& theirs = rows_[r][b];
                if (!theirs.empty())
                    DSV4_CUDA_CHECK(
                        cudaMemcpyAsync(static_cast<uint8_t*>(buffers[b].all) + first * buffers[b].row_bytes,
                                        theirs.data(), theirs.size(), cudaMemcpyHostToDevice, stream));
                first += rank_rows[r];
            }
        }
        DSV4_CUDA_CHECK(cudaStreamSynchronize(stream));
        barrier_.arrive_and_wait();  // every rank has read the others' rows
    }

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
    std::vector<std::vector<std::vector<uint8_t>>> rows_;  // per rank, per buffer: its rows of a gather
};

class HostRankComm final : public RankCollectives {
  public:
    HostRankComm(HostRankGroup& group, int rank) : group_(group), rank_(rank) {}
    void sum_bf16(void* data, int64_t count, cudaStream_t stream) override { group_.sum(rank_, data, count, stream); }
    void gather_rows(std::span<const Rows> buffers, std::span<const int64_t> rank_rows, cudaStream_t stream) override {
        group_.gather(rank_, buffers, rank_rows, stream);
    }

  private:
    HostRankGroup& group_;
    int rank_;
};

// Runs body(rank, comm) for each of `ranks` ranks in a thread of its own, their collectives through one HostRankGroup;
// returns each rank's exception message ("" where it returned).
template <typename Body>
std::vector<std::string> run_ranks(int ranks, Body body) {
    HostRankGroup group(ranks);
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                HostRankComm comm(group, r);
                body(r, comm);
            } catch (const std::exception& e) {
                errors[size_t(r)] = e.what();
            }
        });
    for (std::thread& t : threads) t.join();
    return errors;
}

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
    // A copy (the prefix cache's) decoding beside its source and the others.
    states.push_back(gpu.copy_sequence(states[1]));
    items.push_back({&states.back(), next[1], false});
    for (size_t i = 0; i < items.size(); ++i) items[i].state = &states[i];
    const std::vector<std::vector<float>> logits = gpu.forward_batch(items);
    for (const std::vector<float>& l : logits) out.insert(out.end(), l.begin(), l.end());
    return out;
}

// piece_tokens: CudaOptions::max_chunk_tokens (0: the largest piece the free memory allows).
std::unique_ptr<CudaModel> model(const std::shared_ptr<const Checkpoint>& checkpoint, ExpertParallel ep,
                                 int64_t piece_tokens = 64) {
    CudaOptions options;
    options.max_sequences = 6;
    options.max_context = 512;
    options.max_chunk_tokens = piece_tokens;
    options.decode_graphs = false;  // HostRankSum synchronizes
    options.print_plan = false;
    options.expert_parallel = ep;
    const ModelConfig& config = checkpoint->config();
    return std::make_unique<CudaModel>(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
}

class ExpertParallelRanks : public ::testing::TestWithParam<std::string> {
  protected:
    void expect_ranks_equal_one_gpu(int ranks, AttentionLayout attention = AttentionLayout::kReplicated) {
        DSV4_REQUIRE_GPU();
        const cuda_fixtures::ModelInputs in = cuda_fixtures::model_inputs(GetParam());
        if (!in.found) GTEST_SKIP() << "fixture " << GetParam() << " absent";
        const auto checkpoint = Checkpoint::open(in.dir);
        const int64_t E = checkpoint->config().n_routed_experts;
        if (E < ranks)
            GTEST_SKIP() << GetParam() << " has " << E << " routed experts, fewer than " << ranks << " ranks";
        const std::vector<float> want = session(*model(checkpoint, {}), in);

        std::vector<std::vector<float>> got(static_cast<size_t>(ranks));
        const std::vector<std::string> errors = run_ranks(ranks, [&](int r, HostRankComm& comm) {
            got[size_t(r)] = session(*model(checkpoint, {r, ranks, &comm, attention}), in);
        });
        for (int r = 0; r < ranks; ++r) {
            ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
            const ExpertRange held = expert_range(E, r, ranks);
            gpu_test::expect_bitwise_f32(GetParam() + ": rank " + std::to_string(r) + " of " + std::to_string(ranks) +
                                             " (experts " + std::to_string(held.first) + ".." +
                                             std::to_string(held.first + held.count - 1) + ") vs one GPU",
                                         got[size_t(r)], want);
        }
        std::printf("[ bitwise  ] %s: %d ranks of %lld experts (attention %s) equal one GPU (%zu logits)\n",
                    GetParam().c_str(), ranks, (long long)E,
                    attention == AttentionLayout::kDataParallel ? "data-parallel" : "replicated", want.size());
    }
};

TEST_P(ExpertParallelRanks, TwoRanksEqualOneGpu) {
    expect_ranks_equal_one_gpu(2);
}

TEST_P(ExpertParallelRanks, ThreeUnevenRanksEqualOneGpu) {
    expect_ranks_equal_one_gpu(3);
}

// The first sequence lives on rank 0 (the other ranks compute no attention while it runs alone); the batch's three
// spread over the ranks (each new sequence goes to the rank with the fewest), and the copy stays on its source's.
TEST_P(ExpertParallelRanks, DataParallelAttentionOnTwoRanksEqualsOneGpu) {
    expect_ranks_equal_one_gpu(2, AttentionLayout::kDataParallel);
}

TEST_P(ExpertParallelRanks, DataParallelAttentionOnThreeRanksEqualsOneGpu) {
    expect_ranks_equal_one_gpu(3, AttentionLayout::kDataParallel);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ExpertParallelRanks, ::testing::ValuesIn(cuda_fixtures::fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return cuda_fixtures::test_name(info.param);
                         });

// Under data-parallel attention each GPU's pool holds only its own sequences: two ranks of 6 slots hold 12, and
// every rank refuses the thirteenth alike.
TEST(ExpertParallelOptions, DataParallelAttentionHoldsEachRanksSequences) {
    DSV4_REQUIRE_GPU();
    const auto checkpoint = Checkpoint::open(cuda_fixtures::fixture_dir("hf-tiny-hc2-hca16"));
    std::vector<std::string> full(2);
    std::vector<Backend::PoolUsage> usage(2);
    const std::vector<std::string> errors = run_ranks(2, [&](int r, HostRankComm& comm) {
        auto gpu = model(checkpoint, {r, 2, &comm, AttentionLayout::kDataParallel});
        std::vector<SequenceState> held;
        for (int i = 0; i < 12; ++i) held.push_back(gpu->new_sequence());
        usage[size_t(r)] = gpu->pool_usage();
        try {
            gpu->new_sequence();
        } catch (const Error& e) {
            full[size_t(r)] = e.what();
        }
    });
    for (int r = 0; r < 2; ++r) {
        ASSERT_EQ(errors[size_t(r)], "") << "rank " << r;
        EXPECT_EQ(usage[size_t(r)].sequences_used, 12) << "rank " << r;
        EXPECT_EQ(usage[size_t(r)].sequences_total, 12) << "rank " << r;
        EXPECT_NE(full[size_t(r)].find("on every one of the 2 GPUs"), std::string::npos) << full[size_t(r)];
    }
}

// A prompt's pieces must be the same on every rank (their expert exchanges pair up), but the piece the free memory
// allows (max_chunk_tokens 0) is each rank's own measure: they take the smallest. Three ranks offering 1,024, 256 and
// 2,048 tokens all get 256; two models asked for 0 both take what one GPU takes alone.
TEST(ExpertParallelOptions, RanksAgreeOnThePieceTheMemoryAllows) {
    DSV4_REQUIRE_GPU();
    const int64_t offered[] = {1024, 256, 2048};
    std::vector<int64_t> agreed(3, -1);
    const std::vector<std::string> errors = run_ranks(
        3, [&](int r, HostRankComm& comm) { agreed[size_t(r)] = smallest_over_ranks(comm, r, 3, offered[r]); });
    EXPECT_EQ(errors, (std::vector<std::string>{"", "", ""}));
    EXPECT_EQ(agreed, (std::vector<int64_t>{256, 256, 256}));
    const auto checkpoint = Checkpoint::open(cuda_fixtures::fixture_dir("hf-tiny-hc2-hca16"));
    const int64_t alone = model(checkpoint, {}, 0)->piece_tokens();
    EXPECT_NE(std::ranges::find(kAutoChunkTokens, alone), kAutoChunkTokens.end()) << alone;
    std::vector<int64_t> pieces(2, -1);
    const std::vector<std::string> model_errors = run_ranks(2, [&](int r, HostRankComm& comm) {
        pieces[size_t(r)] = model(checkpoint, {r, 2, &comm}, 0)->piece_tokens();
    });
    EXPECT_EQ(model_errors, (std::vector<std::string>{"", ""}));
    EXPECT_EQ(pieces, (std::vector<int64_t>{alone, alone}));
}

TEST(ExpertParallelOptions, RejectsBadRanks) {
    DSV4_REQUIRE_GPU();
    const auto checkpoint = Checkpoint::open(cuda_fixtures::fixture_dir("hf-tiny-hc2-hca16"));
    HostRankGroup group(2);
    HostRankComm comm(group, 0);
    EXPECT_THROW(model(checkpoint, {2, 2, &comm}), Error);
    EXPECT_THROW(model(checkpoint, {0, 2, nullptr}), Error);     // no collectives
    EXPECT_THROW(model(checkpoint, {0, 100000, &comm}), Error);  // more ranks than experts
}

}  // namespace
}  // namespace dsv4
