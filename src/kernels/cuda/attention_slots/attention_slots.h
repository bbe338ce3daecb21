// The key list of every query token for sparse_attention (src/model/attention.cpp step 5), as rows of one packed
// entry pool: `window` slots first (positions max(0, p - W + 1) .. p, oldest first, then -1 for the missing ones),
// the sequence's ring row (k % W) for positions before the piece and the piece's own row for positions inside it;
// then the compressed entries: CSA the indexer's selection in its order (-1 stays -1), HCA entries
// 0 .. (p + 1) / ratio - 1 in order, -1 after. A piece holds the tokens of one or more sequences (consecutive rows,
// consecutive positions each), all described by device arrays, so a decode step captured in a CUDA graph computes
// its slots from whatever the metadata buffers hold at replay. Tested through tests/gpu/cuda_model_test.cpp and
// cuda_batch_test.cpp (GPU vs CPU forward, batched vs alone) and, written by the indexer's top-k, in
// tests/gpu/indexer_test.cpp against this launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct AttentionSlotsParams {
    int32_t* indices = nullptr;         // [tokens, slots] pool rows, -1 = empty
    const int32_t* selected = nullptr;  // [tokens, topk] CSA entry indices (best first, -1 past the visible); or null

    // The piece (device arrays).
    const int32_t* positions = nullptr;           // [tokens] absolute position of each row
    const int32_t* token_seq = nullptr;           // [tokens] the row's sequence (index into the seq_* arrays)
    const int32_t* seq_first_row = nullptr;       // [seqs] first row of the sequence in the piece
    const int32_t* seq_start_position = nullptr;  // [seqs] position of that row
    const int32_t* seq_state = nullptr;           // [seqs] state slot of the sequence (ring and page-table row)

    // Compressed entry e of state s is pool row compressed_row + page_table[s * max_pages + e / page_size] *
    // page_size + e % page_size (the layout the compressor writes).
    const int32_t* page_table = nullptr;
    int32_t max_pages = 0, page_size = 0;

    int32_t tokens = 0, slots = 0;  // slots = window + compressed slots (>= what any token needs; -1 beyond)
    int32_t window = 0;             // W
    int32_t topk = 0;               // columns of selected (CSA)
    int32_t ratio = 0;              // HCA compress ratio when selected is null; 0: window only
    int64_t ring_row = 0;           // pool row of (state 0, ring slot 0); state s's ring slot j is ring_row + s W + j
    int64_t chunk_row = 0;          // pool row of the piece's row 0 entry
    int64_t compressed_row = 0;     // pool row of page 0 of the layer's compressed entries
};
void attention_slots(const AttentionSlotsParams& p, cudaStream_t stream);

namespace detail {
// attention_slots's contract, for launches that write the list themselves (IndexerTopkParams::slots); throws.
void check_attention_slots(const AttentionSlotsParams& p);
void launch_attention_slots(const AttentionSlotsParams& p, cudaStream_t stream);
}

}  // namespace dsv4::cuda
