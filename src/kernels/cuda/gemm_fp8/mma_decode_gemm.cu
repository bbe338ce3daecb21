// gemm_fp8's decode tiles (Fp8GemmPath::kMma with block_m 16): persistent warps that keep their weight loads in
// flight from one tile to the next. The arithmetic is mma_gemm.cu's, step for step: every 128-column K block of an
// output goes through block_mma from zero, p = acc * (a_scale * w_scale), and the output is the f32 sum of its p in
// ascending K block from +0, rounded to bf16 once. So an output has the same bits here as in the 64 x 128 tiles,
// whatever M, the tile or the grid (tests/gpu/gemm_fp8_test.cpp compares them bitwise).
//
// Why persistent: at one to sixteen rows a GEMV is a stream of weights. With one CTA per tile each CTA issued one
// round of loads, waited for it, reduced and exited: a 33.5 MB weight ran at about 60 % of the copy rate, as fast
// from L2 as from DRAM (docs/perf.md). Here the work is items of 16 rows x BN (8 or 16) columns x all K, and a group
// of WK warps (1, 2, 4 or 8; a CTA holds 8 / WK groups) walks items group, group + groups, ... Each warp of a group
// takes the K blocks wk, wk + WK, ... of every item, as one flat sequence of steps, and keeps the next kDepth - 1
// steps' loads in registers while it multiplies the current one, across item boundaries.
//   WK == 1: the warp sums its outputs in registers and stores them at the item's end (no barrier, no staging).
//   WK > 1:  p is staged in shared memory ([parity][kb][row][column]); at the item's end the group meets at its
//            named barrier and sums the staged p in ascending kb while the next item's loads are in flight. Two
//            parities (by item) where they fit in kMmaDecodeMaxSmem, so the group goes on with the next item while
//            the sums are written; else one, and a second barrier before the next item's products overwrite it.
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
    int parities;   // staging buffers per group (WK > 1): 1 or 2
    int64_t items;  // m_tiles * ceil(n / BN): item i is rows (i % m_tiles) * 16.., columns (i / m_tiles) * BN..
};

