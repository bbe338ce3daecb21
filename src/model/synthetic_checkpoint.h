// Synthetic DeepSeek-V4 checkpoints: any ModelConfig written in the Hub's native layout (spec §11.1-11.3) with
// deterministic random weights: a Hub-shape config.json, shards and model.safetensors.index.json, FP8 block-scaled
// linears, MXFP4 routed experts, BF16/F32 small tensors exactly as the releases store them. Used for the embedded
// demo model and for benchmarks at real shapes. Tested in tests/tools/synth_test.cpp (same bytes for a seed; the
// result loads and runs in both numerics).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_config.h"

namespace dsv4 {

// Named configurations. "tiny": the real vocabulary (so DeepSeek's tokenizer works) on a 128-wide, 4-layer trunk
// (SWA, CSA, HCA-16, SWA; 2 hash layers; one MTP layer), shaped so `model` numerics runs (head_dim - rope = 64,
// index_head_dim 128). "flash": V4-Flash, "pro": V4-Pro (spec §2.1). num_layers > 0 overrides the trunk depth,
// continuing the preset's layer pattern. Throws dsv4::Error for an unknown name.
ModelConfig synthetic_preset(std::string_view name, int64_t num_layers = 0);
std::vector<std::string> synthetic_preset_names();

// The Hub-shape config.json of `config` (what io/config_json.h reads back into the same ModelConfig). Throws for a
// config the Hub shape cannot express (hash layers not a prefix, YaRN on the main rope).
std::string hub_config_json(const ModelConfig& config);

struct SyntheticOptions {
    uint64_t seed = 0;
    int shards = 2;   // files the tensors are spread over (fewer if there are fewer tensors)
    int threads = 0;  // generation threads (0: all cores); the bytes never depend on it
};

struct SyntheticSummary {
    int64_t tensors = 0;             // stored tensors (a quantized matrix counts its weight and its scale)
    uint64_t bytes = 0;              // tensor data in all shards
    std::vector<std::string> files;  // shard file names, in order
};

// Writes the checkpoint into `dir`, which must not exist or be empty. The files are written to a sibling
// directory first and moved into place at the end, so `dir` never holds a half-written checkpoint.
//
// Weights: every linear ~ N(0, 1/fan_in) before quantization; norms U(0.9, 1.1); embedding N(0, 1); small random
// hc parameters, attention sinks, compressor position biases and router biases; tid2eid rows of k distinct
// experts. Every value is a pure function of (seed, tensor name, element index): the same seed gives the same
// bytes, whatever the thread count.
SyntheticSummary write_synthetic_checkpoint(const ModelConfig& config, const SyntheticOptions& options,
                                            const std::string& dir);

}  // namespace dsv4
