// decode_bytes and decode_stage_floors (model/decode_bytes.h), the floors every decode measurement is held to,
// against counts worked out by hand for a three-layer toy in BenchWeights' formats (SWA with hash routing, CSA, HCA
// with ratio 8) at one position, so that every term shows up in one expected number; the stages against the kinds on
// the real presets at several positions; and a batch step's bytes.
#include "model/decode_bytes.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/thread_pool.h"
#include "model/bench_weights.h"
#include "model/synthetic_checkpoint.h"

namespace dsv4 {
namespace {

ModelConfig toy() {
    ModelConfig c;
    c.vocab_size = 16;
    c.hidden_size = 64;  // D
    c.num_layers = 3;
    c.num_heads = 2;  // H
    c.head_dim = 8;   // d
    c.rope_head_dim = 4;
    c.q_lora_rank = 16;
    c.o_groups = 2;
    c.o_lora_rank = 8;
    c.sliding_window = 4;
    c.compress_ratios = {0, 4, 8};
    c.mlp_types = {MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe};
    c.index_n_heads = 2;
    c.index_head_dim = 8;
    c.index_topk = 2;
    c.n_routed_experts = 4;
    c.n_shared_experts = 1;
    c.num_experts_per_tok = 2;
    c.moe_intermediate_size = 32;  // I
    c.hc_mult = 2;
    return c;
}

constexpr CacheEntryBytes kEntry{24, 5};  // any sizes: the count multiplies what the caller gives

TEST(DecodeBytes, ToyModelByHand) {
    const ModelConfig c = toy();
    ThreadPool pool(1);
    BenchWeights bench(3, pool);
    const ModelWeights w = bench.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost);
    const DecodeBytes b = decode_bytes(c, w, 9, kEntry);  // 10 visible positions
    // FP8 [r, c]: r c bytes + 4 per 128 x 128 block. Per layer: attn_norm 64 f32 = 256, sinks 2 f32 = 8, wq_a
    // [16, 64] = 1028, q_norm 64, wq_b [16, 16] = 260, wkv [8, 64] = 516, kv_norm 32, wo_a [16, 8] = 132, wo_b
    // [64, 16] = 1028: 3324, three layers.
    EXPECT_EQ(b.attention, 3 * 3324.0);
    // CSA (overlap: width 2 d = 16): compressor wkv, wgate bf16 [16, 64] = 2048 each, ape [4, 16] f32 = 256, norm 32:
    // 4384; indexer wq_b FP8 [16, 16] = 260, weights_proj bf16 [2, 64] = 256, its compressor (index_head_dim 8,
    // overlap) 4384. HCA (width 8): bf16 [8, 64] = 1024 twice, ape [8, 8] = 256, norm 32: 2336. SWA: none.
    EXPECT_EQ(b.compressor, 4384.0 + 260 + 256 + 4384 + 2336);
    // Mixers [(2 + 2) 2, 2 x 64] f32 = 4096, base 8 f32 = 32, scale 3 f32 = 12: 4140, two a layer; the head's
    // [2, 128] = 1024, base 8, scale 4; the final norm 256.
    EXPECT_EQ(b.hc, 3 * 2 * 4140.0 + 1036 + 256);
    // Gate bf16 [4, 64] = 512; the hash layer reads k = 2 int32 of tid2eid, the score layers a 4-float bias.
    EXPECT_EQ(b.router, 520.0 + 528 + 528);
    // FFN norm 256 and FP8 w1, w3 [32, 64], w2 [64, 32] = 2052 each.
    EXPECT_EQ(b.shared, 3 * (256.0 + 3 * 2052));
    // MXFP4 [32, 64] or [64, 32]: 2048 / 2 codes + 2048 / 32 scales = 1088; k = 2 experts of 3 matrices a layer.
    EXPECT_EQ(b.routed, 3 * 2 * 3 * 1088.0);
    EXPECT_EQ(b.head, 16 * 64 * 2.0);
    EXPECT_EQ(b.embed, 128.0);
    // Window min(10, 4) = 4 on every layer, + CSA min(topk 2, 10 / 4) = 2, + HCA 10 / 8 = 1: 15 entries; the CSA
    // layer scores 10 / 4 = 2 keys.
    EXPECT_EQ(b.kv, 15 * kEntry.main);
    EXPECT_EQ(b.index_keys, 2 * kEntry.index);
    EXPECT_EQ(b.total(), 9972.0 + 11620 + 26132 + 1576 + 19236 + 19584 + 2048 + 128 + 360 + 10);

