// Batched forward on the GPU (CudaModel::forward_batch): batch invariance and graph replay, on every fixture.
//  * 16 sequences of mixed prompt lengths are prefilled in one call (their tokens packed into shared pieces, long
//    prompts split across pieces) and then decoded greedily together, one token each per step, with 5 of them
//    finishing half-way (the batch shrinks from 16 to 11, so two decode graphs replay). Every sequence must get the
//    same logits, bit for bit, and so the same greedy tokens, as when it runs alone (B = 1 pieces and graph).
//    The same with 4 sequences (one prompt split across pieces, B = 4 then 3): small enough for racecheck
//    (tools/gpu_sanitize.sh), which did not finish the 16-sequence case in 150 s.
//  * Eager launches (decode_graphs off) give the same bits as the replayed graphs.
//  * A replayed decode step is one graph launch with no allocation, no kernel launched outside the graph and no
//    host synchronization before the logits copy: every CUDA runtime and driver API call of the step is recorded
//    through CUPTI's callback API and checked.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "batch_trace.h"
#include "cuda_fixtures.h"
#include "gpu_test_util.h"
#include "io/checkpoint.h"
#include "model/golden_io.h"
#include "runtime/cuda/cuda_model.h"

#ifdef DSV4_HAVE_CUPTI
#include <cupti.h>
#endif

namespace dsv4 {
namespace {

using cuda_fixtures::fixture_dir;
using namespace batch_trace;

class CudaBatch : public ::testing::TestWithParam<std::string> {
  protected:
    void SetUp() override {
        DSV4_REQUIRE_GPU();
        const std::string dir = fixture_dir(GetParam());
        const testing::Golden golden(dir + "/golden.safetensors");
        ids_ = testing::to_ids(golden.ints("input_ids"));
        checkpoint_ = Checkpoint::open(dir);
    }

    std::unique_ptr<CudaModel> model(const BatchPlan& plan, bool graphs) const {
        const ModelConfig& config = checkpoint_->config();
        CudaOptions options = batch_trace::batch_options(plan);
        options.decode_graphs = graphs;
        return std::make_unique<CudaModel>(config, load_model_weights(checkpoint_, config), Numerics::kModel,
                                           options);
    }

    std::vector<Trace> together(CudaModel& gpu, const BatchPlan& plan) const {
        return batch_trace::together(gpu, ids_, plan);
    }
    Trace alone(CudaModel& gpu, const BatchPlan& plan, int i) const { return batch_trace::alone(gpu, ids_, plan, i); }

    // Every sequence of `plan` batched against itself alone, bit for bit.
    void expect_batched_equal_alone(const BatchPlan& plan) const {
        auto gpu = model(plan, true);
        const std::vector<Trace> batched = together(*gpu, plan);
        int64_t tokens = 0;
        for (int i = 0; i < plan.batch(); ++i) {
            const int64_t length = plan.prompt_lengths[size_t(i)];
            tokens += length;
            expect_same(batched[size_t(i)], alone(*gpu, plan, i),
                        GetParam() + " sequence " + std::to_string(i) + " (prompt " + std::to_string(length) + ")");
        }
        std::printf("[ bitwise  ] %s: %d sequences (%lld prompt tokens), %d decode steps at B = %d then %d, equal "
                    "to each alone\n",
                    GetParam().c_str(), plan.batch(), (long long)tokens, plan.steps, plan.batch(),
                    plan.batch() - plan.finish_early);
    }

