// y[m, n] f32 = x[m, k] W[n, k]^T for bf16 activations and bf16 weights on the tensor cores, every row count: the
// head (logits = final-norm output . head^T in f32, spec §15). Each product is exact in f32 (two 8-bit
// significands); each 128-column K block is summed on the tensor cores from zero with f32 accumulation and added to
// the output's f32 sum in ascending block order (bf16_act_mma.cuh), so a row's bits depend on neither the batch nor
// the tile, and the result is the reference's f32 dot product up to summation order (docs/numerics.md, "Head").
// dense_linear (one CUDA-core chain per output, the CPU's order) stays for f32 weights and the other dense
// linears. Contract: k % 16 == 0, n % 8 == 0, x and W 16-byte aligned with row strides of whole 16-byte chunks, y
// 8-byte aligned with an even row stride (bf16_linear_can_run says which fails).
// Tested in tests/gpu/bf16_linear_test.cpp against cpu::linear; timed in bench/gemm_bench.cu.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "kernels/cuda/bf16_act_mma/bf16_act_mma_tiles.h"

namespace dsv4::cuda {

struct Bf16LinearParams {
    const __nv_bfloat16* x = nullptr;  // [m, k], row stride ldx
    const __nv_bfloat16* w = nullptr;  // [n, k], row stride k
    float* y = nullptr;                // [m, n], row stride ldy
    int64_t m = 0, n = 0, k = 0, ldx = 0, ldy = 0;
};

bf16_act_mma::Tiles bf16_linear_tiles(int64_t m, int64_t n, int64_t k, int num_sms);
// Empty when the shapes, strides and alignments fit the tensor-core kernel, else the reason.
std::string bf16_linear_can_run(const Bf16LinearParams& p);
// Throws dsv4::Error when bf16_linear_can_run says no.
void bf16_linear(const Bf16LinearParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
