// Scalar number formats of DeepSeek-V4 checkpoints and activations (spec §11.3): bf16, f16, FP8 E4M3FN,
// E8M0 scales, FP4 E2M1. Decoders are exact; encoders round to nearest, ties to even, like the hardware
// conversions the official kernels use. Tested in tests/core/number_formats_test.cpp against hand-worked values.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace dsv4 {

inline uint32_t float_bits(float x) { return std::bit_cast<uint32_t>(x); }
inline float bits_float(uint32_t b) { return std::bit_cast<float>(b); }

// ---- bf16: the upper 16 bits of an IEEE float.
inline float bf16_to_f32(uint16_t h) { return bits_float(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float x) {
    uint32_t u = float_bits(x);
    if (std::isnan(x)) return uint16_t((u >> 16) | 0x0040);  // keep sign, force a quiet NaN
    u += 0x7FFFu + ((u >> 16) & 1u);                          // round to nearest, ties to even
    return uint16_t(u >> 16);
}
// x rounded to the nearest bf16 value (the model's activation dtype).
inline float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

// ---- IEEE half.
float f16_to_f32(uint16_t h);

// ---- FP8 E4M3FN: 1 sign, 4 exponent (bias 7), 3 mantissa bits; max 448; S.1111.111 is NaN; no infinities.
inline constexpr float kE4M3Max = 448.0f;
float e4m3_to_f32(uint8_t b);
// Rounds to nearest even and saturates finite values to +-448; NaN maps to 0x7F.
uint8_t f32_to_e4m3(float x);
// x rounded to the nearest E4M3 value (saturating), as a float.
float round_e4m3(float x);

// ---- E8M0 (UE8M0) scale: 2^(e - 127); 0xFF is NaN.
float e8m0_to_f32(uint8_t e);
// The power-of-two scale 2^ceil(log2(ratio)) for a positive normal `ratio`, computed from the exponent
// bits exactly as the official act_quant does: exponent + (mantissa != 0).
float ue8m0_ceil_pow2(float ratio);

// ---- FP4 E2M1: 1 sign, 2 exponent (bias 1), 1 mantissa bit. Nibble -> value:
// 0:0 1:0.5 2:1 3:1.5 4:2 5:3 6:4 7:6, bit 3 is the sign (8 is -0).
inline constexpr float kE2M1Max = 6.0f;
float e2m1_to_f32(uint8_t nibble);
// Rounds to nearest even and saturates to +-6; returns the nibble.
uint8_t f32_to_e2m1(float x);
float round_e2m1(float x);

}  // namespace dsv4
