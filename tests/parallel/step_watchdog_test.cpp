// StepWatchdog and WatchedBackend: a call that outlives the limit fires once, with its name and seconds; calls
// within the limit, nested calls and idle time between calls never fire; the watched backend times the calls that
// compute and returns what the inner backend returns.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>
#include <vector>

#include "recording_backend.h"
#include "runtime/parallel/step_watchdog.h"

using namespace dsv4;
using namespace dsv4::parallel;
using namespace std::chrono_literals;

namespace {

struct Fired {
    std::mutex mutex;
    std::vector<std::pair<std::string, double>> calls;
    StepWatchdog::OnExpiry callback() {
        return [this](const std::string& call, double seconds) {
            std::lock_guard lock(mutex);
            calls.emplace_back(call, seconds);
        };
    }
    size_t count() {
        std::lock_guard lock(mutex);
        return calls.size();
    }
};

}  // namespace

TEST(StepWatchdog, ACallPastTheLimitFiresOnce) {
    Fired fired;
    StepWatchdog watchdog(0.05, fired.callback());
    {
        auto guard = watchdog.watch("forward_batch");
        std::this_thread::sleep_for(600ms);  // twelve limits: still one firing
    }
    ASSERT_EQ(fired.count(), 1u);
    EXPECT_EQ(fired.calls[0].first, "forward_batch");
    EXPECT_GE(fired.calls[0].second, 0.05);
    {
        auto guard = watchdog.watch("forward");  // the next stalled call fires again
        std::this_thread::sleep_for(600ms);
    }
    ASSERT_EQ(fired.count(), 2u);
    EXPECT_EQ(fired.calls[1].first, "forward");
}

TEST(StepWatchdog, ShortCallsNestedCallsAndIdleTimeNeverFire) {
    Fired fired;
    StepWatchdog watchdog(1.0, fired.callback());
    for (int i = 0; i < 40; ++i) {  // 40 calls of 20 ms: 800 ms in all, each well within the limit
        auto outer = watchdog.watch("forward_batch");
        auto inner = watchdog.watch("forward");
        std::this_thread::sleep_for(20ms);
    }
    std::this_thread::sleep_for(1200ms);  // idle: no call runs
    EXPECT_EQ(fired.count(), 0u);
}

TEST(StepWatchdog, NestedCallsKeepTheOuterDeadline) {
    Fired fired;
    StepWatchdog watchdog(0.1, fired.callback());
    {
        auto outer = watchdog.watch("forward_batch");
        for (int i = 0; i < 12; ++i) {  // inner calls begin and end, the outer one runs 600 ms
            auto inner = watchdog.watch("forward");
            std::this_thread::sleep_for(50ms);
        }
    }
    ASSERT_EQ(fired.count(), 1u);
    EXPECT_EQ(fired.calls[0].first, "forward_batch");
}

TEST(StepWatchdog, RefusesALimitOutOfRange) {
    EXPECT_THROW(StepWatchdog(0.0, [](const std::string&, double) {}), Error);
    EXPECT_THROW(StepWatchdog(1e10, [](const std::string&, double) {}), Error);  // past the clock's range in ns
}

TEST(StepWatchdog, TheLargestLimitDoesNotFireAtOnce) {
    Fired fired;
    StepWatchdog watchdog(kMaxStepTimeout_s, fired.callback());
    {
        auto guard = watchdog.watch("forward");
        std::this_thread::sleep_for(100ms);
    }
    EXPECT_EQ(fired.count(), 0u);
}

namespace {

// The tiny CPU model whose forwards take `delay` first.
class SlowBackend final : public Backend {
  public:
    explicit SlowBackend(std::chrono::milliseconds delay) : inner_(dsv4::testing::load_tiny_model()), delay_(delay) {}
    const ModelConfig& config() const override { return inner_->config(); }
    Numerics numerics() const override { return inner_->numerics(); }
    SequenceState new_sequence() const override { return inner_->new_sequence(); }
    SequenceState copy_sequence(const SequenceState& s) const override { return inner_->copy_sequence(s); }
    std::vector<float> forward(SequenceState& s, std::span<const int32_t> ids, bool all_logits) override {
        std::this_thread::sleep_for(delay_);
        return inner_->forward(s, ids, all_logits);
    }
    std::vector<float> forward_block(SequenceState& s, int64_t layer, int64_t start, std::span<const int32_t> ids,
                                     const float* streams_in) override {
        return inner_->forward_block(s, layer, start, ids, streams_in);
    }
    void set_observer(ActivationObserver observer) override { inner_->set_observer(std::move(observer)); }

  private:
    std::unique_ptr<Backend> inner_;
    std::chrono::milliseconds delay_;
};

}  // namespace

TEST(WatchedBackend, TimesTheCallsThatComputeAndPassesTheirResults) {
    Fired fired;
    auto plain = dsv4::testing::load_tiny_model();
    WatchedBackend watched(std::make_unique<SlowBackend>(500ms), 0.1, fired.callback());
    SequenceState a = plain->new_sequence(), b = watched.new_sequence();
    const std::vector<int32_t> ids = {1, 2, 3};
    EXPECT_EQ(watched.forward(b, ids, true), plain->forward(a, ids, true));
    EXPECT_EQ(b.position, 3);
    ASSERT_EQ(fired.count(), 1u);
    EXPECT_EQ(fired.calls[0].first, "forward");
    // forward_batch (the base class runs its items through forward) is one watched call, named as such.
    SequenceState c = watched.new_sequence();
    std::vector<int32_t> one = {4};
    watched.forward_batch(std::vector<BatchItem>{{&b, one}, {&c, one}});
    ASSERT_EQ(fired.count(), 2u);
    EXPECT_EQ(fired.calls[1].first, "forward_batch");
    EXPECT_EQ(watched.config().vocab_size, plain->config().vocab_size);
}
