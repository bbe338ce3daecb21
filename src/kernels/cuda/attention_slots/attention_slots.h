// The key list of every query token for sparse_attention (src/model/attention.cpp step 5), as rows of one packed
// entry pool: `window` slots first (positions max(0, p - W + 1) .. p, oldest first, then -1 for the missing ones),
// the ring row (k % W) for positions before the chunk and the chunk's own row for positions inside it; then the
// compressed entries: CSA the indexer's selection in its order (-1 stays -1), HCA entries 0 .. (p + 1) / ratio - 1
// in order, -1 after. Everything is computed on the device from scalars, so a decode step needs no host work
// beyond the launch. Tested through tests/gpu/cuda_model_test.cpp (GPU vs CPU forward).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dsv4::cuda {

struct AttentionSlotsParams {
    int32_t* indices = nullptr;         // [tokens, slots] pool rows, -1 = empty
    const int32_t* selected = nullptr;  // [tokens, topk] CSA entry indices (best first, -1 past the visible); or null
    int32_t tokens = 0, slots = 0;      // slots = window + compressed slots
    int32_t window = 0;                 // W
    int32_t topk = 0;                   // columns of selected (CSA)
    int32_t ratio = 0;                  // HCA compress ratio when selected is null; 0: window only
    int64_t start_position = 0;         // position of the chunk's first token
    int64_t ring_row = 0;               // pool row of ring slot 0
    int64_t chunk_row = 0;              // pool row of the chunk's first token's entry
    int64_t compressed_row = 0;         // pool row of compressed entry 0
};
void attention_slots(const AttentionSlotsParams& p, cudaStream_t stream);

namespace detail {
void launch_attention_slots(const AttentionSlotsParams& p, cudaStream_t stream);
}

}  // namespace dsv4::cuda
