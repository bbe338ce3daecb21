// config.json -> ModelConfig, for both shapes that exist (spec §2): the Hub's (compress_ratios with trailing
// MTP entries, num_hash_layers, qk_rope_head_dim, rope_scaling, quantization_config, expert_dtype) and the
// one transformers writes (layer_types, mlp_layer_types, compress_rates, rope_parameters.{main,compress},
// partial_rotary_factor). Inconsistent or unknown values are errors naming the field. Tested in tests/io/.
#pragma once

#include <string>

#include "model/model_config.h"

namespace dsv4 {

// Which layout a config.json was written in. The Hub shape must spell out every architecture field (DeepSeek's
// own code defaults differ from the release values, spec §2.2); the transformers shape falls back to
// DeepseekV4Config's defaults like transformers does, and describes a checkpoint without MTP weights.
enum class ConfigShape { kHub, kTransformers };

struct ParsedConfig {
    ModelConfig config;
    ConfigShape shape = ConfigShape::kHub;
};

ParsedConfig parse_config_json(const std::string& json_text, const std::string& source_name);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source_name);
ModelConfig read_model_config(const std::string& path);

// The whole file as a string; a missing or unreadable file is a dsv4::Error naming it.
std::string read_text_file(const std::string& path);

}  // namespace dsv4
