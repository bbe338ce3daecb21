// The cuBLAS error path: see cublaslt.h.
#include "kernels/cuda/gemm_bf16/cublaslt.h"

#include "core/error.h"

namespace dsv4::cuda {

void throw_cublas_error(cublasStatus_t status, const char* expression, const char* file, int line) {
    throw DeviceError(fmt::format("cuBLAS error {} ({}) in {} at {}:{}", cublasLtGetStatusName(status),
                                  cublasLtGetStatusString(status), expression, file, line));
}

}  // namespace dsv4::cuda
