// CpuModel: embedding -> blocks (mHC pre, attention, mHC post, mHC pre, MoE, mHC post) -> mHC head -> norm ->
// head (spec §4). A block reads as the spec's numbered steps; the sub-layers live in attention.cpp and moe.cpp.
#include "model/cpu_model.h"

#include <algorithm>

#include "core/error.h"
#include "kernels/cpu/dequantize.h"
#include "kernels/cpu/mhc.h"
#include "kernels/cpu/norms.h"
#include "model/moe.h"

namespace dsv4 {
namespace {

cpu::HcParams hc_params(const ModelConfig& c) {
    return {c.hc_mult, c.hidden_size, c.hc_sinkhorn_iters, float(c.hc_eps), float(c.rms_norm_eps)};
}

}  // namespace

CpuModel::CpuModel(const ModelConfig& config, ModelWeights weights, Numerics numerics, int threads)
    : config_(config),
      weights_(std::move(weights)),
      numerics_(numerics),
      pool_(std::make_unique<ThreadPool>(threads)),
      precision_(numerics, *pool_),
      main_rope_(cpu::make_rope_table(config.rope_head_dim, config.main_rope)),
      compress_rope_(cpu::make_rope_table(config.rope_head_dim, config.compress_rope)) {
    check_numerics_support(config, numerics);
}

SequenceState CpuModel::new_sequence() const {
    SequenceState s;
    s.layers.resize(static_cast<size_t>(config_.num_layers));
    for (int64_t i = 0; i < config_.num_layers; ++i) {
        LayerState& l = s.layers[static_cast<size_t>(i)];
        const AttentionWeights& a = weights_.layers[static_cast<size_t>(i)].attn;
        l.window.assign(static_cast<size_t>(config_.sliding_window * config_.head_dim), 0.0f);
        if (a.compressor) l.compressor.init(*a.compressor);
        if (a.indexer) l.index_compressor.init(a.indexer->compressor);
    }
    return s;
}

SequenceState CpuModel::copy_sequence(const SequenceState& state) const {
    DSV4_CHECK(!state.device && int64_t(state.layers.size()) == config_.num_layers,
               "sequence state does not belong to this model");
    SequenceState copy;
    copy.position = state.position;
    copy.layers = state.layers;
    return copy;
}

void CpuModel::block_forward(int64_t layer, const BlockWeights& w, LayerState& state, int64_t start_position,
                             const int32_t* ids, int64_t tokens, std::vector<float>& streams) {
    const int64_t D = config_.hidden_size, n_hc = config_.hc_mult;
    const float eps = float(config_.rms_norm_eps);
    const cpu::HcParams hc = hc_params(config_);
    const Precision& p = precision_;
    std::vector<cpu::HcMix> mix(static_cast<size_t>(tokens));
    std::vector<float> x(static_cast<size_t>(tokens * D)), y(static_cast<size_t>(tokens * D)), next(streams.size());
    auto observe = [&](std::string_view name, const std::vector<float>& b, int64_t cols) {
        if (observer_) observer_(name, layer, b.data(), tokens, cols);
    };

    // mHC pre: collapse the n_hc streams into one input (bf16), then the sub-layer's RMSNorm.
    auto hc_pre = [&](const HcWeights& hw, const Vec& norm) {
        pool_->parallel_for(tokens, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
                cpu::hc_pre(streams.data() + t * n_hc * D, hw.fn.data(), hw.base.data(), hw.scale.data(), hc,
                            x.data() + t * D, mix[static_cast<size_t>(t)]);
                p.activation(x.data() + t * D, D);
                cpu::rms_norm(x.data() + t * D, norm.data(), D, eps, x.data() + t * D);
                p.activation(x.data() + t * D, D);
            }
        });
    };
    // mHC post: expand the sub-layer output back into the streams.
    auto hc_post = [&]() {
        pool_->parallel_for(tokens, [&](int64_t begin, int64_t end) {
            for (int64_t t = begin; t < end; ++t) {
                cpu::hc_post(y.data() + t * D, streams.data() + t * n_hc * D, mix[static_cast<size_t>(t)], hc,
                             next.data() + t * n_hc * D);
                p.activation(next.data() + t * n_hc * D, n_hc * D);
            }
        });
        streams.swap(next);
    };

    // 1. Attention sub-block.
    hc_pre(w.hc_attn, w.attn_norm);
    observe("attn_in", x, D);
    const AttentionContext ctx{config_, p, config_.compress_ratios[static_cast<size_t>(layer)] ? compress_rope_ : main_rope_,
                               layer, observer_ ? &observer_ : nullptr};
    attention_forward(ctx, w.attn, state, start_position, x.data(), tokens, y.data());
    observe("attn_out", y, D);
    hc_post();

    // 2. MoE sub-block.
    hc_pre(w.hc_ffn, w.ffn_norm);
    observe("ffn_in", x, D);
    moe_forward(config_, p, w.ffn, x.data(), ids, tokens, y.data(), layer, observer_ ? &observer_ : nullptr);
    observe("ffn_out", y, D);
    hc_post();
    observe("streams", streams, n_hc * D);
}

