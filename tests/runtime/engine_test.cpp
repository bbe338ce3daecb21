// The serving engine (runtime/engine.h) on the CPU backend and the embedded trained model
// (tests/fixtures/official-trained-bytes, model numerics): many requests of mixed lengths submitted at once give
// each the tokens and logprobs it gets alone, whatever the step budget chops its prompt into; the prefix cache
// serves the next turn of a conversation and a shared prompt start, with identical output and the cached tokens
// counted; cancellation ends a request at once and releases it; bad requests are refused at submit.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <future>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "runtime/engine.h"
#include "runtime/token_constraint.h"

namespace dsv4 {
namespace {

std::unique_ptr<CpuModel> load_model() {
    auto checkpoint = Checkpoint::open(test_fixtures::dir("official-trained-bytes"));
    return std::make_unique<CpuModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                      Numerics::kModel, 1);
}

CpuModel& model() {
    static std::unique_ptr<CpuModel> m = load_model();
    return *m;
}

struct Result {
    std::vector<int32_t> tokens;
    std::vector<float> logprobs;
    FinishReason reason = FinishReason::kError;
    int64_t cached = 0;
    std::string error;
    std::vector<SampledToken> prompt;  // the kPrompt event's, when asked
    int prompt_events = 0;
};

// Collects a request's events; wait() returns once kFinished arrived.
class Collector {
  public:
    std::function<void(const EngineEvent&)> callback() {
        return [this](const EngineEvent& e) {
            std::lock_guard lock(mutex_);
            if (e.kind == EngineEvent::Kind::kPrompt) {
                EXPECT_TRUE(result_.tokens.empty()) << "the prompt's scores come before any token";
                result_.prompt = e.prompt;
                ++result_.prompt_events;
            } else if (e.kind == EngineEvent::Kind::kToken) {
                result_.tokens.push_back(e.token.id);
                result_.logprobs.push_back(e.token.logprob);
                if (on_token_) on_token_(int64_t(result_.tokens.size()));
            } else {
                EXPECT_FALSE(done_) << "two kFinished events";
                result_.reason = e.reason;
                result_.cached = e.cached_tokens;
                result_.error = e.error;
                done_ = true;
                cv_.notify_all();
            }
        };
    }
    Result wait() {
        std::unique_lock lock(mutex_);
        EXPECT_TRUE(cv_.wait_for(lock, std::chrono::seconds(120), [&] { return done_; })) << "request never finished";
        return result_;
    }
    std::function<void(int64_t)> on_token_;

  private:
    std::mutex mutex_;
    std::condition_variable cv_;
    Result result_;
    bool done_ = false;
};

std::vector<int32_t> prompt_of(int64_t length, int seed) {
    std::vector<int32_t> p;
    const std::string text = "The quick brown fox jumps over the lazy dog. Licensed under the Apache License. ";
    for (int64_t i = 0; i < length; ++i) p.push_back(int32_t(uint8_t(text[size_t((i * 7 + seed * 13) % text.size())])));
    return p;
}

// The reference: the request alone, straight on the backend (prompt in one call, then one token at a time).
Result alone(const std::vector<int32_t>& prompt, int64_t max_new) {
    Backend& m = model();
    SequenceState state = m.new_sequence();
    std::vector<float> logits = m.forward(state, prompt, false);
    Result r;
    const int64_t V = m.config().vocab_size;
    while (true) {
        const int32_t id = argmax(logits.data(), V);
        r.tokens.push_back(id);
        r.logprobs.push_back(token_logprobs(logits.data(), V, id, 0).logprob);
        if (id == m.config().eos_token_id) return r.reason = FinishReason::kEos, r;
        if (int64_t(r.tokens.size()) == max_new) return r.reason = FinishReason::kLength, r;
        logits = m.forward(state, std::span(&id, 1), false);
    }
}

EngineRequest greedy_request(std::vector<int32_t> prompt, int64_t max_new, Collector& c) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    r.sampling.greedy = true;
    r.logprobs = 0;
    r.on_event = c.callback();
    return r;
}

