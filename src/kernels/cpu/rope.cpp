// Rotary embedding tables and rotation (spec §6), computed in f32 step by step as DeepSeek's
// precompute_freqs_cis does, so the table matches it (and transformers' YaRN, see below) bit for bit:
//   w_i   = 1 / f32(theta ^ f32(2i / r))                               (f32 pow, f32 reciprocal)
//   YaRN: low  = max(floor(corr(beta_fast)), 0), high = min(ceil(corr(beta_slow)), r - 1),
//         corr(n) = r ln(orig / (2 pi n)) / (2 ln theta) in double; high += 0.001 when low == high;
//         ramp_i = clamp((i - low) / (high - low), 0, 1); smooth_i = 1 - ramp_i;
//         w'_i  = (w_i / factor) * (1 - smooth_i) + w_i * smooth_i    (each operation rounded to f32)
//   So frequencies below index `low` (fast rotations) keep w_i and those above `high` become w_i / factor.
//   transformers computes the interpolated term as 1 / (factor * pos_freq) instead of (1 / pos_freq) / factor;
//   both are exact scalings when factor is a power of two (16 in every release, 4 in the test configs).
// Tested in tests/kernels/rope_test.cpp against tools/refgen/quant_vectors.py.
#include "kernels/cpu/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "core/error.h"

namespace dsv4::cpu {
namespace {

// The rotary dimension index whose frequency completes `rotations` turns over `seq_len` positions.
double correction_dim(double rotations, int64_t rope_dim, double theta, int64_t seq_len) {
    return double(rope_dim) * std::log(double(seq_len) / (rotations * 2.0 * std::numbers::pi)) /
           (2.0 * std::log(theta));
}

}  // namespace

RopeTable make_rope_table(int64_t rope_dim, const RopeParams& params) {
    DSV4_ASSERT(rope_dim > 0 && rope_dim % 2 == 0, "rope_dim {} must be even", rope_dim);
    const int64_t half = rope_dim / 2;
    RopeTable table;
    table.rope_dim = rope_dim;
    table.inv_freq.resize(size_t(half));
    const float theta = float(params.theta);
    for (int64_t i = 0; i < half; ++i) {
        float exponent = float(2 * i) / float(rope_dim);
        table.inv_freq[size_t(i)] = 1.0f / std::pow(theta, exponent);
    }
    if (!params.yarn || params.yarn->original_max_position_embeddings <= 0) return table;

    const YarnParams& yarn = *params.yarn;
    int64_t orig = yarn.original_max_position_embeddings;
    int64_t low =
        std::max<int64_t>(int64_t(std::floor(correction_dim(yarn.beta_fast, rope_dim, params.theta, orig))), 0);
    int64_t high = std::min<int64_t>(int64_t(std::ceil(correction_dim(yarn.beta_slow, rope_dim, params.theta, orig))),
                                     rope_dim - 1);
    double high_f = (low == high) ? double(high) + 0.001 : double(high);
    const float span = float(high_f - double(low));
    const float factor = float(yarn.factor);
    for (int64_t i = 0; i < half; ++i) {
        float ramp = std::clamp((float(i) - float(low)) / span, 0.0f, 1.0f);
        float smooth = 1.0f - ramp;
        float w = table.inv_freq[size_t(i)];
        float interpolated = w / factor * (1.0f - smooth);
        float extrapolated = w * smooth;
        table.inv_freq[size_t(i)] = interpolated + extrapolated;
    }
    return table;
}

void apply_rope(float* x, const RopeTable& table, int64_t position, bool inverse) {
    // Pair (2i, 2i+1) is the complex number a + ib, multiplied by cos + i sin (or its conjugate).
    const float p = float(position);
    for (int64_t i = 0; i < table.rope_dim / 2; ++i) {
        float angle = p * table.inv_freq[size_t(i)];
        float c = std::cos(angle);
        float s = inverse ? -std::sin(angle) : std::sin(angle);
        float a = x[2 * i], b = x[2 * i + 1];
        x[2 * i] = a * c - b * s;
        x[2 * i + 1] = a * s + b * c;
    }
}

}  // namespace dsv4::cpu
