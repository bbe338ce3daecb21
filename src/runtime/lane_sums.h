// A sum in double of n terms as eight interleaved partial sums (term i into lane i % 8), then the lanes in order,
// then the terms past the last whole eight: independent chains of additions, which the compiler vectorizes (one
// chain costs ~4 cycles a term), in an order that is the same on every machine and build.
#pragma once

#include <cstdint>

namespace dsv4 {

// term(i) -> double for i in [0, n). Always inline, so that each vector build of its caller vectorizes it.
template <class Term>
[[gnu::always_inline]] inline double eight_lane_sum(int64_t n, Term term) {
    constexpr int kLanes = 8;
    double lane[kLanes] = {};
    int64_t i = 0;
    for (; i + kLanes <= n; i += kLanes)
        for (int k = 0; k < kLanes; ++k) lane[k] += term(i + k);
    double total = 0.0;
    for (int k = 0; k < kLanes; ++k) total += lane[k];
    for (; i < n; ++i) total += term(i);
    return total;
}

}  // namespace dsv4
