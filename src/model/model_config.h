// ModelConfig: every hyperparameter of a DeepSeek-V4 checkpoint (spec §2), immutable once read.
// Filled by io/config_json.cpp from either config.json shape (the Hub's or the one transformers writes).
// Runtime knobs (threads, numerics mode, backend) live elsewhere.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace dsv4 {

enum class AttentionType { kSliding, kCompressedSparse, kHeavilyCompressed };  // SWA (m=0), CSA (m=4), HCA (m>4)
enum class MlpType { kHashMoe, kMoe };
enum class ExpertDtype { kFp4, kFp8, kBf16 };

struct YarnParams {
    double factor = 1.0;
    int64_t original_max_position_embeddings = 0;
    double beta_fast = 32.0;
    double beta_slow = 1.0;
};

struct RopeParams {
    double theta = 10000.0;
    std::optional<YarnParams> yarn;  // YaRN frequency interpolation, no magnitude scaling (spec §6)
};

struct ModelConfig {
    int64_t vocab_size = 0;
    int64_t hidden_size = 0;            // D
    int64_t num_layers = 0;             // L, trunk layers (MTP not counted)
    int64_t num_heads = 0;              // H
    int64_t num_kv_heads = 1;           // as written; unused: the model has one shared latent K=V head
    int64_t head_dim = 0;               // d
    int64_t rope_head_dim = 0;          // r: trailing dims of each head that get RoPE (may be all of them)
    int64_t q_lora_rank = 0;
    int64_t o_groups = 0;               // g
    int64_t o_lora_rank = 0;
    int64_t sliding_window = 0;         // W

    // Per trunk layer (size num_layers), then per MTP layer (size num_mtp_layers).
    std::vector<int64_t> compress_ratios;      // 0 (SWA), 4 (CSA), or the HCA ratio
    std::vector<int64_t> mtp_compress_ratios;
    std::vector<MlpType> mlp_types;            // size num_layers

    RopeParams main_rope;      // SWA-only layers and MTP
    RopeParams compress_rope;  // layers with a compressor (CSA/HCA), YaRN applies here only
    int64_t max_position_embeddings = 0;

    int64_t index_n_heads = 0;
    int64_t index_head_dim = 0;
    int64_t index_topk = 0;

    int64_t n_routed_experts = 0;       // E
    int64_t n_shared_experts = 1;
    int64_t num_experts_per_tok = 0;    // k
    int64_t moe_intermediate_size = 0;  // I
    std::string scoring_func = "sqrtsoftplus";
    std::string topk_method = "noaux_tc";
    bool norm_topk_prob = true;
    double routed_scaling_factor = 1.0;
    double swiglu_limit = 0.0;

    int64_t hc_mult = 0;                // n_hc
    int64_t hc_sinkhorn_iters = 0;
    double hc_eps = 1e-6;
    double rms_norm_eps = 1e-6;

    int64_t num_mtp_layers = 0;         // num_nextn_predict_layers
    int64_t bos_token_id = 0;
    int64_t eos_token_id = 1;
    bool tie_word_embeddings = false;
    std::string torch_dtype = "bfloat16";
    ExpertDtype expert_dtype = ExpertDtype::kBf16;
    bool fp8_quantized = false;         // quantization_config.quant_method == "fp8"
    bool scale_fmt_ue8m0 = false;       // quantization_config.scale_fmt == "ue8m0"
    std::vector<int64_t> weight_block_size;  // [128, 128] for FP8 checkpoints

    // Derived helpers.
    int64_t nope_head_dim() const { return head_dim - rope_head_dim; }
    AttentionType attention_type(int64_t layer) const {
        int64_t m = compress_ratios.at(size_t(layer));
        return m == 0 ? AttentionType::kSliding
                      : (m == 4 ? AttentionType::kCompressedSparse : AttentionType::kHeavilyCompressed);
    }
    // The compress ratio of a block, trunk layers first then MTP layers (index num_layers + i).
    int64_t block_compress_ratio(int64_t block) const {
        return block < num_layers ? compress_ratios.at(size_t(block))
                                  : mtp_compress_ratios.at(size_t(block - num_layers));
    }
};

}  // namespace dsv4