std::vector<float> CpuModel::forward(SequenceState& state, std::span<const int32_t> ids, bool all_logits) {
    const int64_t tokens = int64_t(ids.size()), D = config_.hidden_size, n_hc = config_.hc_mult;
    const int64_t V = config_.vocab_size;
    DSV4_CHECK(tokens > 0, "no input tokens");
    DSV4_CHECK(int64_t(state.layers.size()) == config_.num_layers && !state.device,
               "sequence state does not belong to this model");
    for (int32_t id : ids) DSV4_CHECK(id >= 0 && id < V, "token id {} is outside the vocabulary [0, {})", id, V);
    const int64_t start = state.position;

    // Embedding, copied into every stream.
    std::vector<float> streams(static_cast<size_t>(tokens * n_hc * D));
    for (int64_t t = 0; t < tokens; ++t) {
        float* s0 = streams.data() + t * n_hc * D;
        cpu::dequantize_row(weights_.embed, ids[static_cast<size_t>(t)], s0);
        precision_.activation(s0, D);
        for (int64_t j = 1; j < n_hc; ++j) std::copy_n(s0, D, s0 + j * D);
    }

    for (int64_t layer = 0; layer < config_.num_layers; ++layer)
        block_forward(layer, weights_.layers[static_cast<size_t>(layer)], state.layers[static_cast<size_t>(layer)], start, ids.data(), tokens,
                      streams);
    state.position += tokens;

    // mHC head, final norm, f32 head.
    const int64_t first = all_logits ? 0 : tokens - 1, rows = tokens - first;
    std::vector<float> h(static_cast<size_t>(rows * D));
    const cpu::HcParams hc = hc_params(config_);
    for (int64_t r = 0; r < rows; ++r) {
        float* hr = h.data() + r * D;
        cpu::hc_head(streams.data() + (first + r) * n_hc * D, weights_.hc_head.fn.data(), weights_.hc_head.base.data(),
                     weights_.hc_head.scale.data(), hc, hr);
        precision_.activation(hr, D);
        cpu::rms_norm(hr, weights_.norm.data(), D, float(config_.rms_norm_eps), hr);
        precision_.activation(hr, D);
    }
    std::vector<float> logits(static_cast<size_t>(rows * V));
    precision_.linear_f32(h.data(), rows, weights_.head, logits.data());
    return logits;
}

std::vector<float> CpuModel::forward_block(SequenceState& state, int64_t layer, int64_t start_position,
                                           std::span<const int32_t> ids, const float* streams_in) {
    const int64_t tokens = int64_t(ids.size()), D = config_.hidden_size, n_hc = config_.hc_mult;
    DSV4_CHECK(tokens > 0, "no input tokens");
    DSV4_CHECK(int64_t(state.layers.size()) == config_.num_layers && !state.device,
               "sequence state does not belong to this model");
    DSV4_CHECK(layer >= 0 && layer < config_.num_layers && start_position >= 0, "layer {} / position {} out of range",
               layer, start_position);
    for (int32_t id : ids)
        DSV4_CHECK(id >= 0 && id < config_.vocab_size, "token id {} is outside the vocabulary [0, {})", id,
                   config_.vocab_size);
    std::vector<float> streams(streams_in, streams_in + tokens * n_hc * D);
    block_forward(layer, weights_.layers[static_cast<size_t>(layer)], state.layers[static_cast<size_t>(layer)],
                  start_position, ids.data(), tokens, streams);
    return streams;
}

}  // namespace dsv4
