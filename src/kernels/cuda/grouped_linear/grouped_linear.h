// The wo_a grouped low-rank projection (spec §7.7): y[:, g*out + r] = sum_k x[:, g*in + k] W[g*out + r, k] for each
// group g, with W FP8 (e4m3 [groups*out, in] + f32 scales per 128x128) dequantized exactly in the kernel and bf16
// activations used as they are (the official bf16 einsum: no activation quantization), f32 accumulation, bf16
// output. Two paths, chosen by the shape alone (grouped_linear_path), so a row's bits never depend on the batch:
//   kMma     - tensor cores for every row count (bf16_act_mma.cuh): each 128-column K block of the products
//              (bf16 x, W's e4m3 values as bf16: exact products) is summed on the tensor cores from zero in f32,
//              scaled by the block's weight scale and added to the output's f32 sum, K blocks in ascending order:
//              gemm_fp8's kMma arithmetic with bf16 activations. Contract: in % 16 == 0, out % 8 == 0, x and W
//              16-byte aligned (V4, the fixtures).
//   kGeneric - any other shape (in = H * head_dim / groups of a small model): one thread per output summing in
//              Precision::grouped_linear's order.
// Tested in tests/gpu/grouped_linear_test.cpp against Precision::grouped_linear; timed in bench/gemm_bench.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/bf16_act_mma/bf16_act_mma_tiles.h"

namespace dsv4::cuda {

struct GroupedLinearParams {
    const __nv_bfloat16* x = nullptr;  // [m, groups * in] bf16
    const uint8_t* w = nullptr;        // [groups * out, in] e4m3
    const float* w_scale = nullptr;    // [ceil(groups * out / 128), ceil(in / 128)] f32
    __nv_bfloat16* y = nullptr;        // [m, groups * out] bf16
    int64_t m = 0, groups = 0, in = 0, out = 0;
};

enum class GroupedLinearPath { kMma, kGeneric };
GroupedLinearPath grouped_linear_path(const GroupedLinearParams& p);

// kMma tiles (bf16_act_mma_tiles.h: speed only, every tile runs the same per-output chain).
bf16_act_mma::Tiles grouped_linear_tiles(int64_t m, int64_t groups, int64_t in, int64_t out, int num_sms);
// Empty when the kMma path can run `p` with `tiles`, else the reason.
std::string grouped_linear_can_implement(const GroupedLinearParams& p, const bf16_act_mma::Tiles& tiles);
void grouped_linear(const GroupedLinearParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
