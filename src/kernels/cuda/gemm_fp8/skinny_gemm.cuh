// The memory-bound small-M matrix product shared by gemm_fp8 (decode path), grouped_linear and moe_gemm:
// one block computes y[m, n] for up to kM tokens, kRowsPerBlock weight rows and one K range. Activations of the
// range are staged in shared memory as f32 (dequantized exactly); every weight byte is read once per token pass
// with 16-byte non-caching loads and decoded to f32 with its scale folded in exactly as cpu::dequantize_row does
// (w = value * scale); products are summed in f32 per lane, then across the warp. So the result is the reference's
// f32 sum up to summation order. Tested through gemm_fp8_test, grouped_linear_test and moe_gemm_test.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/vector_loads.cuh"

namespace dsv4::cuda::skinny {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kRowsPerWarp = 4;  // rows decoded together: 4 x (chunks per lane) 16-byte loads in flight
constexpr int kRowsPerBlock = kWarps * kRowsPerWarp;
constexpr int kSmemBytes = 64 * 1024;  // staged activations: kM * k_span f32 values

// Two e4m3 bytes (low byte = lower index) to f32; exact (e4m3 embeds in f16).
__device__ __forceinline__ float2 e4m3x2_to_float2(uint16_t two) {
    __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(two), __NV_E4M3);
    return __half22float2(*reinterpret_cast<__half2*>(&h));
}

__device__ __forceinline__ float e4m3_to_float(uint8_t b) {
    __half_raw h = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(b), __NV_E4M3);
    return __half2float(*reinterpret_cast<__half*>(&h));
}

// E2M1 nibble (bit 3 = sign) to f32: 0, 0.5, 1, 1.5, 2, 3, 4, 6.
__device__ __forceinline__ float e2m1_to_float(uint32_t nibble) {
    const uint32_t e = (nibble >> 1) & 3u, m = nibble & 1u;
    const uint32_t magnitude = e ? (((e + 126u) << 23) | (m << 22)) : (m ? 0x3F000000u : 0u);
    return __uint_as_float(magnitude | ((nibble & 8u) << 28));
}

// E8M0 byte to f32: 2^(e - 127); 0 is 2^-127 (a denormal), 255 is NaN.
__device__ __forceinline__ float e8m0_to_float(uint32_t e) {
    if (e == 255u) return __uint_as_float(0x7FC00000u);
    return e ? __uint_as_float(e << 23) : __uint_as_float(0x00400000u);
}

// Position of staged activation column kk (relative to the range start) in shared memory. Lane l decodes the
// kValues consecutive columns of chunk l of every 32 * kValues super-chunk; its q-th group of four is stored at
// float4 slot q * 32 + l, so the 32 lanes read 32 consecutive float4 (no bank conflicts).
template <int kValues>
__device__ __forceinline__ int staged_index(int kk) {
    constexpr int kSuper = 32 * kValues;
    const int within = kk % kSuper;
    return (kk - within) + (((within % kValues) / 4) * 32 + within / kValues) * 4 + (within % 4);
}

// One block's tile. Weight (format adapter, see skinny_weights.cuh): kValues (16 or 32 columns per 16-byte chunk),
//   Scale, load(n, k) -> uint4 (the chunk holding columns k..k+kValues-1 of row n), scale_at(n, k) -> Scale,
//   decode4(raw, scale, q) -> float4 of columns k+4q..k+4q+3 as f32 with the scale folded in.
// Act: load4(m, k) -> float4 of columns k..k+3 of token m (exact f32), m < tokens.
// Store: store(m, n, value, slot) for m < tokens, n < n_end; slot = (r * kM + m) / 32 (< 2) numbers the values a lane
//   stores, so a caller can accumulate several K ranges in registers.
// Contract: k_begin is a multiple of 32 * kValues; (k_end - k_begin) % kValues == 0 and k_end - k_begin padded up to
// a multiple of 32 * kValues is at most kSmemBytes / (4 * kM); n_begin < n_end. Every thread of the block calls it.
template <int kM, class Weight, class Act, class Store>
__device__ void tile(const Weight& weight, const Act& act, int tokens, int64_t n_begin, int64_t n_end,
                     int64_t k_begin, int64_t k_end, float* smem, const Store& store) {
    constexpr int kValues = Weight::kValues;
    constexpr int kSuper = 32 * kValues;
    static_assert(kValues % 4 == 0 && kM >= 1 && kM <= 16, "tile shape");
    const int span = int(k_end - k_begin);
    const int padded = (span + kSuper - 1) / kSuper * kSuper;

    // Stage activations [kM, padded] (zeros beyond the tokens and beyond k_end).
    const int groups = padded / 4;
    for (int i = threadIdx.x; i < kM * groups; i += kThreads) {
        const int m = i / groups, kk = (i % groups) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (m < tokens && kk < span) v = act.load4(m, k_begin + kk);
        *reinterpret_cast<float4*>(smem + m * padded + staged_index<kValues>(kk)) = v;
    }
    __syncthreads();

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t row0 = n_begin + warp * kRowsPerWarp;
    float acc[kRowsPerWarp][kM];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int m = 0; m < kM; ++m) acc[r][m] = 0.f;

    const int chunks = span / kValues;
    for (int c = lane; c < chunks; c += 32) {
        const int64_t k = k_begin + int64_t(c) * kValues;
        uint4 raw[kRowsPerWarp];
        typename Weight::Scale scale[kRowsPerWarp];
#pragma unroll
        for (int r = 0; r < kRowsPerWarp; ++r) {
            const int64_t n = row0 + r < n_end ? row0 + r : n_end - 1;  // rows past the end are computed, not stored
            raw[r] = weight.load(n, k);
            scale[r] = weight.scale_at(n, k);
        }
        const float* xs = smem + (c / 32) * kSuper + lane * 4;
#pragma unroll
        for (int q = 0; q < kValues / 4; ++q) {
            float4 w[kRowsPerWarp];
#pragma unroll
            for (int r = 0; r < kRowsPerWarp; ++r) w[r] = weight.decode4(raw[r], scale[r], q);
#pragma unroll
            for (int m = 0; m < kM; ++m) {
                const float4 x = *reinterpret_cast<const float4*>(xs + m * padded + q * 128);
#pragma unroll
                for (int r = 0; r < kRowsPerWarp; ++r) {
                    float a = acc[r][m];
                    a = fmaf(x.x, w[r].x, a);
                    a = fmaf(x.y, w[r].y, a);
                    a = fmaf(x.z, w[r].z, a);
                    a = fmaf(x.w, w[r].w, a);
                    acc[r][m] = a;
                }
            }
        }
    }

#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r)
#pragma unroll
        for (int m = 0; m < kM; ++m) {
            float v = acc[r][m];
#pragma unroll
            for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(0xFFFFFFFFu, v, offset);
            if ((r * kM + m) % 32 == lane && m < tokens && row0 + r < n_end) store(m, row0 + r, v, (r * kM + m) / 32);
        }
    __syncthreads();  // the caller may restage
}

// Dynamic shared memory above 48 KiB needs the kernel's opt-in.
template <typename Kernel>
cudaError_t allow_smem(Kernel kernel, int bytes) {
    if (bytes <= 48 * 1024) return cudaSuccess;
    return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

}  // namespace dsv4::cuda::skinny
