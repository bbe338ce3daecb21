// The arithmetic of one RoPE rotation (rope.h), shared by apply_rope and the kernels that fuse a rotation into their
// output (sparse attention's inverse RoPE), so that every rotation of the model gives the same bits.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "kernels/cuda/common/numeric.cuh"

namespace dsv4::cuda {

// cos and sin of pair i at `position`: angle = f32(position) * inv_freq[i] in f32, cos and sin in double rounded to
// f32; the inverse rotation negates sin.
__device__ __forceinline__ void rope_cos_sin(int32_t position, float inv_freq, bool inverse, float& c, float& s) {
    const float angle = __fmul_rn(__int2float_rn(position), inv_freq);
    double sd, cd;
    sincos(double(angle), &sd, &cd);
    c = float(cd);
    s = inverse ? -float(sd) : float(sd);
}

// The pair (a, b) rotated by (c, s), each result rounded to bf16.
__device__ __forceinline__ __nv_bfloat162 rope_rotate(__nv_bfloat162 pair, float c, float s) {
    const float a = bf16_to_f32(pair.x), b = bf16_to_f32(pair.y);
    __nv_bfloat162 out;
    out.x = f32_to_bf16(__fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s)));
    out.y = f32_to_bf16(__fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c)));
    return out;
}

}  // namespace dsv4::cuda
