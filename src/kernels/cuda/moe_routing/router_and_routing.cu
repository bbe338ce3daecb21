// router_and_routing (moe_routing.h): bf16_linear's kernel, its K blocks split over several CTAs a tile where the
// tiles alone would leave most SMs idle, with a tail in which the last CTA to finish routes the tokens
// (route_one_block.cuh): a decode step's router and routing in one launch instead of two.
#include "kernels/cuda/bf16_act_mma/bf16_act_mma.cuh"
#include "kernels/cuda/moe_routing/moe_routing.h"
#include "kernels/cuda/moe_routing/route_one_block.cuh"

namespace dsv4::cuda {
namespace {

static_assert(bf16_act_mma::kThreads == routing::kOneBlockThreads, "the last CTA routes with all its threads");

struct RoutingTail {
    struct Params {
        MoeRoutingParams routing;
        int32_t* arrivals;
    };
    __device__ static void after(const Params& p) {
        __shared__ bool last;
        __threadfence();  // this thread's logits are visible to the whole device before the CTA's arrival counts
        __syncthreads();
        if (threadIdx.x == 0) last = atomicAdd(p.arrivals, 1) == int(gridDim.x * gridDim.y * gridDim.z) - 1;
        __syncthreads();
        phase_mark(p.routing.phase_clock, 4);
        if (!last) return;
        __threadfence();                        // every CTA arrived: their logits are read after this
        if (threadIdx.x == 0) *p.arrivals = 0;  // for the next launch (nothing else touches it in this one)
        routing::route_one_block(p.routing);
    }
};

}  // namespace

namespace detail {

cudaError_t launch_router_and_routing(const Bf16LinearParams& router, const bf16_act_mma::Tiles& tiles, int splits,
                                      const MoeRoutingParams& params, const RouterScratch& scratch,
                                      cudaStream_t stream) {
    bf16_act_mma::Args args{};
    args.x = router.x;
    args.ldx = router.ldx;
    args.w = router.w;
    args.w_scale = nullptr;
    args.y = router.y;
    args.ldy = router.ldy;
    args.m = router.m;
    args.n = router.n;
    args.k = router.k;
    args.group_n = router.n;
    args.splits = splits;
    args.split_staged = scratch.staged;
    args.split_arrivals = scratch.arrivals + 1;  // [0]: the routing's
    args.phase_clock = params.phase_clock;
    return bf16_act_mma::launch<bf16_act_mma::Bf16Weight, bf16_act_mma::F32Out, RoutingTail>(
        args, tiles, stream, {params, scratch.arrivals});
}

}  // namespace detail
}  // namespace dsv4::cuda
