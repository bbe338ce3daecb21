// Tensor-core product of bf16 activations with FP8 (e4m3, f32 scale per 128x128) or bf16 weights, for every row
// count and batch-invariant by construction: y[m, n] = sum_k x[m, x_col(n) + k] W[n, k], where the columns n come
// in groups of `group_n` that each read their own K-wide slice of x (x_col(n) = (n / group_n) * k; one group: a
// plain product). Instantiated by grouped_linear (wo_a: e4m3, bf16 out) and bf16_linear (the head: bf16, f32 out);
// the tiles are chosen by bf16_act_mma_tiles.h. Tested through those ops' tests against the CPU.
//
// Arithmetic of one output y[m, n] (the same instructions whatever the tile, M or the other rows, as gemm_fp8's
// mma_gemm.cu):
//   for kb = 0, 1, ..., ceil(k/128) - 1 (ascending):
//     acc = 0; eight m16n8k16 bf16 MMAs over the block's 128 columns in a fixed order (below), f32 accumulate
//     p   = acc * w_scale[n/128, kb]      (e4m3 weights: one f32 rounding; bf16 weights: p = acc)
//     sum = sum + p                       (sum starts at +0)
//   y = sum (f32 out) or bf16_rn(sum)
// The products are exact: x is bf16 as stored, W's values are bf16 or e4m3 converted to bf16 exactly
// (common/e4m3_pairs.cuh), and a product of two 8-bit significands fits f32's. mma.sync computes each output from
// its own row of x and its own weight row, so a row's bits do not depend on the rows beside it. 16-row tiles share
// a CTA's K blocks out over its warps and stage p per block in shared memory; the sum then runs over the staged
// values in ascending kb: the same chain as the 64-row tiles' registers.
//
// K order inside a 128-column block (fragment layout of mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32: lane = 4 g + t;
// A a0/a2 = row g, k 2t..2t+1 / 2t+8..2t+9, a1/a3 the same for row g+8; B b0/b1 = k 2t..2t+1 / 2t+8..2t+9 of column
// g): the block is read in two halves of 64 columns; in half h lane t holds columns c0 = 64 h + 16 t .. c0 + 15 of
// each of its x rows and weight rows (16-byte loads). MMA step j = 0..3 of half h takes columns c0 + 4j, c0 + 4j + 1
// as MMA k 2t, 2t+1 and c0 + 4j + 2, c0 + 4j + 3 as k 2t+8, 2t+9, in both operands; steps run h = 0, j = 0..3, then
// h = 1, j = 0..3, and each of the 128 columns is used once. Columns at or past k (a partial last block) load as
// zeros in both operands; rows past M or N repeat the last row and are not stored. Pipelining by half blocks keeps
// two halves' operands in registers (the 64 x 128 tile's x rows would not fit twice whole).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/bf16_act_mma/bf16_act_mma_tiles.h"
#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/common/vector_loads.cuh"

