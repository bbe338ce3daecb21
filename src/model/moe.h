// The MoE sub-layer (spec §9): sqrtsoftplus router (hash routing through tid2eid on the first layers, biased
// top-k elsewhere), routed SwiGLU experts with the clamp and the routing weight applied before the down
// projection, plus the shared expert. Tested end to end by the golden fixtures (tests/model/).
#pragma once

#include <cstdint>

#include "model/model_config.h"
#include "model/numerics.h"
#include "model/observer.h"
#include "model/weights.h"

namespace dsv4 {

struct RoutingDecision {
    std::vector<int32_t> experts;  // [tokens, k]
    std::vector<float> weights;    // [tokens, k], normalized and scaled by routed_scaling_factor
    // [tokens] (s_k - s_k+1) / |s_k| of the biased scores ranked k and k+1: how close the selection was to
    // flipping; +inf on hash-routed layers (no selection).
    std::vector<float> margin;
};

// Router of one layer for a chunk: x [tokens, D] (ffn_norm output), ids [tokens].
RoutingDecision route_tokens(const ModelConfig& config, const Precision& precision, const MoeWeights& w,
                             const float* x, const int32_t* ids, int64_t tokens);

// out [tokens, D] = sum of routed experts + shared expert, bf16 in model numerics.
void moe_forward(const ModelConfig& config, const Precision& precision, const MoeWeights& w, const float* x,
                 const int32_t* ids, int64_t tokens, float* out, int64_t layer = 0,
                 const ActivationObserver* observer = nullptr);

}  // namespace dsv4
