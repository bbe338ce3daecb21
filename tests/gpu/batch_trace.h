// Batches of sequences and their greedy traces, shared by the batch-invariance tests: tests/gpu/cuda_batch_test.cpp
// (one GPU) and tests/gpu/every_gpu_test.cpp (expert parallel over every GPU). A BatchPlan's sequences are prefilled
// in one forward_batch call and decoded greedily together (together()), or each by itself (alone()); a Trace
// records every step's logits and the chosen tokens, compared bit for bit (expect_same()).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include "gpu_test_util.h"
#include "runtime/cuda/cuda_model.h"

namespace dsv4::batch_trace {

// A batch: the sequences' prompt lengths, the greedy decode steps of each, and how many of them (the first ones)
// stop half-way, so the batch shrinks and a second decode graph replays.
struct BatchPlan {
    std::vector<int64_t> prompt_lengths;
    int steps = 0;
    int finish_early = 0;

    int batch() const { return int(prompt_lengths.size()); }
    int steps_of(int i) const { return i < finish_early ? steps / 2 : steps; }
};

inline const BatchPlan kSixteen = {{1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 7, 4, 40, 17, 100, 64}, 10, 5};
inline const BatchPlan kFour = {{1, 70, 3, 17}, 4, 1};  // 70 tokens take two pieces of 64

// The model options of these tests: room for the plan's sequences plus one, pieces of 64 tokens (the prompts take
// several), no memory plan printed.
inline CudaOptions batch_options(const BatchPlan& plan) {
    CudaOptions options;
    options.max_sequences = plan.batch() + 1;
    options.max_context = 256;
    options.max_chunk_tokens = 64;
    options.print_plan = false;
    return options;
}

inline int32_t argmax(const float* logits, int64_t n) {
    return int32_t(std::max_element(logits, logits + n) - logits);  // first maximum: ties to the lower id
}

// One sequence's record: the logits after its prompt and after every decode step, and the tokens it chose.
struct Trace {
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> tokens;
};

// The logits of every step, one after another.
inline std::vector<float> all_steps(const Trace& t) {
    std::vector<float> v;
    for (const auto& step : t.logits) v.insert(v.end(), step.begin(), step.end());
    return v;
}

inline void expect_same(const Trace& got, const Trace& want, const std::string& what) {
    EXPECT_EQ(got.tokens, want.tokens) << what << ": greedy tokens differ";
    ASSERT_EQ(got.logits.size(), want.logits.size()) << what;
    gpu_test::expect_bitwise_f32(what + ": logits of every step", all_steps(got), all_steps(want));
}

// Sequence i's prompt: ids from a fixture, starting at 11 * i.
inline std::vector<int32_t> prompt(const std::vector<int32_t>& ids, const BatchPlan& plan, int i) {
    std::vector<int32_t> p(static_cast<size_t>(plan.prompt_lengths[size_t(i)]));
    for (size_t j = 0; j < p.size(); ++j) p[j] = ids[(size_t(i) * 11 + j) % ids.size()];
    return p;
}

// All sequences together: one prefill call, then decode steps over the sequences still running. With `draw`, every
// item asks the model for a greedy draw (BatchItem::draw): the traces hold the drawn tokens and no logits.
inline std::vector<Trace> together(CudaModel& gpu, const std::vector<int32_t>& ids, const BatchPlan& plan,
                                   bool draw = false) {
    const int64_t V = gpu.config().vocab_size;
    const int batch = plan.batch();
    std::vector<SequenceState> states;
    std::vector<std::vector<int32_t>> prompts;
    std::vector<Trace> traces(static_cast<size_t>(batch));
    std::vector<BatchItem> items;
    std::vector<TokenDraw> draws(static_cast<size_t>(batch));
    auto record = [&](Trace& t, std::vector<float>& logits, const TokenDraw& d) {
        if (draw) {
            EXPECT_TRUE(logits.empty()) << "a drawn item returns no logits";
            t.tokens.push_back(d.id);
        } else {
            t.tokens.push_back(argmax(logits.data(), V));
            t.logits.push_back(std::move(logits));
        }
    };
    for (int i = 0; i < batch; ++i) states.push_back(gpu.new_sequence()), prompts.push_back(prompt(ids, plan, i));
    for (int i = 0; i < batch; ++i)
        items.push_back({&states[size_t(i)], prompts[size_t(i)], false, draw ? &draws[size_t(i)] : nullptr});
    std::vector<std::vector<float>> out = gpu.forward_batch(items);
    for (int i = 0; i < batch; ++i) record(traces[size_t(i)], out[size_t(i)], draws[size_t(i)]);
    for (int step = 0; step < plan.steps; ++step) {
        items.clear();
        std::vector<int> running;
        for (int i = 0; i < batch; ++i)
            if (step < plan.steps_of(i)) {
                running.push_back(i);
                items.push_back({&states[size_t(i)], std::span(&traces[size_t(i)].tokens.back(), 1), false,
                                 draw ? &draws[running.size() - 1] : nullptr});
            }
        out = gpu.forward_batch(items);
        for (size_t j = 0; j < running.size(); ++j) record(traces[size_t(running[j])], out[j], draws[j]);
    }
    return traces;
}

// Sequence i by itself: its prompt, then one decode step at a time.
inline Trace alone(CudaModel& gpu, const std::vector<int32_t>& ids, const BatchPlan& plan, int i) {
    const int64_t V = gpu.config().vocab_size;
    SequenceState state = gpu.new_sequence();
    Trace t;
    t.logits.push_back(gpu.forward(state, prompt(ids, plan, i), false));
    t.tokens.push_back(argmax(t.logits.back().data(), V));
    for (int step = 0; step < plan.steps_of(i); ++step) {
        const int32_t id = t.tokens.back();
        t.logits.push_back(gpu.forward(state, std::span(&id, 1), false));
        t.tokens.push_back(argmax(t.logits.back().data(), V));
    }
    return t;
}

}  // namespace dsv4::batch_trace
