// Plan and host-side contract of the sparse attention launcher (see sparse_attention.h); kernels in the .cu.
#include "kernels/cuda/sparse_attention/sparse_attention.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cuda/common/resident_ctas.h"
#include "kernels/cuda/rope/rope.h"

namespace dsv4::cuda {
namespace {

constexpr int32_t kTile = 64, kHeadsPerCta = 64;

}  // namespace

// The sequential kernel where asked, or (kAuto) for a token's several splits where its CTAs of 64 heads, one per SM,
// fill at least half of the SMs: one CTA walks a V4 token's 10 tiles in ~0.23 ms on an H100, so from about half a
// wave on it beats the kernels (64 tokens: 234 us; 256: 902 against 455; 8,192: 31.1 ms against 13.7), and below,
// the kernels' tokens x splits CTAs or the cluster spread a few tokens' work wider (docs/perf.md).
bool detail::sparse_attention_takes_sequential(const SparseAttentionParams& p) {
    if (p.combine == SparseAttentionCombine::kSequential) return true;
    if (p.combine != SparseAttentionCombine::kAuto || p.splits < 2) return false;
    const int64_t ctas = int64_t(p.tokens) * ((p.heads + kHeadsPerCta - 1) / kHeadsPerCta);
    return 2 * ctas >= multiprocessor_count();
}

// SparseAttentionCombine's choice for a launch on the tensor-core path (a dsv4::Error where kCluster cannot run).
int32_t detail::sparse_attention_cluster_heads(const SparseAttentionParams& p) {
    if (p.combine == SparseAttentionCombine::kKernels || p.combine == SparseAttentionCombine::kSequential) return 0;
    const bool forced = p.combine == SparseAttentionCombine::kCluster;
    // The cluster kernel writes 4 outputs (8 bytes) at a time.
    const bool shape =
        p.splits <= kMaxClusterSplits && (forced || p.splits >= 2) && reinterpret_cast<uintptr_t>(p.out) % 8 == 0;
    DSV4_CHECK(!forced || shape, "sparse_attention: a cluster needs splits in [1, {}] (got {}) and out 8-byte aligned",
               kMaxClusterSplits, p.splits);
    if (!shape) return 0;
    if (forced) {
        const int32_t heads = p.cluster_heads                                  ? p.cluster_heads
                              : sparse_attention_resident_clusters(p, kNarrowClusterHeads) >= 1 ? kNarrowClusterHeads
                                                                               : kHeadsPerCta;
        DSV4_CHECK(sparse_attention_resident_clusters(p, heads) >= 1,
                   "sparse_attention: no cluster of {} CTAs of {} heads for head_dim {} on this device", p.splits,
                   heads, p.head_dim);
        return heads;
    }
    // The cluster where it needs no more waves than the main kernel of the three (decode-kernel bench, H200: one
    // token, 10 splits 34.8 -> 25.5 us; 64 tokens, 3 splits, two waves each 84.2 -> 54.2 us; 8 tokens, 10 splits, 7
    // clusters resident: two waves against one, 39.4 -> 50.5 us), with 16 heads per CTA where that fits too.
    const int64_t sms = multiprocessor_count();
    const int64_t kernel_waves =
        (int64_t(p.tokens) * ((p.heads + kHeadsPerCta - 1) / kHeadsPerCta) * p.splits + sms - 1) / sms;
    for (const int32_t heads : {kNarrowClusterHeads, kHeadsPerCta}) {
        const int64_t resident = sparse_attention_resident_clusters(p, heads);
        const int64_t clusters = int64_t(p.tokens) * ((p.heads + heads - 1) / heads);
        if (resident >= 1 && (clusters + resident - 1) / resident <= kernel_waves) return heads;
    }
    return 0;
}

namespace {

// The inverse RoPE of the paths that do not fuse it.
void inverse_rope(const SparseAttentionParams& p, cudaStream_t stream) {
    if (!p.inverse_rope_inv_freq || p.rope_dim == 0) return;
    ApplyRopeParams r;
    r.x = reinterpret_cast<__nv_bfloat16*>(p.out);
    r.inv_freq = p.inverse_rope_inv_freq;
    r.positions = p.positions;
    r.tokens = p.tokens;
    r.heads = p.heads;
    r.head_dim = p.head_dim;
    r.rope_dim = p.rope_dim;
    r.token_stride = int64_t(p.heads) * p.head_dim;
    r.inverse = true;
    apply_rope(r, stream);
}

}  // namespace

int64_t sparse_attention_workspace_per_token(int32_t heads, int32_t head_dim, int32_t splits) {
    return splits > 1 ? int64_t(splits) * heads * (2 + int64_t(head_dim)) : 0;
}

// One split per 64-key tile whatever the token count: the summation structure of a token's output then depends on
// its slot list alone (batch and chunk invariance), and a decode step of a few tokens still spreads over
// tokens x tiles CTAs (V4: W 128 + top-k 512 = 10 tiles per token).
SparseAttentionPlan plan_sparse_attention(int32_t heads, int32_t head_dim, int32_t slots) {
    SparseAttentionPlan plan;
    plan.splits = std::max<int32_t>(1, (slots + kTile - 1) / kTile);
    plan.workspace_floats_per_token = sparse_attention_workspace_per_token(heads, head_dim, plan.splits);
    return plan;
}

// The tensor-core kernels are instantiated for these head_dims only (sparse_attention.cu) and load the entry's nope
// part in 8-byte and its rope part in 4-value chunks.
SparseAttentionPath sparse_attention_path(int32_t head_dim, int32_t rope_dim) {
    const bool built = head_dim == 512 || head_dim == 128 || head_dim == 96 || head_dim == 80;
    const bool chunked = rope_dim % 4 == 0 && (head_dim - rope_dim) % 8 == 0 && head_dim > rope_dim;
    return built && chunked ? SparseAttentionPath::kTensorCore : SparseAttentionPath::kGeneric;
}

void sparse_attention(const SparseAttentionParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0, "sparse_attention: negative token count {}", p.tokens);
    if (p.tokens == 0) return;
    DSV4_CHECK(p.head_dim > 0 && p.head_dim <= kMaxGenericHeadDim && p.rope_dim >= 0 && p.rope_dim <= p.head_dim,
               "sparse_attention: head_dim {} must be in [1, {}] and rope_dim {} in [0, head_dim]", p.head_dim,
               kMaxGenericHeadDim, p.rope_dim);
    DSV4_CHECK(p.heads > 0 && p.slots >= 0 && p.splits >= 1, "sparse_attention: heads {} slots {} splits {}", p.heads,
               p.slots, p.splits);
    DSV4_CHECK(!p.inverse_rope_inv_freq == !p.positions,
               "sparse_attention: the inverse RoPE needs both inv_freq and positions");
    if (sparse_attention_path(p.head_dim, p.rope_dim) == SparseAttentionPath::kGeneric) {
        DSV4_CHECK(p.heads <= 65535, "sparse_attention: {} heads exceed the generic path's grid", p.heads);
        DSV4_CHECK(p.q && p.out && p.sink && (p.slots == 0 || (p.kv && p.indices)), "sparse_attention: null pointer");
        DSV4_CHECK(reinterpret_cast<uintptr_t>(p.kv) % 8 == 0, "sparse_attention: kv must be 8-byte aligned");
        detail::sparse_attention_generic_launch(p, stream);
        inverse_rope(p, stream);
        return;
    }
    DSV4_CHECK(p.tokens <= 2147483647 && (p.heads + kHeadsPerCta - 1) / kHeadsPerCta <= 65535 && p.splits <= 65535,
               "sparse_attention: grid too large (tokens {}, heads {}, splits {})", p.tokens, p.heads, p.splits);
    DSV4_CHECK(p.q && p.out && p.sink && (p.slots == 0 || (p.kv && p.indices)), "sparse_attention: null pointer");
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.kv) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % 4 == 0 && reinterpret_cast<uintptr_t>(p.workspace) % 8 == 0,
               "sparse_attention: q must be 16-byte, kv and workspace 8-byte, out 4-byte aligned");
    if (detail::sparse_attention_takes_sequential(p)) {
        detail::sparse_attention_sequential_launch(p, stream);
        inverse_rope(p, stream);
        return;
    }
    if (const int32_t heads = detail::sparse_attention_cluster_heads(p)) {
        detail::sparse_attention_cluster_launch(p, heads, stream);
        return;
    }
    const int64_t per_token = sparse_attention_workspace_per_token(p.heads, p.head_dim, p.splits);
    DSV4_CHECK(p.splits == 1 || (p.workspace && p.workspace_floats >= per_token),
               "sparse_attention: {} splits need a workspace of at least {} floats ({} given)", p.splits, per_token,
               p.workspace ? p.workspace_floats : 0);
    // Token groups that fit the workspace; each token's work is the same in any group.
    const int64_t group = p.splits > 1 ? std::min<int64_t>(p.tokens, p.workspace_floats / per_token) : p.tokens;
    for (int64_t t0 = 0; t0 < p.tokens; t0 += group) {
        SparseAttentionParams g = p;
        g.tokens = int32_t(std::min<int64_t>(group, p.tokens - t0));
        g.q = p.q + t0 * p.heads * p.head_dim;
        g.out = p.out + t0 * p.heads * p.head_dim;
        g.indices = p.slots ? p.indices + t0 * p.slots : p.indices;
        detail::sparse_attention_launch(g, stream);
    }
    inverse_rope(p, stream);
}

}  // namespace dsv4::cuda
