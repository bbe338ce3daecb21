// moe_gemm launcher: heuristic and contract checks (see moe_gemm.h).
#include "kernels/cuda/moe_gemm/moe_gemm.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/common/cuda_check.h"
#include "kernels/cuda/moe_gemm/moe_gemm_kernels.h"

namespace dsv4::cuda {

// Token tile: a power of two near a quarter of the slot bound (max 16): the bound is the batch's token count, but
// a token's k slots spread over many experts (decode: mostly one or two slots each), and a tile wider than an
// expert's slots multiplies zeros and, at 16, keeps the register file to one block per SM; more slots than the tile
// take further passes. The tile never changes bits (the K span below fixes the summation). K span: 64 KiB of staged f32 activations for
// the largest tile (1024 columns) whatever the tile: it fixes the f32 summation (one warp tree per K range), so it
// must not depend on how many tokens share the launch, or a token's expert outputs would change with the batch
// (MoeGemm.RowsIndependentOfBatch). Experts: the former strided grid's at most 64 blocks along y (the compact grid
// is sized to the device in the launcher).
MoeGemmConfig moe_gemm_config(int64_t experts, int64_t n, int64_t k, int max_slots_per_expert) {
    (void)n;
    MoeGemmConfig c;
    const int rows = std::clamp((max_slots_per_expert + 3) / 4, 1, 16);
    while (c.m_tile < rows) c.m_tile *= 2;
    const int64_t max_span = 16384 / 16 / 1024 * 1024;
    c.k_span = std::min(max_span, (k + 1023) / 1024 * 1024);
    c.expert_blocks = int(std::min<int64_t>(experts, 64));
    return c;
}

bool moe_gemm_computes_swiglu(const MoeGemmParams& p) {
    // Single-slot passes only: a CTA there runs one item, so the input rows it computes are its pass's while its first
    // weight stages load. Where CTAs run several items (decode batches of 2-8: ~4 a CTA at 4 sequences) every item
    // computed them again and the step got slower (docs/perf.md, "The routed experts' SwiGLU inside w2").
    return p.path == MoeGemmPath::kMma && p.k % 128 == 0 && p.max_slots_per_expert == 1 &&
           moe_mma_pass_tokens(p.max_slots_per_expert, p.expected_slots_per_expert) == 8 &&
           !detail::moe_mma_takes_wgmma(p);
}

std::string moe_gemm_can_implement(const MoeGemmParams& p) {
    const bool gated = p.swiglu.gate != nullptr;
    if ((!gated && (!p.a || !p.a_scale)) || !p.expert_offsets || !p.w || !p.w_scale || !p.y)
        return "null operand pointer";
    if (gated) {
        if (!p.swiglu.up || (p.swiglu.routing_weights && !p.swiglu.sorted_assignment))
            return "the SwiGLU input needs up (and the slots' assignments with routing weights)";
        if (p.row_index) return "the SwiGLU input is per slot: no row_index";
        const int64_t stride = p.swiglu.stride ? p.swiglu.stride : p.k;
        if (stride < p.k || stride % 4 || reinterpret_cast<uintptr_t>(p.swiglu.gate) % 8 ||
            reinterpret_cast<uintptr_t>(p.swiglu.up) % 8)
            return "the SwiGLU input's rows must be 8-byte aligned and at least K wide";
        if (!moe_gemm_computes_swiglu(p))
            return "this launch cannot compute its SwiGLU input (moe_gemm_computes_swiglu)";
    }
    if (p.format == ExpertFormat::kNvfp4 && !p.w_global) return "NVFP4 needs the per-expert global scales";
    if (p.experts <= 0 || p.n <= 0 || p.k <= 0)
        return fmt::format("empty shape experts={} n={} k={}", p.experts, p.n, p.k);
    if (p.k % 32) return fmt::format("K must be a multiple of 32, got {}", p.k);
    if (reinterpret_cast<uintptr_t>(p.w) % 16) return "W must be 16-byte aligned";
    if (p.max_slots_per_expert < 1) return "max_slots_per_expert must be >= 1";
    if (p.path == MoeGemmPath::kMma) {  // cp.async sources: 16-byte activation rows, 4-byte scale words
        if (!gated && reinterpret_cast<uintptr_t>(p.a) % 16) return "the activations must be 16-byte aligned";
        if (reinterpret_cast<uintptr_t>(p.w_scale) % 4 || reinterpret_cast<uintptr_t>(p.second.w_scale) % 4)
            return "the weight scales must be 4-byte aligned";
    }
    if (p.second.w && (!p.second.w_scale || !p.second.y || (p.format == ExpertFormat::kNvfp4 && !p.second.w_global)))
        return "the second matrix needs its scales, outputs (and NVFP4 global scales)";
    if (p.second.w && reinterpret_cast<uintptr_t>(p.second.w) % 16) return "the second W must be 16-byte aligned";
    if (p.experts > 4096)
        return fmt::format("at most 4096 experts (the active list lives in shared memory), got {}", p.experts);
    return {};
}

void moe_gemm(const MoeGemmParams& p, cudaStream_t stream) {
    if (std::string why = moe_gemm_can_implement(p); !why.empty()) fail("moe_gemm: {}", why);
    if (p.path == MoeGemmPath::kMma) {
        DSV4_CUDA_CHECK(launch_moe_mma(p, stream));
        return;
    }
    const MoeGemmConfig config = moe_gemm_config(p.experts, p.n, p.k, p.max_slots_per_expert);
    DSV4_CUDA_CHECK(launch_moe_gemm(p, config, stream));
    if (p.second.w) {
        MoeGemmParams q = p;
        q.w = p.second.w;
        q.w_scale = p.second.w_scale;
        q.w_global = p.second.w_global;
        q.y = p.second.y;
        DSV4_CUDA_CHECK(launch_moe_gemm(q, config, stream));
    }
}

}  // namespace dsv4::cuda
