// grouped_linear kernels (see grouped_linear.h): the tensor-core kernel for every row count and the generic
// one-thread-per-output kernel.
//
// Arithmetic of one output y[m, n], n in group g = n / out (the same instructions whatever the tile, M or the other
// rows, as in gemm_fp8's mma_gemm.cu):
//   for kb = 0, 1, ..., ceil(in/128) - 1 (ascending):
//     acc = 0; eight m16n8k16 bf16 MMAs over the block's 128 columns in a fixed order (below), f32 accumulate
//     p   = acc * w_scale[n/128, kb]      (one f32 rounding)
//     sum = sum + p                       (sum starts at +0)
//   y = bf16_rn(sum)
// The products are exact: x is bf16 as stored, W's e4m3 values are exact in bf16 (e4m3_pairs.cuh), and a product of
// an 8-bit and a 4-bit significand fits f32's. mma.sync computes each output from its own row of x and its own
// weight row, so a row's bits do not depend on the rows beside it. 16-row tiles share a CTA's K blocks out over its
// warps and stage p per block in shared memory; the sum then runs over the staged values in ascending kb: the same
// chain as the 64 x 128 tiles' registers.
//
// K order inside a 128-column block (fragment layout of mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 as in
// mma_gemm.cu: lane = 4 g + t; A a0/a2 = row g, k 2t..2t+1 / 2t+8..2t+9, a1/a3 the same for row g+8; B b0/b1 = k
// 2t..2t+1 / 2t+8..2t+9 of column g): the block is read in two halves of 64 columns; in half h lane t holds columns
// c0 = 64 h + 16 t .. c0 + 15 of each of its x rows (two 16-byte loads) and weight rows (one 16-byte load). MMA step
// j = 0..3 of half h takes columns c0 + 4j, c0 + 4j + 1 as MMA k 2t, 2t+1 and c0 + 4j + 2, c0 + 4j + 3 as k 2t+8,
// 2t+9, in both operands; steps run h = 0, j = 0..3, then h = 1, j = 0..3, and each of the 128 columns is used once.
// Columns at or past `in` (a partial last block) load as zeros in both operands; rows past M or N repeat the last
// row and are not stored. Pipelining by half blocks keeps two halves' operands in registers (the 64 x 128 tile's
// x rows would not fit twice whole).
#include "kernels/cuda/grouped_linear/grouped_linear_kernels.h"

#include "kernels/cuda/common/e4m3_pairs.cuh"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/numeric.cuh"

namespace dsv4::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBlockK = 128;

struct MmaArgs {
    const __nv_bfloat16* x;  // [m, groups * in]
    const uint8_t* w;        // [groups * out, in] e4m3
    const float* w_scale;    // [ceil(groups * out / 128), kb]
    __nv_bfloat16* y;        // [m, groups * out]
    int64_t m, n, in, out;   // n = groups * out
    int64_t ldx;             // groups * in
    int kb;                  // K blocks: ceil(in / 128)
    int rows_alloc;          // 16-row tiles: rows of staged block products per CTA (min(m, 16))
};

__device__ __forceinline__ uint4 load_cached(const void* p, bool valid) {
    return valid ? __ldg(reinterpret_cast<const uint4*>(p)) : make_uint4(0u, 0u, 0u, 0u);
}

__device__ __forceinline__ uint4 load_streaming(const void* p, bool valid) {
    uint4 v = make_uint4(0u, 0u, 0u, 0u);
    if (valid)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                     : "l"(p));
    return v;
}

__device__ __forceinline__ uint32_t word(const uint4& v, int q) {
    return q == 0 ? v.x : q == 1 ? v.y : q == 2 ? v.z : v.w;
}

// One half block's operands for a warp tile of MT x 16 rows and NT x 8 columns.
template <int MT, int NT>
struct Half {
    uint4 x[MT][2][2];  // [row tile][rows g, g+8][columns c0..c0+7, c0+8..c0+15] bf16
    uint4 w[NT];        // columns c0..c0+15 of row g of each 8-column tile, e4m3
};

