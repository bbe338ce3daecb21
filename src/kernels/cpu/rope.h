// Rotary embedding of the trailing rope_dim channels, interleaved (GPT-J) pairs (2i, 2i+1), with the two
// DeepSeek-V4 families: plain theta and YaRN-interpolated frequencies without magnitude scaling (spec §6).
// Tested in tests/kernels/rope_test.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model_config.h"

namespace dsv4::cpu {

struct RopeTable {
    int64_t rope_dim = 0;
    std::vector<float> inv_freq;  // [rope_dim / 2], f32 as the reference computes them
};

RopeTable make_rope_table(int64_t rope_dim, const RopeParams& params);

// Rotates x[0..rope_dim) (the rope slice only) by angle position * inv_freq[i], computed in f32;
// `inverse` rotates by the negative angle (the conjugate).
void apply_rope(float* x, const RopeTable& table, int64_t position, bool inverse = false);

}  // namespace dsv4::cpu
