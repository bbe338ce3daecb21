// load_model_weights: official-numerics-a end to end (formats, shapes, decoded vectors, MTP), re-encodings of it
// (NVFP4 experts, dense BF16, transformers-saved names with a transformers config, F32 FP8 scales, I32 tid2eid),
// and broken variants: missing, unexpected, mis-shaped and mis-typed tensors, out-of-range tid2eid, and
// formats that contradict the config. Each error is checked to name the tensor (and file or directory).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/number_formats.h"
#include "io/config_json.h"
#include "io_test_util.h"
#include "model/weights.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using test::expect_error;
using test::TempDir;
using test::TensorSet;

json fixture_config() {
    return json::parse(read_text_file(test::fixture_dir() + "/config.json"));
}
TensorSet fixture_tensors() {
    return TensorSet::from_checkpoint(*Checkpoint::open(test::fixture_dir()));
}

// Writes `set` + `config` to a scratch directory and loads the weights (the mappings outlive the directory).
ModelWeights load(const TensorSet& set, const json& config, std::string* dir_out = nullptr) {
    TempDir dir;
    set.write_checkpoint(dir, config.dump());
    if (dir_out) *dir_out = dir.path();
    auto ck = Checkpoint::open(dir.path());
    return load_model_weights(ck, ck->config());
}

void expect_load_error(const TensorSet& set, const json& config, std::initializer_list<std::string> words) {
    expect_error([&] { load(set, config); }, words);
}

TEST(Weights, LoadsTheFixture) {
    auto ck = Checkpoint::open(test::fixture_dir());
    ModelWeights w = load_model_weights(ck, ck->config());
    EXPECT_EQ(w.checkpoint, ck);
    ASSERT_EQ(w.layers.size(), 4u);
    ASSERT_EQ(w.mtp.size(), 1u);

    EXPECT_EQ(w.embed.format, WeightFormat::kBF16);
    EXPECT_EQ(w.embed.rows, 512);
    EXPECT_EQ(w.embed.cols, 256);
    EXPECT_EQ(w.head.format, WeightFormat::kBF16);
    EXPECT_EQ(w.norm.size(), 256u);
    EXPECT_EQ(w.hc_head.fn.size(), 4u * 1024u);
    EXPECT_EQ(w.hc_head.scale.size(), 1u);

    const AttentionWeights& a0 = w.layers[0].attn;
    EXPECT_EQ(a0.wq_b.format, WeightFormat::kFp8Block);
    EXPECT_EQ(a0.wq_b.rows, 512);  // H * d
    EXPECT_EQ(a0.wq_b.cols, 128);  // q_lora_rank
    EXPECT_EQ(a0.wq_b.scale_cols, 1);
    EXPECT_EQ(a0.wq_b.block_rows, 128);
    EXPECT_EQ(a0.wq_b.block_cols, 128);
    EXPECT_EQ(a0.wq_b.scale_dtype, DType::kF8E8M0);
    EXPECT_EQ(a0.wo_a.rows, 128);  // g * o_lora_rank
    EXPECT_EQ(a0.wo_a.cols, 256);  // H * d / g
    EXPECT_EQ(a0.wq_a.name, "layers.0.attn.wq_a.weight");
    EXPECT_FALSE(a0.compressor.has_value());
    EXPECT_FALSE(a0.indexer.has_value());

    const AttentionWeights& a1 = w.layers[1].attn;  // CSA
    ASSERT_TRUE(a1.compressor && a1.indexer);
    EXPECT_TRUE(a1.compressor->overlap);
    EXPECT_EQ(a1.compressor->wkv.rows, 256);  // 2 * head_dim
    EXPECT_EQ(a1.compressor->wkv.format, WeightFormat::kBF16);
    EXPECT_EQ(a1.compressor->ape.size(), 4u * 256u);
    EXPECT_EQ(a1.indexer->wq_b.rows, 1024);  // index_n_heads * index_head_dim
    EXPECT_EQ(a1.indexer->compressor.head_dim, 128);
    EXPECT_EQ(a1.indexer->compressor.ratio, 4);
    const AttentionWeights& a2 = w.layers[2].attn;  // HCA
    ASSERT_TRUE(a2.compressor.has_value());
    EXPECT_FALSE(a2.indexer.has_value());
    EXPECT_FALSE(a2.compressor->overlap);
    EXPECT_EQ(a2.compressor->ape.size(), 128u * 128u);

    const MoeWeights& f0 = w.layers[0].ffn;  // hash layer
    EXPECT_EQ(f0.tid2eid.size(), 512u * 2u);
    EXPECT_TRUE(f0.gate_bias.empty());
    ASSERT_EQ(f0.experts.size(), 8u);
    const QuantizedMatrix& w2 = f0.experts[5].w2;
    EXPECT_EQ(w2.format, WeightFormat::kFp4Mx);
    EXPECT_EQ(w2.rows, 256);  // D
    EXPECT_EQ(w2.cols, 128);  // I: twice the 64 stored byte columns
    EXPECT_EQ(w2.scale_cols, 4);
    EXPECT_EQ(w2.block_cols, 32);
    EXPECT_EQ(f0.shared.w1.format, WeightFormat::kFp8Block);
    EXPECT_EQ(w.layers[3].ffn.gate_bias.size(), 8u);
    EXPECT_TRUE(w.layers[3].ffn.tid2eid.empty());

    const MtpWeights& m = w.mtp[0];
    EXPECT_EQ(m.e_proj.format, WeightFormat::kFp8Block);
    EXPECT_EQ(m.h_proj.rows, 256);
    EXPECT_EQ(m.enorm.size(), 256u);
    EXPECT_EQ(m.hc_head.base.size(), 4u);
    EXPECT_EQ(m.block.ffn.gate_bias.size(), 8u);
    EXPECT_EQ(m.block.hc_attn.fn.size(), 24u * 1024u);
    EXPECT_EQ(m.block.ffn.experts[7].w3.format, WeightFormat::kFp4Mx);
}

