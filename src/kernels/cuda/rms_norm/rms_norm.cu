// RMSNorm kernels: see rms_norm.h. rms_norm: one CTA per row; head_rms_norm: one warp per head.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/rms_norm/rms_norm.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadWarps = 8;
constexpr unsigned kFull = 0xFFFFFFFFu;

struct RmsNorms {
    RmsNormParams norm[kMaxRmsNorms];
};

// grid (max rows, norms): CTA (row, i) normalizes row `row` of norm i; its code does not depend on i or on the other
// norms of the launch.
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const RmsNorms norms) {
    static_assert(kThreads % 32 == 0 && kThreads / 32 <= 32);
    __shared__ double warp_sums[kThreads / 32];
    __shared__ float r_shared;
    const RmsNormParams& p = norms.norm[blockIdx.y];
    const int64_t row = blockIdx.x;
    if (row >= p.rows) return;  // a norm with fewer rows than the launch (whole CTAs, before any barrier)
    const __nv_bfloat16* x = p.x + row * p.x_stride;
    double sum = 0.0;  // squares of bf16 values are exact; only the order of this sum differs from the CPU
    for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
        const double v = bf16_to_f32(x[i]);
        sum += v * v;
    }
#pragma unroll
    for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(kFull, sum, m);
    if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
    __syncthreads();
    if (threadIdx.x == 0) {
        double total = 0.0;
        for (int w = 0; w < kThreads / 32; ++w) total += warp_sums[w];
        const float mean_sq = float(total / double(p.dim));
        r_shared = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.eps)));
    }
    __syncthreads();
    const float r = r_shared;
    __nv_bfloat16* y = p.y + row * p.y_stride;
    for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
        const float normed = __fmul_rn(bf16_to_f32(x[i]), r);
        y[i] = f32_to_bf16(p.weight ? __fmul_rn(p.weight[i], normed) : normed);
    }
}

// One warp per head: squares to shared memory, lane 0 sums them in index order (the CPU's order), every step
// rounded to bf16 as Precision::head_rms_norm does.
__global__ void __launch_bounds__(kHeadWarps * 32) head_rms_norm_kernel(HeadRmsNormParams p) {
    extern __shared__ float squares[];  // [kHeadWarps, head_dim]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t head = int64_t(blockIdx.x) * kHeadWarps + warp;
    if (head >= p.rows * p.heads) return;  // whole warps exit together
    __nv_bfloat16* q = p.q + (head / p.heads) * p.row_stride + (head % p.heads) * p.head_dim;
    float* sq = squares + warp * p.head_dim;
    for (int64_t i = lane; i < p.head_dim; i += 32) {
        const float v = bf16_to_f32(q[i]);
        sq[i] = round_bf16(__fmul_rn(v, v));
    }
    __syncwarp();
    float r = 0.0f;
    if (lane == 0) {
        float sum = 0.0f;
        for (int64_t i = 0; i < p.head_dim; ++i) sum = __fadd_rn(sum, sq[i]);
        const float mean = round_bf16(__fdiv_rn(sum, float(p.head_dim)));
        r = round_bf16(__fdiv_rn(1.0f, __fsqrt_rn(round_bf16(__fadd_rn(mean, p.eps)))));
    }
    r = __shfl_sync(kFull, r, 0);
    for (int64_t i = lane; i < p.head_dim; i += 32) q[i] = f32_to_bf16(__fmul_rn(bf16_to_f32(q[i]), r));
}

// head_dim > kStagedHeadDim: lane 0 squares, rounds and sums in index order straight from q.
__global__ void __launch_bounds__(kHeadWarps * 32) head_rms_norm_generic_kernel(HeadRmsNormParams p) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t head = int64_t(blockIdx.x) * kHeadWarps + warp;
    if (head >= p.rows * p.heads) return;
    __nv_bfloat16* q = p.q + (head / p.heads) * p.row_stride + (head % p.heads) * p.head_dim;
    float r = 0.0f;
    if (lane == 0) {
        float sum = 0.0f;
        for (int64_t i = 0; i < p.head_dim; ++i) {
            const float v = bf16_to_f32(q[i]);
            sum = __fadd_rn(sum, round_bf16(__fmul_rn(v, v)));
        }
        const float mean = round_bf16(__fdiv_rn(sum, float(p.head_dim)));
        r = round_bf16(__fdiv_rn(1.0f, __fsqrt_rn(round_bf16(__fadd_rn(mean, p.eps)))));
    }
    r = __shfl_sync(kFull, r, 0);
    for (int64_t i = lane; i < p.head_dim; i += 32) q[i] = f32_to_bf16(__fmul_rn(bf16_to_f32(q[i]), r));
}

}  // namespace

namespace detail {

void launch_rms_norms(std::span<const RmsNormParams> norms, cudaStream_t stream) {
    RmsNorms batch{};
    int64_t rows = 0;
    for (size_t i = 0; i < norms.size(); ++i) {
        batch.norm[i] = norms[i];
        rows = rows > norms[i].rows ? rows : norms[i].rows;
    }
    rms_norm_kernel<<<dim3(unsigned(rows), unsigned(norms.size())), kThreads, 0, stream>>>(batch);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream) {
    const int64_t heads = p.rows * p.heads;
    const unsigned blocks = unsigned((heads + kHeadWarps - 1) / kHeadWarps);
    if (p.head_dim > kStagedHeadDim) {
        head_rms_norm_generic_kernel<<<blocks, kHeadWarps * 32, 0, stream>>>(p);
    } else {
        const size_t smem = size_t(kHeadWarps) * size_t(p.head_dim) * sizeof(float);  // <= 32 KiB
        head_rms_norm_kernel<<<blocks, kHeadWarps * 32, smem, stream>>>(p);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
