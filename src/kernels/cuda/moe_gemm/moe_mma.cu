// moe_gemm on the tensor cores (MoeGemmPath::kMma, the default): FP4 experts times FP8-quantized activations as
// f16 mma.sync, with the official FP4 linear's structure (spec §3): per 32-column block (MXFP4; per 16-column half
// for NVFP4, whose scales are per 16) a partial product from zero on the tensor cores, rescaled by
// a_scale[k/128] x w_scale and added to the output's f32 sum in ascending K.
//
// Arithmetic of one output y[slot, n] (the same instructions whatever the tile, the batch or the grid):
//   for part = 0, 1 (the 32-column blocks j of K with j % 2 == part; two warps share a row tile):
//     for each weight-scale block b in those 32-column blocks (32 columns MXFP4, 16 NVFP4), ascending:
//       acc = tensor-core sum (f32 accumulate, from +0) of x[k] * (w[k] * 2^-14), k in b, order fixed below
//       sum_part = fma(acc, a_scale[k/128] * (w_scale[b] * 2^14), sum_part)   (from +0; f32 products rounded)
//   y = bf16_rn(sum_0 + sum_1)
// with x[k] the e4m3 activation and w[k] the e2m1 value, both exact in f16, so every product is exact. w_scale is
// the E8M0 power of two (MXFP4) or f32(e4m3 scale) * global (NVFP4). Why 2^-14: an e2m1 nibble s e1 e0 m placed
// at f16 bits 15 | 11 10 | 9 is exactly its value times 2^-14 (0.5 becomes the subnormal 2^-15), so the decode is
// two shifts and two masks; the 2^14 goes back into the scale, where it is exact. mma.sync computes each output from
// its own row of W and column of x, so a token's results do not depend on which tokens share the launch.
//
// Roles: D (16 weight rows x 8 tokens) += W (16 x 16, the A operand) x^T (16 x 8, the B operand). Lane = 4 g + t.
//   a0 = (row g, k 2t, 2t+1) a1 = (row g+8, same k) a2 = (row g, k 2t+8, 2t+9) a3 = (row g+8, same k)
//   b0 = (k 2t, 2t+1, token g) b1 = (k 2t+8, 2t+9, token g)
//   c0, c1 = (row g, tokens 2t, 2t+1) c2, c3 = (row g+8, tokens 2t, 2t+1)
// Physical columns of logical k (two MMAs per 32-column block; lane t's columns):
//   MXFP4: lane t holds columns 8t..8t+7 (one 32-bit word of nibbles). MMA 0 takes pairs (8t, 8t+4) as k 2t, 2t+1
//          and (8t+1, 8t+5) as k 2t+8, 2t+9; MMA 1 the pairs (8t+2, 8t+6), (8t+3, 8t+7). Both MMAs sum into one acc.
//   NVFP4: lane t holds columns 4t..4t+3 and 16+4t..16+4t+3. MMA 0 takes (4t, 4t+2), (4t+1, 4t+3): the first 16
//          columns only; MMA 1 the same of the second 16. Each MMA has its own acc and its own scale.
// Activation columns are paired the same way (prmt + cvt.rn.f16x2.e4m3x2), so W and x meet at the same k.
//
// Grid: persistent, 1-D; every CTA lists the active experts (non-empty slot ranges of expert_offsets, on the device,
// so the launch needs no host sync and is capturable), then takes items (matrix, active expert, row tile). A CTA of
// 2 kRowGroups warps computes 16 kRowGroups weight rows (16 per warp pair, one warp per K part; 64 rows, or 32 and
// 16 for decode steps with few active experts: moe_mma_row_groups) for passes of kTokens slots of its expert; K
// streams through shared memory in stages of 128 columns (8 or 4 stages in flight, 16-byte cp.async), padded so the
// fragment reads are bank-conflict-free. Single-slot passes (a batch-1 step) hold their activation row whole instead of
// staging it, and one more warp issues their copies and makes their promotion factors (kLoader, kFactors below); on
// sm_90+ it copies each weight stage of a 64-row tile as one tensor copy (kTensor below). Tested
// in tests/gpu/moe_gemm_test.cpp (cpu::linear per expert, rows independent of the batch, the pair launch equal to two
// launches).
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/common/bulk_copy.cuh"
#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/common/mma.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/common/tensor_map.h"
#include "kernels/cuda/moe_expert/swiglu_math.cuh"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"
#include "kernels/cuda/quant/fp8_act_codec.cuh"

