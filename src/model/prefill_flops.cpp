// Prefill FLOPs (see prefill_flops.h); shapes from spec §4-§9, named as there.
#include "model/prefill_flops.h"

#include <algorithm>

namespace dsv4 {

PrefillFlops prefill_flops(const ModelConfig& c, int64_t tokens) {
    const double D = double(c.hidden_size), H = double(c.num_heads), d = double(c.head_dim);
    const double n_hc = double(c.hc_mult), I = double(c.moe_intermediate_size);
    const double mixer = (2 + n_hc) * n_hc * (n_hc * D);  // hc_fn [(2 + n_hc) n_hc, n_hc D]
    const double T = double(tokens);
    PrefillFlops f;
    for (int64_t l = 0; l < c.num_layers; ++l) {
        const int64_t m = c.compress_ratios.at(size_t(l));
        // Per token: wq_a, wq_b, wkv, wo_a (o_groups blocks of [o_lora, H d / o_groups]), wo_b, both mixers.
        double weights = double(c.q_lora_rank) * D + H * d * double(c.q_lora_rank) + d * D +
                         double(c.o_lora_rank) * H * d + D * double(c.o_groups * c.o_lora_rank) + 2 * mixer;
        if (m > 0) weights += 2 * (m == 4 ? 2 : 1) * d * D;  // compressor wkv, wgate [c d, D], c = 2 with overlap
        if (m == 4) {
            const double ih = double(c.index_n_heads), ihd = double(c.index_head_dim);
            weights += ih * ihd * double(c.q_lora_rank) + ih * D + 2 * (2 * ihd) * D;  // wq_b, weights_proj, compressor
        }
        if (c.mlp_types.at(size_t(l)) == MlpType::kMoe) weights += double(c.n_routed_experts) * D;  // gate
        weights += double(c.n_shared_experts) * 3 * I * D;
        f.linears += 2 * weights * T;
        f.routed += 2 * double(c.num_experts_per_tok) * 3 * I * D * T;

        for (int64_t p = 0; p < tokens; ++p) {
            const int64_t visible = p + 1;
            int64_t keys = std::min(visible, c.sliding_window);
            if (m == 4) {
                keys += std::min(c.index_topk, visible / 4);
                f.indexer += 2 * double(c.index_n_heads) * double(c.index_head_dim) * double(visible / 4);
            } else if (m > 0) {
                keys += visible / m;
            }
            f.attention += 4 * H * d * double(keys);  // QK and PV: 2 H d each per key
        }
    }
    f.head = 2 * n_hc * (n_hc * D) + 2 * double(c.vocab_size) * D;
    return f;
}

}  // namespace dsv4
