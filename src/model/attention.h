// The attention sub-layer of one block (spec §7): q/kv projections, sliding window, compressor, lightning
// indexer and top-k, sparse attention with sinks, inverse RoPE, grouped output projection.
// Tested end to end by the golden fixtures (tests/model/).
#pragma once

#include <cstdint>

#include "kernels/cpu/rope.h"
#include "model/numerics.h"
#include "model/observer.h"
#include "model/sequence_state.h"
#include "model/weights.h"

namespace dsv4 {


struct AttentionContext {
    const ModelConfig& config;
    const Precision& precision;
    const cpu::RopeTable& rope;     // this layer's family: main (SWA) or compress (CSA/HCA, YaRN)
    int64_t layer = 0;
    const ActivationObserver* observer = nullptr;
};

// x: [tokens, D] (attn_norm output) at positions state.position .. + tokens - 1 (state.position is not advanced
// here). out: [tokens, D].
void attention_forward(const AttentionContext& ctx, const AttentionWeights& w, LayerState& state,
                       int64_t start_position, const float* x, int64_t tokens, float* out);

}  // namespace dsv4
