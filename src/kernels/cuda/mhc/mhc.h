// Manifold-constrained hyper-connections on the GPU (spec §5; cpu::hc_pre / hc_post / hc_head):
//   hc_pre   mixer logits = (fn . v) * rsqrt(mean(v^2) + eps) over the n_hc * dim stream values v (f32 sums),
//            pre = sigmoid + eps, post = 2 sigmoid, comb = Sinkhorn(logits), x = bf16(sum_j pre_j X_j)
//   hc_head  the same with pre only (the final collapse before the head norm)
//   hc_post  streams_out[k] = bf16(post_k f + sum_j comb[j][k] X_j)
// Streams are bf16 [tokens, n_hc, dim]; the mix stays f32. Elementwise math repeats the CPU's f32 operations in the
// CPU's order (unfused), so given the same mix the outputs are bitwise; the mixer logits differ by the f32
// reduction order and exp() by a few ulps. n_hc 2 and 4 (V4, the fixtures) run kernels specialised for them;
// any other n_hc a generic kernel with the same arithmetic (mhc_generic.cu; the same bits at 2 and 4).
// Tested in tests/gpu/mhc_test.cpp.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/moe_expert/moe_expert.h"
#include "kernels/cuda/rms_norm/rms_norm.h"

namespace dsv4::cuda {

// Threads per token of hc_pre / hc_head. Each thread accumulates ceil(n_hc * dim / kHcThreads) products before a
// 5 + 3 level tree; the tests derive their f32 reduction bound from this.
inline constexpr int kHcThreads = 256;

// hc_pre / hc_head run a CTA per token, a CTA per 4 tokens or a cluster of CTAs per token; all compute the same
// per-thread chains and trees, so the choice never changes a bit (mhc.cu; tests compare them). Which is fastest
// (detail::hc_mix_auto_path) was measured with all three side by side (dsv4_bench_decode_kernels hc, docs/perf.md).

constexpr int64_t hc_pre_mix_size(int64_t n_hc) {
    return (2 + n_hc) * n_hc;
}

// The generic kernel keeps its per-warp partial sums of the (2 + n) n + 1 reduced values in shared memory.
inline constexpr int64_t kMaxHcMult = 64;

struct HcMixParams {
    const __nv_bfloat16* streams = nullptr;  // [tokens, n_hc, dim] bf16
    const float* fn = nullptr;       // [rows, n_hc * dim] f32; rows = hc_pre_mix_size(n_hc) (hc_pre) or n_hc (hc_head)
    const float* base = nullptr;     // [rows] f32
    const float* scale = nullptr;    // [3] f32 (pre, post, comb) for hc_pre; [1] for hc_head
    __nv_bfloat16* x_out = nullptr;  // [tokens, dim] bf16: sum_j pre_j X_j
    float* mix = nullptr;  // [tokens, rows] f32: pre [n_hc] | post [n_hc] | comb [n_hc * n_hc] (hc_pre); pre (hc_head)
    float* logits = nullptr;  // [tokens, rows] f32, optional: the raw mixer logits (for dumps and tests)
    int64_t tokens = 0, n_hc = 0, dim = 0, sinkhorn_iters = 0;
    float hc_eps = 0.0f, norm_eps = 0.0f;
    // hc_pre: leave comb un-normalized (scale * logit + base) for a later hc_sinkhorn with the same params, so the
    // Sinkhorn iterations, which only hc_post needs, can run beside the sub-layer instead of before it.
    bool defer_sinkhorn = false;
    // Optional instrument of the split kernel (common/phase_clock.cuh; null in the model): its phase marks,
    // kPhaseValues per CTA.
    int64_t* phase_clock = nullptr;
};
// hc_pre = the mix kernel (pre, post, comb's inputs, the collapse x), then hc_sinkhorn on comb unless deferred.
void hc_pre(const HcMixParams& p, cudaStream_t stream);
void hc_head(const HcMixParams& p, cudaStream_t stream);
// hc_pre, then rms_norm(norm) of its x in place (norm.x == norm.y == p.x_out, rows tokens, width and strides dim;
// quantized where norm.q is set): the same bits as the two launches. One launch where hc_pre takes its split path
// (decode batches of up to 16 tokens, n_hc 2 or 4, dim <= 8192): the cluster that computed x also normalizes it,
// with rms_norm's own chains and trees on its values (mhc.cu). Elsewhere the two launches. Tested in
// tests/gpu/mhc_test.cpp.
void hc_pre_norm(const HcMixParams& p, const RmsNormParams& norm, cudaStream_t stream);
// The Sinkhorn normalization of every token's comb in p.mix, in place: cpu::sinkhorn's operations in its order on
// each element (a warp holds 2 tokens of n_hc 4, 8 of n_hc 2; a thread per token for other n_hc).
void hc_sinkhorn(const HcMixParams& p, cudaStream_t stream);

struct HcPostParams {
    const __nv_bfloat16* f = nullptr;        // [tokens, dim] bf16 sub-layer output
    const __nv_bfloat16* streams = nullptr;  // [tokens, n_hc, dim] bf16
    const float* mix = nullptr;              // [tokens, hc_pre_mix_size(n_hc)] f32 from hc_pre
    __nv_bfloat16* out = nullptr;            // [tokens, n_hc, dim] bf16; must not alias streams
    int64_t tokens = 0, n_hc = 0, dim = 0;
};
void hc_post(const HcPostParams& p, cudaStream_t stream);

// hc_post of the MoE's output: f is moe_combine(combine)'s, computed in the same kernel with moe_combine's code
// (moe_combine.cuh) instead of read from p.f (unused), so the same bits as moe_combine then hc_post, in one launch and
// without reading f back. f is still stored in combine.out (a [tokens, dim] buffer: 8 KB a token), so it stays
// what moe_combine leaves there. n_hc other than 2 and 4 (no V4 shape): those two launches. Tested in
// tests/gpu/mhc_test.cpp.
void hc_post_of_moe(const HcPostParams& p, const MoeCombineParams& combine, cudaStream_t stream);

// The kernel launches behind the checked launchers (mhc.cu, mhc_sinkhorn.cu, mhc_post.cu); they assume a valid
// contract.
namespace detail {
// kAuto: the specialised kernels for n_hc 2 and 4 (the path hc_mix_auto_path picks), kGeneric otherwise. Tests
// force the others (kGeneric works for every n_hc; kRowGroups is hc_pre's only).
enum class HcMixPath { kAuto, kPerToken, kTiled, kSplit, kRowGroups, kGeneric };
// kAuto's choice for n_hc 4, dim 4096 on an H200 (2026-11-25, us per call in the decode-kernel bench; split / per
// token / tiled): hc_pre at 128 tokens 65.9 / 105.1 / 112.1, at 256 121.2 / 112.9 / 125.3 (but in the model's
// batch-256 step the per-token path made the stage slower, 133 -> 165 us: split kept), at 1024 485.2 / 204.6 /
// 145.0; hc_head at 64 tokens 14.0 / 11.7 / 30.5, at 256 36.5 / 13.8 / 31.3, at 1024 152.1 / 29.3 / 53.6.
// hc_pre's row groups take 17 to 512 tokens (H100, 2026-11-27, split / tiled / row groups: 16 tokens 17.6 / 88.5 /
// 19.7, 32 25.7 / 87.5 / 20.1, 64 37.6 / 100.2 / 22.6, 128 60.4 / 101.5 / 23.6, 256 112.5 / 100.9 / 43.2, 512 214.2 /
// 101.8 / 72.8, 1024 479.8 / 129.6 / 146.0). Since their column loops run without bound checks (H100, 2026-12-05,
// split / tiled / row groups: 16 tokens 12.1 / 99.5 / 13.8, 32 17.9 / 100.5 / 13.8, 1024 282.3 / 128.5 / 102.8, 2048
// 557.7 / 250.7 / 222.1, 8192 2218 / 939 / 843) the row groups take every hc_pre above 16 tokens; the tiled kernel
// stays for the tests and the bench.
constexpr HcMixPath hc_mix_auto_path(int64_t tokens, bool head) {
    if (head) return tokens <= 64 ? HcMixPath::kSplit : HcMixPath::kPerToken;
    return tokens <= 16 ? HcMixPath::kSplit : HcMixPath::kRowGroups;
}
constexpr bool hc_specialised(int64_t n_hc) {
    return n_hc == 2 || n_hc == 4;
}
// The mix kernel of `path`, then (hc_pre, unless p.defer_sinkhorn) launch_hc_sinkhorn: the complete mix. With
// `norm` (hc_pre_norm's, contract checked), the rms_norm too: in the split kernel where hc_pre_norm_fused.
void launch_hc_mix(const HcMixParams& p, bool head, cudaStream_t stream, HcMixPath path = HcMixPath::kAuto,
                   const RmsNormParams* norm = nullptr);
// Whether hc_pre with `path` (kAuto: its choice) runs hc_pre_norm's rms_norm in its own kernel.
bool hc_pre_norm_fused(const HcMixParams& p, HcMixPath path = HcMixPath::kAuto);
void launch_hc_sinkhorn(const HcMixParams& p, cudaStream_t stream);
void launch_hc_post(const HcPostParams& p, cudaStream_t stream, bool generic = false);
void launch_hc_post_of_moe(const HcPostParams& p, const MoeCombineParams& combine, cudaStream_t stream);  // n_hc 2, 4
void launch_hc_mix_generic(const HcMixParams& p, bool head, cudaStream_t stream);  // mhc_generic.cu
void launch_hc_sinkhorn_generic(const HcMixParams& p, cudaStream_t stream);
void launch_hc_post_generic(const HcPostParams& p, cudaStream_t stream);
}  // namespace detail

}  // namespace dsv4::cuda
