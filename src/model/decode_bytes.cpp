// Decode-step bytes (see decode_bytes.h).
#include "model/decode_bytes.h"

#include <algorithm>
#include <cmath>

namespace dsv4 {
namespace {

double vec_bytes(const Vec& v) {
    return 4.0 * double(v.size());
}
double hc_bytes(const HcWeights& h) {
    return vec_bytes(h.fn) + vec_bytes(h.base) + vec_bytes(h.scale);
}
double compressor_bytes(const CompressorWeights& c) {
    return device_weight_bytes(c.wkv) + device_weight_bytes(c.wgate) + vec_bytes(c.ape) + vec_bytes(c.norm);
}
double indexer_bytes(const IndexerWeights& ix) {
    return device_weight_bytes(ix.wq_b) + device_weight_bytes(ix.weights_proj) + compressor_bytes(ix.compressor);
}
double router_bytes(const MoeWeights& m, int64_t k) {
    return device_weight_bytes(m.gate) + vec_bytes(m.gate_bias) + (m.tid2eid.empty() ? 0.0 : 4.0 * double(k));
}
double expert_bytes(const ExpertWeights& e) {
    return device_weight_bytes(e.w1) + device_weight_bytes(e.w2) + device_weight_bytes(e.w3);
}

// The cache a token at `visible` positions reads on a layer of compression `ratio`: its window, then the CSA top-k
// or every visible HCA entry; and the indexer keys it scores (CSA).
struct LayerCache {
    int64_t entries = 0, index_keys = 0;
};
LayerCache layer_cache(const ModelConfig& c, int64_t ratio, int64_t visible) {
    LayerCache r{std::min(visible, c.sliding_window), 0};
    if (ratio == 4) {
        r.entries += std::min(c.index_topk, visible / 4);
        r.index_keys = visible / 4;
    } else if (ratio > 0) {
        r.entries += visible / ratio;
    }
    return r;
}

// How a term of the step scales: once a step, once per token, once per distinct expert selected.
enum class Per { kStep, kToken, kExpert };

// Every term a decode step of one token at `position` reads, once: the kind of DecodeBytes it counts in, the stage
// that reads it, how it scales and its bytes (per token or per expert where it scales so). decode_bytes and
// decode_stage_floors are two sums of this one walk.
template <typename Visit>
void for_each_term(const ModelConfig& c, const ModelWeights& w, int64_t position, CacheEntryBytes entry,
                   Visit&& visit) {
    const int64_t k = c.num_experts_per_tok;
    visit(&DecodeBytes::embed, "embed", Per::kStep, 2.0 * double(c.hidden_size));
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const BlockWeights& L = w.layers[size_t(l)];
        const AttentionWeights& a = L.attn;
        visit(&DecodeBytes::hc, "attn_hc_pre", Per::kStep, hc_bytes(L.hc_attn));
        visit(&DecodeBytes::attention, "attn_hc_pre", Per::kStep, vec_bytes(L.attn_norm));
        visit(&DecodeBytes::attention, "q_proj", Per::kStep,
              device_weight_bytes(a.wq_a) + vec_bytes(a.q_norm) + device_weight_bytes(a.wq_b) +
                  device_weight_bytes(a.wkv) + vec_bytes(a.kv_norm));
        if (a.indexer) visit(&DecodeBytes::compressor, "indexer", Per::kStep, indexer_bytes(*a.indexer));
        // On CSA layers the main compressor runs beside the indexer, in its stage.
        if (a.compressor)
            visit(&DecodeBytes::compressor, a.indexer ? "indexer" : "compressor", Per::kStep,
                  compressor_bytes(*a.compressor));
        const LayerCache cache = layer_cache(c, c.compress_ratios[size_t(l)], position + 1);
        if (cache.index_keys > 0)
            visit(&DecodeBytes::index_keys, "indexer", Per::kToken, double(cache.index_keys) * entry.index);
        visit(&DecodeBytes::attention, "sparse_attn", Per::kStep, vec_bytes(a.attn_sink));
        visit(&DecodeBytes::kv, "sparse_attn", Per::kToken, double(cache.entries) * entry.main);
        visit(&DecodeBytes::attention, "o_proj", Per::kStep, device_weight_bytes(a.wo_a) + device_weight_bytes(a.wo_b));
        visit(&DecodeBytes::hc, "ffn_hc_pre", Per::kStep, hc_bytes(L.hc_ffn));
        visit(&DecodeBytes::shared, "ffn_hc_pre", Per::kStep, vec_bytes(L.ffn_norm));
        visit(&DecodeBytes::router, "router", Per::kStep, router_bytes(L.ffn, k));
        visit(&DecodeBytes::routed, "routed_experts", Per::kExpert, expert_bytes(L.ffn.experts.front()));
        visit(&DecodeBytes::shared, "shared_expert", Per::kStep,
              device_weight_bytes(L.ffn.shared.w1) + device_weight_bytes(L.ffn.shared.w2) +
                  device_weight_bytes(L.ffn.shared.w3));
    }
    visit(&DecodeBytes::hc, "head", Per::kStep, hc_bytes(w.hc_head) + vec_bytes(w.norm));
    visit(&DecodeBytes::head, "head", Per::kStep, device_weight_bytes(w.head));
}

}  // namespace

double device_weight_bytes(const QuantizedMatrix& m) {
    const double n = double(m.rows) * double(m.cols);
    switch (m.format) {
        case WeightFormat::kF32:
            return 4 * n;
        case WeightFormat::kBF16:
        case WeightFormat::kF16:
            return 2 * n;
        case WeightFormat::kFp8Block:
            return n + 4.0 * double((m.rows + 127) / 128) * double((m.cols + 127) / 128);
        case WeightFormat::kFp4Mx:
            return n / 2 + n / 32;
        case WeightFormat::kNvfp4:
            return n / 2 + n / 16;
    }
    return 0;
}

DecodeBytes decode_bytes(const ModelConfig& c, const ModelWeights& w, int64_t position, CacheEntryBytes entry) {
    DecodeBytes b;
    // One token selects k distinct experts.
    const double k = double(c.num_experts_per_tok);
    for_each_term(c, w, position, entry, [&](double DecodeBytes::*kind, const char*, Per per, double bytes) {
        b.*kind += per == Per::kExpert ? k * bytes : bytes;
    });
    return b;
}

std::map<std::string, DecodeStageFloor> decode_stage_floors(const ModelConfig& c, const ModelWeights& w,
                                                            int64_t position, CacheEntryBytes entry) {
    std::map<std::string, DecodeStageFloor> f;
    for_each_term(c, w, position, entry, [&](double DecodeBytes::*, const char* stage, Per per, double bytes) {
        DecodeStageFloor& floor = f[stage];
        (per == Per::kStep ? floor.weights : per == Per::kToken ? floor.per_token : floor.per_expert) += bytes;
    });
    return f;
}

double expected_distinct_experts(const ModelConfig& c, double tokens) {
    const double E = double(c.n_routed_experts), k = double(c.num_experts_per_tok);
    return E * (1.0 - std::pow(1.0 - k / E, tokens));
}

double batch_decode_bytes(const ModelConfig& c, const DecodeBytes& one, int64_t tokens) {
    const double per_expert = one.routed / double(c.num_experts_per_tok);
    const double per_token = one.kv + one.index_keys;
    return one.total() - one.routed - per_token + per_expert * expected_distinct_experts(c, double(tokens)) +
           double(tokens) * per_token;
}

}  // namespace dsv4
