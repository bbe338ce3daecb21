// hc_pre of one token with the mixer's chains spread over ~100 SMs (HcMixPath::kSpread, mhc.h). The split path's
// cluster of 16 pulls V4-Flash's 1.5 MB f32 mixer with 16 SMs, 160 KB each, and at one token that per-SM stream is its
// bound (hc_pre 9.2 us on an H100 where the same clusters at 8 tokens take 10.8). The per-token kernel's arithmetic is
// made of units that need no CTA in common until the last tree: thread t = 32 w + l of the per-token CTA chains
// columns t + 256 s of each value, and warp w's five-level shuffle tree sums its 32 chains. Here CTA (pair, w) runs
// warp w's chains of the value pair (2 pair, 2 pair + 1) in its warp 0 (pair 0 also the sum of squares), 96 CTAs at
// n_hc 4, and leaves its warp sums in global memory; the last CTA to arrive (an arrival count, left zero) runs the
// per-token kernel's 8-warp tree of every value, the mix, the collapse and rms_norm's arithmetic on the collapsed row.
// The same chains, trees and operations: the same bits as every other path (tests/gpu/mhc_test.cpp).
#include <type_traits>

#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/mhc/mhc_common.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/quant/quant.h"

namespace dsv4::cuda {
namespace {

using mhc::kFull;
using mhc::kWarps;

// Strided columns a lane loads before their fmafs: two round trips for V4-Flash's 64 columns a thread, in ~110
// registers (two CTAs fit a SM beside the side lane's kernels).
constexpr int kSpreadUnroll = 32;

// grid (kWarps * rows / 2, tokens): CTA x = pair * kWarps + w. kChunks: 256-element chunks of the row a thread of the
// last CTA holds (dim <= 256 kChunks). kNorm: the row is then rms-normalized in place (quantized where norm.q is set).
template <int kN, bool kNorm, int kChunks>
__global__ void __launch_bounds__(kHcThreads, 2) hc_pre_spread_kernel(HcMixParams p, RmsNormParams norm) {
    constexpr int kRows = (2 + kN) * kN, kValues = kRows + 1, kUnits = kRows / 2 * kWarps;
    static_assert(kRows % 2 == 0 && kValues <= 32 && kHcThreads == 256, "value pairs; warp 0 holds every value");
    __shared__ bool last_s;
    __shared__ float sums_s[kValues];
    __shared__ float pre_s[kN];
    __shared__ double warp_sums[kWarps];
    __shared__ float factor_s;
    const int64_t t = blockIdx.y, width = kN * p.dim;
    const __nv_bfloat16* v = p.streams + t * width;
    const int pair = int(blockIdx.x) / kWarps, w = int(blockIdx.x) % kWarps;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float* partials = p.spread_partials + t * kValues * kWarps;  // [value][warp]

    // 1. Warp 0: the chains of thread 32 w + lane of the per-token kernel for rows 2 pair, 2 pair + 1 (and pair 0:
    // the sum of squares), its shuffle tree, the warp sums out, and the arrival.
    if (warp == 0) {
        const float* f0 = p.fn + int64_t(2 * pair) * width;
        const float* f1 = f0 + width;
        float acc0 = 0.0f, acc1 = 0.0f, square = 0.0f;
        auto chain_columns = [&](auto whole, int64_t i0) {  // kWhole: every column inside the row, no bound checks
            constexpr bool kWhole = decltype(whole)::value;
            float x[kSpreadUnroll], a[kSpreadUnroll], b[kSpreadUnroll];
#pragma unroll
            for (int s = 0; s < kSpreadUnroll; ++s) {
                const bool in = kWhole || i0 + int64_t(s) * kHcThreads < width;
                x[s] = in ? bf16_to_f32(v[i0 + s * kHcThreads]) : 0.0f;
                a[s] = in ? __ldg(f0 + i0 + s * kHcThreads) : 0.0f;
                b[s] = in ? __ldg(f1 + i0 + s * kHcThreads) : 0.0f;
            }
#pragma unroll
            for (int s = 0; s < kSpreadUnroll; ++s) {
                if (!kWhole && i0 + int64_t(s) * kHcThreads >= width) break;
                acc0 = fmaf(a[s], x[s], acc0);
                acc1 = fmaf(b[s], x[s], acc1);
                square = fmaf(x[s], x[s], square);
            }
        };
        for (int64_t i0 = w * 32 + lane; i0 < width; i0 += int64_t(kHcThreads) * kSpreadUnroll) {
            if (i0 + int64_t(kSpreadUnroll - 1) * kHcThreads < width)
                chain_columns(std::true_type{}, i0);
            else
                chain_columns(std::false_type{}, i0);
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) {
            acc0 += __shfl_xor_sync(kFull, acc0, o);
            acc1 += __shfl_xor_sync(kFull, acc1, o);
            square += __shfl_xor_sync(kFull, square, o);
        }
        if (lane == 0) {
            partials[(2 * pair) * kWarps + w] = acc0;
            partials[(2 * pair + 1) * kWarps + w] = acc1;
            if (pair == 0) partials[kRows * kWarps + w] = square;
            __threadfence();  // the sums are visible before the count that says so
            last_s = atomicAdd(p.spread_arrivals + t, 1u) == unsigned(kUnits - 1);
        }
    }
    __syncthreads();
    if (!last_s) return;                             // the whole CTA
    __threadfence();                                 // every other CTA's sums, fenced before it counted itself
    if (threadIdx.x == 0) p.spread_arrivals[t] = 0;  // left zero for the next launch

    // The norm's weights (no earlier kernel writes them), requested before the tree and the mix.
    float norm_weight[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
        const int64_t d = threadIdx.x + int64_t(i) * kHcThreads;
        norm_weight[i] = kNorm && norm.weight && d < p.dim ? norm.weight[d] : 0.0f;
    }

    // 2. The per-token kernel's 8-warp tree of every value (lane u: value u), then 3. its mix (lane u: row u).
    if (warp == 0) {
        const int u = lane < kValues ? lane : 0;
        float s[kWarps];
#pragma unroll
        for (int k = 0; k < kWarps; ++k) s[k] = __ldcg(partials + u * kWarps + k);
#pragma unroll
        for (int half = kWarps / 2; half > 0; half /= 2)
#pragma unroll
            for (int k = 0; k < half; ++k) s[k] += s[k + half];
        if (lane < kValues) sums_s[lane] = s[0];
        __syncwarp();
        const int m = lane < kRows ? lane : 0;
        const float scale[3] = {p.scale[0], p.scale[1], p.scale[2]};
        const float logit = __fmul_rn(sums_s[m], mhc::mixer_rho(sums_s[kRows], width, p.norm_eps));
        const float mix = mhc::mix_of_logit<kN, false>(m, logit, scale, p.base[m], p.hc_eps);
        if (lane < kN) pre_s[lane] = mix;
        if (lane < kRows) {  // comb's inputs as they are: hc_sinkhorn normalizes them
            if (p.logits) p.logits[t * kRows + lane] = logit;
            p.mix[t * kRows + lane] = mix;
        }
    }
    __syncthreads();

    // 4. The collapse of the whole row (streams in order, then bf16), thread t holding elements t + 256 i as rms_norm's
    // thread t does.
    float pre[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = pre_s[j];
    float held[kChunks];
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
        const int64_t d = threadIdx.x + int64_t(i) * kHcThreads;
        held[i] = 0.0f;
        if (d < p.dim) {
            float out = 0.0f;
#pragma unroll
            for (int j = 0; j < kN; ++j) out = __fadd_rn(out, __fmul_rn(pre[j], bf16_to_f32(v[j * p.dim + d])));
            const __nv_bfloat16 x = f32_to_bf16(out);
            if constexpr (!kNorm) p.x_out[t * p.dim + d] = x;
            held[i] = bf16_to_f32(x);
        }
    }
    if constexpr (kNorm) {
        // 5. rms_norm's arithmetic on the held row (rms_norm.cu): squares summed in double in ascending i, its trees,
        // the factor, the weighted product rounded to bf16, then act_quant's codes of what was stored.
        double sum = 0.0;
#pragma unroll
        for (int i = 0; i < kChunks; ++i) sum += double(held[i]) * double(held[i]);
#pragma unroll
        for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(kFull, sum, o);
        if (lane == 0) warp_sums[warp] = sum;
        __syncthreads();
        if (threadIdx.x == 0) {
            double total = 0.0;
            for (int k = 0; k < kWarps; ++k) total += warp_sums[k];
            const float mean_sq = float(total / double(p.dim));
            factor_s = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, norm.eps)));
        }
        __syncthreads();
        const float r = factor_s;
#pragma unroll
        for (int i = 0; i < kChunks; ++i) {
            const int64_t d = threadIdx.x + int64_t(i) * kHcThreads;
            const float normed = __fmul_rn(held[i], r);
            const __nv_bfloat16 out = f32_to_bf16(norm.weight ? __fmul_rn(norm_weight[i], normed) : normed);
            if (d < p.dim) p.x_out[t * p.dim + d] = out;
            held[i] = d < p.dim ? bf16_to_f32(out) : 0.0f;
        }
        if (norm.q) {
            const int64_t n_blocks = (p.dim + kActQuantBlock - 1) / kActQuantBlock;
            quantize_held_row<kChunks>(held, 0, p.dim, norm.q + t * p.dim, norm.q_scales + t * n_blocks);
        }
    }
}

