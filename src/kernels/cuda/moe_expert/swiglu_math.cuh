// One element of the experts' SwiGLU as src/model/moe.cpp computes it in f32: up clamped to [-limit, limit] and gate
// to at most limit (limit > 0), silu(gate) * up, times the slot's routing weight (routed experts), rounded to bf16.
// Shared by swiglu_kernel (moe_expert.cu) and the routed experts' w2 that computes its own input (moe_mma.cu), so the
// two give the same bits.
#pragma once

#include <cuda_bf16.h>

#include "kernels/cuda/common/numeric.cuh"

namespace dsv4::cuda {

__device__ __forceinline__ __nv_bfloat16 swiglu_element(__nv_bfloat16 gate, __nv_bfloat16 up, float limit,
                                                        bool weighted, float weight) {
    float g = bf16_to_f32(gate), u = bf16_to_f32(up);
    if (limit > 0) {
        u = fminf(fmaxf(u, -limit), limit);
        g = fminf(g, limit);
    }
    float h = (g / (1.0f + expf(-g))) * u;
    if (weighted) h *= weight;
    return f32_to_bf16(h);
}

}  // namespace dsv4::cuda
