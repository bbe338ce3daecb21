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
// (the two K parts of moe_mma.cu), added part 0 + part 1 at the end and rounded to bf16. The wide passes fold the
// block scales into the decoded weights where an item's codes allow it (moe_mma_common.cuh: mxfp4_fold_factors, and
// for NVFP4 power-of-two scales and global e4m3_fold_factor): the same bits, one f16-pair multiply a weight register
// instead of an FMUL an output.
//
// Overlap: two accumulators, so a unit's wgmmas run while the previous unit is promoted; two f16 tiles, so stage
// kt + 1 is converted between stage kt's wgmmas (one barrier per stage). Grid: persistent over items (matrix, active
// expert, 128-row tile), as moe_mma.cu; CTA: two warpgroups (128 weight rows, kTokens tokens), K streaming through
// stages of 256 columns (16-byte cp.async; Shape below), the scales in groups of 512 columns. Needs K % 512 == 0 and
// 16-byte aligned scales (every V4 shape; the launcher takes the warp-MMA kernel otherwise). Tested bitwise against
// the warp-MMA kernel in tests/gpu/moe_gemm_test.cpp. The wide passes (32 and 64 slots) run on three warpgroups
// instead (moe_wgmma_specialized.cu), which fold their block scales; this kernel keeps the narrow passes.
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"
#include "kernels/cuda/moe_gemm/moe_wgmma_stage.cuh"

