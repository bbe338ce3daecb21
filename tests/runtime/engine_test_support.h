// What the serving engine's tests share (engine_test.cpp, engine_draws_test.cpp): the embedded trained model on the
// CPU backend, a request's events collected, the reference run of a request alone, and backends that forward to the
// model while they draw on the host, record the batches or refuse them.
#pragma once

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

namespace dsv4::engine_test {

inline std::unique_ptr<CpuModel> load_model() {
    auto checkpoint = Checkpoint::open(test_fixtures::dir("official-trained-bytes"));
    return std::make_unique<CpuModel>(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()),
                                      Numerics::kModel, 1);
}

inline CpuModel& model() {
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

inline std::vector<int32_t> prompt_of(int64_t length, int seed) {
    std::vector<int32_t> p;
    const std::string text = "The quick brown fox jumps over the lazy dog. Licensed under the Apache License. ";
    for (int64_t i = 0; i < length; ++i) p.push_back(int32_t(uint8_t(text[size_t((i * 7 + seed * 13) % text.size())])));
    return p;
}

// The reference: the request alone, straight on the backend (prompt in one call, then one token at a time).
inline Result alone(const std::vector<int32_t>& prompt, int64_t max_new) {
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

inline EngineRequest greedy_request(std::vector<int32_t> prompt, int64_t max_new, Collector& c) {
    EngineRequest r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    r.sampling.greedy = true;
    r.logprobs = 0;
    r.on_event = c.callback();
    return r;
}

// Waits until no request is queued or running (a request is counted out before its client hears it ended).
inline bool becomes_idle(const Engine& engine) {
    for (int i = 0; i < 5000 && !engine.idle(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return engine.idle();
}

inline EngineOptions options(int64_t step_tokens, int64_t cache_entries) {
    EngineOptions o;
    o.max_running = 6;
    o.step_tokens = step_tokens;
    o.max_context = model().config().max_position_embeddings;
    o.prefix_cache_entries = cache_entries;
    o.snapshot_interval = 32;
    return o;
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

}  // namespace dsv4::engine_test
