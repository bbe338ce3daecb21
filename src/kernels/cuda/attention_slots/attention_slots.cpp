// Host-side contract of attention_slots (see attention_slots.h); kernel in attention_slots.cu.
#include "kernels/cuda/attention_slots/attention_slots.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4::cuda {

void attention_slots(const AttentionSlotsParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.tokens >= 0 && p.window > 0 && p.slots >= p.window, "attention_slots: tokens {} window {} slots {}",
               p.tokens, p.window, p.slots);
    if (p.tokens == 0) return;
    DSV4_CHECK(p.indices, "attention_slots: null pointer");
    DSV4_CHECK(!p.selected || p.slots == p.window + p.topk, "attention_slots: {} slots for window {} + top-k {}",
               p.slots, p.window, p.topk);
    DSV4_CHECK(p.selected || p.ratio > 0 || p.slots == p.window, "attention_slots: compressed slots need a ratio");
    const int64_t last_row = std::max({p.ring_row + p.window, p.chunk_row + p.tokens,
                                       p.compressed_row + (p.start_position + p.tokens) / std::max(p.ratio, 1) + 1});
    DSV4_CHECK(p.ring_row >= 0 && p.chunk_row >= 0 && p.compressed_row >= 0 && last_row < (int64_t(1) << 31),
               "attention_slots: pool rows do not fit int32");
    detail::launch_attention_slots(p, stream);
}

}  // namespace dsv4::cuda
