// mHC kernels: see mhc.h. hc_pre / hc_head: one CTA of kHcThreads per token; every thread accumulates the mixer
// dot products and the sum of squares over a strided slice of the n_hc * dim stream values, a block tree reduces
// them, thread 0 computes the mix (Sinkhorn is an n_hc x n_hc loop in the CPU's order), then all threads collapse
// the streams. hc_post: elementwise over (token, d).
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/mhc/mhc.h"

namespace dsv4::cuda {
namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kWarps = kHcThreads / 32;
constexpr int kPostThreads = 256;

__device__ __forceinline__ float sigmoid(float z) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}

// cpu::sinkhorn on c [kN * kN], same operations in the same order.
template <int kN>
__device__ void sinkhorn(float* c, int64_t iters, float eps) {
    for (int j = 0; j < kN; ++j) {
        float* row = c + j * kN;
        float row_max = row[0];
        for (int k = 1; k < kN; ++k) row_max = fmaxf(row_max, row[k]);
        float sum = 0.0f;
        for (int k = 0; k < kN; ++k) {
            row[k] = expf(__fsub_rn(row[k], row_max));
            sum = __fadd_rn(sum, row[k]);
        }
        for (int k = 0; k < kN; ++k) row[k] = __fadd_rn(__fdiv_rn(row[k], sum), eps);
    }
    auto columns = [&] {
        for (int k = 0; k < kN; ++k) {
            float sum = 0.0f;
            for (int j = 0; j < kN; ++j) sum = __fadd_rn(sum, c[j * kN + k]);
            for (int j = 0; j < kN; ++j) c[j * kN + k] = __fdiv_rn(c[j * kN + k], __fadd_rn(sum, eps));
        }
    };
    columns();
    for (int64_t it = 1; it < iters; ++it) {
        for (int j = 0; j < kN; ++j) {
            float sum = 0.0f;
            for (int k = 0; k < kN; ++k) sum = __fadd_rn(sum, c[j * kN + k]);
            for (int k = 0; k < kN; ++k) c[j * kN + k] = __fdiv_rn(c[j * kN + k], __fadd_rn(sum, eps));
        }
        columns();
    }
}

template <int kN, bool kHead>
__global__ void __launch_bounds__(kHcThreads) hc_mix_kernel(HcMixParams p) {
    constexpr int kRows = kHead ? kN : (2 + kN) * kN;
    static_assert(kHcThreads % 32 == 0 && kRows + 1 <= kHcThreads, "one thread per reduced value");
    __shared__ float partial[kWarps][kRows + 1];
    __shared__ float mix_s[kRows];
    const int64_t t = blockIdx.x, width = kN * p.dim;
    const __nv_bfloat16* v = p.streams + t * width;

    // 1. Per-thread partial dot products (rows 0..kRows) and sum of squares (row kRows).
    float acc[kRows + 1];
#pragma unroll
    for (int m = 0; m <= kRows; ++m) acc[m] = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += kHcThreads) {
        const float x = bf16_to_f32(v[i]);
#pragma unroll
        for (int m = 0; m < kRows; ++m) acc[m] = fmaf(p.fn[m * width + i], x, acc[m]);
        acc[kRows] = fmaf(x, x, acc[kRows]);
    }
    // 2. Tree: 5 shuffle levels in the warp, then 3 levels over the warps.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int m = 0; m <= kRows; ++m) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) acc[m] += __shfl_xor_sync(kFull, acc[m], o);
        if (lane == 0) partial[warp][m] = acc[m];
    }
    __syncthreads();
    if (threadIdx.x <= kRows) {
        float s[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) s[w] = partial[w][threadIdx.x];
#pragma unroll
        for (int width_w = kWarps / 2; width_w > 0; width_w /= 2)
#pragma unroll
            for (int w = 0; w < width_w; ++w) s[w] += s[w + width_w];
        partial[0][threadIdx.x] = s[0];
    }
    __syncthreads();

    // 3. The mix, in thread 0 (cpu::hc_pre / hc_head order of operations).
    if (threadIdx.x == 0) {
        const float mean_sq = __fdiv_rn(partial[0][kRows], float(width));
        const float rho = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.norm_eps)));
        float logit[kRows];
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
            logit[m] = __fmul_rn(partial[0][m], rho);
            if (p.logits) p.logits[t * kRows + m] = logit[m];
        }
        for (int j = 0; j < kN; ++j)
            mix_s[j] = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(logit[j], p.scale[0]), p.base[j])), p.hc_eps);
        if constexpr (!kHead) {
            for (int j = 0; j < kN; ++j)
                mix_s[kN + j] =
                    __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(logit[kN + j], p.scale[1]), p.base[kN + j])));
            for (int jk = 0; jk < kN * kN; ++jk)
                mix_s[2 * kN + jk] = __fadd_rn(__fmul_rn(logit[2 * kN + jk], p.scale[2]), p.base[2 * kN + jk]);
            sinkhorn<kN>(mix_s + 2 * kN, p.sinkhorn_iters, p.hc_eps);
        }
        for (int m = 0; m < kRows; ++m) p.mix[t * kRows + m] = mix_s[m];
    }
    __syncthreads();

    // 4. Collapse the un-normalized streams with pre, streams in order, then bf16.
    float pre[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = mix_s[j];
    for (int64_t d = threadIdx.x; d < p.dim; d += kHcThreads) {
        float out = 0.0f;
#pragma unroll
        for (int j = 0; j < kN; ++j) out = __fadd_rn(out, __fmul_rn(pre[j], bf16_to_f32(v[j * p.dim + d])));
        p.x_out[t * p.dim + d] = f32_to_bf16(out);
    }
}

