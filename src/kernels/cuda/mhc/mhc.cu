// mHC kernels: see mhc.h. hc_pre / hc_head have three paths with the same arithmetic, so the same bits:
//   per token  one CTA of kHcThreads per token: every thread accumulates the mixer dot products and the sum of
//              squares over a strided slice of the n_hc * dim stream values, a block tree reduces them, thread 0
//              computes the mix, then all threads collapse the streams.
//   tiled      the same for kMixTile tokens per CTA, each mixer value loaded once for all of them. No longer
//              chosen (the row groups are faster at every size since their loops lost the bound checks); the tests
//              and the bench force it.
//   row groups hc_pre only: 1, 2, 4 or 8 tokens per CTA and the mixer rows dealt to kRowGroups CTAs, each of which
//              also chains the sum of squares its rows' logits need; group 0 holds the pre rows and collapses its
//              tokens. For batches and prefill pieces above 16 tokens, which the tiled path gives one CTA per 4
//              tokens (64 CTAs at 256 tokens, each thread 100 chains at 8 warps per SM: bound by loads in flight).
//              At tiles of 8 tokens, where the rows are whole 512-column chunks, their columns cross into shared
//              memory by cp.async first (kStaged) and the chains read them there.
//   split      a cluster of kCluster CTAs per token (few tokens, e.g. decode: one CTA cannot pull the 1.5 MB
//              f32 mixer of V4 fast; 16 for hc_pre of up to kWideTokens tokens where the GPU can co-schedule
//              them, else 8). Each mixer row's chains are dealt to the CTAs in quarters of the per-token
//              kernel's tree (the threads of warps q and q + 4, which its first level adds), the same number of
//              rows' quarters to every CTA; each CTA computes them with the per-token kernel's arithmetic (the same
//              kHcThreads strided chains of fmaf, the same shuffle tree, the same warp tree), pushes the quarter
//              sums into every CTA's shared memory (distributed shared memory: st.async onto the receiver's
//              mbarrier, which it alone waits on), warp 0 of every CTA adds the quarters as the tree's last two
//              levels and derives pre (rank 0 also post and comb's inputs), and the CTAs collapse the streams in
//              slices.
// The mix kernels leave comb as its inputs (scale * logit + base); hc_sinkhorn_kernel (mhc_sinkhorn.cu) normalizes
// it after them. hc_post is in mhc_post.cu.
#include <cooperative_groups.h>
#include <type_traits>

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/numeric.cuh"
#include "kernels/cuda/common/phase_clock.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/mhc/mhc.h"
#include "kernels/cuda/quant/fp8_act_codec.cuh"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"

namespace dsv4::cuda {
namespace {

namespace cg = cooperative_groups;

constexpr unsigned kFull = 0xFFFFFFFFu;
constexpr int kWarps = kHcThreads / 32;
constexpr int kHcCluster = 8;  // CTAs per token on the split path (the portable cluster size)
// hc_pre of at most kWideTokens tokens (batch-1 decode, small batches): a non-portable cluster of kHcWideCluster
// CTAs, six quarter rows per CTA instead of twelve, so twice the SMs pull the mixer and each issues fewer loads.
// Larger batches keep 8: a cluster of 16 takes most of a GPC, so few of them run at once.
constexpr int kHcWideCluster = 16;
constexpr int64_t kWideTokens = 8;
constexpr int kMixTile = 4;  // tokens per CTA on the tiled path (its accumulators: 4 x 25 registers at n_hc 4)
// Strided columns a thread loads before their fmafs: the split kernel is bound by loads in flight per SM (H200,
// hc_pre at one token: 8 -> 14.2 us, 8 round trips for 64 columns); 16 halves the round trips at 116 registers (two
// CTAs per SM for batched decode). hc_pre's clusters of 16 (up to kWideTokens tokens, 1.5 rows a CTA, one CTA per
// SM) load 32: two round trips for V4-Flash's 64 columns a thread (hc_pre at one token 12.0 -> 10.6 us on an H100).
// Not hc_head's clusters of 8: at 32-64 tokens their CTAs share SMs, and 32 took 8.5 -> 12.8 us at 32 tokens.
template <int kCluster>
constexpr int kSplitUnroll = kCluster == kHcWideCluster ? 32 : 16;
// The row-group path: 4 CTAs per token tile (n_hc 4: 6 of the 24 rows each, n_hc 2: 2 of 8), two CTAs per SM.
// Strided columns are loaded kRowUnroll at a time before their fmafs: 8 for tiles of 2 tokens (few CTAs per SM, so
// more loads in flight per thread) and of 1, 4 for tiles of 4, 2 for tiles of 8 (their 8 x 7 chains and loads in
// the two CTAs' 128 registers).
constexpr int kRowGroups = 4;
constexpr int64_t kRowTile8Tokens = 1024;  // tiles of 8 above (at 1,024 tokens they would leave a wave part-empty)
constexpr int64_t kRowTileMajorTokens = 2048;  // the row-group grid tile-major from here (hc_mix_rows_kernel)
template <int kTile>
constexpr int kRowUnroll = kTile <= 2   ? 8
                           : kTile == 4 ? 4
                                        : 2;
// The row groups' staged chains (hc_mix_rows_kernel's kStaged, at tiles of 8 where the row's width is whole chunks and
// the rows are 16-byte aligned: every V4 shape): the tile's streams and the CTA's mixer rows cross into shared memory
// in chunks of kStagedCols columns by 16-byte cp.async, kStagedChunks in flight, and each thread chains its strided
// columns from there. Each column was a 4-byte mixer load and a 2-byte stream load per row and token from L2, 14 a
// column at tiles of 8 tokens, with few in flight: the kernel ran at ~6x the time its L2 traffic and FMAs take (0.93 ms
// a pre-mix of 8,192 tokens on an H100, 2026-12-05); staged, the row-group kernel took 463 us at 8,192 tokens against
// 604 and 135 against 170 at 2,048 (H100, 2026-12-06).
constexpr int kStagedCols = 2 * kHcThreads, kStagedChunks = 3;
template <int kTile, int kPer>
struct StagedChunk {
    static constexpr int x = 0;                            // kTile stream rows of kStagedCols bf16
    static constexpr int f = x + kTile * kStagedCols * 2;  // kPer mixer rows of kStagedCols f32
    static constexpr int bytes = f + kPer * kStagedCols * 4;
    static constexpr int smem = kStagedChunks * bytes;
    static_assert(x % 16 == 0 && f % 16 == 0 && bytes % 16 == 0);
};

// Calls chain(whole, i0) for each round of kUnroll strided columns i0, i0 + 256, ... of a thread's share of a row of
// `width` (i0 from `thread`, the per-token kernel's thread whose chain this is, in steps of 256 kUnroll), whole a
// std::true_type where every column of the round lies inside the row, so that the round needs no bound checks, else
// std::false_type.
template <int kUnroll, class Chain>
__device__ __forceinline__ void for_each_round(int64_t width, Chain& chain, int thread = int(threadIdx.x)) {
    for (int64_t i0 = thread; i0 < width; i0 += int64_t(kHcThreads) * kUnroll) {
        if (i0 + int64_t(kUnroll - 1) * kHcThreads < width)
            chain(std::true_type{}, i0);
        else
            chain(std::false_type{}, i0);
    }
}

__device__ __forceinline__ float sigmoid(float z) {
    return __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-z)));
}

