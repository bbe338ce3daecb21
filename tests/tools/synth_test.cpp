// Synthetic checkpoints (src/model/synthetic_checkpoint.h, dsv4 synth): the same seed writes the same bytes
// whatever the thread count, the config round-trips through the Hub-shape reader, the stored formats follow
// spec §11.3 (tight power-of-two scales, FP4 packing, distinct tid2eid experts), and the tiny preset loads,
// inspects and runs a forward in both numerics without NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "core/number_formats.h"
#include "io/checkpoint.h"
#include "io/config_json.h"
#include "io/tensor_decode.h"
#include "model/cpu_model.h"
#include "model/synthetic_checkpoint.h"
#include "tool_test_util.h"

namespace dsv4 {
namespace {

using namespace dsv4::testing;

int32_t argmax_of(const float* row, int64_t n) {
    return int32_t(std::max_element(row, row + n) - row);
}

std::map<std::string, std::string> files_of(const std::string& dir) {
    std::map<std::string, std::string> out;
    for (const auto& e : fs::directory_iterator(dir)) out[e.path().filename().string()] = read_text(e.path().string());
    return out;
}

TEST(Synth, SameSeedSameBytesAnyThreads) {
    // The test-wide tiny model was written by `dsv4 synth` (seed 0, all cores); the library with one thread and
    // a second write must give the same files, another seed other shards.
    ModelConfig c = synthetic_preset("tiny");
    write_synthetic_checkpoint(c, {0, 2, 1}, temp_path("seed0_one_thread"));
    write_synthetic_checkpoint(c, {1, 2, 2}, temp_path("seed1"));
    auto a = files_of(tiny_model()), b = files_of(temp_path("seed0_one_thread")), d = files_of(temp_path("seed1"));
    ASSERT_EQ(a.size(), 4u);  // config.json, index, two shards
    EXPECT_TRUE(a.count("model.safetensors.index.json") && a.count("model-00001-of-00002.safetensors"));
    for (const auto& [name, bytes] : a) {
        EXPECT_EQ(bytes, b[name]) << name << " differs between two writes with seed 0";
        if (name.find(".safetensors") != std::string::npos && name.find("index") == std::string::npos)
            EXPECT_NE(bytes, d[name]) << name << " is the same for seeds 0 and 1";
        else
            EXPECT_EQ(bytes, d[name]) << name << " depends on the seed";
    }
}

TEST(Synth, HubConfigRoundTrips) {
    for (const auto& preset : synthetic_preset_names()) {
        const ModelConfig c = synthetic_preset(preset);
        const std::string text = hub_config_json(c);
        ParsedConfig parsed = parse_config_json(text, preset);
        EXPECT_EQ(parsed.shape, ConfigShape::kHub);
        EXPECT_EQ(hub_config_json(parsed.config), text) << preset;
        EXPECT_EQ(parsed.config.compress_ratios, c.compress_ratios);
        EXPECT_EQ(parsed.config.mtp_compress_ratios, c.mtp_compress_ratios);
        EXPECT_TRUE(parsed.config.compress_rope.yarn.has_value());
        EXPECT_TRUE(parsed.config.fp8_quantized && parsed.config.scale_fmt_ue8m0);
        EXPECT_EQ(parsed.config.expert_dtype, ExpertDtype::kFp4);
    }
    // V4-Flash's schedule (spec §2.1): [0,0] + [4,128]*20 + [4] + the MTP layer's [0]; hash layers 0..2.
    auto j = nlohmann::json::parse(hub_config_json(synthetic_preset("flash")));
    std::vector<int64_t> want = {0, 0};
    for (int i = 0; i < 20; ++i) want.insert(want.end(), {4, 128});
    want.insert(want.end(), {4, 0});
    EXPECT_EQ(j["compress_ratios"].get<std::vector<int64_t>>(), want);
    EXPECT_EQ(j["num_hash_layers"], 3);
    EXPECT_EQ(j["hidden_size"], 4096);
    // V4-Pro's (spec §2.1): [128,128] + [4,128]*29 + [4] + [0].
    j = nlohmann::json::parse(hub_config_json(synthetic_preset("pro")));
    want = {128, 128};
    for (int i = 0; i < 29; ++i) want.insert(want.end(), {4, 128});
    want.insert(want.end(), {4, 0});
    EXPECT_EQ(j["compress_ratios"].get<std::vector<int64_t>>(), want);
    EXPECT_EQ(j["num_hidden_layers"], 61);
    EXPECT_EQ(j["hidden_size"], 7168);
    EXPECT_EQ(j["num_attention_heads"], 128);
    EXPECT_EQ(j["q_lora_rank"], 1536);
    EXPECT_EQ(j["o_groups"], 16);
    EXPECT_EQ(j["index_topk"], 1024);
    EXPECT_EQ(j["n_routed_experts"], 384);
    EXPECT_EQ(j["moe_intermediate_size"], 3072);
    EXPECT_EQ(j["routed_scaling_factor"], 2.5);
    EXPECT_EQ(nlohmann::json::parse(hub_config_json(synthetic_preset("tiny", 6)))["compress_ratios"],
              nlohmann::json({0, 4, 16, 4, 16, 0, 0}));
}

TEST(Synth, RefusesWhatItCannotDo) {
    std::string dir = temp_path("occupied");
    fs::create_directories(dir);
    write_text("occupied/x", "x");
    try {
        write_synthetic_checkpoint(synthetic_preset("tiny"), {}, dir);
        ADD_FAILURE() << "wrote into a non-empty directory";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("not an empty directory"), std::string::npos) << e.what();
    }
    EXPECT_THROW(synthetic_preset("huge"), Error);
    ModelConfig c = synthetic_preset("tiny");
    c.mlp_types = {MlpType::kMoe, MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe};
    EXPECT_THROW(hub_config_json(c), Error);  // the Hub shape only has leading hash layers
    Result r = run("synth -o " + dir);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_NE(r.output.find(dir), std::string::npos) << r.output;
}

// Stored formats of the tiny model, read straight from the shards.
TEST(Synth, StoredFormatsFollowTheSpec) {
    auto ck = Checkpoint::open(tiny_model());
    const ModelConfig& c = ck->config();

    // FP8: every 128x128 block's scale is the smallest power of two >= amax/448, so its largest |e4m3| is in
    // (224, 448]; the decoded weights have std ~ 1/sqrt(fan_in).
    for (const char* name :
         {"layers.1.attn.wq_b", "layers.2.attn.wo_a", "mtp.0.e_proj", "layers.3.ffn.shared_experts.w2"}) {
        const TensorRef& w = ck->get(std::string(name) + ".weight");
        const TensorRef& s = ck->get(std::string(name) + ".scale");
        ASSERT_EQ(w.dtype, DType::kF8E4M3) << name;
        ASSERT_EQ(s.dtype, DType::kF8E8M0) << name;
        const int64_t N = w.shape[0], K = w.shape[1], bk = s.shape[1];
        const auto* q = reinterpret_cast<const uint8_t*>(w.data);
        const auto* e = reinterpret_cast<const uint8_t*>(s.data);
        double sum2 = 0;
        std::vector<float> block_max(size_t(s.numel()), 0.0f);
        for (int64_t r = 0; r < N; ++r)
            for (int64_t k = 0; k < K; ++k) {
                const float v = e4m3_to_f32(q[r * K + k]);
                ASSERT_FALSE(std::isnan(v)) << name;
                float& m = block_max[size_t((r / 128) * bk + k / 128)];
                m = std::max(m, std::fabs(v));
                const double x = double(v) * e8m0_to_f32(e[(r / 128) * bk + k / 128]);
                sum2 += x * x;
            }
        for (float m : block_max) EXPECT_TRUE(m > 224.0f && m <= 448.0f) << name << ": block max " << m;
        EXPECT_NEAR(std::sqrt(sum2 / double(N * K)) * std::sqrt(double(K)), 1.0, 0.1) << name;
    }

    // FP4 routed experts: I8 [N, K/2] + E8M0 [N, K/32]; each 32-block's scale is tight, so its largest
    // magnitude is 3, 4 or 6 (amax/scale in (3, 6] rounded to E2M1).
    const TensorRef& w = ck->get("layers.0.ffn.experts.3.w2.weight");
    const TensorRef& s = ck->get("layers.0.ffn.experts.3.w2.scale");
    ASSERT_EQ(w.dtype, DType::kI8);
    ASSERT_EQ(w.shape, (std::vector<int64_t>{c.hidden_size, c.moe_intermediate_size / 2}));
    ASSERT_EQ(s.shape, (std::vector<int64_t>{c.hidden_size, c.moe_intermediate_size / 32}));
    const auto* packed = reinterpret_cast<const uint8_t*>(w.data);
    for (int64_t r = 0; r < w.shape[0]; ++r)
        for (int64_t b = 0; b < s.shape[1]; ++b) {
            float m = 0;
            for (int j = 0; j < 16; ++j) {
                const uint8_t byte = packed[r * w.shape[1] + b * 16 + j];
                m = std::max({m, std::fabs(e2m1_to_f32(byte & 0xF)), std::fabs(e2m1_to_f32(byte >> 4))});
            }
            EXPECT_TRUE(m == 3.0f || m == 4.0f || m == 6.0f) << "row " << r << " block " << b << ": " << m;
        }

    // tid2eid: I64 [vocab, k], k distinct experts in range per row; score layers have a bias instead.
    const TensorRef& t = ck->get("layers.1.ffn.gate.tid2eid");
    ASSERT_EQ(t.dtype, DType::kI64);
    ASSERT_EQ(t.shape, (std::vector<int64_t>{c.vocab_size, c.num_experts_per_tok}));
    const auto* ids = reinterpret_cast<const int64_t*>(t.data);
    std::set<int64_t> used;
    for (int64_t r = 0; r < c.vocab_size; ++r) {
        std::set<int64_t> row(ids + r * c.num_experts_per_tok, ids + (r + 1) * c.num_experts_per_tok);
        ASSERT_EQ(int64_t(row.size()), c.num_experts_per_tok) << "row " << r;
        ASSERT_TRUE(*row.begin() >= 0 && *row.rbegin() < c.n_routed_experts) << "row " << r;
        used.insert(row.begin(), row.end());
    }
    EXPECT_EQ(int64_t(used.size()), c.n_routed_experts);
    EXPECT_EQ(ck->find("layers.2.ffn.gate.tid2eid"), nullptr);
    EXPECT_EQ(ck->get("layers.2.ffn.gate.bias").dtype, DType::kF32);
    EXPECT_EQ(ck->get("embed.weight").dtype, DType::kBF16);
    EXPECT_EQ(ck->get("hc_head_fn").dtype, DType::kF32);
    EXPECT_EQ(ck->get("layers.1.attn.indexer.compressor.ape").shape, (std::vector<int64_t>{4, 2 * c.index_head_dim}));
    std::vector<float> norm = decode_f32(ck->get("layers.0.attn_norm.weight"));
    for (float v : norm) EXPECT_TRUE(v >= 0.89f && v <= 1.11f) << v;
}

// Loads, inspects and runs 80 tokens (past the sliding window, several HCA-16 windows, and more CSA entries than
// index_topk) in both numerics: finite logits that differ from position to position.
TEST(Synth, TinyLoadsInspectsAndRunsBothNumerics) {
    Result r = run("inspect -m " + tiny_model());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("HCA"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("mtp.0"), std::string::npos) << r.output;

    auto ck = Checkpoint::open(tiny_model());
    std::vector<int32_t> ids(80);
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = int32_t((i * 7919 + 11) % 129280);
    ids[0] = 0;
    for (Numerics numerics : {Numerics::kReference, Numerics::kModel}) {
        CpuModel model(ck->config(), load_model_weights(ck, ck->config()), numerics, 2);
        SequenceState state = model.new_sequence();
        std::vector<float> logits = model.forward(state, ids, true);
        const int64_t V = ck->config().vocab_size;
        ASSERT_EQ(int64_t(logits.size()), int64_t(ids.size()) * V);
        std::set<int32_t> argmaxes;
        for (size_t p = 0; p < ids.size(); ++p) {
            const float* row = logits.data() + p * size_t(V);
            for (int64_t v = 0; v < V; ++v) ASSERT_TRUE(std::isfinite(row[v])) << numerics_name(numerics) << " " << p;
            argmaxes.insert(argmax_of(row, V));
        }
        EXPECT_GT(argmaxes.size(), ids.size() / 2) << numerics_name(numerics) << ": degenerate predictions";
    }
}

}  // namespace
}  // namespace dsv4
