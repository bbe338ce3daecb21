// moe_gemm's wide passes (32 and 64 slots: batches and prefill) over row-ordered weights on three warpgroups (warp
// specialization). In moe_wgmma.cu's two-warpgroup kernel each warp issues its share of the copies (their address
// registers were 11 % of its stall samples, the stage head 14 %), converts its share of the next stage's activations,
// and every pass refills and drains the stages behind a CTA barrier. Here a producer warpgroup issues every copy (W's
// nibbles, the pass's activation rows, the scale groups) kStages - 1 stages ahead across passes and items, and converts
// each stage's activations into its f16 tile; two consumer warpgroups (64 weight rows each) decode W, run the wgmmas
// and promote (multiply_stage without its conversion: the same fragments, k slots, wgmmas and promotions, so the same
// bits). They meet through counted mbarriers: full[s] (slot s's copies landed and its activations converted: the
// producer's 128 threads), raw_free[s] (both consumers are done with slot s's W and scales: 256) and tile_free[t]
// (their wgmmas on tile t are done: 256). The producer gives registers back (setmaxnreg) to the consumers'
// accumulators. Needs K % 512 == 0.
#include "kernels/cuda/common/cta_sync.cuh"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/moe_gemm/moe_wgmma_stage.cuh"

namespace dsv4::cuda {
namespace {

using namespace moe_wgmma;

constexpr int kStages = 4, kTiles = 2, kProducers = 128, kAllThreads = kProducers + kThreads;
// The launch gives every thread 65,536 / 384 registers rounded down to a multiple of 8 (168); setmaxnreg moves them
// within that pool (an increase past it would wait forever): 128 x 88 + 256 x 208 = 384 x 168.
constexpr int kLaunchRegisters = 65536 / kAllThreads / 8 * 8;
constexpr int kProducerRegisters = 88, kConsumerRegisters = 208;
static_assert(kProducers * kProducerRegisters + kThreads * kConsumerRegisters <= kAllThreads * kLaunchRegisters);

template <int kTokens, bool kNv>
struct Layout {
    using S = Shape<kTokens>;
    static constexpr int tiles = 0;
    static constexpr int stages = tiles + kTiles * S::b16_bytes;
    static constexpr int groups = stages + kStages * S::bytes;
    static constexpr int barriers = groups + kScaleGroups * ScaleGroup<kTokens, kNv>::bytes;
    static constexpr int list = barriers + (2 * kStages + kTiles) * 8;  // full, raw_free, tile_free
    static constexpr int bytes(int64_t experts) { return list + list_bytes(experts); }
    static_assert(S::group_stages == 2 && stages % 16 == 0 && groups % 16 == 0 && barriers % 8 == 0);
};

// A CTA's walk over its stages: items (matrix, active expert, 128-row tile) from blockIdx.x by gridDim.x, each item's
// passes of kTokens slots, each pass's K stages. The producer's copies and the consumers walk it in the same order
// (the producer's conversions follow its copies by stage count); a stage's slots follow the CTA's stage count q (raw
// slot q % kStages, tile q % kTiles, scale group q / 2 % kScaleGroups: every pass has an even number of stages).
template <int kTokens>
struct Walk {
    int item, items, n_tiles;  // (every count fits: experts x tiles x 2)
    int e, n0, s0, end;        // the item's expert and first row, the pass's first slot and the expert's end
    int mat_i, tokens, kt, kt_count;