// The sum over the CTA of every thread's chains acc[tt][j] (kValues values for each of kTile tokens): 5 shuffle levels
// in the warp, then 3 levels over the warps, into partial[tt][0][j]. hc_mix_kernel and hc_mix_rows_kernel reduce every
// value with this one tree, which is what makes their values the same bits. Every thread of the CTA calls it.
template <int kTile, int kValues>
__device__ __forceinline__ void reduce_over_cta(float (&acc)[kTile][kValues],
                                                float (&partial)[kTile][kWarps][kValues]) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt)
#pragma unroll
        for (int j = 0; j < kValues; ++j) {
#pragma unroll
            for (int o = 16; o > 0; o /= 2) acc[tt][j] += __shfl_xor_sync(kFull, acc[tt][j], o);
            if (lane == 0) partial[tt][warp][j] = acc[tt][j];
        }
    __syncthreads();
    for (int u = threadIdx.x; u < kTile * kValues; u += kHcThreads) {
        const int tt = u / kValues, j = u % kValues;
        float sum[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) sum[w] = partial[tt][w][j];
#pragma unroll
        for (int half = kWarps / 2; half > 0; half /= 2)
#pragma unroll
            for (int w = 0; w < half; ++w) sum[w] += sum[w + half];
        partial[tt][0][j] = sum[0];
    }
    __syncthreads();
}

// x_out of the tile's `tokens` tokens: the un-normalized streams v[tt] collapsed with token tt's pre weights
// (pre + tt * pre_stride, kN of them), streams in order, then bf16 (cpu::hc_pre's order). A thread's columns d, d +
// kHcThreads, ... go kCollapseUnroll at a time, their stream values loaded before any is summed: one column at a time,
// each waited for its loads, and the row-group kernel's group-0 CTAs (which alone collapse) were the last of the launch
// (at 8,192 tokens on an H200, tiles of 8 tokens, half the mixer's L2 reads, were no faster than tiles of 4).
// Where the rows are whole 16-byte vectors (every V4 shape), a thread takes eight adjacent columns at a time instead,
// kCollapseVectors vectors of each stream in flight: the 2-byte loads held the staged row-group kernel's group 0 for
// 23 % of its stall samples (ncu, 8,192 tokens, H100, 2026-12-06). The same sums, column by column.
constexpr int kCollapseUnroll = 4, kCollapseVectors = 2;
template <int kN>
__device__ __forceinline__ void collapse_row_vectors(const __nv_bfloat16* vt, __nv_bfloat16* out_row, int64_t dim,
                                                     const float (&pre)[kN]) {
    const int64_t vectors = dim / 8;
    for (int64_t c0 = threadIdx.x; c0 < vectors; c0 += int64_t(kHcThreads) * kCollapseVectors) {
        uint4 x[kCollapseVectors][kN];
#pragma unroll
        for (int u = 0; u < kCollapseVectors; ++u) {
            const int64_t c = c0 + int64_t(u) * kHcThreads;
#pragma unroll
            for (int j = 0; j < kN; ++j)
                x[u][j] =
                    c < vectors ? __ldg(reinterpret_cast<const uint4*>(vt + j * dim) + c) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < kCollapseVectors; ++u) {
            const int64_t c = c0 + int64_t(u) * kHcThreads;
            if (c >= vectors) break;
            uint32_t packed[4];
#pragma unroll
            for (int e = 0; e < 8; e += 2) {
                float out[2];
#pragma unroll
                for (int h = 0; h < 2; ++h) {
                    out[h] = 0.0f;
#pragma unroll
                    for (int j = 0; j < kN; ++j)
                        out[h] = __fadd_rn(out[h], __fmul_rn(pre[j], bf16x8_at(x[u][j], e + h)));
                }
                packed[e / 2] = uint32_t(__bfloat16_as_ushort(f32_to_bf16(out[0]))) |
                                uint32_t(__bfloat16_as_ushort(f32_to_bf16(out[1]))) << 16;
            }
            reinterpret_cast<uint4*>(out_row)[c] = make_uint4(packed[0], packed[1], packed[2], packed[3]);
        }
    }
}
template <int kN, int kTile>
__device__ __forceinline__ void collapse_streams(const HcMixParams& p, const __nv_bfloat16* const (&v)[kTile],
                                                 int64_t t0, int tokens, const float* pre_all, int pre_stride) {
    for (int tt = 0; tt < tokens; ++tt) {
        float pre[kN];
#pragma unroll
        for (int j = 0; j < kN; ++j) pre[j] = pre_all[tt * pre_stride + j];
        const __nv_bfloat16* vt = v[tt];
        __nv_bfloat16* out_row = p.x_out + (t0 + tt) * p.dim;
        if (p.dim % 8 == 0 && (reinterpret_cast<uintptr_t>(vt) | reinterpret_cast<uintptr_t>(out_row)) % 16 == 0) {
            collapse_row_vectors<kN>(vt, out_row, p.dim, pre);
            continue;
        }
        auto collapse = [&](auto whole, int64_t d0) {
            constexpr bool kWhole = decltype(whole)::value;
            float x[kCollapseUnroll][kN];
#pragma unroll
            for (int u = 0; u < kCollapseUnroll; ++u) {
                const int64_t d = d0 + int64_t(u) * kHcThreads;
#pragma unroll
                for (int j = 0; j < kN; ++j) x[u][j] = kWhole || d < p.dim ? bf16_to_f32(vt[j * p.dim + d]) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < kCollapseUnroll; ++u) {
                const int64_t d = d0 + int64_t(u) * kHcThreads;
                if (!kWhole && d >= p.dim) break;
                float out = 0.0f;
#pragma unroll
                for (int j = 0; j < kN; ++j) out = __fadd_rn(out, __fmul_rn(pre[j], x[u][j]));
                out_row[d] = f32_to_bf16(out);
            }
        };
        for (int64_t d0 = threadIdx.x; d0 < p.dim; d0 += int64_t(kHcThreads) * kCollapseUnroll) {
            if (d0 + int64_t(kCollapseUnroll - 1) * kHcThreads < p.dim)
                collapse(std::true_type{}, d0);
            else
                collapse(std::false_type{}, d0);
        }
    }
}