// Group `id` (1..8; 0 stays __syncthreads') of `threads` threads: a warp reaches it from different places in the
// code (after a different step of its flat sequence, or with no step at all), so the non-.aligned form.
__device__ __forceinline__ void group_barrier(int id, int threads) {
    asm volatile("barrier.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// One step of a warp: the operands of one K block of an item, loaded kDepth - 1 steps ahead. The steps of a warp run
// through its group's items in order, so the item is the compute side's own count.
template <int NT>
struct Step {
    Stage<1, NT> s;
    int kb;
};

// Where a warp's next load goes: the group's item number q, the step j within it, and that item's operand rows as
// element offsets (set once per item, so a step's loads cost no division; the contract keeps m * k and n * k below
// 2^31).
template <int NT>
struct LoadCursor {
    int q = 0, j = 0;
    int a[2], a_scale[2];
    int w[NT];
    int w_scale;
};

template <int WK>
constexpr int groups_per_cta() {
    return kWarps / WK;
}

// Group shared memory (WK > 1): `parities` buffers of [kb][rows_alloc][BN] f32.
__host__ __device__ inline int64_t group_staging_floats(int parities, int kb, int rows_alloc, int bn) {
    return int64_t(parities) * kb * rows_alloc * bn;
}

// NT 8-column tiles per warp (BN = 8 NT), WK warps per group. kHalf: at most 8 rows (one m-tile), rows g + 8 are
// padding and not loaded.
template <int NT, int WK, bool kHalf, int kDepth>
__global__ void __launch_bounds__(kThreads, 2) fp8_mma_decode_kernel(DecodeArgs d) {
    constexpr int kBN = NT * 8, kGroups = groups_per_cta<WK>();
    static_assert(kBlockK % kBN == 0, "an item's columns share one weight-scale row");
    extern __shared__ float staged[];
    const MmaArgs& args = d.mma;

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wk = warp % WK, group = warp / WK;
    const int64_t first = int64_t(blockIdx.x) * kGroups + group, stride = int64_t(gridDim.x) * kGroups;
    const int items_group = first < d.items ? int((d.items - first + stride - 1) / stride) : 0;
    const int per_item = (args.kb - wk + WK - 1) / WK;  // this warp's K blocks of every item (may be 0)
    const int total = items_group * per_item;
    const int kb_stride = args.rows_alloc * kBN;  // floats between consecutive K blocks' staged products
    const int parity_floats = args.kb * kb_stride;
    float* group_staged = staged + group * group_staging_floats(d.parities, args.kb, args.rows_alloc, kBN);
    auto parity = [&](int q) { return d.parities == 2 ? q & 1 : 0; };

    // The group's item q: rows m0.., columns n0.. (items are numbered m-tile fastest).
    auto item_origin = [&](int q, int64_t& m0, int64_t& n0) {
        const int64_t item = first + int64_t(q) * stride;
        if (d.m_tiles == 1) {
            m0 = 0;
            n0 = item * kBN;
        } else {
            m0 = (item % d.m_tiles) * 16;
            n0 = item / d.m_tiles * kBN;
        }
    };
    auto rows_below_m = [&](int64_t m0) { return int(args.m - m0 < 16 ? args.m - m0 : 16); };

    LoadCursor<NT> cur;
    auto aim = [&](int q) {  // the cursor at the first step of item q
        int64_t m0, n0;
        item_origin(q, m0, n0);
        cur.q = q;
        cur.j = 0;
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int64_t r = m0 + h * 8 + g;  // rows past M read row M - 1: never stored, always in bounds
            r = r < args.m ? r : args.m - 1;
            cur.a[h] = int(r * args.k + 16 * t);
            cur.a_scale[h] = int(r * args.kb);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            int64_t n = n0 + nt * 8 + g;
            n = n < args.n ? n : args.n - 1;
            cur.w[nt] = int(n * args.k + 16 * t);
        }
        cur.w_scale = int((n0 / kBlockK) * args.kb);
    };

    auto load = [&](Step<NT>& st) {  // the cursor's step, then the cursor advanced
        const int kb = wk + cur.j * WK;
        st.kb = kb;
        const int offset = kb * kBlockK;
        const bool lo_ok = offset + 16 * t < args.k, hi_ok = offset + 16 * t + 64 < args.k;
#pragma unroll
        for (int h = 0; h < (kHalf ? 1 : 2); ++h) {
            st.s.a[0][h] = load_row<false>(args.a + (cur.a[h] + offset), lo_ok, hi_ok);
            st.s.a_scale[0][h] = __ldg(args.a_scale + (cur.a_scale[h] + kb));
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) st.s.w[nt] = load_row<true>(args.w + (cur.w[nt] + offset), lo_ok, hi_ok);
        st.s.w_scale = __ldg(args.w_scale + (cur.w_scale + kb));
        if (++cur.j == per_item && cur.q + 1 < items_group) aim(cur.q + 1);
    };

    float sum[NT][4];  // WK == 1: the item's outputs of this lane, rows g and g + 8
    auto clear = [&]() {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) sum[nt][i] = 0.0f;
    };

    // The block's products p: added to the registers' sums (WK == 1) or staged at [parity][kb][row][column].
    auto compute = [&](const Step<NT>& st, int q) {
        float acc[1][NT][4];
        block_mma<1, NT, kHalf>(st.s, acc);
        float* out = group_staged + parity(q) * parity_floats + st.kb * kb_stride + 2 * t;
#pragma unroll
        for (int h = 0; h < (kHalf ? 1 : 2); ++h) {
            const float scale = __fmul_rn(st.s.a_scale[0][h], st.s.w_scale);
            const int row = h * 8 + g;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float p = __fmul_rn(acc[0][nt][2 * h + e], scale);
                    if constexpr (WK == 1) {
                        sum[nt][2 * h + e] = __fadd_rn(sum[nt][2 * h + e], p);
                    } else if (row < args.rows_alloc) {  // rows of the tile past M are never read back
                        out[row * kBN + nt * 8 + e] = p;
                    }
                }
        }
    };

    // After the last step of item q of every warp of the group: the item's outputs.
    auto item_end = [&](int q) {
        int64_t m0, n0;
        item_origin(q, m0, n0);
        const int rows_valid = rows_below_m(m0);
        if constexpr (WK == 1) {
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int row = h * 8 + g;
                if (row >= rows_valid) continue;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int64_t n = n0 + nt * 8 + 2 * t;
                    __nv_bfloat16* y = args.y + (m0 + row) * args.n + n;
                    const __nv_bfloat16 lo = __float2bfloat16_rn(sum[nt][2 * h]);
                    const __nv_bfloat16 hi = __float2bfloat16_rn(sum[nt][2 * h + 1]);
                    if (args.pair_stores && n + 1 < args.n) {
                        *reinterpret_cast<__nv_bfloat162*>(y) = __halves2bfloat162(lo, hi);
                    } else {
                        if (n < args.n) y[0] = lo;
                        if (n + 1 < args.n) y[1] = hi;
                    }
                }
            }
            clear();
        } else {
            group_barrier(1 + group, WK * 32);
            const float* in = group_staged + parity(q) * parity_floats;
            for (int i = wk * 32 + lane; i < rows_valid * kBN; i += WK * 32) {
                const int row = i / kBN, col = i % kBN;
                if (n0 + col >= args.n) continue;
                float total_p = 0.0f;
                const float* p = in + row * kBN + col;
#pragma unroll 8
                for (int kb = 0; kb < args.kb; ++kb) total_p = __fadd_rn(total_p, p[kb * kb_stride]);
                args.y[(m0 + row) * args.n + n0 + col] = __float2bfloat16_rn(total_p);
            }
            if (d.parities == 1) group_barrier(1 + group, WK * 32);  // read before the next item writes
        }
    };

    if (per_item == 0) {  // more warps in the group than K blocks: this warp only meets the others at the items' ends
        for (int q = 0; q < items_group; ++q) item_end(q);
        return;
    }
    if (total == 0) return;
    clear();
    aim(0);
    int q = 0;  // the item of the step being computed
    Step<NT> ring[kDepth];
