// One error-check macro for CUDA runtime calls: a failure throws dsv4::Error naming the error, the expression
// and file:line. Kernel launches are checked with DSV4_CUDA_CHECK(cudaGetLastError()). The message is built
// in cuda_check.cpp (host compiler) so .cu files need no format-string machinery.
#pragma once

#include <cuda_runtime.h>

namespace dsv4::cuda {
[[noreturn]] void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line);
}

#define DSV4_CUDA_CHECK(expr)                                                              \
    do {                                                                                   \
        cudaError_t dsv4_status_ = (expr);                                                 \
        if (dsv4_status_ != cudaSuccess)                                                   \
            ::dsv4::cuda::throw_cuda_error(dsv4_status_, #expr, __FILE__, __LINE__);       \
    } while (0)
