// gemm_fp8 tensor-core path (Fp8GemmPath::kMma): y = A W^T for e4m3 activations (pow2 scale per 128 columns) and
// e4m3 weights (f32 scale per 128x128), every row count, batch-invariant by construction. Tiles and the K-block
// schedule are chosen in gemm_fp8.cpp (fp8_gemm_config); tested in tests/gpu/gemm_fp8_test.cpp (cpu::linear,
// rows bitwise independent of M and of their tile position, graph capture), timed in bench/gemm_bench.cu.
//
// Arithmetic of one output y[m, n] (the same instructions whatever the tile, M or the other rows):
//   for kb = 0, 1, ..., ceil(K/128) - 1 (ascending):
//     acc = 0; eight m16n8k16 MMAs over the block's 128 columns in a fixed order (below), f32 accumulate
//     p   = acc * (a_scale[m, kb] * w_scale[n/128, kb])      (two f32 roundings, no FMA contraction)
//     sum = sum + p                                          (sum starts at +0)
//   y = bf16_rn(sum)
// mma.sync computes each output element from its own row of A and column of W only, so a row's bits do not
// depend on which rows share the launch. This file holds the 64 x 128 tiles (sums in registers); the decode tiles
// (16 rows: a CTA's warps share out the K blocks, stage p in shared memory and sum the staged values in ascending
// kb, the same chain) are persistent CTAs in mma_decode_gemm.cu; the fragments both use are in mma_fragments.cuh.
//
// Why f16 MMAs: ptxas lowers `mma.sync.m16n8k32.row.col.f32.e4m3.e4m3.f32` on sm_90a and sm_100a into 12 F2FP
// unpacks (e4m3 pairs -> f16 pairs, exact) and two HMMA.16816.F32 (cuobjdump of a one-MMA kernel, nvcc 13.0). We do
// the same unpack once per fragment (an A fragment serves all NT column tiles of a warp, a W fragment all MT row
// tiles) and issue the f16 MMA ourselves: the same tensor-core operation, fewer conversions. Products of e4m3
// values are exact in it; the adds are the tensor core's f32 accumulation.
//
// Fragment layout of mma.sync.m16n8k16.row.col.f32.f16.f16.f32 (lane = 4 g + t; g = lane / 4, t = lane % 4):
//   A (16 x 16, row-major) a0 = (row g, k 2t..2t+1), a1 = (row g+8, k 2t..2t+1),
//                          a2 = (row g, k 2t+8..2t+9), a3 = (row g+8, k 2t+8..2t+9)   (f16 pairs)
//   B (16 x 8, column n)   b0 = (k 2t..2t+1, n g), b1 = (k 2t+8..2t+9, n g)
//   C/D (16 x 8, f32)      c0, c1 = (row g, n 2t, 2t+1), c2, c3 = (row g+8, n 2t, 2t+1)
// (the e4m3 m16n8k32 layout it stands for: a0 = row g, k 4t..4t+3; a1 = row g+8, same k; a2/a3 = k 16+4t..;
// b0 = k 4t..4t+3, b1 = k 16+4t.., n g; C as above; ptxas feeds the low/high byte pairs to the two HMMAs).
// K order inside a 128-column block: lane t of a quad holds 32 columns of each of its rows, read with two 16-byte
// loads straight from global memory: bytes [16t, 16t+16) and [64+16t, 64+16t+16) of the block, as 32-bit words
// j = 0..7 (words 0-3 from the first load, 4-7 from the second). MMA step j (j = 0..7, in that order) takes word j:
//   a0 = f16x2(low pair of A row g word j),  a2 = f16x2(high pair of A row g word j)
//   a1 = f16x2(low pair of A row g+8 word j), a3 = f16x2(high pair of A row g+8 word j)
//   b0 = f16x2(low pair of W row g word j),  b1 = f16x2(high pair of W row g word j)
// so A and W columns meet at the same physical k (logical k 2t..2t+1 and 2t+8..2t+9 of step j are physical
// 16t + 4j + {0,1} and + {2,3}, offset by 64 - 16 for j >= 4), and each of the 128 columns is used exactly once.
// Columns at or past K (a partial last block) load as zeros in both operands; rows past M or N repeat the last
// row and are not stored.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/gemm_fp8/mma_fragments.cuh"

