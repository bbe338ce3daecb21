// Elementwise conversions the GPU executor needs between the library kernels (docs/numerics.md):
//   bf16_to_f32  bf16 activations -> f32 GEMM input (exact), for dense f32 weights (cuBLASLt f32, no TF32)
//   f32_to_bf16  f32 GEMM output -> bf16 (round to nearest even: the `model` numerics cast of a linear output),
//                optionally times a constant and rounded again (indexer head weights: bf16(bf16(w x) * s))
//   fill_f32     x[i] = value (compressor state reset: 0 and -inf)
//   gather_rows_bf16  y[i] = x[rows[i]] (the rows of a batched piece whose logits are wanted)
// Tested in tests/gpu/convert_test.cpp (f32_to_bf16 bitwise against the host) and through
// tests/gpu/cuda_model_test.cpp (GPU vs CPU forward).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct Bf16ToF32Params {
    const __nv_bfloat16* x = nullptr;  // [rows, cols] bf16, row stride x_stride
    float* y = nullptr;                // [rows, cols] f32, dense
    int64_t rows = 0, cols = 0, x_stride = 0;
};
void bf16_to_f32(const Bf16ToF32Params& p, cudaStream_t stream);

struct F32ToBf16Params {
    const float* x = nullptr;    // [rows, cols] f32, row stride x_stride
    __nv_bfloat16* y = nullptr;  // [rows, cols] bf16, row stride y_stride
    int64_t rows = 0, cols = 0, x_stride = 0, y_stride = 0;
    // != 1: y = bf16(bf16(x) * scale), the bf16 value scaled in f32 and rounded again (the CPU's two roundings of
    // the indexer head weights, attention.cpp: Precision::linear, then `*= weight_scale` and the bf16 activation).
    float scale = 1.0f;
};
void f32_to_bf16(const F32ToBf16Params& p, cudaStream_t stream);

void fill_f32(float* x, int64_t n, float value, cudaStream_t stream);  // x: [n] f32

struct GatherRowsParams {
    const __nv_bfloat16* x = nullptr;  // [*, cols] bf16
    const int32_t* rows = nullptr;     // [count] rows of x (device)
    __nv_bfloat16* y = nullptr;        // [count, cols] bf16 (must not overlap x)
    int64_t count = 0, cols = 0;
};
void gather_rows_bf16(const GatherRowsParams& p, cudaStream_t stream);

namespace detail {
void launch_bf16_to_f32(const Bf16ToF32Params& p, cudaStream_t stream);
void launch_f32_to_bf16(const F32ToBf16Params& p, cudaStream_t stream);
void launch_fill_f32(float* x, int64_t n, float value, cudaStream_t stream);
void launch_gather_rows_bf16(const GatherRowsParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
