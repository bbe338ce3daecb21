// Host-side contract checks and the path choice of attention_inputs (attention_inputs.h); the fused kernel is in
// attention_inputs.cu, the separate path is the kernels it replaces.
#include "kernels/cuda/attention_inputs/attention_inputs.h"

#include "core/error.h"
#include "kernels/cuda/quant/quant.h"
#include "kernels/cuda/rms_norm/rms_norm.h"
#include "kernels/cuda/rope/rope.h"

namespace dsv4::cuda {

AttentionInputsPath attention_inputs_path(const AttentionInputsParams& p) {
    const int64_t nope = p.head_dim - p.rope_dim;
    const bool fused = p.tokens * p.heads <= kMaxFusedHeads && p.head_dim <= kStagedHeadDim && p.head_dim % 2 == 0 &&
                       p.rope_dim % 2 == 0 && p.rope_dim <= 256 && nope % kKvQuantBlock == 0 &&
                       reinterpret_cast<uintptr_t>(p.q) % 4 == 0 && reinterpret_cast<uintptr_t>(p.kv) % 4 == 0;
    return fused ? AttentionInputsPath::kFused : AttentionInputsPath::kSeparate;
}

void attention_inputs(const AttentionInputsParams& p, cudaStream_t stream) {
    DSV4_CHECK(p.q && p.kv && p.inv_freq && p.positions && p.entries, "attention_inputs: null pointer");
    DSV4_CHECK(!p.ring == !p.ring_slots, "attention_inputs: a ring needs its slots and slots need a ring");
    DSV4_CHECK(p.tokens >= 0 && p.heads > 0 && p.head_dim > 0, "attention_inputs: bad shape [{}, {}, {}]", p.tokens,
               p.heads, p.head_dim);
    DSV4_CHECK(p.rope_dim > 0 && p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim,
               "attention_inputs: rope_dim {} must be even and in (0, head_dim {}]", p.rope_dim, p.head_dim);
    DSV4_CHECK(reinterpret_cast<uintptr_t>(p.entries) % kKvEntryAlign == 0 &&
                   reinterpret_cast<uintptr_t>(p.ring) % kKvEntryAlign == 0,
               "attention_inputs: entries are not {}-byte aligned", kKvEntryAlign);
    if (p.tokens == 0) return;
    if (attention_inputs_path(p) == AttentionInputsPath::kFused) {
        detail::launch_attention_inputs(p, stream);
        return;
    }
    head_rms_norm({p.q, p.tokens, p.heads, p.head_dim, p.heads * p.head_dim, p.eps}, stream);
    const ApplyRopeParams ropes[] = {
        {p.q, p.inv_freq, p.positions, p.tokens, p.heads, p.head_dim, p.rope_dim, p.heads * p.head_dim, false},
        {p.kv, p.inv_freq, p.positions, p.tokens, 1, p.head_dim, p.rope_dim, p.head_dim, false}};
    apply_ropes(ropes, stream);
    pack_kv_entries({p.kv, p.entries, nullptr, p.tokens, p.head_dim, p.rope_dim, p.head_dim}, stream);
    if (p.ring) pack_kv_entries({p.kv, p.ring, p.ring_slots, p.tokens, p.head_dim, p.rope_dim, p.head_dim}, stream);
}

}  // namespace dsv4::cuda
