// Host-side contract of the indexer launchers (see indexer.h); kernels in indexer.cu.
#include "kernels/cuda/indexer/indexer.h"

#include "core/error.h"

namespace dsv4::cuda {

// The tensor-core kernel stages at most 64 heads and 128 dims, in k-steps of 16 and 32-value scale blocks.
IndexerScoresPath indexer_scores_path(int32_t heads, int32_t dim) {
    return heads <= 64 && dim >= 32 && dim <= 128 && dim % 32 == 0 ? IndexerScoresPath::kTensorCore
                                                                   : IndexerScoresPath::kGeneric;
}

void indexer_scores(const IndexerScoresParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0 && p.max_visible >= 0, "indexer_scores: tokens {} max_visible {}", p.tokens,
               p.max_visible);
    if (p.tokens == 0 || p.max_visible == 0) return;
    DSV4_CHECK(p.heads > 0, "indexer_scores: {} heads", p.heads);
    DSV4_CHECK(p.dim >= 2 && p.dim % 2 == 0, "indexer_scores: dim {} must be even and positive (packed pairs)", p.dim);
    DSV4_CHECK(p.ratio > 0 && p.page_size > 0 && p.max_pages > 0, "indexer_scores: ratio {} page_size {} max_pages {}",
               p.ratio, p.page_size, p.max_pages);
    DSV4_CHECK((p.max_visible + 63) / 64 <= 65535, "indexer_scores: max_visible {} too large for one launch",
               p.max_visible);
    DSV4_CHECK(p.q && p.head_weights && p.keys && p.page_table && p.token_state && p.token_position && p.scores,
               "indexer_scores: null pointer");
    if (indexer_scores_path(p.heads, p.dim) == IndexerScoresPath::kGeneric) {
        detail::indexer_scores_generic_launch(p, stream);
        return;
    }
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.q) % 4 == 0, "indexer_scores: q must be 4-byte aligned");
    detail::indexer_scores_launch(p, stream);
}

void indexer_topk(const IndexerTopkParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0, "indexer_topk: negative token count {}", p.tokens);
    if (p.tokens == 0) return;
    DSV4_CHECK(p.topk > 0 && p.topk <= kMaxIndexerTopk, "indexer_topk: topk {} (1 to {} supported)", p.topk,
               kMaxIndexerTopk);
    DSV4_CHECK(p.ratio > 0 && p.max_visible >= 0, "indexer_topk: ratio {} max_visible {}", p.ratio, p.max_visible);
    DSV4_CHECK(p.token_position && p.selected && (p.max_visible == 0 || p.scores), "indexer_topk: null pointer");
    if (p.slots.indices) {
        DSV4_CHECK(p.slots.selected == p.selected && p.slots.topk == p.topk && p.slots.tokens == p.tokens &&
                       p.slots.positions == p.token_position,
                   "indexer_topk: the key list must be of this launch's tokens and selection");
        detail::check_attention_slots(p.slots);
    }
    detail::indexer_topk_launch(p, stream);
}

}  // namespace dsv4::cuda
