// A deadline on every call a rank makes on its model, so that a run over several GPUs never hangs. A rank whose
// peer is alive but stuck (a GPU that stopped making progress, a process that deadlocked) waits in a collective
// that never completes; no process exits, so neither the supervisor (launcher.h) nor the TCP watchdog
// (tcp_group.h) acts. StepWatchdog times each call on a thread of its own and, once one has run longer than the
// limit, calls `on_expiry` once with the call's name and its seconds (the rank runner says so and exits; the
// supervisor then stops the other ranks). Time between calls (an idle server, a follower waiting for the leader)
// never counts. WatchedBackend puts the deadline on a backend's calls. Tested in tests/parallel/step_watchdog_test.cpp.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>

#include "model/backend.h"

namespace dsv4::parallel {

constexpr double kMaxStepTimeout_s = 1e6;  // 11.6 days: "never" in practice, and far from the clock's overflow

class StepWatchdog {
  public:
    using OnExpiry = std::function<void(const std::string& call, double seconds)>;
    StepWatchdog(double limit_s, OnExpiry on_expiry);  // 0 < limit_s <= kMaxStepTimeout_s
    ~StepWatchdog();
    StepWatchdog(const StepWatchdog&) = delete;
    StepWatchdog& operator=(const StepWatchdog&) = delete;

    // The deadline runs from watch() until the guard goes. Calls made inside a watched call (a backend whose
    // forward_batch calls its forward) keep the outer call's deadline.
    class Guard {
      public:
        explicit Guard(StepWatchdog* owner) : owner_(owner) {}
        Guard(Guard&& other) noexcept : owner_(std::exchange(other.owner_, nullptr)) {}
        Guard(const Guard&) = delete;
        Guard& operator=(const Guard&) = delete;
        Guard& operator=(Guard&&) = delete;
        ~Guard() {
            if (owner_) owner_->leave();
        }

      private:
        StepWatchdog* owner_;
    };
    [[nodiscard]] Guard watch(const char* call);

  private:
    void leave();
    void run();

    const double limit_s_;
    const OnExpiry on_expiry_;
    std::mutex mutex_;
    std::condition_variable wake_;
    int depth_ = 0;
    const char* call_ = nullptr;
    std::chrono::steady_clock::time_point since_;
    uint64_t calls_ = 0;  // outermost calls begun: tells a new call from the one the thread was timing
    bool stop_ = false;
    std::thread thread_;
};

// The rank runner's on_expiry: says which call of which rank has run how long, and ends the process (the supervisor
// then stops the node's other ranks; across nodes the leader's TCP watchdog sees this rank go).
[[noreturn]] void exit_on_stall(int rank, const std::string& call, double seconds);

// A Backend whose calls that compute (new_sequence, copy_sequence, forward, forward_batch[_into], forward_block)
// run under a StepWatchdog; everything else goes straight to the inner backend.
class WatchedBackend final : public Backend {
  public:
    WatchedBackend(std::unique_ptr<Backend> inner, double limit_s, StepWatchdog::OnExpiry on_expiry)
        : inner_(std::move(inner)), watchdog_(limit_s, std::move(on_expiry)) {}

    const ModelConfig& config() const override { return inner_->config(); }
    Numerics numerics() const override { return inner_->numerics(); }
    SequenceState new_sequence() const override {
        auto guard = watchdog_.watch("new_sequence");
        return inner_->new_sequence();
    }
    SequenceState copy_sequence(const SequenceState& state) const override {
        auto guard = watchdog_.watch("copy_sequence");
        return inner_->copy_sequence(state);
    }
    std::vector<float> forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) override {
        auto guard = watchdog_.watch("forward");
        return inner_->forward(state, ids, all_logits);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const BatchItem> items) override {
        auto guard = watchdog_.watch("forward_batch");
        return inner_->forward_batch(items);
    }
    void forward_batch_into(std::span<const BatchItem> items, std::vector<std::vector<float>>& logits) override {
        auto guard = watchdog_.watch("forward_batch");
        inner_->forward_batch_into(items, logits);
    }
    std::vector<float> forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                     std::span<const int32_t> ids, const float* streams_in) override {
        auto guard = watchdog_.watch("forward_block");
        return inner_->forward_block(state, layer, start_position, ids, streams_in);
    }
    bool draws_tokens() const override { return inner_->draws_tokens(); }
    PoolUsage pool_usage() const override { return inner_->pool_usage(); }
    int placement(const SequenceState& state) const override { return inner_->placement(state); }
    std::vector<int64_t> sequences_per_placement() const override { return inner_->sequences_per_placement(); }
    void set_observer(ActivationObserver observer) override { inner_->set_observer(std::move(observer)); }

    Backend& inner() { return *inner_; }

  private:
    std::unique_ptr<Backend> inner_;
    mutable StepWatchdog watchdog_;
};

}  // namespace dsv4::parallel
