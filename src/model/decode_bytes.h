// What a decode step reads: every byte one token's step must bring from memory once (the weights of every layer and
// the head, one embedding row, the cache entries it attends, the indexer keys it scores), by kind (DecodeBytes) and
// by the stage of the GPU's stage profiler that reads them (decode_stage_floors). The yardstick of decode speed:
// `dsv4 bench` divides them by the measured copy bandwidth and holds each step against that floor (docs/perf.md,
// "Limit first"). Weights count in the GPU's formats (FP8 block scales decoded to f32: docs/gpu-design.md); cache
// entries and indexer keys at the packed sizes the caller gives (kernels/cuda/compressor/kv_entry_layout.h). The
// routed experts count k distinct experts for one token (exact: a token selects k distinct experts), and
// for a batch the expected number of distinct experts under uniform routing.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/quantized_matrix.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace dsv4 {

// Bytes of one packed cache entry: a main (window / compressed) entry and an indexer key.
struct CacheEntryBytes {
    double main = 0, index = 0;
};

struct DecodeBytes {
    double attention = 0;   // q / kv / o projections, their norms, the sinks, the attention norm
    double compressor = 0;  // the compressors' and the indexer's projections (every token feeds its compressors)
    double hc = 0;          // the blocks' mHC mixers, the head's mixer, the final norm
    double router = 0;      // gate matrix, its bias or the token's tid2eid row
    double shared = 0;      // shared expert and the FFN norm
    double routed = 0;      // k routed experts
    double head = 0;        // lm_head
    double embed = 0;       // one embedding row
    double kv = 0;          // window + CSA top-k + HCA entries attended
    double index_keys = 0;  // indexer keys scored on CSA layers
    double total() const {
        return attention + compressor + hc + router + shared + routed + head + embed + kv + index_keys;
    }
};

// One token at `position` (it sees position + 1 entries of its window and compressed caches).
DecodeBytes decode_bytes(const ModelConfig& c, const ModelWeights& w, int64_t position, CacheEntryBytes entry);

// A stage's floor as a function of the step: its weights once, its cache bytes per token, the routed experts per
// distinct expert the step selects.
struct DecodeStageFloor {
    double weights = 0, per_token = 0, per_expert = 0;
    double bytes(double tokens, double experts) const { return weights + per_token * tokens + per_expert * experts; }
};

// decode_bytes' terms by stage name (runtime/stage_profile.h's stages: embed, attn_hc_pre, q_proj, indexer,
// compressor, sparse_attn, o_proj, ffn_hc_pre, router, routed_experts, shared_expert, head): the terms of
// decode_bytes from the same walk, grouped by stage, so for one token and k experts the stages sum to its total. On
// CSA layers the main compressor runs beside the indexer and counts in its stage.
std::map<std::string, DecodeStageFloor> decode_stage_floors(const ModelConfig& c, const ModelWeights& w,
                                                            int64_t position, CacheEntryBytes entry);

// Expected distinct experts when `tokens` tokens each select k of E uniformly: E (1 - (1 - k / E)^tokens).
double expected_distinct_experts(const ModelConfig& c, double tokens);

// A batch step of `tokens` sequences, each at the position `one` was counted at: the dense weights once, the routed
// experts per expected distinct expert, the cache and keys once per token.
double batch_decode_bytes(const ModelConfig& c, const DecodeBytes& one, int64_t tokens);

// The bytes the GPU reads for a weight in its device format.
double device_weight_bytes(const QuantizedMatrix& m);

}  // namespace dsv4
