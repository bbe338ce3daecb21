// Host-side contract of attention_slots (see attention_slots.h); kernel in attention_slots.cu.
#include "kernels/cuda/attention_slots/attention_slots.h"

#include "core/error.h"

namespace dsv4::cuda {

void detail::check_attention_slots(const AttentionSlotsParams& p) {
    DSV4_CHECK(p.tokens >= 0 && p.window > 0 && p.slots >= p.window, "attention_slots: tokens {} window {} slots {}",
               p.tokens, p.window, p.slots);
    DSV4_CHECK(p.indices && p.positions && p.token_seq && p.seq_first_row && p.seq_start_position && p.seq_state,
               "attention_slots: null pointer");
    DSV4_CHECK(!p.selected || p.slots == p.window + p.topk, "attention_slots: {} slots for window {} + top-k {}",
               p.slots, p.window, p.topk);
    DSV4_CHECK(p.selected || p.ratio > 0 || p.slots == p.window, "attention_slots: compressed slots need a ratio");
    DSV4_CHECK(p.slots == p.window || (p.page_table && p.max_pages > 0 && p.page_size > 0),
               "attention_slots: compressed slots need a page table");
    DSV4_CHECK(p.ring_row >= 0 && p.chunk_row >= 0 && p.compressed_row >= 0, "attention_slots: negative pool row");
}

void attention_slots(const AttentionSlotsParams& p, cudaStream_t stream) {
    if (p.tokens == 0) return;
    detail::check_attention_slots(p);
    detail::launch_attention_slots(p, stream);
}

}  // namespace dsv4::cuda
