// One token's key list (attention_slots.h), written by the threads of a CTA: the attention_slots kernel's body, and
// the tail of the indexer's top-k, which writes the list from the selection it just made (IndexerTopkParams::slots),
// so both give the same rows.
#pragma once

#include <cstdint>

#include "kernels/cuda/attention_slots/attention_slots.h"

namespace dsv4::cuda {

// The per-token values a key list is made of: the token's position and its sequence's start, first row in the
// piece and state (page-table row). Loaded apart from the writing so that a caller can issue them early.
struct SlotsToken {
    int64_t position, start, first_row, state;
};
__device__ __forceinline__ int slots_token_sequence(const AttentionSlotsParams& p, int t) {
    return p.token_seq[t];
}
__device__ __forceinline__ SlotsToken slots_token(const AttentionSlotsParams& p, int t, int q) {
    return {p.positions[t], p.seq_start_position[q], p.seq_first_row[q], p.seq_state[q]};
}

// `selected(i)`: the CSA selection's entry i (i < p.topk; -1 past the visible), used when p.selected is set.
template <class Selected>
__device__ __forceinline__ void write_attention_slots(const AttentionSlotsParams& p, int t, const SlotsToken& tk,
                                                      Selected selected) {
    const int64_t position = tk.position, start = tk.start, first_row = tk.first_row, state = tk.state;
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
template <class Selected>
__device__ __forceinline__ void write_attention_slots(const AttentionSlotsParams& p, int t, Selected selected) {
    write_attention_slots(p, t, slots_token(p, t, slots_token_sequence(p, t)), selected);
}

}  // namespace dsv4::cuda
