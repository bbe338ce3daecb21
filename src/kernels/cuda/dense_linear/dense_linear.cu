// dense_linear kernel (see dense_linear.h). A block computes a tile of kTileM tokens x kTileN outputs, one
// output per thread; tiles of kTileK columns of x and W are staged in shared memory (coalesced loads), and each
// thread adds its products in column order with __fmul_rn / __fadd_rn, so nvcc cannot contract them into FMAs.
// The tile shape only decides which thread computes an element, never the order of its sum.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/dense_linear/dense_linear.h"

namespace dsv4::cuda {
namespace {

constexpr int kTileN = 32, kTileM = 8, kTileK = 32;
static_assert(kTileN == 32, "threadIdx.x is the output within a warp-wide tile");
static_assert(kTileN * kTileM % kTileK == 0, "the staging loops cover a tile evenly");

template <typename W>
__device__ float load_weight(const W* w, int64_t i);
template <>
__device__ float load_weight<float>(const float* w, int64_t i) {
    return w[i];
}
template <>
__device__ float load_weight<__nv_bfloat16>(const __nv_bfloat16* w, int64_t i) {
    return __bfloat162float(w[i]);
}

template <typename W>
__global__ void __launch_bounds__(kTileN* kTileM) dense_linear_kernel(const DenseLinearParams p) {
    __shared__ float w_tile[kTileN][kTileK + 1];  // [outputs, columns] f32, padded against bank conflicts
    __shared__ float x_tile[kTileM][kTileK];      // [tokens, columns] f32
    const W* w = static_cast<const W*>(p.w);
    const int tid = threadIdx.y * kTileN + threadIdx.x;
    const int64_t n0 = int64_t(blockIdx.x) * kTileN, m0 = int64_t(blockIdx.y) * kTileM;
    const int64_t n = n0 + threadIdx.x, m = m0 + threadIdx.y;
    float acc = 0.0f;
    for (int64_t k0 = 0; k0 < p.k; k0 += kTileK) {
        const int width = int(p.k - k0 < kTileK ? p.k - k0 : kTileK);
        for (int i = tid; i < kTileN * kTileK; i += kTileN * kTileM) {
            const int r = i / kTileK, c = i % kTileK;
            w_tile[r][c] = (n0 + r < p.n && c < width) ? load_weight(w, (n0 + r) * p.ldw + k0 + c) : 0.0f;
        }
        for (int i = tid; i < kTileM * kTileK; i += kTileN * kTileM) {
            const int r = i / kTileK, c = i % kTileK;
            x_tile[r][c] = (m0 + r < p.m && c < width) ? __bfloat162float(p.x[(m0 + r) * p.ldx + k0 + c]) : 0.0f;
        }
        __syncthreads();
        for (int c = 0; c < width; ++c)
            acc = __fadd_rn(acc, __fmul_rn(x_tile[threadIdx.y][c], w_tile[threadIdx.x][c]));
        __syncthreads();
    }
    if (n < p.n && m < p.m) p.y[m * p.ldy + n] = acc;
}

}  // namespace

namespace detail {
void launch_dense_linear(const DenseLinearParams& p, cudaStream_t stream) {
    const dim3 block(kTileN, kTileM);
    const dim3 grid(unsigned((p.n + kTileN - 1) / kTileN), unsigned((p.m + kTileM - 1) / kTileM));
    if (p.type == DenseType::kF32)
        dense_linear_kernel<float><<<grid, block, 0, stream>>>(p);
    else
        dense_linear_kernel<__nv_bfloat16><<<grid, block, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
