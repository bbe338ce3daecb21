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
// depend on which rows share the launch. Decode tiles (16 rows) share a CTA's K blocks out over its warps (8, or 4
// per column group) and stage p per block in shared memory; the sum then runs over the staged values in ascending
// kb: the same chain.
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

#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/vector_loads.cuh"
#include "kernels/cuda/gemm_fp8/gemm_fp8_kernels.h"
#include "kernels/cuda/mhc/hc_post_math.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockK = 128;

struct MmaArgs {
    const uint8_t* a;      // [m, k] e4m3
    const float* a_scale;  // [m, kb] f32
    const uint8_t* w;      // [n, k] e4m3
    const float* w_scale;  // [ceil(n/128), kb] f32
    __nv_bfloat16* y;      // [m, n] bf16
    const int32_t* rows_live;  // optional device scalar: rows from it on are written as +0
    int64_t m, n, k;
    int kb;            // K blocks: ceil(k / 128)
    int rows_alloc;    // decode tiles: rows of staged block products per CTA (min(m, 16))
    bool pair_stores;  // n even and y 4-byte aligned: bf16 pairs stored as one word
    Fp8GemmParams::PostMix post;  // post.out: each stored element's mHC post-mix too (Fp8GemmParams::post_mix)
};

// Stores y[r, n] and, where asked, its post-mix: the epilogue of every tile.
__device__ __forceinline__ void store_output(const MmaArgs& args, int64_t r, int64_t n, __nv_bfloat16 v) {
    args.y[r * args.n + n] = v;
    if (args.post.out) {
        const float* mix = args.post.mix + r * (2 + args.post.n_hc) * args.post.n_hc;
        const float f = bf16_to_f32(v);
        if (args.post.n_hc == 4)
            hc_post_element<4>(mix, args.post.streams, args.post.out, r, args.n, n, f);
        else
            hc_post_element<2>(mix, args.post.streams, args.post.out, r, args.n, n, f);
    }
}

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

// One K block's operands for a warp tile of MT x 16 rows and NT x 8 columns.
template <int MT, int NT>
struct Stage {
    RowChunks a[MT][2];  // rows g and g+8 of each 16-row tile
    RowChunks w[NT];     // row g of each 8-column tile
    float a_scale[MT][2];
    float w_scale;
};

// acc[mt][nt] = the block's products summed on the tensor cores, from zero, steps j = 0..7 in order. kTopHalf: rows
// g + 8 of each 16-row tile are not live (a decode tile of at most 8 rows): their A fragments are zeros, not loaded
// or converted; rows g get the same products (each output row of mma.sync reads its own A row only).
template <int MT, int NT, bool kTopHalf = false>
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
            if constexpr (kTopHalf)
                af[mt][1] = af[mt][3] = 0u;
            else
                f16x2_pairs(word(s.a[mt][1], j), af[mt][1], af[mt][3]);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
            uint32_t b0, b1;
            f16x2_pairs(word(s.w[nt], j), b0, b1);
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) mma_16816_f16(acc[mt][nt], af[mt], b0, b1);
        }
    }
}

