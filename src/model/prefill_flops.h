// What a prefill computes: the floating-point operations (2 per multiply-add) of a forward over a prompt from
// position 0, by kind, from the model's shapes (spec §2-§9). The yardstick of prefill speed: `dsv4 bench` divides
// them by the measured time and holds the rate against the GPU's measured FP8 tensor-core rate (docs/perf.md).
// Counted: every linear of every token (q/kv/o projections, the compressors' and the indexer's projections, the
// mHC mixers, the router gate of score-routed layers, the shared expert and k routed experts), the attention's QK and
// PV over the keys each query attends (its window, plus the CSA top-k or all HCA entries visible to it), the
// indexer's scores over the compressed keys visible to each query, and the lm_head of the last token (the only
// logits a prefill returns). Not counted: norms, RoPE, softmax, Sinkhorn, quantization (no tensor-core work).
#pragma once

#include <cstdint>

#include "model/model_config.h"

namespace dsv4 {

struct PrefillFlops {
    double linears = 0;    // projections, mixers, gate, shared expert
    double routed = 0;     // the k routed experts of every token
    double attention = 0;  // QK and PV
    double indexer = 0;    // indexer scores (CSA layers)
    double head = 0;       // hc_head mix and lm_head of the last token
    double total() const { return linears + routed + attention + indexer + head; }
};

// A prompt of `tokens` tokens from position 0 through the trunk's layers (MTP layers do not run in a forward).
PrefillFlops prefill_flops(const ModelConfig& c, int64_t tokens);

}  // namespace dsv4
