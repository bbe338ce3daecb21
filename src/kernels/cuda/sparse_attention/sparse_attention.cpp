// Plan and host-side contract of the sparse attention launcher (see sparse_attention.h); kernels in the .cu.
#include "kernels/cuda/sparse_attention/sparse_attention.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::cuda {
namespace {
constexpr int32_t kTile = 64, kHeadsPerCta = 64;
}

// Split a token's slots over CTAs only when the tokens alone leave most SMs idle (decode): aim at two CTAs per SM,
// never more splits than 64-key tiles. Not yet measured; a first heuristic.
SparseAttentionPlan plan_sparse_attention(int32_t tokens, int32_t heads, int32_t head_dim, int32_t slots,
                                          int32_t num_sms) {
    SparseAttentionPlan plan;
    const int64_t ctas = int64_t(tokens) * ((heads + kHeadsPerCta - 1) / kHeadsPerCta);
    const int32_t tiles = std::max<int32_t>(1, (slots + kTile - 1) / kTile);
    if (ctas > 0 && ctas < num_sms) {
        const int64_t want = (2 * int64_t(num_sms) + ctas - 1) / ctas;
        plan.splits = int32_t(std::clamp<int64_t>(want, 1, tiles));
        // With ceil-divided tiles per split, trailing splits can be empty; drop them.
        const int32_t per_split = (tiles + plan.splits - 1) / plan.splits;
        plan.splits = (tiles + per_split - 1) / per_split;
    }
    if (plan.splits > 1)
        plan.workspace_floats = int64_t(tokens) * plan.splits * heads * (2 + int64_t(head_dim));
    return plan;
}

void sparse_attention(const SparseAttentionParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0, "sparse_attention: negative token count {}", p.tokens);
    if (p.tokens == 0) return;
    DSV4_CHECK(p.head_dim == 512 || p.head_dim == 128 || p.head_dim == 96 || p.head_dim == 80,
               "sparse_attention: head_dim {} is not built (512, or the tiny test dims 128, 96, 80)", p.head_dim);
    DSV4_CHECK(p.rope_dim >= 0 && p.rope_dim % 4 == 0 && (p.head_dim - p.rope_dim) % 8 == 0 &&
                   p.rope_dim < p.head_dim,
               "sparse_attention: rope_dim {} must be a multiple of 4 leaving a multiple of 8 nope dims of {}",
               p.rope_dim, p.head_dim);
    DSV4_CHECK(p.heads > 0 && p.slots >= 0 && p.splits >= 1, "sparse_attention: heads {} slots {} splits {}", p.heads,
               p.slots, p.splits);
    DSV4_CHECK(p.tokens <= 2147483647 && (p.heads + kHeadsPerCta - 1) / kHeadsPerCta <= 65535 && p.splits <= 65535,
               "sparse_attention: grid too large (tokens {}, heads {}, splits {})", p.tokens, p.heads, p.splits);
    DSV4_CHECK(p.q && p.out && p.sink && (p.slots == 0 || (p.kv && p.indices)), "sparse_attention: null pointer");
    DSV4_CHECK(p.splits == 1 || p.workspace, "sparse_attention: {} splits need the plan's workspace", p.splits);
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.kv) % 8 == 0 &&
                   reinterpret_cast<uintptr_t>(p.out) % 4 == 0 && reinterpret_cast<uintptr_t>(p.workspace) % 8 == 0,
               "sparse_attention: q must be 16-byte, kv and workspace 8-byte, out 4-byte aligned");
    detail::sparse_attention_launch(p, stream);
}

}  // namespace dsv4::cuda