// grid (ceil(m / BM), ceil(n / BN)); warps: WM x WN tiles of MT x 16 rows and NT x 8 columns, times WK warps that
// share out the K blocks (kb = wk, wk + WK, ...). WK > 1 stages each block's products in shared memory,
// [kb][rows_alloc][BN] f32, and sums them in ascending kb after a barrier; WK == 1 sums in registers.
template <int MT, int NT, int WM, int WN, int WK>
__global__ void __launch_bounds__(kThreads, WK > 1 ? 2 : 1) grouped_mma_kernel(MmaArgs args) {
    static_assert(WM * WN * WK == kWarps, "8 warps per CTA");
    static_assert(WK == 1 || (MT == 1 && WM == 1), "K blocks are shared out only in 16-row tiles");
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    static_assert(kBlockK % kBN == 0, "a CTA's columns share one weight-scale row");
    extern __shared__ float staged[];

    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
    const int wk = warp % WK, wn = (warp / WK) % WN, wm = warp / (WK * WN);
    const int64_t m_cta = int64_t(blockIdx.x) * kBM, n_cta = int64_t(blockIdx.y) * kBN;
    const int64_t m_warp = m_cta + wm * MT * 16, n_warp = n_cta + wn * NT * 8;
    const int rows_valid = int(args.m - m_cta < kBM ? args.m - m_cta : kBM);
    // The CTA's columns lie in one group (out % BN == 0): its slice of x starts at group * in.
    const int64_t x_col0 = (n_cta / args.out) * args.in;

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
        w_row[nt] = args.w + n * args.in + 16 * t;
    }
    const float* w_scale_row = args.w_scale + (n_cta / kBlockK) * args.kb;

    // Half `i` of this warp's blocks: block wk + (i / 2) * WK, columns 64 (i % 2) .. + 63.
    auto block_of = [&](int i) { return wk + (i / 2) * WK; };
    auto load = [&](Half<MT, NT>& s, int i) {
        const int64_t c0 = int64_t(block_of(i)) * kBlockK + 64 * (i % 2);
        const bool ok = c0 + 16 * t < args.in;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                s.x[mt][h][0] = load_cached(x_row[mt][h] + c0, ok);
                s.x[mt][h][1] = load_cached(x_row[mt][h] + c0 + 8, ok);
            }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
            s.w[nt] = WM == 1 ? load_streaming(w_row[nt] + c0, ok) : load_cached(w_row[nt] + c0, ok);
    };

    float acc[MT][NT][4], sum[MT][NT][4];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e) sum[mt][nt][e] = 0.0f;

    auto compute = [&](const Half<MT, NT>& s, int i) {
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
                af[mt][1] = word(s.x[mt][1][j / 2], 2 * (j % 2));
                af[mt][2] = word(s.x[mt][0][j / 2], 2 * (j % 2) + 1);
                af[mt][3] = word(s.x[mt][1][j / 2], 2 * (j % 2) + 1);
            }
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) {
                uint32_t b0, b1;
                bf16x2_pairs(word(s.w[nt], j), b0, b1);
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) mma_16816(acc[mt][nt], af[mt], b0, b1);
            }
        }
        if (i % 2 == 0) return;
        const int kb = block_of(i);
        const float scale = __ldg(w_scale_row + kb);
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const float p = __fmul_rn(acc[mt][nt][e], scale);
                    if constexpr (WK == 1) {
                        sum[mt][nt][e] = __fadd_rn(sum[mt][nt][e], p);
                    } else {
                        const int row = (e / 2) * 8 + g;  // MT == 1, WM == 1: the CTA's row
                        const int col = wn * NT * 8 + nt * 8 + 2 * t + e % 2;
                        if (row < rows_valid) staged[(int64_t(kb) * args.rows_alloc + row) * kBN + col] = p;
                    }
                }
    };

    // Two register stages: the next half's loads in flight while the current one is multiplied.
    const int count = 2 * ((args.kb - wk + WK - 1) / WK);
    Half<MT, NT> s0, s1;
    if (count > 0) load(s0, 0);
    for (int i = 0; i < count; i += 2) {
        load(s1, i + 1);  // count is even
        compute(s0, i);
        if (i + 2 < count) load(s0, i + 2);
        compute(s1, i + 1);
    }

    if constexpr (WK == 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int64_t r = m_warp + mt * 16 + h * 8 + g;
                if (r >= args.m) continue;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt) {
                    const int64_t n = n_warp + nt * 8 + 2 * t;  // n + 1 < args.n: out % 8 == 0
                    if (n >= args.n) continue;
                    *reinterpret_cast<__nv_bfloat162*>(args.y + r * args.n + n) =
                        __halves2bfloat162(__float2bfloat16_rn(sum[mt][nt][2 * h]),
                                           __float2bfloat16_rn(sum[mt][nt][2 * h + 1]));
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
            args.y[(m_cta + row) * args.n + n_cta + col] = __float2bfloat16_rn(total);
        }
    }
}

