// The attention sub-layer (spec §7, order of operations as the official Attention.forward, §8).
#include "model/attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"
#include "core/number_formats.h"
#include "kernels/cpu/attention.h"
#include "kernels/cpu/norms.h"

namespace dsv4 {
namespace {

using Buffer = std::vector<float>;

// The weighted RMSNorm of each row, then the bf16 cast of model numerics.
void norm_rows(const Precision& p, float* x, int64_t rows, int64_t n, const Vec& weight, float eps) {
    p.pool().parallel_for(rows, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) cpu::rms_norm(x + r * n, weight.data(), n, eps, x + r * n);
    });
    p.activation(x, rows * n);
}

// RoPE on the trailing rope_dim values of a vector of length n, then the bf16 cast.
void rope_tail(const Precision& p, const cpu::RopeTable& rope, float* v, int64_t n, int64_t position,
               bool inverse = false) {
    cpu::apply_rope(v + n - rope.rope_dim, rope, position, inverse);
    p.activation(v + n - rope.rope_dim, rope.rope_dim);
}

// Runs a compressor over the chunk, token by token; each finished entry is cast to bf16, normalized, rotated at
// its window start and passed to `finish` (which applies the QAT simulation), then appended to `entries`.
template <typename Finish>
void run_compressor(const AttentionContext& ctx, const CompressorWeights& cw, CompressorState& state,
                    const float* x, int64_t tokens, int64_t start_position, std::vector<float>& entries,
                    Finish finish) {
    const Precision& p = ctx.precision;
    const int64_t width = state.width, d = cw.head_dim, D = ctx.config.hidden_size;
    Buffer kv(static_cast<size_t>(tokens * width)), score(static_cast<size_t>(tokens * width)), entry(static_cast<size_t>(d));
    p.linear_f32(x, tokens, cw.wkv, kv.data());  // the official compressor runs in f32 (x.float(), f32 weights)
    p.linear_f32(x, tokens, cw.wgate, score.data());
    (void)D;
    for (int64_t t = 0; t < tokens; ++t) {
        const int64_t position = start_position + t;
        if (!compressor_step(state, cw, position, kv.data() + t * width, score.data() + t * width, entry.data()))
            continue;
        p.activation(entry.data(), d);
        cpu::rms_norm(entry.data(), cw.norm.data(), d, float(ctx.config.rms_norm_eps), entry.data());
        p.activation(entry.data(), d);
        rope_tail(p, ctx.rope, entry.data(), d, position + 1 - cw.ratio);
        finish(entry.data());
        entries.insert(entries.end(), entry.begin(), entry.end());
    }
}

// Lightning-indexer scores of one query over the visible entries (spec §7.4). In model numerics each stage
// is a bf16 tensor as in the official einsum path; in reference numerics everything is f32.
void indexer_scores(const Precision& p, const float* q, const float* head_weights, const float* keys,
                    int64_t visible, int64_t heads, int64_t dim, float* scores) {
    for (int64_t w = 0; w < visible; ++w) {
        const float* k = keys + w * dim;
        float total = 0.0f;
        for (int64_t h = 0; h < heads; ++h) {
            const float* qh = q + h * dim;
            float dot = 0.0f;
            for (int64_t i = 0; i < dim; ++i) dot += qh[i] * k[i];
            if (p.model()) {
                total += round_bf16(std::max(round_bf16(dot), 0.0f) * head_weights[h]);
            } else {
                total += std::max(dot, 0.0f) * head_weights[h];
            }
        }
        scores[w] = p.model() ? round_bf16(total) : total;
    }
}

// Attention of one head over the non-empty slots; in model numerics the probabilities enter P.V as bf16.
void sparse_attention(const Precision& p, const float* q, const std::vector<const float*>& slots, int64_t d,
                      float scale, float sink, float* out) {
    std::vector<const float*> keys;
    for (const float* s : slots)
        if (s) keys.push_back(s);
    cpu::sparse_attention_head(q, keys.data(), int64_t(keys.size()), d, scale, sink, p.model(), out);
}

struct TopK {
    std::vector<int64_t> indices;  // highest score first; ties go to the lower index (deterministic)
    float margin = std::numeric_limits<float>::infinity();  // (s_k - s_k+1) / |s_k|; inf when nothing is left out
};

