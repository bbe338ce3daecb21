// The MoE sub-layer: see moe.h. The order of operations follows the official MoE/Gate/Expert modules.
#include "model/moe.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/error.h"

namespace dsv4 {
namespace {

float sqrt_softplus(float z) {
    float softplus = z > 20.0f ? z : std::log1p(std::exp(z));  // torch's softplus threshold
    return std::sqrt(softplus);
}

float silu(float g) { return g / (1.0f + std::exp(-g)); }

// SwiGLU expert on `rows` tokens: out = W2( silu(min(W1 x, L)) * clamp(W3 x, -L, L) * weight ).
// The activation product is f32; it enters W2 as bf16 in model numerics. weights may be null (shared expert).
void expert_forward(const ModelConfig& cfg, const Precision& p, const ExpertWeights& e, const float* x,
                    int64_t rows, const float* weights, float* out) {
    const int64_t I = e.w1.rows;
    std::vector<float> gate(static_cast<size_t>(rows * I)), up(static_cast<size_t>(rows * I));
    p.linear(x, rows, e.w1, gate.data());
    p.linear(x, rows, e.w3, up.data());
    const float limit = float(cfg.swiglu_limit);
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < I; ++i) {
            float g = gate[static_cast<size_t>(r * I + i)], u = up[static_cast<size_t>(r * I + i)];
            if (limit > 0) {
                u = std::clamp(u, -limit, limit);
                g = std::min(g, limit);
            }
            float h = silu(g) * u;
            if (weights) h *= weights[r];
            gate[static_cast<size_t>(r * I + i)] = h;
        }
    p.activation(gate.data(), rows * I);
    p.linear(gate.data(), rows, e.w2, out);
}

}  // namespace

RoutingDecision route_tokens(const ModelConfig& cfg, const Precision& p, const MoeWeights& w, const float* x,
                             const int32_t* ids, int64_t tokens) {
    const int64_t E = cfg.n_routed_experts, k = cfg.num_experts_per_tok;
    DSV4_CHECK(cfg.scoring_func == "sqrtsoftplus", "scoring_func '{}' is not supported (DeepSeek-V4 uses sqrtsoftplus)",
               cfg.scoring_func);
    std::vector<float> scores(static_cast<size_t>(tokens * E));
    p.linear_f32(x, tokens, w.gate, scores.data());  // the router runs in f32 on the upcast input and weight
    for (auto& s : scores) s = sqrt_softplus(s);

    RoutingDecision out;
    out.experts.resize(static_cast<size_t>(tokens * k));
    out.weights.resize(static_cast<size_t>(tokens * k));
    out.margin.assign(static_cast<size_t>(tokens), std::numeric_limits<float>::infinity());
    std::vector<int64_t> order(static_cast<size_t>(E));
    for (int64_t t = 0; t < tokens; ++t) {
        const float* s = scores.data() + t * E;
        int32_t* chosen = out.experts.data() + t * k;
        if (!w.tid2eid.empty()) {
            DSV4_CHECK(ids[t] >= 0 && ids[t] < cfg.vocab_size, "token id {} is outside the vocabulary [0, {})", ids[t],
                       cfg.vocab_size);
            std::copy_n(w.tid2eid.data() + int64_t(ids[t]) * k, k, chosen);
        } else {
            // Selection by score + bias; the bias never enters the weights. Ties go to the lower expert index.
            std::iota(order.begin(), order.end(), 0);
            auto biased = [&](int64_t e) { return s[e] + w.gate_bias[static_cast<size_t>(e)]; };
            std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
                return biased(a) > biased(b) || (biased(a) == biased(b) && a < b);
            });
            for (int64_t j = 0; j < k; ++j) chosen[j] = int32_t(order[static_cast<size_t>(j)]);
            if (k < E) {  // partial_sort leaves the rest unordered: rank k+1 is the best of the rest
                const float kth = biased(order[static_cast<size_t>(k - 1)]);
                float next = -std::numeric_limits<float>::infinity();
                for (int64_t j = k; j < E; ++j) next = std::max(next, biased(order[static_cast<size_t>(j)]));
                out.margin[static_cast<size_t>(t)] = (kth - next) / std::fabs(kth);
            }
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < k; ++j) sum += s[chosen[j]];
        for (int64_t j = 0; j < k; ++j)
            out.weights[static_cast<size_t>(t * k + j)] = s[chosen[j]] / sum * float(cfg.routed_scaling_factor);
    }
    return out;
}

void moe_forward(const ModelConfig& cfg, const Precision& p, const MoeWeights& w, const float* x,
                 const int32_t* ids, int64_t tokens, float* out, int64_t layer, const ActivationObserver* observer) {
    const int64_t D = cfg.hidden_size, k = cfg.num_experts_per_tok;
    RoutingDecision routing = route_tokens(cfg, p, w, x, ids, tokens);
    if (observer) (*observer)("ffn.router_margin", layer, routing.margin.data(), tokens, 1);

    // Gather the tokens of each expert, run the expert once on them, accumulate in f32.
    std::vector<float> acc(static_cast<size_t>(tokens * D), 0.0f);
    for (int64_t e = 0; e < cfg.n_routed_experts; ++e) {
        std::vector<int64_t> rows;
        std::vector<float> row_weights;
        for (int64_t i = 0; i < tokens * k; ++i)
            if (routing.experts[static_cast<size_t>(i)] == e) {
                rows.push_back(i / k);
                row_weights.push_back(routing.weights[static_cast<size_t>(i)]);
            }
        if (rows.empty()) continue;
        const int64_t n = int64_t(rows.size());
        std::vector<float> xe(static_cast<size_t>(n * D)), ye(static_cast<size_t>(n * D));
        for (int64_t r = 0; r < n; ++r) std::copy_n(x + rows[static_cast<size_t>(r)] * D, D, xe.data() + r * D);
        expert_forward(cfg, p, w.experts[static_cast<size_t>(e)], xe.data(), n, row_weights.data(), ye.data());
        for (int64_t r = 0; r < n; ++r)
            for (int64_t c = 0; c < D; ++c) acc[static_cast<size_t>(rows[static_cast<size_t>(r)] * D + c)] += ye[static_cast<size_t>(r * D + c)];
    }
    std::vector<float> shared(static_cast<size_t>(tokens * D));
    expert_forward(cfg, p, w.shared, x, tokens, nullptr, shared.data());
    for (int64_t i = 0; i < tokens * D; ++i) out[i] = acc[static_cast<size_t>(i)] + shared[static_cast<size_t>(i)];
    p.activation(out, tokens * D);
}

}  // namespace dsv4