// kTile tokens per CTA (1: the per-token path; kMixTile: the tiled path of prefill): each mixer column a thread
// loads serves kTile tokens, so the 1.5 MB f32 mixer of V4 crosses L2 once per kTile tokens. Every token's chains,
// tree, mix (lane 0 of warp tt computes token tt's) and collapse are the per-token kernel's.
template <int kN, bool kHead, int kTile>
__global__ void __launch_bounds__(kHcThreads) hc_mix_kernel(HcMixParams p) {
    constexpr int kRows = kHead ? kN : (2 + kN) * kN;
    static_assert(kHcThreads % 32 == 0 && kRows + 1 <= kHcThreads, "one thread per reduced value");
    static_assert(kTile <= kWarps, "one warp per token computes its mix");
    __shared__ float partial[kTile][kWarps][kRows + 1];
    __shared__ float mix_s[kTile][kRows];
    const int64_t t0 = int64_t(blockIdx.x) * kTile, width = kN * p.dim;
    const int tokens = int(p.tokens - t0 < kTile ? p.tokens - t0 : kTile);
    const __nv_bfloat16* v[kTile];
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt) v[tt] = p.streams + (t0 + (tt < tokens ? tt : tokens - 1)) * width;

    // 1. Per-thread partial dot products (rows 0..kRows) and sum of squares (row kRows), per token.
    float acc[kTile][kRows + 1];
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt)
#pragma unroll
        for (int m = 0; m <= kRows; ++m) acc[tt][m] = 0.0f;
    for (int64_t i = threadIdx.x; i < width; i += kHcThreads) {
        float x[kTile];
#pragma unroll
        for (int tt = 0; tt < kTile; ++tt) x[tt] = bf16_to_f32(v[tt][i]);
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
            const float f = p.fn[m * width + i];
#pragma unroll
            for (int tt = 0; tt < kTile; ++tt) acc[tt][m] = fmaf(f, x[tt], acc[tt][m]);
        }
#pragma unroll
        for (int tt = 0; tt < kTile; ++tt) acc[tt][kRows] = fmaf(x[tt], x[tt], acc[tt][kRows]);
    }
    // 2. The tree.
    reduce_over_cta(acc, partial);

    // 3. The mix of token tt in lane 0 of warp tt (cpu::hc_pre / hc_head order of operations).
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0 && warp < tokens) {
        const int tt = warp;
        const int64_t t = t0 + tt;
        const float mean_sq = __fdiv_rn(partial[tt][0][kRows], float(width));
        const float rho = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.norm_eps)));
        float logit[kRows];
#pragma unroll
        for (int m = 0; m < kRows; ++m) {
            logit[m] = __fmul_rn(partial[tt][0][m], rho);
            if (p.logits) p.logits[t * kRows + m] = logit[m];
        }
        float* mix = mix_s[tt];
        for (int j = 0; j < kN; ++j)
            mix[j] = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(logit[j], p.scale[0]), p.base[j])), p.hc_eps);
        if constexpr (!kHead) {
            for (int j = 0; j < kN; ++j)
                mix[kN + j] = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(logit[kN + j], p.scale[1]), p.base[kN + j])));
            for (int jk = 0; jk < kN * kN; ++jk)  // comb's inputs: hc_sinkhorn normalizes them
                mix[2 * kN + jk] = __fadd_rn(__fmul_rn(logit[2 * kN + jk], p.scale[2]), p.base[2 * kN + jk]);
        }
        for (int m = 0; m < kRows; ++m) p.mix[t * kRows + m] = mix[m];
    }
    __syncthreads();

    // 4. Collapse the un-normalized streams with pre (mix rows 0 .. kN).
    collapse_streams<kN>(p, v, t0, tokens, &mix_s[0][0], kRows);
}

// The row-group path (hc_pre): a grid of kRowGroups CTAs per token tile of kTile. kTileMajor: CTA b kRowGroups + g for
// group g of tile b, so that a tile's groups run side by side and its streams cross from DRAM once (in group-major
// order each group's tiles ran a wave apart and every group read the streams from DRAM again: 761 against 603 us at
// 8,192 tokens on an H100); else CTA g tiles + b, group-major, which measured 4-19 % faster from 128 to 1,024 tokens
// (2026-12-06; why, not measured). The order never changes bits. CTA (b, g) chains rows [g kPer, g kPer + kPer) and
// the sum of squares for each of its tokens with hc_mix_kernel's strided columns, fmaf order and trees, so
// every value has the per-token kernel's bits; it derives its rows' mix (the operations of hc_mix_kernel's lane 0 on
// each element) and group 0, which holds the pre rows, collapses the streams.
template <int kN, int kTile, bool kTileMajor, bool kStaged>
__global__ void __launch_bounds__(kHcThreads, 2) hc_mix_rows_kernel(HcMixParams p) {
    constexpr int kRows = (2 + kN) * kN;
    constexpr int kPer = (kRows + kRowGroups - 1) / kRowGroups;
    static_assert(kPer >= kN, "group 0 holds every pre row");
    extern __shared__ __align__(16) uint8_t staged[];  // kStaged: StagedChunk's ring
    __shared__ float partial[kTile][kWarps][kPer + 1];
    __shared__ float pre_s[kTile][kN];
    const int64_t tiles = (p.tokens + kTile - 1) / kTile;
    const int group = int(kTileMajor ? blockIdx.x % kRowGroups : blockIdx.x / tiles), row0 = group * kPer;
    const int64_t t0 = int64_t(kTileMajor ? blockIdx.x / kRowGroups : blockIdx.x % tiles) * kTile, width = kN * p.dim;
    const int tokens = int(p.tokens - t0 < kTile ? p.tokens - t0 : kTile);
    const __nv_bfloat16* v[kTile];
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt) v[tt] = p.streams + (t0 + (tt < tokens ? tt : tokens - 1)) * width;
    const float* fn_row[kPer];
    bool is_row[kPer];
#pragma unroll
    for (int q = 0; q < kPer; ++q) {
        is_row[q] = row0 + q < kRows;
        fn_row[q] = p.fn + int64_t(is_row[q] ? row0 + q : 0) * width;
    }

    // 1. Per-thread chains: acc[tt][q] for row row0 + q, acc[tt][kPer] the sum of squares.
    float acc[kTile][kPer + 1];
