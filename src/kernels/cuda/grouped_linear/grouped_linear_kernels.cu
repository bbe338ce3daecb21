// grouped_linear kernels: the skinny tile over one group's rows and K range, and the generic one-thread-per-output
// kernel (see grouped_linear.h).
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/gemm_fp8/skinny_operands.cuh"

namespace dsv4::cuda {
namespace {

struct GroupedArgs {
    GroupedLinearParams p;
    int64_t k_per_split;
    float* partial;  // [splits, m, groups * out] or null
};

// grid: (ceil(out / kRowsPerBlock), splits, groups).
template <int kM>
__global__ void __launch_bounds__(skinny::kThreads) grouped_linear_kernel(GroupedArgs args) {
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    const GroupedLinearParams& p = args.p;
    const int64_t g = blockIdx.z, n_total = p.groups * p.out;
    const int64_t n_begin = g * p.out + int64_t(blockIdx.x) * skinny::kRowsPerBlock;
    const int64_t n_group_end = (g + 1) * p.out;
    const int64_t n_end = n_begin + skinny::kRowsPerBlock < n_group_end ? n_begin + skinny::kRowsPerBlock : n_group_end;
    const int64_t k_begin = int64_t(blockIdx.y) * args.k_per_split;
    const int64_t k_end = k_begin + args.k_per_split < p.in ? k_begin + args.k_per_split : p.in;
    const skinny::Fp8Weight weight{p.w, p.w_scale, p.in, (p.in + 127) / 128};
    for (int64_t m0 = 0; m0 < p.m; m0 += kM) {
        const int tokens = p.m - m0 < kM ? int(p.m - m0) : kM;
        const skinny::Bf16Act act{p.x, p.groups * p.in, g * p.in, m0};
        if (args.partial) {
            float* out = args.partial + int64_t(blockIdx.y) * p.m * n_total;
            skinny::tile<kM>(weight, act, tokens, n_begin, n_end, k_begin, k_end, smem,
                             [&](int m, int64_t n, float v, int) { out[(m0 + m) * n_total + n] = v; });
        } else {
            skinny::tile<kM>(weight, act, tokens, n_begin, n_end, k_begin, k_end, smem, [&](int m, int64_t n, float v, int) {
                p.y[(m0 + m) * n_total + n] = __float2bfloat16_rn(v);
            });
        }
    }
}

template <int kM>
cudaError_t launch_m(const GroupedArgs& args, int splits, cudaStream_t stream) {
    const int64_t padded = (args.k_per_split + 511) / 512 * 512;
    const int smem = int(kM * padded * sizeof(float));
    if (cudaError_t e = skinny::allow_smem(grouped_linear_kernel<kM>, smem); e != cudaSuccess) return e;
    const dim3 grid(unsigned((args.p.out + skinny::kRowsPerBlock - 1) / skinny::kRowsPerBlock), unsigned(splits),
                    unsigned(args.p.groups));
    grouped_linear_kernel<kM><<<grid, skinny::kThreads, smem, stream>>>(args);
    return cudaGetLastError();
}

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

cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream) {
    const int64_t n_total = p.groups * p.out;
    grouped_linear_generic_kernel<<<dim3(unsigned((n_total + 127) / 128), unsigned(p.m)), 128, 0, stream>>>(p);
    return cudaGetLastError();
}

cudaError_t launch_grouped_linear(const GroupedLinearParams& p, const Fp8GemmConfig& config, float* partial,
                                  cudaStream_t stream) {
    const GroupedArgs args{p, config.k_per_split, config.splits > 1 ? partial : nullptr};
    cudaError_t e = cudaErrorInvalidValue;
    switch (config.m_tile) {
        case 1: e = launch_m<1>(args, config.splits, stream); break;
        case 2: e = launch_m<2>(args, config.splits, stream); break;
        case 4: e = launch_m<4>(args, config.splits, stream); break;
        case 8: e = launch_m<8>(args, config.splits, stream); break;
        case 16: e = launch_m<16>(args, config.splits, stream); break;
        default: return cudaErrorInvalidValue;
    }
    if (e != cudaSuccess || config.splits == 1) return e;
    return launch_reduce_splits(partial, config.splits, p.m * p.groups * p.out, p.y, stream);
}

}  // namespace dsv4::cuda
