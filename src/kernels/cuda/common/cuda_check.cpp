// The CUDA error path: see cuda_check.h.
#include "kernels/cuda/common/cuda_check.h"

#include "core/error.h"

namespace dsv4::cuda {

void throw_cuda_error(cudaError_t status, const char* expression, const char* file, int line) {
    throw DeviceError(fmt::format("CUDA error {} ({}) in {} at {}:{}", cudaGetErrorName(status),
                                  cudaGetErrorString(status), expression, file, line));
}

}  // namespace dsv4::cuda
