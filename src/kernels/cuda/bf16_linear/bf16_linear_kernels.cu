// The bf16_linear kernel: bf16_act_mma.cuh with bf16 weights and f32 outputs, one column group (see
// bf16_linear.h).
#include "kernels/cuda/bf16_act_mma/bf16_act_mma.cuh"
#include "kernels/cuda/bf16_linear/bf16_linear_kernels.h"

namespace dsv4::cuda {

cudaError_t launch_bf16_linear(const Bf16LinearParams& p, const bf16_act_mma::Tiles& tiles, cudaStream_t stream) {
    bf16_act_mma::Args args{};
    args.x = p.x;
    args.ldx = p.ldx;
    args.w = p.w;
    args.w_scale = nullptr;
    args.y = p.y;
    args.ldy = p.ldy;
    args.m = p.m;
    args.n = p.n;
    args.k = p.k;
    args.group_n = p.n;
    return bf16_act_mma::launch<bf16_act_mma::Bf16Weight, bf16_act_mma::F32Out>(args, tiles, stream);
}

}  // namespace dsv4::cuda