#pragma unroll
    for (int tt = 0; tt < kTile; ++tt)
#pragma unroll
        for (int q = 0; q <= kPer; ++q) acc[tt][q] = 0.0f;
    constexpr int kUnroll = kRowUnroll<kTile>;
    // kUnroll strided columns from i0; kWhole: all inside the row, so no bound checks (as hc_mix_split_kernel's).
    auto chain_columns = [&](auto whole, int64_t i0) {
        constexpr bool kWhole = decltype(whole)::value;
        float x[kUnroll][kTile], f[kUnroll][kPer];
        const __nv_bfloat16* vs[kTile];
        const float* fs[kPer];
#pragma unroll
        for (int tt = 0; tt < kTile; ++tt) vs[tt] = v[tt] + i0;
#pragma unroll
        for (int q = 0; q < kPer; ++q) fs[q] = fn_row[q] + i0;
#pragma unroll
        for (int s = 0; s < kUnroll; ++s) {
            const bool in = kWhole || i0 + int64_t(s) * kHcThreads < width;
#pragma unroll
            for (int tt = 0; tt < kTile; ++tt) x[s][tt] = in ? bf16_to_f32(vs[tt][s * kHcThreads]) : 0.0f;
#pragma unroll
            for (int q = 0; q < kPer; ++q) f[s][q] = is_row[q] && in ? __ldg(fs[q] + s * kHcThreads) : 0.0f;
        }
#pragma unroll
        for (int s = 0; s < kUnroll; ++s) {
            if (!kWhole && i0 + int64_t(s) * kHcThreads >= width) break;
#pragma unroll
            for (int q = 0; q < kPer; ++q)
#pragma unroll
                for (int tt = 0; tt < kTile; ++tt) acc[tt][q] = fmaf(f[s][q], x[s][tt], acc[tt][q]);
#pragma unroll
            for (int tt = 0; tt < kTile; ++tt) acc[tt][kPer] = fmaf(x[s][tt], x[s][tt], acc[tt][kPer]);
        }
    };
    if constexpr (kStaged) {
        // The same chains from shared memory: chunk c holds columns c kStagedCols .. + kStagedCols - 1, so a thread's
        // columns come in the same ascending order (tid, tid + 256, ...), each with the same fmafs.
        using C = StagedChunk<kTile, kPer>;
        const int chunks = int(width / kStagedCols);
        const unsigned ring = smem_addr(staged);
        // The thread's copies of a chunk, as chunk 0's sources and their places in a slot (later chunks: the sources
        // kStagedCols columns further). Copy i = tid + 256 j: stream row i / (kStagedCols / 8), mixer row i /
        // (kStagedCols / 4), 16 bytes each; a mixer row past kRows is not copied (its chains read zeros).
        constexpr int kXCopies = kTile * kStagedCols / 8, kFCopies = kPer * kStagedCols / 4;
        constexpr int kXPer = (kXCopies + kHcThreads - 1) / kHcThreads,
                      kFPer = (kFCopies + kHcThreads - 1) / kHcThreads;
        const __nv_bfloat16* x_src[kXPer];
        const float* f_src[kFPer];
        unsigned x_dst[kXPer], f_dst[kFPer];
        bool x_copies[kXPer], f_copies[kFPer];
#pragma unroll
        for (int j = 0; j < kXPer; ++j) {
            const int i = int(threadIdx.x) + kHcThreads * j, tt = i / (kStagedCols / 8), at = i % (kStagedCols / 8) * 8;
            x_copies[j] = i < kXCopies;
            x_src[j] = p.streams + (t0 + (tt < tokens ? tt : tokens - 1)) * width + at;
            x_dst[j] = C::x + (tt * kStagedCols + at) * 2;
        }
#pragma unroll
        for (int j = 0; j < kFPer; ++j) {
            const int i = int(threadIdx.x) + kHcThreads * j, q = i / (kStagedCols / 4), at = i % (kStagedCols / 4) * 4;
            f_copies[j] = i < kFCopies && row0 + q < kRows;
            f_src[j] = p.fn + int64_t(f_copies[j] ? row0 + q : 0) * width + at;
            f_dst[j] = C::f + (q * kStagedCols + at) * 4;
        }
        auto load = [&](int c) {
            const unsigned base = ring + (c % kStagedChunks) * C::bytes;
            const int64_t col0 = int64_t(c) * kStagedCols;
#pragma unroll
            for (int j = 0; j < kXPer; ++j)
                if (x_copies[j]) cp_async16(base + x_dst[j], x_src[j] + col0);
#pragma unroll
            for (int j = 0; j < kFPer; ++j)
                if (f_copies[j]) cp_async16(base + f_dst[j], f_src[j] + col0);
        };
#pragma unroll
        for (int c = 0; c < kStagedChunks - 1; ++c) {
            if (c < chunks) load(c);
            cp_async_commit();
        }
        for (int c = 0; c < chunks; ++c) {
            cp_async_wait<kStagedChunks - 2>();
            __syncthreads();  // chunk c landed for every thread; every thread is past chunk c - 1, whose slot refills
            if (c + kStagedChunks - 1 < chunks) load(c + kStagedChunks - 1);
            cp_async_commit();
            const uint8_t* chunk = staged + (c % kStagedChunks) * C::bytes;
            const __nv_bfloat16* xs = reinterpret_cast<const __nv_bfloat16*>(chunk + C::x) + threadIdx.x;
            const float* fs = reinterpret_cast<const float*>(chunk + C::f) + threadIdx.x;
#pragma unroll
            for (int s = 0; s < kStagedCols / kHcThreads; ++s) {
                float x[kTile], f[kPer];
#pragma unroll
                for (int tt = 0; tt < kTile; ++tt) x[tt] = bf16_to_f32(xs[tt * kStagedCols + s * kHcThreads]);
#pragma unroll
                for (int q = 0; q < kPer; ++q) f[q] = is_row[q] ? fs[q * kStagedCols + s * kHcThreads] : 0.0f;
#pragma unroll
                for (int q = 0; q < kPer; ++q)
#pragma unroll
                    for (int tt = 0; tt < kTile; ++tt) acc[tt][q] = fmaf(f[q], x[tt], acc[tt][q]);
#pragma unroll
                for (int tt = 0; tt < kTile; ++tt) acc[tt][kPer] = fmaf(x[tt], x[tt], acc[tt][kPer]);
            }
        }
        cp_async_wait<0>();
    } else {
        for_each_round<kUnroll>(width, chain_columns);
    }
    // 2. The same tree.
    reduce_over_cta(acc, partial);

    // 3. The mix, a thread per (token, row) of this CTA.
    if (threadIdx.x < tokens * kPer) {
        const int tt = threadIdx.x / kPer, q = threadIdx.x % kPer, m = row0 + q;
        if (m < kRows) {
            const int64_t t = t0 + tt;
            const float mean_sq = __fdiv_rn(partial[tt][0][kPer], float(width));
            const float rho = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.norm_eps)));
            const float logit = __fmul_rn(partial[tt][0][q], rho);
            if (p.logits) p.logits[t * kRows + m] = logit;
            float mix;
            if (m < kN) {
                mix = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(logit, p.scale[0]), p.base[m])), p.hc_eps);
                pre_s[tt][m] = mix;
            } else if (m < 2 * kN) {
                mix = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(logit, p.scale[1]), p.base[m])));
            } else {  // comb's inputs: hc_sinkhorn normalizes them
                mix = __fadd_rn(__fmul_rn(logit, p.scale[2]), p.base[m]);
            }
            p.mix[t * kRows + m] = mix;
        }
    }
    if (group != 0) return;  // the whole CTA: only group 0 collapses
    __syncthreads();

    // 4. Collapse the un-normalized streams with pre.
    collapse_streams<kN>(p, v, t0, tokens, &pre_s[0][0], kN);
}

