// Lightning indexer on the device (spec §7.4): scores of every query token over its visible compressed index keys
// (w < (position + 1) / ratio) with the bf16 stages of indexer_scores in src/model/attention.cpp
// (q.k -> bf16, ReLU, x head weight -> bf16, sum over heads in f32 in head order -> bf16), then the top-k
// (k = min(topk, visible); ties -> lower index; sorted by score descending, then index ascending: the slot order of
// the CPU reference). Keys are read from the packed FP4 entries (kv_entry_layout.h) through the page table.
// Scores have two paths, chosen explicitly by indexer_scores_path: tensor cores for dim 32, 64, 96 or 128 and at
// most 64 heads (V4 and the fixtures), and a generic CUDA-core kernel for any other power-of-two dim (small models:
// 2 .. 16, 256, ...) or head count, one thread per key doing the CPU's operations in its order.
// Tested in tests/gpu/indexer_test.cpp against a transcription of the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/attention_slots/attention_slots.h"

namespace dsv4::cuda {

struct IndexerScoresParams {
    const uint16_t* q;             // [tokens, heads, dim] bf16 (Hadamard + FP4 round trip applied)
    const uint16_t* head_weights;  // [tokens, heads] bf16 (weights_proj x * dim^-0.5 * heads^-0.5, rounded)
    const uint8_t* keys;           // [pool_entries, entry_bytes] packed indexer entries
    const int32_t* page_table;     // [num_states, max_pages] page ids; entry e -> pool row page * page_size + e % page_size
    const int32_t* token_state;    // [tokens] page-table row of the token's sequence
    const int32_t* token_position; // [tokens] absolute position
    uint16_t* scores;              // [tokens, max_visible] bf16; only w < visible(t) is written
    int32_t tokens = 0;
    int32_t heads = 0;  // index_n_heads (64; tiny 8)
    int32_t dim = 0;    // index_head_dim (128; tiny 32, 64; any even dim on the generic path)
    int32_t ratio = 4;
    int32_t max_visible = 0;  // >= (max position + 1) / ratio
    int32_t max_pages = 0;
    int32_t page_size = 0;
    // Neighbouring tokens mostly belong to one sequence (a prefill piece): CTAs take 8 tokens and gather and
    // dequantize each 64-key tile once for those of one sequence. Speed only: the same scores either way.
    bool sequence_runs = false;
};

struct IndexerTopkParams {
    const uint16_t* scores;          // [tokens, max_visible] bf16 from indexer_scores
    const int32_t* token_position;   // [tokens]
    int32_t* selected;               // [tokens, topk] int32 entry indices, best first; -1 past min(topk, visible)
    int32_t tokens = 0;
    int32_t ratio = 4;
    int32_t max_visible = 0;
    int32_t topk = 0;  // index_topk (512 in V4), at most kMaxIndexerTopk
    // Optional (slots.indices null: none): the sparse attention's key list of every token as attention_slots writes
    // it with `selected` = this launch's output (slots.selected must be `selected`), from the CTA's own candidates:
    // the selection's consumer without a launch of its own.
    AttentionSlotsParams slots;
};

// The top-k kernel sorts its candidates in shared memory: topk rounded up to a power of two, 8 bytes each.
inline constexpr int32_t kMaxIndexerTopk = 16384;
constexpr int32_t indexer_topk_candidates(int32_t topk) {
    int32_t n = 1;
    while (n < topk) n *= 2;
    return n;
}

enum class IndexerScoresPath { kTensorCore, kGeneric };
IndexerScoresPath indexer_scores_path(int32_t heads, int32_t dim);

void indexer_scores(const IndexerScoresParams& params, cudaStream_t stream);
void indexer_topk(const IndexerTopkParams& params, cudaStream_t stream);

namespace detail {
void indexer_scores_launch(const IndexerScoresParams& params, cudaStream_t stream);
void indexer_scores_generic_launch(const IndexerScoresParams& params, cudaStream_t stream);
void indexer_topk_launch(const IndexerTopkParams& params, cudaStream_t stream);
}

}  // namespace dsv4::cuda
