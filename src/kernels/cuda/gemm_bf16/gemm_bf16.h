// y[M, N] = x[M, K] W[N, K]^T for bf16 operands through cuBLASLt: f32 accumulation (CUBLAS_COMPUTE_32F, no
// TF32, split-K partials reduced in f32), output bf16 (indexer weights_proj) or f32 (router gate, compressor
// wkv/wgate, head logits: bf16 x bf16 products are exact in f32, so this is the reference's f32 product up to
// summation order). Tested in tests/gpu/gemm_bf16_test.cpp against cpu::linear.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "kernels/cuda/gemm_bf16/cublaslt.h"

namespace dsv4::cuda {

enum class GemmOutType { kBF16, kF32 };

struct GemmBf16Params {
    const __nv_bfloat16* x = nullptr;  // [m, k] bf16, row stride k
    const __nv_bfloat16* w = nullptr;  // [n, k] bf16, row stride k
    void* y = nullptr;                 // [m, n] bf16 or f32 (out_type), row stride n
    GemmOutType out_type = GemmOutType::kBF16;
    int64_t m = 0, n = 0, k = 0;
    void* workspace = nullptr;  // cuBLASLt workspace (kGemmBf16WorkspaceBytes recommended), 256-byte aligned
    size_t workspace_bytes = 0;
};

inline constexpr size_t kGemmBf16WorkspaceBytes = size_t(32) << 20;

// Empty when the launcher accepts the parameters, else the reason.
std::string gemm_bf16_can_implement(const GemmBf16Params& p);

// Throws dsv4::Error on a contract violation or when cuBLASLt offers no algorithm for the shape.
void gemm_bf16(const CublasLt& lt, const GemmBf16Params& p, cudaStream_t stream);

}  // namespace dsv4::cuda
