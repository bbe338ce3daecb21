// mHC's post-mix (see mhc.h): elementwise over (token, d); hc_post_of_moe computes its f there too, with
// moe_combine's code. Tested by tests/gpu/mhc_test.cpp.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/mhc/hc_post_math.cuh"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/moe_expert/moe_combine.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kPostThreads = 256;

// kCombine: f is moe_combine's output for (t, d), computed here (moe_combine.cuh) instead of read from p.f.
template <int kN, bool kCombine>
__global__ void __launch_bounds__(kPostThreads) hc_post_kernel(HcPostParams p, MoeCombineParams m) {
    constexpr int kMix = (2 + kN) * kN;
    const int64_t t = blockIdx.y;
    const int64_t d = int64_t(blockIdx.x) * kPostThreads + threadIdx.x;
    __shared__ MoeCombineOrder order;
    if constexpr (kCombine) moe_combine_order(m, t, order);  // every thread, before any leaves
    if (d >= p.dim) return;
    const float* mix = p.mix + t * kMix;
    const __nv_bfloat16* x = p.streams + t * kN * p.dim;
    float xj[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) xj[j] = bf16_to_f32(x[j * p.dim + d]);
    float f;
    if constexpr (kCombine) {
        const __nv_bfloat16 combined = moe_combine_value(m, order, t, d);
        m.out[t * p.dim + d] = combined;
        f = bf16_to_f32(combined);
    } else {
        f = bf16_to_f32(p.f[t * p.dim + d]);
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) p.out[(t * kN + k) * p.dim + d] = f32_to_bf16(hc_post_value<kN>(mix, xj, f, k));
}

// hc_post_kernel's arithmetic on kPostColumns consecutive columns a thread, each row's values one 16-byte load and
// each output row one 16-byte store: for dims that are whole multiples of 8 with 16-byte aligned rows (V4's), where the
// kernel of one column a thread issued eleven 2-byte loads and five 2-byte stores a column and, with the MoE's combine,
// sorted the token's assignments once per 256 columns (hc_post_vector_fits chooses it, from 64 tokens on).
constexpr int kPostColumns = 8;
template <int kN, bool kCombine>
__global__ void __launch_bounds__(kPostThreads) hc_post_vector_kernel(HcPostParams p, MoeCombineParams m) {
    constexpr int kMix = (2 + kN) * kN;
    const int64_t t = blockIdx.y;
    const int64_t d0 = (int64_t(blockIdx.x) * kPostThreads + threadIdx.x) * kPostColumns;
    __shared__ MoeCombineOrder order;
    if constexpr (kCombine) moe_combine_order(m, t, order);  // every thread, before any leaves
    if (d0 >= p.dim) return;
    const float* mix = p.mix + t * kMix;
    uint4 x_raw[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) x_raw[j] = *reinterpret_cast<const uint4*>(p.streams + (t * kN + j) * p.dim + d0);
    float f[kPostColumns];
    if constexpr (kCombine) {
        uint4 combined;
        moe_combine_values<kPostColumns>(m, order, t, d0, f, combined);
        *reinterpret_cast<uint4*>(m.out + t * p.dim + d0) = combined;
    } else {
        const uint4 f_raw = *reinterpret_cast<const uint4*>(p.f + t * p.dim + d0);
#pragma unroll
        for (int c = 0; c < kPostColumns; ++c) f[c] = bf16x8_at(f_raw, c);
    }
#pragma unroll
    for (int k = 0; k < kN; ++k) {
        uint32_t out[kPostColumns / 2];
#pragma unroll
        for (int c = 0; c < kPostColumns; ++c) {
            float xc[kN];
#pragma unroll
            for (int j = 0; j < kN; ++j) xc[j] = bf16x8_at(x_raw[j], c);
            const uint32_t bits = __bfloat16_as_ushort(f32_to_bf16(hc_post_value<kN>(mix, xc, f[c], k)));
            out[c / 2] = c % 2 ? out[c / 2] | (bits << 16) : bits;
        }
        *reinterpret_cast<uint4*>(p.out + (t * kN + k) * p.dim + d0) = make_uint4(out[0], out[1], out[2], out[3]);
    }
}

bool aligned16(const void* ptr) {
    return reinterpret_cast<uintptr_t>(ptr) % 16 == 0;
}
// From this many tokens on the vector kernel is faster; below, its grid (V4: two CTAs a token) leaves most SMs idle
// and each thread's eight columns lengthen the chain that the kernel of one column a thread spreads over 16 CTAs a
// token (H100, hc_post_of_moe at V4's shapes: 16 tokens 4.4 against 5.4 us, 64 tokens 7.0 against 5.6 us).
constexpr int64_t kPostVectorMinTokens = 64;
// Whether hc_post_vector_kernel runs p (with the combine's buffers where there is one).
bool hc_post_vector_fits(const HcPostParams& p, const MoeCombineParams* m) {
    const bool rows =
        p.tokens >= kPostVectorMinTokens && p.dim % kPostColumns == 0 && aligned16(p.streams) && aligned16(p.out);
    return m ? rows && aligned16(m->routed) && aligned16(m->shared) && aligned16(m->out) : rows && aligned16(p.f);
}

}  // namespace

namespace detail {

void launch_hc_post(const HcPostParams& p, cudaStream_t stream, bool generic) {
    if (generic || !hc_specialised(p.n_hc)) return launch_hc_post_generic(p, stream);
    if (hc_post_vector_fits(p, nullptr)) {
        const dim3 grid(unsigned((p.dim / kPostColumns + kPostThreads - 1) / kPostThreads), unsigned(p.tokens));
        if (p.n_hc == 2) hc_post_vector_kernel<2, false><<<grid, kPostThreads, 0, stream>>>(p, {});
        if (p.n_hc == 4) hc_post_vector_kernel<4, false><<<grid, kPostThreads, 0, stream>>>(p, {});
    } else {
        const dim3 grid(unsigned((p.dim + kPostThreads - 1) / kPostThreads), unsigned(p.tokens));
        if (p.n_hc == 2) hc_post_kernel<2, false><<<grid, kPostThreads, 0, stream>>>(p, {});
        if (p.n_hc == 4) hc_post_kernel<4, false><<<grid, kPostThreads, 0, stream>>>(p, {});
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

void launch_hc_post_of_moe(const HcPostParams& p, const MoeCombineParams& combine, cudaStream_t stream) {
    if (hc_post_vector_fits(p, &combine)) {
        const dim3 grid(unsigned((p.dim / kPostColumns + kPostThreads - 1) / kPostThreads), unsigned(p.tokens));
        if (p.n_hc == 2) hc_post_vector_kernel<2, true><<<grid, kPostThreads, 0, stream>>>(p, combine);
        if (p.n_hc == 4) hc_post_vector_kernel<4, true><<<grid, kPostThreads, 0, stream>>>(p, combine);
    } else {
        const dim3 grid(unsigned((p.dim + kPostThreads - 1) / kPostThreads), unsigned(p.tokens));
        if (p.n_hc == 2) hc_post_kernel<2, true><<<grid, kPostThreads, 0, stream>>>(p, combine);
        if (p.n_hc == 4) hc_post_kernel<4, true><<<grid, kPostThreads, 0, stream>>>(p, combine);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
