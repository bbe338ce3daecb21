// The per-head q norm of model numerics (Precision::head_rms_norm), device side: the factor r of one head that a
// warp holds. Shared by head_rms_norm (rms_norm.cu) and the kernels that fuse the norm with what follows it
// (attention_inputs), so every q norm of the model gives the same bits.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/numeric.cuh"

namespace dsv4::cuda {

// Lane l holds the head's elements l + 32 j in held[j] (bf16 values as f32, 0 past head_dim). The bf16 squares are
// staged in sq [head_dim] (the warp's own shared memory) and lane 0 sums them in index order, the CPU's order, every
// step rounded to bf16 as the CPU rounds it; every lane returns r, and the head's elements are bf16(x * r). Lane 0
// reads 16 squares per step into registers, so shared-memory latency is paid once per step, not per add. All 32
// lanes must call it; it ends with the warp synchronized (what a lane wrote to shared memory before the call is
// visible to the others after it).
template <int kPer>
__device__ __forceinline__ float head_rms_norm_factor(const float (&held)[kPer], float* sq, int64_t head_dim, float eps,
                                                      int lane) {
#pragma unroll
    for (int j = 0; j < kPer; ++j)
        if (lane + 32 * j < head_dim) sq[lane + 32 * j] = round_bf16(__fmul_rn(held[j], held[j]));
    __syncwarp();
    float r = 0.0f;
    if (lane == 0) {
        float sum = 0.0f;
        const int n = int(head_dim), whole = head_dim % 4 == 0 ? n / 16 * 16 : 0;
        for (int i = 0; i < whole; i += 16) {
            float4 v[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) v[j] = *reinterpret_cast<const float4*>(sq + i + 4 * j);
#pragma unroll
            for (int j = 0; j < 4; ++j)
                sum = __fadd_rn(__fadd_rn(__fadd_rn(__fadd_rn(sum, v[j].x), v[j].y), v[j].z), v[j].w);
        }
        for (int i = whole; i < n; ++i) sum = __fadd_rn(sum, sq[i]);
        const float mean = round_bf16(__fdiv_rn(sum, float(head_dim)));
        r = round_bf16(__fdiv_rn(1.0f, __fsqrt_rn(round_bf16(__fadd_rn(mean, eps)))));
    }
    return __shfl_sync(0xFFFFFFFFu, r, 0);
}

}  // namespace dsv4::cuda
