// Checkpoint::open: the sharded official-numerics-a, the single-file and directory-glob layouts, transformers'
// save_pretrained names, and broken directories and indexes (each error checked to name the file or tensor).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/progress.h"
#include "io/config_json.h"
#include "io/tensor_names.h"
#include "io_test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using test::expect_error;
using test::TempDir;
using test::TensorSet;

std::string fixture_config() {
    return read_text_file(test::fixture_dir() + "/config.json");
}

TensorSet fixture_tensors() {
    return TensorSet::from_checkpoint(*Checkpoint::open(test::fixture_dir()));
}

TEST(Checkpoint, OpensTheShardedFixture) {
    auto ck = Checkpoint::open(test::fixture_dir());
    EXPECT_EQ(ck->dir(), test::fixture_dir());
    EXPECT_EQ(ck->config().num_layers, 4);
    EXPECT_EQ(ck->config().num_mtp_layers, 1);
    EXPECT_EQ(ck->tensors().size(), 416u);

    const TensorRef* wq_b = ck->find("layers.1.attn.indexer.wq_b.weight");
    ASSERT_NE(wq_b, nullptr);
    EXPECT_EQ(wq_b->dtype, DType::kF8E4M3);
    EXPECT_EQ(wq_b->shape, (std::vector<int64_t>{1024, 128}));
    EXPECT_NE(wq_b->file.find("model-00001-of-00002.safetensors"), std::string::npos);
    const TensorRef& e_proj = ck->get("mtp.0.e_proj.weight");
    EXPECT_NE(e_proj.file.find("model-00002-of-00002.safetensors"), std::string::npos);
    EXPECT_EQ(ck->get("layers.0.ffn.experts.3.w2.weight").dtype, DType::kI8);
    EXPECT_EQ(ck->get("layers.0.ffn.gate.tid2eid").dtype, DType::kI64);

    uint64_t files = std::filesystem::file_size(test::fixture_dir() + "/model-00001-of-00002.safetensors") +
                     std::filesystem::file_size(test::fixture_dir() + "/model-00002-of-00002.safetensors");
    EXPECT_GT(ck->total_bytes(), files * 9 / 10);
    EXPECT_LT(ck->total_bytes(), files);
    EXPECT_EQ(ck->find("layers.0.attn.norm.weight"), nullptr);
    expect_error([&] { ck->get("layers.9.attn.wq_a.weight"); }, {test::fixture_dir(), "'layers.9.attn.wq_a.weight'"});
}