TEST(Weights, ViewsAndDecodedVectorsMatchTheFile) {
    auto ck = Checkpoint::open(test::fixture_dir());
    ModelWeights w = load_model_weights(ck, ck->config());
    const TensorRef& norm = ck->get("layers.2.attn.kv_norm.weight");  // BF16 -> f32
    ASSERT_EQ(w.layers[2].attn.kv_norm.size(), 128u);
    for (size_t i = 0; i < 128; ++i) {
        uint16_t h;
        std::memcpy(&h, norm.data + 2 * i, 2);
        ASSERT_EQ(w.layers[2].attn.kv_norm[i], bf16_to_f32(h)) << i;
    }
    const TensorRef& sink = ck->get("layers.1.attn.attn_sink");  // F32 copied
    EXPECT_EQ(std::memcmp(w.layers[1].attn.attn_sink.data(), sink.data, 16), 0);
    const TensorRef& ids = ck->get("layers.1.ffn.gate.tid2eid");
    for (size_t i = 0; i < 1024; ++i) {
        int64_t v;
        std::memcpy(&v, ids.data + 8 * i, 8);
        ASSERT_EQ(w.layers[1].ffn.tid2eid[i], v) << i;
    }
    // Matrices are views into the mapping, not copies.
    EXPECT_EQ(static_cast<const void*>(w.layers[0].attn.wkv.data),
              static_cast<const void*>(ck->get("layers.0.attn.wkv.weight").data));
    EXPECT_EQ(static_cast<const void*>(w.layers[0].attn.wkv.scale),
              static_cast<const void*>(ck->get("layers.0.attn.wkv.scale").data));
}

