// moe_gemm kernels: per expert, per pass of kM slots, the skinny tile over every K range with the per-lane results
// accumulated in registers (see moe_gemm.h).
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"

#include "kernels/cuda/gemm_fp8/skinny_operands.cuh"

namespace dsv4::cuda {
namespace {

template <int kM, class Weight>
__device__ void expert_rows(const MoeGemmParams& p, const Weight& weight, int64_t e, int64_t k_span, float* smem) {
    const int64_t n_begin = int64_t(blockIdx.x) * skinny::kRowsPerBlock;
    const int64_t n_end = n_begin + skinny::kRowsPerBlock < p.n ? n_begin + skinny::kRowsPerBlock : p.n;
    const int64_t begin = p.expert_offsets[e], end = p.expert_offsets[e + 1];
    const int64_t kb = (p.k + 127) / 128;
    for (int64_t s0 = begin; s0 < end; s0 += kM) {
        const int tokens = end - s0 < kM ? int(end - s0) : kM;
        const skinny::Fp8Act act{p.a, p.a_scale, p.k, kb, p.row_index, s0};
        float own[2] = {0.f, 0.f};
        int64_t own_n[2] = {-1, -1};
        int own_m[2] = {0, 0};
        for (int64_t k0 = 0; k0 < p.k; k0 += k_span) {
            const int64_t k1 = k0 + k_span < p.k ? k0 + k_span : p.k;
            skinny::tile<kM>(weight, act, tokens, n_begin, n_end, k0, k1, smem, [&](int m, int64_t n, float v, int slot) {
                own[slot] += v;
                own_n[slot] = n;
                own_m[slot] = m;
            });
        }
#pragma unroll
        for (int slot = 0; slot < 2; ++slot)
            if (own_n[slot] >= 0) p.y[(s0 + own_m[slot]) * p.n + own_n[slot]] = __float2bfloat16_rn(own[slot]);
    }
}

// grid: (ceil(n / kRowsPerBlock), expert_blocks).
template <int kM>
__global__ void __launch_bounds__(skinny::kThreads) moe_gemm_kernel(MoeGemmParams p, int64_t k_span) {
    extern __shared__ float4 smem_raw[];
    float* smem = reinterpret_cast<float*>(smem_raw);
    for (int64_t e = blockIdx.y; e < p.experts; e += gridDim.y) {
        if (p.expert_offsets[e + 1] <= p.expert_offsets[e]) continue;  // uniform across the block
        if (p.format == ExpertFormat::kMxfp4) {
            const skinny::Mxfp4Weight weight{p.w + e * p.n * (p.k / 2), p.w_scale + e * p.n * (p.k / 32), p.k};
            expert_rows<kM>(p, weight, e, k_span, smem);
        } else {
            const skinny::Nvfp4Weight weight{p.w + e * p.n * (p.k / 2), p.w_scale + e * p.n * (p.k / 16),
                                             p.w_global[e], p.k};
            expert_rows<kM>(p, weight, e, k_span, smem);
        }
    }
}

template <int kM>
cudaError_t launch_m(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    const int smem = int(kM * c.k_span * sizeof(float));
    if (cudaError_t e = skinny::allow_smem(moe_gemm_kernel<kM>, smem); e != cudaSuccess) return e;
    const dim3 grid(unsigned((p.n + skinny::kRowsPerBlock - 1) / skinny::kRowsPerBlock), unsigned(c.expert_blocks));
    moe_gemm_kernel<kM><<<grid, skinny::kThreads, smem, stream>>>(p, c.k_span);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_moe_gemm(const MoeGemmParams& p, const MoeGemmConfig& c, cudaStream_t stream) {
    switch (c.m_tile) {
        case 1: return launch_m<1>(p, c, stream);
        case 2: return launch_m<2>(p, c, stream);
        case 4: return launch_m<4>(p, c, stream);
        case 8: return launch_m<8>(p, c, stream);
        case 16: return launch_m<16>(p, c, stream);
        default: return cudaErrorInvalidValue;
    }
}

}  // namespace dsv4::cuda
