// The pieces of moe_wgmma.cu's two-warpgroup kernel that moe_wgmma_specialized.cu's producer and consumers share: a
// pass width's stage shape and scale groups, the activations' conversion into f16 k16 tiles, the copies' sources and
// one stage's MMA units with their promotions (multiply_stage: the arithmetic both kernels run, hence their same
// bits). moe_wgmma.cu's header has the scheme.
#pragma once

#include <cstdint>

#include "kernels/cuda/common/cp_async.cuh"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/common/wgmma.cuh"
#include "kernels/cuda/moe_gemm/moe_mma_common.cuh"

namespace dsv4::cuda::moe_wgmma {

using namespace moe_mma;

// Two warpgroups per CTA, each 64 weight rows (the wgmma's M, 16 per warp): they share the staged and converted
// activations of the pass (one warpgroup per CTA, two CTAs per SM, measured 6-11 % slower: twice the conversions
// and activation loads per product).
constexpr int kRows = 128, kThreads = 256;
// The scales travel in groups of 512 columns, one 16-byte copy a row (MXFP4: 16 codes; NVFP4: 32 codes, two copies),
// where each 128 columns took a 4-byte copy, and likewise the activation scales (four f32 a token). Needs K % 512 ==
// 0 (every V4 shape). Groups in flight: the one being read, the next, and the one loading (the loads run stages - 1
// stages ahead, at most two groups past the one being read).
constexpr int kGroupCols = 512, kScaleGroups = 3;
// The f16 B tile of one k16 step: kTokens tokens x 16 k as core matrices (token block of 8, k half) at
// (token / 8) * 256 + half * 128, row token % 8 at 16 bytes each; the next step kTokens * 32 bytes further.
[[maybe_unused]] constexpr int kCoreK = 128, kCoreN = 256;  // unused where the kernel is compiled out (not sm_90a)

// A pass width's stage: 256 columns of K (eight 32-column blocks, two activation-scale blocks) at every width. A
// stage's fixed work (its barrier, its loads' addresses and predicates, the loop, the fences) was ~110 of the ~290
// instructions a warp issued for a 128-column stage at 8 slots; wider stages spread it over twice the weights.
// Raw stages in flight (kt + 1 is converted while kt is multiplied, so at least 3): 4 for the 8-slot passes of batched
// decode, whose time is the weights' loads; 3 for the rest (16 slots: four stages left room for one CTA a SM, not two,
// and the pass ran 16-26 % slower; 32 and 64: their accumulators take one CTA's registers a SM anyway). In bytes as
// many as or more than the 128-column stages' 6 and 4.
template <int kTokens>
struct Shape {
    static constexpr int stage_cols = 256;
    static constexpr int blocks = stage_cols / 32;           // 32-column blocks (MXFP4 scale blocks) a stage
    static constexpr int act_blocks = stage_cols / 128;      // activation-scale blocks a stage
    static constexpr int w_row_bytes = stage_cols / 2 + 16;  // as moe_mma.cu: fragment reads conflict-free
    static constexpr int a_row_bytes = stage_cols + 32;
    static constexpr int group_stages = kGroupCols / stage_cols;
    static constexpr int stages = kTokens >= 16 ? 3 : 4;
    static constexpr int min_blocks = kTokens >= 32 ? 1 : 2;
    static constexpr int step_bytes = kTokens * 32;                 // one k16 step of the f16 B tile
    static constexpr int b16_bytes = stage_cols / 16 * step_bytes;  // one stage's k16 steps
    // The raw stage: W rows, then activation rows.
    static constexpr int w = 0;
    static constexpr int a = w + kRows * w_row_bytes;
    static constexpr int bytes = a + kTokens * a_row_bytes;
    static_assert(bytes % 16 == 0 && stage_cols % 128 == 0 && kGroupCols % stage_cols == 0);
    static_assert(stages - 1 <= group_stages + 1 && blocks * 32 == stage_cols && act_blocks * 128 == stage_cols);
};
// A row's scale codes of a stage: NVFP4 one a 16 columns, MXFP4 one a 32.
template <int kTokens, bool kNv>
constexpr int kScaleBytesPerStage = kNv ? 2 * Shape<kTokens>::blocks : Shape<kTokens>::blocks;

// One group's scales: each weight row's codes of its 512 columns, then each token's four activation scales.
template <int kTokens, bool kNv>
struct ScaleGroup {
    static constexpr int w_row = kNv ? 32 : 16;
    static constexpr int w = 0;
    static constexpr int a = w + kRows * w_row;
    static constexpr int bytes = a + kTokens * 16;
};

template <int kTokens, bool kNv>
__host__ __device__ constexpr int smem_bytes(int64_t experts) {
    using S = Shape<kTokens>;
    return 2 * S::b16_bytes + list_bytes(experts) + S::stages * S::bytes +
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

// The descriptor `bytes` into the B tile of `base`. The wide MXFP4 passes hold descriptors in vector registers (ptxas'
// choice, SASS: tools/sass_loops.py), where a 64-bit add and the moves around it were ~6 instructions a wgmma (a
// tenth of the 64-slot pass's stage): every tile has the same high word (the N stride), so they add to the low word
// alone and keep base's high word. The narrow and the NVFP4 passes hold them in uniform registers, where the 64-bit
// add is one instruction and the split form took two.
template <int kTokens, bool kNv>
__device__ __forceinline__ uint64_t b_desc_at(uint64_t base, uint32_t bytes) {
    if constexpr (kTokens >= 32 && !kNv)
        return base >> 32 << 32 | (uint32_t(base) + (bytes >> 4));
    else
        return base + (bytes >> 4);
}

// A stage's activations as f16 k16 tiles: task (block b, token n, lane quarter tq) converts the bytes x_pairs gives
// lane t = tq of token n's block b; a warp covers 8 tokens x 4 quarters, 32 distinct words of each core matrix it
// writes. A thread's tasks share its token and lane quarter, kBlockStride blocks apart, so each task's bytes are the
// thread's first task's plus a constant: one offset a thread for the raw stage and one for the tile (the per-task
// rows and blocks took three multiply-adds a task and a register each).
template <int kTokens, bool kNv>
struct ActivationTasks {
    using S = Shape<kTokens>;
    static constexpr int kCount = S::blocks * kTokens * 4, kPerThread = kCount / kThreads;
    static constexpr int kBlockStride = kThreads / (4 * kTokens);
    static_assert(kCount % kThreads == 0 && kThreads % (4 * kTokens) == 0, "whole tasks a thread, one token each");
    unsigned raw_at, tile_at;  // task 0's bytes in a raw stage and in an f16 tile

    // tokens: the pass's own rows (the rest of its width reads the last).
    __device__ __forceinline__ ActivationTasks(int tid, int tokens) {
        const int token = tid / 4 % kTokens, block = tid / (4 * kTokens), t = tid % 4;
        const int row = token < tokens ? token : tokens - 1;
        raw_at = S::a + row * S::a_row_bytes + 32 * block + (kNv ? 4 : 8) * t;
        // Step 2 b of the tile, core matrix (token / 8, k half 0), row token % 8, k slot 2 t: where mma.sync's b0
        // takes the pair; b1 (k 2 t + 8) is the same slot of half 1, kCoreK further.
        tile_at = 2 * block * S::step_bytes + token / 8 * kCoreN + token % 8 * 16 + 4 * t;
    }
    // Task i's two words of the raw stage (x_pair_words; raw_at holds the lane quarter's offset, hence t = 0), loaded
    // ahead of their conversion.
    __device__ __forceinline__ uint2 load(const uint8_t* raw, int i) const {
        return x_pair_words<kNv>(raw + raw_at + 32 * kBlockStride * i, 0);
    }
    // Their f16 pairs into the tile: x0 at step 2 b, x1 at step 2 b + 1 (the block's two MMAs), each pair's low 16
    // bits in half 0 and high 16 bits in half 1.
    __device__ __forceinline__ void store(uint8_t* tile, int i, uint2 words) const {
        uint32_t x0, x1, f[4];
        x_pairs_of<kNv>(words, x0, x1);
        f16x2_pairs(x0, f[0], f[1]);  // each half of a pair converted in place (no shift for the high one)
        f16x2_pairs(x1, f[2], f[3]);
        uint8_t* at = tile + tile_at + 2 * kBlockStride * i * S::step_bytes;
        *reinterpret_cast<uint32_t*>(at) = f[0];
        *reinterpret_cast<uint32_t*>(at + kCoreK) = f[1];
        *reinterpret_cast<uint32_t*>(at + S::step_bytes) = f[2];
        *reinterpret_cast<uint32_t*>(at + S::step_bytes + kCoreK) = f[3];
    }
    __device__ __forceinline__ void convert(const uint8_t* raw, uint8_t* tile, int i) const {
        store(tile, i, load(raw, i));
    }
};

// An item's weight loads (matrix, expert, 128-row tile): each stage, thread tid copies 16-byte chunk tid % kChunks of
// W rows tid / kChunks + j kThreads / kChunks; each scale group, row tid's codes where tid < kRows. Rows past N
// repeat the last (their outputs are never stored).
template <int kTokens, bool kNv>
struct WeightLoads {
    static constexpr int kChunks = Shape<kTokens>::stage_cols / 32, kPerThread = kRows * kChunks / kThreads;
    const uint8_t* src[kPerThread];
    unsigned dst[kPerThread];  // offsets in a stage slot
    static constexpr int stage_stride = Shape<kTokens>::stage_cols / 2;  // bytes from a row's stage to the next
    const uint8_t* scale_src;  // row tid's scale codes (row 0's where tid >= kRows: not loaded)
    bool loads_scales;
};
template <int kTokens, bool kNv>
__device__ __forceinline__ WeightLoads<kTokens, kNv> weight_loads(const Args& p, const Matrix& m, int64_t e, int64_t n0,
                                                                  int tid) {
    using WL = WeightLoads<kTokens, kNv>;
    auto row_of = [&](int r) {
        const int64_t n = n0 + r;
        return e * p.n + (n < p.n ? n : p.n - 1);
    };
    WL wl;
#pragma unroll
    for (int j = 0; j < WL::kPerThread; ++j) {
        const int r = tid / WL::kChunks + j * (kThreads / WL::kChunks), part = tid % WL::kChunks;
        wl.src[j] = m.w + row_of(r) * (p.k / 2) + part * 16;
        wl.dst[j] = Shape<kTokens>::w + r * Shape<kTokens>::w_row_bytes + part * 16;
    }
    wl.loads_scales = tid < kRows;
    wl.scale_src = m.w_scale + row_of(wl.loads_scales ? tid : 0) * (kNv ? p.k / 16 : p.k / 32);
    return wl;
}

// Whether every scale code of a weight row (its scale_cols codes at `codes`; none where `loads` is false) can be
// folded into its weights (mxfp4_fold_factors; NVFP4: the expert's global is a power of two and every code one,
// e4m3_codes_foldable under nv_bias), 16 codes a load.
template <bool kNv>
__device__ __forceinline__ bool row_codes_foldable(const uint8_t* codes, bool loads, int64_t scale_cols, int nv_bias) {
    auto fold = [&](uint32_t c) { return kNv ? e4m3_codes_foldable(c, nv_bias) : e8m0_codes_foldable(c); };
    bool foldable = !kNv || nv_bias >= 0;
    if (loads && foldable)
        for (int64_t i = 0; i < scale_cols; i += 16) {
            const uint4 v = __ldg(reinterpret_cast<const uint4*>(codes + i));
            foldable = foldable && fold(v.x) && fold(v.y) && fold(v.z) && fold(v.w);
        }
    return foldable;
}

// A pass's activation loads: only its own `tokens` rows are staged (chunks past them: nullptr); each scale group,
// token tid's four activation scales where tid < kTokens.
template <int kTokens>
struct ActivationLoads {
    static constexpr int kRowChunks = Shape<kTokens>::stage_cols / 16, kChunks = kTokens * kRowChunks;
    static constexpr int kPerThread = (kChunks + kThreads - 1) / kThreads;
    const uint8_t* src[kPerThread];
    unsigned dst[kPerThread];
    const float* scale_src;
    bool loads_scales;
};
template <int kTokens>
__device__ __forceinline__ ActivationLoads<kTokens> activation_loads(const Args& p, int64_t s0, int tokens, int tid) {
    using AL = ActivationLoads<kTokens>;
    auto act_row = [&](int r) -> int64_t {
        const int64_t slot = s0 + (r < tokens ? r : tokens - 1);
        return p.row_index ? p.row_index[slot] : slot;
    };
    AL al;
#pragma unroll
    for (int i = 0; i < AL::kPerThread; ++i) {
        const int c = tid + kThreads * i, r = c / AL::kRowChunks, part = c % AL::kRowChunks;
        al.src[i] = c < tokens * AL::kRowChunks ? p.a + act_row(r) * p.k + part * 16 : nullptr;
        al.dst[i] = Shape<kTokens>::a + r * Shape<kTokens>::a_row_bytes + part * 16;
    }
    al.loads_scales = tid < kTokens;
    al.scale_src = p.a_scale + act_row(al.loads_scales ? tid : 0) * (p.k / 128);
    return al;
}

// Stage kt into stage slot `slot`, and at a group's first stage the group's scales into their slot.
template <int kTokens, bool kNv>
__device__ __forceinline__ void load_stage(const WeightLoads<kTokens, kNv>& wl,
                                           const ActivationLoads<kTokens>& al, unsigned stages_addr,
                                           unsigned groups_addr, int slot, int kt, int tid) {
    using S = Shape<kTokens>;
    using G = ScaleGroup<kTokens, kNv>;
    const unsigned base = stages_addr + slot * S::bytes;
#pragma unroll
    for (int j = 0; j < WeightLoads<kTokens, kNv>::kPerThread; ++j)
        cp_async16(base + wl.dst[j], wl.src[j] + kt * wl.stage_stride);
#pragma unroll
    for (int i = 0; i < ActivationLoads<kTokens>::kPerThread; ++i)
        if (al.src[i]) cp_async16(base + al.dst[i], al.src[i] + kt * S::stage_cols);
    if (kt % S::group_stages == 0) {
        const unsigned group = groups_addr + (kt / S::group_stages) % kScaleGroups * G::bytes;
        if (wl.loads_scales)
#pragma unroll
            for (int j = 0; j < G::w_row / 16; ++j)
                cp_async16(group + G::w + tid * G::w_row + 16 * j,
                           wl.scale_src + kt * kScaleBytesPerStage<kTokens, kNv> + 16 * j);
        if (al.loads_scales) cp_async16(group + G::a + tid * 16, al.scale_src + kt * S::act_blocks);
    }
}

// What one stage's MMA units read: rows g and g + 8 of the warp's staged nibbles and their codes in the stage's scale
// group, the group's activation scales, the stage's f16 tile; and the next stage's conversion they run in the
// wgmmas' shadow.
struct StageOperands {
    const uint8_t *w_g, *w_g8;    // staged nibbles of rows g, g + 8
    const uint8_t *sc_g, *sc_g8;  // their scale codes of this stage
    const uint8_t* group;         // the stage's scale group
    int group_stage;              // the stage's place in its group
    uint64_t b_desc;              // the stage's f16 tile
    float global;                 // NVFP4: the expert's global scale
    const uint8_t* next_raw;      // the next stage's staged activations
    uint8_t* next_tile;           // and the tile they are converted into
    bool convert_next;            // whether there is a next stage
};
// A pass's sums ([K part: the block's parity][n8 tile][fragment]) from zero.
template <int kTn>
__device__ __forceinline__ void zero_sums(float (&sum)[2][kTn][4]) {
#pragma unroll
    for (int part = 0; part < 2; ++part)
#pragma unroll
        for (int j = 0; j < kTn; ++j)
#pragma unroll
            for (int i = 0; i < 4; ++i) sum[part][j][i] = 0.0f;
}
// A pass's outputs: part 0 + part 1 rounded to bf16, for the pass's `tokens` slots from s0 and the rows below N of
// the thread's fragment rows (row_g, row_g + 8 past the item's first row n0; lane quarter t).
template <int kTn>
__device__ __forceinline__ void store_pass_outputs(const Args& p, const Matrix& m, const float (&sum)[2][kTn][4],
                                                   int64_t s0, int tokens, int64_t n0, int row_g, int t) {
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

// Launches a persistent grid of `kernel` over the launch's items (matrix, expert, 128-row tile), at most as many CTAs
// as the device holds at once.
template <typename Kernel>
cudaError_t launch_over_items(Kernel kernel, int threads, int smem, const Args& args, cudaStream_t stream) {
    const int64_t n_tiles = (args.n + kRows - 1) / kRows;
    const int64_t items = args.experts * n_tiles * args.mat_count,
                  resident = resident_ctas(reinterpret_cast<const void*>(kernel), threads, smem);
    const int64_t grid = items < resident ? items : resident;
    kernel<<<unsigned(grid), threads, smem, stream>>>(args);
    return cudaGetLastError();
}

// One stage's MMA units and promotions into `sum` ([K part: the block's parity][n8 tile][fragment]), with the block
// scales folded into the weights (kFolded) or promoted; kConverts: and the next stage's conversion in the wgmmas'
// shadow (moe_wgmma_specialized.cu's producer converts instead).
template <ExpertFormat kFormat, int kTokens, bool kFolded, bool kConverts = true>
__device__ __forceinline__ void multiply_stage(const StageOperands& s,
                                               const ActivationTasks<kTokens, kFormat == ExpertFormat::kNvfp4>& tasks,
                                               int t, float (&sum)[2][kTokens / 8][4]) {
    constexpr bool kNv = kFormat == ExpertFormat::kNvfp4;
    using S = Shape<kTokens>;
    constexpr int kTn = kTokens / 8, kStep = S::step_bytes, kBlocks = S::blocks,
                  kTasks = ActivationTasks<kTokens, kNv>::kPerThread;
    using G = ScaleGroup<kTokens, kNv>;
    // The activation scales of tokens 8 j + 2 t and + 1 for one 128-column block of the stage (the block of the units
    // being promoted: loaded again when the promotions reach the next block).
    float as[kTn][2];
    auto load_act_scales = [&](int ab) {
#pragma unroll
        for (int j = 0; j < kTn; ++j) {
            const float* a_s = reinterpret_cast<const float*>(s.group + G::a) + (j * 8 + 2 * t) * 4 +
                               s.group_stage * S::act_blocks + ab;
            as[j][0] = a_s[0];
            as[j][1] = a_s[4];
        }
    };
    load_act_scales(0);
    // MMA units of the stage: a 32-column block (MXFP4: two wgmmas, one promotion) or a 16-column half (NVFP4: one
    // wgmma, one promotion each). Two accumulators: unit u's wgmmas run while unit u - 1 is promoted, so the tensor
    // cores and the promotions overlap within the warpgroup. Loads run a unit ahead of their use (W words before their
    // decode, scales before their promotion, the next stage's activation pairs before their conversion), in the
    // shadow of the wgmmas.
    constexpr int kUnits = kNv ? 2 * kBlocks : kBlocks;
    constexpr int kPerUnit = (kTasks + kUnits - 1) / kUnits;  // conversion tasks per unit
    float acc[2][kTokens / 2];
    uint32_t w0[4], w1[4], qa, qb;
    uint2 cx[kPerUnit];  // conversion tasks' words, loaded a unit ahead
    float ws[2][2][2];                     // [block parity][half][row g, g + 8]
    [[maybe_unused]] float mx_ws[4][2];    // MXFP4: the scales of blocks 4 q .. 4 q + 3, [block % 4][row g, g + 8]
    [[maybe_unused]] uint32_t fold[4][2];  // kFolded: their f16-pair factors
    w_words<kNv>(s.w_g, s.w_g8, 0, t, qa, qb);
    if constexpr (kConverts)
#pragma unroll
        for (int i = 0; i < kPerUnit && i < kTasks; ++i)
            if (s.convert_next) cx[i] = tasks.load(s.next_raw, i);
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
            if (b + 1 < kBlocks) w_words<kNv>(s.w_g, s.w_g8, b + 1, t, qa, qb);
            if constexpr (kNv && kFolded) {  // each half's factor into its MMA's fragment
                const int bias = nvfp4_fold_bias(s.global);
#pragma unroll
                for (int i = 0; i < 4; ++i) {  // registers 0, 2: row g; 1, 3: row g + 8
                    const uint8_t* sc = i % 2 ? s.sc_g8 : s.sc_g;
                    w0[i] = mul_f16x2(w0[i], e4m3_fold_factor(sc[2 * b], bias));
                    w1[i] = mul_f16x2(w1[i], e4m3_fold_factor(sc[2 * b + 1], bias));
                }
            } else if constexpr (kNv) {
                float ws_g[2], ws_g8[2];
                w_scales<kNv>(s.sc_g, s.sc_g8, b, s.global, ws_g, ws_g8);
                ws[b % 2][0][0] = ws_g[0], ws[b % 2][0][1] = ws_g8[0];
                ws[b % 2][1][0] = ws_g[1], ws[b % 2][1][1] = ws_g8[1];
            } else if constexpr (kFolded) {
                if (b % 4 == 0) mxfp4_fold_factors(s.sc_g + b, s.sc_g8 + b, fold);  // one word: 4 codes
#pragma unroll
                for (int i = 0; i < 4; ++i) {  // registers 0, 2: row g; 1, 3: row g + 8
                    w0[i] = mul_f16x2(w0[i], fold[b % 4][i % 2]);
                    w1[i] = mul_f16x2(w1[i], fold[b % 4][i % 2]);
                }
            } else {
                if (b % 4 == 0) mxfp4_block_scales(s.sc_g + b, s.sc_g8 + b, mx_ws);    // one word: 4 codes
                ws[b % 2][1][0] = mx_ws[b % 4][0], ws[b % 2][1][1] = mx_ws[b % 4][1];  // promoted as h = 1
            }
        }
        const uint64_t d0 = b_desc_at<kTokens, kNv>(s.b_desc, 2 * b * kStep), d1 = b_desc_at<kTokens, kNv>(d0, kStep);
        wgmma_fence_operand(acc[u % 2]);
        wgmma_fence();
        if constexpr (kNv) {
            wgmma_f16<kTokens>(acc[u % 2], h ? w1 : w0, h ? d1 : d0, false);
        } else {
            wgmma_f16<kTokens>(acc[u % 2], w0, d0, false);
            wgmma_f16<kTokens>(acc[u % 2], w1, d1, true);
        }
        wgmma_commit();
        // This unit's share of the next stage's conversion (pairs loaded a unit ago), and the loads of the next unit's
        // share.
        if constexpr (kConverts)
#pragma unroll
            for (int i = 0; i < kPerUnit; ++i) {
                const int task = u * kPerUnit + i, ahead = task + kPerUnit;
                if (s.convert_next && task < kTasks) tasks.store(s.next_tile, task, cx[i]);
                if (s.convert_next && ahead < kTasks) cx[i] = tasks.load(s.next_raw, ahead);
            }
        if (u > 0) {
            wgmma_wait<1>();
            promote_unit(u - 1);
            if (h == 0 && b % 4 == 0) load_act_scales(b / 4);  // unit u begins a 128-column block
        }
    }
    wgmma_wait<0>();
    promote_unit(kUnits - 1);
}

}  // namespace dsv4::cuda::moe_wgmma
