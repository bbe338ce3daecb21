// Conversion kernels (see convert.h): grid-stride loops, one element per thread step.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/convert/convert.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return int(b < 65535 * 16 ? b : 65535 * 16);
}

__global__ void bf16_to_f32_kernel(const Bf16ToF32Params p) {
    const int64_t n = p.rows * p.cols;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / p.cols, c = i % p.cols;
        p.y[i] = bf16_to_f32(p.x[r * p.x_stride + c]);
    }
}

__global__ void f32_to_bf16_kernel(const F32ToBf16Params p) {
    const int64_t n = p.rows * p.cols;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / p.cols, c = i % p.cols;
        const __nv_bfloat16 v = f32_to_bf16(p.x[r * p.x_stride + c]);
        p.y[r * p.y_stride + c] = p.scale == 1.0f ? v : f32_to_bf16(__fmul_rn(bf16_to_f32(v), p.scale));
    }
}

__global__ void fill_f32_kernel(float* x, int64_t n, float value) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
        x[i] = value;
}

__global__ void gather_rows_bf16_kernel(const GatherRowsParams p) {
    const int64_t n = p.count * p.cols;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        const int64_t r = i / p.cols, c = i % p.cols;
        p.y[i] = p.x[int64_t(p.rows[r]) * p.cols + c];
    }
}

}  // namespace

namespace detail {
void launch_bf16_to_f32(const Bf16ToF32Params& p, cudaStream_t stream) {
    bf16_to_f32_kernel<<<blocks_for(p.rows * p.cols), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
void launch_f32_to_bf16(const F32ToBf16Params& p, cudaStream_t stream) {
    f32_to_bf16_kernel<<<blocks_for(p.rows * p.cols), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
void launch_fill_f32(float* x, int64_t n, float value, cudaStream_t stream) {
    fill_f32_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, value);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
void launch_gather_rows_bf16(const GatherRowsParams& p, cudaStream_t stream) {
    gather_rows_bf16_kernel<<<blocks_for(p.count * p.cols), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
