// The wo_a grouped low-rank projection (spec §7.7): y[:, g*out + r] = sum_k x[:, g*in + k] W[g*out + r, k] for each
// group g, with W FP8 (e4m3 [groups*out, in] + f32 scales per 128x128) dequantized exactly in the kernel and bf16
// activations used as they are (the official bf16 einsum: no activation quantization), f32 accumulation, bf16
// output. Runs on the skinny kernel (skinny_gemm.cuh), tokens in passes of up to 16, where in % 16 == 0 and the
// operands are aligned (V4, the fixtures); any other shape (in = H * head_dim / groups of a small model) runs a
// generic kernel, one thread per output summing in Precision::grouped_linear's order (grouped_linear_path).
// Tested in tests/gpu/grouped_linear_test.cpp against Precision::grouped_linear.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/gemm_fp8/gemm_fp8.h"

namespace dsv4::cuda {

struct GroupedLinearParams {
    const __nv_bfloat16* x = nullptr;  // [m, groups * in] bf16
    const uint8_t* w = nullptr;        // [groups * out, in] e4m3
    const float* w_scale = nullptr;    // [ceil(groups * out / 128), ceil(in / 128)] f32
    __nv_bfloat16* y = nullptr;        // [m, groups * out] bf16
    int64_t m = 0, groups = 0, in = 0, out = 0;
    void* workspace = nullptr;  // >= grouped_linear_workspace_bytes(), 256-byte aligned
    size_t workspace_bytes = 0;
};

enum class GroupedLinearPath { kSkinny, kGeneric };
GroupedLinearPath grouped_linear_path(const GroupedLinearParams& p);

// Skinny tiling of the grouped product (same heuristic as gemm_fp8 with N = groups * out).
Fp8GemmConfig grouped_linear_config(int64_t m, int64_t groups, int64_t in, int64_t out, int num_sms);
size_t grouped_linear_workspace_bytes(const Fp8GemmConfig& config, int64_t m, int64_t groups, int64_t out);
std::string grouped_linear_can_implement(const GroupedLinearParams& p, const Fp8GemmConfig& config);
void grouped_linear(const GroupedLinearParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
