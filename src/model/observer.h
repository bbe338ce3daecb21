// ActivationObserver: receives named intermediate values of a forward pass ([rows, cols] f32) for debugging,
// golden diffs and tests: activations (attn.q, attn_out, streams, ...) and the margins of discrete choices
// (ffn.router_margin, attn.index_margin), which say how close a top-k decision was to flipping.
#pragma once

#include <cstdint>
#include <functional>
#include <string_view>

namespace dsv4 {

using ActivationObserver = std::function<void(std::string_view name, int64_t layer, const float* data,
                                              int64_t rows, int64_t cols)>;

}  // namespace dsv4
