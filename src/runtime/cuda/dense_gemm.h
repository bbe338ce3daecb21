// y[M, N] f32 = x[M, K] W[N, K]^T for dense weights through cuBLASLt with f32 accumulation (CUBLAS_COMPUTE_32F:
// no TF32; split-K partials reduced in f32): the f32 product of Precision::linear / linear_f32 on a dense weight,
// up to summation order. x and W share a type: f32 (weights stored F32, x upcast from bf16 first) or bf16.
// Leading dimensions are explicit so a grouped projection can run group by group on column slices.
// Tested through tests/gpu/cuda_model_test.cpp (GPU vs CPU forward on the F32 transformers fixtures).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cuda/gemm_bf16/cublaslt.h"

namespace dsv4::cuda {

enum class DenseType { kF32, kBF16 };

struct DenseGemmParams {
    DenseType type = DenseType::kF32;
    const void* x = nullptr;  // [m, k] of `type`, row stride ldx
    const void* w = nullptr;  // [n, k] of `type`, row stride ldw
    float* y = nullptr;       // [m, n] f32, row stride ldy
    int64_t m = 0, n = 0, k = 0, ldx = 0, ldw = 0, ldy = 0;
    void* workspace = nullptr;  // 256-byte aligned
    size_t workspace_bytes = 0;
};

void dense_gemm(const CublasLt& lt, const DenseGemmParams& p, cudaStream_t stream);

}  // namespace dsv4::cuda
