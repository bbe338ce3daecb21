// grouped_linear kernels (see grouped_linear.h): the tensor-core product (bf16_act_mma.cuh with e4m3 weights, one
// column group per wo_a group; the 128 x 128 tile on wgmma_linear.cuh) and the generic one-thread-per-output kernel.
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

#include "kernels/cuda/bf16_act_mma/bf16_act_mma.cuh"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/common/wgmma_linear.cuh"

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
        return wgmma_linear::launch_bf16(args, stream);
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
    return bf16_act_mma::launch<bf16_act_mma::E4m3Weight, bf16_act_mma::Bf16Out>(args, tiles, stream);
}

cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream) {
    const int64_t n_total = p.groups * p.out;
    grouped_linear_generic_kernel<<<dim3(unsigned((n_total + 127) / 128), unsigned(p.m)), 128, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
