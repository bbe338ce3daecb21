// Device encoders/decoders of the packed entry formats (kv_entry_layout.h) with the CPU reference's rounding
// (src/core/number_formats.*, src/kernels/cpu/quant_sim.*): bf16 and e4m3 round to nearest even (e4m3 saturating),
// E2M1 round to nearest even saturating at 6, UE8M0 scale = 2^ceil(log2(ratio)) from the exponent bits.
// Private to the compressor, sparse_attention and indexer ops until common/numeric.cuh and quant/ land; tested
// through them (tests/gpu/compressor_test.cpp compares packed entries with the CPU reference).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace dsv4::cuda::entry {

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// The UE8M0 exponent byte of 2^ceil(log2(ratio)) for a positive normal ratio (exponent + (mantissa != 0)).
__device__ __forceinline__ uint32_t ue8m0_ceil_exponent(float ratio) {
    const uint32_t bits = __float_as_uint(ratio);
    return ((bits >> 23) & 0xFFu) + ((bits & 0x7FFFFFu) != 0u ? 1u : 0u);
}
__device__ __forceinline__ float e8m0_to_f32(uint32_t e) { return __uint_as_float(e << 23); }  // e in [1, 254]

__device__ __forceinline__ uint8_t f32_to_e4m3(float x) {
    return uint8_t(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}
__device__ __forceinline__ float e4m3_to_f32(uint8_t b) {
    return __half2float(__half(__nv_cvt_fp8_to_halfraw(__nv_fp8_storage_t(b), __NV_E4M3)));
}
// Bytes 0 (x) and 1 (y) of `pair`, each as e4m3_to_f32 (one conversion instruction for both).
__device__ __forceinline__ float2 e4m3x2_to_f32x2(uint16_t pair) {
    return __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(__nv_fp8x2_storage_t(pair), __NV_E4M3)));
}

// E2M1 nibble of x rounded to nearest even, saturating to +-6 (the grid 0, .5, 1, 1.5, 2, 3, 4, 6).
__device__ __forceinline__ uint32_t f32_to_e2m1(float x) {
    const uint32_t sign = (__float_as_uint(x) >> 31) << 3;
    const float a = fminf(fabsf(x), 6.0f);
    // Quantum 0.5 below 2 (subnormal and first binade), 1 in [2, 4), 2 in [4, 6]; rintf rounds ties to even.
    uint32_t code;
    if (a < 2.0f) {
        code = uint32_t(rintf(a * 2.0f));  // 0..4 (4 = the value 2.0)
    } else if (a < 4.0f) {
        code = 4u + uint32_t(rintf(a - 2.0f) );  // 2 -> 4, 3 -> 5, 4 -> 6
    } else {
        code = 6u + uint32_t(rintf((a - 4.0f) * 0.5f));  // 4 -> 6, 6 -> 7
    }
    return sign | code;
}
__device__ __forceinline__ float e2m1_to_f32(uint32_t nibble) {
    const uint32_t m = nibble & 7u;
    const float mag = m < 4u ? 0.5f * float(m) : (m < 6u ? float(m - 2u) : (m == 6u ? 4.0f : 6.0f));
    return (nibble & 8u) ? -mag : mag;
}

}  // namespace dsv4::cuda::entry
