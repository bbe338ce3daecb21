// RAII cuBLASLt handle and the one error-check macro for cuBLAS status codes (throws dsv4::Error naming the
// status, the expression and file:line). One handle per device context; the GEMM launchers take it by
// reference. Used by gemm_bf16, gemm_fp8 and grouped_linear; tested through their tests.
#pragma once

#include <cublasLt.h>

namespace dsv4::cuda {

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* expression, const char* file, int line);

}  // namespace dsv4::cuda

#define DSV4_CUBLAS_CHECK(expr)                                                              \
    do {                                                                                     \
        cublasStatus_t dsv4_cublas_status_ = (expr);                                         \
        if (dsv4_cublas_status_ != CUBLAS_STATUS_SUCCESS)                                    \
            ::dsv4::cuda::throw_cublas_error(dsv4_cublas_status_, #expr, __FILE__, __LINE__); \
    } while (0)

namespace dsv4::cuda {

class CublasLt {
public:
    CublasLt() { DSV4_CUBLAS_CHECK(cublasLtCreate(&handle_)); }
    ~CublasLt() {
        if (handle_) cublasLtDestroy(handle_);
    }
    CublasLt(const CublasLt&) = delete;
    CublasLt& operator=(const CublasLt&) = delete;
    cublasLtHandle_t get() const { return handle_; }

private:
    cublasLtHandle_t handle_ = nullptr;
};

// Owners of the per-call cuBLASLt descriptors (created and destroyed around one matmul).
class MatmulDesc {
public:
    MatmulDesc(cublasComputeType_t compute, cudaDataType_t scale_type) {
        DSV4_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, scale_type));
    }
    ~MatmulDesc() {
        if (desc_) cublasLtMatmulDescDestroy(desc_);
    }
    MatmulDesc(const MatmulDesc&) = delete;
    MatmulDesc& operator=(const MatmulDesc&) = delete;
    template <typename T>
    void set(cublasLtMatmulDescAttributes_t attribute, const T& value) {
        DSV4_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, attribute, &value, sizeof(T)));
    }
    cublasLtMatmulDesc_t get() const { return desc_; }

private:
    cublasLtMatmulDesc_t desc_ = nullptr;
};

class MatrixLayout {
public:
    // Column-major rows x cols with leading dimension ld (cuBLAS convention).
    MatrixLayout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t ld) {
        DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout_, type, rows, cols, ld));
    }
    ~MatrixLayout() {
        if (layout_) cublasLtMatrixLayoutDestroy(layout_);
    }
    MatrixLayout(const MatrixLayout&) = delete;
    MatrixLayout& operator=(const MatrixLayout&) = delete;
    template <typename T>
    void set(cublasLtMatrixLayoutAttribute_t attribute, const T& value) {
        DSV4_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(layout_, attribute, &value, sizeof(T)));
    }
    cublasLtMatrixLayout_t get() const { return layout_; }

private:
    cublasLtMatrixLayout_t layout_ = nullptr;
};

class MatmulPreference {
public:
    // Workspace limit, and split-K partial sums reduced only in the f32 compute type (never in place in, or in
    // a workspace of, the bf16 output type: that would round twice).
    explicit MatmulPreference(size_t workspace_bytes) {
        DSV4_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref_));
        DSV4_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace_bytes, sizeof(workspace_bytes)));
        uint32_t reduction = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;  // NONE (0) is always allowed
        DSV4_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref_, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                                               &reduction, sizeof(reduction)));
    }
    ~MatmulPreference() {
        if (pref_) cublasLtMatmulPreferenceDestroy(pref_);
    }
    MatmulPreference(const MatmulPreference&) = delete;
    MatmulPreference& operator=(const MatmulPreference&) = delete;
    cublasLtMatmulPreference_t get() const { return pref_; }

private:
    cublasLtMatmulPreference_t pref_ = nullptr;
};

}  // namespace dsv4::cuda
