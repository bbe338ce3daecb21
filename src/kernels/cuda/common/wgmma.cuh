// Hopper warpgroup MMA (sm_90a wgmma) with f16 operands and f32 accumulators: A (64 rows x 16 k) from registers in
// mma.sync's m16n8k16 A-fragment layout (warp w of the warpgroup holds rows 16w..16w+15), B (16 k x N) from shared
// memory, K-major, in 8-row x 16-byte core matrices without swizzle. Its bits equal mma.sync m16n8k16's for the same
// operands and accumulator (docs/perf.md, "wgmma against mma.sync, bit for bit"). Compiled only for sm_90a: other
// targets get a trap, and the host launches these kernels only where device_has_wgmma() says so.
#pragma once

#include <cstdint>

namespace dsv4::cuda {

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DSV4_WGMMA 1
#else
#define DSV4_WGMMA 0
#endif

// Descriptor of a K-major B tile at shared-window address `addr` (16-byte aligned): core matrices adjacent along K
// `k_stride` bytes apart, along N `n_stride` bytes apart (the leading and stride byte offsets of the descriptor).
__device__ __forceinline__ uint64_t wgmma_desc(uint32_t addr, uint32_t k_stride, uint32_t n_stride) {
    return uint64_t((addr >> 4) & 0x3FFF) | uint64_t((k_stride >> 4) & 0x3FFF) << 16 |
           uint64_t((n_stride >> 4) & 0x3FFF) << 32;
}

// Orders this thread's earlier register writes (A fragments, accumulators) before the next wgmma reads them.
__device__ __forceinline__ void wgmma_fence() {
#if DSV4_WGMMA
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}
// Closes the wgmmas issued since the last commit into a group.
__device__ __forceinline__ void wgmma_commit() {
#if DSV4_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}
// Waits until at most kPending committed groups are in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
#if DSV4_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
#endif
}
// Pins the accumulator registers in program order around the asynchronous MMAs: the compiler sees them read and
// written here, so it neither reads them before the wait that completes their wgmma nor writes them while one runs.
template <int N>
__device__ __forceinline__ void wgmma_fence_operand(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}
// Makes this thread's generic-proxy shared-memory writes visible to the async proxy (wgmma's operand reads); a CTA
// barrier after it publishes them to the other warps' wgmmas.
__device__ __forceinline__ void fence_proxy_async_shared() {
#if DSV4_WGMMA
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

// d (m64n64, 32 floats per thread: n8 tile j holds rows g, g + 8 x columns 8j + 2t, 8j + 2t + 1 as d[4j..4j+3], the
// mma.sync C layout) = a x b + (accumulate ? d : 0).
__device__ __forceinline__ void wgmma_m64n64k16_f16(float (&d)[32], const uint32_t (&a)[4], uint64_t b_desc,
                                                    bool accumulate) {
#if DSV4_WGMMA
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
#else
    __trap();
#endif
}

// d (m64n8, 4 floats per thread in the layout of wgmma_m64n64k16_f16's first n8 tile) = a x b +
// (accumulate ? d : 0): the 8-token passes of moe_wgmma.cu.
__device__ __forceinline__ void wgmma_m64n8k16_f16(float (&d)[4], const uint32_t (&a)[4], uint64_t b_desc,
                                                   bool accumulate) {
#if DSV4_WGMMA
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 "
        "{%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, %8, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
#else
    __trap();
#endif
}

// d (m64n16, 8 floats per thread in the layout of wgmma_m64n64k16_f16's first 2 n8 tiles) = a x b +
// (accumulate ? d : 0): the narrow passes of moe_wgmma.cu.
__device__ __forceinline__ void wgmma_m64n16k16_f16(float (&d)[8], const uint32_t (&a)[4], uint64_t b_desc,
                                                    bool accumulate) {
#if DSV4_WGMMA
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7}, "
        "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
#else
    __trap();
#endif
}

// d (m64n32, 16 floats per thread in the layout of wgmma_m64n64k16_f16's first 4 n8 tiles) = a x b +
// (accumulate ? d : 0): the narrow passes of moe_wgmma.cu.
__device__ __forceinline__ void wgmma_m64n32k16_f16(float (&d)[16], const uint32_t (&a)[4], uint64_t b_desc,
                                                    bool accumulate) {
#if DSV4_WGMMA
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
        "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]),
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
#else
    __trap();
#endif
}

// d (m64n128, 64 floats per thread: n8 tile j holds rows g, g + 8 x columns 8j + 2t, 8j + 2t + 1 as d[4j..4j+3]) =
// a x b + (accumulate ? d : 0), the operands f16 or bf16 (TYPE: "f16", "bf16"): one asm body for both wrappers.
#define DSV4_WGMMA_M64N128K16(TYPE)                                                                                   \
    asm volatile(                                                                                                     \
        "{\n .reg .pred p;\n setp.ne.b32 p, %69, 0;\n"                                                                \
        "wgmma.mma_async.sync.aligned.m64n128k16.f32." TYPE "." TYPE                                                  \
        " {%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, " \
        "%23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, "   \
        "%44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "       \
        "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n}"                                                                   \
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), \
          "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]),      \
          "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]),     \
          "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]),     \
          "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]),     \
          "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]),     \
          "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]),     \
          "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])                   \
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)))

__device__ __forceinline__ void wgmma_m64n128k16_f16(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc,
                                                     bool accumulate) {
#if DSV4_WGMMA
    DSV4_WGMMA_M64N128K16("f16");
#else
    __trap();
#endif
}

// wgmma_m64n128k16_f16 with bf16 operands (wo_a's tile).
__device__ __forceinline__ void wgmma_m64n128k16_bf16(float (&d)[64], const uint32_t (&a)[4], uint64_t b_desc,
                                                      bool accumulate) {
#if DSV4_WGMMA
    DSV4_WGMMA_M64N128K16("bf16");
#else
    __trap();
#endif
}
#undef DSV4_WGMMA_M64N128K16

}  // namespace dsv4::cuda
