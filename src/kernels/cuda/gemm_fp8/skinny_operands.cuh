// Operand adapters of the skinny tile (skinny_gemm.cuh): weight decoders for the FP8 block-scaled, MXFP4 and NVFP4
// formats (docs/gpu-design.md layouts; value x scale in f32 exactly as cpu::dequantize_row), and activation loaders
// for FP8-quantized (e4m3 x pow2 f32 scale per 128, exact in f32) and bf16 activations. Tested through the GEMM tests.
#pragma once

#include "kernels/cuda/gemm_fp8/skinny_gemm.cuh"

namespace dsv4::cuda::skinny {

// FP8 weight: e4m3 [n, k] + f32 scales [ceil(n/128), scale_cols]. Chunk = 16 columns.
struct Fp8Weight {
    static constexpr int kValues = 16;
    using Scale = float;
    const uint8_t* data;  // [n, k] e4m3
    const float* scale;   // [ceil(n/128), scale_cols] f32
    int64_t k;
    int64_t scale_cols;
    __device__ uint4 load(int64_t n, int64_t kk) const { return load_streaming(data + n * k + kk); }
    __device__ Scale scale_at(int64_t n, int64_t kk) const { return __ldg(scale + (n / 128) * scale_cols + kk / 128); }
    __device__ float4 decode4(const uint4& raw, Scale s, int q) const {
        const uint32_t w = word(raw, q);
        const float2 lo = e4m3x2_to_float2(uint16_t(w & 0xFFFFu)), hi = e4m3x2_to_float2(uint16_t(w >> 16));
        return make_float4(lo.x * s, lo.y * s, hi.x * s, hi.y * s);
    }
};

// MXFP4 weight: packed e2m1 [n, k/2] (low nibble = even column) + E8M0 bytes [n, k/32]. Chunk = 32 columns,
// exactly one scale.
struct Mxfp4Weight {
    static constexpr int kValues = 32;
    using Scale = float;
    const uint8_t* data;   // [n, k/2]
    const uint8_t* scale;  // [n, k/32] E8M0
    int64_t k;
    __device__ uint4 load(int64_t n, int64_t kk) const { return load_streaming(data + n * (k / 2) + kk / 2); }
    __device__ Scale scale_at(int64_t n, int64_t kk) const {
        return e8m0_to_float(__ldg(scale + n * (k / 32) + kk / 32));
    }
    __device__ float4 decode4(const uint4& raw, Scale s, int q) const {
        const uint32_t bits = word(raw, q / 2) >> ((q % 2) * 16);
        return make_float4(e2m1_to_float(bits & 0xFu) * s, e2m1_to_float((bits >> 4) & 0xFu) * s,
                           e2m1_to_float((bits >> 8) & 0xFu) * s, e2m1_to_float((bits >> 12) & 0xFu) * s);
    }
};

// NVFP4 weight: packed e2m1 [n, k/2] + e4m3 scales [n, k/16] + f32 global scale: (value * scale) * global, the
// order of cpu::dequantize_row. Chunk = 32 columns, two scales.
struct Nvfp4Weight {
    static constexpr int kValues = 32;
    using Scale = float2;
    const uint8_t* data;   // [n, k/2]
    const uint8_t* scale;  // [n, k/16] e4m3
    float global;
    int64_t k;
    __device__ uint4 load(int64_t n, int64_t kk) const { return load_streaming(data + n * (k / 2) + kk / 2); }
    __device__ Scale scale_at(int64_t n, int64_t kk) const {
        const uint8_t* s = scale + n * (k / 16) + kk / 16;
        return make_float2(e4m3_to_float(__ldg(s)), e4m3_to_float(__ldg(s + 1)));
    }
    __device__ float4 decode4(const uint4& raw, Scale s, int q) const {
        const uint32_t bits = word(raw, q / 2) >> ((q % 2) * 16);
        const float b = q < 4 ? s.x : s.y;
        return make_float4(e2m1_to_float(bits & 0xFu) * b * global, e2m1_to_float((bits >> 4) & 0xFu) * b * global,
                           e2m1_to_float((bits >> 8) & 0xFu) * b * global,
                           e2m1_to_float((bits >> 12) & 0xFu) * b * global);
    }
};

// FP8-quantized activations: e4m3 [rows, k] + f32 scales [rows, scale_cols]; token m of the tile is row
// rows_index ? rows_index[row_base + m] : row_base + m.
struct Fp8Act {
    const uint8_t* data;  // [rows, k] e4m3
    const float* scale;   // [rows, scale_cols] f32
    int64_t k;
    int64_t scale_cols;
    const int32_t* rows_index;
    int64_t row_base;
    __device__ float4 load4(int m, int64_t kk) const {
        const int64_t row = rows_index ? rows_index[row_base + m] : row_base + m;
        const uint32_t w = *reinterpret_cast<const uint32_t*>(data + row * k + kk);
        const float s = scale[row * scale_cols + kk / 128];
        const float2 lo = e4m3x2_to_float2(uint16_t(w & 0xFFFFu)), hi = e4m3x2_to_float2(uint16_t(w >> 16));
        return make_float4(lo.x * s, lo.y * s, hi.x * s, hi.y * s);
    }
};

// bf16 activations: x[row_base + m, col0 + kk] with row stride ld.
struct Bf16Act {
    const __nv_bfloat16* data;
    int64_t ld;
    int64_t col0;
    int64_t row_base;
    __device__ float4 load4(int m, int64_t kk) const {
        const uint2 w = *reinterpret_cast<const uint2*>(data + (row_base + m) * ld + col0 + kk);
        const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.x));
        const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&w.y));
        return make_float4(lo.x, lo.y, hi.x, hi.y);
    }
};

}  // namespace dsv4::cuda::skinny