TEST(Weights, RejectsMissingAndUnexpectedTensors) {
    json cfg = fixture_config();
    {
        TensorSet set = fixture_tensors();
        set.remove("layers.2.attn.compressor.ape");
        std::string dir;
        expect_error([&] { load(set, cfg, &dir); },
                     {"missing tensor", "'layers.2.attn.compressor.ape'", "dsv4-io-test"});
    }
    {
        TensorSet set = fixture_tensors();
        set.remove("mtp.0.hc_head_scale");
        expect_load_error(set, cfg, {"missing tensor", "'mtp.0.hc_head_scale'"});
    }
    {
        TensorSet set = fixture_tensors();
        set.add("layers.0.attn.extra.weight", DType::kBF16, {4});
        expect_load_error(set, cfg, {"unexpected tensor", "'layers.0.attn.extra.weight'", "model.safetensors"});
    }
    {  // a router bias on a hash layer is not part of the model
        TensorSet set = fixture_tensors();
        set.add("layers.0.ffn.gate.bias", DType::kF32, {8});
        expect_load_error(set, cfg, {"unexpected tensor", "'layers.0.ffn.gate.bias'"});
    }
    {  // an indexer on an SWA layer
        TensorSet set = fixture_tensors();
        set.add("layers.3.attn.indexer.weights_proj.weight", DType::kBF16, {8, 256});
        expect_load_error(set, cfg, {"unexpected tensor", "'layers.3.attn.indexer.weights_proj.weight'"});
    }
    {  // MTP copies of the embedding and head are allowed and ignored
        TensorSet set = fixture_tensors();
        set.add("mtp.0.emb.tok_emb.weight", DType::kBF16, {512, 256});
        set.add("mtp.0.head.weight", DType::kBF16, {512, 256});
        EXPECT_EQ(load(set, cfg).mtp.size(), 1u);
        set.add("mtp.0.header", DType::kBF16, {1});
        expect_load_error(set, cfg, {"unexpected tensor", "'mtp.0.header'"});
    }
}

