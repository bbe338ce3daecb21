// StepWatchdog: see step_watchdog.h. One thread sleeps until the current call's deadline (or until a call begins);
// at the deadline it checks that the same call is still running before it fires.
#include "runtime/parallel/step_watchdog.h"

#include <unistd.h>

#include <cstdio>

#include "core/error.h"

namespace dsv4::parallel {

using Clock = std::chrono::steady_clock;

StepWatchdog::StepWatchdog(double limit_s, OnExpiry on_expiry) : limit_s_(limit_s), on_expiry_(std::move(on_expiry)) {
    DSV4_CHECK(limit_s > 0 && limit_s <= kMaxStepTimeout_s, "the step timeout must be in (0, {}] s (got {} s)",
               kMaxStepTimeout_s, limit_s);
    thread_ = std::thread([this] { run(); });
}

StepWatchdog::~StepWatchdog() {
    {
        std::lock_guard lock(mutex_);
        stop_ = true;
    }
    wake_.notify_all();
    thread_.join();
}

StepWatchdog::Guard StepWatchdog::watch(const char* call) {
    {
        std::lock_guard lock(mutex_);
        if (depth_++ == 0) {
            call_ = call;
            since_ = Clock::now();
            ++calls_;
        }
    }
    wake_.notify_all();
    return Guard(this);
}

void StepWatchdog::leave() {
    std::lock_guard lock(mutex_);
    if (--depth_ == 0) call_ = nullptr;
}

void StepWatchdog::run() {
    const auto limit = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(limit_s_));
    std::unique_lock lock(mutex_);
    while (!stop_) {
        if (!call_) {
            wake_.wait(lock, [&] { return stop_ || call_; });
            continue;
        }
        const uint64_t timing = calls_;
        const auto deadline = since_ + limit;
        // Woken early by a new call or the end; otherwise at the deadline, when this call may still be running.
        if (wake_.wait_until(lock, deadline, [&] { return stop_ || calls_ != timing; })) continue;
        if (!call_ || calls_ != timing) continue;  // it ended just in time
        const std::string call = call_;
        const double seconds = std::chrono::duration<double>(Clock::now() - since_).count();
        lock.unlock();
        on_expiry_(call, seconds);
        lock.lock();
        // Fired once per call: wait for the next one.
        wake_.wait(lock, [&] { return stop_ || calls_ != timing; });
    }
}

void exit_on_stall(int rank, const std::string& call, double seconds) {
    fmt::print(stderr,
               "dsv4: rank {}: {} has run for {:.0f} s (--step-timeout): a GPU or another rank is stuck; stopping\n",
               rank, call, seconds);
    std::fflush(stderr);
    _exit(1);
}

}  // namespace dsv4::parallel
