// The single fatal path for internal invariant failures.
#include "core/error.h"

#include <cstdio>
#include <cstdlib>

namespace dsv4 {

void fatal_internal(const char* expression, const char* file, int line, const std::string& message) {
    std::fprintf(stderr, "dsv4: internal error: %s (%s) at %s:%d\n", message.c_str(), expression, file, line);
    std::fflush(stderr);
    std::abort();
}

}  // namespace dsv4
