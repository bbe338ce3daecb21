// The fragments of gemm_fp8's tensor-core path (Fp8GemmPath::kMma), shared by its two kernels: the 64 x 128 tiles
// (mma_gemm.cu) and the persistent decode tiles (mma_decode_gemm.cu). The arithmetic and the fragment layout they
// implement are written out at the top of mma_gemm.cu; both kernels call block_mma for every K block, so an output's
// bits do not depend on which kernel or tile computed it.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/vector_loads.cuh"

namespace dsv4::cuda::fp8_mma {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockK = 128;

struct MmaArgs {
    const uint8_t* a;      // [m, k] e4m3
    const float* a_scale;  // [m, kb] f32
    const uint8_t* w;      // [n, k] e4m3
    const float* w_scale;  // [ceil(n/128), kb] f32
    __nv_bfloat16* y;      // [m, n] bf16
    int64_t m, n, k;
    int kb;            // K blocks: ceil(k / 128)
    int rows_alloc;    // decode tiles: rows of staged block products per item (min(m, 16))
    bool pair_stores;  // n even and y 4-byte aligned: bf16 pairs stored as one word
};

// Bytes [16t, 16t+16) and [64+16t, 64+16t+16) of one row's 128-column block (lane t of its quad).
struct RowChunks {
    uint4 lo, hi;
};

// `p` = the row's first byte + kb * 128 + 16 t; lo_ok / hi_ok: the two chunks lie before K.
template <bool kStream>
__device__ __forceinline__ RowChunks load_row(const uint8_t* p, bool lo_ok, bool hi_ok) {
    return {load16<kStream>(p, lo_ok), load16<kStream>(p + 64, hi_ok)};
}

__device__ __forceinline__ uint32_t word(const RowChunks& c, int j) {
    const uint4& v = j < 4 ? c.lo : c.hi;
    const int q = j % 4;
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// One K block's operands for a warp tile of MT x 16 rows and NT x 8 columns.
template <int MT, int NT>
struct Stage {
    RowChunks a[MT][2];  // rows g and g+8 of each 16-row tile
    RowChunks w[NT];     // row g of each 8-column tile
    float a_scale[MT][2];
    float w_scale;
};

// acc[mt][nt] = the block's products summed on the tensor cores, from zero, steps j = 0..7 in order. kHalf: the
// tile's rows 8-15 are padding (at most 8 rows in it), so rows g + 8 reuse row g's fragments and a[mt][1] is never
// read; the rows that are stored get the same operands either way.
template <int MT, int NT, bool kHalf = false>
__device__ __forceinline__ void block_mma(const Stage<MT, NT>& s, float (&acc)[MT][NT][4]) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            f16x2_pairs(word(s.a[mt][0], j), af[mt][0], af[mt][2]);
            if constexpr (kHalf) {
                af[mt][1] = af[mt][0];
                af[mt][3] = af[mt][2];
            } else {
                f16x2_pairs(word(s.a[mt][1], j), af[mt][1], af[mt][3]);
            }
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            uint32_t b0, b1;
            f16x2_pairs(word(s.w[nt], j), b0, b1);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_f16(acc[mt][nt], af[mt], b0, b1);
        }
    }
}

// The decode tiles (mma_decode_gemm.cu): 16 rows x block_n (8 or 16) columns per item, k_warps (1, 2, 4, 8) warps
// per item, persistent.
cudaError_t launch_fp8_mma_decode(const MmaArgs& args, int block_n, int k_warps, cudaStream_t stream);

}  // namespace dsv4::cuda::fp8_mma