// grid (ceil(m / BM), ceil(n / BN)); warps: WM x WN tiles of MT x 16 rows and NT x 8 columns, times WK warps that
// share out the K blocks (kb = wk, wk + WK, ...). WK > 1 stages each block's products in shared memory,
// [kb][rows_alloc][BN] f32, and sums them in ascending kb after a barrier; WK == 1 sums in registers.
// kTopHalf (decode tiles of launches of at most 8 rows, e.g. a batch-1 step): rows 8-15 of the tile are neither
// loaded, converted nor promoted; rows 0-7 run the same instructions.
template <int MT, int NT, int WM, int WN, int WK, bool kTopHalf = false>
__global__ void __launch_bounds__(kThreads, WK > 1 ? 2 : 1) fp8_mma_kernel(MmaArgs args) {
    static_assert(WM * WN * WK == kWarps, "8 warps per CTA");
    static_assert(!kTopHalf || (MT == 1 && WM == 1), "the top half of one 16-row tile");
    constexpr int kHalves = kTopHalf ? 1 : 2;  // live 8-row halves of a 16-row tile
    static_assert(WK == 1 || (MT == 1 && WM == 1), "K blocks are shared out only in 16-row tiles");
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    static_assert(kBlockK % kBN == 0, "a CTA's columns share one weight-scale row");
    extern __shared__ float staged[];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wk = warp % WK, wn = (warp / WK) % WN, wm = warp / (WK * WN);
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    const int64_t m_warp = m_cta + wm * MT * 16, n_warp = n_cta + wn * NT * 8;
    const int rows_valid = int(args.m - m_cta < kBM ? args.m - m_cta : kBM);
    // Rows from m_live on are +0; a tile with none live writes its zeros and reads nothing else.
    int64_t m_live = args.m;
    if (args.rows_live) {
        const int64_t live = *args.rows_live;
        m_live = live < 0 ? 0 : live < args.m ? live : args.m;
        if (m_cta >= m_live) {
            const __nv_bfloat16 zero = __float2bfloat16_rn(0.0f);
            for (int i = threadIdx.x; i < rows_valid * kBN; i += kThreads) {
                const int64_t n = n_cta + i % kBN;
                if (n < args.n) store_output(args, m_cta + i / kBN, n, zero);
            }
            return;
        }
    }

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
            for (int h = 0; h < kHalves; ++h) {
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

    auto compute = [&](const Stage<MT, NT>& s, int kb) {
        float acc[MT][NT][4];
        block_mma<MT, NT, kTopHalf>(s, acc);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < kHalves; ++h) {
                const float scale = __fmul_rn(s.a_scale[mt][h], s.w_scale);
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const float p = __fmul_rn(acc[mt][nt][2 * h + e], scale);
                        if constexpr (WK == 1) {
                            sum[mt][nt][2 * h + e] = __fadd_rn(sum[mt][nt][2 * h + e], p);
                        } else {
                            const int row = h * 8 + g;  // MT == 1, WM == 1: the CTA's row
                            const int col = wn * NT * 8 + nt * 8 + 2 * t + e;
                            if (row < rows_valid) staged[(int64_t(kb) * args.rows_alloc + row) * kBN + col] = p;
                        }
                    }
            }
    };

    // This warp's K blocks wk, wk + WK, ...: two register stages, the next block's loads in flight while the
    // current one is multiplied.
    const int count = (args.kb - wk + WK - 1) / WK;
    Stage<MT, NT> s0, s1;
    if (count > 0) load(s0, wk);
    for (int i = 0; i < count; i += 2) {
        if (i + 1 < count) load(s1, wk + (i + 1) * WK);
        compute(s0, wk + i * WK);
        if (i + 1 < count) {
            if (i + 2 < count) load(s0, wk + (i + 2) * WK);
            compute(s1, wk + (i + 1) * WK);
        }
    }

    if constexpr (WK == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t r = m_warp + mt * 16 + h * 8 + g;
                if (r >= args.m) continue;
                const bool live = r < m_live;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int64_t n = n_warp + nt * 8 + 2 * t;
                    __nv_bfloat16* out = args.y + r * args.n + n;
                    const __nv_bfloat16 lo = __float2bfloat16_rn(live ? sum[mt][nt][2 * h] : 0.0f);
                    const __nv_bfloat16 hi = __float2bfloat16_rn(live ? sum[mt][nt][2 * h + 1] : 0.0f);
                    if (args.post.out) {
                        if (n < args.n) store_output(args, r, n, lo);
                        if (n + 1 < args.n) store_output(args, r, n + 1, hi);
                    } else if (args.pair_stores && n + 1 < args.n) {
                        *reinterpret_cast<__nv_bfloat162*>(out) = __halves2bfloat162(lo, hi);
                    } else {
                        if (n < args.n) out[0] = lo;
                        if (n + 1 < args.n) out[1] = hi;
                    }
                }
            }
    } else {
        __syncthreads();
        for (int i = threadIdx.x; i < rows_valid * kBN; i += kThreads) {
            const int row = i / kBN, col = i % kBN;
            if (n_cta + col >= args.n) continue;
            float total = 0.0f;
            const float* p = staged + row * kBN + col;
#pragma unroll 8
            for (int kb = 0; kb < args.kb; ++kb) total = __fadd_rn(total, p[int64_t(kb) * args.rows_alloc * kBN]);
            store_output(args, m_cta + row, n_cta + col, __float2bfloat16_rn(m_cta + row < m_live ? total : 0.0f));
        }
    }
}

