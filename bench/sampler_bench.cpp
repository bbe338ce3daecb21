// Host time to sample one token from V4's 129,280 logits, per sampling option, for the plain sampler (the
// definition in runtime/sampler.h computed by sorting the vocabulary, tests/runtime/plain_sampler.h) and
// runtime/sampler.cpp; and token_logprobs with 0 and 20 top alternatives. The serving engine samples every running
// request each step, so at batch 256 this times 256. Each sampler case first checks that both samplers draw the same
// ids (counter `same_draws`: must be 1). The floor: one pass over the row's 517 KB (scan_logits alone, `scan`).
// Usage: dsv4_bench_sampler [benchmark flags]
#include <benchmark/benchmark.h>

#include <random>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "runtime/plain_sampler.h"
#include "runtime/sampler.h"
#include "runtime/token_order.h"

namespace {

using namespace dsv4;

constexpr int64_t kVocab = 129280;
constexpr int kRows = 8;

// Rows shaped like a model's: a wide tail and a handful of likely tokens.
const std::vector<std::vector<float>>& rows() {
    static const std::vector<std::vector<float>> made = [] {
        std::mt19937_64 rng(7);
        std::normal_distribution<float> normal(0.0f, 2.5f);
        std::vector<std::vector<float>> r(kRows, std::vector<float>(kVocab));
        for (auto& row : r) {
            for (float& x : row) x = normal(rng);
            for (int hot = 0; hot < 6; ++hot) row[rng() % kVocab] += 12.0f + float(hot);
        }
        return r;
    }();
    return made;
}

struct Case {
    std::string name;
    SamplingParams params;
};

const std::vector<Case> kCases = {
    {"greedy", {.greedy = true}},
    {"temperature_1", {.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .seed = 1}},
    {"top_p_0.95_t_0.6", {.greedy = false, .temperature = 0.6f, .top_p = 0.95f, .top_k = 0, .seed = 2}},
    {"top_k_50_top_p_0.9", {.greedy = false, .temperature = 1.0f, .top_p = 0.9f, .top_k = 50, .seed = 3}},
    {"min_p_0.05", {.greedy = false, .temperature = 1.0f, .top_p = 1.0f, .top_k = 0, .min_p = 0.05f, .seed = 4}},
    {"top_p_0.9_t_2_flat", {.greedy = false, .temperature = 2.0f, .top_p = 0.9f, .top_k = 0, .seed = 5}},
};

template <typename S>
void BM_Sample(benchmark::State& state, SamplingParams params) {
    Sampler fast(params);
    test_reference::PlainSampler plain(params);
    int same = 0;
    for (int i = 0; i < kRows; ++i)
        same += fast.sample(rows()[i].data(), kVocab) == plain.sample(rows()[i].data(), kVocab);
    S sampler(params);
    int i = 0;
    for (auto _ : state) benchmark::DoNotOptimize(sampler.sample(rows()[i++ % kRows].data(), kVocab));
    state.counters["same_draws"] = double(same) / kRows;
}

void BM_Scan(benchmark::State& state) {
    int i = 0;
    for (auto _ : state) benchmark::DoNotOptimize(scan_logits(rows()[i++ % kRows].data(), kVocab));
    state.SetBytesProcessed(int64_t(state.iterations()) * kVocab * int64_t(sizeof(float)));
}

void BM_Logprobs(benchmark::State& state) {
    const int top = int(state.range(0));
    int i = 0;
    for (auto _ : state) benchmark::DoNotOptimize(token_logprobs(rows()[i++ % kRows].data(), kVocab, 5, top));
}

}  // namespace

int main(int argc, char** argv) {
    for (const Case& c : kCases) {
        benchmark::RegisterBenchmark(("sample/" + c.name + "/plain").c_str(), BM_Sample<test_reference::PlainSampler>,
                                     c.params)
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("sample/" + c.name + "/dsv4").c_str(), BM_Sample<Sampler>, c.params)
            ->Unit(benchmark::kMillisecond);
    }
    benchmark::RegisterBenchmark("scan", BM_Scan)->Unit(benchmark::kMillisecond);
    benchmark::RegisterBenchmark("token_logprobs", BM_Logprobs)->Arg(0)->Arg(20)->Unit(benchmark::kMillisecond);
    benchmark::Initialize(&argc, argv);
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
}