// Waits until no request is queued or running (a request is counted out before its client hears it ended).
bool becomes_idle(const Engine& engine) {
    for (int i = 0; i < 5000 && !engine.idle(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return engine.idle();
}

EngineOptions options(int64_t step_tokens, int64_t cache_entries) {
    EngineOptions o;
    o.max_running = 6;
    o.step_tokens = step_tokens;
    o.max_context = model().config().max_position_embeddings;
    o.prefix_cache_entries = cache_entries;
    o.snapshot_interval = 32;
    return o;
}

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

TEST(Engine, PromptLogprobsScoreEveryIdAsTheWholePromptsForwardDoes) {
    // Each prompt id t > 0 is scored by the logits of position t - 1 of one forward over the whole prompt (bitwise,
    // whatever chunks the step budget cuts the prompt into), with its 3 most likely alternatives; the first id has
    // nothing before it. Then the tokens are those of the request alone. With max_new_tokens 0 nothing is generated.
    const std::vector<int32_t> prompt = prompt_of(45, 4);
    const int64_t V = model().config().vocab_size;
    SequenceState state = model().new_sequence();
    const std::vector<float> all = model().forward(state, prompt, true);
    for (int64_t budget : {7, 64}) {
        Engine engine(model(), options(budget, 4));
        Collector scored, only;
        EngineRequest r = greedy_request(prompt, 5, scored);
        r.prompt_logprobs = 3;
        engine.submit(std::move(r));
        EngineRequest o = greedy_request(prompt, 0, only);
        o.prompt_logprobs = 0;
        engine.submit(std::move(o));
        const Result got = scored.wait(), got_only = only.wait();
        ASSERT_EQ(got.prompt_events, 1);
        ASSERT_EQ(got.prompt.size(), prompt.size());
        EXPECT_EQ(got.prompt[0].id, prompt[0]);
        EXPECT_TRUE(std::isnan(got.prompt[0].logprob));
        EXPECT_TRUE(got.prompt[0].top.empty());
        for (size_t t = 1; t < prompt.size(); ++t) {
            const SampledToken want = token_logprobs(all.data() + (t - 1) * size_t(V), V, prompt[t], 3);
            EXPECT_EQ(got.prompt[t].id, prompt[t]);
            EXPECT_EQ(got.prompt[t].logprob, want.logprob) << "position " << t << ", budget " << budget;
            ASSERT_EQ(got.prompt[t].top.size(), 3u);
            for (size_t k = 0; k < 3; ++k) {
                EXPECT_EQ(got.prompt[t].top[k].id, want.top[k].id);
                EXPECT_EQ(got.prompt[t].top[k].logprob, want.top[k].logprob);
            }
        }
        const Result want = alone(prompt, 5);
        EXPECT_EQ(got.tokens, want.tokens);
        EXPECT_EQ(got.logprobs, want.logprobs);
        EXPECT_EQ(got.cached, 0) << "a scored prompt is computed whole";
        ASSERT_EQ(got_only.prompt.size(), prompt.size());
        EXPECT_EQ(got_only.prompt[9].logprob, got.prompt[9].logprob);
        EXPECT_TRUE(got_only.prompt[9].top.empty());
        EXPECT_TRUE(got_only.tokens.empty());
        EXPECT_EQ(got_only.reason, FinishReason::kLength);
        ASSERT_TRUE(becomes_idle(engine));
    }
}

TEST(Engine, LogprobsAreLogSoftmaxWithTheTopChoicesFirst) {
    const Backend& m = model();
    SequenceState state = model().new_sequence();
    const std::vector<float> logits = model().forward(state, prompt_of(12, 1), false);
    const int64_t V = m.config().vocab_size;
    const int32_t best = argmax(logits.data(), V);
    const SampledToken t = token_logprobs(logits.data(), V, best, 5);
    ASSERT_EQ(t.top.size(), 5u);
    EXPECT_EQ(t.top[0].id, best);
    EXPECT_EQ(t.top[0].logprob, t.logprob);
    double total = 0;
    for (int64_t i = 0; i < V; ++i) total += std::exp(double(token_logprobs(logits.data(), V, int32_t(i), 0).logprob));
    EXPECT_NEAR(total, 1.0, 1e-5);
    for (size_t i = 1; i < t.top.size(); ++i) EXPECT_GE(t.top[i - 1].logprob, t.top[i].logprob);
}

// A backend that hands every call to `inner` (the tests' backends override what they observe or change).
class ForwardingBackend : public Backend {
  public:
    explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
    const ModelConfig& config() const override { return inner_.config(); }
    Numerics numerics() const override { return inner_.numerics(); }
    SequenceState new_sequence() const override { return inner_.new_sequence(); }
    SequenceState copy_sequence(const SequenceState& s) const override { return inner_.copy_sequence(s); }
    std::vector<float> forward(SequenceState& s, std::span<const int32_t> ids, bool all_logits) override {
        return inner_.forward(s, ids, all_logits);
    }
    std::vector<float> forward_block(SequenceState& s, int64_t layer, int64_t start, std::span<const int32_t> ids,
                                     const float* streams_in) override {
        return inner_.forward_block(s, layer, start, ids, streams_in);
    }
    void set_observer(ActivationObserver observer) override { inner_.set_observer(std::move(observer)); }

  protected:
    Backend& inner_;
};

// A backend that draws tokens (Backend::draws_tokens) by the draw's definition, on the host: the model's logits,
// then runtime/sampler.h's draw with the uniform the engine took. Counts its draws; the draw numbered
// `nan_draw` reports NaN logits (-1), and with `refuse_batches` every batch is refused before it runs (a full GPU
// pool), so the engine runs its items one by one through forward() and draws on the host.
class DrawingBackend final : public ForwardingBackend {
  public:
    using ForwardingBackend::ForwardingBackend;
    bool draws_tokens() const override { return true; }
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override {
        DSV4_CHECK(!refuse_batches, "no room for this batch");
        std::vector<BatchItem> plain(items.begin(), items.end());
        for (BatchItem& item : plain) item.draw = nullptr;
        std::vector<std::vector<float>> logits = inner_.forward_batch(plain);
        for (size_t i = 0; i < items.size(); ++i) {
            TokenDraw* d = items[i].draw;
            if (!d) continue;
            EXPECT_FALSE(items[i].all_logits);
            SamplingParams p;
            p.greedy = d->greedy;
            p.temperature = d->temperature;
            p.min_p = d->min_p;
            d->id = draws++ == nan_draw ? -1 : Sampler(p).sample(logits[i].data(), config().vocab_size, d->u);
            logits[i].clear();
        }
        return logits;
    }
    std::atomic<int64_t> draws = 0;
    int64_t nan_draw = -1;
    bool refuse_batches = false;
};

// A backend that notes each batch it is given (every item's sequence, position and token count) and computes it
// on the model.
class RecordingBackend final : public ForwardingBackend {
  public:
    struct Item {
        const SequenceState* state;
        int64_t position, tokens;
    };
    using ForwardingBackend::ForwardingBackend;
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override {
        std::vector<Item> batch;
        for (const BatchItem& item : items)
            batch.push_back({item.state, item.state->position, int64_t(item.ids.size())});
        {
            std::lock_guard lock(mutex_);
            batches_.push_back(std::move(batch));
        }
        return inner_.forward_batch(items);
    }
    std::vector<std::vector<Item>> batches() const {
        std::lock_guard lock(mutex_);
        return batches_;
    }

  private:
    mutable std::mutex mutex_;
    std::vector<std::vector<Item>> batches_;
};

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

// Requests whose draws need no order of the vocabulary (greedy, temperature, min-p, top-k not below the vocabulary;
// no logprobs) are drawn where the backend draws, the others on the host; every request gets the tokens it gets
// with every draw on the host (its generator gives the same uniforms), with and without the prefix cache (which keeps
// a prompt's last logits, so a prompt's first token is then drawn on the host), and when the backend refuses the
// batch after the uniforms were taken.
TEST(Engine, DrawsWhereTheBackendDrawsGiveTheHostSamplersTokens) {
    const int64_t V = model().config().vocab_size;
    struct Case {
        SamplingParams sampling;
        int logprobs;
        bool drawn;  // by the backend
    };
    auto sampling = [](bool greedy, float temperature, float min_p, int64_t top_k, float top_p, uint64_t seed) {
        SamplingParams p;
        p.greedy = greedy, p.temperature = temperature, p.min_p = min_p, p.top_k = top_k, p.top_p = top_p;
        p.seed = seed;
        return p;
    };
    const std::vector<Case> cases = {
        {sampling(true, 1.0f, 0.0f, 0, 1.0f, 0), -1, true},       {sampling(true, 1.0f, 0.0f, 0, 1.0f, 0), 0, false},
        {sampling(false, 0.8f, 0.0f, 0, 1.0f, 7), -1, true},      {sampling(false, 1.3f, 0.05f, 0, 1.0f, 8), -1, true},
        {sampling(false, 1.0f, 0.0f, V, 1.0f, 9), -1, true},      {sampling(false, 0.9f, 0.0f, 5, 1.0f, 10), -1, false},
        {sampling(false, 1.0f, 0.0f, 0, 0.8f, 11), -1, false},    {sampling(false, 2.0f, 0.0f, 0, 1.0f, 12), 2, false},
    };
    constexpr int64_t kMaxNew = 9;
    for (const auto& [cache_entries, refuse] : {std::pair<int64_t, bool>{0, false}, {8, false}, {0, true}}) {
        {
            int64_t stats_draws = -1;
            auto run = [&](Backend& backend) {
                Engine engine(backend, options(7, cache_entries));
                std::vector<std::unique_ptr<Collector>> collectors;
                for (size_t i = 0; i < cases.size(); ++i) {
                    collectors.push_back(std::make_unique<Collector>());
                    EngineRequest r = greedy_request(prompt_of(6 + int64_t(i), int(i)), kMaxNew, *collectors.back());
                    r.sampling = cases[i].sampling;
                    r.logprobs = cases[i].logprobs;
                    r.stop_at_eos = false;
                    engine.submit(std::move(r));
                }
                std::vector<Result> results;
                for (auto& c : collectors) results.push_back(c->wait());
                EXPECT_TRUE(becomes_idle(engine));
                stats_draws = engine.stats().backend_draws;
                return results;
            };
            const std::vector<Result> want = run(model());
            DrawingBackend drawing(model());
            drawing.refuse_batches = refuse;
            const std::vector<Result> got = run(drawing);
            int64_t drawn = 0;
            for (size_t i = 0; i < cases.size(); ++i) {
                ASSERT_EQ(got[i].reason, FinishReason::kLength) << "request " << i << ": " << got[i].error;
                EXPECT_EQ(got[i].tokens, want[i].tokens) << "request " << i << ", cache " << cache_entries;
                EXPECT_EQ(got[i].logprobs, want[i].logprobs) << "request " << i;
                // With the cache, a prompt's first token comes from its cached last logits, on the host.
                if (cases[i].drawn) drawn += kMaxNew - (cache_entries > 0 ? 1 : 0);
            }
            EXPECT_EQ(drawing.draws.load(), refuse ? 0 : drawn) << "cache " << cache_entries;
            EXPECT_EQ(stats_draws, drawing.draws.load()) << "the engine counts the backend's draws";
        }
    }
}

// Penalties and biases (runtime/logit_adjust.h) through the engine: each request's greedy tokens are those of the
// definition written out here on the same model alone (the bias, the repetition penalty once per id of the prompt
// or the output, then the output's frequency and presence penalties, every operation in float), whatever else
// runs beside it; the logprobs stay the model's own; a backend that draws is never asked to draw for them.
TEST(Engine, PenaltiesAndBiasesAsDefinedAndDrawnOnTheHost) {
    const int64_t V = model().config().vocab_size;
    auto adjust = [](float rep, float freq, float pres, std::vector<std::pair<int32_t, float>> bias) {
        LogitAdjustments a;
        a.repetition_penalty = rep, a.frequency_penalty = freq, a.presence_penalty = pres;
        a.logit_bias = std::move(bias);
        return a;
    };
    const std::vector<LogitAdjustments> cases = {
        adjust(1.3f, 0.0f, 0.0f, {}), adjust(1.0f, 1.5f, 0.0f, {}), adjust(1.0f, 0.0f, 2.0f, {}),
        adjust(0.7f, -0.5f, 0.3f, {{101, 4.0f}, {32, -100.0f}}), adjust(1.0f, 0.0f, 0.0f, {{101, 100.0f}})};
    constexpr int64_t kMaxNew = 10;
    // The definition, alone on the model: one token at a time, argmax of the adjusted logits.
    auto reference = [&](const std::vector<int32_t>& prompt, const LogitAdjustments& a) {
        Backend& m = model();
        SequenceState state = m.new_sequence();
        std::vector<float> logits = m.forward(state, prompt, false);
        std::vector<int32_t> out;
        while (int64_t(out.size()) < kMaxNew) {
            std::vector<float> l = logits;
            for (const auto& [id, bias] : a.logit_bias) l[size_t(id)] += bias;
            for (int64_t id = 0; id < V; ++id) {
                const bool seen = std::count(prompt.begin(), prompt.end(), id) + std::count(out.begin(), out.end(), id);
                if (seen && a.repetition_penalty != 1.0f)
                    l[size_t(id)] = l[size_t(id)] > 0 ? l[size_t(id)] / a.repetition_penalty
                                                      : l[size_t(id)] * a.repetition_penalty;
                const int64_t count = std::count(out.begin(), out.end(), id);
                if (count > 0)
                    l[size_t(id)] = (l[size_t(id)] - a.frequency_penalty * float(count)) - a.presence_penalty;
            }
            out.push_back(argmax(l.data(), V));
            logits = m.forward(state, std::span(&out.back(), 1), false);
        }
        return out;
    };
    DrawingBackend drawing(model());
    Engine engine(drawing, options(16, 0));
    std::vector<std::unique_ptr<Collector>> collectors;
    for (size_t i = 0; i < cases.size(); ++i) {
        collectors.push_back(std::make_unique<Collector>());
        EngineRequest r = greedy_request(prompt_of(12 + int64_t(i), int(i)), kMaxNew, *collectors.back());
        r.adjust = cases[i];
        r.logprobs = -1;
        r.stop_at_eos = false;
        engine.submit(std::move(r));
    }
    for (size_t i = 0; i < cases.size(); ++i) {
        const Result got = collectors[i]->wait();
        ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
        EXPECT_EQ(got.tokens, reference(prompt_of(12 + int64_t(i), int(i)), cases[i])) << "case " << i;
    }
    EXPECT_EQ(std::vector<int32_t>(size_t(kMaxNew), 101), collectors.back()->wait().tokens) << "a +100 bias wins";
    EXPECT_EQ(drawing.draws.load(), 0) << "adjusted requests draw on the host";
    // Logprobs are the model's: a +100 bias picks token 101, whose reported logprob is its logprob under the
    // model's own logits (not ~0, as under the biased ones).
    Collector biased;
    EngineRequest b = greedy_request(prompt_of(9, 3), 1, biased);  // logprobs 0
    b.adjust = adjust(1.0f, 0.0f, 0.0f, {{101, 100.0f}});
    engine.submit(std::move(b));
    const Result br = biased.wait();
    SequenceState state = model().new_sequence();
    const std::vector<float> raw = model().forward(state, prompt_of(9, 3), false);
    ASSERT_EQ(br.tokens, std::vector<int32_t>{101});
    EXPECT_EQ(br.logprobs, std::vector<float>{token_logprobs(raw.data(), V, 101, 0).logprob});
    EngineRequest bad = greedy_request(prompt_of(4, 1), 1, biased);
    bad.adjust = adjust(1.0f, 3.0f, 0.0f, {});
    EXPECT_THROW(engine.submit(std::move(bad)), Error);
}

// A constraint of this test's own (structured/ has the real ones): ids of a set, never the id drawn just before, so
// its state must follow the draws.
class SetWithoutRepeats final : public TokenConstraint {
  public:
    explicit SetWithoutRepeats(std::vector<int32_t> ids) : ids_(std::move(ids)) {}
    std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<SetWithoutRepeats>(*this); }
    bool mask(float* logits, int64_t vocab) const override {
        bool any = false;
        for (int64_t id = 0; id < vocab; ++id) {
            if (allows(int32_t(id)))
                any = any || !std::isinf(logits[id]);
            else
                logits[id] = -std::numeric_limits<float>::infinity();
        }
        return any;
    }
    void advance(int32_t id) override {
        EXPECT_TRUE(allows(id)) << "drew " << id << " after " << last_;
        last_ = id;
    }
    bool allows(int32_t id) const { return id != last_ && std::find(ids_.begin(), ids_.end(), id) != ids_.end(); }

  private:
    std::vector<int32_t> ids_;
    int32_t last_ = -1;
};

// EngineRequest::constraint: greedy draws are the argmax of the masked logits, one at a time on the model alone;
// sampled ones keep to the mask too; all are made on the host, each request advancing its own copy; a constraint
// that leaves nothing ends its request with an error and the engine serves the next.
TEST(Engine, ConstrainedDrawsKeepToTheirMask) {
    const int64_t V = model().config().vocab_size;
    const auto constraint =
        std::make_shared<const SetWithoutRepeats>(std::vector<int32_t>{'a', 'e', 'o', ' ', 's', 't', 'n'});
    constexpr int64_t kMaxNew = 12;
    const std::vector<int32_t> prompt = prompt_of(14, 2);
    std::vector<int32_t> want;  // the definition, on the model alone
    {
        SequenceState state = model().new_sequence();
        std::vector<float> logits = model().forward(state, prompt, false);
        auto c = constraint->clone();
        while (int64_t(want.size()) < kMaxNew) {
            ASSERT_TRUE(c->mask(logits.data(), V));
            want.push_back(argmax(logits.data(), V));
            c->advance(want.back());
            logits = model().forward(state, std::span(&want.back(), 1), false);
        }
    }
    DrawingBackend drawing(model());
    Engine engine(drawing, options(16, 0));
    std::vector<std::unique_ptr<Collector>> collectors;
    for (int i = 0; i < 4; ++i) {
        collectors.push_back(std::make_unique<Collector>());
        EngineRequest r = greedy_request(prompt, kMaxNew, *collectors.back());
        r.logprobs = -1;
        r.constraint = constraint;
        if (i > 0) r.sampling.greedy = false, r.sampling.temperature = 1.5f, r.sampling.seed = uint64_t(i);
        engine.submit(std::move(r));
    }
    for (int i = 0; i < 4; ++i) {
        const Result got = collectors[size_t(i)]->wait();
        ASSERT_EQ(got.reason, FinishReason::kLength) << got.error;
        if (i == 0) {
            EXPECT_EQ(got.tokens, want);
        }
        SetWithoutRepeats check = *constraint;
        for (const int32_t id : got.tokens) check.advance(id);
    }
    EXPECT_EQ(drawing.draws.load(), 0) << "constrained requests draw on the host";

    Collector stuck, next;
    EngineRequest r = greedy_request(prompt, 4, stuck);
    r.constraint = std::make_shared<const SetWithoutRepeats>(std::vector<int32_t>{});
    engine.submit(std::move(r));
    const Result failed = stuck.wait();
    EXPECT_EQ(failed.reason, FinishReason::kError);
    EXPECT_NE(failed.error.find("no token"), std::string::npos) << failed.error;
    engine.submit(greedy_request(prompt, 2, next));
    EXPECT_EQ(next.wait().reason, FinishReason::kLength);
}

// A draw the backend reports as NaN logits ends that request with an error; the engine serves the next one.
TEST(Engine, ABackendDrawOfNaNLogitsEndsThatRequestOnly) {
    DrawingBackend drawing(model());
    drawing.nan_draw = 3;
    Engine engine(drawing, options(64, 0));
    Collector first, second;
    EngineRequest r = greedy_request(prompt_of(10, 1), 8, first);
    r.logprobs = -1;
    r.stop_at_eos = false;
    engine.submit(std::move(r));
    const Result failed = first.wait();
    EXPECT_EQ(failed.reason, FinishReason::kError);
    EXPECT_NE(failed.error.find("NaN"), std::string::npos) << failed.error;
    EXPECT_EQ(failed.tokens.size(), 3u);
    EngineRequest next = greedy_request(prompt_of(10, 1), 8, second);
    next.logprobs = -1;
    next.stop_at_eos = false;
    engine.submit(std::move(next));
    const Result ok = second.wait();
    EXPECT_EQ(ok.reason, FinishReason::kLength);
    ASSERT_EQ(ok.tokens.size(), 8u);
    EXPECT_EQ(failed.tokens, std::vector<int32_t>(ok.tokens.begin(), ok.tokens.begin() + 3)) << "the same greedy draws";
}

// vLLM's stop_token_ids and min_tokens: a stop id ends the reply as EOS does (delivered, reason kEos); before
// min_new_tokens neither EOS nor a stop id is drawn (greedy: the argmax without them, written out here on the model
// alone), and those draws are made on the host (a backend that draws is asked only after); the logprobs stay the
// model's own.
TEST(Engine, StopIdsEndTheReplyAndMinTokensHoldsThemBack) {
    const int64_t V = model().config().vocab_size;
    const int32_t eos = int32_t(model().config().eos_token_id);
    const std::vector<int32_t> prompt = prompt_of(12, 3);
    const auto reference = [&](const std::vector<int32_t>& stops, int64_t min_new, int64_t max_new) {
        SequenceState state = model().new_sequence();
        std::vector<float> logits = model().forward(state, prompt, false);
        Result r;
        while (true) {
            std::vector<float> row = logits;
            if (int64_t(r.tokens.size()) < min_new) {
                row[size_t(eos)] = -std::numeric_limits<float>::infinity();
                for (const int32_t id : stops) row[size_t(id)] = -std::numeric_limits<float>::infinity();
            }
            const int32_t id = argmax(row.data(), V);
            r.tokens.push_back(id);
            r.logprobs.push_back(token_logprobs(logits.data(), V, id, 0).logprob);
            if (id == eos || std::find(stops.begin(), stops.end(), id) != stops.end())
                return r.reason = FinishReason::kEos, r;
            if (int64_t(r.tokens.size()) == max_new) return r.reason = FinishReason::kLength, r;
            logits = model().forward(state, std::span(&id, 1), false);
        }
    };
    const Result free = reference({}, 0, 12);
    ASSERT_GE(free.tokens.size(), 4u);
    const std::vector<int32_t> stops = {free.tokens[2], free.tokens[3]};
    DrawingBackend drawing(model());
    Engine engine(drawing, options(64, 0));
    for (const int64_t min_new : {int64_t(0), int64_t(2), int64_t(6)}) {
        const Result want = reference(stops, min_new, 12);
        if (min_new == 0) {  // the free reply, up to its first stop id
            const auto first = std::find_first_of(free.tokens.begin(), free.tokens.end(), stops.begin(), stops.end());
            EXPECT_EQ(want.tokens, std::vector<int32_t>(free.tokens.begin(), first + 1));
        }
        for (const int logprobs : {0, -1}) {  // with logprobs every draw is the host's; without, the backend's may be
            Collector c;
            EngineRequest r = greedy_request(prompt, 12, c);
            r.stop_ids = stops;
            r.min_new_tokens = min_new;
            r.logprobs = logprobs;
            const int64_t draws_before = drawing.draws.load();
            engine.submit(std::move(r));
            const Result got = c.wait();
            EXPECT_EQ(got.reason, want.reason) << "min " << min_new;
            EXPECT_EQ(got.tokens, want.tokens) << "min " << min_new;
            if (logprobs == 0) {
                EXPECT_EQ(got.logprobs, want.logprobs) << "min " << min_new;
            } else {  // the first token is the prompt's (drawn by the backend when it may), then one per step
                const int64_t backend = drawing.draws.load() - draws_before;
                EXPECT_EQ(backend, int64_t(got.tokens.size()) - std::min<int64_t>(min_new, int64_t(got.tokens.size())))
                    << "min " << min_new << ": the draws before min_tokens are the host's";
            }
        }
    }
    Collector bad;
    EngineRequest r = greedy_request(prompt, 4, bad);
    r.min_new_tokens = 5;
    EXPECT_THROW(engine.submit(std::move(r)), Error);
    EngineRequest r2 = greedy_request(prompt, 4, bad);
    r2.stop_ids = {int32_t(V)};
    EXPECT_THROW(engine.submit(std::move(r2)), Error);
}

}  // namespace
}  // namespace dsv4
