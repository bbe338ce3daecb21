// The KV compressor of CSA/HCA layers and of the lightning indexer (spec §7.3, §7.8) as a per-sequence state
// machine fed one token at a time, so any split of a sequence into chunks gives the same entries.
// Tested in tests/model/compressor_test.cpp (every split point) and end to end by the golden fixtures.
#pragma once

#include <cstdint>
#include <vector>

#include "model/weights.h"

namespace dsv4 {

// Per-sequence state of one compressor. With overlap (ratio 4) slots [0, m) hold the previous complete window
// and [m, 2m) the current one; without overlap slots [0, m) hold the current window. Each slot keeps the full
// c*head_dim projection C and gate score Z (ape already added), in f32.
struct CompressorState {
    int64_t ratio = 0;
    int64_t width = 0;   // c * head_dim
    bool overlap = false;
    std::vector<float> kv;     // [slots, width]
    std::vector<float> score;  // [slots, width], -inf where empty

    void init(const CompressorWeights& w);
};

// Feeds token `position`'s projections (kv = wkv x, score = wgate x, both [width], f32, ape not yet added).
// When the token closes a window, writes the pooled entry e_w ([head_dim], f32, before norm/RoPE) to `entry`
// and returns true; the entry's index is position / ratio and its RoPE position (window start) is
// position + 1 - ratio.
bool compressor_step(CompressorState& state, const CompressorWeights& w, int64_t position, const float* kv,
                     const float* score, float* entry);

}  // namespace dsv4