// The rms_norm after hc_pre on the split path (hc_pre_norm): rms_norm's thread t sums the squares of elements
// t + 256 j in ascending j (rms_norm.cu); here element d of x lies in CTA (d / 256) % kCluster, so every CTA stores its
// rounded x into rank 0's [chunk j][t] table, rank 0 runs rms_norm's chains and trees on it and returns the factor.
// The table holds x as the bf16 it is (a lane pair's two values a word): what crosses to rank 0 through distributed
// shared memory, ~16-20 bytes a ns into an SM, is half of what f32 entries made it.
constexpr int kNormChunks = 32;  // rows of up to 32 x 256 elements (V4-Flash 4096, V4-Pro 7168)
static_assert(kHcThreads == 256, "rms_norm's and quantize_held_row's thread layout");

// The table's words arrive by st.async on rank 0's `table_in`, the factor on each CTA's `factor_in`: rank 0 waits for
// the table, every CTA for its factor, and no cluster barrier is needed (no CTA can leave while being written: each
// waits for what is pushed into it).
template <int kCluster>
__device__ __forceinline__ float cluster_rms_factor(const uint16_t* chunks, int64_t dim, float eps, int rank,
                                                    uint64_t* table_in, uint64_t* factor_in) {
    __shared__ double warp_sums[kHcThreads / 32];
    __shared__ float factor;
    if (rank == 0) {
        mbarrier_wait(table_in, 0);  // every CTA's x is in rank 0's table
        double sum = 0.0;
        const int count = int((dim + kHcThreads - 1) / kHcThreads);
        for (int j = 0; j < count; ++j) {
            const double v = __uint_as_float(uint32_t(chunks[j * kHcThreads + threadIdx.x]) << 16);
            sum += v * v;
        }
#pragma unroll
        for (int m = 16; m > 0; m /= 2) sum += __shfl_xor_sync(kFull, sum, m);
        if (threadIdx.x % 32 == 0) warp_sums[threadIdx.x / 32] = sum;
        __syncthreads();
        if (threadIdx.x < kCluster) {
            double total = 0.0;
            for (int w = 0; w < kHcThreads / 32; ++w) total += warp_sums[w];
            const float mean_sq = float(total / double(dim));
            const float r = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, eps)));
            store_to_cluster_shared(cluster_shared_address(&factor, int(threadIdx.x)), __float_as_uint(r),
                                    cluster_shared_address(factor_in, int(threadIdx.x)));
        }
    }
    mbarrier_wait(factor_in, 0);  // the factor is in this CTA
    return factor;
}

