// Errors: one exception type for everything a user can cause (bad file, bad request, bad flag), carrying a
// sentence the user can act on; and one fatal path for broken internal invariants (bugs), which print
// expression and file:line and abort. Library code never calls exit().
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace dsv4 {

class Error : public std::runtime_error {
public:
    explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A failure of the device or of the libraries that drive it (CUDA, cuBLAS, NCCL), not of the request: what the process
// holds on the device can no longer be trusted. A follower rank that meets one ends instead of waiting for the
// leader's next call (runtime/parallel/follow_leader.cpp), so a run never hangs on one rank's device failure.
class DeviceError : public Error {
public:
    using Error::Error;
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
    throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void fatal_internal(const char* expression, const char* file, int line, const std::string& message);

}  // namespace dsv4

// A user-facing check: throws dsv4::Error with the formatted message.
#define DSV4_CHECK(cond, ...)                 \
    do {                                      \
        if (!(cond)) ::dsv4::fail(__VA_ARGS__); \
    } while (0)

// An internal invariant: a failure is a bug in dsv4, never the user's input.
#define DSV4_ASSERT(cond, ...)                                                                  \
    do {                                                                                        \
        if (!(cond)) ::dsv4::fatal_internal(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
    } while (0)