namespace dsv4::cuda {
namespace {

using namespace fp8_mma;

// grid (ceil(m / BM), ceil(n / BN)); warps: WM x WN tiles of MT x 16 rows and NT x 8 columns, each summing all
// K blocks in registers.
template <int MT, int NT, int WM, int WN>
__global__ void __launch_bounds__(kThreads, 1) fp8_mma_kernel(MmaArgs args) {
    static_assert(WM * WN == kWarps, "8 warps per CTA");
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    static_assert(kBlockK % kBN == 0, "a CTA's columns share one weight-scale row");

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wn = warp % WN, wm = warp / WN;
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    const int64_t m_warp = m_cta + wm * MT * 16, n_warp = n_cta + wn * NT * 8;

    // Rows past M (N) read row M - 1 (N - 1): their results are never stored, and every load stays in bounds
    // without a per-row predicate.
    const uint8_t* a_row[MT][2];
    const float* a_scale_row[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            int64_t r = m_warp + mt * 16 + h * 8 + g;
            r = r < args.m ? r : args.m - 1;
            a_row[mt][h] = args.a + r * args.k + 16 * t;
            a_scale_row[mt][h] = args.a_scale + r * args.kb;
        }
    const uint8_t* w_row[NT];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
        int64_t n = n_warp + nt * 8 + g;
        n = n < args.n ? n : args.n - 1;
        w_row[nt] = args.w + n * args.k + 16 * t;
    }
    const float* w_scale_row = args.w_scale + (n_cta / kBlockK) * args.kb;

    auto load = [&](Stage<MT, NT>& s, int kb) {
        const int64_t offset = int64_t(kb) * kBlockK;
        const bool lo_ok = offset + 16 * t < args.k, hi_ok = offset + 16 * t + 64 < args.k;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                s.a[mt][h] = load_row<false>(a_row[mt][h] + offset, lo_ok, hi_ok);
                s.a_scale[mt][h] = __ldg(a_scale_row[mt][h] + kb);
            }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) s.w[nt] = load_row<WM == 1>(w_row[nt] + offset, lo_ok, hi_ok);
        s.w_scale = __ldg(w_scale_row + kb);
    };

    float sum[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i) sum[mt][nt][i] = 0.0f;

    auto compute = [&](const Stage<MT, NT>& s) {
        float acc[MT][NT][4];
        block_mma(s, acc);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const float scale = __fmul_rn(s.a_scale[mt][h], s.w_scale);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e)
                        sum[mt][nt][2 * h + e] = __fadd_rn(sum[mt][nt][2 * h + e], __fmul_rn(acc[mt][nt][2 * h + e], scale));
            }
    };

    // Two register stages: the next block's loads in flight while the current one is multiplied.
    Stage<MT, NT> s0, s1;
    load(s0, 0);
    for (int kb = 0; kb < args.kb; kb += 2) {
        if (kb + 1 < args.kb) load(s1, kb + 1);
        compute(s0);
        if (kb + 1 < args.kb) {
            if (kb + 2 < args.kb) load(s0, kb + 2);
            compute(s1);
        }
    }


#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int64_t r = m_warp + mt * 16 + h * 8 + g;
            if (r >= args.m) continue;
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                const int64_t n = n_warp + nt * 8 + 2 * t;
                __nv_bfloat16* out = args.y + r * args.n + n;
                const __nv_bfloat16 lo = __float2bfloat16_rn(sum[mt][nt][2 * h]);
                const __nv_bfloat16 hi = __float2bfloat16_rn(sum[mt][nt][2 * h + 1]);
                if (args.pair_stores && n + 1 < args.n) {
                    *reinterpret_cast<__nv_bfloat162*>(out) = __halves2bfloat162(lo, hi);
                } else {
                    if (n < args.n) out[0] = lo;
                    if (n + 1 < args.n) out[1] = hi;
                }
            }
        }
}

template <int MT, int NT, int WM, int WN>
cudaError_t launch(const MmaArgs& args, cudaStream_t stream) {
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    const dim3 grid(unsigned((args.m + kBM - 1) / kBM), unsigned((args.n + kBN - 1) / kBN));
    fp8_mma_kernel<MT, NT, WM, WN><<<grid, kThreads, 0, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace

cudaError_t launch_fp8_mma(const Fp8GemmParams& p, const Fp8GemmConfig& config, cudaStream_t stream) {
    MmaArgs args{};
    args.a = p.a;
    args.a_scale = p.a_scale;
    args.w = p.w;
    args.w_scale = p.w_scale;
    args.y = p.y;
    args.m = p.m;
    args.n = p.n;
    args.k = p.k;
    args.kb = int((p.k + kBlockK - 1) / kBlockK);
    args.rows_alloc = int(p.m < 16 ? p.m : 16);
    args.pair_stores = p.n % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
    if (config.block_m == 16) return launch_fp8_mma_decode(args, config.block_n, config.k_warps, stream);
    if (config.block_m == 64 && config.block_n == 128) return launch<2, 4, 2, 4>(args, stream);
    return cudaErrorInvalidValue;
}

}  // namespace dsv4::cuda
