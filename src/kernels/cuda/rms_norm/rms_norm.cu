// RMSNorm kernels: see rms_norm.h. rms_norm: one CTA per row; head_rms_norm: one warp per head.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/head_rms_norm.cuh"
#include "kernels/cuda/rms_norm/rms_norm.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kHeadWarps = 8;
constexpr unsigned kFull = 0xFFFFFFFFu;

struct RmsNorms {
    RmsNormParams norm[kMaxRmsNorms];
};

// Thread t's share of a row: elements t, t + kThreads, t + 2 kThreads, ... (in that order in its double sum).
// grid (max rows, norms): CTA (row, i) normalizes row `row` of norm i; its code does not depend on i or on the other
// norms of the launch. kPer > 0: every row has at most kThreads * kPer elements, and each thread issues all its loads
// of x and of the weight (which depends on no earlier kernel) before the first use, so a row costs one memory round
// trip instead of one per element and pass; kPer == 0: any dim, a loop per pass. Both add the same terms in the same
// order, so the same bits.
template <int kPer>
__global__ void __launch_bounds__(kThreads) rms_norm_kernel(const RmsNorms norms) {
    static_assert(kThreads % 32 == 0 && kThreads / 32 <= 32);
    __shared__ double warp_sums[kThreads / 32];
    __shared__ float r_shared;
    const RmsNormParams& p = norms.norm[blockIdx.y];
    const int64_t row = blockIdx.x;
    if (row >= p.rows) return;  // a norm with fewer rows than the launch (whole CTAs, before any barrier)
    const __nv_bfloat16* x = p.x + row * p.x_stride;
    __nv_bfloat16* y = p.y + row * p.y_stride;
    constexpr int kHeld = kPer > 0 ? kPer : 1;
    float held_x[kHeld], held_w[kHeld];
    double sum = 0.0;  // squares of bf16 values are exact; only the order of this sum differs from the CPU
    if constexpr (kPer > 0) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            const int64_t i = threadIdx.x + int64_t(j) * kThreads;
            held_x[j] = i < p.dim ? bf16_to_f32(x[i]) : 0.0f;
            held_w[j] = p.weight && i < p.dim ? p.weight[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < kPer; ++j) sum += double(held_x[j]) * double(held_x[j]);
    } else {
        for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
            const double v = bf16_to_f32(x[i]);
            sum += v * v;
        }
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
    if constexpr (kPer > 0) {
#pragma unroll
        for (int j = 0; j < kPer; ++j) {
            const int64_t i = threadIdx.x + int64_t(j) * kThreads;
            const float normed = __fmul_rn(held_x[j], r);
            const __nv_bfloat16 out = f32_to_bf16(p.weight ? __fmul_rn(held_w[j], normed) : normed);
            if (i < p.dim) y[i] = out;
            held_x[j] = i < p.dim ? bf16_to_f32(out) : 0.0f;  // what act_quant would read back
        }
        if (p.q) {
            static_assert(kThreads == 256, "quantize_held_row's thread layout");
            const int64_t n_blocks = (p.dim + kActQuantBlock - 1) / kActQuantBlock;
            quantize_held_row<kPer>(held_x, 0, p.dim, p.q + row * p.dim, p.q_scales + row * n_blocks);
        }
    } else {
        for (int64_t i = threadIdx.x; i < p.dim; i += kThreads) {
            const float normed = __fmul_rn(bf16_to_f32(x[i]), r);
            y[i] = f32_to_bf16(p.weight ? __fmul_rn(p.weight[i], normed) : normed);
        }
    }
}

// One warp per head (head_rms_norm_factor): lane l holds elements l, l + 32, ... (head_dim <= 32 kPer), all loaded
// before the first use: one memory round trip per head.
template <int kPer>
__global__ void __launch_bounds__(kHeadWarps * 32) head_rms_norm_kernel(HeadRmsNormParams p) {
    extern __shared__ float squares[];  // [kHeadWarps, head_dim]
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t head = int64_t(blockIdx.x) * kHeadWarps + warp;
    if (head >= p.rows * p.heads) return;  // whole warps exit together
    __nv_bfloat16* q = p.q + (head / p.heads) * p.row_stride + (head % p.heads) * p.head_dim;
    float held[kPer];
#pragma unroll
    for (int j = 0; j < kPer; ++j) {
        const int64_t i = lane + 32 * j;
        held[j] = i < p.head_dim ? bf16_to_f32(q[i]) : 0.0f;
    }
    const float r = head_rms_norm_factor(held, squares + warp * p.head_dim, p.head_dim, p.eps, lane);
#pragma unroll
    for (int j = 0; j < kPer; ++j)
        if (lane + 32 * j < p.head_dim) q[lane + 32 * j] = f32_to_bf16(__fmul_rn(held[j], r));
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

// Calls launch(std::integral_constant<int, K>) with the smallest K of 1, 2, 4, ..., 32 that is >= count (values a
// thread holds), or K = 0 past 32 (the looping kernel).
template <class Launch>
void with_held_count(int64_t count, Launch&& launch) {
    if (count <= 1) return launch(std::integral_constant<int, 1>{});
    if (count <= 2) return launch(std::integral_constant<int, 2>{});
    if (count <= 4) return launch(std::integral_constant<int, 4>{});
    if (count <= 8) return launch(std::integral_constant<int, 8>{});
    if (count <= 16) return launch(std::integral_constant<int, 16>{});
    if (count <= 32) return launch(std::integral_constant<int, 32>{});
    return launch(std::integral_constant<int, 0>{});
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
    int64_t dim = 0;
    for (const RmsNormParams& p : norms) dim = dim > p.dim ? dim : p.dim;
    const dim3 grid(unsigned(rows), unsigned(norms.size()));
    const int64_t per = (dim + kThreads - 1) / kThreads;  // elements per thread
    with_held_count(per, [&](auto held) { rms_norm_kernel<held()><<<grid, kThreads, 0, stream>>>(batch); });
    DSV4_CUDA_CHECK(cudaGetLastError());
    if (per > 32)  // the looping kernel holds nothing to quantize: act_quant reads its output back (same bits)
        for (const RmsNormParams& p : norms)
            if (p.q) launch_act_quant_fp8({p.y, p.q, p.q_scales, p.rows, p.dim, p.y_stride}, stream);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_head_rms_norm(const HeadRmsNormParams& p, cudaStream_t stream) {
    const int64_t heads = p.rows * p.heads;
    const unsigned blocks = unsigned((heads + kHeadWarps - 1) / kHeadWarps);
    if (p.head_dim > kStagedHeadDim) {
        head_rms_norm_generic_kernel<<<blocks, kHeadWarps * 32, 0, stream>>>(p);
    } else {
        const size_t smem = size_t(kHeadWarps) * size_t(p.head_dim) * sizeof(float);  // <= 32 KiB
        static_assert(kStagedHeadDim <= 32 * 32, "a lane holds at most 32 elements");
        const int64_t per = (p.head_dim + 31) / 32;  // elements per lane
        with_held_count(std::max<int64_t>(per, 4), [&](auto held) {
            if constexpr (held() >= 4) head_rms_norm_kernel<held()><<<blocks, kHeadWarps * 32, smem, stream>>>(p);
        });
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
