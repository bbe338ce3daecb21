// Scalar number formats: see number_formats.h.
#include "core/number_formats.h"

#include <algorithm>
#include <array>
#include <limits>

namespace dsv4 {
namespace {

// Round |x| to a binary floating-point format with `mantissa_bits` fraction bits whose smallest normal
// exponent is `min_exponent` (values below it are subnormal with the same quantum), ties to even, then
// saturate to `max_value`. Exact for the ranges used here: a/quantum is a power-of-two scaling.
float round_to_format(float x, int mantissa_bits, int min_exponent, float max_value) {
    if (x == 0.0f || std::isnan(x)) return x;
    float a = std::fabs(x);
    if (a >= max_value) return std::copysign(max_value, x);
    int e = 0;
    std::frexp(a, &e);  // a = f * 2^e with f in [0.5, 1): the normal exponent is e - 1
    int exponent = std::max(e - 1, min_exponent);
    float quantum = std::ldexp(1.0f, exponent - mantissa_bits);
    float r = std::nearbyint(a / quantum) * quantum;  // default rounding mode: nearest, ties to even
    return std::copysign(std::min(r, max_value), x);
}

constexpr std::array<float, 8> kE2M1Magnitudes = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

float f16_to_f32(uint16_t h) {
    uint32_t sign = uint32_t(h & 0x8000) << 16;
    int exponent = (h >> 10) & 0x1F;
    uint32_t mantissa = h & 0x3FF;
    float magnitude;
    if (exponent == 0)
        magnitude = std::ldexp(float(mantissa), -24);
    else if (exponent == 31)
        magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
    else
        magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
    return bits_float(float_bits(magnitude) | sign);
}

float e4m3_to_f32(uint8_t b) {
    bool negative = b & 0x80;
    int exponent = (b >> 3) & 0xF;
    int mantissa = b & 0x7;
    float magnitude;
    if (exponent == 0xF && mantissa == 0x7)
        magnitude = std::numeric_limits<float>::quiet_NaN();
    else if (exponent == 0)
        magnitude = std::ldexp(float(mantissa), -9);  // (m/8) * 2^-6
    else
        magnitude = std::ldexp(float(8 + mantissa), exponent - 10);  // (1 + m/8) * 2^(e-7)
    return negative ? -magnitude : magnitude;
}

float round_e4m3(float x) { return round_to_format(x, 3, -6, kE4M3Max); }

uint8_t f32_to_e4m3(float x) {
    if (std::isnan(x)) return 0x7F;
    float r = round_e4m3(x);
    uint8_t sign = std::signbit(r) ? 0x80 : 0x00;
    float a = std::fabs(r);
    if (a == 0.0f) return sign;
    int e = 0;
    std::frexp(a, &e);
    int exponent = e - 1;
    if (exponent < -6) return uint8_t(sign | uint8_t(std::ldexp(a, 9)));  // subnormal: m * 2^-9
    int mantissa = int(std::ldexp(a, 3 - exponent)) - 8;
    return uint8_t(sign | uint8_t((exponent + 7) << 3) | uint8_t(mantissa));
}

float e8m0_to_f32(uint8_t e) {
    if (e == 0xFF) return std::numeric_limits<float>::quiet_NaN();
    return std::ldexp(1.0f, int(e) - 127);
}

float ue8m0_ceil_pow2(float ratio) {
    uint32_t bits = float_bits(ratio);
    int exponent = int((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0 ? 1 : 0);
    return std::ldexp(1.0f, exponent - 127);
}

float e2m1_to_f32(uint8_t nibble) {
    float magnitude = kE2M1Magnitudes[nibble & 0x7];
    return (nibble & 0x8) ? -magnitude : magnitude;
}

float round_e2m1(float x) { return round_to_format(x, 1, 0, kE2M1Max); }

uint8_t f32_to_e2m1(float x) {
    float r = round_e2m1(std::isnan(x) ? 0.0f : x);
    uint8_t sign = std::signbit(r) ? 0x8 : 0x0;
    float a = std::fabs(r);
    for (uint8_t i = 0; i < kE2M1Magnitudes.size(); ++i)
        if (kE2M1Magnitudes[i] == a) return uint8_t(sign | i);
    return sign;  // unreachable: round_e2m1 only returns table values
}

}  // namespace dsv4
