// Draws on the GPU (kernels/cuda/sampling) against the host sampler (runtime/sampler.h): for the same logits and the
// request's generator (the GPU row gets the uniform the host sampler would draw), every greedy, temperature and
// min-p draw gives the same id, on rows shaped like a model's (V4's 129,280 ids: a normal spread and a few tokens far
// above it), on small and odd vocabularies around the 1,024-candidate blocks, and on rows with ties and infinities;
// a row holding a NaN gives -1 (the host refuses it).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "gpu_test_util.h"
#include "kernels/cuda/common/device_buffer.h"
#include "kernels/cuda/sampling/sampling.h"
#include "runtime/sampler.h"

namespace dsv4 {
namespace {

static_assert(cuda::kDrawBlock == kSampleBlock, "the GPU sums the host sampler's blocks");

struct Row {
    std::vector<float> logits;
    SamplingParams params;
    std::string what;
};

// A model-like row: N(0, 2.5) logits and six tokens 12-17 above them.
std::vector<float> model_like(int64_t vocab, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 2.5f);
    std::vector<float> l(static_cast<size_t>(vocab));
    for (float& x : l) x = normal(rng);
    for (int i = 0; i < 6 && i < vocab; ++i) l[size_t(rng() % uint64_t(vocab))] = 12.0f + float(i);
    return l;
}

// One launch over `rows` (all of `vocab` ids), each row's id against the host sampler's, with the rows cut into the
// segments the batch gets and into 1, 3 and 64 (any count gives the same ids). Draw i reads row n - 1 - i (a draw
// names its row).
void expect_same_draws(int64_t vocab, const std::vector<Row>& rows) {
    const int64_t n = int64_t(rows.size());
    std::vector<float> logits;
    std::vector<cuda::RowDraw> draws;
    std::vector<int32_t> want;
    for (const Row& r : rows) {
        ASSERT_EQ(int64_t(r.logits.size()), vocab);
        logits.insert(logits.end(), r.logits.begin(), r.logits.end());
        cuda::RowDraw d;
        d.logits_row = int32_t(draws.size());
        d.greedy = r.params.greedy;
        d.temperature = r.params.temperature;
        d.min_p = r.params.min_p;
        std::mt19937_64 generator(r.params.seed);  // the Sampler's: its first non-greedy draw takes one uniform
        d.u = uniform_53(generator);
        draws.push_back(d);
        try {
            want.push_back(Sampler(r.params).sample(r.logits.data(), vocab));
        } catch (const Error&) {
            want.push_back(-1);  // a NaN row
        }
    }
    std::reverse(draws.begin(), draws.end());
    std::reverse(want.begin(), want.end());
    const cuda::DeviceBuffer<cuda::RowDraw> d_draws = gpu_test::to_device(draws);
    cuda::DeviceBuffer<uint8_t> scratch(cuda::sample_rows_scratch_bytes(n, vocab));
    for (const int segments : {0, 1, 3, cuda::kMaxDrawSegments}) {
        cuda::DeviceBuffer<float> d_logits = gpu_test::to_device(logits);  // the draws overwrite their rows
        // Poisoned with 0x7F7F7F7F, neither an id nor the NaN rows' -1: a row the kernels never write fails.
        cuda::DeviceBuffer<int32_t> ids = gpu_test::poisoned<int32_t>(static_cast<size_t>(n), 0x7F);
        cuda::SampleParams p;
        p.logits = d_logits.get();
        p.draws = d_draws.get();
        p.ids = ids.get();
        p.scratch = scratch.get();
        p.draws_count = n;
        p.vocab = vocab;
        p.segments = segments;
        cuda::sample_rows(p, nullptr);
        ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
        const std::vector<int32_t> got = gpu_test::to_host(ids);
        for (int64_t i = 0; i < n; ++i) {
            const int32_t row = draws[size_t(i)].logits_row;
            EXPECT_EQ(got[size_t(i)], want[size_t(i)])
                << "vocab " << vocab << ", row " << row << ", segments " << segments << ": " << rows[size_t(row)].what;
        }
    }
}

SamplingParams params(bool greedy, float temperature, float min_p, uint64_t seed) {
    SamplingParams p;
    p.greedy = greedy;
    p.temperature = temperature;
    p.min_p = min_p;
    p.seed = seed;
    return p;
}

TEST(GpuSampling, DrawsEqualTheHostSamplerOnModelLikeRows) {
    DSV4_REQUIRE_GPU();
    constexpr int64_t kVocab = 129280;
    gpu_test::Rng seeded;
    std::mt19937& rng = seeded.engine();
    std::vector<Row> rows;
    uint64_t seed = 1;
    for (float temperature : {0.6f, 1.0f, 2.0f})
        for (float min_p : {0.0f, 0.05f})
            for (int k = 0; k < 8; ++k)
                rows.push_back({model_like(kVocab, rng), params(false, temperature, min_p, seed++),
                                "T " + std::to_string(temperature) + " min_p " + std::to_string(min_p)});
    // Flat rows: the draw falls anywhere among ~100k candidates, across many blocks.
    for (int k = 0; k < 8; ++k) {
        std::vector<float> l = model_like(kVocab, rng);
        for (float& x : l) x *= 0.01f;
        rows.push_back({l, params(false, 2.0f, 0.0f, seed++), "flat"});
    }
    for (int k = 0; k < 4; ++k) rows.push_back({model_like(kVocab, rng), params(true, 1.0f, 0.0f, seed++), "greedy"});
    expect_same_draws(kVocab, rows);
}

TEST(GpuSampling, DrawsEqualTheHostSamplerAroundTheBlocks) {
    DSV4_REQUIRE_GPU();
    gpu_test::Rng seeded;
    std::mt19937& rng = seeded.engine();
    uint64_t seed = 100;
    for (int64_t vocab : {1, 7, 1023, 1024, 1025, 2049, 5000}) {
        std::vector<Row> rows;
        for (float min_p : {0.0f, 0.2f})
            for (int k = 0; k < 6; ++k) {
                std::vector<float> l = model_like(vocab, rng);
                for (float& x : l) x *= 0.1f;  // many candidates, so the blocks' edges are crossed
                rows.push_back({l, params(false, 1.0f, min_p, seed++), "min_p " + std::to_string(min_p)});
            }
        rows.push_back({std::vector<float>(size_t(vocab), 0.5f), params(true, 1.0f, 0.0f, seed++), "ties, greedy"});
        rows.push_back({std::vector<float>(size_t(vocab), 0.5f), params(false, 1.0f, 0.0f, seed++), "ties"});
        expect_same_draws(vocab, rows);
    }
}

TEST(GpuSampling, InfinitiesAndNaN) {
    DSV4_REQUIRE_GPU();
    constexpr int64_t kVocab = 3000;
    const float inf = std::numeric_limits<float>::infinity();
    gpu_test::Rng seeded;
    std::mt19937& rng = seeded.engine();
    std::vector<Row> rows;
    std::vector<float> l = model_like(kVocab, rng);
    for (int i = 0; i < kVocab; i += 3) l[size_t(i)] = -inf;
    rows.push_back({l, params(false, 1.0f, 0.0f, 7), "a third -inf"});
    rows.push_back({l, params(true, 1.0f, 0.0f, 7), "a third -inf, greedy"});
    l[1234] = inf;
    rows.push_back({l, params(false, 1.0f, 0.0f, 8), "one +inf"});
    rows.push_back({std::vector<float>(size_t(kVocab), -inf), params(false, 1.0f, 0.0f, 9), "all -inf"});
    std::vector<float> nan_row = model_like(kVocab, rng);
    nan_row[2999] = std::nanf("");
    rows.push_back({nan_row, params(false, 1.0f, 0.0f, 10), "a NaN"});
    rows.push_back({nan_row, params(true, 1.0f, 0.0f, 10), "a NaN, greedy"});
    expect_same_draws(kVocab, rows);
}

}  // namespace
}  // namespace dsv4
