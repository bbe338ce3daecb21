// 16-byte global loads and their 32-bit words, shared by the matrix-product kernels (gemm_fp8's skinny and mma
// paths, bf16_act_mma): a streaming load that does not allocate in L1 (weights read once), and a predicated load
// that yields zeros for a chunk past the end. Tested through those kernels' tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

__device__ __forceinline__ uint4 load_streaming(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// The 16 bytes at `p` (16-byte aligned), or zeros when !valid; kStream: streaming, else through the read-only cache
// (operands several warps of a CTA read).
template <bool kStream>
__device__ __forceinline__ uint4 load16(const void* p, bool valid) {
    if (!valid) return make_uint4(0u, 0u, 0u, 0u);
    if constexpr (kStream) return load_streaming(p);
    return __ldg(reinterpret_cast<const uint4*>(p));
}

// 32-bit word q of a chunk (q a compile-time constant after unrolling).
__device__ __forceinline__ uint32_t word(const uint4& v, int q) {
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

}  // namespace dsv4::cuda