namespace dsv4::cuda {
namespace {

using namespace moe_mma;

// Warps along the weight rows, 16 rows each: 4 (64-row tiles) for the passes of prefill and batched decode; 2 or 1
// for the decode passes of small batches, whose few active experts would otherwise leave SMs without a tile (one
// V4-Flash expert's w1 is 32 tiles of 64 rows; a batch-1 step on two GPUs has ~3 experts a GPU for 396 CTA slots).
// The row tile never changes bits: each output is one warp pair's, whatever the tile.
constexpr int kMaxRowGroups = 4;
constexpr int kStageCols = 128;                  // one activation-scale block
constexpr int kWRowBytes = kStageCols / 2 + 16;  // 64 bytes of nibbles + pad: rows g land on distinct bank groups
constexpr int kARowBytes = kStageCols + 32;      // 128 e4m3 + pad: 8-byte reads of 16 lanes conflict-free
constexpr int kScaleRowBytes = 16;               // the aligned words covering a row's scales of one stage
constexpr int kStageRowBytes = kStageCols / 2;   // a weight row's nibbles of one stage, unpadded

// Shared-memory layout of one stage. kRowHeld: the activations are not staged (the pass holds its row whole, below).
// kTensor: the weights arrive as one tensor copy of the tile's 64 rows x 64 bytes (below): rows at a 64-byte pitch,
// their 16-byte chunks swizzled (the reads undo it), where the 16-byte copies pad each row to 80.
template <int kTokens, int kRowGroups, bool kRowHeld = false, bool kTensor = false>
struct Stage {
    static constexpr int kRowsPerCta = 16 * kRowGroups;
    static constexpr int w_pitch = kTensor ? kStageRowBytes : kWRowBytes;
    static constexpr int w = 0;
    static constexpr int a = w + kRowsPerCta * w_pitch;
    static constexpr int w_scale = a + (kRowHeld ? 0 : kTokens * kARowBytes);
    static constexpr int a_scale = w_scale + kRowsPerCta * kScaleRowBytes;
    static constexpr int bytes = (a_scale + (kRowHeld ? 0 : kTokens * 4) + 15) / 16 * 16;
};

// A single-slot pass's activation row, held whole (kSingle): the f16 pairs the two MMAs of each lane take in every
// 32-column block (x_pairs' pairs converted once: [K / 32 blocks][4 lanes t][4 words], 16 bytes a lane and block),
// then the row's K / 128 scales, then (kGated: computed here from W1 x and W3 x) its K e4m3 codes, which the pairs
// are made from (copied rows are converted from global memory). Every warp converted that one row's pairs again,
// every stage, and every stage staged the row's 128 columns again.
// The codes start 16-byte aligned (x_pairs reads them in 8-byte words; the K / 32 bytes of scales before them are not
// a multiple of 16 for every K: the fixtures' K of 128 and 384 faulted, 2026-12-05).
__host__ __device__ constexpr int64_t held_codes_offset(int64_t k) {
    return 2 * k + ((k / 128) * 4 + 15) / 16 * 16;
}
__host__ __device__ constexpr int64_t held_row_bytes(int64_t k, bool codes) {
    return held_codes_offset(k) + (codes ? k : 0);
}

// Stages in flight: 8 for the decode passes (8 or 16 tokens), 4 for the wider passes of prefill, which are bound by
// their instructions, and for the general path (K % 128 != 0), whose bounded loads would not fit the registers of 3
// CTAs per SM with more.
template <int kTokens, bool kWholeStages>
__host__ __device__ constexpr int stage_count() {
    return kTokens <= 16 && kWholeStages ? 8 : 4;
}
// kTensor (single-slot passes of 64-row tiles, where the device has the tensor-memory accelerator): the loader copies
// each stage's weights as one 2D tensor copy of the tile's 64 rows x 64 bytes out of the checkpoint's rows (the map in
// ExpertMaps), which streams as fast as plain loads where the 16-byte copies of the same rows did not (docs/perf.md,
// "A stage of the batch-1 expert pass by one tensor-map copy from the checkpoint's row order"). The box lands with
// the 64-byte swizzle: 16-byte chunk c of row r at chunk c ^ ((r >> 1) & 3), so the rows g and g + 2 that a warp's
// fragment reads take (the same banks at a 64-byte pitch) land on distinct banks. The swizzle follows the
// shared-memory address, so the stages start 1 KiB-aligned (kTensorAlign more bytes to place them).
constexpr int kTensorAlign = 1024;
struct ExpertMaps {
    CUtensorMap map[2];  // the launch's matrices (mats[0], mats[1]) as rows of k/2 bytes, boxes of 64 x 64 bytes
};
struct NoMaps {};

template <int kTokens, int kRowGroups, bool kWholeStages, bool kRowHeld = false, bool kGated = false,
          bool kTensor = false>
__host__ __device__ constexpr int smem_bytes(int64_t experts, int64_t k) {
    return (kTensor ? kTensorAlign : 0) + list_bytes(experts) +
           stage_count<kTokens, kWholeStages>() * Stage<kTokens, kRowGroups, kRowHeld, kTensor>::bytes +
           int(kRowHeld ? (held_row_bytes(k, kGated) + 15) / 16 * 16 : 0);
}

// Warp groups that share out the 32-column blocks of every stage: a decode step has few items per SM, and one warp
// per 16 rows would leave the schedulers idle on its dependent chain (decode, MMA, rescale). The split fixes the
// summation, so it must not depend on the pass width (which follows the batch).
constexpr int kSplit = 2;
template <int kRowGroups>
__host__ __device__ constexpr int threads() {
    return 32 * kRowGroups * kSplit;
}
// kLoader (single-slot passes: a batch-1 step): one more warp issues every copy of the stages, so the 2 kRowGroups
// warps that multiply spend none of their instructions on the copies' addresses, predicates and issue (34 of the 152
// a warp issued per stage, SASS), and wait only at the stage's barrier; it also makes the promotions' factors
// (kFactors). The loader waits for stage kt's copies before that barrier and refills the slot of stage kt - 1 after
// it, as every thread did. Not for passes that stage activations: there the one warp's copies came late (H100,
// 2026-12-05: the 8-slot passes of batches 2-8 +13-15 %, the step at batch 4 +5 %).
template <bool kSingle>
__host__ __device__ constexpr bool loader_warp() {
    return kSingle;
}
template <int kRowGroups, bool kSingle>
__host__ __device__ constexpr int cta_threads() {
    return threads<kRowGroups>() + (loader_warp<kSingle>() ? 32 : 0);
}
template <int kTokens, int kRowGroups>
__host__ __device__ constexpr int min_blocks() {
    // 3 x 8 warps per SM where decode steps run (8-token passes; 16 at batches of ~200 and more, where 2 CTAs per SM
    // left the schedulers idle 38 % of the time: docs/perf.md, "The routed experts' 16-token passes at 3 CTAs per SM"),
    // as many warps with narrower row tiles
    return kTokens == 8 || kTokens == 16 ? 3 * kMaxRowGroups / kRowGroups : 1;
}

// kWholeStages (K % 128 == 0, every V4 shape): every stage holds four whole 32-column blocks and every row's scales
// of a stage are whole aligned words, so the loads need no bounds and each warp's two blocks unroll. Otherwise a
// stage may end early and the scale words are found by their offset. The arithmetic is the same on both.
// kSingle (8-slot passes of launches where no expert holds more than one slot: a batch-1 decode step): only slot 0 of
// a pass is ever stored, which the lanes hold in their accumulators c0 and c2 (token 2t with t = 0), so the odd
// tokens' promotions (c1, c3) and their activation scales are not computed. The same instructions on c0 and c2. Its
// stages carry only weights: each pass first holds its slot's activation row in shared memory (held_row_bytes) while
// its first weight stages load, copied from the activations or, kGated (Args::swiglu), computed from W1 x and W3 x as
// cuda::swiglu and act_quant would write it; the same MMA operands as a staged row's.
// kTensor (above): the loader copies each stage's weights as one tensor copy that completes on the stage slot's
// mbarrier, and waits for it before the stage's barrier; the reads undo the swizzle. The same bytes meet the same MMAs
// either way.
template <int kTokens, int kRowGroups, ExpertFormat kFormat, bool kWholeStages, bool kSingle = false,
          bool kGated = false, bool kTensor = false>
__global__ void __launch_bounds__(cta_threads<kRowGroups, kSingle>(), min_blocks<kTokens, kRowGroups>())
    moe_mma_kernel(Args p, const __grid_constant__ std::conditional_t<kTensor, ExpertMaps, NoMaps> maps) {
    constexpr int kThreads = threads<kRowGroups>();  // the warps that multiply
    constexpr bool kLoader = loader_warp<kSingle>();
    constexpr int kCtaThreads = cta_threads<kRowGroups, kSingle>();
    constexpr int kLoaders = kLoader ? 32 : kThreads;  // the threads that issue the stages' copies
    constexpr bool kNv = kFormat == ExpertFormat::kNvfp4;
    constexpr int kTn = kTokens / 8;                  // 8-token MMA tiles per pass
    constexpr int kScaleBytesPerStage = kNv ? 8 : 4;  // scale bytes of one row per 128 columns
    constexpr int kScaleWords = kNv ? 3 : 2;          // aligned words that cover them whatever their offset
    constexpr int kStages = stage_count<kTokens, kWholeStages>();
    static_assert(!kGated || (kSingle && kWholeStages), "computed activations: single-slot passes, whole stages");
    static_assert(!kSingle || kWholeStages, "a held row: whole stages");
    static_assert(!kTensor || (kSingle && kRowGroups == kMaxRowGroups), "tensor copies: single-slot 64-row tiles");
    constexpr bool kRowHeld = kSingle;
    // kFactors (single-slot MXFP4 passes): the loader also turns each stage's block scales into the promotions'
    // factors a_scale x w_scale (promote's FMUL, the same bits) in place of the row's staged codes, one stage ahead
    // (after the refill it issued, so no stage leaves flight), and the warps that multiply load them.
    constexpr bool kFactors = kSingle && !kNv;
    static_assert(!kFactors || (kLoader && kScaleRowBytes == 16), "four f32 factors over a row's staged codes");
    using L = Stage<kTokens, kRowGroups, kRowHeld, kTensor>;
    constexpr int kRowsPerCta = L::kRowsPerCta;
    static_assert(kRowsPerCta * 4 % kLoaders == 0 && (kLoader || kRowsPerCta * 4 == kLoaders),
                  "whole 16-byte W chunks per loading thread and stage (one where every thread loads)");
    constexpr int kWPer = kRowsPerCta * 4 / kLoaders;                   // W chunks a loading thread copies
    constexpr int kScalePer = (kRowsPerCta + kLoaders - 1) / kLoaders;  // rows whose scale words it copies
    static_assert(!kSingle || kTokens == 8, "single-slot passes are 8-slot passes");
    constexpr int kOutputs = kSingle ? 2 : 4;  // accumulators a lane promotes and stores: c0, c2 (and c1, c3)
    auto acc_of = [](int o) { return kSingle ? 2 * o : o; };
    static_assert(kTokens <= kLoaders, "one activation scale per loading thread and stage");
    extern __shared__ __align__(16) uint8_t smem[];
    __shared__ int warp_counts[kCtaThreads / 32];
    __shared__ __align__(8) uint64_t stage_full[kTensor ? kStages : 1];  // kTensor: a slot's bytes have landed
    int* active = reinterpret_cast<int*>(smem);
    uint8_t* stages = smem + list_bytes(p.experts);
    if constexpr (kTensor) {  // kTensorAlign bytes were added for this
        stages += (kTensorAlign - smem_addr(stages) % kTensorAlign) % kTensorAlign;
        static_assert(L::w == 0 && L::bytes % 512 == 0,
                      "every stage's weights 512-byte aligned (the swizzle's period)");
    }
    const unsigned stages_addr = smem_addr(stages);
    uint8_t* held_pairs = stages + kStages * L::bytes;  // kRowHeld: the row's pairs, scales and (kGated) codes
    float* held_scale = reinterpret_cast<float*>(held_pairs + 2 * p.k);
    uint8_t* held_codes = held_pairs + held_codes_offset(p.k);

    const int64_t total = p.offsets[p.experts];
    const int64_t n_tiles = (p.n + kRowsPerCta - 1) / kRowsPerCta;
    if (int64_t(blockIdx.x) >= (total < p.experts ? total : p.experts) * n_tiles * p.mat_count) return;

    // 1. The active experts in ascending order.
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int row_group = warp % kRowGroups, k_part = warp / kRowGroups;
    const bool loads = !kLoader || warp == kThreads / 32, multiplies = !kLoader || warp < kThreads / 32;
    const int li = kLoader ? lane : tid;  // this thread's index among the loading threads
    if constexpr (kTensor)
        if (loads && li == 0) init_stage_barriers<kStages>(stage_full);  // ordered by the list's barriers
    uint32_t full_parity = 0;  // kTensor: bit s, the phase slot s completes next
    const int count = list_active_experts<kCtaThreads>(p.offsets, p.experts, active, warp_counts);

    const int64_t k_half = p.k / 2, scale_cols = kNv ? p.k / 16 : p.k / 32, kb = (p.k + 127) / 128;
    const int kt_count = int(kb);
    const int64_t items = int64_t(count) * n_tiles * p.mat_count;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t e = active[item / (n_tiles * p.mat_count)];
        const int mat_i = int(item / n_tiles % p.mat_count);
        const Matrix m = mat_i ? p.mats[1] : p.mats[0];  // no dynamic index into the parameters (a local copy)
        const int64_t n0 = item % n_tiles * kRowsPerCta;
        const float global = kNv ? __ldg(m.w_global + e) : 1.0f;
        const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
        auto row_of = [&](int r) {  // weight row of tile row r (rows past N repeat the last; never stored)
            const int64_t n = n0 + r;
            return e * p.n + (n < p.n ? n : p.n - 1);
        };

        // Loader roles (fixed per item): loading thread li copies the 16-byte parts li % 4 of W rows li / 4 + kLoaders
        // / 4 i and the scale words of rows li + kLoaders j (those below kRowsPerCta).
        const int w_part = li % 4;
        const uint8_t* w_src[kWPer];
        unsigned w_dst[kWPer];
#pragma unroll
        for (int i = 0; i < kWPer; ++i) {
            const int r = li / 4 + kLoaders / 4 * i;
            w_src[i] = m.w + row_of(r) * k_half + w_part * 16;
            w_dst[i] = L::w + r * kWRowBytes + w_part * 16;
        }
        const int64_t scale_total = p.experts * p.n * scale_cols;
        int64_t scale_first[kScalePer];  // row li + kLoaders j's first scale
#pragma unroll
        for (int j = 0; j < kScalePer; ++j) {
            const int r = li + kLoaders * j;
            scale_first[j] = r < kRowsPerCta ? row_of(r) * scale_cols : 0;
        }
        // Byte offset of this lane's rows g and g + 8 within their staged scale words (the same every stage:
        // a stage advances by 4 or 8 bytes); 0 when the rows' scales are whole words.
        auto lead = [&](int r) { return kWholeStages ? 0 : int((row_of(r) * scale_cols) & 3); };
        const int row_g = row_group * 16 + g, lead_g = lead(row_g), lead_g8 = lead(row_g + 8);

        for (int64_t s0 = begin; s0 < end; s0 += kTokens) {
            const int tokens = end - s0 < kTokens ? int(end - s0) : kTokens;
            auto act_row = [&](int r) -> int64_t {
                const int64_t slot = s0 + (r < tokens ? r : tokens - 1);
                return p.row_index ? p.row_index[slot] : slot;
            };
            // Only the pass's own activation rows are staged: a pass with fewer slots than its width (a decode
            // step's experts hold one or two) reads its last row for the rest, whose outputs are never stored.
            // Staging copies of that row sent every CTA's duplicate requests for the same bytes to one L2 slice.
            // (Their 4-byte scales are still staged per slot of the width, the last one repeated.)
            constexpr int kAChunks = kTokens * 8, kAPerThread = (kAChunks + kLoaders - 1) / kLoaders;
            const uint8_t* a_src[kAPerThread];
            unsigned a_dst[kAPerThread];
            int a_part[kAPerThread];
#pragma unroll
            for (int i = 0; i < kAPerThread; ++i) {
                const int c = li + kLoaders * i, r = c / 8;
                a_part[i] = c % 8;
                a_src[i] = !kRowHeld && c < tokens * 8 ? p.a + act_row(r) * p.k + a_part[i] * 16 : nullptr;
                a_dst[i] = L::a + r * kARowBytes + a_part[i] * 16;
            }
            const float* as_src = !kRowHeld && li < kTokens ? p.a_scale + act_row(li) * kb : nullptr;
            auto staged_row = [&](int r) { return r < tokens ? r : tokens - 1; };

            auto load = [&](int slot, int kt) {
                const unsigned base = stages_addr + slot * L::bytes;
                if constexpr (kTensor) {
                    if (li == 0)
                        tensor_copy_to_stage(base + L::w, &maps.map[mat_i], kt * kStageRowBytes, int(e * p.n + n0),
                                             kRowsPerCta * kStageRowBytes, stage_full + slot);
                }
                if constexpr (kWholeStages) {
                    if constexpr (!kTensor)
#pragma unroll
                        for (int i = 0; i < kWPer; ++i) cp_async16(base + w_dst[i], w_src[i] + kt * kStageRowBytes);
#pragma unroll
                    for (int i = 0; i < kAPerThread; ++i)
                        if (!kRowHeld && a_src[i]) cp_async16(base + a_dst[i], a_src[i] + kt * kStageCols);
#pragma unroll
                    for (int j = 0; j < kScalePer; ++j) {
                        const int r = li + kLoaders * j;
                        if (r >= kRowsPerCta) break;
                        const uint8_t* src = m.w_scale + scale_first[j] + kt * kScaleBytesPerStage;
#pragma unroll
                        for (int q = 0; q < kScaleBytesPerStage / 4; ++q)
                            cp_async4(base + L::w_scale + r * kScaleRowBytes + 4 * q, src + 4 * q, 4);
                    }
                } else {  // every thread loads (kWPer == kScalePer == 1, li == tid)
                    const bool w_ok = int64_t(kt) * 64 + w_part * 16 < k_half;
                    cp_async16(base + w_dst[0], w_ok ? w_src[0] + int64_t(kt) * kStageRowBytes : w_src[0],
                               w_ok ? 16 : 0);
#pragma unroll
                    for (int i = 0; i < kAPerThread; ++i)
                        if (a_src[i]) {
                            const bool ok = int64_t(kt) * kStageCols + a_part[i] * 16 < p.k;
                            cp_async16(base + a_dst[i], ok ? a_src[i] + int64_t(kt) * kStageCols : a_src[i],
                                       ok ? 16 : 0);
                        }
                    if (tid < kRowsPerCta) {
                        const int64_t first = scale_first[0] + int64_t(kt) * kScaleBytesPerStage,
                                      word0 = first & ~int64_t(3);
#pragma unroll
                        for (int j = 0; j < kScaleWords; ++j) {
                            const int64_t at = word0 + 4 * j;
                            const int64_t left = scale_total - at;
                            const int bytes = left >= 4 ? 4 : left > 0 ? int(left) : 0;
                            cp_async4(base + L::w_scale + tid * kScaleRowBytes + 4 * j,
                                      bytes ? m.w_scale + at : m.w_scale, bytes);
                        }
                    }
                }
                if (!kRowHeld && as_src) cp_async4(base + L::a_scale + li * 4, as_src + kt, 4);
            };

            float sum[kTn][4];
#pragma unroll
            for (int nt = 0; nt < kTn; ++nt)
#pragma unroll
                for (int i = 0; i < 4; ++i) sum[nt][i] = 0.0f;

            // kFactors with an even stage count (every V4 shape): the stages two at a time between CTA barriers (the
            // loop at the end of this pass), so the prologue leaves two slots free for the first refill.
            const bool pairs = kFactors && kt_count % 2 == 0;
            const int ahead = pairs ? kStages - 2 : kStages - 1;
            if (loads)
#pragma unroll
                for (int s = 0; s < kStages - 1; ++s) {
                    if (s < kt_count && s < ahead) load(s, s);
                    cp_async_commit();
                }
            if constexpr (kRowHeld) {
                // The pass's one activation row while its first weight stages load (every warp, the loader's too).
                const int blocks = int(p.k / kStageCols);
                if constexpr (kGated) {
                    // Warp w takes the 128-column blocks w, w + warps, ..., lane l four columns of each, with
                    // swiglu_element and then act_quant's scale (the block's |max| over the rounded values) and codes.
                    const int64_t stride = p.swiglu.stride ? p.swiglu.stride : p.k;
                    for (int blk = warp; blk < blocks; blk += kCtaThreads / 32) {
                        const int64_t slot = s0, col = int64_t(blk) * kStageCols + 4 * lane;
                        const bool weighted = p.swiglu.routing_weights != nullptr;
                        const float weight =
                            weighted ? p.swiglu.routing_weights[p.swiglu.sorted_assignment[slot]] : 0.0f;
                        const uint2 gate = *reinterpret_cast<const uint2*>(p.swiglu.gate + slot * stride + col);
                        const uint2 up = *reinterpret_cast<const uint2*>(p.swiglu.up + slot * stride + col);
                        const __nv_bfloat16* g4 = reinterpret_cast<const __nv_bfloat16*>(&gate);
                        const __nv_bfloat16* u4 = reinterpret_cast<const __nv_bfloat16*>(&up);
                        float v[4], amax = 0.0f;
#pragma unroll
                        for (int i = 0; i < 4; ++i) {
                            v[i] = bf16_to_f32(swiglu_element(g4[i], u4[i], p.swiglu.limit, weighted, weight));
                            amax = fmaxf(amax, fabsf(v[i]));
                        }
                        const float scale = e8m0_to_f32(fp8_scale_exponent(group_max<32>(amax)));
                        uint32_t codes = 0;
#pragma unroll
                        for (int i = 0; i < 4; ++i) codes |= uint32_t(fp8_code(v[i], scale)) << (8 * i);
                        *reinterpret_cast<uint32_t*>(held_codes + col) = codes;
                        if (lane == 0) held_scale[blk] = scale;
                    }
                    __syncthreads();
                } else {
                    for (int blk = tid; blk < blocks; blk += kCtaThreads)
                        held_scale[blk] = p.a_scale[act_row(0) * kb + blk];
                }
                // The MMAs' operand pairs of every 32-column block and lane t, as a staged row's are converted.
                const uint8_t* codes = kGated ? held_codes : p.a + act_row(0) * p.k;
                for (int task = tid; task < int(p.k / 32) * 4; task += kCtaThreads) {
                    *reinterpret_cast<uint4*>(held_pairs + 16 * task) =
                        x_f16_pairs<kNv>(codes + 32 * (task / 4), task % 4);
                }
                // The first stage's barrier below orders these stores before any read.
            }
            // kFactors: stage kt's factors over its rows' codes, by the loader once the stage has landed (its chain
            // a stage, beside the multiplying warps': the codes' fast path).
            auto make_factors = [&](int kt) {
                const float as = held_scale[kt];
                uint8_t* scales = stages + (kt % kStages) * L::bytes + L::w_scale;
#pragma unroll
                for (int j = 0; j < kScalePer; ++j) {
                    const int r = li + kLoaders * j;
                    if (r >= kRowsPerCta) break;
                    const float4 ws =
                        e8m0_word_times_2_14(*reinterpret_cast<const uint32_t*>(scales + r * kScaleRowBytes));
                    const float4 f = make_float4(__fmul_rn(as, ws.x), __fmul_rn(as, ws.y), __fmul_rn(as, ws.z),
                                                 __fmul_rn(as, ws.w));
                    *reinterpret_cast<float4*>(scales + r * kScaleRowBytes) = f;
                }
            };
            // kFactors: a warp's reads of a stage at offsets fixed for the pass (its two blocks' words of rows g and
            // g + 8, their factors) and of the held row at a stride a stage, where the general loop below recomputed
            // each address from the block's index every stage (~15 of the ~91 instructions a warp issued a stage).
            const int swizzle = kTensor ? (g >> 1) & 3 : 0;  // rows g and g + 8 alike (kTensor above)
            const int w_at[2] = {L::w + row_g * L::w_pitch + (k_part ^ swizzle) * 16 + 4 * t,
                                 L::w + row_g * L::w_pitch + ((k_part + kSplit) ^ swizzle) * 16 + 4 * t};
            const int factor_at = L::w_scale + row_g * kScaleRowBytes + 4 * k_part;  // then + 4 kSplit a block
            const uint8_t* held_at = held_pairs + 16 * (4 * k_part + t);            // then + 64 kSplit a block
            // kFactors: stage kt's products into the sum, by the multiplying warps (see below).
            auto multiply_held_stage = [&](int kt) {
                const uint8_t* st = stages + (kt % kStages) * L::bytes;
                const uint8_t* held = held_at + 256 * kt;
#pragma unroll
                for (int j = 0; j < 4 / kSplit; ++j) {  // blocks b = k_part + kSplit j
                    const uint8_t* w = st + w_at[j];
                    uint32_t w0[4], w1[4];
                    w_decode(*reinterpret_cast<const uint32_t*>(w),
                             *reinterpret_cast<const uint32_t*>(w + 8 * L::w_pitch), w0, w1);
                    const uint4 x = *reinterpret_cast<const uint4*>(held + 64 * kSplit * j);
                    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                    mma_16816_f16(acc, w0, x.x, x.y);
                    mma_16816_f16(acc, w1, x.z, x.w);
                    const float* f = reinterpret_cast<const float*>(st + factor_at + 4 * kSplit * j);
                    sum[0][0] = __fmaf_rn(acc[0], f[0], sum[0][0]);
                    sum[0][2] = __fmaf_rn(acc[2], f[8 * kScaleRowBytes / 4], sum[0][2]);
                }
            };
            if constexpr (kFactors) {
                __syncthreads();  // the held row's scales
                if (loads) {
                    if (pairs) {  // the prologue's groups: stages 0 .. kStages - 3, then an empty one
                        cp_async_wait<kStages - 3>();
                        make_factors(0);
                        make_factors(1);
                    } else {
                        cp_async_wait<kStages - 2>();
                        make_factors(0);
                    }
                }
            }
            // Two stages a CTA barrier: each warp's chains of two stages between barriers, half the barriers (the
            // stage's time was its warps' latency between two barriers, not their instructions: docs/perf.md, "The
            // batch-1 expert passes' loader"). The loader refills the two slots the previous pair read and makes the
            // next pair's factors; the same products in the same order.
            for (int kt = 0; pairs && kt < kt_count; kt += 2) {
                if constexpr (kTensor)
                    if (loads) {
                        wait_stage_barrier(stage_full + kt % kStages, full_parity, kt % kStages);
                        wait_stage_barrier(stage_full + (kt + 1) % kStages, full_parity, (kt + 1) % kStages);
                    }
                __syncthreads();
                if (loads) {
                    for (int s = kt + kStages - 2; s < kt + kStages; ++s) {
                        if (s < kt_count) load(s % kStages, s);
                        cp_async_commit();
                    }
                    if (kt + 2 < kt_count) {  // groups of stages up to kt + 3 done: at most the four after pending
                        cp_async_wait<kStages - 4>();
                        make_factors(kt + 2);
                        make_factors(kt + 3);
                    }
                }
                if (multiplies) {
                    multiply_held_stage(kt);
                    multiply_held_stage(kt + 1);
                }
            }
            for (int kt = 0; !pairs && kt < kt_count; ++kt) {
                if (loads && !kFactors) cp_async_wait<kStages - 2>();
                if constexpr (kTensor)
                    if (loads) wait_stage_barrier(stage_full + kt % kStages, full_parity, kt % kStages);
                __syncthreads();
                if (loads) {
                    if (kt + kStages - 1 < kt_count) load((kt + kStages - 1) % kStages, kt + kStages - 1);
                    cp_async_commit();
                    if (kFactors && kt + 1 < kt_count) {  // the refill above is in flight: stage kt + 1 has landed
                        cp_async_wait<kStages - 2>();
                        make_factors(kt + 1);
                    }
                }
                if (!multiplies) continue;

                if constexpr (kFactors) {  // these passes' stage (kTn 1, whole stages) at its fixed offsets
                    multiply_held_stage(kt);
                    continue;
                }
                const uint8_t* st = stages + (kt % kStages) * L::bytes;
                const uint8_t* w_g = st + L::w + row_g * L::w_pitch;
                const uint8_t* w_g8 = w_g + 8 * L::w_pitch;
                const uint8_t* sc_g = st + L::w_scale + row_g * kScaleRowBytes + lead_g;
                const uint8_t* sc_g8 = st + L::w_scale + (row_g + 8) * kScaleRowBytes + lead_g8;
                float as[kTn][2];
#pragma unroll
                for (int nt = 0; nt < kTn; ++nt) {
                    if constexpr (kRowHeld) {
                        as[nt][0] = held_scale[kt];
                        as[nt][1] = 0.0f;
                    } else {
                        const float* a_s = reinterpret_cast<const float*>(st + L::a_scale) + nt * 8 + 2 * t;
                        as[nt][0] = a_s[0];
                        as[nt][1] = kSingle ? 0.0f : a_s[1];
                    }
                }
                int blocks = 4;
                if constexpr (!kWholeStages) {
                    const int64_t left = p.k - int64_t(kt) * kStageCols;
                    blocks = left >= kStageCols ? 4 : int(left / 32);
                }
#pragma unroll
                for (int j = 0; j < 4 / kSplit; ++j) {  // this warp's blocks: b = k_part (mod kSplit), ascending
                    const int b = k_part + kSplit * j;
                    if (!kWholeStages && b >= blocks) break;
                    uint32_t w0[4], w1[4];
                    w_fragments<kNv>(w_g, w_g8, b ^ swizzle, t, w0, w1);
                    float ws_g[2], ws_g8[2];
                    w_scales<kNv>(sc_g, sc_g8, b, global, ws_g, ws_g8);
#pragma unroll
                    for (int nt = 0; nt < kTn; ++nt) {
                        uint4 x;  // the f16 pairs: x.x, x.y the first MMA's b0, b1; x.z, x.w the second's
                        if constexpr (kRowHeld) {
                            x = *reinterpret_cast<const uint4*>(held_pairs + 16 * ((kt * 4 + b) * 4 + t));
                        } else {
                            x = x_f16_pairs<kNv>(st + L::a + staged_row(nt * 8 + g) * kARowBytes + 32 * b, t);
                        }
                        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
                        mma_16816_f16(acc, w0, x.x, x.y);
                        if constexpr (kNv) {
                            promote<kSingle>(sum[nt], acc, ws_g[0], ws_g8[0], as[nt][0], as[nt][1]);
#pragma unroll
                            for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
                        }
                        mma_16816_f16(acc, w1, x.z, x.w);
                        promote<kSingle>(sum[nt], acc, ws_g[1], ws_g8[1], as[nt][0], as[nt][1]);
                    }
                }
            }
            cp_async_wait<0>();
            __syncthreads();  // every stage read: the partial sums may reuse them, the next pass refills them

            // The K parts' sums, added in ascending part order by part 0's warps.
            float* partial = reinterpret_cast<float*>(stages);  // [kSplit - 1][kRowGroups][32 lanes][kTn * 4]
            auto at = [&](int part, int nt, int i) {
                return partial + (((part - 1) * kRowGroups + row_group) * 32 + lane) * (kTn * 4) + nt * 4 + i;
            };
            if (k_part > 0 && multiplies)
#pragma unroll
                for (int nt = 0; nt < kTn; ++nt)
#pragma unroll
                    for (int o = 0; o < kOutputs; ++o) *at(k_part, nt, acc_of(o)) = sum[nt][acc_of(o)];
            __syncthreads();
            if (k_part == 0)
                for (int part = 1; part < kSplit; ++part)
#pragma unroll
                    for (int nt = 0; nt < kTn; ++nt)
#pragma unroll
                        for (int o = 0; o < kOutputs; ++o) {
                            const int i = acc_of(o);
                            sum[nt][i] = __fadd_rn(sum[nt][i], *at(part, nt, i));
                        }
            __syncthreads();

#pragma unroll
            for (int nt = 0; nt < kTn; ++nt)
#pragma unroll
                for (int o = 0; o < kOutputs; ++o) {
                    const int i = acc_of(o);
                    const int token = nt * 8 + 2 * t + (i & 1);
                    const int64_t n = n0 + row_g + (i >= 2 ? 8 : 0);
                    if (k_part == 0 && token < tokens && n < p.n)
                        m.y[(s0 + token) * p.n + n] = __float2bfloat16_rn(sum[nt][i]);
                }
        }
    }
}

template <int kTokens, int kRowGroups, ExpertFormat kFormat, bool kWholeStages, bool kSingle = false,
          bool kGated = false, bool kTensor = false>
cudaError_t launch(const Args& args, cudaStream_t stream, const ExpertMaps* maps = nullptr) {
    const auto kernel = moe_mma_kernel<kTokens, kRowGroups, kFormat, kWholeStages, kSingle, kGated, kTensor>;
    constexpr int kCtaThreads = cta_threads<kRowGroups, kSingle>();
    const int smem = smem_bytes<kTokens, kRowGroups, kWholeStages, kSingle, kGated, kTensor>(args.experts, args.k);
    const int64_t n_tiles = (args.n + 16 * kRowGroups - 1) / (16 * kRowGroups);
    const int64_t items = args.experts * n_tiles * args.mat_count,
                  resident = resident_ctas(reinterpret_cast<const void*>(kernel), kCtaThreads, smem);
    const int64_t grid = items < resident ? items : resident;
    if constexpr (kTensor)
        kernel<<<unsigned(grid), kCtaThreads, smem, stream>>>(args, *maps);
    else
        kernel<<<unsigned(grid), kCtaThreads, smem, stream>>>(args, NoMaps{});
    return cudaGetLastError();
}

// Narrow row tiles only for the decode passes (8 and 16 slots); the wider passes keep 64 rows.
template <int kTokens, ExpertFormat kFormat, bool kWholeStages, bool kSingle = false, bool kGated = false>
cudaError_t launch(const Args& args, int row_groups, cudaStream_t stream) {
    if constexpr (kTokens <= 16) {
        if (row_groups == 1) return launch<kTokens, 1, kFormat, kWholeStages, kSingle, kGated>(args, stream);
        if (row_groups == 2) return launch<kTokens, 2, kFormat, kWholeStages, kSingle, kGated>(args, stream);
    }
    return launch<kTokens, kMaxRowGroups, kFormat, kWholeStages, kSingle, kGated>(args, stream);
}

// maps (single-slot passes of 64-row tiles, whole stages): their stages by tensor copies.
template <ExpertFormat kFormat, bool kWholeStages>
cudaError_t launch(const Args& args, int tokens, int row_groups, bool single, cudaStream_t stream,
                   const ExpertMaps* maps) {
    const bool gated = args.swiglu.gate != nullptr;
    if (gated && (tokens != 8 || !kWholeStages)) return cudaErrorInvalidValue;  // moe_gemm_computes_swiglu
    if (maps && !(tokens == 8 && single && row_groups == kMaxRowGroups)) return cudaErrorInvalidValue;
    switch (tokens) {
        case 8:
            if constexpr (kWholeStages) {
                if (maps)
                    return gated ? launch<8, kMaxRowGroups, kFormat, true, true, true, true>(args, stream, maps)
                                 : launch<8, kMaxRowGroups, kFormat, true, true, false, true>(args, stream, maps);
                if (gated)
                    return single ? launch<8, kFormat, true, true, true>(args, row_groups, stream)
                                  : cudaErrorInvalidValue;  // single-slot passes only
                if (single) return launch<8, kFormat, true, true>(args, row_groups, stream);
            }
            return launch<8, kFormat, kWholeStages>(args, row_groups, stream);
        case 16:
            return launch<16, kFormat, kWholeStages>(args, row_groups, stream);
        case 32:
            return launch<32, kFormat, kWholeStages>(args, row_groups, stream);
        case 64:
            return launch<64, kFormat, kWholeStages>(args, row_groups, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

template <ExpertFormat kFormat>
cudaError_t launch(const Args& args, int tokens, int row_groups, bool whole_stages, bool single, cudaStream_t stream,
                   const ExpertMaps* maps) {
    return whole_stages ? launch<kFormat, true>(args, tokens, row_groups, single, stream, maps)
                        : launch<kFormat, false>(args, tokens, row_groups, single, stream, maps);
}

}  // namespace

int moe_mma_pass_tokens(int max_slots_per_expert, int expected_slots_per_expert) {
    // Wide enough for a typical active expert in one pass (a wider pass stages and multiplies duplicated rows), at
    // least 8 (one MMA tile); an expert above it takes further passes, each streaming its weights again.
    const int target = expected_slots_per_expert > 0 ? std::min(max_slots_per_expert, expected_slots_per_expert)
                                                     : (max_slots_per_expert + 3) / 4;
    int tokens = 8;
    while (tokens < 64 && tokens < target) tokens *= 2;
    return tokens;
}

int moe_mma_row_groups(int64_t active_experts, int64_t n, int mat_count, int sms) {
    // The tile whose busiest SM holds the fewest rows: with the work spread as CTAs of whole tiles, the step lasts as
    // long as that SM's share (docs/perf.md, "The routed experts' row tile at batch 1"). A narrower tile must cut
    // that share by more than it costs: each CTA stages the activations again and has its own prologue; at the same
    // rows per SM, 32-row tiles ran ~6 % slower than 64 and 16-row tiles ~20 % slower than 32, so 32 rows must cut
    // the share by an eighth and 16 rows by a quarter. Without an expectation, 64 rows.
    if (active_experts <= 0 || sms <= 0) return kMaxRowGroups;
    int best = kMaxRowGroups;
    int64_t best_rows = 0;
    for (int groups = kMaxRowGroups; groups >= 1; groups /= 2) {
        const int64_t rows = 16 * groups, items = active_experts * ((n + rows - 1) / rows) * mat_count;
        const int64_t busiest = (items + sms - 1) / sms * rows;
        const bool cuts_enough = groups == 2 ? busiest * 8 <= best_rows * 7 : busiest * 4 <= best_rows * 3;
        if (groups == kMaxRowGroups || cuts_enough) best = groups, best_rows = busiest;
    }
    return best;
}

namespace detail {
bool moe_mma_takes_wgmma(const MoeGemmParams& p) {
    // Passes of 8 slots only from batches of 16 tokens: below, an expert holds one slot or none and the step is the
    // weights' bandwidth, where the warp-MMA kernel's three CTAs of 64 rows per SM keep more of them in flight.
    // The warpgroup kernel loads the scales of four 128-column stages at once, in 16-byte copies.
    const int tokens = moe_mma_pass_tokens(p.max_slots_per_expert, p.expected_slots_per_expert);
    auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    return p.k % (4 * kStageCols) == 0 && aligned(p.a_scale) && aligned(p.w_scale) && aligned(p.second.w_scale) &&
           (tokens >= 16 || p.max_slots_per_expert >= 16) && device_has_wgmma();
}

cudaError_t launch_moe_mma(const MoeGemmParams& p, MoeMmaVariant variant, cudaStream_t stream, int row_groups) {
    Args args;
    args.a = p.a;
    args.a_scale = p.a_scale;
    args.row_index = p.row_index;
    args.offsets = p.expert_offsets;
    args.mats[0] = {p.w, p.w_scale, p.w_global, p.y};
    args.mats[1] = {p.second.w, p.second.w_scale, p.second.w_global, p.second.y};
    args.mat_count = p.second.w ? 2 : 1;
    args.experts = p.experts;
    args.n = p.n;
    args.k = p.k;
    args.swiglu = p.swiglu;
    args.fold_scales = p.fold_scales;
    const int tokens = moe_mma_pass_tokens(p.max_slots_per_expert, p.expected_slots_per_expert);
    if (variant == MoeMmaVariant::kChosen && moe_mma_takes_wgmma(p)) {
        if (p.swiglu.gate) return cudaErrorInvalidValue;  // moe_gemm_computes_swiglu
        return launch_moe_wgmma(args, p.format, tokens, stream);
    }
    const bool whole = variant != MoeMmaVariant::kGeneral && p.k % kStageCols == 0;
    // No expert holds two slots (a batch-1 decode step): the passes' single-slot kernel (same bits).
    const bool single = variant != MoeMmaVariant::kAllSlots && p.max_slots_per_expert == 1;
    if (row_groups == 0)
        row_groups = moe_mma_row_groups(p.expected_active_experts, p.n, args.mat_count, multiprocessor_count());
    ExpertMaps maps;
    const bool tensor = single && whole && tokens == 8 && row_groups == kMaxRowGroups && moe_mma_tensor_copies(p);
    if (tensor) {
        const int64_t rows = p.experts * p.n, k_half = p.k / 2;
        maps.map[0] = byte_matrix_map(p.w, rows, k_half, 16 * kMaxRowGroups, kStageRowBytes, true);
        if (p.second.w)
            maps.map[1] = byte_matrix_map(p.second.w, rows, k_half, 16 * kMaxRowGroups, kStageRowBytes, true);
    }
    return p.format == ExpertFormat::kMxfp4
               ? launch<ExpertFormat::kMxfp4>(args, tokens, row_groups, whole, single, stream, tensor ? &maps : nullptr)
               : launch<ExpertFormat::kNvfp4>(args, tokens, row_groups, whole, single, stream,
                                              tensor ? &maps : nullptr);
}

bool moe_mma_tensor_copies(const MoeGemmParams& p) {
    // 64-row tiles that lie inside one expert (N % 64 == 0, every V4 shape), rows whose pitch the map can take
    // (16-byte multiples: K % 32 == 0 is the contract), bases 16-byte aligned.
    auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; };
    return p.tensor_copies && p.n % (16 * kMaxRowGroups) == 0 && p.k % 128 == 0 && aligned(p.w) &&
           (!p.second.w || aligned(p.second.w)) && p.experts * p.n < (int64_t{1} << 31) && device_has_tensor_copies();
}
}  // namespace detail

cudaError_t launch_moe_mma(const MoeGemmParams& p, cudaStream_t stream) {
    return detail::launch_moe_mma(p, detail::MoeMmaVariant::kChosen, stream);
}

}  // namespace dsv4::cuda
