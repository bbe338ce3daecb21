// gemm_fp8's 128 x 128 tile on Hopper's warpgroup MMA (Fp8GemmPath::kMma, block_m 128: prefill pieces and large
// batches, sm_90, K % 128 == 0): common/wgmma_linear_fp8.cuh (warp-specialized). mma_gemm.cu's arithmetic (its
// header), so the same bits as the warp-MMA tiles; tested bitwise against them in tests/gpu/gemm_fp8_test.cpp.
#include "kernels/cuda/common/wgmma_linear_fp8.cuh"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"

namespace dsv4::cuda {

cudaError_t launch_fp8_wgmma(const Fp8GemmParams& p, cudaStream_t stream) {
    wgmma_linear::Args args{};
    args.x = p.a;
    args.ldx = p.k;
    args.x_scale = p.a_scale;
    args.w = p.w;
    args.w_scale = p.w_scale;
    args.y = p.y;
    args.ldy = p.n;
    args.m = p.m;
    args.n = p.n;
    args.k = p.k;
    args.group_n = p.n;
    args.pair_stores = p.n % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
    return wgmma_linear::launch_fp8(args, stream);
}

}  // namespace dsv4::cuda
