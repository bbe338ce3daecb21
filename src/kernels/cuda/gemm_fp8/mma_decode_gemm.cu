// gemm_fp8's decode tiles (Fp8GemmPath::kMma with block_m 16): persistent CTAs that keep their weight loads in
// flight from one tile to the next. The arithmetic is mma_gemm.cu's, step for step: every 128-column K block of an
// output goes through block_mma from zero, p = acc * (a_scale * w_scale) is staged in shared memory, and the output
// is the f32 sum of its p in ascending K block, rounded to bf16 once. So an output has the same bits here as in the
// 64 x 128 tiles, whatever M, the tile or the grid (tests/gpu/gemm_fp8_test.cpp compares them bitwise).
//
// Why persistent: at one to sixteen rows a GEMV is a stream of weights. With one CTA per tile each CTA issued one
// round of loads, waited for it, reduced and exited, so a 33.5 MB weight ran as four waves of round trips at about
// 60 % of the copy rate, and as fast from L2 as from DRAM (docs/perf.md). Here a CTA walks the items (16 rows x BN
// columns x all K) blockIdx.x, blockIdx.x + gridDim.x, ...; each warp walks its K blocks of those items as one flat
// sequence of steps and keeps the next kDepth - 1 steps' loads in registers while it multiplies the current one, across
// item boundaries. At an item's end its warps meet at a barrier and sum its staged products; the staging buffer is
// double-buffered by item parity, so the warps go on with the next item while the sums are written.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/gemm_fp8/mma_fragments.cuh"

namespace dsv4::cuda {
namespace {

using namespace fp8_mma;

struct DecodeArgs {
    MmaArgs mma;
    int m_tiles;    // ceil(m / 16)
    int64_t items;  // m_tiles * ceil(n / BN): item i is rows (i % m_tiles) * 16.., columns (i / m_tiles) * BN..
};

// A barrier the warps of the CTA reach from different places in the code (an item ends after a different step of
// each warp's flat sequence, or with no step at all): the non-.aligned form, counted per warp.
__device__ __forceinline__ void cta_barrier() {
    asm volatile("barrier.sync 0;" ::: "memory");
}

// One step of a warp: the operands of K block `kb` of item `item`, loaded kDepth - 1 steps ahead.
template <int NT>
struct Step {
    Stage<1, NT> s;
    int kb;
    int item;
};

// Warps: WN column groups of NT x 8 columns, times WK warps that share out the K blocks of an item (kb = wk, wk +
// WK, ...). kHalf: at most 8 rows (one m-tile), rows g + 8 are padding and not loaded.
template <int NT, int WN, int WK, bool kHalf, int kDepth>
__global__ void __launch_bounds__(kThreads, 2) fp8_mma_decode_kernel(DecodeArgs d) {
    static_assert(WN * WK == kWarps, "8 warps per CTA");
    constexpr int kBN = WN * NT * 8;
    static_assert(kBlockK % kBN == 0, "an item's columns share one weight-scale row");
    extern __shared__ float staged[];  // [2 parities][kb][rows_alloc][kBN]
    const MmaArgs& args = d.mma;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wk = warp % WK, wn = warp / WK;
    const int per_item = (args.kb - wk + WK - 1) / WK;  // this warp's K blocks of every item (may be 0)
    const int items_cta = int((d.items - blockIdx.x + gridDim.x - 1) / gridDim.x);
    const int total = items_cta * per_item;
    const int64_t parity_floats = int64_t(args.kb) * args.rows_alloc * kBN;

    auto item_of = [&](int q) { return int64_t(blockIdx.x) + int64_t(q) * gridDim.x; };

    auto load = [&](Step<NT>& st, int step) {
        const int q = step / per_item;
        const int kb = wk + (step - q * per_item) * WK;
        const int64_t item = item_of(q);
        const int64_t m0 = (item % d.m_tiles) * 16, n0 = (item / d.m_tiles) * kBN + wn * NT * 8;
        st.kb = kb;
        st.item = q;
        const int64_t offset = int64_t(kb) * kBlockK;
        const bool lo_ok = offset + 16 * t < args.k, hi_ok = offset + 16 * t + 64 < args.k;
#pragma unroll
        for (int h = 0; h < (kHalf ? 1 : 2); ++h) {
            int64_t r = m0 + h * 8 + g;  // rows past M read row M - 1: never stored, always in bounds
            r = r < args.m ? r : args.m - 1;
            st.s.a[0][h] = load_row<false>(args.a + r * args.k + 16 * t + offset, lo_ok, hi_ok);
            st.s.a_scale[0][h] = __ldg(args.a_scale + r * args.kb + kb);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int64_t n = n0 + nt * 8 + g;
            n = n < args.n ? n : args.n - 1;
            st.s.w[nt] = load_row<true>(args.w + n * args.k + 16 * t + offset, lo_ok, hi_ok);
        }
        st.s.w_scale = __ldg(args.w_scale + (n0 / kBlockK) * args.kb + kb);
    };

    // The block's products p, staged at [parity][kb][row][column] for the item's rows below M.
    auto compute = [&](const Step<NT>& st) {
        float acc[1][NT][4];
        block_mma<1, NT, kHalf>(st.s, acc);
        const int64_t item = item_of(st.item);
        const int rows_valid = int(args.m - (item % d.m_tiles) * 16 < 16 ? args.m - (item % d.m_tiles) * 16 : 16);
        float* out = staged + (st.item & 1) * parity_floats + int64_t(st.kb) * args.rows_alloc * kBN;
#pragma unroll
        for (int h = 0; h < (kHalf ? 1 : 2); ++h) {
            const float scale = __fmul_rn(st.s.a_scale[0][kHalf ? 0 : h], st.s.w_scale);
            const int row = h * 8 + g;
            if (row >= rows_valid) continue;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e)
                    out[row * kBN + wn * NT * 8 + nt * 8 + 2 * t + e] = __fmul_rn(acc[0][nt][2 * h + e], scale);
        }
    };

