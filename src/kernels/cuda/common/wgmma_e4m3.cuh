// Hopper warpgroup MMA with e4m3 operands and f32 accumulators (sm_90a): d (m64 x kN) = a x b + (accumulate ? d : 0)
// over 32 k. A (64 rows x 32 k) from registers in mma.sync m16n8k32's 8-bit A layout (warp w of the warpgroup holds
// rows 16w..16w+15; lane (g, t) a[0] = row g, k 4t..4t+3, a[1] = row g + 8, the same k, a[2] and a[3] the same rows
// at k 16 + 4t..), B (32 k x kN) from shared memory, K-major (the only layout FP8 wgmma takes), 8-row x 16-byte core
// matrices without swizzle (wgmma.cuh's wgmma_desc). d in wgmma.cuh's layout: n8 tile j holds rows g, g + 8 x columns
// 8j + 2t, 8j + 2t + 1 as d[4j..4j+3]. The FP8 MMA sums the 32 products in its own narrower accumulation (about 13
// fraction bits after aligning them to the largest: bench/wgmma_bits_probe.cu), not as mma.sync's f16 path does.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/wgmma.cuh"

namespace dsv4::cuda {

template <int kN>
__device__ __forceinline__ void wgmma_m64k32_e4m3(float (&d)[kN / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                                  bool accumulate) {
    static_assert(kN == 8 || kN == 16 || kN == 32 || kN == 64, "the pass widths of moe_wgmma_fp8.cu");
#if DSV4_WGMMA
    if constexpr (kN == 8) {
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %9, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 {%0, %1, %2, %3}, {%4, %5, %6, %7}, %8, p, 1, 1;\n}"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else if constexpr (kN == 16) {
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %13, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n16k32.f32.e4m3.e4m3 {%0, %1, %2, %3, %4, %5, %6, %7}, "
            "{%8, %9, %10, %11}, %12, p, 1, 1;\n}"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else if constexpr (kN == 32) {
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %21, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n32k32.f32.e4m3.e4m3 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
            "{%16, %17, %18, %19}, %20, p, 1, 1;\n}"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    } else {
        asm volatile(
            "{\n .reg .pred p;\n setp.ne.b32 p, %37, 0;\n"
            "wgmma.mma_async.sync.aligned.m64n64k32.f32.e4m3.e4m3 "
            "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
            "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
            "{%32, %33, %34, %35}, %36, p, 1, 1;\n}"
            : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
              "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
              "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
              "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
            : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b_desc), "r"(int(accumulate)));
    }
#else
    __trap();
#endif
}

}  // namespace dsv4::cuda
