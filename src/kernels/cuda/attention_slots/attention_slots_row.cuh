// One token's key list (attention_slots.h), written by the threads of a CTA: the attention_slots kernel's body, and
// the tail of the indexer's top-k, which writes the list from the selection it just made (IndexerTopkParams::slots),
// so both give the same rows.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_slots/attention_slots.h"

namespace dsv4::cuda {

// `selected(i)`: the CSA selection's entry i (i < p.topk; -1 past the visible), used when p.selected is set.
template <class Selected>
__device__ __forceinline__ void write_attention_slots(const AttentionSlotsParams& p, int t, Selected selected) {
    const int64_t position = p.positions[t];
    const int q = p.token_seq[t];
    const int64_t start = p.seq_start_position[q], first_row = p.seq_first_row[q], state = p.seq_state[q];
    const int64_t first = position - p.window + 1 > 0 ? position - p.window + 1 : 0;
    const int64_t ring = p.ring_row + state * p.window;
    auto compressed = [&](int64_t e) {
        const int64_t page = p.page_table[state * p.max_pages + e / p.page_size];
        return p.compressed_row + page * p.page_size + e % p.page_size;
    };
    int32_t* out = p.indices + int64_t(t) * p.slots;
    for (int j = threadIdx.x; j < p.slots; j += blockDim.x) {
        int64_t row = -1;
        if (j < p.window) {
            const int64_t k = first + j;
            if (k <= position) row = k < start ? ring + k % p.window : p.chunk_row + first_row + (k - start);
        } else {
            const int i = j - p.window;
            if (p.selected) {
                const int32_t e = i < p.topk ? selected(i) : -1;
                if (e >= 0) row = compressed(e);
            } else if (i < (position + 1) / p.ratio) {
                row = compressed(i);
            }
        }
        out[j] = int32_t(row);
    }
}

}  // namespace dsv4::cuda
