// ProgressLine: one self-overwriting status line on stderr for long operations (checkpoint opening, weight
// loading), plus a final summary line. It draws only when enabled and stderr is a terminal, so logs and pipes
// stay clean. Exercised by tests/io/checkpoint_test.cpp (which runs it with a non-terminal stderr).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

class ProgressLine {
  public:
    // `enabled` is the caller's wish; the line is drawn only if stderr is also a terminal.
    explicit ProgressLine(bool enabled);
    ~ProgressLine();
    ProgressLine(const ProgressLine&) = delete;
    ProgressLine& operator=(const ProgressLine&) = delete;

    bool active() const { return active_; }
    double elapsed_s() const;

    // Redraws the line with `text`; redraws are limited to ~10 per second unless `force`.
    void update(std::string_view text, bool force = false);
    // Replaces the line with `summary` and a newline; later updates are ignored.
    void finish(std::string_view summary);

    static bool stderr_is_terminal();

  private:
    bool active_ = false;
    bool drawn_ = false;
    std::chrono::steady_clock::time_point start_;
    std::chrono::steady_clock::time_point last_draw_;
};

// "1.23 GB", "456.0 MB", "12.0 kB", "17 B" (decimal units, as disk sizes are quoted).
std::string format_bytes(uint64_t bytes);

}  // namespace dsv4
