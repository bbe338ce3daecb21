// RMSNorm of bf16 rows on the GPU (docs/numerics.md):
//   rms_norm       y = bf16(weight * (x * r)), r = 1 / sqrt(mean(x^2) + eps) in f32, as cpu::rms_norm followed by the
//                  bf16 cast of model numerics. The mean of squares accumulates in double like the CPU reference (it
//                  costs nothing in a memory-bound kernel), so only its summation order differs.
//   rms_norms      up to kMaxRmsNorms independent rms_norms in one launch, each row computed exactly as rms_norm
//                  computes it (the same CTA code on the same row), so the same bits.
//   Either can also write its output quantized for an FP8 GEMM (RmsNormParams::q), bitwise act_quant_fp8's.
//   head_rms_norm  the per-head unweighted q norm of model numerics (Precision::head_rms_norm): bf16 step by step,
//                  the bf16 squares summed in f32 in index order, exactly as the CPU does, so results are bitwise.
// Tested in tests/gpu/rms_norm_test.cpp against the CPU reference (rms_norms bitwise against rms_norm).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <span>

namespace dsv4::cuda {

struct RmsNormParams {
    const __nv_bfloat16* x = nullptr;  // [rows, dim] bf16, row stride x_stride elements
    const float* weight = nullptr;     // [dim] f32; nullptr: unweighted
    __nv_bfloat16* y = nullptr;        // [rows, dim] bf16, row stride y_stride; may alias x (same stride)
    int64_t rows = 0, dim = 0, x_stride = 0, y_stride = 0;
    float eps = 0.0f;
    // Optional: y quantized for an FP8 GEMM as well, exactly what act_quant_fp8 would make of it (the same bits,
    // without its launch): e4m3 codes [rows, dim] dense and scales [rows, ceil(dim / 128)]. Both or neither.
    uint8_t* q = nullptr;
    float* q_scales = nullptr;
};
void rms_norm(const RmsNormParams& p, cudaStream_t stream);

// The executor's q_norm and kv_norm, which read the two column ranges of one stacked projection (wq_a | wkv). No
// norm may write what another one of the launch reads (each may be in place).
inline constexpr size_t kMaxRmsNorms = 2;
void rms_norms(std::span<const RmsNormParams> norms, cudaStream_t stream);

// Head h of row r is q[r * row_stride + h * head_dim + (0 .. head_dim)], normalized in place. Up to
// kStagedHeadDim the squares are staged in shared memory; a larger head_dim (no DeepSeek-V4 shape) takes the
// generic kernel, whose lane 0 squares as it sums: the same operations, so the same bits.
inline constexpr int64_t kStagedHeadDim = 1024;
struct HeadRmsNormParams {
    __nv_bfloat16* q = nullptr;  // [rows, heads, head_dim] bf16, row stride row_stride elements
    int64_t rows = 0, heads = 0, head_dim = 0, row_stride = 0;
    float eps = 0.0f;
};
void head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream);

// The kernel launches behind the checked launchers (rms_norm.cu); they assume a valid contract.
namespace detail {
void launch_rms_norms(std::span<const RmsNormParams> norms, cudaStream_t stream);  // 1 .. kMaxRmsNorms, rows > 0
void launch_head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