namespace dsv4::cuda::bf16_act_mma {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockK = 128;

struct Args {
    const __nv_bfloat16* x;  // [m, ldx]
    int64_t ldx;
    const void* w;         // [n, k] e4m3 or bf16
    const float* w_scale;  // e4m3: [ceil(n / 128), kb] f32
    void* y;               // [m, ldy] f32 or bf16
    int64_t ldy;
    int64_t m, n, k, group_n;
    int kb;          // K blocks: ceil(k / 128)
    int rows_alloc;  // 16-row tiles: rows of staged block products per CTA (min(m, 16))
    // 16-row tiles only: the K blocks of a tile shared out over `splits` CTAs (grid z; 0 or 1: one CTA), for
    // products too small to fill the device otherwise (the router). Each stages its blocks' products in
    // split_staged (split_staged_floats(...) floats: [tile][kb][rows_alloc][BN] f32, global), and the tile's last
    // CTA to arrive (split_arrivals[tile]: zero before the launch, left zero) sums them in ascending kb, the
    // same chain as one CTA's shared memory.
    int splits;
    float* split_staged;
    int32_t* split_arrivals;
    // Optional instrument (common/phase_clock.cuh; null in the model): marks 0 (start), 1 (the CTA's blocks
    // multiplied), 2 (its products staged; split: its arrival counted) and, in the CTAs that sum a tile, 3 (summed and
    // stored). A Tail may add marks 4-7 (router_and_routing.cu).
    int64_t* phase_clock;
};

// Weight formats: bytes per value, 16-byte chunks per lane and half block, and the B fragment of step j.
struct E4m3Weight {
    static constexpr int kBytes = 1, kChunks = 1;
    static constexpr bool kScaled = true;
    __device__ static void fragment(const uint4 (&w)[kChunks], int j, uint32_t& b0, uint32_t& b1) {
        bf16x2_pairs(word(w[0], j), b0, b1);
    }
};
struct Bf16Weight {
    static constexpr int kBytes = 2, kChunks = 2;
    static constexpr bool kScaled = false;
    __device__ static void fragment(const uint4 (&w)[kChunks], int j, uint32_t& b0, uint32_t& b1) {
        b0 = word(w[j / 2], 2 * (j % 2));
        b1 = word(w[j / 2], 2 * (j % 2) + 1);
    }
};

// Output types: a pair of adjacent columns (n even) or one value.
struct Bf16Out {
    __device__ static void pair(const Args& a, int64_t r, int64_t n, float lo, float hi) {
        *reinterpret_cast<__nv_bfloat162*>(static_cast<__nv_bfloat16*>(a.y) + r * a.ldy + n) =
            __halves2bfloat162(__float2bfloat16_rn(lo), __float2bfloat16_rn(hi));
    }
    __device__ static void one(const Args& a, int64_t r, int64_t n, float v) {
        static_cast<__nv_bfloat16*>(a.y)[r * a.ldy + n] = __float2bfloat16_rn(v);
    }
};
struct F32Out {
    __device__ static void pair(const Args& a, int64_t r, int64_t n, float lo, float hi) {
        *reinterpret_cast<float2*>(static_cast<float*>(a.y) + r * a.ldy + n) = make_float2(lo, hi);
    }
    __device__ static void one(const Args& a, int64_t r, int64_t n, float v) {
        static_cast<float*>(a.y)[r * a.ldy + n] = v;
    }
};

// What a launch does once its outputs are written. NoTail: nothing. Another Tail has Params (a kernel argument) and
// `after(params)`, which every thread of every CTA calls at the end (so it may count arrivals and let the last CTA
// read every CTA's outputs: router_and_routing.cu).
struct NoTail {
    struct Params {};
    __device__ static void after(const Params&) {}
};

// One half block's operands for a warp tile of MT x 16 rows and NT x 8 columns.
template <class W, int MT, int NT>
struct Half {
    uint4 x[MT][2][2];        // [row tile][rows g, g+8][columns c0..c0+7, c0+8..c0+15] bf16
    uint4 w[NT][W::kChunks];  // columns c0..c0+15 of row g of each 8-column tile
};

// grid (ceil(m / BM), ceil(n / BN), splits); warps: WM x WN tiles of MT x 16 rows and NT x 8 columns, times WK
// warps that share out the K blocks (kb = z WK + wk, then every WK splits). WK > 1 stages each block's products in
// shared memory (or, split, global memory), [kb][rows_alloc][BN] f32, and sums them in ascending kb after a barrier
// (split: in the tile's last CTA); WK == 1 sums in registers. kTopHalf (16-row tiles of launches of at most 8 rows,
// e.g. a batch-1 step): rows 8-15 of the tile are padding, so their x is not loaded and their A fragments are
// zeros; rows 0-7 get the same products (each output row of mma.sync reads its own A row only).
template <class W, class Y, class Tail, int MT, int NT, int WM, int WN, int WK, bool kTopHalf = false>
__global__ void __launch_bounds__(kThreads, WK > 1 ? 2 : 1) kernel(Args args, typename Tail::Params tail) {
    static_assert(WM * WN * WK == kWarps, "8 warps per CTA");
    static_assert(WK == 1 || (MT == 1 && WM == 1), "K blocks are shared out only in 16-row tiles");
    static_assert(!kTopHalf || (MT == 1 && WM == 1), "the top half of one 16-row tile");
    constexpr int kHalves = kTopHalf ? 1 : 2;  // live 8-row halves of a 16-row tile
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    static_assert(kBlockK % kBN == 0, "a CTA's columns share one weight-scale row");
    extern __shared__ float staged[];
    phase_mark(args.phase_clock, 0);

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wk = warp % WK, wn = (warp / WK) % WN, wm = warp / (WK * WN);
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    const int64_t m_warp = m_cta + wm * MT * 16, n_warp = n_cta + wn * NT * 8;
    const int rows_valid = int(args.m - m_cta < kBM ? args.m - m_cta : kBM);
    const int splits = int(gridDim.z), split = int(blockIdx.z);
    const int64_t tile = int64_t(blockIdx.x) * gridDim.y + blockIdx.y;
    float* const stage = splits > 1 ? args.split_staged + tile * int64_t(args.kb) * args.rows_alloc * kBN : staged;
    // The CTA's columns lie in one group (group_n % BN == 0): its slice of x starts at group * k.
    const int64_t x_col0 = (n_cta / args.group_n) * args.k;

    // Rows past M (N) read row M - 1 (N - 1): their results are never stored, and every load stays in bounds.
    const __nv_bfloat16* x_row[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int64_t r = m_warp + mt * 16 + h * 8 + g;
            r = r < args.m ? r : args.m - 1;
            x_row[mt][h] = args.x + r * args.ldx + x_col0 + 16 * t;
        }
    const uint8_t* w_row[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        int64_t n = n_warp + nt * 8 + g;
        n = n < args.n ? n : args.n - 1;
        w_row[nt] = static_cast<const uint8_t*>(args.w) + (n * args.k + 16 * t) * W::kBytes;
    }
    const float* w_scale_row = W::kScaled ? args.w_scale + (n_cta / kBlockK) * args.kb : nullptr;

    // Half `i` of this warp's blocks: block split * WK + wk + (i / 2) * WK * splits, columns 64 (i % 2) .. + 63.
    const int first_block = split * WK + wk;
    auto block_of = [&](int i) { return first_block + (i / 2) * WK * splits; };
    auto load = [&](Half<W, MT, NT>& s, int i) {
        const int64_t c0 = int64_t(block_of(i)) * kBlockK + 64 * (i % 2);
        const bool ok = c0 + 16 * t < args.k;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < kHalves; ++h) {
                s.x[mt][h][0] = load16<false>(x_row[mt][h] + c0, ok);
                s.x[mt][h][1] = load16<false>(x_row[mt][h] + c0 + 8, ok);
            }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int q = 0; q < W::kChunks; ++q) {
                const uint8_t* p = w_row[nt] + c0 * W::kBytes + 16 * q;
                s.w[nt][q] = load16<WM == 1>(p, ok);
            }
    };

    float acc[MT][NT][4], sum[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sum[mt][nt][e] = 0.0f;

    auto compute = [&](const Half<W, MT, NT>& s, int i) {
        if (i % 2 == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 4; ++e) acc[mt][nt][e] = 0.0f;
        }
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            uint32_t af[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                af[mt][0] = word(s.x[mt][0][j / 2], 2 * (j % 2));
                af[mt][2] = word(s.x[mt][0][j / 2], 2 * (j % 2) + 1);
                if constexpr (kTopHalf) {
                    af[mt][1] = af[mt][3] = 0u;
                } else {
                    af[mt][1] = word(s.x[mt][1][j / 2], 2 * (j % 2));
                    af[mt][3] = word(s.x[mt][1][j / 2], 2 * (j % 2) + 1);
                }
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                uint32_t b0, b1;
                W::fragment(s.w[nt], j, b0, b1);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma_16816(acc[mt][nt], af[mt], b0, b1);
            }
        }
        if (i % 2 == 0) return;
        const int kb = block_of(i);
        const float scale = W::kScaled ? __ldg(w_scale_row + kb) : 1.0f;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float p = W::kScaled ? __fmul_rn(acc[mt][nt][e], scale) : acc[mt][nt][e];
                    if constexpr (WK == 1) {
                        sum[mt][nt][e] = __fadd_rn(sum[mt][nt][e], p);
                    } else {
                        const int row = (e / 2) * 8 + g;  // MT == 1, WM == 1: the CTA's row
                        const int col = wn * NT * 8 + nt * 8 + 2 * t + e % 2;
                        if (row < rows_valid) stage[(int64_t(kb) * args.rows_alloc + row) * kBN + col] = p;
                    }
                }
    };

    // Two register stages: the next half's loads in flight while the current one is multiplied.
    const int count = first_block < args.kb ? 2 * ((args.kb - first_block + WK * splits - 1) / (WK * splits)) : 0;
    Half<W, MT, NT> s0, s1;
    if (count > 0) load(s0, 0);
    for (int i = 0; i < count; i += 2) {
        load(s1, i + 1);  // count is even
        compute(s0, i);
        if (i + 2 < count) load(s0, i + 2);
        compute(s1, i + 1);
    }
    phase_mark(args.phase_clock, 1);

    if constexpr (WK == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t r = m_warp + mt * 16 + h * 8 + g;
                if (r >= args.m) continue;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int64_t n = n_warp + nt * 8 + 2 * t;  // n + 1 < args.n too: n % 8 == 0
                    if (n < args.n) Y::pair(args, r, n, sum[mt][nt][2 * h], sum[mt][nt][2 * h + 1]);
                }
            }
    } else {
        __shared__ bool sums_here;        // split: this CTA is the tile's last to arrive
        if (splits > 1) __threadfence();  // this thread's staged products visible device-wide before the arrival
        __syncthreads();
        if (splits > 1) {
            if (threadIdx.x == 0) sums_here = atomicAdd(args.split_arrivals + tile, 1) == splits - 1;
            __syncthreads();
            if (sums_here) __threadfence();  // every CTA of the tile arrived: its products are read after this
            if (sums_here && threadIdx.x == 0) args.split_arrivals[tile] = 0;  // for the next launch
        }
        phase_mark(args.phase_clock, 2);
        if (splits == 1 || sums_here) {
            for (int i = threadIdx.x; i < rows_valid * kBN; i += kThreads) {
                const int row = i / kBN, col = i % kBN;
                if (n_cta + col >= args.n) continue;
                float total = 0.0f;
                const float* p = stage + row * kBN + col;
                // Split: other CTAs' products in global memory, read past this SM's L1 (__ldcg: global only);
                // else this CTA's shared memory.
                auto staged_product = [&](int kb) {
                    const float* q = p + int64_t(kb) * args.rows_alloc * kBN;
                    return splits > 1 ? __ldcg(q) : *q;
                };
#pragma unroll 8
                for (int kb = 0; kb < args.kb; ++kb) total = __fadd_rn(total, staged_product(kb));
                Y::one(args, m_cta + row, n_cta + col, total);
            }
            phase_mark(args.phase_clock, 3);
        }
    }
    Tail::after(tail);
}