TEST(Weights, RejectsWrongShapesAndDtypes) {
    json cfg = fixture_config();
    struct Case {
        const char* what;
        std::function<void(TensorSet&)> edit;
        std::vector<std::string> words;
    };
    const std::vector<Case> cases = {
        {"fp8 weight shape",
         [](TensorSet& s) {
             s.at("layers.0.attn.wq_b.weight").shape = {256, 256};
         },
         {"'layers.0.attn.wq_b.weight'", "[256, 256]", "expected [512, 128]"}},
        {"fp8 scale shape",
         [](TensorSet& s) {
             s.at("layers.0.attn.wq_b.scale").shape = {1, 4};
         },
         {"'layers.0.attn.wq_b.scale'", "expected [4, 1]"}},
        {"fp4 weight shape",
         [](TensorSet& s) {
             s.at("layers.1.ffn.experts.2.w1.weight").shape = {64, 256};
         },
         {"'layers.1.ffn.experts.2.w1.weight'", "expected [128, 128]"}},
        {"fp4 scale dtype",
         [](TensorSet& s) { s.at("layers.1.ffn.experts.2.w1.scale").dtype = DType::kU8; },
         {"'layers.1.ffn.experts.2.w1.scale'", "F8_E8M0"}},
        {"vector shape",
         [](TensorSet& s) {
             s.at("layers.1.attn.attn_sink").shape = {2, 2};
         },
         {"'layers.1.attn.attn_sink'", "expected [4]"}},
        {"hc shape",
         [](TensorSet& s) {
             s.at("layers.3.hc_ffn_fn").shape = {1024, 24};
         },
         {"'layers.3.hc_ffn_fn'", "expected [24, 1024]"}},
        {"vector dtype",
         [](TensorSet& s) { s.at("norm.weight").dtype = DType::kI16; },
         {"'norm.weight'", "I16", "F32, BF16 or F16"}},
        {"weight dtype",
         [](TensorSet& s) { s.at("layers.2.attn.wkv.weight").dtype = DType::kBool; },
         {"'layers.2.attn.wkv.weight'", "BOOL"}},
        {"dense where fp8 expected",
         [](TensorSet& s) {
             auto& t = s.at("layers.2.attn.wkv.weight");
             t.dtype = DType::kBF16;
             t.shape = {64, 256};
             s.remove("layers.2.attn.wkv.scale");
         },
         {"'layers.2.attn.wkv.weight'", "expected [128, 256]"}},
        {"fp8 where dense expected",
         [](TensorSet& s) {
             auto& t = s.at("layers.1.attn.compressor.wkv.weight");  // BF16 [256, 256] -> F8 [256, 512]
             t.dtype = DType::kF8E4M3;
             t.shape = {256, 256};
             t.bytes.resize(256 * 256);
             s.add("layers.1.attn.compressor.wkv.scale", DType::kF8E8M0, {2, 2});
         },
         {"'layers.1.attn.compressor.wkv.weight'", "F32/BF16/F16"}},
        {"tid2eid shape",
         [](TensorSet& s) {
             s.at("layers.0.ffn.gate.tid2eid").shape = {256, 4};
         },
         {"'layers.0.ffn.gate.tid2eid'", "expected [512, 2]"}},
        {"tid2eid dtype",
         [](TensorSet& s) { s.at("layers.0.ffn.gate.tid2eid").dtype = DType::kF64; },
         {"'layers.0.ffn.gate.tid2eid'", "I64 or I32"}},
        {"tid2eid value too large",
         [](TensorSet& s) {
             int64_t v = 8;  // == n_routed_experts
             std::memcpy(s.at("layers.1.ffn.gate.tid2eid").bytes.data() + 8 * 77, &v, 8);
         },
         {"'layers.1.ffn.gate.tid2eid'", "element 77 is 8", "[0, 8)"}},
        {"tid2eid value negative",
         [](TensorSet& s) {
             int64_t v = -1;
             std::memcpy(s.at("layers.0.ffn.gate.tid2eid").bytes.data(), &v, 8);
         },
         {"'layers.0.ffn.gate.tid2eid'", "element 0 is -1"}},
        {"f32 scales under ue8m0",
         [](TensorSet& s) {
             auto& t = s.at("layers.0.attn.wq_a.scale");
             t.dtype = DType::kF32;
             t.bytes.assign(t.bytes.size() * 4, '\0');
         },
         {"'layers.0.attn.wq_a.scale'", "ue8m0"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        TensorSet set = fixture_tensors();
        c.edit(set);
        try {
            load(set, cfg);
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            for (const auto& w : c.words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
        }
    }
}

TEST(Weights, AcceptsBaseStyleF32ScalesAndI32Tid2eid) {
    json cfg = fixture_config();
    cfg["quantization_config"].erase("scale_fmt");  // Base checkpoints: float32 block scales
    TensorSet set = fixture_tensors();
    auto& s = set.at("layers.0.attn.wq_a.scale");
    std::vector<float> scales = {0.5f, 2.0f};
    s.dtype = DType::kF32;
    s.bytes.assign(reinterpret_cast<const char*>(scales.data()), 8);
    auto& ids = set.at("layers.0.ffn.gate.tid2eid");
    std::string i32;
    for (size_t i = 0; i < ids.bytes.size() / 8; ++i) {
        int64_t v;
        std::memcpy(&v, ids.bytes.data() + 8 * i, 8);
        int32_t n = int32_t(v);
        i32.append(reinterpret_cast<const char*>(&n), 4);
    }
    std::string original = ids.bytes;
    ids.dtype = DType::kI32;
    ids.bytes = i32;
    ModelWeights w = load(set, cfg);
    EXPECT_EQ(w.layers[0].attn.wq_a.scale_dtype, DType::kF32);
    for (size_t i = 0; i < 1024; ++i) {
        int64_t v;
        std::memcpy(&v, original.data() + 8 * i, 8);
        ASSERT_EQ(w.layers[0].ffn.tid2eid[i], v);
    }
}

// Re-encodes every trunk routed expert as NVIDIA's NVFP4 (spec §11.5): U8 weight, E4M3 scale per 16,
// F32 scalar weight_scale_2 and input_scale. MTP experts stay MXFP4, as in the release.
void to_nvfp4(TensorSet& set, const ModelConfig& c) {
    for (int64_t l = 0; l < c.num_layers; ++l)
        for (int64_t e = 0; e < c.n_routed_experts; ++e)
            for (const char* wn : {"w1", "w2", "w3"}) {
                std::string p = "layers." + std::to_string(l) + ".ffn.experts." + std::to_string(e) + "." + wn;
                auto& w = set.at(p + ".weight");
                w.dtype = DType::kU8;
                int64_t rows = w.shape[0], cols = w.shape[1] * 2;
                set.remove(p + ".scale");
                set.add(p + ".weight_scale", DType::kF8E4M3, {rows, cols / 16}, 0x38);
                float g = 0.25f, in = 3.0f;
                set.tensors.push_back(
                    {p + ".weight_scale_2", DType::kF32, {}, std::string(reinterpret_cast<char*>(&g), 4)});
                set.tensors.push_back(
                    {p + ".input_scale", DType::kF32, {}, std::string(reinterpret_cast<char*>(&in), 4)});
            }
}

TEST(Weights, ReadsNvfp4Experts) {
    TensorSet set = fixture_tensors();
    json cfg = fixture_config();
    to_nvfp4(set, parse_model_config(cfg.dump(), "cfg"));
    ModelWeights w = load(set, cfg);
    const QuantizedMatrix& m = w.layers[2].ffn.experts[6].w2;
    EXPECT_EQ(m.format, WeightFormat::kNvfp4);
    EXPECT_EQ(m.rows, 256);
    EXPECT_EQ(m.cols, 128);
    EXPECT_EQ(m.scale_cols, 8);
    EXPECT_EQ(m.block_cols, 16);
    EXPECT_EQ(m.scale_dtype, DType::kF8E4M3);
    EXPECT_EQ(m.global_scale, 0.25f);
    EXPECT_EQ(m.input_scale, 3.0f);
    EXPECT_EQ(w.mtp[0].block.ffn.experts[0].w1.format, WeightFormat::kFp4Mx);

    // weight_scale_2 is required; an E8M0 weight_scale is not NVFP4.
    TensorSet broken = set;
    broken.remove("layers.1.ffn.experts.0.w3.weight_scale_2");
    expect_load_error(broken, cfg, {"missing tensor", "'layers.1.ffn.experts.0.w3.weight_scale_2'"});
    broken = set;
    broken.at("layers.1.ffn.experts.0.w3.weight_scale").dtype = DType::kF8E8M0;
    expect_load_error(broken, cfg, {"'layers.1.ffn.experts.0.w3.weight_scale'", "F8_E4M3"});
}

TEST(Weights, FormatsMustAgreeWithTheConfig) {
    TensorSet set = fixture_tensors();
    json cfg = fixture_config();
    cfg["expert_dtype"] = "fp8";
    expect_load_error(set, cfg, {"'layers.0.ffn.experts.0.w1.weight'", "expert_dtype fp8"});
    cfg = fixture_config();
    cfg.erase("quantization_config");
    cfg.erase("expert_dtype");
    expect_load_error(set, cfg, {"'layers.0.attn.wq_a.weight'", "no quantization_config"});
}

// Dequantization is not the point here: the same shapes stored densely, with BF16 zeros.
TensorSet to_dense(const TensorSet& in) {
    TensorSet out;
    for (const auto& t : in.tensors) {
        std::string n = t.name;
        if (n.size() > 6 && n.compare(n.size() - 6, 6, ".scale") == 0) continue;
        test::OwnedTensor d = t;
        if (t.dtype == DType::kF8E4M3 || t.dtype == DType::kI8) {
            d.dtype = DType::kBF16;
            if (t.dtype == DType::kI8) d.shape[1] *= 2;
            d.bytes.assign(size_t(d.shape[0] * d.shape[1] * 2), '\0');
        }
        out.tensors.push_back(d);
    }
    return out;
}

TEST(Weights, ReadsADenseTransformersSavedCheckpoint) {
    TensorSet set = to_dense(fixture_tensors());
    std::erase_if(set.tensors, [](const test::OwnedTensor& t) { return t.name.rfind("mtp.", 0) == 0; });
    for (auto& t : set.tensors) {  // save_pretrained's spelling (spec §16.2)
        if (t.name == "head.weight") continue;
        if (t.name == "embed.weight")
            t.name = "model.embed_tokens.weight";
        else if (t.name.rfind("hc_head_", 0) == 0)
            t.name = "model.hc_head.hc_" + t.name.substr(8);
        else if (auto p = t.name.find(".attn.kv_norm.weight"); p != std::string::npos)
            t.name = "model." + t.name.substr(0, p) + ".attn.norm.weight";
        else
            t.name = "model." + t.name;
    }
    // The fixture's architecture in transformers' config shape.
    json hub = fixture_config(), cfg = hub;
    for (const char* k : {"compress_ratios", "num_hash_layers", "qk_rope_head_dim", "rope_scaling",
                          "quantization_config", "expert_dtype", "torch_dtype"})
        cfg.erase(k);
    cfg["layer_types"] = {"sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                          "sliding_attention"};
    cfg["compress_rates"] = {{"compressed_sparse_attention", 4}, {"heavily_compressed_attention", 128}};
    cfg["mlp_layer_types"] = {"hash_moe", "hash_moe", "moe", "moe"};
    cfg["partial_rotary_factor"] = 0.5;
    cfg["rope_parameters"] = {{"main", {{"rope_type", "default"}, {"rope_theta", 10000.0}}},
                              {"compress", hub["rope_scaling"]}};
    cfg["rope_parameters"]["compress"]["rope_theta"] = 160000.0;
    // save_pretrained writes the 1.0 DeepseekV4Config pinned; a nested dict without it would scale cos/sin.
    cfg["rope_parameters"]["compress"]["attention_factor"] = 1.0;
    cfg["dtype"] = "float32";
    ModelWeights w = load(set, cfg);
    EXPECT_TRUE(w.mtp.empty());
    EXPECT_EQ(w.layers[1].attn.wq_b.format, WeightFormat::kBF16);
    EXPECT_EQ(w.layers[1].ffn.experts[0].w2.cols, 128);
    EXPECT_EQ(w.layers[1].attn.kv_norm.size(), 128u);
    ASSERT_TRUE(w.layers[1].attn.indexer.has_value());
}

TEST(Weights, TiedEmbeddingsShareTheEmbedding) {
    TensorSet set = fixture_tensors();
    set.remove("head.weight");
    json cfg = fixture_config();
    expect_load_error(set, cfg, {"missing tensor", "'head.weight'"});
    cfg["tie_word_embeddings"] = true;
    ModelWeights w = load(set, cfg);
    EXPECT_EQ(w.head.data, w.embed.data);
}

}  // namespace
}  // namespace dsv4

namespace dsv4 {
namespace {

// The transformers fixtures of tests/fixtures (made by tools/fixtures): two transformers save_pretrained
// checkpoints and two Hub-native ones (FP8 + MXFP4 with MTP, FP8 + NVFP4), each opened and loaded completely.
TEST(Weights, LoadsTheRepositoryFixtures) {
    struct Expect {
        const char* name;
        size_t mtp;
        WeightFormat attn, expert;
    };
    for (const Expect& e : {Expect{"hf-tiny-hc2-hca16", 0, WeightFormat::kF32, WeightFormat::kF32},
                            Expect{"hf-tiny-hc4-hca128", 0, WeightFormat::kF32, WeightFormat::kF32},
                            Expect{"native-mxfp4-mtp", 1, WeightFormat::kFp8Block, WeightFormat::kFp4Mx},
                            Expect{"native-nvfp4", 0, WeightFormat::kFp8Block, WeightFormat::kNvfp4}}) {
        SCOPED_TRACE(e.name);
        auto ck = Checkpoint::open(test_fixtures::dir(e.name));
        ModelWeights w = load_model_weights(ck, ck->config());
        EXPECT_EQ(w.layers.size(), size_t(ck->config().num_layers));
        EXPECT_EQ(w.mtp.size(), e.mtp);
        EXPECT_EQ(w.layers.back().attn.wq_b.format, e.attn);
        EXPECT_EQ(w.layers.back().ffn.experts.back().w2.format, e.expert);
        EXPECT_EQ(w.layers.back().ffn.experts.back().w2.cols, ck->config().moe_intermediate_size);
    }
}

}  // namespace
}  // namespace dsv4