    __device__ __forceinline__ bool live() const { return item < items; }
    // Item `item`'s expert and rows, and its first pass (where it is live).
    __device__ __forceinline__ void enter(const Args& p, const int* active) {
        if (!live()) return;
        e = active[item / (n_tiles * p.mat_count)];
        mat_i = int(item / n_tiles % p.mat_count);
        n0 = item % n_tiles * kRows;
        s0 = p.offsets[e];
        end = p.offsets[e + 1];
        tokens = end - s0 < kTokens ? end - s0 : kTokens;
        kt = 0;
    }
    // The next stage; returns what it begins: kStage (a stage of the same pass), kPass (another pass of the item:
    // the activation loads change) or kItem (the weight loads change too).
    enum Step { kStage, kPass, kItem };
    __device__ __forceinline__ Step advance(const Args& p, const int* active) {
        if (++kt < kt_count) return kStage;
        kt = 0;
        s0 += kTokens;
        if (s0 < end) {
            tokens = end - s0 < kTokens ? end - s0 : kTokens;
            return kPass;
        }
        item += gridDim.x;
        enter(p, active);
        return kItem;
    }
};

// The producer's copies (thread wt of 128): 16-byte chunk wt % 8 of the stage's W rows wt / 8 + 16 j (rows past N
// repeat the last; their outputs are never stored) and chunk wt % 16 of the pass's activation rows wt / 16 + 8 i (rows
// past its tokens repeat its last: never multiplied into a stored output); at a scale group's first stage, W row wt's
// codes and token wt's four activation scales. The W rows are one pointer an item, stepped 16 rows a copy (made at
// each stage from the walk, their 64-bit multiplies were the producer's largest share of instructions), the
// activation rows' (gathered through row_index) are made once a pass.
template <int kTokens>
struct ProducerCopies {
    static constexpr int kActRows = kProducers / 16, kActLoads = kTokens / kActRows;
    const uint8_t* act[kActLoads];  // chunk wt % 16 of activation row wt / 16 + 8 i
    const float* act_scales;        // token wt's scales (wt < kTokens)
    const uint8_t* w_row;           // chunk wt % 8 of the item's W row wt / 8 at stage 0
    bool w_inside;                  // the item's 128 rows lie inside N

    __device__ __forceinline__ void enter_item(const Args& p, const Walk<kTokens>& w, int wt) {
        const Matrix& m = w.mat_i ? p.mats[1] : p.mats[0];
        w_inside = w.n0 + kRows <= p.n;
        w_row = m.w + (int64_t(w.e) * p.n + w.n0 + wt / 8) * (p.k / 2) + wt % 8 * 16;
    }
    __device__ __forceinline__ void enter_pass(const Args& p, int s0, int tokens, int wt) {
        auto act_row = [&](int r) -> int64_t {
            const int64_t slot = s0 + (r < tokens ? r : tokens - 1);
            return p.row_index ? p.row_index[slot] : slot;
        };
#pragma unroll
        for (int i = 0; i < kActLoads; ++i) act[i] = p.a + act_row(wt / 16 + kActRows * i) * p.k + wt % 16 * 16;
        act_scales = p.a_scale + act_row(wt < kTokens ? wt : 0) * (p.k / 128);
    }
    template <bool kNv>
    __device__ __forceinline__ void load_stage(const Args& p, const Walk<kTokens>& w, unsigned stage, unsigned group,
                                               int wt) const {
        using S = Shape<kTokens>;
        using G = ScaleGroup<kTokens, kNv>;
        static_assert(S::stage_cols / 32 == 8 && kRows == 8 * 16, "eight chunks a W row, sixteen rows a sweep");
        const int64_t k_half = p.k / 2;
        const unsigned w_at = stage + S::w + wt / 8 * S::w_row_bytes + wt % 8 * 16;
        if (w_inside) {
            const uint8_t* src = w_row + w.kt * (S::stage_cols / 2);
#pragma unroll
            for (int j = 0; j < 8; ++j, src += 16 * k_half) cp_async16(w_at + 16 * j * S::w_row_bytes, src);
        } else {  // the matrix's last item, N % 128 != 0
            const uint8_t* src = w_row + w.kt * (S::stage_cols / 2);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const int r = wt / 8 + 16 * j, past = w.n0 + r < p.n ? 0 : w.n0 + r - int(p.n) + 1;
                cp_async16(w_at + 16 * j * S::w_row_bytes, src + (16 * j - past) * k_half);
            }
        }
#pragma unroll
        for (int i = 0; i < kActLoads; ++i)
            cp_async16(stage + S::a + (wt / 16 + kActRows * i) * S::a_row_bytes + wt % 16 * 16,
                       act[i] + w.kt * S::stage_cols);
        if (w.kt % S::group_stages == 0) {
            const Matrix& m = w.mat_i ? p.mats[1] : p.mats[0];
            const int n = w.n0 + wt < p.n ? w.n0 + wt : int(p.n) - 1;
            const uint8_t* codes = m.w_scale + (int64_t(w.e) * p.n + n) * (kNv ? p.k / 16 : p.k / 32);
#pragma unroll
            for (int j = 0; j < G::w_row / 16; ++j)
                cp_async16(group + G::w + wt * G::w_row + 16 * j,
                           codes + w.kt * kScaleBytesPerStage<kTokens, kNv> + 16 * j);
            if (wt < kTokens) cp_async16(group + G::a + wt * 16, act_scales + w.kt * S::act_blocks);
        }
    }
};

// The producer's conversion of a stage's activations into its f16 tile: task (token n, block b) turns the block's 32
// bytes of token n into its four 16-byte core-matrix rows (steps 2 b and 2 b + 1, k halves 0 and 1), each row the four
// lane quarters' pairs that ActivationTasks stores one word at a time: the same pairs in the same slots, written in
// four 16-byte stores from two 16-byte loads (the producer, one warp a scheduler, is bound by its instructions'
// latency: 16 tasks of 4-byte stores a stage left the consumers waiting for a quarter of their time). Thread wt takes
// token wt % kTokens and blocks wt / kTokens + kBlockSweep i.
template <int kTokens, bool kNv>
struct ProducerConversion {
    using S = Shape<kTokens>;
    static constexpr int kBlockSweep = kProducers / kTokens, kPerThread = S::blocks / kBlockSweep;
    static_assert(kProducers % kTokens == 0 && S::blocks % kBlockSweep == 0);
    unsigned raw_at, tile_at;  // task 0's bytes in a raw stage and in an f16 tile

