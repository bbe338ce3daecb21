// How close a top-k choice was to flipping, for the observer's margins (the indexer's top-k and the router's): the
// quantity the CPU's top_k / route_tokens report, computed from scores the GPU produced. Used by cuda_attention.cpp and
// cuda_moe.cpp; the CPU side's margins are tested in tests/model.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <vector>

namespace dsv4 {

// (s_k - s_k+1) / |s_k| of the k-th and (k+1)-th best of `scores` (ties to the lower index): how close a top-k
// choice was to flipping, as the CPU's top_k / route_tokens report it. +inf when nothing is left out.
inline float top_k_margin(const float* scores, int64_t count, int64_t k) {
    if (k <= 0 || k >= count) return std::numeric_limits<float>::infinity();
    std::vector<int64_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int64_t a, int64_t b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
    float next = -std::numeric_limits<float>::infinity();
    for (int64_t j = k; j < count; ++j) next = std::max(next, scores[order[static_cast<size_t>(j)]]);
    const float kth = scores[order[static_cast<size_t>(k - 1)]];
    return (kth - next) / std::max(std::fabs(kth), 1e-30f);
}

}  // namespace dsv4