template <class W, class Y, class Tail, int MT, int NT, int WM, int WN, int WK, bool kTopHalf = false>
cudaError_t launch_tile(const Args& args, size_t smem, cudaStream_t stream, const typename Tail::Params& tail) {
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    auto k = kernel<W, Y, Tail, MT, NT, WM, WN, WK, kTopHalf>;
    if (smem > 48 * 1024)
        if (cudaError_t e = cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            e != cudaSuccess)
            return e;
    const unsigned splits = unsigned(args.splits > 1 ? args.splits : 1);
    if (splits > 1 && (WK == 1 || !args.split_staged || !args.split_arrivals)) return cudaErrorInvalidValue;
    const dim3 grid(unsigned((args.m + kBM - 1) / kBM), unsigned((args.n + kBN - 1) / kBN), splits);
    k<<<grid, kThreads, splits > 1 ? 0 : smem, stream>>>(args, tail);
    return cudaGetLastError();
}

// Runs `args` with `tiles` (checked by the caller with tiles_can_run); fills kb and rows_alloc.
template <class W, class Y, class Tail = NoTail>
cudaError_t launch(Args args, const Tiles& tiles, cudaStream_t stream, const typename Tail::Params& tail = {}) {
    args.kb = int((args.k + kBlockK - 1) / kBlockK);
    args.rows_alloc = int(args.m < 16 ? args.m : 16);
    const size_t smem = staged_smem_bytes(tiles, args.m, args.k);
    if (tiles.block_m == 16 && args.m <= 8) {  // rows 8-15 of the one tile are padding
        switch (tiles.block_n) {
            case 8:
                return launch_tile<W, Y, Tail, 1, 1, 1, 1, 8, true>(args, smem, stream, tail);
            case 16:
                return launch_tile<W, Y, Tail, 1, 2, 1, 1, 8, true>(args, smem, stream, tail);
            case 32:
                return launch_tile<W, Y, Tail, 1, 2, 1, 2, 4, true>(args, smem, stream, tail);
            default:
                return cudaErrorInvalidValue;
        }
    }
    if (tiles.block_m == 16) {
        switch (tiles.block_n) {
            case 8:
                return launch_tile<W, Y, Tail, 1, 1, 1, 1, 8>(args, smem, stream, tail);
            case 16:
                return launch_tile<W, Y, Tail, 1, 2, 1, 1, 8>(args, smem, stream, tail);
            case 32:
                return launch_tile<W, Y, Tail, 1, 2, 1, 2, 4>(args, smem, stream, tail);
            default:
                return cudaErrorInvalidValue;
        }
    }
    if (tiles.block_m == 64 && tiles.block_n == 128)
        return launch_tile<W, Y, Tail, 2, 4, 2, 4, 1>(args, smem, stream, tail);
    if (tiles.block_m == 64 && tiles.block_n == 64)
        return launch_tile<W, Y, Tail, 2, 2, 2, 4, 1>(args, smem, stream, tail);
    return cudaErrorInvalidValue;
}

}  // namespace dsv4::cuda::bf16_act_mma
