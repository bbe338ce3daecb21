// Per-layer weight structs of DeepSeek-V4, with shapes in the comments (spec §11.1-11.2; D = hidden_size,
// H = heads, d = head_dim, E = routed experts, I = moe_intermediate_size, n_hc = hc_mult). Matrices stay in
// their checkpoint formats (views into the memory-mapped files); small vectors are decoded to f32 at load.
// load_model_weights() maps names, checks every shape and dtype, and rejects missing or unexpected tensors.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "core/quantized_matrix.h"
#include "model/model_config.h"

namespace dsv4 {

class Checkpoint;

using Vec = std::vector<float>;

struct HcWeights {
    Vec fn;     // [(2 + n_hc) * n_hc, n_hc * D] (sub-block mixers) or [n_hc, n_hc * D] (head)
    Vec base;   // [(2 + n_hc) * n_hc] or [n_hc]
    Vec scale;  // [3] or [1]
};

struct CompressorWeights {
    int64_t ratio = 0;         // m
    int64_t head_dim = 0;      // 512-class main compressor or index_head_dim
    bool overlap = false;      // m == 4: c = 2
    QuantizedMatrix wkv;       // [c * head_dim, D] bf16, used in f32
    QuantizedMatrix wgate;     // [c * head_dim, D] bf16, used in f32
    Vec ape;                   // [m, c * head_dim] f32
    Vec norm;                  // [head_dim]
};

struct IndexerWeights {
    QuantizedMatrix wq_b;          // [index_n_heads * index_head_dim, q_lora_rank] FP8
    QuantizedMatrix weights_proj;  // [index_n_heads, D] bf16
    CompressorWeights compressor;  // ratio 4, head_dim = index_head_dim, overlap
};

struct AttentionWeights {
    Vec attn_sink;              // [H] f32
    QuantizedMatrix wq_a;       // [q_lora_rank, D]
    Vec q_norm;                 // [q_lora_rank]
    QuantizedMatrix wq_b;       // [H * d, q_lora_rank]
    QuantizedMatrix wkv;        // [d, D]
    Vec kv_norm;                // [d]
    QuantizedMatrix wo_a;       // [g * o_lora_rank, H * d / g]
    QuantizedMatrix wo_b;       // [D, g * o_lora_rank]
    std::optional<CompressorWeights> compressor;  // layers with m > 0
    std::optional<IndexerWeights> indexer;        // layers with m == 4
};

struct ExpertWeights {
    QuantizedMatrix w1;  // [I, D] gate
    QuantizedMatrix w2;  // [D, I] down
    QuantizedMatrix w3;  // [I, D] up
};

struct MoeWeights {
    QuantizedMatrix gate;         // [E, D] bf16 router, used in f32
    Vec gate_bias;                // [E] f32 (score-routed layers); empty on hash layers
    std::vector<int32_t> tid2eid; // [vocab, k] (hash layers); empty otherwise
    std::vector<ExpertWeights> experts;  // E routed experts
    ExpertWeights shared;
};

struct BlockWeights {
    Vec attn_norm, ffn_norm;  // [D]
    HcWeights hc_attn, hc_ffn;
    AttentionWeights attn;
    MoeWeights ffn;
};

struct MtpWeights {
    BlockWeights block;
    QuantizedMatrix e_proj, h_proj;  // [D, D]
    Vec enorm, hnorm, norm;          // [D]
    HcWeights hc_head;
};

struct ModelWeights {
    std::shared_ptr<const Checkpoint> checkpoint;  // owns the memory maps every view points into
    QuantizedMatrix embed;   // [vocab, D] bf16
    QuantizedMatrix head;    // [vocab, D] bf16
    Vec norm;                // [D]
    HcWeights hc_head;
    std::vector<BlockWeights> layers;  // num_layers
    std::vector<MtpWeights> mtp;       // num_mtp_layers
};

// Builds the weight views for `config` from `checkpoint`; throws dsv4::Error naming the file and tensor
// for anything missing, unexpected, or of the wrong shape or dtype.
ModelWeights load_model_weights(std::shared_ptr<const Checkpoint> checkpoint, const ModelConfig& config);

}  // namespace dsv4