    const auto f = decode_stage_floors(c, w, 9, kEntry);
    EXPECT_EQ(f.at("sparse_attn").per_token, b.kv);
    EXPECT_EQ(f.at("indexer").per_token, b.index_keys);
    EXPECT_EQ(f.at("routed_experts").per_expert, b.routed / 2);
    EXPECT_EQ(f.at("compressor").weights, 2336.0) << "the HCA layer's compressor; the CSA layer's is the indexer's";
    EXPECT_EQ(f.at("indexer").weights, 4384.0 + 260 + 256 + 4384);
}

// The stages regroup the kinds: for one token and its k experts they sum to the total, on the real shapes too
// (hash and score layers, every compression) and at positions inside and past the window and the top-k.
TEST(DecodeBytes, StagesSumToTheStepOnThePresets) {
    ThreadPool pool(2);
    for (const char* preset : {"tiny", "flash"}) {
        // Five layers hold every kind (SWA and CSA with hash routing, CSA and HCA with score routing); a small
        // vocabulary keeps flash's embedding and head small (they count once, whatever their size).
        ModelConfig c = synthetic_preset(preset, 5);
        c.vocab_size = 1024;
        BenchWeights bench(5, pool);
        // No routed expert's bytes: their shapes and formats are what count (the flash experts would be 1.7 GB).
        const ModelWeights w = bench.build(c, {0, 0}, ExpertBytes::kDevice);
        for (int64_t position : {0, 3, 127, 4095, 70000}) {
            const DecodeBytes b = decode_bytes(c, w, position, kEntry);
            double stages = 0;
            for (const auto& [name, floor] : decode_stage_floors(c, w, position, kEntry))
                stages += floor.bytes(1, double(c.num_experts_per_tok));
            EXPECT_NEAR(stages, b.total(), 1e-9 * b.total()) << preset << " at position " << position;
        }
    }
}

// A batch step: the dense weights once, the routed experts per expected distinct expert, the cache per token. One
// token is the single step (k distinct experts); a batch far larger than E tends to every expert once.
TEST(DecodeBytes, BatchStepCountsDistinctExpertsAndCachePerToken) {
    const ModelConfig c = toy();
    ThreadPool pool(1);
    BenchWeights bench(3, pool);
    const ModelWeights w = bench.build(c, {0, c.n_routed_experts}, ExpertBytes::kHost);
    const DecodeBytes one = decode_bytes(c, w, 9, kEntry);
    EXPECT_DOUBLE_EQ(expected_distinct_experts(c, 1), 2.0);
    EXPECT_DOUBLE_EQ(expected_distinct_experts(c, 2), 3.0);  // 4 (1 - (1/2)^2)
    EXPECT_NEAR(expected_distinct_experts(c, 200), 4.0, 1e-12);
    EXPECT_DOUBLE_EQ(batch_decode_bytes(c, one, 1), one.total());
    const double per_expert = one.routed / 2, per_token = one.kv + one.index_keys;
    const double dense = one.total() - one.routed - per_token;
    EXPECT_DOUBLE_EQ(batch_decode_bytes(c, one, 2), dense + 3 * per_expert + 2 * per_token);
    EXPECT_DOUBLE_EQ(batch_decode_bytes(c, one, 16),
                     dense + expected_distinct_experts(c, 16) * per_expert + 16 * per_token);
}

}  // namespace
}  // namespace dsv4
