// The KV compressor of CSA/HCA layers and of the lightning indexer on the device (spec §7.3, §7.4, §7.8): the
// per-sequence f32 state machine of src/model/compressor.cpp plus the finishing steps of run_compressor in
// src/model/attention.cpp, writing packed entries (kv_entry_layout.h) into a paged cache pool.
// A chunk holds the tokens of one or more sequences; each sequence's tokens are consecutive rows with
// consecutive positions. Every emitted entry is pooled from the chunk rows and the state with the same
// arithmetic whatever the split, so the entries are chunk-invariant bit for bit.
// Tested in tests/gpu/compressor_test.cpp (CPU reference, every split point of a short sequence).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

enum class CompressorKind {
    kMain,     // nope FP8 round trip (64-blocks, UE8M0), main entry layout
    kIndexer,  // Hadamard (Sylvester, x dim^-0.5) -> bf16 -> FP4 round trip (32-blocks), indexer entry layout
};

struct CompressorParams {
    // The chunk: `tokens` rows, f32 projections from the GEMM (ape not yet added). Both may be column ranges of one
    // wider buffer (the executor's stacked projections of x).
    const float* kv;         // [tokens, width] f32, wkv x, row stride row_stride; width = (overlap ? 2 : 1) * head_dim
    const float* score;      // [tokens, width] f32, wgate x, row stride row_stride
    int64_t row_stride = 0;  // elements between consecutive rows of kv and of score (>= width)
    const int32_t* token_seq;  // [tokens] the sequence (index into the seq_* arrays) of each row

    // Per sequence of the chunk.
    const int32_t* seq_first_row;       // [seqs] first chunk row of the sequence
    const int32_t* seq_tokens;          // [seqs] rows of the sequence in this chunk (>= 0)
    const int32_t* seq_start_position;  // [seqs] absolute position of the first row
    const int32_t* seq_state;           // [seqs] index into the state arrays and the page-table rows

    // Weights of this compressor.
    const float* ape;            // [ratio, width] f32
    const float* norm_weight;    // [head_dim] f32 (RMSNorm weight)
    const float* rope_inv_freq;  // [rope_dim / 2] f32 (cpu::RopeTable::inv_freq of the layer)

    // Per-sequence state (src/model/compressor.h): slots = (overlap ? 2 : 1) * ratio; with overlap, slots
    // [0, ratio) hold the previous complete window and [ratio, 2 ratio) the current one. Updated in place.
    float* state_kv;     // [num_states, slots, width] f32 (init 0)
    float* state_score;  // [num_states, slots, width] f32 (init -inf), ape included

    // Output: entry e of the sequence with state s goes to pool row
    // page_table[s * max_pages + e / page_size] * page_size + e % page_size.
    uint8_t* cache;             // [pool_entries, entry_bytes] packed entries (main or indexer layout)
    const int32_t* page_table;  // [num_states, max_pages] int32 page ids
    int32_t max_pages = 0;
    int32_t page_size = 0;  // entries per page

    int32_t tokens = 0;
    int32_t seqs = 0;
    int32_t head_dim = 0;  // d (main: 512; indexer: index_head_dim)
    int32_t rope_dim = 0;  // trailing rope dims of the entry
    int32_t ratio = 0;     // m (4: overlap; any other value: no overlap)
    float eps = 1e-6f;     // RMSNorm epsilon
    CompressorKind kind = CompressorKind::kMain;
};

// The entry being finished sits in shared memory (head_dim f32 values): any head_dim up to this bound (V4: 512).
inline constexpr int32_t kMaxCompressorDim = 16384;

// Emits the entries closed by the chunk's tokens, then advances the states. Host-side contract checks throw
// dsv4::Error. No allocation, no host synchronization (capturable in a CUDA graph).
void compressor(const CompressorParams& params, cudaStream_t stream);

namespace detail {
void compressor_launch(const CompressorParams& params, cudaStream_t stream);
}

}  // namespace dsv4::cuda
