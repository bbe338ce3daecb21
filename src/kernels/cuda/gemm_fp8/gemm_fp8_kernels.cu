// gemm_fp8 kernels: the skinny (decode) FP8 GEMM over skinny::tile, the deterministic split-K reduction and the
// cuBLASLt scale repack. See gemm_fp8.h for the contracts (checked by the launcher in gemm_fp8.cpp).
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"

#include "kernels/cuda/gemm_fp8/skinny_operands.cuh"

namespace dsv4::cuda {
namespace {

struct Fp8SkinnyArgs {
    Fp8GemmParams p;
    int64_t k_per_split;
    float* partial;  // [splits, m, n] f32 or null when writing bf16 directly
};

// grid: (ceil(n / kRowsPerBlock), splits). Tokens are processed in passes of kM.
template <int kM>
__global__ void __launch_bounds__(skinny::kThreads) fp8_skinny_kernel(Fp8SkinnyArgs args) {
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    const Fp8GemmParams& p = args.p;
    const int64_t n_begin = int64_t(blockIdx.x) * skinny::kRowsPerBlock;
    const int64_t n_end = n_begin + skinny::kRowsPerBlock < p.n ? n_begin + skinny::kRowsPerBlock : p.n;
    const int64_t k_begin = int64_t(blockIdx.y) * args.k_per_split;
    const int64_t k_end = k_begin + args.k_per_split < p.k ? k_begin + args.k_per_split : p.k;
    const int64_t kb = (p.k + 127) / 128;
    const skinny::Fp8Weight weight{p.w, p.w_scale, p.k, kb};
    for (int64_t m0 = 0; m0 < p.m; m0 += kM) {
        const int tokens = p.m - m0 < kM ? int(p.m - m0) : kM;
        const skinny::Fp8Act act{p.a, p.a_scale, p.k, kb, nullptr, m0};
        if (args.partial) {
            float* out = args.partial + int64_t(blockIdx.y) * p.m * p.n;
            skinny::tile<kM>(weight, act, tokens, n_begin, n_end, k_begin, k_end, smem,
                             [&](int m, int64_t n, float v, int) { out[(m0 + m) * p.n + n] = v; });
        } else {
            skinny::tile<kM>(weight, act, tokens, n_begin, n_end, k_begin, k_end, smem,
                             [&](int m, int64_t n, float v, int) { p.y[(m0 + m) * p.n + n] = __float2bfloat16_rn(v); });
        }
    }
}

__global__ void reduce_splits_kernel(const float* partial, int splits, int64_t count, __nv_bfloat16* y) {
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
        float sum = partial[i];
        for (int s = 1; s < splits; ++s) sum += partial[s * count + i];
        y[i] = __float2bfloat16_rn(sum);
    }
}

__global__ void repack_scales_kernel(const float* a_scale, int64_t m, int64_t kb, const float* w_scale, int64_t nb,
                                     float* a_out, float* w_out) {
    const int64_t m4 = (m + 3) / 4 * 4, kb4 = (kb + 3) / 4 * 4;
    const int64_t stride = int64_t(gridDim.x) * blockDim.x;
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < kb * m4; i += stride) {
        const int64_t b = i / m4, row = i % m4;
        a_out[i] = row < m ? a_scale[row * kb + b] : 0.0f;
    }
    for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < nb * kb4; i += stride) {
        const int64_t r = i / kb4, b = i % kb4;
        w_out[i] = b < kb ? w_scale[r * kb + b] : 0.0f;
    }
}

template <int kM>
cudaError_t launch_skinny_m(const Fp8SkinnyArgs& args, int splits, cudaStream_t stream) {
    const int64_t padded = (args.k_per_split + 511) / 512 * 512;
    const int smem = int(kM * padded * sizeof(float));
    if (cudaError_t e = skinny::allow_smem(fp8_skinny_kernel<kM>, smem); e != cudaSuccess) return e;
    const dim3 grid(unsigned((args.p.n + skinny::kRowsPerBlock - 1) / skinny::kRowsPerBlock), unsigned(splits));
    fp8_skinny_kernel<kM><<<grid, skinny::kThreads, smem, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fp8_skinny(const Fp8GemmParams& p, const Fp8GemmConfig& config, float* partial,
                              cudaStream_t stream) {
    const Fp8SkinnyArgs args{p, config.k_per_split, config.splits > 1 ? partial : nullptr};
    cudaError_t e = cudaErrorInvalidValue;
    switch (config.m_tile) {
        case 1: e = launch_skinny_m<1>(args, config.splits, stream); break;
        case 2: e = launch_skinny_m<2>(args, config.splits, stream); break;
        case 4: e = launch_skinny_m<4>(args, config.splits, stream); break;
        case 8: e = launch_skinny_m<8>(args, config.splits, stream); break;
        case 16: e = launch_skinny_m<16>(args, config.splits, stream); break;
        default: return cudaErrorInvalidValue;
    }
    if (e != cudaSuccess || config.splits == 1) return e;
    return launch_reduce_splits(partial, config.splits, p.m * p.n, p.y, stream);
}

cudaError_t launch_reduce_splits(const float* partial, int splits, int64_t count, __nv_bfloat16* y,
                                 cudaStream_t stream) {
    const int64_t blocks = (count + 255) / 256;
    reduce_splits_kernel<<<unsigned(blocks < 4096 ? blocks : 4096), 256, 0, stream>>>(partial, splits, count, y);
    return cudaGetLastError();
}

cudaError_t launch_repack_scales(const float* a_scale, int64_t m, int64_t kb, const float* w_scale, int64_t nb,
                                 float* a_out, float* w_out, cudaStream_t stream) {
    const int64_t work = kb * ((m + 3) / 4 * 4) + nb * ((kb + 3) / 4 * 4);
    const int64_t blocks = (work + 255) / 256;
    repack_scales_kernel<<<unsigned(blocks < 1024 ? blocks : 1024), 256, 0, stream>>>(a_scale, m, kb, w_scale, nb,
                                                                                    a_out, w_out);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
