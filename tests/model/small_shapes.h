// Small DeepSeek-V4-architecture models whose shapes none of the GPU's specialised kernels covers (head_dim 32,
// 64, 256, 40 and the odd 33; rope dims 16, 32, 64, 12; index_head_dim 32, 64, 256, 16; n_hc 2, 4, 3, 1; FP8
// linears whose K is no multiple of 16; grouped wo_a inputs of 40 and 66), and one with V4's index_head_dim 128 for
// the specialised indexer kernels the fixtures never take, as synthetic checkpoints in the Hub
// layout (FP8 block-scaled linears + MXFP4 routed experts, src/model/synthetic_checkpoint.h), written once per
// process into a temporary directory, with deterministic ids and a mixed chunk schedule. Every model has SWA,
// CSA (ratio 4) and HCA (ratio 16) layers, hash- and score-routed MoE layers.
// Used by tests/model/small_shapes_test.cpp (the CPU runs them: config accepted, finite, chunk-invariant) and by
// tests/gpu/cuda_model_test.cpp and cuda_layer_test.cpp (the GPU against the CPU on them).
#pragma once

#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "model/synthetic_checkpoint.h"

namespace dsv4::small_shapes {

struct Shape {
    const char* name;
    int64_t hidden, heads, head_dim, rope_dim, o_groups, o_lora_rank, q_lora_rank;
    int64_t index_head_dim, index_heads, index_topk, hc_mult, window, moe_inter, experts, experts_per_tok;
};

// What each covers beyond the specialised kernels:
//   hd32:  head_dim 32 / rope 16 (sparse attention), index_head_dim 32
//   hd64:  head_dim 64 / rope 32, index_head_dim 64, n_hc 4
//   hd256: head_dim 256 / rope 64, index_head_dim 256 (generic Hadamard and indexer scores), one output group
//   hd40:  head_dim 40 / rope 12 (nope 28), index_head_dim 16 (one partial FP4 block), n_hc 3, q_lora_rank 40 and
//          o_groups x o_lora_rank 72 (FP8 GEMMs with K % 16 != 0), wo_a input 40 (grouped generic)
//   hd33:  head_dim 33 / rope 16: an odd nope part (entry pad byte, unpaired RoPE), n_hc 1, wo_a input 66
//   ix128: hd32 with V4's index_head_dim 128: the indexer's specialised dim-128 kernels (the rotation's and the
//          scores' constant-dimension instances), which the fixtures' index dims of 32 and 64 never take
inline const std::vector<Shape>& shapes() {
    static const std::vector<Shape> all = {
        {"hd32", 64, 4, 32, 16, 2, 32, 48, 32, 4, 8, 2, 16, 64, 8, 2},
        {"hd64", 128, 4, 64, 32, 2, 64, 64, 64, 8, 12, 4, 16, 64, 8, 2},
        {"hd256", 128, 2, 256, 64, 1, 64, 64, 256, 4, 10, 2, 16, 32, 6, 2},
        {"hd40", 96, 3, 40, 12, 3, 24, 40, 16, 5, 6, 3, 12, 64, 6, 3},
        {"hd33", 64, 4, 33, 16, 2, 32, 48, 64, 4, 8, 1, 16, 32, 4, 2},
        {"ix128", 64, 4, 32, 16, 2, 32, 48, 128, 4, 8, 2, 16, 64, 8, 2},
    };
    return all;
}

inline std::vector<std::string> names() {
    std::vector<std::string> out;
    for (const Shape& s : shapes()) out.push_back(s.name);
    return out;
}

inline const Shape& shape(const std::string& name) {
    for (const Shape& s : shapes())
        if (name == s.name) return s;
    throw std::runtime_error("no small shape named " + name);
}

// The tiny preset's architecture (layer kinds, RoPE and YaRN, routing, FP8 + MXFP4 storage) with the shape's dims,
// a 512-entry vocabulary and 4 layers: CSA, HCA-16, SWA, CSA; layer 0 hash-routed; no MTP layer.
inline ModelConfig config(const Shape& s) {
    ModelConfig c = synthetic_preset("tiny", 4);
    c.vocab_size = 512;
    c.hidden_size = s.hidden;
    c.num_heads = s.heads;
    c.head_dim = s.head_dim;
    c.rope_head_dim = s.rope_dim;
    c.o_groups = s.o_groups;
    c.o_lora_rank = s.o_lora_rank;
    c.q_lora_rank = s.q_lora_rank;
    c.sliding_window = s.window;
    c.compress_ratios = {4, 16, 0, 4};
    c.mlp_types = {MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe, MlpType::kMoe};
    c.num_mtp_layers = 0;
    c.mtp_compress_ratios.clear();
    c.index_head_dim = s.index_head_dim;
    c.index_n_heads = s.index_heads;
    c.index_topk = s.index_topk;
    c.hc_mult = s.hc_mult;
    c.moe_intermediate_size = s.moe_inter;
    c.n_routed_experts = s.experts;
    c.num_experts_per_tok = s.experts_per_tok;
    return c;
}

// The checkpoint directory of `name`, written on first use (seed 7) under a per-process temporary directory that
// is removed at exit.
inline std::string checkpoint_dir(const std::string& name) {
    struct Store {
        std::filesystem::path root;
        std::map<std::string, std::string> written;
        std::mutex mutex;
        ~Store() {
            std::error_code ec;
            if (!root.empty()) std::filesystem::remove_all(root, ec);
        }
    };
    static Store store;
    std::lock_guard lock(store.mutex);
    if (store.root.empty())
        store.root = std::filesystem::temp_directory_path() / ("dsv4-small-shapes-" + std::to_string(::getpid()));
    auto it = store.written.find(name);
    if (it != store.written.end()) return it->second;
    const std::string dir = (store.root / name).string();
    std::filesystem::create_directories(store.root);
    write_synthetic_checkpoint(config(shape(name)), {7, 1, 0}, dir);
    return store.written[name] = dir;
}

// 200 ids spread over the vocabulary (deterministic), so CSA selections leave entries out (200 / 4 > top-k) and
// HCA-16 closes 12 entries; the mixed schedule of prefill chunks and single steps sums to 200.
inline std::vector<int32_t> ids() {
    std::vector<int32_t> out(200);
    for (size_t i = 0; i < out.size(); ++i) out[i] = int32_t(2 + (i * 7919 + i * i * 31) % 509);
    return out;
}
inline std::vector<int64_t> schedule() {
    return {37, 1, 1, 20, 69, 3, 1, 40, 5, 1, 1, 1, 2, 18};
}
inline constexpr int64_t kGreedyPrompt = 120;  // greedy decoding starts after this many ids

}  // namespace dsv4::small_shapes