template <int MT, int NT, int WM, int WN, int WK, bool kTopHalf = false>
cudaError_t launch(const MmaArgs& args, cudaStream_t stream) {
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    const size_t smem = WK > 1 ? size_t(args.kb) * args.rows_alloc * kBN * sizeof(float) : 0;
    auto kernel = fp8_mma_kernel<MT, NT, WM, WN, WK, kTopHalf>;
    if (smem > 48 * 1024)
        if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            e != cudaSuccess)
            return e;
    const dim3 grid(unsigned((args.m + kBM - 1) / kBM), unsigned((args.n + kBN - 1) / kBN));
    kernel<<<grid, kThreads, smem, stream>>>(args);
    return cudaGetLastError();
}

}  // namespace

size_t fp8_mma_smem_bytes(int block_m, int block_n, int64_t m, int64_t k) {
    if (block_m != 16) return 0;
    const int64_t rows = m < 16 ? m : 16;
    return size_t((k + kBlockK - 1) / kBlockK) * size_t(rows) * size_t(block_n) * sizeof(float);
}

cudaError_t launch_fp8_mma(const Fp8GemmParams& p, const Fp8GemmConfig& config, cudaStream_t stream) {
    MmaArgs args{};
    args.a = p.a;
    args.a_scale = p.a_scale;
    args.w = p.w;
    args.w_scale = p.w_scale;
    args.y = p.y;
    args.rows_live = p.rows_live;
    args.m = p.m;
    args.n = p.n;
    args.k = p.k;
    args.kb = int((p.k + kBlockK - 1) / kBlockK);
    args.rows_alloc = int(p.m < 16 ? p.m : 16);
    args.pair_stores = p.n % 2 == 0 && reinterpret_cast<uintptr_t>(p.y) % 4 == 0;
    args.post = p.post_mix;
    if (args.post.out && args.post.n_hc != 2 && args.post.n_hc != 4) return cudaErrorInvalidValue;  // no epilogue
    if (config.block_m == 16 && p.m <= 8) {  // rows 8-15 of the one tile are padding
        switch (config.block_n) {
            case 8:
                return launch<1, 1, 1, 1, 8, true>(args, stream);
            case 16:
                return launch<1, 2, 1, 1, 8, true>(args, stream);
            case 32:
                return launch<1, 2, 1, 2, 4, true>(args, stream);
            default:
                return cudaErrorInvalidValue;
        }
    }
    if (config.block_m == 16) {
        switch (config.block_n) {
            case 8: return launch<1, 1, 1, 1, 8>(args, stream);
            case 16: return launch<1, 2, 1, 1, 8>(args, stream);
            case 32: return launch<1, 2, 1, 2, 4>(args, stream);
            default:
                return cudaErrorInvalidValue;
        }
    }
    if (config.block_m == 64 && config.block_n == 128) return launch<2, 4, 2, 4, 1>(args, stream);
    if (config.block_m == 128 && config.block_n == 128) return launch_fp8_wgmma(p, stream);
    return cudaErrorInvalidValue;
}

}  // namespace dsv4::cuda