#pragma unroll
    for (int i = 0; i < kDepth - 1; ++i)
        if (i < total) load(ring[i]);
    for (int base = 0; base < total; base += kDepth) {
#pragma unroll
        for (int i = 0; i < kDepth; ++i) {
            const int step = base + i;
            if (step >= total) break;
            if (step + kDepth - 1 < total) load(ring[(i + kDepth - 1) % kDepth]);
            compute(ring[i], q);
            if (ring[i].kb + WK >= args.kb) item_end(q++);  // this warp's last K block of the item
        }
    }
}

template <int NT, int WK, bool kHalf>
cudaError_t launch(DecodeArgs d, cudaStream_t stream) {
    constexpr int kBN = NT * 8, kDepth = kHalf ? 3 : 2;
    const auto kernel = fp8_mma_decode_kernel<NT, WK, kHalf, kDepth>;
    const size_t one = fp8_mma_decode_smem_bytes(kBN, WK, d.mma.m, d.mma.k);
    d.parities = 2 * one <= kMmaDecodeMaxSmem ? 2 : 1;
    const int smem = int(d.parities * one);
    d.items = int64_t(d.m_tiles) * ((d.mma.n + kBN - 1) / kBN);
    const int64_t ctas = (d.items + groups_per_cta<WK>() - 1) / groups_per_cta<WK>();
    const int64_t resident = resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem);
    const int64_t grid = ctas < resident ? ctas : resident;
    kernel<<<unsigned(grid), kThreads, smem, stream>>>(d);
    return cudaGetLastError();
}

template <int NT, bool kHalf>
cudaError_t launch(const DecodeArgs& d, int k_warps, cudaStream_t stream) {
    switch (k_warps) {
        case 1:
            return launch<NT, 1, kHalf>(d, stream);
        case 2:
            return launch<NT, 2, kHalf>(d, stream);
        case 4:
            return launch<NT, 4, kHalf>(d, stream);
        case 8:
            return launch<NT, 8, kHalf>(d, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

template <bool kHalf>
cudaError_t launch(const DecodeArgs& d, int block_n, int k_warps, cudaStream_t stream) {
    switch (block_n) {
        case 8:
            return launch<1, kHalf>(d, k_warps, stream);
        case 16:
            return launch<2, kHalf>(d, k_warps, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace

size_t fp8_mma_decode_smem_bytes(int block_n, int k_warps, int64_t m, int64_t k) {
    if (k_warps <= 1) return 0;
    const int rows = int(m < 16 ? m : 16);
    return size_t(kWarps / k_warps) * size_t(group_staging_floats(1, int((k + kBlockK - 1) / kBlockK), rows, block_n)) *
           sizeof(float);
}

cudaError_t fp8_mma::launch_fp8_mma_decode(const MmaArgs& args, int block_n, int k_warps, cudaStream_t stream) {
    DecodeArgs d;
    d.mma = args;
    d.m_tiles = int((args.m + 15) / 16);
    d.parities = 1;
    d.items = 0;
    return args.m <= 8 ? launch<true>(d, block_n, k_warps, stream) : launch<false>(d, block_n, k_warps, stream);
}

}  // namespace dsv4::cuda