TopK top_k(const float* scores, int64_t count, int64_t k) {
    std::vector<int64_t> order(static_cast<size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return scores[a] > scores[b] || (scores[a] == scores[b] && a < b);
    });
    TopK out;
    if (k > 0 && k < count) {  // the rest is unordered: rank k+1 is its best
        float next = -std::numeric_limits<float>::infinity();
        for (int64_t j = k; j < count; ++j) next = std::max(next, scores[order[static_cast<size_t>(j)]]);
        const float kth = scores[order[static_cast<size_t>(k - 1)]];
        out.margin = (kth - next) / std::max(std::fabs(kth), 1e-30f);
    }
    order.resize(static_cast<size_t>(k));
    out.indices = std::move(order);
    return out;
}

}  // namespace

void attention_forward(const AttentionContext& ctx, const AttentionWeights& w, LayerState& state,
                       int64_t start_position, const float* x, int64_t tokens, float* out) {
    const ModelConfig& cfg = ctx.config;
    const Precision& p = ctx.precision;
    const int64_t H = cfg.num_heads, d = cfg.head_dim, nope = cfg.nope_head_dim(), W = cfg.sliding_window;
    const int64_t ratio = cfg.compress_ratios[static_cast<size_t>(ctx.layer)];
    const float eps = float(cfg.rms_norm_eps);
    auto observe = [&](std::string_view name, const Buffer& b, int64_t cols) {
        if (ctx.observer) (*ctx.observer)(name, ctx.layer, b.data(), tokens, cols);
    };
    // The compressed entries (or indexer keys) this chunk closed, rows [before, end) of `entries`, as stored.
    auto observe_entries = [&](std::string_view name, const std::vector<float>& entries, int64_t before,
                               int64_t cols) {
        const int64_t added = int64_t(entries.size()) / cols - before;
        if (ctx.observer && added > 0) (*ctx.observer)(name, ctx.layer, entries.data() + before * cols, added, cols);
    };

    // 1. Queries: low-rank projection, q_norm, per-head unweighted RMS norm, RoPE on each head's tail.
    Buffer qr(static_cast<size_t>(tokens * cfg.q_lora_rank)), q(static_cast<size_t>(tokens * H * d));
    p.linear(x, tokens, w.wq_a, qr.data());
    norm_rows(p, qr.data(), tokens, cfg.q_lora_rank, w.q_norm, eps);
    observe("attn.qr", qr, cfg.q_lora_rank);
    p.linear(qr.data(), tokens, w.wq_b, q.data());
    observe("attn.q_proj", q, H * d);  // before the per-head norm and RoPE
    p.pool().parallel_for(tokens * H, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
            float* qh = q.data() + i * d;
            p.head_rms_norm(qh, d, eps);
            rope_tail(p, ctx.rope, qh, d, start_position + i / H);
        }
    });
    observe("attn.q", q, H * d);

    // 2. The window KV (K = V): projection, kv_norm, RoPE, FP8 round trip of the nope dims.
    Buffer kv(static_cast<size_t>(tokens * d));
    p.linear(x, tokens, w.wkv, kv.data());
    norm_rows(p, kv.data(), tokens, d, w.kv_norm, eps);
    for (int64_t t = 0; t < tokens; ++t) {
        rope_tail(p, ctx.rope, kv.data() + t * d, d, start_position + t);
        p.kv_nope_fp8(kv.data() + t * d, nope);
    }
    observe("attn.kv", kv, d);

    // 3. Lightning indexer (CSA): its own compressor builds the keys, then each query picks its top-k entries.
    std::vector<std::vector<int64_t>> selected(static_cast<size_t>(tokens));
    Buffer index_margin(static_cast<size_t>(tokens), std::numeric_limits<float>::infinity());
    if (w.indexer) {
        const IndexerWeights& iw = *w.indexer;
        const int64_t nI = cfg.index_n_heads, dI = cfg.index_head_dim;
        Buffer qi(static_cast<size_t>(tokens * nI * dI)), head_weights(static_cast<size_t>(tokens * nI));
        p.linear(qr.data(), tokens, iw.wq_b, qi.data());
        for (int64_t i = 0; i < tokens * nI; ++i) {
            rope_tail(p, ctx.rope, qi.data() + i * dI, dI, start_position + i / nI);
            p.indexer_rotate_fp4(qi.data() + i * dI, dI);
        }
        const int64_t keys_before = int64_t(state.index_keys.size()) / dI;
        run_compressor(ctx, iw.compressor, state.index_compressor, x, tokens, start_position, state.index_keys,
                       [&](float* entry) { p.indexer_rotate_fp4(entry, dI); });
        observe_entries("attn.index_keys", state.index_keys, keys_before, dI);
        p.linear(x, tokens, iw.weights_proj, head_weights.data());
        const float weight_scale = float(std::pow(double(dI), -0.5) * std::pow(double(nI), -0.5));
        for (auto& v : head_weights) v *= weight_scale;
        p.activation(head_weights.data(), int64_t(head_weights.size()));
        p.pool().parallel_for(tokens, [&](int64_t begin, int64_t end) {
            Buffer scores;
            for (int64_t t = begin; t < end; ++t) {
                const int64_t visible = (start_position + t + 1) / ratio;
                scores.resize(static_cast<size_t>(visible));
                indexer_scores(p, qi.data() + t * nI * dI, head_weights.data() + t * nI, state.index_keys.data(),
                               visible, nI, dI, scores.data());
                TopK chosen = top_k(scores.data(), visible, std::min(cfg.index_topk, visible));
                selected[static_cast<size_t>(t)] = std::move(chosen.indices);
                index_margin[static_cast<size_t>(t)] = chosen.margin;
            }
        });
    }

    if (w.indexer) {
        observe("attn.index_margin", index_margin, 1);
        if (ctx.observer) {  // [tokens, index_topk] entry indices, best first; -1 past the visible entries
            Buffer chosen(static_cast<size_t>(tokens * cfg.index_topk), -1.0f);
            for (int64_t t = 0; t < tokens; ++t)
                for (size_t j = 0; j < selected[static_cast<size_t>(t)].size(); ++j)
                    chosen[static_cast<size_t>(t * cfg.index_topk) + j] = float(selected[static_cast<size_t>(t)][j]);
            (*ctx.observer)("attn.selected", ctx.layer, chosen.data(), tokens, cfg.index_topk);
        }
    }

    // 4. Main compressor (CSA/HCA): entries closed by a token are visible to that token.
    if (w.compressor) {
        const int64_t entries_before = int64_t(state.compressed.size()) / d;
        run_compressor(ctx, *w.compressor, state.compressor, x, tokens, start_position, state.compressed,
                       [&](float* entry) { p.kv_nope_fp8(entry, nope); });
        observe_entries("attn.compressed", state.compressed, entries_before, d);
    }

    // 5. Sparse attention of every head over window keys plus the chosen compressed entries; inverse RoPE.
    // Slot order follows the official kernel's index list: W window slots (oldest to newest, missing positions
    // as empty slots at the end), then the compressed entries (CSA: by indexer score, highest first; HCA: in
    // order). In model numerics the order decides which keys share a softmax block (see attention.h).
    Buffer o(static_cast<size_t>(tokens * H * d));
    const float scale = float(std::pow(double(d), -0.5));
    p.pool().parallel_for(tokens, [&](int64_t begin, int64_t end) {
        std::vector<const float*> slots;
        for (int64_t t = begin; t < end; ++t) {
            const int64_t position = start_position + t;
            slots.clear();
            for (int64_t k = std::max<int64_t>(0, position - W + 1); k <= position; ++k)
                slots.push_back(k < start_position ? state.window.data() + (k % W) * d
                                                   : kv.data() + (k - start_position) * d);
            slots.resize(static_cast<size_t>(W), nullptr);
            if (w.indexer) {
                for (int64_t e : selected[static_cast<size_t>(t)]) slots.push_back(state.compressed.data() + e * d);
            } else if (w.compressor) {
                for (int64_t e = 0; e < (position + 1) / ratio; ++e) slots.push_back(state.compressed.data() + e * d);
            }
            for (int64_t h = 0; h < H; ++h) {
                float* oh = o.data() + (t * H + h) * d;
                const float* qh = q.data() + (t * H + h) * d;
                const float sink = w.attn_sink[static_cast<size_t>(h)];
                sparse_attention(p, qh, slots, d, scale, sink, oh);
                p.activation(oh, d);
                rope_tail(p, ctx.rope, oh, d, position, /*inverse=*/true);
            }
        }
    });
    observe("attn.o", o, H * d);

    // 6. Grouped low-rank output projection.
    Buffer z(static_cast<size_t>(tokens * cfg.o_groups * cfg.o_lora_rank));
    p.grouped_linear(o.data(), tokens, w.wo_a, cfg.o_groups, z.data());
    observe("attn.z", z, cfg.o_groups * cfg.o_lora_rank);
    p.linear(z.data(), tokens, w.wo_b, out);

    // 7. The window ring keeps the last W raw KV rows.
    for (int64_t t = std::max<int64_t>(0, tokens - W); t < tokens; ++t)
        std::copy_n(kv.data() + t * d, d, state.window.data() + ((start_position + t) % W) * d);
}

}  // namespace dsv4
