// The serving engine (runtime/engine.h) on the CPU backend and the embedded trained model
// (tests/fixtures/official-trained-bytes, model numerics): many requests of mixed lengths submitted at once give
// each the tokens and logprobs it gets alone, whatever the step budget chops its prompt into; the prefix cache
// serves the next turn of a conversation and a shared prompt start, with identical output and the cached tokens
// counted; cancellation ends a request at once and releases it; bad requests are refused at submit; the counters
// a client reads after its reply; longer prefill steps only while nobody decodes. The draws: engine_draws_test.cpp.
#include "engine_test_support.h"

namespace dsv4 {
namespace {

using namespace engine_test;

TEST(Engine, ConcurrentRequestsEqualEachAlone) {
    const int64_t lengths[] = {1, 5, 90, 17, 64, 3, 200, 33, 48, 2};
    const int64_t max_new[] = {12, 7, 10, 1, 16, 9, 5, 12, 3, 20};
    for (int64_t budget : {7, 64}) {  // 7: prompts in many chunks beside the decodes; 64: fewer, larger ones
        Engine engine(model(), options(budget, 0));
        std::vector<std::unique_ptr<Collector>> collectors;
        for (size_t i = 0; i < std::size(lengths); ++i) {
            collectors.push_back(std::make_unique<Collector>());
            engine.submit(greedy_request(prompt_of(lengths[i], int(i)), max_new[i], *collectors.back()));
        }
        for (size_t i = 0; i < std::size(lengths); ++i) {
            const Result got = collectors[i]->wait();
            const Result want = alone(prompt_of(lengths[i], int(i)), max_new[i]);
            EXPECT_EQ(got.tokens, want.tokens) << "request " << i << ", step budget " << budget;
            EXPECT_EQ(got.logprobs, want.logprobs) << "request " << i << " (bitwise)";
            EXPECT_EQ(got.reason, want.reason) << "request " << i;
            EXPECT_EQ(got.cached, 0);
        }
        ASSERT_TRUE(becomes_idle(engine));
        const Engine::Stats s = engine.stats();
        EXPECT_EQ(s.requests_finished, int64_t(std::size(lengths)));
        EXPECT_EQ(s.running, 0);
        EXPECT_EQ(s.waiting, 0);
    }
}

TEST(Engine, PrefixCacheServesTheNextTurnAndSharedStartsWithTheSameOutput) {
    Engine engine(model(), options(64, 8));
    // Turn 1, then turn 2 = turn 1's prompt + its reply + more text: only the new part is computed.
    const std::vector<int32_t> turn1 = prompt_of(40, 1);
    Collector c1;
    engine.submit(greedy_request(turn1, 6, c1));
    const Result r1 = c1.wait();
    ASSERT_EQ(r1.reason, FinishReason::kLength);
    std::vector<int32_t> turn2 = turn1;
    turn2.insert(turn2.end(), r1.tokens.begin(), r1.tokens.end());
    const std::vector<int32_t> more = prompt_of(9, 5);
    turn2.insert(turn2.end(), more.begin(), more.end());
    Collector c2;
    engine.submit(greedy_request(turn2, 8, c2));
    const Result r2 = c2.wait();
    const Result want2 = alone(turn2, 8);
    EXPECT_EQ(r2.cached, int64_t(turn1.size() + r1.tokens.size() - 1)) << "the state kept from turn 1";
    EXPECT_EQ(r2.tokens, want2.tokens);
    EXPECT_EQ(r2.logprobs, want2.logprobs);

    // Two prompts sharing their first 70 ids: the second starts from the first's snapshot at 64 (interval 32).
    std::vector<int32_t> a = prompt_of(70, 9), b = a;
    a.push_back(10);
    b.push_back(11);
    b.push_back(12);
    Collector ca, cb;
    engine.submit(greedy_request(a, 4, ca));
    EXPECT_EQ(ca.wait().cached, 0);
    engine.submit(greedy_request(b, 4, cb));
    const Result rb = cb.wait();
    EXPECT_EQ(rb.cached, 64);
    EXPECT_EQ(rb.tokens, alone(b, 4).tokens);
    EXPECT_EQ(rb.logprobs, alone(b, 4).logprobs);

    // The same prompt again: served whole from the cache (its state and last logits were kept at the prompt's end).
    const std::vector<int32_t> whole = prompt_of(61, 3);
    Collector w1, w2;
    engine.submit(greedy_request(whole, 3, w1));
    const Result first = w1.wait();
    engine.submit(greedy_request(whole, 3, w2));
    const Result second = w2.wait();
    EXPECT_EQ(second.cached, 61);
    EXPECT_EQ(second.tokens, first.tokens);
    EXPECT_EQ(second.logprobs, first.logprobs);
    EXPECT_EQ(second.tokens, alone(whole, 3).tokens);
    const Engine::Stats s = engine.stats();
    EXPECT_GE(s.prefix_hits, 3);
    EXPECT_LE(s.prefix_entries, 8);
}

TEST(Engine, CancelEndsARequestAndTheOthersGoOn) {
    Engine engine(model(), options(16, 4));
    Collector slow, other;
    std::promise<void> third_token;
    bool signalled = false;
    slow.on_token_ = [&](int64_t n) {
        if (n == 3 && !signalled) signalled = true, third_token.set_value();
    };
    const uint64_t id = engine.submit(greedy_request(prompt_of(20, 2), 200, slow));
    engine.submit(greedy_request(prompt_of(30, 3), 10, other));
    third_token.get_future().wait();
    engine.cancel(id);
    const Result cancelled = slow.wait();
    EXPECT_EQ(cancelled.reason, FinishReason::kCancelled);
    EXPECT_LT(cancelled.tokens.size(), 200u);
    const Result r = other.wait();
    EXPECT_EQ(r.tokens, alone(prompt_of(30, 3), 10).tokens);
    engine.cancel(id);  // again, after it ended: nothing happens
    Collector after;
    engine.submit(greedy_request(prompt_of(5, 4), 2, after));
    EXPECT_EQ(after.wait().reason, FinishReason::kLength);
    ASSERT_TRUE(becomes_idle(engine));
    EXPECT_EQ(engine.stats().running, 0);
}

// A client that heard its request end reads counters that no longer count it: /metrics polled right after the
// last reply shows nothing running and no sequence held but the prefix cache's (a cancelled request, requests whose
// sequence the cache keeps or replaces, and the same without a cache).
TEST(Engine, CountersNoLongerCountARequestWhenItsClientHearsItEnded) {
    for (int64_t cache_entries : {0, 1}) {
        Engine engine(model(), options(16, cache_entries));
        std::vector<Engine::Stats> at_finish;
        std::mutex mutex;
        auto request = [&](std::vector<int32_t> prompt, int64_t max_new, Collector& c) {
            EngineRequest r = greedy_request(std::move(prompt), max_new, c);
            r.on_event = [&, inner = r.on_event](const EngineEvent& e) {
                if (e.kind == EngineEvent::Kind::kFinished) {
                    std::lock_guard lock(mutex);
                    at_finish.push_back(engine.stats());
                }
                inner(e);
            };
            return r;
        };
        Collector slow, kept, replaced;
        std::promise<void> second_token;
        bool signalled = false;
        slow.on_token_ = [&](int64_t n) {
            if (n == 2 && !signalled) signalled = true, second_token.set_value();
        };
        const uint64_t id = engine.submit(request(prompt_of(20, 2), 200, slow));
        second_token.get_future().wait();
        engine.cancel(id);
        EXPECT_EQ(slow.wait().reason, FinishReason::kCancelled);
        engine.submit(request(prompt_of(30, 3), 4, kept));
        EXPECT_EQ(kept.wait().reason, FinishReason::kLength);
        engine.submit(request(prompt_of(12, 4), 3, replaced));
        EXPECT_EQ(replaced.wait().reason, FinishReason::kLength);
        std::lock_guard lock(mutex);
        ASSERT_EQ(at_finish.size(), 3u);
        for (size_t i = 0; i < at_finish.size(); ++i) {
            const Engine::Stats& s = at_finish[i];
            EXPECT_EQ(s.running, 0) << "request " << i << ", cache " << cache_entries;
            EXPECT_EQ(s.sequences_held, s.prefix_entries) << "request " << i << ", cache " << cache_entries;
            EXPECT_EQ(s.prefix_entries, cache_entries) << "request " << i << " (each prompt is cached at its end)";
        }
    }
}

TEST(Engine, BadRequestsAreRefusedAtSubmit) {
    Engine engine(model(), options(16, 0));
    Collector c;
    const int64_t context = model().config().max_position_embeddings;
    auto refused = [&](EngineRequest r, const char* words) {
        try {
            engine.submit(std::move(r));
            ADD_FAILURE() << "accepted a request that should be refused (" << words << ")";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
        }
    };
    refused(greedy_request({}, 1, c), "empty");
    refused(greedy_request({1, int32_t(model().config().vocab_size)}, 1, c), "outside the vocabulary");
    refused(greedy_request({1, -1}, 1, c), "outside the vocabulary");
    refused(greedy_request(prompt_of(10, 0), 0, c), "at least one token");
    refused(greedy_request(prompt_of(context, 0), 1, c), "context");
    refused(greedy_request(prompt_of(10, 0), context - 9, c), "context");
    EngineRequest hot = greedy_request(prompt_of(10, 0), 1, c);
    hot.sampling.greedy = false;
    hot.sampling.temperature = -1;
    refused(std::move(hot), "temp");
    // The engine still serves.
    Collector ok;
    engine.submit(greedy_request(prompt_of(10, 0), context - 10, ok));
    engine.cancel(1);  // an id that was never given out: ignored
}

// prefill_step_tokens: while every running request is reading its prompt, a step takes that many prompt tokens; once
// one decodes, steps keep to step_tokens (its next token waits for no long step). The same output either way.
TEST(Engine, LongerStepsOnlyWhileNoRequestDecodes) {
    RecordingBackend recording(model());
    EngineOptions o = options(7, 0);
    o.prefill_step_tokens = 64;
    Engine engine(recording, o);
    auto tokens_of = [](const std::vector<RecordingBackend::Item>& batch) {
        int64_t n = 0;
        for (const auto& item : batch) n += item.tokens;
        return n;
    };

    // A prompt alone: steps of 64 tokens, then its decode.
    Collector alone_collector;
    engine.submit(greedy_request(prompt_of(150, 1), 2, alone_collector));
    const Result lone = alone_collector.wait();
    EXPECT_EQ(lone.tokens, alone(prompt_of(150, 1), 2).tokens);
    ASSERT_TRUE(becomes_idle(engine));
    std::vector<int64_t> sizes;
    for (const auto& batch : recording.batches()) sizes.push_back(tokens_of(batch));
    EXPECT_EQ(sizes, (std::vector<int64_t>{64, 64, 22, 1}));

    // A prompt that arrives while another request decodes: chunks of 7 - 1 tokens beside that decode.
    const size_t before = recording.batches().size();
    std::promise<void> first_token;
    Collector decoding, arriving;
    decoding.on_token_ = [&](int64_t n) {
        if (n == 1) first_token.set_value();
    };
    EngineRequest long_reply = greedy_request(prompt_of(10, 2), 60, decoding);
    long_reply.stop_at_eos = false;
    engine.submit(std::move(long_reply));
    first_token.get_future().wait();
    engine.submit(greedy_request(prompt_of(150, 3), 1, arriving));
    const Result reply = decoding.wait();
    const Result arrived = arriving.wait();
    ASSERT_EQ(reply.tokens.size(), 60u);
    EXPECT_EQ(arrived.tokens, alone(prompt_of(150, 3), 1).tokens);
    EXPECT_EQ(arrived.logprobs, alone(prompt_of(150, 3), 1).logprobs);
    const std::vector<std::vector<RecordingBackend::Item>> batches = recording.batches();
    ASSERT_GT(batches.size(), before);
    ASSERT_EQ(batches[before].size(), 1u);
    const SequenceState* decoder = batches[before][0].state;  // its whole prompt in the first step
    EXPECT_EQ(batches[before][0].tokens, 10);
    int64_t beside = 0;  // the arriving prompt's tokens computed in steps with the decode
    for (size_t i = before; i < batches.size(); ++i) {
        const bool decodes = std::ranges::any_of(
            batches[i], [&](const auto& item) { return item.state == decoder && item.position >= 10; });
        if (decodes) {
            EXPECT_LE(tokens_of(batches[i]), 7) << "step " << i;
        }
        if (decodes && batches[i].size() == 2) beside += batches[i][1].tokens;
    }
    // The reply's 59 decodes outlast the prompt's 25 steps of 6 tokens.
    EXPECT_EQ(beside, 150);
}

}  // namespace
}  // namespace dsv4
