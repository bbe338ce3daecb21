// mHC's Sinkhorn normalization of comb (see mhc.h). The mix kernels (mhc.cu) leave comb as its inputs (scale * logit +
// base); hc_sinkhorn_kernel normalizes it after them: a warp holds whole tokens' comb matrices, one lane per element,
// each lane doing the CPU's operations on its element in the CPU's order (sinkhorn_lanes). Once in the mix kernels
// (thread 0 looping over the matrix, or rank 0's warp 0), its 20 serial iterations were on the path to x; now they can
// run beside the sub-layer (hc_pre's defer_sinkhorn). Tested by tests/gpu/mhc_test.cpp.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/mhc/mhc.h"

namespace dsv4::cuda {
namespace {

constexpr unsigned kFull = 0xFFFFFFFFu;

// cpu::sinkhorn spread over a warp: lane base + i holds element i of c [kN * kN] (other lanes compute garbage and
// are ignored). Each lane performs exactly the operations the serial loop performs on its element, in the same
// order (row and column sums gathered by shuffles and added in index order), so every element is bitwise equal
// (the generic kernel's serial loop gives the same bits: tests/gpu/mhc_test.cpp).
template <int kN>
__device__ float sinkhorn_lanes(float c, int base, int64_t iters, float eps) {
    const int lane = threadIdx.x % 32;
    const int i = min(max(lane - base, 0), kN * kN - 1), j = i / kN, k = i % kN;
    auto at = [&](float v, int e) { return __shfl_sync(kFull, v, base + e); };
    auto row_sum = [&](float v) {
        float sum = 0.0f;
#pragma unroll
        for (int kk = 0; kk < kN; ++kk) sum = __fadd_rn(sum, at(v, j * kN + kk));
        return sum;
    };
    auto columns = [&](float v) {
        float sum = 0.0f;
#pragma unroll
        for (int jj = 0; jj < kN; ++jj) sum = __fadd_rn(sum, at(v, jj * kN + k));
        return __fdiv_rn(v, __fadd_rn(sum, eps));
    };
    float row_max = at(c, j * kN);
#pragma unroll
    for (int kk = 1; kk < kN; ++kk) row_max = fmaxf(row_max, at(c, j * kN + kk));
    const float e = expf(__fsub_rn(c, row_max));
    c = __fadd_rn(__fdiv_rn(e, row_sum(e)), eps);
    c = columns(c);
    for (int64_t it = 1; it < iters; ++it) {
        c = __fdiv_rn(c, __fadd_rn(row_sum(c), eps));
        c = columns(c);
    }
    return c;
}

// Threads per CTA of hc_sinkhorn_kernel.
constexpr int kSinkhornThreads = 128;

// hc_sinkhorn for n_hc kN: 32 / (kN * kN) tokens per warp, lane base + i holding element i of its token's comb.
template <int kN>
__global__ void __launch_bounds__(kSinkhornThreads)
    hc_sinkhorn_kernel(float* mix, int64_t tokens, int64_t iters, float eps) {
    constexpr int kRows = (2 + kN) * kN, kElems = kN * kN, kPerWarp = 32 / kElems;
    static_assert(32 % kElems == 0, "whole tokens per warp");
    const int lane = threadIdx.x % 32, base = lane / kElems * kElems;
    const int64_t t = (int64_t(blockIdx.x) * (kSinkhornThreads / 32) + threadIdx.x / 32) * kPerWarp + lane / kElems;
    const bool live = t < tokens;  // the lanes of a missing token still take part in the shuffles
    float* c = mix + (live ? t : 0) * kRows + 2 * kN + (lane - base);
    const float normalized = sinkhorn_lanes<kN>(live ? *c : 0.0f, base, iters, eps);
    if (live) *c = normalized;
}

}  // namespace

namespace detail {

void launch_hc_sinkhorn(const HcMixParams& p, cudaStream_t stream) {
    if (!hc_specialised(p.n_hc)) return launch_hc_sinkhorn_generic(p, stream);
    const int64_t per_cta = (kSinkhornThreads / 32) * (32 / (p.n_hc * p.n_hc));
    const unsigned grid = unsigned((p.tokens + per_cta - 1) / per_cta);
    if (p.n_hc == 2)
        hc_sinkhorn_kernel<2><<<grid, kSinkhornThreads, 0, stream>>>(p.mix, p.tokens, p.sinkhorn_iters, p.hc_eps);
    if (p.n_hc == 4)
        hc_sinkhorn_kernel<4><<<grid, kSinkhornThreads, 0, stream>>>(p.mix, p.tokens, p.sinkhorn_iters, p.hc_eps);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