template <int MT, int NT, int WM, int WN, int WK>
cudaError_t launch(const MmaArgs& args, size_t smem, cudaStream_t stream) {
    constexpr int kBM = WM * MT * 16, kBN = WN * NT * 8;
    auto kernel = grouped_mma_kernel<MT, NT, WM, WN, WK>;
    if (smem > 48 * 1024)
        if (cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
            e != cudaSuccess)
            return e;
    const dim3 grid(unsigned((args.m + kBM - 1) / kBM), unsigned((args.n + kBN - 1) / kBN));
    kernel<<<grid, kThreads, smem, stream>>>(args);
    return cudaGetLastError();
}

// GroupedLinearPath::kGeneric, grid (ceil(groups * out / 128), m): output n of group n / out, its K in order.
__global__ void __launch_bounds__(128) grouped_linear_generic_kernel(const GroupedLinearParams p) {
    const int64_t n = int64_t(blockIdx.x) * 128 + threadIdx.x, m = blockIdx.y, n_total = p.groups * p.out;
    if (n >= n_total) return;
    const int64_t kb = (p.in + 127) / 128;
    const __nv_bfloat16* x = p.x + m * p.groups * p.in + (n / p.out) * p.in;
    const uint8_t* w = p.w + n * p.in;
    const float* w_scale = p.w_scale + (n / 128) * kb;
    float acc = 0.0f;
    for (int64_t k = 0; k < p.in; ++k)
        acc = __fadd_rn(acc, __fmul_rn(__bfloat162float(x[k]), e4m3_to_f32(w[k]) * w_scale[k / 128]));
    p.y[m * n_total + n] = __float2bfloat16_rn(acc);
}

}  // namespace

size_t grouped_linear_mma_smem_bytes(const GroupedLinearConfig& c, int64_t m, int64_t in) {
    if (c.block_m != 16) return 0;
    const int64_t rows = m < 16 ? m : 16;
    return size_t((in + kBlockK - 1) / kBlockK) * size_t(rows) * size_t(c.block_n) * sizeof(float);
}

cudaError_t launch_grouped_linear_mma(const GroupedLinearParams& p, const GroupedLinearConfig& c,
                                      cudaStream_t stream) {
    MmaArgs args{};
    args.x = p.x;
    args.w = p.w;
    args.w_scale = p.w_scale;
    args.y = p.y;
    args.m = p.m;
    args.n = p.groups * p.out;
    args.in = p.in;
    args.out = p.out;
    args.ldx = p.groups * p.in;
    args.kb = int((p.in + kBlockK - 1) / kBlockK);
    args.rows_alloc = int(p.m < 16 ? p.m : 16);
    const size_t smem = grouped_linear_mma_smem_bytes(c, p.m, p.in);
    if (c.block_m == 16) {
        switch (c.block_n) {
            case 8: return launch<1, 1, 1, 1, 8>(args, smem, stream);
            case 16: return launch<1, 2, 1, 1, 8>(args, smem, stream);
            case 32: return launch<1, 2, 1, 2, 4>(args, smem, stream);
            default: return cudaErrorInvalidValue;
        }
    }
    if (c.block_m == 64 && c.block_n == 128) return launch<2, 4, 2, 4, 1>(args, smem, stream);
    return cudaErrorInvalidValue;
}

cudaError_t launch_grouped_linear_generic(const GroupedLinearParams& p, cudaStream_t stream) {
    const int64_t n_total = p.groups * p.out;
    grouped_linear_generic_kernel<<<dim3(unsigned((n_total + 127) / 128), unsigned(p.m)), 128, 0, stream>>>(p);
    return cudaGetLastError();
}

}  // namespace dsv4::cuda
