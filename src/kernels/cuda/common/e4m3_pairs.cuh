// e4m3 bytes as 16-bit floating-point pairs for mma.sync fragments, exactly: f16 pairs (one hardware conversion per
// pair) and bf16 pairs (for products with bf16 activations). Used by gemm_fp8's and grouped_linear's tensor-core
// kernels; tested through their tests against the CPU.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dsv4::cuda {

// The four e4m3 bytes of `w` as two f16 pairs (exact): lo = bytes 0, 1 (byte 0 in the low half), hi = bytes 2, 3.
__device__ __forceinline__ void f16x2_pairs(uint32_t w, uint32_t& lo, uint32_t& hi) {
    asm("{\n .reg .b16 l, h;\n mov.b32 {l, h}, %2;\n cvt.rn.f16x2.e4m3x2 %0, l;\n cvt.rn.f16x2.e4m3x2 %1, h;\n}"
        : "=r"(lo), "=r"(hi)
        : "r"(w));
}

// An f16 pair that came from e4m3 (so every mantissa bit below the top three is zero, and no value is an f16
// subnormal) as a bf16 pair, exactly. There is no e4m3 -> bf16 conversion instruction: moving the f16 exponent and
// mantissa fields down three bits puts them in bf16's places, which is the value times 2^-112 (bf16's exponent bias
// is 127, f16's 15); the sign stays where it is, and one bf16 multiply by 2^112 restores the value (a power of two,
// so exact: the largest e4m3, 448, stays far below bf16's range, the smallest, 2^-9, is a bf16 normal at every
// step). The shift carries the other half's low mantissa bits (zero) into bits 13-15, and the sign of the low
// half into bit 12: hence the mask.
__device__ __forceinline__ uint32_t bf16x2_from_e4m3_f16x2(uint32_t h) {
    const uint32_t moved = ((h & 0x7FFF7FFFu) >> 3) | (h & 0x80008000u);
    __nv_bfloat162 v = *reinterpret_cast<const __nv_bfloat162*>(&moved);
    v = __hmul2(v, __nv_bfloat162(__float2bfloat16_rn(0x1p112f), __float2bfloat16_rn(0x1p112f)));
    return *reinterpret_cast<const uint32_t*>(&v);
}

// The four e4m3 bytes of `w` as two bf16 pairs (exact), paired as in f16x2_pairs.
__device__ __forceinline__ void bf16x2_pairs(uint32_t w, uint32_t& lo, uint32_t& hi) {
    uint32_t flo, fhi;
    f16x2_pairs(w, flo, fhi);
    lo = bf16x2_from_e4m3_f16x2(flo);
    hi = bf16x2_from_e4m3_f16x2(fhi);
}

}  // namespace dsv4::cuda
