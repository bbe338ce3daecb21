// Integer rounding shared by the kernels' launchers (grids, tiles, block counts).
#pragma once

#include <cstdint>

namespace dsv4::cuda {

constexpr int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}
constexpr int64_t round_up(int64_t a, int64_t b) {
    return ceil_div(a, b) * b;
}

}  // namespace dsv4::cuda