template <int kN>
__global__ void __launch_bounds__(kPostThreads) hc_post_kernel(HcPostParams p) {
    constexpr int kMix = (2 + kN) * kN;
    const int64_t t = blockIdx.y;
    const int64_t d = int64_t(blockIdx.x) * kPostThreads + threadIdx.x;
    if (d >= p.dim) return;
    const float* mix = p.mix + t * kMix;
    const __nv_bfloat16* x = p.streams + t * kN * p.dim;
    float xj[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) xj[j] = bf16_to_f32(x[j * p.dim + d]);
    const float f = bf16_to_f32(p.f[t * p.dim + d]);
#pragma unroll
    for (int k = 0; k < kN; ++k) {
        float residual = 0.0f;  // sum over the first index of C: C[j][k] X_j
#pragma unroll
        for (int j = 0; j < kN; ++j) residual = __fadd_rn(residual, __fmul_rn(mix[2 * kN + j * kN + k], xj[j]));
        p.out[(t * kN + k) * p.dim + d] = f32_to_bf16(__fadd_rn(__fmul_rn(mix[kN + k], f), residual));
    }
}

}  // namespace

namespace detail {

void launch_hc_mix(const HcMixParams& p, bool head, cudaStream_t stream) {
    const dim3 grid(unsigned(p.tokens));
    if (p.n_hc == 2 && !head) hc_mix_kernel<2, false><<<grid, kHcThreads, 0, stream>>>(p);
    if (p.n_hc == 2 && head) hc_mix_kernel<2, true><<<grid, kHcThreads, 0, stream>>>(p);
    if (p.n_hc == 4 && !head) hc_mix_kernel<4, false><<<grid, kHcThreads, 0, stream>>>(p);
    if (p.n_hc == 4 && head) hc_mix_kernel<4, true><<<grid, kHcThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_hc_post(const HcPostParams& p, cudaStream_t stream) {
    const dim3 grid(unsigned((p.dim + kPostThreads - 1) / kPostThreads), unsigned(p.tokens));
    if (p.n_hc == 2) hc_post_kernel<2><<<grid, kPostThreads, 0, stream>>>(p);
    if (p.n_hc == 4) hc_post_kernel<4><<<grid, kPostThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