    // tokens: the pass's own rows (the rest of its width reads the last).
    __device__ __forceinline__ ProducerConversion(int wt, int tokens) {
        const int token = wt % kTokens, block = wt / kTokens, row = token < tokens ? token : tokens - 1;
        raw_at = S::a + row * S::a_row_bytes + 32 * block;
        tile_at = 2 * block * S::step_bytes + token / 8 * kCoreN + token % 8 * 16;
    }
    __device__ __forceinline__ void convert(const uint8_t* raw, uint8_t* tile, int i) const {
        const uint8_t* x = raw + raw_at + 32 * kBlockSweep * i;
        const uint4 v0 = *reinterpret_cast<const uint4*>(x), v1 = *reinterpret_cast<const uint4*>(x + 16);
        // Lane quarter t's two words as x_pair_words reads them: MXFP4 bytes 8 t .. 8 t + 7; NVFP4 words t and 4 + t.
        const uint2 words[4] = {kNv ? make_uint2(v0.x, v1.x) : make_uint2(v0.x, v0.y),
                                kNv ? make_uint2(v0.y, v1.y) : make_uint2(v0.z, v0.w),
                                kNv ? make_uint2(v0.z, v1.z) : make_uint2(v1.x, v1.y),
                                kNv ? make_uint2(v0.w, v1.w) : make_uint2(v1.z, v1.w)};
        uint32_t f[4][4];  // [step 2 b + s, half h as 2 s + h][lane quarter]
#pragma unroll
        for (int t = 0; t < 4; ++t) {
            uint32_t x0, x1;
            x_pairs_of<kNv>(words[t], x0, x1);
            f16x2_pairs(x0, f[0][t], f[1][t]);
            f16x2_pairs(x1, f[2][t], f[3][t]);
        }
        uint8_t* at = tile + tile_at + 2 * kBlockSweep * i * S::step_bytes;
        *reinterpret_cast<uint4*>(at) = make_uint4(f[0][0], f[0][1], f[0][2], f[0][3]);
        *reinterpret_cast<uint4*>(at + kCoreK) = make_uint4(f[1][0], f[1][1], f[1][2], f[1][3]);
        *reinterpret_cast<uint4*>(at + S::step_bytes) = make_uint4(f[2][0], f[2][1], f[2][2], f[2][3]);
        *reinterpret_cast<uint4*>(at + S::step_bytes + kCoreK) = make_uint4(f[3][0], f[3][1], f[3][2], f[3][3]);
    }
};

template <ExpertFormat kFormat, int kTokens>
__global__ void __launch_bounds__(kAllThreads, 1) moe_wgmma_specialized_kernel(Args p) {
#if DSV4_WGMMA
    constexpr bool kNv = kFormat == ExpertFormat::kNvfp4;
    static_assert(kTokens >= 32, "the wide passes (their scales fold)");
    constexpr int kTn = kTokens / 8;
    using S = Shape<kTokens>;
    using G = ScaleGroup<kTokens, kNv>;
    using SL = Layout<kTokens, kNv>;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int warp_counts[kAllThreads / 32];
    __shared__ int slot_tokens[kStages];
    uint8_t* tiles = smem + SL::tiles;
    uint8_t* stages = smem + SL::stages;
    uint8_t* groups = smem + SL::groups;
    uint64_t* full = reinterpret_cast<uint64_t*>(smem + SL::barriers);
    uint64_t* raw_free = full + kStages;
    uint64_t* tile_free = raw_free + kStages;
    int* active = reinterpret_cast<int*>(smem + SL::list);

    const int64_t total = p.offsets[p.experts];
    const int64_t n_tiles = (p.n + kRows - 1) / kRows;
    if (int64_t(blockIdx.x) >= (total < p.experts ? total : p.experts) * n_tiles * p.mat_count) return;

    const int tid = threadIdx.x;
    if (tid == 0) {
        for (int i = 0; i < kStages; ++i) mbarrier_init(full + i, kProducers);
        for (int i = 0; i < kStages; ++i) mbarrier_init(raw_free + i, kThreads);
        for (int i = 0; i < kTiles; ++i) mbarrier_init(tile_free + i, kThreads);
        mbarrier_inits_visible();
    }
    const int count = list_active_experts<kAllThreads>(p.offsets, p.experts, active, warp_counts);
    __syncthreads();  // the barriers (list_active_experts has no barrier when p.experts is 0)
    Walk<kTokens> walk;
    walk.item = int(blockIdx.x);
    walk.items = count * int(n_tiles) * p.mat_count;
    walk.n_tiles = int(n_tiles);
    walk.kt_count = int(p.k / S::stage_cols);
    walk.enter(p, active);

    if (tid < kProducers) {
        warpgroup_registers_decrease<kProducerRegisters>();
        using Tasks = ProducerConversion<kTokens, kNv>;
        const unsigned stages_addr = smem_addr(stages), groups_addr = smem_addr(groups);
        Walk<kTokens> loads = walk;  // the copies' walk
        ProducerCopies<kTokens> copies;
        if (loads.live()) {
            copies.enter_item(p, loads, tid);
            copies.enter_pass(p, loads.s0, loads.tokens, tid);
        }
        // Stages whose copies were issued, the next one's scale-group slot, and each raw slot's pass width (written
        // by thread 0 with the slot's copies, read by the conversion kStages - 1 stages later, after the barrier).
        int lq = 0, group_slot = 0;
        auto issue = [&] {
            if (loads.live()) {
                if (lq >= kStages)  // the slot's last stage, lq - kStages, is done with
                    mbarrier_wait(raw_free + lq % kStages, uint32_t((lq - kStages) / kStages) & 1u);
                copies.template load_stage<kNv>(p, loads, stages_addr + lq % kStages * S::bytes,
                                                groups_addr + group_slot * G::bytes, tid);
                if (tid == 0) slot_tokens[lq % kStages] = loads.tokens;
                if (++lq % S::group_stages == 0) group_slot = group_slot + 1 == kScaleGroups ? 0 : group_slot + 1;
                const typename Walk<kTokens>::Step step = loads.advance(p, active);
                if (step != Walk<kTokens>::kStage && loads.live()) {
                    if (step == Walk<kTokens>::kItem) copies.enter_item(p, loads, tid);
                    copies.enter_pass(p, loads.s0, loads.tokens, tid);
                }
            }
            cp_async_commit();
        };
        for (int i = 0; i < kStages - 1; ++i) issue();
        for (int q = 0; q < lq; ++q) {
            // Stage q's copies landed (the q-th committed group) for every producer thread, and tile q % kTiles is
            // free once the consumers' wgmmas of stage q - kTiles are done.
            cp_async_wait<kStages - 2>();
            named_barrier_sync(1, kProducers);
            if (q >= kTiles) mbarrier_wait(tile_free + q % kTiles, uint32_t((q - kTiles) / kTiles) & 1u);
            const uint8_t* raw = stages + (q % kStages) * S::bytes;
            uint8_t* tile = tiles + (q % kTiles) * S::b16_bytes;
            const Tasks tasks(tid, slot_tokens[q % kStages]);
#pragma unroll
            for (int i = 0; i < Tasks::kPerThread; ++i) tasks.convert(raw, tile, i);
            fence_proxy_async_shared();
            mbarrier_arrive(full + q % kStages);
            issue();  // stage q + kStages - 1, into the slot of stage q - 1
        }
        return;
    }

    warpgroup_registers_increase<kConsumerRegisters>();
    const int ct = tid - kProducers, lane = ct % 32, warp = ct / 32, g = lane / 4, t = lane % 4;
    const int row_g = 16 * warp + g;
    uint64_t b_desc0 = wgmma_desc(smem_addr(tiles), kCoreK, kCoreN);
    asm("" : "+l"(b_desc0));                             // opaque, as in moe_wgmma.cu (b_desc_at)
    const ActivationTasks<kTokens, kNv> no_tasks(0, 1);  // multiply_stage's conversion is off: the producer converts
    int q = 0;
    for (; walk.live(); walk.item += int(gridDim.x), walk.enter(p, active)) {
        const int64_t e = walk.e, n0 = walk.n0;
        const Matrix m = walk.mat_i ? p.mats[1] : p.mats[0];
        const float global = kNv ? __ldg(m.w_global + e) : 1.0f;
        const int64_t code_row = e * p.n + (n0 + ct < p.n ? n0 + ct : p.n - 1);
        const int64_t scale_cols = kNv ? p.k / 16 : p.k / 32;
        const bool row_folds = row_codes_foldable<kNv>(m.w_scale + code_row * scale_cols, ct < kRows, scale_cols,
                                                       kNv ? nvfp4_fold_bias(global) : 0);
        // every row of the item (the consumers only)
        const bool folded = named_barrier_and(2, kThreads, row_folds && p.fold_scales);
        for (; walk.s0 < walk.end; walk.s0 += kTokens) {
            const int64_t s0 = walk.s0;
            const int tokens = walk.end - s0 < kTokens ? int(walk.end - s0) : kTokens;
            float sum[2][kTn][4];  // [K part: the block's parity][n8 tile][fragment]
            zero_sums(sum);
            for (int kt = 0; kt < walk.kt_count; ++kt, ++q) {
                const int slot = q % kStages;
                mbarrier_wait(full + slot, uint32_t(q / kStages) & 1u);
                StageOperands s;
                s.w_g = stages + slot * S::bytes + S::w + row_g * S::w_row_bytes;
                s.w_g8 = s.w_g + 8 * S::w_row_bytes;
                s.group = groups + q / S::group_stages % kScaleGroups * G::bytes;
                s.group_stage = kt % S::group_stages;
                s.sc_g = s.group + G::w + row_g * G::w_row + s.group_stage * kScaleBytesPerStage<kTokens, kNv>;
                s.sc_g8 = s.sc_g + 8 * G::w_row;
                s.b_desc = b_desc0 + (((q % kTiles) * S::b16_bytes) >> 4);
                s.global = global;
                s.next_raw = nullptr;
                s.next_tile = nullptr;
                s.convert_next = false;
                if (folded)
                    multiply_stage<kFormat, kTokens, true, false>(s, no_tasks, t, sum);
                else
                    multiply_stage<kFormat, kTokens, false, false>(s, no_tasks, t, sum);
                mbarrier_arrive(raw_free + slot);  // its W words and scales were read, its wgmmas waited for
                mbarrier_arrive(tile_free + q % kTiles);
            }
            store_pass_outputs(p, m, sum, s0, tokens, n0, row_g, t);
        }
    }
#else
    __trap();
#endif
}

template <ExpertFormat kFormat, int kTokens>
cudaError_t launch_specialized(const Args& args, cudaStream_t stream) {
    return launch_over_items(moe_wgmma_specialized_kernel<kFormat, kTokens>, kAllThreads,
                             Layout<kTokens, kFormat == ExpertFormat::kNvfp4>::bytes(args.experts), args, stream);
}

}  // namespace

namespace detail {
cudaError_t launch_moe_wgmma_specialized(const moe_mma::Args& args, ExpertFormat format, int tokens,
                                         cudaStream_t stream) {
    const bool nv = format == ExpertFormat::kNvfp4;
    switch (tokens) {
        case 32:
            return nv ? launch_specialized<ExpertFormat::kNvfp4, 32>(args, stream)
                      : launch_specialized<ExpertFormat::kMxfp4, 32>(args, stream);
        case 64:
            return nv ? launch_specialized<ExpertFormat::kNvfp4, 64>(args, stream)
                      : launch_specialized<ExpertFormat::kMxfp4, 64>(args, stream);
        default:
            return cudaErrorInvalidValue;
    }
}
}  // namespace detail

}  // namespace dsv4::cuda
