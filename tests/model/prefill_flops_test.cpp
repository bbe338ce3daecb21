// prefill_flops against counts worked out by hand for a three-layer toy (SWA with hash routing, CSA, HCA with ratio
// 8) over 9 prompt tokens: every term of the formula shows up in one of the expected numbers.
#include "model/prefill_flops.h"

#include <gtest/gtest.h>

namespace dsv4 {
namespace {

ModelConfig toy() {
    ModelConfig c;
    c.vocab_size = 10;
    c.hidden_size = 8;  // D
    c.num_layers = 3;
    c.num_heads = 2;  // H
    c.head_dim = 4;   // d
    c.q_lora_rank = 4;
    c.o_groups = 2;
    c.o_lora_rank = 2;
    c.sliding_window = 2;
    c.compress_ratios = {0, 4, 8};
    c.mlp_types = {MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe};
    c.index_n_heads = 2;
    c.index_head_dim = 2;
    c.index_topk = 1;
    c.n_routed_experts = 4;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 2;  // I
    c.hc_mult = 2;
    return c;
}

TEST(PrefillFlops, ToyModelByHand) {
    const PrefillFlops f = prefill_flops(toy(), 9);
    // Weights a token multiplies, per layer. Every layer: wq_a 4x8 = 32, wq_b 8x4 = 32, wkv 4x8 = 32, wo_a 2 groups
    // of 2x4 = 16, wo_b 8x4 = 32, two mixers [(2+2)*2, 2*8] = 128 each: 400; shared expert 3 x 2x8 = 48.
    // SWA (hash routing, no gate): 448. CSA: + compressor wkv, wgate [2*4, 8] = 128, indexer wq_b [2*2, 4] = 16,
    // weights_proj [2, 8] = 16, its compressor [2*2, 8] x 2 = 64, gate [4, 8] = 32: 704. HCA: + compressor
    // [4, 8] x 2 = 64, gate 32: 544. Two FLOPs each, 9 tokens: 2 * (448 + 704 + 544) * 9.
    EXPECT_EQ(f.linears, 30528.0);
    // 2 experts x 3 matrices of 2x8, 3 layers, 9 tokens, 2 FLOPs each.
    EXPECT_EQ(f.routed, 5184.0);
    // Keys per query at visible = 1..9: window min(v, 2): 17 in all. CSA adds min(1, v / 4): 6; HCA adds v / 8: 2.
    // 4 H d = 32 FLOPs per key: (17 + 23 + 19) * 32.
    EXPECT_EQ(f.attention, 1888.0);
    // CSA indexer: v / 4 summed over v = 1..9 is 8 keys, 2 heads x 2 dims x 2 FLOPs each.
    EXPECT_EQ(f.indexer, 64.0);
    // hc_head [2, 2*8] and lm_head [10, 8] for the last token.
    EXPECT_EQ(f.head, 224.0);
    EXPECT_EQ(f.total(), 37888.0);
}

TEST(PrefillFlops, AttentionGrowsWithThePromptLinearsDoNot) {
    const PrefillFlops one = prefill_flops(toy(), 1), two = prefill_flops(toy(), 2);
    EXPECT_EQ(two.linears, 2 * one.linears);
    EXPECT_EQ(two.routed, 2 * one.routed);
    EXPECT_EQ(one.attention, 3 * 32.0);  // one key (itself) per layer
    EXPECT_EQ(two.attention, 3 * 32.0 * 3);  // 1 + 2 keys per layer
    EXPECT_EQ(two.head, one.head);  // the last token's logits only
}

}  // namespace
}  // namespace dsv4
