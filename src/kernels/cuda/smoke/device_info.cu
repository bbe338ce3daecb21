// Device discovery and the smoke kernel; see device_info.h.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/smoke/device_info.h"

#include <cstdio>

namespace dsv4::cuda {
namespace {

__global__ void saxpy_kernel(int n, float a, const float* __restrict__ x, float* __restrict__ y) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i] + y[i];
}

}  // namespace

int device_count() {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no device" error
        return 0;
    }
    return count;
}

std::string describe_device(int device) {
    cudaDeviceProp prop{};
    DSV4_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
    char text[512];
    std::snprintf(text, sizeof text, "%s (sm_%d%d, %d SMs, %.1f GiB)", prop.name, prop.major, prop.minor,
                  prop.multiProcessorCount, double(prop.totalGlobalMem) / double(1ull << 30));
    return text;
}

void saxpy_smoke(int n, float a, const float* x, float* y) {
    float *dx = nullptr, *dy = nullptr;
    size_t bytes = size_t(n) * sizeof(float);
    DSV4_CUDA_CHECK(cudaMalloc(&dx, bytes));
    DSV4_CUDA_CHECK(cudaMalloc(&dy, bytes));
    DSV4_CUDA_CHECK(cudaMemcpy(dx, x, bytes, cudaMemcpyHostToDevice));
    DSV4_CUDA_CHECK(cudaMemcpy(dy, y, bytes, cudaMemcpyHostToDevice));
    saxpy_kernel<<<(n + 255) / 256, 256>>>(n, a, dx, dy);
    DSV4_CUDA_CHECK(cudaGetLastError());
    DSV4_CUDA_CHECK(cudaMemcpy(y, dy, bytes, cudaMemcpyDeviceToHost));
    DSV4_CUDA_CHECK(cudaFree(dx));
    DSV4_CUDA_CHECK(cudaFree(dy));
}

}  // namespace dsv4::cuda
