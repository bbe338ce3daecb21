// ProgressLine: see progress.h.
#include "core/progress.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstdio>

namespace dsv4 {

ProgressLine::ProgressLine(bool enabled)
    : active_(enabled && stderr_is_terminal()),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressLine::~ProgressLine() {
    // An exception unwound past us: end the half-drawn line so the error message starts on a fresh one.
    if (active_ && drawn_) std::fputs("\n", stderr);
}

bool ProgressLine::stderr_is_terminal() {
    return isatty(fileno(stderr)) != 0;
}

double ProgressLine::elapsed_s() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void ProgressLine::update(std::string_view text, bool force) {
    if (!active_) return;
    auto now = std::chrono::steady_clock::now();
    if (!force && now - last_draw_ < std::chrono::milliseconds(100)) return;
    last_draw_ = now;
    // \r returns to column 0, ESC[K clears what a longer previous line left behind.
    std::fprintf(stderr, "\r%.*s\x1b[K", int(text.size()), text.data());
    std::fflush(stderr);
    drawn_ = true;
}

void ProgressLine::finish(std::string_view summary) {
    if (!active_) return;
    std::fprintf(stderr, "\r%.*s\x1b[K\n", int(summary.size()), summary.data());
    std::fflush(stderr);
    active_ = false;
}

std::string format_bytes(uint64_t bytes) {
    double b = double(bytes);
    if (b >= 1e9) return fmt::format("{:.2f} GB", b / 1e9);
    if (b >= 1e6) return fmt::format("{:.1f} MB", b / 1e6);
    if (b >= 1e3) return fmt::format("{:.1f} kB", b / 1e3);
    return fmt::format("{} B", bytes);
}

}  // namespace dsv4