// grid (kCluster, tokens), clusters of kCluster along x. Each value u in [0, kRows] (u = kRows: the sum of squares)
// is the sum of four quarters that CTAs of ranks u / kQuarterRows * 4 + q compute exactly as hc_mix_kernel's threads
// of warps q and q + 4 do (see the file comment and step 1).
// kNorm: x is then rms-normalized in place (and quantized where norm.q is set) with rms_norm's arithmetic.
template <int kN, bool kHead, int kCluster, bool kNorm = false>
__global__ void __cluster_dims__(kCluster, 1, 1) __launch_bounds__(kHcThreads)
    hc_mix_split_kernel(HcMixParams p, RmsNormParams norm) {
    constexpr int kRows = kHead ? kN : (2 + kN) * kN;
    constexpr int kValues = kRows + 1;
    static_assert(kWarps == 8 && kValues <= 32, "the tree's quarters are warps q and q + 4; warp 0 holds every value");
    __shared__ float pre_s[kN];
    cg::cluster_group cluster = cg::this_cluster();
    const int rank = int(cluster.block_rank());
    const int64_t t = blockIdx.y, width = kN * p.dim;
    const __nv_bfloat16* v = p.streams + t * width;
    phase_mark(p.phase_clock, 0);
    // What the CTAs push into each other's shared memory lands by st.async on the receiver's barriers, so a receiver
    // waits for its own data, not for every CTA at a cluster barrier: `quarters_in` (every quarter sum, step 2), and
    // with the norm `table_in` (rank 0: the CTAs' x, step 5) and `factor_in` (the norm's factor from rank 0).
    // Initialized before the split cluster barrier below, whose wait precedes every push.
    constexpr int kValuesBytes = 4 * kValues * 4;  // four quarters of every value
    __shared__ uint64_t quarters_in, table_in, factor_in;
    if (threadIdx.x == 0) {
        mbarrier_init(&quarters_in, 1);
        if (kNorm) mbarrier_init(&table_in, 1), mbarrier_init(&factor_in, 1);
        mbarrier_inits_visible();
        mbarrier_arm(&quarters_in, kValuesBytes);
        if (kNorm && rank == 0) mbarrier_arm(&table_in, int((p.dim + kHcThreads - 1) / kHcThreads) * kHcThreads * 2);
        if (kNorm) mbarrier_arm(&factor_in, 4);
    }
    // Split cluster barrier: arrive now, wait before the first remote store (every CTA of the cluster has started
    // and initialized its barriers by then, the precondition of distributed shared memory), so its latency hides
    // behind the loads.
    asm volatile("barrier.cluster.arrive.relaxed.aligned;\n" ::: "memory");

    // The weights steps 3 and 5 read after cluster barriers (which no load crosses), requested now: their round trips
    // overlap step 1's instead of following the barriers at the end of the chain.
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float mix_scale[3] = {0.0f, 0.0f, 0.0f}, mix_base = 0.0f;
    if (warp == 0) {
        mix_base = p.base[lane < kRows ? lane : 0];
        mix_scale[0] = p.scale[0];
        if constexpr (!kHead) mix_scale[1] = p.scale[1], mix_scale[2] = p.scale[2];
    }
    constexpr int kHeld = kNorm ? kNormChunks / kCluster : 1;
    float norm_weight[kHeld];
#pragma unroll
    for (int i = 0; i < kHeld; ++i) {
        const int64_t d = (rank + int64_t(kCluster) * i) * kHcThreads + threadIdx.x;
        norm_weight[i] = kNorm && norm.weight ? norm.weight[d < p.dim ? d : 0] : 0.0f;
    }

    // 1. Per-thread chains: the per-token kernel's thread t chains columns t + 256 j of a row in ascending j (fmaf),
    // and its tree adds the 8 warps' sums as ((s0 + s4) + (s2 + s6)) + ((s1 + s5) + (s3 + s7)). So a row's work splits
    // into four quarters, quarter q the threads of warps q and q + 4, whose sum s_q + s_{q+4} is all the tree needs of
    // them. CTA rank r chains quarter r % 4 of kQuarterRows rows, [kQuarterRows (r / 4), + kQuarterRows): every CTA
    // the same load (V4-Flash: 6 quarter rows, 96 KB of mixer; whole values dealt round-robin left half the CTAs two
    // rows, 128 KB, the other half one). Warp w takes the quarter's threads of warp q + 4 (w % 2) for the CTA's rows
    // w / 2, w / 2 + 4, ...; the warps of slot 3 also chain the sum of squares, which the ranks of row block 0 push.
    constexpr int kQuarterRows = kRows * 4 / kCluster;
    static_assert(kCluster % 4 == 0 && kRows * 4 % kCluster == 0, "whole quarter rows a CTA");
    constexpr int kPerWarp = (kQuarterRows + 3) / 4;
    static_assert((kQuarterRows + 1) * kCluster <= kHcThreads, "a thread a pushed value and target");
    const int quarter = rank % 4, row0 = rank / 4 * kQuarterRows, slot = warp / 2, tree_warp = quarter + 4 * (warp % 2);
    const float* fn_row[kPerWarp];
    bool is_row[kPerWarp];
#pragma unroll
    for (int q = 0; q < kPerWarp; ++q) {
        const int local = slot + 4 * q;
        is_row[q] = local < kQuarterRows;
        fn_row[q] = p.fn + int64_t(row0 + (is_row[q] ? local : 0)) * width;
    }
    float acc[kPerWarp], square = 0.0f;
#pragma unroll
    for (int q = 0; q < kPerWarp; ++q) acc[q] = 0.0f;
    constexpr int kUnroll = kSplitUnroll<kCluster>;
    // kUnroll strided columns from i0; kWhole: all of them lie inside the row, so no load or fmaf needs a bound check
    // (the checks and their 64-bit compares were ~3/4 of the loop's instructions, 930 a round of 32 columns).
    auto chain_columns = [&](auto whole, int64_t i0) {
        constexpr bool kWhole = decltype(whole)::value;
        const __nv_bfloat16* vs = v + i0;
        const float* fs[kPerWarp];
#pragma unroll
        for (int q = 0; q < kPerWarp; ++q) fs[q] = fn_row[q] + i0;
        float x[kUnroll], f[kPerWarp][kUnroll];
#pragma unroll
        for (int s = 0; s < kUnroll; ++s) {
            const bool in = kWhole || i0 + int64_t(s) * kHcThreads < width;
            x[s] = in ? bf16_to_f32(vs[s * kHcThreads]) : 0.0f;
#pragma unroll
            for (int q = 0; q < kPerWarp; ++q) f[q][s] = is_row[q] && in ? __ldg(fs[q] + s * kHcThreads) : 0.0f;
        }
#pragma unroll
        for (int s = 0; s < kUnroll; ++s) {
            if (!kWhole && i0 + int64_t(s) * kHcThreads >= width) break;
#pragma unroll
            for (int q = 0; q < kPerWarp; ++q) acc[q] = fmaf(f[q][s], x[s], acc[q]);
            square = fmaf(x[s], x[s], square);
        }
    };
    if (is_row[0] || slot == 3) for_each_round<kUnroll>(width, chain_columns, tree_warp * 32 + lane);  // warp-uniform
    phase_mark(p.phase_clock, 1);
    // 2. The tree's 5 shuffle levels in each warp, then its first level over the warps: the quarter sums.
    __shared__ float warp_sums[4][2][kPerWarp + 1];  // [slot][w % 2][row q of the slot | the sum of squares]
#pragma unroll
    for (int q = 0; q <= kPerWarp; ++q) {
        float value = q < kPerWarp ? acc[q] : square;
#pragma unroll
        for (int o = 16; o > 0; o /= 2) value += __shfl_xor_sync(kFull, value, o);
        if (lane == 0) warp_sums[slot][warp % 2][q] = value;
    }
    __syncthreads();
    phase_mark(p.phase_clock, 2);
    asm volatile("barrier.cluster.wait.aligned;\n" ::: "memory");
    // Push each quarter sum into every CTA's `quarters` (st.async onto its `quarters_in`); each CTA waits for its
    // own. No CTA can leave while being written: each waits for every push into it.
    __shared__ float quarters[4][kValues];  // every quarter sum of the token, pushed here by the CTA that chained it
    if (threadIdx.x < (kQuarterRows + 1) * kCluster) {
        const int i = threadIdx.x / kCluster, target = threadIdx.x % kCluster;
        const int from = i < kQuarterRows ? i % 4 : 3, q = i < kQuarterRows ? i / 4 : kPerWarp;
        const float sum = warp_sums[from][0][q] + warp_sums[from][1][q];  // s_quarter + s_{quarter + 4}
        const int u = i < kQuarterRows ? row0 + i : kRows;
        if (i < kQuarterRows || row0 == 0)
            store_to_cluster_shared(cluster_shared_address(&quarters[quarter][u], target), __float_as_uint(sum),
                                    cluster_shared_address(&quarters_in, target));
    }
    mbarrier_wait(&quarters_in, 0);
    phase_mark(p.phase_clock, 3);
    auto sums = [&](int u) { return (quarters[0][u] + quarters[2][u]) + (quarters[1][u] + quarters[3][u]); };

    // 3. The mix in warp 0, one lane per mixer row, the operations of hc_mix_kernel's thread 0 on each element.
    if (warp == 0) {
        const int u = lane < kRows ? lane : 0;
        const float mean_sq = __fdiv_rn(sums(kRows), float(width));
        const float rho = __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(mean_sq, p.norm_eps)));
        const float logit = __fmul_rn(sums(u), rho);
        float m = 0.0f;
        if (u < kN) {
            m = __fadd_rn(sigmoid(__fadd_rn(__fmul_rn(logit, mix_scale[0]), mix_base)), p.hc_eps);
            if (lane < kN) pre_s[lane] = m;
        } else if (!kHead && u < 2 * kN) {
            m = __fmul_rn(2.0f, sigmoid(__fadd_rn(__fmul_rn(logit, mix_scale[1]), mix_base)));
        } else if (!kHead) {
            m = __fadd_rn(__fmul_rn(logit, mix_scale[2]), mix_base);
        }
        if (rank == 0) {  // comb's inputs as they are: hc_sinkhorn normalizes them
            if (lane < kRows) {
                if (p.logits) p.logits[t * kRows + lane] = logit;
                p.mix[t * kRows + lane] = m;
            }
        }
    }
    __syncthreads();
    phase_mark(p.phase_clock, 4);

    // 4. Collapse, this CTA's slice of d: streams in order, then bf16.
    float pre[kN];