TEST(Checkpoint, ProgressStaysOffWhenStderrIsNotATerminal) {
    testing::internal::CaptureStderr();  // stderr becomes a file, so it is no terminal
    auto ck = Checkpoint::open(test::fixture_dir(), {.show_progress = true});
    EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
    EXPECT_EQ(format_bytes(17), "17 B");
    EXPECT_EQ(format_bytes(1'500'000), "1.5 MB");
    EXPECT_EQ(format_bytes(159'600'000'000ull), "159.60 GB");
}

TEST(TensorNames, MapsTransformersSavedNamesToNative) {
    EXPECT_EQ(native_tensor_name("head.weight"), "head.weight");
    EXPECT_EQ(native_tensor_name("model.embed_tokens.weight"), "embed.weight");
    EXPECT_EQ(native_tensor_name("model.norm.weight"), "norm.weight");
    EXPECT_EQ(native_tensor_name("model.hc_head.hc_fn"), "hc_head_fn");
    EXPECT_EQ(native_tensor_name("model.hc_head.hc_base"), "hc_head_base");
    EXPECT_EQ(native_tensor_name("model.hc_head.hc_scale"), "hc_head_scale");
    EXPECT_EQ(native_tensor_name("model.layers.12.attn.norm.weight"), "layers.12.attn.kv_norm.weight");
    EXPECT_EQ(native_tensor_name("model.layers.1.attn.compressor.norm.weight"), "layers.1.attn.compressor.norm.weight");
    EXPECT_EQ(native_tensor_name("model.layers.0.attn.wq_a.weight"), "layers.0.attn.wq_a.weight");
    EXPECT_EQ(native_tensor_name("model.layers.0.ffn.experts.5.w2.weight"), "layers.0.ffn.experts.5.w2.weight");
    EXPECT_EQ(native_tensor_name("layers.0.attn.wq_a.weight_scale_inv"), "layers.0.attn.wq_a.scale");
    EXPECT_EQ(native_tensor_name("lm_head.weight"), "head.weight");
    // Native names are fixed points, including ones that look like the transformers exceptions.
    EXPECT_EQ(native_tensor_name("layers.3.attn.kv_norm.weight"), "layers.3.attn.kv_norm.weight");
    EXPECT_EQ(native_tensor_name("mtp.0.norm.weight"), "mtp.0.norm.weight");
    EXPECT_EQ(native_tensor_name("model.layers.x.attn.norm.weight"), "layers.x.attn.norm.weight");
}

// The spelling transformers 5.17's save_pretrained gives a native name (spec §16.2).
std::string transformers_saved_name(const std::string& native) {
    if (native == "head.weight") return native;
    if (native == "embed.weight") return "model.embed_tokens.weight";
    if (native.rfind("hc_head_", 0) == 0) return "model.hc_head.hc_" + native.substr(8);
    std::string n = native;
    if (auto p = n.find(".attn.kv_norm.weight"); p != std::string::npos && n.rfind("layers.", 0) == 0)
        n = n.substr(0, p) + ".attn.norm.weight";
    return "model." + n;
}

TEST(Checkpoint, ReadsTransformersSavedNames) {
    TensorSet set = fixture_tensors();
    std::erase_if(set.tensors, [](const test::OwnedTensor& t) { return t.name.rfind("mtp.", 0) == 0; });
    std::vector<std::string> native;
    for (auto& t : set.tensors) {
        native.push_back(t.name);
        t.name = transformers_saved_name(t.name);
    }
    ASSERT_NE(set.find("model.layers.2.attn.norm.weight"), nullptr);
    TempDir dir;
    set.write_checkpoint(dir, fixture_config());
    auto ck = Checkpoint::open(dir.path());
    ASSERT_EQ(ck->tensors().size(), native.size());
    for (const auto& n : native) EXPECT_NE(ck->find(n), nullptr) << n;
}

TEST(Checkpoint, RejectsTensorsThatNormalizeToTheSameName) {
    TensorSet set = fixture_tensors();
    set.add("model.embed_tokens.weight", DType::kBF16, {512, 256});
    TempDir dir;
    set.write_checkpoint(dir, fixture_config());
    expect_error([&] { Checkpoint::open(dir.path()); }, {"'embed.weight'", "model.embed_tokens.weight", "twice"});
}

TEST(Checkpoint, SingleFileAndDirectoryGlob) {
    TensorSet set = fixture_tensors();
    {
        TempDir dir;
        set.write_checkpoint(dir, fixture_config());
        EXPECT_EQ(Checkpoint::open(dir.path())->tensors().size(), 416u);
    }
    {  // no index, no model.safetensors: every *.safetensors counts
        TempDir dir;
        TensorSet a, b;
        for (const auto& t : set.tensors) (t.name.rfind("mtp.", 0) == 0 ? b : a).tensors.push_back(t);
        dir.write("part-a.safetensors", a.serialize());
        dir.write("part-b.safetensors", b.serialize());
        dir.write("config.json", fixture_config());
        dir.write("notes.txt", "not a tensor file");
        auto ck = Checkpoint::open(dir.path());
        EXPECT_EQ(ck->tensors().size(), 416u);
        EXPECT_NE(ck->get("mtp.0.e_proj.weight").file.find("part-b.safetensors"), std::string::npos);
    }
}

// Writes the fixture as two shards plus an index; `edit` may break the index before it is written.
void write_sharded(const TempDir& dir, const std::function<void(json&)>& edit = {}) {
    TensorSet set = fixture_tensors(), a, b;
    json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
    for (const auto& t : set.tensors) {
        bool second = t.name.rfind("mtp.", 0) == 0;
        (second ? b : a).tensors.push_back(t);
        index["weight_map"][t.name] = second ? "s-2.safetensors" : "s-1.safetensors";
    }
    dir.write("s-1.safetensors", a.serialize());
    dir.write("s-2.safetensors", b.serialize());
    dir.write("config.json", fixture_config());
    if (edit) edit(index);
    dir.write("model.safetensors.index.json", index.dump());
}

TEST(Checkpoint, ChecksTheShardIndex) {
    {
        TempDir dir;
        write_sharded(dir);
        EXPECT_EQ(Checkpoint::open(dir.path())->tensors().size(), 416u);
    }
    struct Case {
        const char* what;
        std::function<void(json&)> edit;
        std::vector<std::string> words;
    };
    const std::vector<Case> cases = {
        {"missing shard",
         [](json& j) { j["weight_map"]["norm.weight"] = "s-3.safetensors"; },
         {"s-3.safetensors", "does not exist"}},
        {"wrong shard",
         [](json& j) { j["weight_map"]["mtp.0.e_proj.weight"] = "s-1.safetensors"; },
         {"'mtp.0.e_proj.weight'", "s-1.safetensors", "s-2.safetensors"}},
        {"unlisted tensor",
         [](json& j) { j["weight_map"].erase("norm.weight"); },
         {"'norm.weight'", "not listed", "model.safetensors.index.json"}},
        {"listed but absent",
         [](json& j) { j["weight_map"]["layers.7.ffn_norm.weight"] = "s-1.safetensors"; },
         {"'layers.7.ffn_norm.weight'", "s-1.safetensors", "does not contain"}},
        {"no weight_map", [](json& j) { j.erase("weight_map"); }, {"model.safetensors.index.json", "'weight_map'"}},
        {"weight_map not object",
         [](json& j) { j["weight_map"] = json::array(); },
         {"model.safetensors.index.json", "'weight_map'"}},
        {"shard not a string",
         [](json& j) { j["weight_map"]["norm.weight"] = 2; },
         {"model.safetensors.index.json", "weight_map['norm.weight']"}},
        {"shard outside the directory",
         [](json& j) { j["weight_map"]["norm.weight"] = "../s-1.safetensors"; },
         {"weight_map['norm.weight']", "inside the checkpoint directory"}},
        {"index not an object", [](json& j) { j = json::array(); }, {"model.safetensors.index.json", "JSON object"}},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.what);
        TempDir dir;
        write_sharded(dir, c.edit);
        try {
            Checkpoint::open(dir.path());
            ADD_FAILURE() << "accepted";
        } catch (const Error& e) {
            for (const auto& w : c.words) EXPECT_NE(std::string(e.what()).find(w), std::string::npos) << e.what();
        }
    }
    TempDir dir;
    write_sharded(dir);
    dir.write("model.safetensors.index.json", "{\"weight_map\": {");
    expect_error([&] { Checkpoint::open(dir.path()); }, {"model.safetensors.index.json", "not valid JSON"});
}

TEST(Checkpoint, RejectsIncompleteDirectories) {
    TempDir dir;
    expect_error([&] { Checkpoint::open(dir.file("absent")); }, {"absent", "not a directory"});
    expect_error([&] { Checkpoint::open(dir.path()); }, {dir.path(), "config.json"});
    dir.write("config.json", "{\"model_type\": \"deepseek_v4\"}");
    expect_error([&] { Checkpoint::open(dir.path()); }, {"config.json", "missing required field"});
    dir.write("config.json", fixture_config());
    expect_error([&] { Checkpoint::open(dir.path()); }, {dir.path(), "*.safetensors"});
    dir.write("model.safetensors", "garbage!");
    expect_error([&] { Checkpoint::open(dir.path()); }, {"model.safetensors", "header length"});
}

TEST(Checkpoint, TransformersCheckpointWithoutMtpHasNoMtpLayers) {
    json cfg = json::parse(R"({"model_type": "deepseek_v4", "num_hidden_layers": 2, "partial_rotary_factor": 0.125,
                               "layer_types": ["sliding_attention", "compressed_sparse_attention"],
                               "num_nextn_predict_layers": 1})");
    float x = 1.0f;
    TempDir dir;
    dir.write("config.json", cfg.dump());
    dir.write("model.safetensors", serialize_safetensors({{"model.norm.weight", DType::kF32, {1}, &x, 4}}));
    auto ck = Checkpoint::open(dir.path());
    EXPECT_EQ(ck->config().num_mtp_layers, 0);
    EXPECT_TRUE(ck->config().mtp_compress_ratios.empty());
    ASSERT_NE(ck->find("norm.weight"), nullptr);
    // With MTP tensors present the config's count stands.
    dir.write("model.safetensors", serialize_safetensors({{"model.norm.weight", DType::kF32, {1}, &x, 4},
                                                          {"mtp.0.norm.weight", DType::kF32, {1}, &x, 4}}));
    EXPECT_EQ(Checkpoint::open(dir.path())->config().num_mtp_layers, 1);
}

}  // namespace
}  // namespace dsv4
