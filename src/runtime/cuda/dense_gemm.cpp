// Dense GEMM through cuBLASLt (see dense_gemm.h): row-major y = x W^T is the column-major D[N,M] =
// op_T(W stored [K,N]) * (x stored [K,M]), the TN form.
#include "runtime/cuda/dense_gemm.h"

#include "core/error.h"

namespace dsv4::cuda {

void dense_gemm(const CublasLt& lt, const DenseGemmParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.x && p.w && p.y, "dense_gemm: null operand");
    DSV4_CHECK(p.m > 0 && p.n > 0 && p.k > 0 && p.ldx >= p.k && p.ldw >= p.k && p.ldy >= p.n,
               "dense_gemm: m {} n {} k {} ldx {} ldw {} ldy {}", p.m, p.n, p.k, p.ldx, p.ldw, p.ldy);
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.workspace) % 256 == 0, "dense_gemm: workspace must be 256-byte aligned");
    const cudaDataType_t in_type = p.type == DenseType::kF32 ? CUDA_R_32F : CUDA_R_16BF;
    MatmulDesc desc(CUBLAS_COMPUTE_32F, CUDA_R_32F);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSA, CUBLAS_OP_T);
    desc.set(CUBLASLT_MATMUL_DESC_TRANSB, CUBLAS_OP_N);
    MatrixLayout a(in_type, uint64_t(p.k), uint64_t(p.n), p.ldw);
    MatrixLayout b(in_type, uint64_t(p.k), uint64_t(p.m), p.ldx);
    MatrixLayout d(CUDA_R_32F, uint64_t(p.n), uint64_t(p.m), p.ldy);
    MatmulPreference pref(p.workspace_bytes);
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    DSV4_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt.get(), desc.get(), a.get(), b.get(), d.get(), d.get(),
                                                     pref.get(), 1, &result, &found));
    if (found == 0)
        fail("dense_gemm: cuBLASLt has no {} algorithm for m={} n={} k={}", p.type == DenseType::kF32 ? "f32" : "bf16",
             p.m, p.n, p.k);
    const float alpha = 1.0f, beta = 0.0f;
    DSV4_CUBLAS_CHECK(cublasLtMatmul(lt.get(), desc.get(), &alpha, p.w, a.get(), p.x, b.get(), &beta, p.y, d.get(), p.y,
                                     d.get(), &result.algo, p.workspace, p.workspace_bytes, stream));
}

}  // namespace dsv4::cuda
