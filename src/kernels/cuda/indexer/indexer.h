// Lightning indexer on the device (spec §7.4): scores of every query token over its visible compressed index keys
// (w < (position + 1) / ratio) with the bf16 stages of indexer_scores in src/model/attention.cpp
// (q.k -> bf16, ReLU, x head weight -> bf16, sum over heads in f32 in head order -> bf16), then the top-k
// (k = min(topk, visible); ties -> lower index; sorted by score descending, then index ascending: the slot order of
// the CPU reference). Keys are read from the packed FP4 entries (kv_entry_layout.h) through the page table.
// Tested in tests/gpu/indexer_test.cpp against a transcription of the CPU reference.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

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
    int32_t heads = 0;        // index_n_heads (64; tiny 8), at most 64
    int32_t dim = 0;          // index_head_dim (128; tiny 32, 64), a multiple of 32
    int32_t ratio = 4;
    int32_t max_visible = 0;  // >= (max position + 1) / ratio
    int32_t max_pages = 0;
    int32_t page_size = 0;
};

struct IndexerTopkParams {
    const uint16_t* scores;          // [tokens, max_visible] bf16 from indexer_scores
    const int32_t* token_position;   // [tokens]
    int32_t* selected;               // [tokens, topk] int32 entry indices, best first; -1 past min(topk, visible)
    int32_t tokens = 0;
    int32_t ratio = 4;
    int32_t max_visible = 0;
    int32_t topk = 0;                // index_topk, at most 1024
};

void indexer_scores(const IndexerScoresParams& params, cudaStream_t stream);
void indexer_topk(const IndexerTopkParams& params, cudaStream_t stream);

namespace detail {
void indexer_scores_launch(const IndexerScoresParams& params, cudaStream_t stream);
void indexer_topk_launch(const IndexerTopkParams& params, cudaStream_t stream);
}

}  // namespace dsv4::cuda
