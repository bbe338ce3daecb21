// grouped_linear kernels (see grouped_linear.h): the tensor-core product (bf16_act_mma.cuh with e4m3 weights, one
// column group per wo_a group; the 128 x 128 tile on wgmma_linear.cuh) and the generic one-thread-per-output kernel.
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

#include "kernels/cuda/bf16_act_mma/bf16_act_mma.cuh"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/common/wgmma_linear.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/quant/quant.h"

namespace dsv4::cuda {
namespace {

// GroupedLinearPath::kGeneric, grid (ceil(groups * out / 128), m): output n of group n / out, its K in order.
__global__ void __launch_bounds__(128) grouped_linear_generic_kernel(const GroupedLinearParams p) {
    const int64_t n = int64_t(blockIdx.x) * 128 + threadIdx.x, m = blockIdx.y, n_total = p.groups * p.out;
    if (n >= n_total) return;
    const int64_t kb = (p.in + 127) / 128;
    const __nv_bfloat16* x = p.x + m * p.groups * p.in + (n / p.out) * p.in;
    const uint8_t* w = p.w + n * p.in;
    const float* w_scale = p.w_scale + (n / 128) * kb;
    float acc = 0.0f;
    for (int64_t k = 0; k < p.in; ++k)
        acc = __fadd_rn(acc, __fmul_rn(__bfloat162float(x[k]), e4m3_to_f32(w[k]) * w_scale[k / 128]));
    p.y[m * n_total + n] = __float2bfloat16_rn(acc);
}

// GroupedLinearParams::q: after a CTA wrote its tile, it counts its arrival at each 128-column block of its row tile;
// the last of the block's CTAs (every 128 / BN of them) reads the block's bf16 outputs back (__ldcg: other CTAs wrote
// them) and quantizes them with act_quant_fp8_kernel's arithmetic: one warp per row, four values a lane, the block's
// amax by a warp max, the UE8M0 scale, the e4m3 codes (fp8_act_codec.cuh).
struct QuantizeTail {
    struct Params {
        const __nv_bfloat16* y;  // [m, n]
        uint8_t* q;              // [m, n]
        float* scales;           // [m, ceil(n / 128)]
        int32_t* arrivals;       // [row tiles, ceil(n / 128)]
        int64_t n;
    };
    __device__ static void after(const Params& p, const bf16_act_mma::CtaTile& tile) {
        static_assert(bf16_act_mma::kThreads == 256 && kActQuantBlock == 4 * 32, "a warp a row, 4 values a lane");
        __shared__ bool last;
        const int64_t n_blocks = (p.n + kActQuantBlock - 1) / kActQuantBlock, block = tile.n0 / kActQuantBlock;
        const int64_t block_end = (block + 1) * kActQuantBlock < p.n ? (block + 1) * kActQuantBlock : p.n;
        const int writers = int((block_end - block * kActQuantBlock + tile.cols - 1) / tile.cols);
        int32_t* counter = p.arrivals + int64_t(blockIdx.x) * n_blocks + block;
        __threadfence();  // this thread's outputs visible device-wide before the CTA's arrival counts
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(counter, 1) == writers - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();  // the block's other CTAs arrived: their outputs are read after this
        if (threadIdx.x == 0) *counter = 0;  // for the next launch
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        const int64_t col0 = block * kActQuantBlock + 4 * lane;
        for (int r = warp; r < tile.rows; r += bf16_act_mma::kWarps) {
            const int64_t row = tile.m0 + r;
            float v[4];
            float amax = 0.0f;
#pragma unroll
            for (int i = 0; i < 4; ++i) {
                v[i] = col0 + i < p.n ? bf16_to_f32(__ldcg(p.y + row * p.n + col0 + i)) : 0.0f;
                amax = fmaxf(amax, fabsf(v[i]));
            }
            const float s = e8m0_to_f32(fp8_scale_exponent(group_max<32>(amax)));
#pragma unroll
            for (int i = 0; i < 4; ++i)
                if (col0 + i < p.n) p.q[row * p.n + col0 + i] = fp8_code(v[i], s);
            if (lane == 0) p.scales[row * n_blocks + block] = s;
        }
    }
};

}  // namespace

cudaError_t launch_grouped_linear_mma(const GroupedLinearParams& p, const bf16_act_mma::Tiles& tiles,
                                      cudaStream_t stream) {
    if (tiles.block_m == 128) {  // the warpgroup tile (sm_90, K % 128 == 0; checked by the caller)
        wgmma_linear::Args args{};
        args.x = p.x;
        args.ldx = p.groups * p.in;
        args.w = p.w;
        args.w_scale = p.w_scale;
        args.y = p.y;
        args.ldy = p.groups * p.out;
        args.m = p.m;
        args.n = p.groups * p.out;
        args.k = p.in;
        args.group_n = p.out;
        args.pair_stores = reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
        return wgmma_linear::launch<false>(args, stream);
    }
    bf16_act_mma::Args args{};
    args.x = p.x;
    args.ldx = p.groups * p.in;
    args.w = p.w;
    args.w_scale = p.w_scale;
    args.y = p.y;
    args.ldy = p.groups * p.out;
    args.m = p.m;
    args.n = p.groups * p.out;
    args.k = p.in;
    args.group_n = p.out;
    if (p.q)
        return bf16_act_mma::launch<bf16_act_mma::E4m3Weight, bf16_act_mma::Bf16Out, QuantizeTail>(
            args, tiles, stream, {p.y, p.q, p.q_scales, p.q_arrivals, p.groups * p.out});
    return bf16_act_mma::launch<bf16_act_mma::E4m3Weight, bf16_act_mma::Bf16Out>(args, tiles, stream);
}

cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream) {
    const int64_t n_total = p.groups * p.out;
    grouped_linear_generic_kernel<<<dim3(unsigned((n_total + 127) / 128), unsigned(p.m)), 128, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
