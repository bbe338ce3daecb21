// moe_gemm's passes of 8 (from batches of 16 tokens), 16, 32 and 64 slots (batched decode and prefill) on Hopper's
// warpgroup MMA: the same products, accumulators and promotions as moe_mma.cu's warp-MMA kernel (its header has the
// arithmetic), so the same bits, at a fraction of the instructions: one wgmma multiplies a warpgroup's 64 weight rows
// by the pass's kTokens tokens over 16 K, where mma.sync took kTokens / 2 warp instructions, and the CTA converts the
// pass's activations once, where each warp of the warp-MMA kernel converted its own (four times the same tokens).
//
// Roles: each warpgroup's A operand is W (its 64 rows, 16 per warp, in moe_mma.cu's fragments, decoded from the
// staged nibbles in registers), its B operand the pass's activations as f16 in shared memory (N = kTokens). The CTA
// converts the staged e4m3 activations of each 256-column stage once into sixteen k16 tiles, each k16 slot holding
// the column mma.sync's B fragment puts there (x_pairs: the two MMAs of a 32-column block see the same physical
// columns at the same k as before); W's two fragments of a block meet them in two wgmmas from a zero accumulator
// (MXFP4: one promotion per block; NVFP4: one per 16 columns), and the promotions go to the sum of the block's parity
// (the two K parts of moe_mma.cu), added part 0 + part 1 at the end and rounded to bf16. The wide MXFP4 passes fold
// the block scales into the decoded weights where an item's codes allow it (moe_mma_common.cuh, mxfp4_fold_factors):
// the same bits, one f16-pair multiply a weight register instead of an FMUL an output.
//
// Overlap: two accumulators, so a unit's wgmmas run while the previous unit is promoted; two f16 tiles, so stage
// kt + 1 is converted between stage kt's wgmmas (one barrier per stage). Grid: persistent over items (matrix, active
// expert, 128-row tile), as moe_mma.cu; CTA: two warpgroups (128 weight rows, kTokens tokens), K streaming through
// stages of 256 columns (16-byte cp.async; kStages below), the scales in groups of two stages. Needs K % 512 == 0 and
// 16-byte aligned scales (every V4 shape; the launcher takes the warp-MMA kernel otherwise). Tested bitwise against
// the warp-MMA kernel in tests/gpu/moe_gemm_test.cpp.
#include <type_traits>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"