    // After every warp's steps of item q: its outputs, each the ascending sum of its staged products.
    auto item_end = [&](int q) {
        cta_barrier();
        const int64_t item = item_of(q);
        const int64_t m0 = (item % d.m_tiles) * 16, n0 = (item / d.m_tiles) * kBN;
        const int rows_valid = int(args.m - m0 < 16 ? args.m - m0 : 16);
        const float* in = staged + (q & 1) * parity_floats;
        for (int i = threadIdx.x; i < rows_valid * kBN; i += kThreads) {
            const int row = i / kBN, col = i % kBN;
            if (n0 + col >= args.n) continue;
            float sum = 0.0f;
            const float* p = in + row * kBN + col;
#pragma unroll 8
            for (int kb = 0; kb < args.kb; ++kb) sum = __fadd_rn(sum, p[int64_t(kb) * args.rows_alloc * kBN]);
            args.y[(m0 + row) * args.n + n0 + col] = __float2bfloat16_rn(sum);
        }
    };

    if (per_item == 0) {  // more warps than K blocks: this warp only meets the others at the items' ends
        for (int q = 0; q < items_cta; ++q) item_end(q);
        return;
    }
    Step<NT> ring[kDepth];
#pragma unroll
    for (int i = 0; i < kDepth - 1; ++i)
        if (i < total) load(ring[i], i);
    for (int base = 0; base < total; base += kDepth) {
#pragma unroll
        for (int i = 0; i < kDepth; ++i) {
            const int step = base + i;
            if (step >= total) break;
            if (step + kDepth - 1 < total) load(ring[(i + kDepth - 1) % kDepth], step + kDepth - 1);
            compute(ring[i]);
            if ((step + 1) % per_item == 0) item_end(step / per_item);
        }
    }
}

template <int NT, int WN, int WK, bool kHalf>
cudaError_t launch(DecodeArgs d, cudaStream_t stream) {
    constexpr int kBN = WN * NT * 8, kDepth = kHalf ? 3 : 2;
    const auto kernel = fp8_mma_decode_kernel<NT, WN, WK, kHalf, kDepth>;
    const int smem = int(fp8_mma_smem_bytes(16, kBN, d.mma.m, d.mma.k));
    d.items = int64_t(d.m_tiles) * ((d.mma.n + kBN - 1) / kBN);
    const int64_t resident = resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem);
    const int64_t grid = d.items < resident ? d.items : resident;
    kernel<<<unsigned(grid), kThreads, smem, stream>>>(d);
    return cudaGetLastError();
}

template <bool kHalf>
cudaError_t launch(const DecodeArgs& d, int block_n, cudaStream_t stream) {
    switch (block_n) {
        case 8:
            return launch<1, 1, 8, kHalf>(d, stream);
        case 16:
            return launch<2, 1, 8, kHalf>(d, stream);
        case 32:
            return launch<2, 2, 4, kHalf>(d, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace

// Both parities of the staging buffer.
size_t fp8_mma_smem_bytes(int block_m, int block_n, int64_t m, int64_t k) {
    if (block_m != 16) return 0;
    const int64_t rows = m < 16 ? m : 16;
    return 2 * size_t((k + kBlockK - 1) / kBlockK) * size_t(rows) * size_t(block_n) * sizeof(float);
}

cudaError_t fp8_mma::launch_fp8_mma_decode(const MmaArgs& args, int block_n, cudaStream_t stream) {
    DecodeArgs d;
    d.mma = args;
    d.m_tiles = int((args.m + 15) / 16);
    d.items = 0;
    return args.m <= 8 ? launch<true>(d, block_n, stream) : launch<false>(d, block_n, stream);
}

}  // namespace dsv4::cuda
