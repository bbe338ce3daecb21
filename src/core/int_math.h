// Integer rounding for sizes, grids and block counts, on the host and (constexpr) in kernels. Tested through its
// users (the layouts and launchers whose sizes the tests check).
#pragma once

#include <cstdint>

namespace dsv4 {

constexpr int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
constexpr int64_t round_up(int64_t a, int64_t b) {
    return ceil_div(a, b) * b;
}

}  // namespace dsv4