namespace dsv4::cuda {
namespace {

using namespace moe_mma;

// A stage: 256 columns of K, eight 32-column blocks and two activation-scale blocks. A stage's fixed work (its
// barrier, its loads' addresses and predicates, the loop, the fences) was ~110 of the ~290 instructions a warp
// issued for a 128-column stage at 8 tokens; wider stages spread it over twice the weights.
constexpr int kStageCols = 256;
[[maybe_unused]] constexpr int kBlocks = kStageCols / 32;      // 32-column blocks (MXFP4 scale blocks) a stage
[[maybe_unused]] constexpr int kActBlocks = kStageCols / 128;  // activation-scale blocks a stage
constexpr int kWRowBytes = kStageCols / 2 + 16;                // as moe_mma.cu: fragment reads conflict-free
constexpr int kARowBytes = kStageCols + 32;
// The scales travel in groups of 512 columns, one 16-byte copy a row (MXFP4: 16 codes; NVFP4: 32 codes, two copies),
// where each 128 columns took a 4-byte copy, and likewise the activation scales (four f32 a token). Needs K % 512 ==
// 0 (every V4 shape).
constexpr int kGroupCols = 512, kGroupStages = kGroupCols / kStageCols;
// The f16 B tile of one k16 step: kTokens tokens x 16 k as core matrices (token block of 8, k half) at
// (token / 8) * 256 + half * 128, row token % 8 at 16 bytes each; the next step kTokens * 32 bytes further.
[[maybe_unused]] constexpr int kCoreK = 128, kCoreN = 256;  // unused where the kernel is compiled out (not sm_90a)
template <int kTokens>
constexpr int kStepBytes = kTokens * 32;
template <int kTokens>
constexpr int kB16Bytes = kStageCols / 16 * kStepBytes<kTokens>;  // one stage's k16 steps

// Two warpgroups per CTA, each 64 weight rows (the wgmma's M, 16 per warp): they share the staged and converted
// activations of the pass (one warpgroup per CTA, two CTAs per SM, measured 6-11 % slower: twice the conversions
// and activation loads per product).
constexpr int kRows = 128, kThreads = 256;
// Raw stages in flight (kt + 1 is converted while kt is multiplied, so at least 3): 4 for the 8-slot passes of batched
// decode, whose time is the weights' loads; 3 for the rest (16 slots: four stages left room for one CTA a SM, not two,
// and the pass ran 16-26 % slower; 32 and 64: their accumulators take one CTA's registers a SM anyway). In bytes as
// many as or more than the 128-column stages' 6 and 4.
template <int kTokens>
constexpr int kStages = kTokens >= 16 ? 3 : 4;
template <int kTokens>
constexpr int kMinBlocks = kTokens >= 32 ? 1 : 2;

template <int kTokens>
struct Stage {
    static constexpr int w = 0;
    static constexpr int a = w + kRows * kWRowBytes;
    static constexpr int bytes = a + kTokens * kARowBytes;
    static_assert(bytes % 16 == 0);
};

// One group's scales: each weight row's codes of its 512 columns, then each token's four activation scales.
template <int kTokens, bool kNv>
struct ScaleGroup {
    static constexpr int w_row = kNv ? 32 : 16;
    static constexpr int w = 0;
    static constexpr int a = w + kRows * w_row;
    static constexpr int bytes = a + kTokens * 16;
};
// Groups in flight: the one being read, the next, and the one loading (the loads run kStages - 1 stages ahead, at
// most two groups past the one being read).
constexpr int kScaleGroups = 3;
static_assert(kStages<8> - 1 <= kGroupStages + 1 && kStages<64> - 1 <= kGroupStages + 1);
static_assert(kStageCols % 128 == 0 && kGroupCols % kStageCols == 0);

template <int kTokens, bool kNv>
__host__ __device__ constexpr int smem_bytes(int64_t experts) {
    return 2 * kB16Bytes<kTokens> + list_bytes(experts) + kStages<kTokens> * Stage<kTokens>::bytes +
           kScaleGroups * ScaleGroup<kTokens, kNv>::bytes;
}

// The wgmma of one k16 step for a pass of kTokens (its N).
template <int kTokens>
__device__ __forceinline__ void wgmma_f16(float (&d)[kTokens / 2], const uint32_t (&a)[4], uint64_t b_desc,
                                          bool accumulate) {
    if constexpr (kTokens == 64)
        wgmma_m64n64k16_f16(d, a, b_desc, accumulate);
    else if constexpr (kTokens == 32)
        wgmma_m64n32k16_f16(d, a, b_desc, accumulate);
    else if constexpr (kTokens == 16)
        wgmma_m64n16k16_f16(d, a, b_desc, accumulate);
    else
        wgmma_m64n8k16_f16(d, a, b_desc, accumulate);
}

// Writes the f16 pair of e4m3 bytes 0, 1 of `x` at k slot 2t (half 0) of token n in k16 step `step`, and bytes 2, 3
// at the same slot of half 1 (k 2t + 8): where mma.sync's b0 and b1 take them.
template <int kTokens>
__device__ __forceinline__ void put_pairs(uint8_t* b16, int step, int n, int t, uint32_t x) {
    uint8_t* at = b16 + step * kStepBytes<kTokens> + (n / 8) * kCoreN + (n % 8) * 16 + 4 * t;
    *reinterpret_cast<uint32_t*>(at) = e4m3x2_to_f16x2(x);
    *reinterpret_cast<uint32_t*>(at + kCoreK) = e4m3x2_to_f16x2(x >> 16);
}

template <ExpertFormat kFormat, int kTokens>
__global__ void __launch_bounds__(kThreads, kMinBlocks<kTokens>) moe_wgmma_kernel(Args p) {
#if DSV4_WGMMA
    constexpr bool kNv = kFormat == ExpertFormat::kNvfp4;
    constexpr int kScaleBytesPerStage = kNv ? 2 * kBlocks : kBlocks;
    // MXFP4 passes of 32 and 64 slots fold the block scales into the weights where an item's codes allow it
    // (mxfp4_fold_factors): one f16-pair multiply per weight register instead of an FMUL per output.
    constexpr bool kFold = !kNv && kTokens >= 32;
    constexpr int kTn = kTokens / 8;  // n8 tiles of the pass
    constexpr int kStageCount = kStages<kTokens>, kStep = kStepBytes<kTokens>, kTile = kB16Bytes<kTokens>;
    using L = Stage<kTokens>;
    using G = ScaleGroup<kTokens, kNv>;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int warp_counts[kThreads / 32];
    uint8_t* b16 = smem;
    int* active = reinterpret_cast<int*>(smem + 2 * kTile);
    uint8_t* stages = smem + 2 * kTile + list_bytes(p.experts);
    uint8_t* groups = stages + kStageCount * L::bytes;
    const unsigned stages_addr = smem_addr(stages), groups_addr = smem_addr(groups);
    const uint64_t b_desc0 = wgmma_desc(smem_addr(b16), kCoreK, kCoreN);

    const int64_t total = p.offsets[p.experts];
    const int64_t n_tiles = (p.n + kRows - 1) / kRows;
    if (int64_t(blockIdx.x) >= (total < p.experts ? total : p.experts) * n_tiles * p.mat_count) return;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int count = list_active_experts<kThreads>(p.offsets, p.experts, active, warp_counts);

    const int64_t k_half = p.k / 2, scale_cols = kNv ? p.k / 16 : p.k / 32, kb = p.k / 128;
    const int kt_count = int(p.k / kStageCols);
    const int64_t items = int64_t(count) * n_tiles * p.mat_count;
    const int row_g = 16 * warp + g;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t e = active[item / (n_tiles * p.mat_count)];
        const int mat_i = int(item / n_tiles % p.mat_count);
        const Matrix m = mat_i ? p.mats[1] : p.mats[0];
        const int64_t n0 = item % n_tiles * kRows;
        const float global = kNv ? __ldg(m.w_global + e) : 1.0f;
        const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
        auto row_of = [&](int r) {  // weight row of tile row r (rows past N repeat the last; never stored)
            const int64_t n = n0 + r;
            return e * p.n + (n < p.n ? n : p.n - 1);
        };
        // Loader roles: each stage, thread tid copies 16-byte chunk tid % kWChunks of W rows tid / kWChunks + j
        // kThreads / kWChunks; each group, row tid's scale codes when tid < kRows.
        constexpr int kWChunks = kStageCols / 32, kWPerThread = kRows * kWChunks / kThreads;
        const uint8_t* w_src[kWPerThread];
        unsigned w_dst[kWPerThread];
#pragma unroll
        for (int j = 0; j < kWPerThread; ++j) {
            const int r = tid / kWChunks + j * (kThreads / kWChunks), part = tid % kWChunks;
            w_src[j] = m.w + row_of(r) * k_half + part * 16;
            w_dst[j] = L::w + r * kWRowBytes + part * 16;
        }
        const bool loads_scales = tid < kRows;
        const uint8_t* scale_src = m.w_scale + row_of(loads_scales ? tid : 0) * scale_cols;
        // Whether every scale code of the item's rows can be folded (one thread a row, 16 codes a load).
        bool folded = false;
        if constexpr (kFold) {
            bool foldable = true;
            if (loads_scales)
                for (int64_t i = 0; i < scale_cols; i += 16) {
                    const uint4 v = __ldg(reinterpret_cast<const uint4*>(scale_src + i));
                    foldable = foldable && e8m0_codes_foldable(v.x) && e8m0_codes_foldable(v.y) &&
                               e8m0_codes_foldable(v.z) && e8m0_codes_foldable(v.w);
                }
            folded = __syncthreads_and(foldable) != 0;
        }

        for (int64_t s0 = begin; s0 < end; s0 += kTokens) {
            const int tokens = end - s0 < kTokens ? int(end - s0) : kTokens;
            auto act_row = [&](int r) -> int64_t {
                const int64_t slot = s0 + (r < tokens ? r : tokens - 1);
                return p.row_index ? p.row_index[slot] : slot;
            };
            // Only the pass's own rows are staged; the rest of the pass's width reads its last row (moe_mma.cu).
            constexpr int kARowChunks = kStageCols / 16, kAChunks = kTokens * kARowChunks;
            constexpr int kAPerThread = (kAChunks + kThreads - 1) / kThreads;
            const uint8_t* a_src[kAPerThread];
            unsigned a_dst[kAPerThread];
#pragma unroll
            for (int i = 0; i < kAPerThread; ++i) {
                const int c = tid + kThreads * i, r = c / kARowChunks, part = c % kARowChunks;
                a_src[i] = c < tokens * kARowChunks ? p.a + act_row(r) * p.k + part * 16 : nullptr;
                a_dst[i] = L::a + r * kARowBytes + part * 16;
            }
            const bool loads_a_scales = tid < kTokens;
            const float* as_src = p.a_scale + act_row(loads_a_scales ? tid : 0) * kb;
            auto staged_row = [&](int r) { return r < tokens ? r : tokens - 1; };

            // Stage kt into stage slot `slot`, and at a group's first stage the group's scales into its slot.
            auto load = [&](int slot, int kt) {
                const unsigned base = stages_addr + slot * L::bytes;
#pragma unroll
                for (int j = 0; j < kWPerThread; ++j) cp_async16(base + w_dst[j], w_src[j] + kt * (kStageCols / 2));
#pragma unroll
                for (int i = 0; i < kAPerThread; ++i)
                    if (a_src[i]) cp_async16(base + a_dst[i], a_src[i] + kt * kStageCols);
                if (kt % kGroupStages == 0) {
                    const unsigned group = groups_addr + (kt / kGroupStages) % kScaleGroups * G::bytes;
                    if (loads_scales)
#pragma unroll
                        for (int j = 0; j < G::w_row / 16; ++j)
                            cp_async16(group + G::w + tid * G::w_row + 16 * j,
                                       scale_src + kt * kScaleBytesPerStage + 16 * j);
                    if (loads_a_scales) cp_async16(group + G::a + tid * 16, as_src + kt * kActBlocks);
                }
            };

            float sum[2][kTn][4];  // [K part: the block's parity][n8 tile][fragment]
#pragma unroll
            for (int part = 0; part < 2; ++part)
#pragma unroll
                for (int j = 0; j < kTn; ++j)
#pragma unroll
                    for (int i = 0; i < 4; ++i) sum[part][j][i] = 0.0f;

            // The activations of a stage as f16 k16 tiles: task (block b, token n, lane-quarter tq) converts the
            // bytes x_pairs gives lane t = tq of token n's block b; a warp covers 8 tokens x 4 quarters, 32
            // distinct words of each core matrix it writes. (With fewer tasks than threads the rest idle: task_live.)
            constexpr int kTaskCount = kBlocks * kTokens * 4, kTasks = (kTaskCount + kThreads - 1) / kThreads;
            auto task_live = [&](int i) { return kTaskCount % kThreads == 0 || tid + kThreads * i < kTaskCount; };
            const int task_tq = tid % 4;  // the task's lane quarter and token are the same for all of a thread's tasks
            auto task_block = [&](int i) { return (tid + kThreads * i) / (4 * kTokens); };
            auto task_token = [&](int i) { return (tid + kThreads * i) / 4 % kTokens; };
            auto load_task = [&](const uint8_t* raw, int i, uint32_t& x0, uint32_t& x1) {
                x_pairs<kNv>(raw + L::a + staged_row(task_token(i)) * kARowBytes + 32 * task_block(i), task_tq, x0, x1);
            };
            auto store_task = [&](uint8_t* tile, int i, uint32_t x0, uint32_t x1) {
                put_pairs<kTokens>(tile, 2 * task_block(i), task_token(i), task_tq, x0);
                put_pairs<kTokens>(tile, 2 * task_block(i) + 1, task_token(i), task_tq, x1);
            };
            auto convert = [&](const uint8_t* raw, uint8_t* tile, int i) {
                uint32_t x0, x1;
                load_task(raw, i, x0, x1);
                store_task(tile, i, x0, x1);
            };

#pragma unroll
            for (int s = 0; s < kStageCount - 1; ++s) {
                if (s < kt_count) load(s, s);
                cp_async_commit();
            }
            // Stage 0's tile before the loop; in the loop, stage kt + 1's conversion runs between stage kt's MMAs.
            cp_async_wait<kStageCount - 2>();
            __syncthreads();
#pragma unroll
            for (int i = 0; i < kTasks; ++i)
                if (task_live(i)) convert(stages, b16, i);
            fence_proxy_async_shared();
            // Stage kt's slot, the slot stage kt + kStageCount - 1 loads into, and stage kt's scale group's slot:
            // counters, where the slots' modulo (by 6 and by 3) cost a stage several instructions.
            int slot = 0, load_slot = kStageCount - 1, group_slot = 0;
            auto next = [](int i, int count) { return i + 1 == count ? 0 : i + 1; };
            for (int kt = 0; kt < kt_count; ++kt) {
                // Stages kt and kt + 1 landed for every thread, tile kt is converted and published, and every warp
                // is past stage kt - 1 (its wgmmas waited for): tile kt + 1 and stage kt - 1's slot are free.
                cp_async_wait<kStageCount - 3>();
                __syncthreads();
                if (kt + kStageCount - 1 < kt_count) load(load_slot, kt + kStageCount - 1);
                cp_async_commit();

                const int next_slot = next(slot, kStageCount);
                const uint8_t* st = stages + slot * L::bytes;
                const uint8_t* next_raw = stages + next_slot * L::bytes;
                uint8_t* next_tile = b16 + ((kt + 1) % 2) * kTile;
                const bool convert_next = kt + 1 < kt_count;
                const uint64_t b_desc = b_desc0 + (((kt % 2) * kTile) >> 4);
                const uint8_t* w_g = st + L::w + row_g * kWRowBytes;
                const uint8_t* w_g8 = w_g + 8 * kWRowBytes;
                const uint8_t* group = groups + group_slot * G::bytes;
                const uint8_t* sc_g = group + G::w + row_g * G::w_row + kt % kGroupStages * kScaleBytesPerStage;
                const uint8_t* sc_g8 = sc_g + 8 * G::w_row;
                // The stage's MMA units and promotions, with the scales folded into the weights or not.
                auto run_units = [&](auto folded_tag) {
                    constexpr bool kFolded = decltype(folded_tag)::value;
                    // The activation scales of tokens 8 j + 2 t and + 1 for one 128-column block of the stage (the
                    // block of the units being promoted: loaded again when the promotions reach the next block).
                    float as[kTn][2];
                    auto load_act_scales = [&](int ab) {
#pragma unroll
                        for (int j = 0; j < kTn; ++j) {
                            const float* a_s = reinterpret_cast<const float*>(group + G::a) + (j * 8 + 2 * t) * 4 +
                                               kt % kGroupStages * kActBlocks + ab;
                            as[j][0] = a_s[0];
                            as[j][1] = a_s[4];
                        }
                    };
                    load_act_scales(0);
                    // MMA units of the stage: a 32-column block (MXFP4: two wgmmas, one promotion) or a 16-column half
                    // (NVFP4: one wgmma, one promotion each). Two accumulators: unit u's wgmmas run while unit u - 1 is
                    // promoted, so the tensor cores and the promotions overlap within the warpgroup.
                    // Loads run a unit ahead of their use (W words before their decode, scales before their promotion,
                    // the next stage's activation pairs before their conversion), in the shadow of the wgmmas.
                    constexpr int kUnits = kNv ? 2 * kBlocks : kBlocks;
                    constexpr int kPerUnit = (kTasks + kUnits - 1) / kUnits;  // conversion tasks per unit
                    float acc[2][kTokens / 2];
                    uint32_t w0[4], w1[4], qa, qb, cx[kPerUnit][2];
                    float ws[2][2][2];  // [block parity][half][row g, g + 8]
                    [[maybe_unused]] float
                        mx_ws[4][2];  // MXFP4: the scales of blocks 4 q .. 4 q + 3, [block % 4][row g, g + 8]
                    [[maybe_unused]] uint32_t fold[4][2];  // kFolded: their f16-pair factors
                    w_words<kNv>(w_g, w_g8, 0, t, qa, qb);
#pragma unroll
                    for (int i = 0; i < kPerUnit && i < kTasks; ++i)
                        if (convert_next && task_live(i)) load_task(next_raw, i, cx[i][0], cx[i][1]);
                    auto promote_unit = [&](int u) {
                        const int b = kNv ? u / 2 : u, h = kNv ? u % 2 : 1;
                        wgmma_fence_operand(acc[u % 2]);
#pragma unroll
                        for (int j = 0; j < kTn; ++j) {
                            float(&a4)[4] = *reinterpret_cast<float(*)[4]>(acc[u % 2] + 4 * j);
                            if constexpr (kFolded)
                                promote_folded(sum[b % 2][j], a4, as[j][0], as[j][1]);
                            else
                                promote(sum[b % 2][j], a4, ws[b % 2][h][0], ws[b % 2][h][1], as[j][0], as[j][1]);
                        }
                    };
#pragma unroll
                    for (int u = 0; u < kUnits; ++u) {
                        const int b = kNv ? u / 2 : u, h = kNv ? u % 2 : 0;
                        if (h == 0) {
                            w_decode(qa, qb, w0, w1);
                            if (b + 1 < kBlocks) w_words<kNv>(w_g, w_g8, b + 1, t, qa, qb);
                            if constexpr (kNv) {
                                float ws_g[2], ws_g8[2];
                                w_scales<kNv>(sc_g, sc_g8, b, global, ws_g, ws_g8);
                                ws[b % 2][0][0] = ws_g[0], ws[b % 2][0][1] = ws_g8[0];
                                ws[b % 2][1][0] = ws_g[1], ws[b % 2][1][1] = ws_g8[1];
                            } else if constexpr (kFolded) {
                                if (b % 4 == 0) mxfp4_fold_factors(sc_g + b, sc_g8 + b, fold);  // one word: 4 codes
#pragma unroll
                                for (int i = 0; i < 4; ++i) {  // registers 0, 2: row g; 1, 3: row g + 8
                                    w0[i] = mul_f16x2(w0[i], fold[b % 4][i % 2]);
                                    w1[i] = mul_f16x2(w1[i], fold[b % 4][i % 2]);
                                }
                            } else {
                                if (b % 4 == 0) mxfp4_block_scales(sc_g + b, sc_g8 + b, mx_ws);  // one word: 4 codes
                                ws[b % 2][1][0] = mx_ws[b % 4][0],
                                       ws[b % 2][1][1] = mx_ws[b % 4][1];  // promoted as h = 1
                            }
                        }
                        const uint64_t d0 = b_desc + ((2 * b * kStep) >> 4), d1 = d0 + (kStep >> 4);
                        wgmma_fence_operand(acc[u % 2]);
                        wgmma_fence();
                        if constexpr (kNv) {
                            wgmma_f16<kTokens>(acc[u % 2], h ? w1 : w0, h ? d1 : d0, false);
                        } else {
                            wgmma_f16<kTokens>(acc[u % 2], w0, d0, false);
                            wgmma_f16<kTokens>(acc[u % 2], w1, d1, true);
                        }
                        wgmma_commit();
                        // This unit's share of the next stage's conversion (pairs loaded a unit ago), and the loads of
                        // the next unit's share.
#pragma unroll
                        for (int i = 0; i < kPerUnit; ++i) {
                            const int task = u * kPerUnit + i, ahead = task + kPerUnit;
                            if (convert_next && task < kTasks && task_live(task))
                                store_task(next_tile, task, cx[i][0], cx[i][1]);
                            if (convert_next && ahead < kTasks && task_live(ahead))
                                load_task(next_raw, ahead, cx[i][0], cx[i][1]);
                        }
                        if (u > 0) {
                            wgmma_wait<1>();
                            promote_unit(u - 1);
                            if (h == 0 && b % 4 == 0) load_act_scales(b / 4);  // unit u begins a 128-column block
                        }
                    }
                    wgmma_wait<0>();
                    promote_unit(kUnits - 1);
                };
                if constexpr (kFold) {
                    if (folded)
                        run_units(std::true_type{});
                    else
                        run_units(std::false_type{});
                } else {
                    run_units(std::false_type{});
                }
                fence_proxy_async_shared();  // the next stage's tile, for the async proxy after the barrier
                slot = next_slot, load_slot = next(load_slot, kStageCount);
                if (kt % kGroupStages == kGroupStages - 1) group_slot = next(group_slot, kScaleGroups);
            }
            cp_async_wait<0>();
            __syncthreads();  // the next pass's prologue refills the stages

#pragma unroll
            for (int j = 0; j < kTn; ++j)
#pragma unroll
                for (int i = 0; i < 4; ++i) {
                    const int token = 8 * j + 2 * t + (i & 1);
                    const int64_t n = n0 + row_g + (i >= 2 ? 8 : 0);
                    if (token < tokens && n < p.n)
                        m.y[(s0 + token) * p.n + n] = __float2bfloat16_rn(__fadd_rn(sum[0][j][i], sum[1][j][i]));
                }
        }
    }
#else
    __trap();
#endif
}

template <ExpertFormat kFormat, int kTokens>
cudaError_t launch(const Args& args, cudaStream_t stream) {
    const auto kernel = moe_wgmma_kernel<kFormat, kTokens>;
    const int smem = smem_bytes<kTokens, kFormat == ExpertFormat::kNvfp4>(args.experts);
    const int64_t n_tiles = (args.n + kRows - 1) / kRows;
    const int64_t items = args.experts * n_tiles * args.mat_count,
                  resident = resident_ctas(reinterpret_cast<const void*>(kernel), kThreads, smem);
    const int64_t grid = items < resident ? items : resident;
    kernel<<<unsigned(grid), kThreads, smem, stream>>>(args);
    return cudaGetLastError();
}

template <ExpertFormat kFormat>
cudaError_t launch(const Args& args, int tokens, cudaStream_t stream) {
    switch (tokens) {
        case 8:
            return launch<kFormat, 8>(args, stream);
        case 16:
            return launch<kFormat, 16>(args, stream);
        case 32:
            return launch<kFormat, 32>(args, stream);
        case 64:
            return launch<kFormat, 64>(args, stream);
        default:
            return cudaErrorInvalidValue;
    }
}

}  // namespace

namespace detail {
cudaError_t launch_moe_wgmma(const moe_mma::Args& args, ExpertFormat format, int tokens, cudaStream_t stream) {
    return format == ExpertFormat::kMxfp4 ? launch<ExpertFormat::kMxfp4>(args, tokens, stream)
                                          : launch<ExpertFormat::kNvfp4>(args, tokens, stream);
}
}  // namespace detail

}  // namespace dsv4::cuda