    std::vector<int32_t> ids_;
    std::shared_ptr<const Checkpoint> checkpoint_;
};

TEST_P(CudaBatch, SixteenMixedLengthSequencesEqualAlone) { expect_batched_equal_alone(kSixteen); }

TEST_P(CudaBatch, FourSequencesEqualAlone) { expect_batched_equal_alone(kFour); }

TEST_P(CudaBatch, GraphReplayEqualsEagerLaunches) {
    auto graphs = model(kSixteen, true);
    auto eager = model(kSixteen, false);
    const std::vector<Trace> a = together(*graphs, kSixteen), b = together(*eager, kSixteen);
    for (int i = 0; i < kSixteen.batch(); ++i)
        expect_same(a[size_t(i)], b[size_t(i)], GetParam() + " sequence " + std::to_string(i) + " graph vs eager");
}

// A model that may hold only one decode graph: each new batch size destroys the graph of the last one (B = 16,
// then 11, then 1 for each sequence alone, then 16 again), and every replay still gives the uncapped model's bits.
TEST_P(CudaBatch, OneDecodeGraphHeldEqualsUncapped) {
    auto uncapped = model(kSixteen, true);
    CudaOptions options = batch_trace::batch_options(kSixteen);
    options.max_decode_graphs = 1;
    const ModelConfig& config = checkpoint_->config();
    CudaModel capped(config, load_model_weights(checkpoint_, config), Numerics::kModel, options);
    const std::vector<Trace> a = together(*uncapped, kSixteen), b = together(capped, kSixteen);
    EXPECT_EQ(capped.decode_graphs_held(), 1u);
    EXPECT_EQ(uncapped->decode_graphs_held(), 2u) << "B = 16 and B = 11";
    for (int i = 0; i < kSixteen.batch(); ++i)
        expect_same(a[size_t(i)], b[size_t(i)], GetParam() + " sequence " + std::to_string(i) + " capped vs not");
    for (int i : {0, 5}) expect_same(alone(capped, kSixteen, i), a[size_t(i)], GetParam() + " alone after evictions");
    const std::vector<Trace> again = together(capped, kSixteen);
    for (int i = 0; i < kSixteen.batch(); ++i)
        expect_same(again[size_t(i)], a[size_t(i)], GetParam() + " sequence " + std::to_string(i) + " recaptured");
    EXPECT_EQ(capped.decode_graphs_held(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CudaBatch, ::testing::ValuesIn(cuda_fixtures::fixtures()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                             return cuda_fixtures::test_name(info.param);
                         });

// Room for three sequences of 64 positions, no memory plan printed: the API tests' models.
CudaOptions three_short_sequences() {
    CudaOptions options;
    options.max_sequences = 3;
    options.max_context = 64;
    options.print_plan = false;
    return options;
}

TEST(CudaBatchApi, RejectsBadBatchesWithoutAdvancing) {
    DSV4_REQUIRE_GPU();
    auto checkpoint = Checkpoint::open(fixture_dir("hf-tiny-hc2-hca16"));
    const ModelConfig& config = checkpoint->config();
    CudaOptions options = three_short_sequences();
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    SequenceState a = gpu.new_sequence(), b = gpu.new_sequence();
    const std::vector<int32_t> ok = {5, 6}, bad = {5, -1}, longer(65, 5);
    EXPECT_THROW(gpu.forward_batch(std::vector<BatchItem>{{&a, ok, false}, {&a, ok, false}}), Error) << "same sequence";
    EXPECT_THROW(gpu.forward_batch(std::vector<BatchItem>{{&a, ok, false}, {&b, bad, false}}), Error) << "bad id";
    EXPECT_THROW(gpu.forward_batch(std::vector<BatchItem>{{&a, ok, false}, {&b, longer, false}}), Error)
        << "past the context";
    EXPECT_EQ(a.position, 0) << "a rejected batch advances nothing";
    EXPECT_EQ(b.position, 0);
    const auto out = gpu.forward_batch(std::vector<BatchItem>{{&a, ok, true}, {&b, ok, false}});
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].size(), size_t(2 * config.vocab_size));
    EXPECT_EQ(out[1].size(), size_t(config.vocab_size));
    EXPECT_EQ(a.position, 2);
}

// The logits reach the host through a pinned buffer of options.logit_staging_bytes, in slices when a piece wants
// more: slices of 3 rows (a prefill wanting 5 + 1 + 4 rows: slices cross from one sequence's rows to the next),
// then a decode step of 3, must deliver the same values, in the same order, as one copy.
TEST(CudaBatchApi, LogitsCopiedInSlicesEqualOneCopy) {
    DSV4_REQUIRE_GPU();
    auto checkpoint = Checkpoint::open(fixture_dir("hf-tiny-hc2-hca16"));
    const ModelConfig& config = checkpoint->config();
    CudaOptions options = three_short_sequences();
    CudaModel whole(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    options.logit_staging_bytes = 3 * sizeof(float) * size_t(config.vocab_size);
    CudaModel sliced(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    const std::vector<int32_t> a_ids = {5, 6, 7, 8, 9}, b_ids = {11, 12}, c_ids = {3, 4, 5, 6};
    std::vector<std::vector<float>> out[2];
    CudaModel* models[2] = {&whole, &sliced};
    for (int m = 0; m < 2; ++m) {
        SequenceState a = models[m]->new_sequence(), b = models[m]->new_sequence(), c = models[m]->new_sequence();
        out[m] =
            models[m]->forward_batch(std::vector<BatchItem>{{&a, a_ids, true}, {&b, b_ids, false}, {&c, c_ids, true}});
        const auto step = models[m]->forward_batch(std::vector<BatchItem>{{&a, std::span(a_ids).first(1), false},
                                                                          {&b, std::span(b_ids).first(1), false},
                                                                          {&c, std::span(c_ids).first(1), false}});
        out[m].insert(out[m].end(), step.begin(), step.end());
    }
    ASSERT_EQ(out[0].size(), 6u);
    EXPECT_EQ(out[1][0].size(), size_t(5 * config.vocab_size));
    EXPECT_EQ(out[1][1].size(), size_t(config.vocab_size));
    EXPECT_EQ(out[1][2].size(), size_t(4 * config.vocab_size));
    for (size_t i = 0; i < out[0].size(); ++i)
        gpu_test::expect_bitwise_f32("logits of item " + std::to_string(i) + ", slices of 3 rows vs one copy",
                                     out[1][i], out[0][i]);
}

// forward_batch_into (the engine's and the bench's path) equals forward_batch bit for bit while it reuses its
// vectors: three steps of three, two and three sequences into one vector of vectors, which keeps its third entry
// (and its capacity) through the step of two.
TEST(CudaBatchApi, ForwardBatchIntoReusesItsVectors) {
    DSV4_REQUIRE_GPU();
    auto checkpoint = Checkpoint::open(fixture_dir("hf-tiny-hc2-hca16"));
    const ModelConfig& config = checkpoint->config();
    const CudaOptions options = three_short_sequences();
    CudaModel fresh(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    CudaModel reused(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    SequenceState fa = fresh.new_sequence(), fb = fresh.new_sequence(), fc = fresh.new_sequence();
    SequenceState ra = reused.new_sequence(), rb = reused.new_sequence(), rc = reused.new_sequence();
    const std::vector<std::vector<int32_t>> steps = {{5, 6, 7}, {8, 9}, {10, 11, 12}};
    std::vector<std::vector<float>> out;
    for (size_t k = 0; k < steps.size(); ++k) {
        const std::vector<int32_t>& ids = steps[k];
        std::vector<BatchItem> f = {{&fa, std::span(ids).subspan(0, 1), false},
                                    {&fb, std::span(ids).subspan(1, 1), false}};
        std::vector<BatchItem> r = {{&ra, std::span(ids).subspan(0, 1), false},
                                    {&rb, std::span(ids).subspan(1, 1), false}};
        if (ids.size() == 3) {
            f.push_back({&fc, std::span(ids).subspan(2, 1), false});
            r.push_back({&rc, std::span(ids).subspan(2, 1), false});
        }
        const std::vector<float> kept = out.size() == 3 ? out[2] : std::vector<float>{};
        const float* kept_data = out.size() == 3 ? out[2].data() : nullptr;
        const std::vector<std::vector<float>> want = fresh.forward_batch(f);
        reused.forward_batch_into(r, out);
        ASSERT_EQ(out.size(), 3u) << "step " << k;
        for (size_t i = 0; i < want.size(); ++i)
            gpu_test::expect_bitwise_f32("step " + std::to_string(k) + " item " + std::to_string(i), out[i], want[i]);
        if (ids.size() == 2) {
            EXPECT_EQ(out[2], kept) << "the entry past the items changed";
            EXPECT_EQ(out[2].data(), kept_data) << "the entry past the items was reallocated";
        }
    }
}

// The paged cache pool: sequences grow page by page in interleaved order (so a sequence's pages are not contiguous)
// and must compute the same bits as alone in a fresh pool; a request the pool cannot hold fails with a clear error
// and advances nothing; pages come back when a sequence is released.
TEST(CudaBatchApi, PagedPoolSharesPagesAndRefusesWhatDoesNotFit) {
    DSV4_REQUIRE_GPU();
    const std::string dir = fixture_dir("hf-tiny-hc2-hca16");  // CSA ratio 4 and HCA 16: 256 positions per page
    auto checkpoint = Checkpoint::open(dir);
    const ModelConfig& config = checkpoint->config();
    const std::vector<int32_t> fixture_ids = testing::to_ids(testing::Golden(dir + "/golden.safetensors").ints("input_ids"));
    auto ids = [&](int64_t from, int64_t n) {
        std::vector<int32_t> v(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) v[size_t(i)] = fixture_ids[size_t(from + i) % fixture_ids.size()];
        return v;
    };
    CudaOptions options;
    options.max_sequences = 3;
    options.max_context = 1024;
    options.pool_positions = 5 * 256;  // five pages for three sequences of up to four pages each
    options.max_chunk_tokens = 64;
    options.print_plan = false;
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);

    // A and B grow in turns: A 200 (page 1), B 300 (pages 2, 3), A +150 (page 4), B +100, A +100.
    SequenceState a = gpu.new_sequence(), b = gpu.new_sequence();
    std::vector<std::vector<float>> got;
    const std::vector<std::pair<char, int64_t>> turns = {{'a', 200}, {'b', 300}, {'a', 150}, {'b', 100}, {'a', 100}};
    int64_t fed_a = 0, fed_b = 0;
    for (const auto& [who, n] : turns) {
        SequenceState& s = who == 'a' ? a : b;
        int64_t& fed = who == 'a' ? fed_a : fed_b;
        const std::vector<int32_t> chunk = ids(fed + (who == 'a' ? 0 : 7), n);
        std::vector<float> logits = gpu.forward(s, chunk, true);
        if (who == 'a') got.push_back(std::move(logits));
        fed += n;
    }
    // Pages in use: A 2 (450 positions), B 2 (400); one free. C needs 3: refused, nothing advanced.
    SequenceState c = gpu.new_sequence();
    EXPECT_THROW(gpu.forward(c, ids(3, 600), false), Error) << "three pages asked, one free";
    EXPECT_EQ(c.position, 0);
    b = SequenceState{};  // B's two pages come back
    const std::vector<float> c_logits = gpu.forward(c, ids(3, 600), false);
    EXPECT_EQ(c.position, 600);

    // A alone in a fresh pool, same chunks: the same bits.
    CudaModel fresh(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    SequenceState alone = fresh.new_sequence();
    size_t k = 0;
    int64_t fed = 0;
    for (const auto& [who, n] : turns) {
        if (who != 'a') continue;
        const std::vector<float> logits = fresh.forward(alone, ids(fed, n), true);
        fed += n;
        gpu_test::expect_bitwise_f32("turn " + std::to_string(k) + " of A, shared pool vs A alone", got[k], logits);
        ++k;
    }
    SequenceState c_alone = fresh.new_sequence();
    const std::vector<float> c_fresh = fresh.forward(c_alone, ids(3, 600), false);
    gpu_test::expect_bitwise_f32("C on B's recycled pages vs C alone", c_logits, c_fresh);
}

#ifdef DSV4_HAVE_CUPTI
// Every CUDA API entry (runtime and driver) while recording.
struct ApiLog {
    bool recording = false;
    std::vector<std::string> calls;
};

void CUPTIAPI record_call(void* user, CUpti_CallbackDomain domain, CUpti_CallbackId, const void* data) {
    auto* log = static_cast<ApiLog*>(user);
    const auto* info = static_cast<const CUpti_CallbackData*>(data);
    if (!log->recording || info->callbackSite != CUPTI_API_ENTER) return;
    log->calls.push_back(std::string(domain == CUPTI_CB_DOMAIN_RUNTIME_API ? "rt " : "drv ") + info->functionName);
}

bool contains(const std::string& s, const char* what) {
    return s.find(what) != std::string::npos;
}
#endif

TEST(CudaBatchApi, ReplayedDecodeStepHasNoAllocationOrSyncBeforeTheLogits) {
    DSV4_REQUIRE_GPU();
#ifndef DSV4_HAVE_CUPTI
    // A GPU is there, so the test must run: a build without CUPTI cannot check this, which is a failure.
    FAIL() << "built without CUPTI (libcupti): the API calls of a decode step cannot be recorded";
#else
    auto checkpoint = Checkpoint::open(fixture_dir("native-mxfp4-mtp"));
    const ModelConfig& config = checkpoint->config();
    CudaOptions options;
    options.max_sequences = 4;
    options.max_context = 256;
    options.print_plan = false;
    CudaModel gpu(config, load_model_weights(checkpoint, config), Numerics::kModel, options);
    std::vector<SequenceState> states;
    for (int i = 0; i < 4; ++i) states.push_back(gpu.new_sequence());
    std::vector<std::vector<int32_t>> prompts = {{3, 4, 5}, {9}, {7, 8, 9, 10, 11, 12, 13}, {20, 21}};
    std::vector<BatchItem> items;
    for (int i = 0; i < 4; ++i) items.push_back({&states[size_t(i)], prompts[size_t(i)], false});
    gpu.forward_batch(items);
    const std::vector<int32_t> next = {30, 31, 32, 33};
    auto step = [&] {
        std::vector<BatchItem> decode;
        for (int i = 0; i < 4; ++i) decode.push_back({&states[size_t(i)], std::span(&next[size_t(i)], 1), false});
        return gpu.forward_batch(decode);
    };
    step();  // captures the graph of batch size 4

    ApiLog log;
    CUpti_SubscriberHandle subscriber;
    ASSERT_EQ(cuptiSubscribe(&subscriber, record_call, &log), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_RUNTIME_API), CUPTI_SUCCESS);
    ASSERT_EQ(cuptiEnableDomain(1, subscriber, CUPTI_CB_DOMAIN_DRIVER_API), CUPTI_SUCCESS);
    log.recording = true;
    const auto logits = step();
    log.recording = false;
    cuptiUnsubscribe(subscriber);
    ASSERT_EQ(logits.size(), 4u);

    std::string listing;
    size_t graph_launch = log.calls.size(), launches = 0, allocations = 0, early_syncs = 0;
    for (size_t i = 0; i < log.calls.size(); ++i) {
        const std::string& call = log.calls[i];
        listing += "  " + call + "\n";
        if (contains(call, "GraphLaunch") && graph_launch == log.calls.size()) graph_launch = i;
        launches += contains(call, "LaunchKernel") || contains(call, "cuLaunch");
        allocations += contains(call, "Malloc") || contains(call, "MemAlloc") || contains(call, "Free") ||
                       contains(call, "HostAlloc") || contains(call, "HostRegister") || contains(call, "Instantiate") ||
                       contains(call, "BeginCapture");
        const bool sync = contains(call, "Synchronize") || contains(call, "EventQuery") ||
                          contains(call, "StreamQuery") || (contains(call, "Memcpy") && !contains(call, "Async"));
        early_syncs += sync && i < graph_launch;
    }
    std::printf("[ api      ] one replayed decode step of 4 sequences, %zu CUDA API calls:\n%s", log.calls.size(),
                listing.c_str());
    EXPECT_LT(graph_launch, log.calls.size()) << "no graph launch";
    EXPECT_EQ(launches, 0u) << "kernels launched outside the graph";
    EXPECT_EQ(allocations, 0u) << "allocation, free or graph (re)build in the step";
    EXPECT_EQ(early_syncs, 0u) << "host synchronization before the graph ran";
    size_t graph_launches = 0;
    for (const std::string& call : log.calls) graph_launches += contains(call, "rt cudaGraphLaunch");
    EXPECT_EQ(graph_launches, 1u);
#endif
}

}  // namespace
}  // namespace dsv4