#pragma unroll
    for (int j = 0; j < kN; ++j) pre[j] = pre_s[j];
    auto collapse = [&](int64_t d) {
        float out = 0.0f;
#pragma unroll
        for (int j = 0; j < kN; ++j) out = __fadd_rn(out, __fmul_rn(pre[j], bf16_to_f32(v[j * p.dim + d])));
        return f32_to_bf16(out);
    };
    if constexpr (!kNorm) {
        for (int64_t d = int64_t(rank) * kHcThreads + threadIdx.x; d < p.dim; d += int64_t(kCluster) * kHcThreads)
            p.x_out[t * p.dim + d] = collapse(d);
    } else {
        // 5. rms_norm of x: this CTA's elements d = 256 (rank + kCluster i) + t, held as rms_norm holds them.
        __shared__ __align__(16) uint16_t chunks[kNormChunks * kHcThreads];  // rank 0's is the table (bf16 bits)
        const unsigned table_in_0 = cluster_shared_address(&table_in, 0);
        float held[kHeld];
#pragma unroll
        for (int i = 0; i < kHeld; ++i) {
            const int64_t chunk = rank + int64_t(kCluster) * i, d = chunk * kHcThreads + threadIdx.x;
            held[i] = d < p.dim ? bf16_to_f32(collapse(d)) : 0.0f;
            if (chunk * kHcThreads < p.dim) {  // uniform over the CTA; the even lane stores the pair
                const uint32_t bits = __float_as_uint(held[i]) >> 16, odd = __shfl_down_sync(kFull, bits, 1);
                if (threadIdx.x % 2 == 0)
                    store_to_cluster_shared(cluster_shared_address(&chunks[chunk * kHcThreads + threadIdx.x], 0),
                                            bits | odd << 16, table_in_0);
            }
        }
        phase_mark(p.phase_clock, 5);
        const float r = cluster_rms_factor<kCluster>(chunks, p.dim, norm.eps, rank, &table_in, &factor_in);
        phase_mark(p.phase_clock, 6);
        const int64_t n_blocks = (p.dim + kActQuantBlock - 1) / kActQuantBlock;
#pragma unroll
        for (int i = 0; i < kHeld; ++i) {
            const int64_t first = (rank + int64_t(kCluster) * i) * kHcThreads, d = first + threadIdx.x;
            const float normed = __fmul_rn(held[i], r);
            const __nv_bfloat16 out = f32_to_bf16(norm.weight ? __fmul_rn(norm_weight[i], normed) : normed);
            if (d < p.dim) p.x_out[t * p.dim + d] = out;
            if (norm.q && first < p.dim) {  // uniform over the CTA
                const float q_held[1] = {d < p.dim ? bf16_to_f32(out) : 0.0f};
                quantize_held_row<1>(q_held, first, p.dim, norm.q + t * p.dim, norm.q_scales + t * n_blocks);
            }
        }
    }
    phase_mark(p.phase_clock, 7);
}

}  // namespace

