// Device helpers for the number formats of DeepSeek-V4 activations and caches: bf16 (stored as __nv_bfloat16),
// FP8 E4M3FN and FP4 E2M1 codes (stored as bytes), UE8M0 power-of-two scales. Every encoder rounds exactly like
// its host counterpart in src/core/number_formats.{h,cpp} (round to nearest even, saturate finite), so GPU
// kernels and the CPU reference agree bit for bit. Tested through the quantization and packer tests
// (tests/gpu/quant_test.cpp: codes, scales and decoded values bitwise against the host, ties included).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace dsv4::cuda {

inline constexpr float kE4M3Max = 448.0f;
inline constexpr float kE2M1Max = 6.0f;
// The official act_quant multiplies by the f32-rounded reciprocal (fp8_max_inv), it does not divide.
inline constexpr float kE4M3MaxInv = 1.0f / kE4M3Max;
inline constexpr float kE2M1MaxInv = 1.0f / kE2M1Max;

// ---- bf16
__device__ __forceinline__ float bf16_to_f32(__nv_bfloat16 h) {
    return __uint_as_float(uint32_t(__bfloat16_as_ushort(h)) << 16);
}
// Round to nearest even; NaN keeps its sign and becomes quiet, exactly as dsv4::f32_to_bf16.
__device__ __forceinline__ __nv_bfloat16 f32_to_bf16(float x) {
    uint32_t u = __float_as_uint(x);
    if (x != x) return __ushort_as_bfloat16(uint16_t((u >> 16) | 0x0040u));
    u += 0x7FFFu + ((u >> 16) & 1u);
    return __ushort_as_bfloat16(uint16_t(u >> 16));
}
__device__ __forceinline__ float round_bf16(float x) {
    return bf16_to_f32(f32_to_bf16(x));
}
// Element c (0-7, in memory order) of eight bf16 loaded as one uint4, as f32 (exact).
__device__ __forceinline__ float bf16x8_at(const uint4& v, int c) {
    const uint32_t w = c < 2 ? v.x : c < 4 ? v.y : c < 6 ? v.z : v.w;
    return __uint_as_float(c % 2 ? w & 0xFFFF0000u : w << 16);
}

// ---- FP8 E4M3FN codes. Encoding: round to nearest even, finite values saturate to +-448 (the hardware
// cvt.rn.satfinite on sm_89 and later); decoding is exact.
__device__ __forceinline__ uint8_t f32_to_e4m3(float x) {
    return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float e4m3_to_f32(uint8_t code) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(code), __NV_E4M3)));
}
__device__ __forceinline__ float round_e4m3(float x) {
    return e4m3_to_f32(f32_to_e4m3(x));
}

// ---- FP4 E2M1 nibbles: 0:0 1:0.5 2:1 3:1.5 4:2 5:3 6:4 7:6, bit 3 the sign. Round to nearest with ties to
// the even code (0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4), saturate to 6;
// NaN encodes as +0 like dsv4::f32_to_e2m1. Packed pairs hold the even element in the low nibble.
__device__ __forceinline__ uint8_t f32_to_e2m1(float x) {
    if (x != x) return 0;
    const float a = fabsf(x);
    const uint8_t code = a <= 0.25f   ? 0
                         : a < 0.75f  ? 1
                         : a <= 1.25f ? 2
                         : a < 1.75f  ? 3
                         : a <= 2.5f  ? 4
                         : a < 3.5f   ? 5
                         : a <= 5.0f  ? 6
                                      : 7;
    return uint8_t(code | (signbit(x) ? 0x8 : 0x0));
}
__device__ __forceinline__ float e2m1_to_f32(uint8_t nibble) {
    const uint32_t m = nibble & 0x7u;
    // m < 2: m * 0.5; otherwise (2 + (m & 1)) * 2^((m >> 1) - 2)
    const float magnitude = m < 2 ? 0.5f * float(m) : float(2 + (m & 1u)) * __uint_as_float((125u + (m >> 1)) << 23);
    return (nibble & 0x8u) ? -magnitude : magnitude;
}
__device__ __forceinline__ float round_e2m1(float x) {
    return e2m1_to_f32(f32_to_e2m1(x));
}
__device__ __forceinline__ uint8_t pack_e2m1(float even, float odd) {
    return uint8_t(f32_to_e2m1(even) | (f32_to_e2m1(odd) << 4));
}

// ---- UE8M0 scales. The biased exponent of 2^ceil(log2(ratio)) for a positive normal ratio, from the bits as
// the official act_quant does: exponent + (mantissa != 0) (dsv4::ue8m0_ceil_pow2).
__device__ __forceinline__ uint32_t ue8m0_ceil_exponent(float ratio) {
    const uint32_t bits = __float_as_uint(ratio);
    return ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0 ? 1u : 0u);
}
// The scale as a float, 2^(e - 127), for a biased exponent in [1, 254].
__device__ __forceinline__ float e8m0_to_f32(uint32_t biased_exponent) {
    return __uint_as_float(biased_exponent << 23);
}

}  // namespace dsv4::cuda
