// dsv4 inspect: the config, the layer schedule, the tensor formats and the memory a model needs. Loads and
// validates every weight, so it doubles as a checkpoint checker. Tested in tests/tools/.
#include <fmt/format.h>

#include <cstdio>
#include <map>

#include "commands.h"
#include "io/checkpoint.h"
#include "model/weights.h"

namespace dsv4::cli {
namespace {

const char* attention_name(AttentionType t) {
    switch (t) {
        case AttentionType::kSliding: return "sliding window";
        case AttentionType::kCompressedSparse: return "CSA (compressed sparse, indexer)";
        case AttentionType::kHeavilyCompressed: return "HCA (heavily compressed)";
    }
    return "?";
}

std::string gib(double bytes) { return fmt::format("{:.3f} GiB", bytes / double(1ull << 30)); }

// Bytes of per-sequence state per token and fixed per sequence, in the bf16 layout of the official reference
// (spec §12): compressed entries and indexer keys grow with the sequence; the window ring and compressor
// buffers do not.
void print_memory(const ModelConfig& c, uint64_t weight_bytes) {
    double per_token = 0.0, fixed = 0.0;
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const int64_t m = c.compress_ratios[static_cast<size_t>(i)];
        fixed += double(c.sliding_window * c.head_dim * 2);
        if (m == 0) continue;
        const int64_t coff = m == 4 ? 2 : 1;
        per_token += double(c.head_dim * 2) / double(m);
        fixed += double(2 * coff * m * coff * c.head_dim * 4);
        if (m == 4) {
            per_token += double(c.index_head_dim * 2) / double(m);
            fixed += double(2 * 2 * m * 2 * c.index_head_dim * 4);
        }
    }
    std::printf("memory:\n  weights           %s (as stored)\n", gib(double(weight_bytes)).c_str());
    std::printf("  per sequence      %s fixed (window rings, compressor buffers)\n", gib(fixed).c_str());
    std::printf("  per token         %.0f B (compressed KV + indexer keys, bf16)\n", per_token);
    std::printf("  at 1M tokens      %s per sequence\n", gib(fixed + per_token * 1048576.0).c_str());
}

}  // namespace

void add_inspect_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("inspect", "Print the config, layer schedule, tensor formats and memory needed");
    auto dir = std::make_shared<std::string>();
    cmd->add_option("-m,--model", *dir, "Model directory")->required();
    cmd->callback([=] {
        auto checkpoint = Checkpoint::open(*dir);
        const ModelConfig& c = checkpoint->config();
        ModelWeights weights = load_model_weights(checkpoint, c);  // validates every tensor

        std::printf("model: %s\n", dir->c_str());
        std::printf("  hidden %lld, layers %lld (+%lld MTP), heads %lld x %lld (rope %lld), vocab %lld\n",
                    (long long)c.hidden_size, (long long)c.num_layers, (long long)c.num_mtp_layers,
                    (long long)c.num_heads, (long long)c.head_dim, (long long)c.rope_head_dim,
                    (long long)c.vocab_size);
        std::printf("  q_lora %lld, o_groups %lld x o_lora %lld, window %lld, hc_mult %lld (sinkhorn %lld)\n",
                    (long long)c.q_lora_rank, (long long)c.o_groups, (long long)c.o_lora_rank,
                    (long long)c.sliding_window, (long long)c.hc_mult, (long long)c.hc_sinkhorn_iters);
        std::printf("  experts %lld routed (top %lld, width %lld) + %lld shared, scaling %.3g, swiglu limit %.3g\n",
                    (long long)c.n_routed_experts, (long long)c.num_experts_per_tok,
                    (long long)c.moe_intermediate_size, (long long)c.n_shared_experts, c.routed_scaling_factor,
                    c.swiglu_limit);
        std::printf("  indexer %lld heads x %lld, top-k %lld; rope theta %.0f / compress %.0f%s\n",
                    (long long)c.index_n_heads, (long long)c.index_head_dim, (long long)c.index_topk,
                    c.main_rope.theta, c.compress_rope.theta,
                    c.compress_rope.yarn ? fmt::format(" (YaRN x{:g} from {})", c.compress_rope.yarn->factor,
                                                       c.compress_rope.yarn->original_max_position_embeddings)
                                               .c_str()
                                         : "");
        std::printf("layers:\n");
        for (int64_t i = 0; i < c.num_layers; ++i)
            std::printf("  %3lld  %-34s m=%-4lld %s\n", (long long)i, attention_name(c.attention_type(i)),
                        (long long)c.compress_ratios[static_cast<size_t>(i)],
                        c.mlp_types[static_cast<size_t>(i)] == MlpType::kHashMoe ? "hash-routed MoE" : "score-routed MoE");
        for (int64_t i = 0; i < c.num_mtp_layers; ++i)
            std::printf("  mtp.%lld  m=%lld\n", (long long)i, (long long)c.mtp_compress_ratios[static_cast<size_t>(i)]);

        std::map<std::string, std::pair<int64_t, uint64_t>> by_dtype;
        for (const auto& [name, t] : checkpoint->tensors()) {
            auto& entry = by_dtype[std::string(dtype_name(t.dtype))];
            entry.first += 1;
            entry.second += t.nbytes;
        }
        std::printf("tensors: %zu\n", checkpoint->tensors().size());
        for (const auto& [dtype, stats] : by_dtype)
            std::printf("  %-8s %7lld tensors  %s\n", dtype.c_str(), (long long)stats.first, gib(double(stats.second)).c_str());
        const BlockWeights& l0 = weights.layers.at(0);
        std::printf("formats: attention %s, shared expert %s, routed experts %s, embed %s\n",
                    weight_format_name(l0.attn.wq_a.format), weight_format_name(l0.ffn.shared.w1.format),
                    weight_format_name(l0.ffn.experts.at(0).w1.format), weight_format_name(weights.embed.format));
        print_memory(c, checkpoint->total_bytes());
    });
}

}  // namespace dsv4::cli