namespace dsv4::cuda {
namespace {

using namespace moe_wgmma;

template <ExpertFormat kFormat, int kTokens>
__global__ void __launch_bounds__(kThreads, Shape<kTokens>::min_blocks) moe_wgmma_kernel(Args p) {
#if DSV4_WGMMA
    static_assert(kTokens <= 16, "the wide passes run on moe_wgmma_specialized.cu's kernel");
    constexpr bool kNv = kFormat == ExpertFormat::kNvfp4;
    constexpr int kTn = kTokens / 8;  // n8 tiles of the pass
    using L = Shape<kTokens>;
    constexpr int kStageCount = L::stages, kTile = L::b16_bytes;
    using G = ScaleGroup<kTokens, kNv>;
    using Tasks = ActivationTasks<kTokens, kNv>;
    extern __shared__ __align__(128) uint8_t smem[];
    __shared__ int warp_counts[kThreads / 32];
    uint8_t* b16 = smem;
    int* active = reinterpret_cast<int*>(smem + 2 * kTile);
    uint8_t* stages = smem + 2 * kTile + list_bytes(p.experts);
    uint8_t* groups = stages + kStageCount * L::bytes;
    const unsigned stages_addr = smem_addr(stages), groups_addr = smem_addr(groups);
    // The tiles' descriptor, opaque to the compiler: seeing wgmma_desc's masks, it re-masked each of b_desc_at's sums
    // (one more instruction a wgmma).
    uint64_t b_desc0 = wgmma_desc(smem_addr(b16), kCoreK, kCoreN);
    asm("" : "+l"(b_desc0));

    const int64_t total = p.offsets[p.experts];
    const int64_t n_tiles = (p.n + kRows - 1) / kRows;
    if (int64_t(blockIdx.x) >= (total < p.experts ? total : p.experts) * n_tiles * p.mat_count) return;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
    const int count = list_active_experts<kThreads>(p.offsets, p.experts, active, warp_counts);

    const int kt_count = int(p.k / L::stage_cols);
    const int64_t items = int64_t(count) * n_tiles * p.mat_count;
    const int row_g = 16 * warp + g;
    for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
        const int64_t e = active[item / (n_tiles * p.mat_count)];
        const int mat_i = int(item / n_tiles % p.mat_count);
        const Matrix m = mat_i ? p.mats[1] : p.mats[0];
        const int64_t n0 = item % n_tiles * kRows;
        const float global = kNv ? __ldg(m.w_global + e) : 1.0f;
        const int64_t begin = p.offsets[e], end = p.offsets[e + 1];
        const WeightLoads<kTokens, kNv> wl = weight_loads<kTokens, kNv>(p, m, e, n0, tid);

        for (int64_t s0 = begin; s0 < end; s0 += kTokens) {
            const int tokens = end - s0 < kTokens ? int(end - s0) : kTokens;
            const ActivationLoads<kTokens> al = activation_loads<kTokens>(p, s0, tokens, tid);
            const Tasks tasks(tid, tokens);
            float sum[2][kTn][4];  // [K part: the block's parity][n8 tile][fragment]
            zero_sums(sum);

#pragma unroll
            for (int s = 0; s < kStageCount - 1; ++s) {
                if (s < kt_count) load_stage(wl, al, stages_addr, groups_addr, s, s, tid);
                cp_async_commit();
            }
            // Stage 0's tile before the loop; in the loop, stage kt + 1's conversion runs between stage kt's MMAs.
            cp_async_wait<kStageCount - 2>();
            __syncthreads();
#pragma unroll
            for (int i = 0; i < Tasks::kPerThread; ++i) tasks.convert(stages, b16, i);
            fence_proxy_async_shared();
            // Stage kt's slot, the slot stage kt + kStageCount - 1 loads into, and stage kt's scale group's slot:
            // counters, where the slots' modulo (by 6 and by 3) cost a stage several instructions.
            int slot = 0, load_slot = kStageCount - 1, group_slot = 0;
            auto next = [](int i, int count) { return i + 1 == count ? 0 : i + 1; };
            for (int kt = 0; kt < kt_count; ++kt) {
                // Stages kt and kt + 1 landed for every thread, tile kt is converted and published, and every warp is
                // past stage kt - 1 (its wgmmas waited for): tile kt + 1 and stage kt - 1's slot are free.
                cp_async_wait<kStageCount - 3>();
                __syncthreads();
                if (kt + kStageCount - 1 < kt_count)
                    load_stage(wl, al, stages_addr, groups_addr, load_slot, kt + kStageCount - 1, tid);
                cp_async_commit();

                const int next_slot = next(slot, kStageCount);
                StageOperands s;
                s.w_g = stages + slot * L::bytes + L::w + row_g * L::w_row_bytes;
                s.w_g8 = s.w_g + 8 * L::w_row_bytes;
                s.group = groups + group_slot * G::bytes;
                s.group_stage = kt % L::group_stages;
                s.sc_g = s.group + G::w + row_g * G::w_row + s.group_stage * kScaleBytesPerStage<kTokens, kNv>;
                s.sc_g8 = s.sc_g + 8 * G::w_row;
                s.b_desc = b_desc0 + (((kt % 2) * kTile) >> 4);
                s.global = global;
                s.next_raw = stages + next_slot * L::bytes;
                s.next_tile = b16 + ((kt + 1) % 2) * kTile;
                s.convert_next = kt + 1 < kt_count;
                multiply_stage<kFormat, kTokens, false>(s, tasks, t, sum);
                fence_proxy_async_shared();  // the next stage's tile, for the async proxy after the barrier
                slot = next_slot, load_slot = next(load_slot, kStageCount);
                if (kt % L::group_stages == L::group_stages - 1) group_slot = next(group_slot, kScaleGroups);
            }
            cp_async_wait<0>();
            __syncthreads();  // the next pass's prologue refills the stages

            store_pass_outputs(p, m, sum, s0, tokens, n0, row_g, t);
        }
    }
#else
    __trap();
#endif
}

template <ExpertFormat kFormat, int kTokens>
cudaError_t launch(const Args& args, cudaStream_t stream) {
    if constexpr (kTokens >= 32)
        return detail::launch_moe_wgmma_specialized(args, kFormat, kTokens, stream);
    else
        return launch_over_items(moe_wgmma_kernel<kFormat, kTokens>, kThreads,
                                 smem_bytes<kTokens, kFormat == ExpertFormat::kNvfp4>(args.experts), args, stream);
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