namespace detail {

bool hc_pre_norm_fused(const HcMixParams& p, HcMixPath path) {
    if (path == HcMixPath::kAuto && hc_specialised(p.n_hc)) path = hc_mix_auto_path(p.tokens, false);
    return path == HcMixPath::kSplit && hc_specialised(p.n_hc) && p.dim <= int64_t(kNormChunks) * kHcThreads;
}

void launch_hc_mix(const HcMixParams& p, bool head, cudaStream_t stream, HcMixPath path, const RmsNormParams* norm) {
    if (path == HcMixPath::kAuto && !hc_specialised(p.n_hc)) path = HcMixPath::kGeneric;
    if (path == HcMixPath::kAuto) path = hc_mix_auto_path(p.tokens, head);
    if (norm && (head || !hc_pre_norm_fused(p, path))) {  // the two launches
        launch_hc_mix(p, head, stream, path);
        return launch_rms_norms({norm, 1}, stream);
    }
    if (path == HcMixPath::kGeneric) return launch_hc_mix_generic(p, head, stream);  // normalizes comb itself
    const RmsNormParams no_norm{};
    // A wide cluster where the device co-schedules one (else clusters of kHcCluster: the same values, the same bits).
    const void* wide = p.n_hc == 2 ? reinterpret_cast<const void*>(hc_mix_split_kernel<2, false, kHcWideCluster>)
                                   : reinterpret_cast<const void*>(hc_mix_split_kernel<4, false, kHcWideCluster>);
    if (path == HcMixPath::kSplit && norm) {  // hc_pre_norm in one launch
        const void* wide_norm =
            p.n_hc == 2 ? reinterpret_cast<const void*>(hc_mix_split_kernel<2, false, kHcWideCluster, true>)
                        : reinterpret_cast<const void*>(hc_mix_split_kernel<4, false, kHcWideCluster, true>);
        if (p.tokens <= kWideTokens && resident_clusters(wide_norm, kHcThreads, kHcWideCluster) >= 1) {
            const dim3 grid(kHcWideCluster, unsigned(p.tokens));
            if (p.n_hc == 2)
                hc_mix_split_kernel<2, false, kHcWideCluster, true><<<grid, kHcThreads, 0, stream>>>(p, *norm);
            if (p.n_hc == 4)
                hc_mix_split_kernel<4, false, kHcWideCluster, true><<<grid, kHcThreads, 0, stream>>>(p, *norm);
        } else {
            const dim3 grid(kHcCluster, unsigned(p.tokens));
            if (p.n_hc == 2) hc_mix_split_kernel<2, false, kHcCluster, true><<<grid, kHcThreads, 0, stream>>>(p, *norm);
            if (p.n_hc == 4) hc_mix_split_kernel<4, false, kHcCluster, true><<<grid, kHcThreads, 0, stream>>>(p, *norm);
        }
    } else if (path == HcMixPath::kSplit && !head && p.tokens <= kWideTokens &&
               resident_clusters(wide, kHcThreads, kHcWideCluster) >= 1) {
        const dim3 grid(kHcWideCluster, unsigned(p.tokens));
        if (p.n_hc == 2) hc_mix_split_kernel<2, false, kHcWideCluster><<<grid, kHcThreads, 0, stream>>>(p, no_norm);
        if (p.n_hc == 4) hc_mix_split_kernel<4, false, kHcWideCluster><<<grid, kHcThreads, 0, stream>>>(p, no_norm);
    } else if (path == HcMixPath::kSplit) {
        const dim3 grid(kHcCluster, unsigned(p.tokens));
        if (p.n_hc == 2 && !head)
            hc_mix_split_kernel<2, false, kHcCluster><<<grid, kHcThreads, 0, stream>>>(p, no_norm);
        if (p.n_hc == 2 && head) hc_mix_split_kernel<2, true, kHcCluster><<<grid, kHcThreads, 0, stream>>>(p, no_norm);
        if (p.n_hc == 4 && !head)
            hc_mix_split_kernel<4, false, kHcCluster><<<grid, kHcThreads, 0, stream>>>(p, no_norm);
        if (p.n_hc == 4 && head) hc_mix_split_kernel<4, true, kHcCluster><<<grid, kHcThreads, 0, stream>>>(p, no_norm);
    } else if (path == HcMixPath::kRowGroups) {
        if (head) throw_cuda_error(cudaErrorInvalidValue, "hc_head has no row-group path", __FILE__, __LINE__);
        // One token per tile up to 32 tokens, two up to 128 (more CTAs where the tiles are few), four up to
        // kRowTile8Tokens, eight above: each CTA reads its mixer rows once per tile from L2, 393 KB at V4's width,
        // 4.3 GB at 8,192 tokens in tiles of 4 (~5.7 TB/s at the kernel's 758 us on an H100), 2.6 GB in tiles of 8.
        // Tile-major from kRowTileMajorTokens on (the kernel's comment says why).
        // Staged chains at tiles of 8 where the row is whole chunks and its rows are 16-byte aligned (kStagedCols;
        // every V4 shape). At tiles of 1 to 4 staging measured slower (+15 % at 1,024 tokens to +90 % at 32, H100,
        // 2026-12-06): each chunk's mixer rows cross for fewer tokens, and those tiles' chains were not the bound.
        auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
        const bool staged = (p.n_hc * p.dim) % kStagedCols == 0 && aligned(p.streams) && aligned(p.fn);
        auto launch = [&](auto tile) {
            constexpr int kTile = decltype(tile)::value;
            const unsigned grid = unsigned((p.tokens + kTile - 1) / kTile * kRowGroups);
            auto run = [&](auto n, auto tile_major, auto stage) {
                constexpr int kN = decltype(n)::value;
                constexpr bool kStaged = decltype(stage)::value;
                const auto kernel = hc_mix_rows_kernel<kN, kTile, decltype(tile_major)::value, kStaged>;
                constexpr int kPer = ((2 + kN) * kN + kRowGroups - 1) / kRowGroups;
                constexpr int smem = kStaged ? StagedChunk<kTile, kPer>::smem : 0;
                // The kernel's static shared memory counts against the 48 KiB a launch may take unasked: every staged
                // launch asks.
                if constexpr (kStaged)
                    DSV4_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
                kernel<<<grid, kHcThreads, smem, stream>>>(p);
            };
            auto in_order = [&](auto tile_major) {
                auto with = [&](auto n) {
                    if constexpr (kTile == 8) {  // no staged kernel is instantiated for the other tiles
                        if (staged) return run(n, tile_major, std::true_type{});
                    }
                    run(n, tile_major, std::false_type{});
                };
                if (p.n_hc == 2) with(std::integral_constant<int, 2>{});
                if (p.n_hc == 4) with(std::integral_constant<int, 4>{});
            };
            if (p.tokens >= kRowTileMajorTokens)
                in_order(std::true_type{});
            else
                in_order(std::false_type{});
        };
        if (p.tokens <= 32)
            launch(std::integral_constant<int, 1>{});
        else if (p.tokens <= 128)
            launch(std::integral_constant<int, 2>{});
        else if (p.tokens <= kRowTile8Tokens)
            launch(std::integral_constant<int, 4>{});
        else
            launch(std::integral_constant<int, 8>{});
    } else if (path == HcMixPath::kPerToken) {
        const dim3 grid(unsigned(p.tokens));
        if (p.n_hc == 2 && !head) hc_mix_kernel<2, false, 1><<<grid, kHcThreads, 0, stream>>>(p);
        if (p.n_hc == 2 && head) hc_mix_kernel<2, true, 1><<<grid, kHcThreads, 0, stream>>>(p);
        if (p.n_hc == 4 && !head) hc_mix_kernel<4, false, 1><<<grid, kHcThreads, 0, stream>>>(p);
        if (p.n_hc == 4 && head) hc_mix_kernel<4, true, 1><<<grid, kHcThreads, 0, stream>>>(p);
    } else {
        const dim3 grid(unsigned((p.tokens + kMixTile - 1) / kMixTile));
        if (p.n_hc == 2 && !head) hc_mix_kernel<2, false, kMixTile><<<grid, kHcThreads, 0, stream>>>(p);
        if (p.n_hc == 2 && head) hc_mix_kernel<2, true, kMixTile><<<grid, kHcThreads, 0, stream>>>(p);
        if (p.n_hc == 4 && !head) hc_mix_kernel<4, false, kMixTile><<<grid, kHcThreads, 0, stream>>>(p);
        if (p.n_hc == 4 && head) hc_mix_kernel<4, true, kMixTile><<<grid, kHcThreads, 0, stream>>>(p);
    }
    DSV4_CUDA_CHECK(cudaGetLastError());
    if (!head && !p.defer_sinkhorn) launch_hc_sinkhorn(p, stream);
}

}  // namespace detail
}  // namespace dsv4::cuda
