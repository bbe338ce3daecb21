// Warp-level tensor-core helpers shared by the attention, indexer, routed-expert and FP8 linear kernels (sm_80+
// mma.sync; Hopper runs them too): one m16n8k16 bf16 x bf16 -> f32 MMA in place (and its f16 twin), a 32-bit load of
// two adjacent bf16 values, and the fragments of four 8 x 8 matrices by ldmatrix.
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

namespace dsv4::cuda {

// c += a (16x16 bf16, row-major fragment) * b (16x8 bf16, column-major fragment), f32 accumulators.
__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The same for f16 operands (the routed experts' e2m1 weights and e4m3 activations, the FP8 linears' warp tiles: both
// exact in f16). Not volatile, so the compiler may schedule it with the loads around it.
__device__ __forceinline__ void mma_16816_f16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two adjacent bf16 values as one 32-bit register (p must be 4-byte aligned).
__device__ __forceinline__ uint32_t ld32(const __nv_bfloat16* p) {
    return *reinterpret_cast<const uint32_t*>(p);
}

// Four 8 x 8 bf16 matrices from shared memory in one instruction: lane l passes the address of row l % 8 of matrix
// l / 8 (16 bytes, 16-byte aligned); r[i] gets matrix i's fragment (thread t: row t / 4, columns 2 (t % 4), + 1), which
// is the layout of mma_16816's a[i] (matrices: rows 0-7 | 8-15 x columns 0-7 | 8-15) and of its b0, b1.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const __nv_bfloat16* row) {
    const uint32_t addr = uint32_t(__cvta_generic_to_shared(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
}

}  // namespace dsv4::cuda