template <int kN, bool kNorm>
void launch_spread(const HcMixParams& p, const RmsNormParams& norm, cudaStream_t stream) {
    constexpr int kRows = (2 + kN) * kN;
    const dim3 grid(unsigned(kRows / 2 * kWarps), unsigned(p.tokens));
    if (p.dim <= 16 * kHcThreads)
        hc_pre_spread_kernel<kN, kNorm, 16><<<grid, kHcThreads, 0, stream>>>(p, norm);
    else
        hc_pre_spread_kernel<kN, kNorm, kHcSpreadMaxChunks><<<grid, kHcThreads, 0, stream>>>(p, norm);
}

}  // namespace

namespace detail {

void launch_hc_pre_spread(const HcMixParams& p, const RmsNormParams* norm, cudaStream_t stream) {
    const RmsNormParams none{};
    if (p.n_hc == 2 && norm) launch_spread<2, true>(p, *norm, stream);
    if (p.n_hc == 2 && !norm) launch_spread<2, false>(p, none, stream);
    if (p.n_hc == 4 && norm) launch_spread<4, true>(p, *norm, stream);
    if (p.n_hc == 4 && !norm) launch_spread<4, false>(p, none, stream);
    DSV4_CUDA_CHECK(cudaGetLastError());
}

}  // namespace detail
}  // namespace dsv4::cuda
