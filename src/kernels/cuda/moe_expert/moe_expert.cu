// MoE glue kernels (see moe_expert.h). Arithmetic repeats src/model/moe.cpp in f32 in the same order.
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/moe_expert/moe_combine.cuh"
#include "kernels/cuda/moe_expert/moe_expert.h"
#include "kernels/cuda/moe_expert/swiglu_math.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/quant/quant.h"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

// One CTA row-strip per slot row (a skipped row only zeroes its zero_rows row); threads over the intermediate dim in
// chunks of kThreads * kHeld, kHeld elements per thread loaded before any is used (the stores could alias the loads, so
// the compiler would not hoist them): one round trip per chunk. With p.q, the chunk's bf16 outputs are quantized as
// act_quant_fp8 does: element c + t + j kThreads of thread t, so for each j warps 0-3 hold one 128-block and warps 4-7
// the next.
__global__ void __launch_bounds__(kThreads) swiglu_kernel(const SwigluParams p) {
    constexpr int kHeld = 8;
    static_assert(kThreads == 256, "quantize_held_row's thread layout");
    const int64_t r = blockIdx.x;
    if ((p.row_first && r < *p.row_first) || (p.row_count && r >= *p.row_count)) {
        if (p.zero_rows)
            for (int64_t i = threadIdx.x; i < p.zero_cols; i += kThreads)
                p.zero_rows[r * p.zero_cols + i] = __ushort_as_bfloat16(0);  // +0
        return;
    }
    float weight = 1.0f;
    if (p.routing_weights) weight = p.routing_weights[p.sorted_assignment[r]];
    const int64_t in = r * (p.gate_up_stride ? p.gate_up_stride : p.inter);  // the row's gate and up
    const int64_t n_blocks = (p.inter + kActQuantBlock - 1) / kActQuantBlock;
    for (int64_t chunk = 0; chunk < p.inter; chunk += int64_t(kThreads) * kHeld) {
        __nv_bfloat16 gate[kHeld], up[kHeld];
#pragma unroll
        for (int j = 0; j < kHeld; ++j) {
            const int64_t i = chunk + threadIdx.x + int64_t(j) * kThreads;
            if (i < p.inter) gate[j] = p.gate[in + i], up[j] = p.up[in + i];
        }
        float out[kHeld];
#pragma unroll
        for (int j = 0; j < kHeld; ++j) {
            const int64_t i = chunk + threadIdx.x + int64_t(j) * kThreads;
            out[j] = 0.0f;
            if (i >= p.inter) continue;
            const __nv_bfloat16 rounded = swiglu_element(gate[j], up[j], p.limit, p.routing_weights, weight);
            p.out[r * p.inter + i] = rounded;
            out[j] = bf16_to_f32(rounded);
        }
        if (p.q) quantize_held_row<kHeld>(out, chunk, p.inter, p.q + r * p.inter, p.q_scales + r * n_blocks);
    }
}

// grid (ceil(dim / kThreads), min(tokens, 65535)): one output column per thread, so a decode token's 4096 columns
// spread over 16 blocks; blocks stride the tokens. Every block orders its token's assignments itself
// (moe_combine_order: no chain of dependent global loads) and each thread sums its column (moe_combine_value).
__global__ void moe_combine_kernel(const MoeCombineParams p) {
    __shared__ MoeCombineOrder order;
    const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
    for (int64_t t = blockIdx.y; t < p.tokens; t += gridDim.y) {
        moe_combine_order(p, t, order);
        if (c < p.dim) p.out[t * p.dim + c] = moe_combine_value(p, order, t, c);
        __syncthreads();  // the order is rewritten for the next token
    }
}

template <typename W>
__device__ __forceinline__ float load_weight(const W* w, int64_t i);
template <>
__device__ __forceinline__ float load_weight<float>(const float* w, int64_t i) {
    return w[i];
}
template <>
__device__ __forceinline__ float load_weight<__nv_bfloat16>(const __nv_bfloat16* w, int64_t i) {
    return bf16_to_f32(w[i]);
}

// grid (ceil(n / kWarps), slots): one warp per output value, lanes stride K, f32 tree at the end.
template <typename W>
__global__ void dense_expert_gemm_kernel(const DenseExpertGemmParams p) {
    const int64_t slot = blockIdx.y + int64_t(gridDim.y) * blockIdx.z;
    const int64_t total = p.expert_offsets[p.experts];
    if (slot >= total || slot < p.expert_offsets[0]) return;
    int lo = 0, hi = int(p.experts) - 1;  // the expert e with offsets[e] <= slot < offsets[e + 1]
    while (lo < hi) {
        const int mid = (lo + hi + 1) / 2;
        if (p.expert_offsets[mid] <= slot)
            lo = mid;
        else
            hi = mid - 1;
    }
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t n = blockIdx.x * int64_t(kWarps) + warp;
    if (n >= p.n) return;
    const int64_t row = p.row_index ? p.row_index[slot] : slot;
    const __nv_bfloat16* x = p.x + row * p.k;
    const W* w = static_cast<const W*>(p.w) + (int64_t(lo) * p.n + n) * p.k;
    float acc = 0.0f;
    for (int64_t i = lane; i < p.k; i += 32) acc += bf16_to_f32(x[i]) * load_weight<W>(w, i);
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) p.y[slot * p.n + n] = f32_to_bf16(acc);
}

}  // namespace

namespace detail {
void launch_swiglu(const SwigluParams& p, cudaStream_t stream) {
    swiglu_kernel<<<unsigned(p.rows), kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
void launch_moe_combine(const MoeCombineParams& p, cudaStream_t stream) {
    const dim3 grid(unsigned((p.dim + kThreads - 1) / kThreads), unsigned(p.tokens < 65535 ? p.tokens : 65535));
    moe_combine_kernel<<<grid, kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
void launch_dense_expert_gemm(const DenseExpertGemmParams& p, cudaStream_t stream) {
    const int64_t ys = p.max_slots < 65535 ? p.max_slots : 65535;
    dim3 grid(unsigned((p.n + kWarps - 1) / kWarps), unsigned(ys), unsigned((p.max_slots + ys - 1) / ys));
    if (p.w_f32)
        dense_expert_gemm_kernel<float><<<grid, kThreads, 0, stream>>>(p);
    else
        dense_expert_gemm_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(p);
    DSV4_CUDA_CHECK(cudaGetLastError());
}
}  // namespace detail

}  // namespace dsv4::cuda
