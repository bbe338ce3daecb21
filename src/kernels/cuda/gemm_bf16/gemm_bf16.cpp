// bf16 GEMM through cuBLASLt (see gemm_bf16.h). Row-major y[M,N] = x W^T is computed as the column-major
// product D[N,M] = W^T(op T on the stored [K,N] view) * x([K,M] view), the TN form cuBLASLt prefers.
#include "kernels/cuda/gemm_bf16/gemm_bf16.h"

#include <fmt/format.h>

#include "core/error.h"

namespace dsv4::cuda {

std::string gemm_bf16_can_implement(const GemmBf16Params& p) {
    if (!p.x || !p.w || !p.y) return "null operand pointer";
    if (p.m <= 0 || p.n <= 0 || p.k <= 0) return fmt::format("empty shape m={} n={} k={}", p.m, p.n, p.k);
    if (p.workspace_bytes && !p.workspace) return "workspace_bytes set without a workspace";
    if (reinterpret_cast<uintptr_t>(p.workspace) % 256) return "workspace must be 256-byte aligned";
    return {};
}

void gemm_bf16(const CublasLt& lt, const GemmBf16Params& p, cudaStream_t stream) {
    if (std::string why = gemm_bf16_can_implement(p); !why.empty()) fail("gemm_bf16: {}", why);
    const cudaDataType_t out_type = p.out_type == GemmOutType::kBF16 ? CUDA_R_16BF : CUDA_R_32F;

    MatmulDesc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    MatrixLayout a(CUDA_R_16BF, uint64_t(p.k), uint64_t(p.n), p.k);  // W stored [n, k] = column-major k x n
    MatrixLayout b(CUDA_R_16BF, uint64_t(p.k), uint64_t(p.m), p.k);  // x stored [m, k] = column-major k x m
    MatrixLayout d(out_type, uint64_t(p.n), uint64_t(p.m), p.n);     // y stored [m, n] = column-major n x m
    MatmulPreference pref(p.workspace_bytes);

    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    DSV4_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.get(), desc.get(), a.get(), b.get(), d.get(), d.get(),
                                                     pref.get(), 1, &result, &found));
    if (found == 0)
        fail("gemm_bf16: cuBLASLt has no algorithm for m={} n={} k={} ({} output, {} bytes of workspace)", p.m, p.n,
             p.k, p.out_type == GemmOutType::kBF16 ? "bf16" : "f32", p.workspace_bytes);
    const float alpha = 1.0f, beta = 0.0f;
    DSV4_CUBLAS_CHECK(cublasLtMatmul(lt.get(), desc.get(), &alpha, p.w, a.get(), p.x, b.get(), &beta, p.y, d.get(),
                                     p.y, d.get(), &result.algo, p.workspace, p.workspace_bytes, stream));
}

}  // namespace dsv4::cuda
