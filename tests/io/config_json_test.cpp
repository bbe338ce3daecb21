// config.json -> ModelConfig for both shapes: official-numerics-a's Hub config, Flash-like and 0731-like Hub
// configs, transformers-shaped configs written by hand from DeepseekV4Config's documented fields, and one broken
// config per validation rule, each checked to name the file and the field.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "io/config_json.h"
#include "io_test_util.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using test::expect_error;

// A complete Hub-shaped config (the fixture's values), as a JSON object tests can edit.
json hub_config() {
    return json::parse(R"({
 "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": 256,
 "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64,
 "q_lora_rank": 128, "o_groups": 2, "o_lora_rank": 64, "sliding_window": 32, "compress_ratios": [0, 4, 128, 0, 0],
 "compress_rope_theta": 160000.0, "rope_theta": 10000.0,
 "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32,
                  "beta_slow": 1},
 "max_position_embeddings": 1048576, "index_n_heads": 8, "index_head_dim": 128, "index_topk": 92,
 "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "moe_intermediate_size": 128,
 "num_hash_layers": 2, "scoring_func": "sqrtsoftplus", "topk_method": "noaux_tc", "norm_topk_prob": true,
 "routed_scaling_factor": 1.5, "swiglu_limit": 10.0, "hc_mult": 4, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06,
 "rms_norm_eps": 1e-06, "num_nextn_predict_layers": 1, "hidden_act": "silu", "bos_token_id": 0, "eos_token_id": 1,
 "tie_word_embeddings": false, "torch_dtype": "bfloat16", "expert_dtype": "fp4",
 "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "scale_fmt": "ue8m0", "weight_block_size": [128, 128],
                         "activation_scheme": "dynamic"}})");
}

// A transformers-shaped config as DeepseekV4Config.save_pretrained would write it for a tiny test model
// (spec §16.2): explicit schedules, nested rope_parameters, no quantization, transformers 5's "dtype" key.
json hf_config() {
    return json::parse(R"({
 "architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "vocab_size": 256, "hidden_size": 64,
 "moe_intermediate_size": 32, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 1,
 "head_dim": 32, "q_lora_rank": 32, "num_experts_per_tok": 2, "n_routed_experts": 4, "n_shared_experts": 1,
 "scoring_func": "sqrtsoftplus", "norm_topk_prob": true, "routed_scaling_factor": 1.5,
 "max_position_embeddings": 4096, "rope_theta": 10000.0,
 "layer_types": ["sliding_attention", "compressed_sparse_attention", "heavily_compressed_attention",
                 "compressed_sparse_attention"],
 "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
 "compress_rope_theta": 160000.0, "hc_mult": 2, "hc_sinkhorn_iters": 20, "hc_eps": 1e-06,
 "mlp_layer_types": ["hash_moe", "moe", "moe", "moe"], "swiglu_limit": 10.0, "sliding_window": 8,
 "o_groups": 2, "o_lora_rank": 16, "index_n_heads": 8, "index_head_dim": 16, "index_topk": 3,
 "num_nextn_predict_layers": 1, "hidden_act": "silu", "rms_norm_eps": 1e-06, "pad_token_id": null,
 "bos_token_id": 0, "eos_token_id": 1, "tie_word_embeddings": false,
 "rope_parameters": {
   "main": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
   "compress": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64, "beta_fast": 32,
                "beta_slow": 1, "attention_factor": 1.0, "rope_theta": 160000.0, "partial_rotary_factor": 0.25}},
 "partial_rotary_factor": 0.25, "dtype": "float32", "transformers_version": "5.17.0"})");
}

ParsedConfig parse(const json& j) {
    return parse_config_json(j.dump(), "test/config.json");
}

TEST(ConfigJson, ReadsTheFixtureHubConfig) {
    ModelConfig c = read_model_config(test::fixture_dir() + "/config.json");
    EXPECT_EQ(c.vocab_size, 512);
    EXPECT_EQ(c.hidden_size, 256);
    EXPECT_EQ(c.num_layers, 4);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.head_dim, 128);
    EXPECT_EQ(c.rope_head_dim, 64);
    EXPECT_EQ(c.nope_head_dim(), 64);
    EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 4, 128, 0}));
    EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int64_t>{0}));
    EXPECT_EQ(c.mlp_types, (std::vector<MlpType>{MlpType::kHashMoe, MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe}));
    EXPECT_EQ(c.attention_type(1), AttentionType::kCompressedSparse);
    EXPECT_EQ(c.attention_type(2), AttentionType::kHeavilyCompressed);
    EXPECT_EQ(c.main_rope.theta, 10000.0);
    EXPECT_FALSE(c.main_rope.yarn.has_value());
    EXPECT_EQ(c.compress_rope.theta, 160000.0);
    ASSERT_TRUE(c.compress_rope.yarn.has_value());
    EXPECT_EQ(c.compress_rope.yarn->factor, 4.0);
    EXPECT_EQ(c.compress_rope.yarn->original_max_position_embeddings, 64);
    EXPECT_EQ(c.compress_rope.yarn->beta_fast, 32.0);
    EXPECT_EQ(c.compress_rope.yarn->beta_slow, 1.0);
    EXPECT_EQ(c.index_n_heads, 8);
    EXPECT_EQ(c.index_topk, 92);
    EXPECT_EQ(c.n_routed_experts, 8);
    EXPECT_EQ(c.num_experts_per_tok, 2);
    EXPECT_EQ(c.routed_scaling_factor, 1.5);
    EXPECT_EQ(c.swiglu_limit, 10.0);
    EXPECT_EQ(c.hc_mult, 4);
    EXPECT_EQ(c.num_mtp_layers, 1);
    EXPECT_EQ(c.expert_dtype, ExpertDtype::kFp4);
    EXPECT_TRUE(c.fp8_quantized);
    EXPECT_TRUE(c.scale_fmt_ue8m0);
    EXPECT_EQ(c.weight_block_size, (std::vector<int64_t>{128, 128}));
    EXPECT_EQ(c.torch_dtype, "bfloat16");
    EXPECT_EQ(parse(hub_config()).shape, ConfigShape::kHub);
}

TEST(ConfigJson, FlashScheduleAndDraftTail) {
    json j = hub_config();
    j["num_hidden_layers"] = 43;
    j["num_hash_layers"] = 3;
    std::vector<int64_t> flash = {0, 0};
    for (int i = 0; i < 20; ++i) flash.insert(flash.end(), {4, 128});
    flash.insert(flash.end(), {4, 0});  // 44 entries: 43 trunk + 1 MTP
    j["compress_ratios"] = flash;
    ModelConfig c = parse(j).config;
    int csa = 0, hca = 0, swa = 0;
    for (int64_t i = 0; i < c.num_layers; ++i) {
        auto t = c.attention_type(i);
        (t == AttentionType::kCompressedSparse ? csa : t == AttentionType::kHeavilyCompressed ? hca : swa)++;
    }
    EXPECT_EQ(csa, 21);
    EXPECT_EQ(hca, 20);
    EXPECT_EQ(swa, 2);
    EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int64_t>{0}));
    EXPECT_EQ(c.block_compress_ratio(43), 0);
    EXPECT_EQ(c.mlp_types[2], MlpType::kHashMoe);
    EXPECT_EQ(c.mlp_types[3], MlpType::kMoe);

    // Flash-0731: two more zeros for the DSpark draft layers are accepted and dropped.
    flash.insert(flash.end(), {0, 0});
    j["compress_ratios"] = flash;
    EXPECT_EQ(parse(j).config.mtp_compress_ratios.size(), 1u);
    // A non-zero entry past the MTP layers is not.
    flash.back() = 4;
    j["compress_ratios"] = flash;
    expect_error([&] { parse(j); }, {"test/config.json", "compress_ratios[45]"});
}

TEST(ConfigJson, ReadsATransformersConfig) {
    ParsedConfig p = parse(hf_config());
    const ModelConfig& c = p.config;
    EXPECT_EQ(p.shape, ConfigShape::kTransformers);
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.head_dim, 32);
    EXPECT_EQ(c.rope_head_dim, 8);  // 0.25 * 32
    EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 4, 16, 4}));
    EXPECT_EQ(c.mtp_compress_ratios, (std::vector<int64_t>{0}));
    EXPECT_EQ(c.mlp_types, (std::vector<MlpType>{MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe, MlpType::kMoe}));
    EXPECT_EQ(c.main_rope.theta, 10000.0);
    EXPECT_FALSE(c.main_rope.yarn.has_value());
    EXPECT_EQ(c.compress_rope.theta, 160000.0);
    ASSERT_TRUE(c.compress_rope.yarn.has_value());
    EXPECT_EQ(c.compress_rope.yarn->factor, 4.0);
    EXPECT_EQ(c.compress_rope.yarn->original_max_position_embeddings, 64);
    EXPECT_EQ(c.hc_mult, 2);
    EXPECT_EQ(c.index_head_dim, 16);
    EXPECT_EQ(c.torch_dtype, "float32");
    EXPECT_FALSE(c.fp8_quantized);
    EXPECT_EQ(c.expert_dtype, ExpertDtype::kBf16);
}

TEST(ConfigJson, TransformersShapeFoldsLegacyFieldsAndDefaults) {
    json j = hf_config();
    j.erase("mlp_layer_types");
    j.erase("partial_rotary_factor");
    j.erase("compress_rates");
    j["rope_parameters"].erase("main");  // not nested any more: a flat dict describing the compress rope
    j["rope_parameters"] = j["rope_parameters"]["compress"];
    j["rope_parameters"].erase("partial_rotary_factor");
    j["num_hash_layers"] = 2;
    j["qk_rope_head_dim"] = 16;
    j["index_head_dim"] = 32;
    j["compress_rate_hca"] = 32;
    j["compress_rope_theta"] = 40000.0;
    ModelConfig c = parse(j).config;
    EXPECT_EQ(c.mlp_types, (std::vector<MlpType>{MlpType::kHashMoe, MlpType::kHashMoe, MlpType::kMoe, MlpType::kMoe}));
    EXPECT_EQ(c.rope_head_dim, 16);
    EXPECT_EQ(c.compress_ratios, (std::vector<int64_t>{0, 4, 32, 4}));
    EXPECT_EQ(c.compress_rope.theta, 40000.0);  // flat dict: thetas come from the top level
    ASSERT_TRUE(c.compress_rope.yarn.has_value());

    // Missing fields take DeepseekV4Config's defaults; no schedule at all gives its Pro-like default pattern.
    json minimal = {{"model_type", "deepseek_v4"}, {"partial_rotary_factor", 0.125}, {"num_hidden_layers", 6}};
    ModelConfig d = parse(minimal).config;
    EXPECT_EQ(d.hidden_size, 4096);
    EXPECT_EQ(d.head_dim, 512);
    EXPECT_EQ(d.rope_head_dim, 64);
    EXPECT_EQ(d.compress_ratios, (std::vector<int64_t>{128, 128, 128, 4, 128, 4}));
    EXPECT_EQ(d.mlp_types[2], MlpType::kHashMoe);
    EXPECT_EQ(d.mlp_types[3], MlpType::kMoe);
    EXPECT_EQ(d.routed_scaling_factor, 1.5);
    EXPECT_FALSE(d.compress_rope.yarn.has_value());
}

TEST(ConfigJson, EosListAndNulls) {
    json j = hf_config();
    j["eos_token_id"] = {1, 7};
    j["bos_token_id"] = nullptr;
    ModelConfig c = parse(j).config;
    EXPECT_EQ(c.eos_token_id, 1);
    EXPECT_EQ(c.bos_token_id, 0);
}

// One broken variant per rule: `edit` breaks a valid config, the error must name the file and `field`.
struct BadCase {
    const char* what;
    bool hf;
    std::function<void(json&)> edit;
    const char* field;
};

TEST(ConfigJson, RejectsBrokenConfigs) {
    const std::vector<BadCase> cases = {
        {"missing required field", false, [](json& j) { j.erase("hidden_size"); }, "'hidden_size'"},
        {"missing theta", false, [](json& j) { j.erase("compress_rope_theta"); }, "'compress_rope_theta'"},
        {"missing hash layers", false, [](json& j) { j.erase("num_hash_layers"); }, "'num_hash_layers'"},
        {"wrong type", false, [](json& j) { j["hidden_size"] = "256"; }, "'hidden_size'"},
        {"float for int", false, [](json& j) { j["num_attention_heads"] = 4.5; }, "'num_attention_heads'"},
        {"bool for number", false, [](json& j) { j["rope_theta"] = true; }, "'rope_theta'"},
        {"hidden size negative", false, [](json& j) { j["hidden_size"] = -8; }, "'hidden_size'"},
        // Beyond 2^31 - 1 a product of two config integers could overflow int64 (head_dim 2^63 - 1 did, UBSan).
        {"integer beyond 2^31", false, [](json& j) { j["head_dim"] = int64_t(1) << 31; },
         "'head_dim': 2147483648 is out of range"},
        {"huge integer", false, [](json& j) { j["head_dim"] = INT64_MAX; }, "'head_dim'"},
        {"huge negative integer", false, [](json& j) { j["hidden_size"] = INT64_MIN; }, "'hidden_size'"},
        {"huge id in a list", false, [](json& j) { j["compress_ratios"][1] = uint64_t(1) << 40; },
         "'compress_ratios[1]'"},
        {"ratios shorter than layers", false,
         [](json& j) {
             j["compress_ratios"] = {0, 4, 128};
         },
         "'compress_ratios'"},
        {"ratios lack mtp", false,
         [](json& j) {
             j["compress_ratios"] = {0, 4, 128, 0};
         },
         "'compress_ratios'"},
        {"negative ratio", false, [](json& j) { j["compress_ratios"][1] = -4; }, "'compress_ratios[1]'"},
        {"ratios not a list", false, [](json& j) { j["compress_ratios"] = 4; }, "'compress_ratios'"},
        {"rope dim odd", false, [](json& j) { j["qk_rope_head_dim"] = 63; }, "'qk_rope_head_dim'"},
        {"top-k > experts", false, [](json& j) { j["num_experts_per_tok"] = 9; }, "'num_experts_per_tok'"},
        {"shared experts", false, [](json& j) { j["n_shared_experts"] = 2; }, "'n_shared_experts'"},
        {"model type", false, [](json& j) { j["model_type"] = "deepseek_v41"; }, "'model_type'"},
        {"yarn factor", false, [](json& j) { j["rope_scaling"].erase("factor"); }, "'rope_scaling.factor'"},
        {"yarn factor type", false, [](json& j) { j["rope_scaling"]["factor"] = "4"; }, "'rope_scaling.factor'"},
        {"quant method", false, [](json& j) { j["quantization_config"]["quant_method"] = "gptq"; },
         "'quantization_config.quant_method'"},
        {"scale fmt", false, [](json& j) { j["quantization_config"]["scale_fmt"] = "e4m3"; },
         "'quantization_config.scale_fmt'"},
        {"block size", false,
         [](json& j) {
             j["quantization_config"]["weight_block_size"] = {64, 64};
         },
         "'quantization_config.weight_block_size'"},
        {"quantization not object", false, [](json& j) { j["quantization_config"] = "fp8"; }, "'quantization_config'"},
        {"expert dtype", false, [](json& j) { j["expert_dtype"] = "int4"; }, "'expert_dtype'"},
        {"fp4 experts unquantized", false, [](json& j) { j.erase("quantization_config"); }, "'expert_dtype'"},
        {"layer count absurd", false, [](json& j) { j["num_hidden_layers"] = 1LL << 40; }, "'num_hidden_layers'"},
        {"hf unknown layer type", true, [](json& j) { j["layer_types"][2] = "full_attention"; }, "'layer_types[2]'"},
        {"hf layer types length", true, [](json& j) { j["layer_types"].erase(3); }, "'layer_types'"},
        {"hf unknown mlp type", true, [](json& j) { j["mlp_layer_types"][0] = "dense"; }, "'mlp_layer_types[0]'"},
        {"hf partial factor odd", true, [](json& j) { j["partial_rotary_factor"] = 0.3; }, "'partial_rotary_factor'"},
        {"hf partial factor disagrees", true,
         [](json& j) { j["rope_parameters"]["compress"]["partial_rotary_factor"] = 0.5; },
         "'rope_parameters.compress.partial_rotary_factor'"},
        {"hf rope dim odd", true,
         [](json& j) {
             for (auto* p : {&j, &j["rope_parameters"]["main"], &j["rope_parameters"]["compress"]})
                 (*p)["partial_rotary_factor"] = 7.0 / 32.0;
         },
         "'partial_rotary_factor'"},
        {"hf layer types not strings", true, [](json& j) { j["layer_types"][0] = 0; }, "'layer_types[0]'"},
        // What neither reference can compute.
        {"head dim < rope", false, [](json& j) { j["qk_rope_head_dim"] = 130; }, "'head_dim'"},
        {"index head dim < rope", false, [](json& j) { j["index_head_dim"] = 32; }, "'index_head_dim'"},
        {"o_groups splits no H x d evenly", false, [](json& j) { j["o_groups"] = 3; }, "'o_groups'"},
        {"hash layers negative", false, [](json& j) { j["num_hash_layers"] = -1; }, "'num_hash_layers'"},
        {"index top-k negative", false, [](json& j) { j["index_topk"] = -1; }, "'index_topk'"},
        {"index heads zero", false, [](json& j) { j["index_n_heads"] = 0; }, "'index_n_heads'"},
        {"sinkhorn negative", false, [](json& j) { j["hc_sinkhorn_iters"] = -1; }, "'hc_sinkhorn_iters'"},
        {"hc_mult negative", false, [](json& j) { j["hc_mult"] = -1; }, "'hc_mult'"},
        {"o_lora_rank zero", false, [](json& j) { j["o_lora_rank"] = 0; }, "'o_lora_rank'"},
        {"window zero", false, [](json& j) { j["sliding_window"] = 0; }, "'sliding_window'"},
        {"hc eps negative", false, [](json& j) { j["hc_eps"] = -1e-6; }, "'hc_eps'"},
        {"rms eps negative", false, [](json& j) { j["rms_norm_eps"] = -1e-6; }, "'rms_norm_eps'"},
        {"swiglu limit negative", false, [](json& j) { j["swiglu_limit"] = -1.0; }, "'swiglu_limit'"},
        {"rope theta zero", false, [](json& j) { j["rope_theta"] = 0.0; }, "'rope_theta'"},
        {"yarn theta one", false, [](json& j) { j["compress_rope_theta"] = 1.0; }, "'compress_rope_theta'"},
        {"yarn factor zero", false, [](json& j) { j["rope_scaling"]["factor"] = 0.0; }, "'rope_scaling.factor'"},
        {"yarn beta negative", false, [](json& j) { j["rope_scaling"]["beta_fast"] = -32; },
         "'rope_scaling.beta_fast'"},
        {"yarn original length zero", false, [](json& j) { j["rope_scaling"]["original_max_position_embeddings"] = 0; },
         "'rope_scaling.original_max_position_embeddings'"},
        {"hf hca rate zero", true, [](json& j) { j["compress_rates"]["heavily_compressed_attention"] = 0; },
         "'compress_rates'"},
        {"hf mlp types short", true, [](json& j) { j["mlp_layer_types"].erase(3); }, "'mlp_layer_types'"},
        {"hf partial factor > 1", true,
         [](json& j) {
             for (auto* p : {&j, &j["rope_parameters"]["main"], &j["rope_parameters"]["compress"]})
                 (*p)["partial_rotary_factor"] = 1.5;
         },
         "'partial_rotary_factor'"},
        {"hf partial factor zero", true,
         [](json& j) {
             for (auto* p : {&j, &j["rope_parameters"]["main"], &j["rope_parameters"]["compress"]})
                 (*p)["partial_rotary_factor"] = 0.0;
         },
         "'partial_rotary_factor'"},
    };
    for (const auto& bc : cases) {
        SCOPED_TRACE(bc.what);
        json j = bc.hf ? hf_config() : hub_config();
        bc.edit(j);
        expect_error([&] { parse(j); }, {"test/config.json", bc.field});
    }
}

// What a reference computes but dsv4 does not: the error says so and names the limit.
TEST(ConfigJson, NamesWhatDsv4DoesNotSupport) {
    const std::vector<BadCase> cases = {
        {"no decoder layer", false, [](json& j) { j["num_hidden_layers"] = 0; }, "'num_hidden_layers'"},
        {"no routed expert per token", false, [](json& j) { j["num_experts_per_tok"] = 0; }, "'num_experts_per_tok'"},
        {"zero-width experts", false, [](json& j) { j["moe_intermediate_size"] = 0; }, "'moe_intermediate_size'"},
        {"zero-width queries", false, [](json& j) { j["q_lora_rank"] = 0; }, "'q_lora_rank'"},
        {"no residual stream", false, [](json& j) { j["hc_mult"] = 0; }, "'hc_mult'"},
        {"no hidden state", false, [](json& j) { j["hidden_size"] = 0; }, "'hidden_size'"},
        {"no context", false, [](json& j) { j["max_position_embeddings"] = 0; }, "'max_position_embeddings'"},
        {"softmax routing", false, [](json& j) { j["scoring_func"] = "softmax"; }, "'scoring_func'"},
        {"sigmoid routing", false, [](json& j) { j["scoring_func"] = "sigmoid"; }, "'scoring_func'"},
        {"activation", false, [](json& j) { j["hidden_act"] = "gelu"; }, "'hidden_act'"},
        {"rope type", false, [](json& j) { j["rope_scaling"]["type"] = "longrope"; }, "'rope_scaling.type'"},
        {"hf csa rate", true, [](json& j) { j["compress_rates"]["compressed_sparse_attention"] = 8; },
         "'compress_rates'"},
        {"hf hca rate 4", true, [](json& j) { j["compress_rates"]["heavily_compressed_attention"] = 4; },
         "'compress_rates'"},
        {"hf attention factor", true, [](json& j) { j["rope_parameters"]["compress"]["attention_factor"] = 1.2; },
         "'rope_parameters.compress.attention_factor'"},
        // A nested yarn dict without attention_factor: transformers infers 0.1 ln(4) + 1 and scales cos/sin.
        {"hf inferred attention factor", true,
         [](json& j) { j["rope_parameters"]["compress"].erase("attention_factor"); },
         "'rope_parameters.compress.attention_factor'"},
        {"hf linear rope", true, [](json& j) { j["rope_parameters"]["compress"]["rope_type"] = "linear"; },
         "'rope_parameters.compress.rope_type'"},
    };
    for (const auto& bc : cases) {
        SCOPED_TRACE(bc.what);
        json j = bc.hf ? hf_config() : hub_config();
        bc.edit(j);
        expect_error([&] { parse(j); }, {"test/config.json", bc.field, "not supported by dsv4"});
    }
}

// The edges both references compute (docs/config.md): equalities, ones and the zeros that mean something.
TEST(ConfigJson, AcceptsTheEdgesTheReferencesCompute) {
    auto hub = [](const std::function<void(json&)>& edit) {
        json j = hub_config();
        edit(j);
        return parse(j).config;
    };
    // The indexer with no non-rotary part, and heads with none.
    EXPECT_EQ(hub([](json& j) { j["index_head_dim"] = 64; }).index_head_dim, 64);
    ModelConfig all_rope = hub([](json& j) { j["qk_rope_head_dim"] = 128; });
    EXPECT_EQ(all_rope.nope_head_dim(), 0);
    // Output groups that end inside a head (4 heads x 128 = 8 groups of 64), and one head in one group.
    EXPECT_EQ(hub([](json& j) { j["o_groups"] = 8; }).o_groups, 8);
    ModelConfig one_head = hub([](json& j) {
        j["num_attention_heads"] = 1;
        j["o_groups"] = 1;
        j["index_n_heads"] = 1;
    });
    EXPECT_EQ(one_head.num_heads, 1);
    EXPECT_EQ(one_head.index_n_heads, 1);
    // Every expert active, one expert.
    EXPECT_EQ(hub([](json& j) { j["num_experts_per_tok"] = 8; }).num_experts_per_tok, 8);
    ModelConfig one_expert = hub([](json& j) {
        j["n_routed_experts"] = 1;
        j["num_experts_per_tok"] = 1;
    });
    EXPECT_EQ(one_expert.n_routed_experts, 1);
    // No hash layer; every layer hashed, also when num_hash_layers exceeds the layers (both references: i < n).
    for (int n_hash : {0, 4, 9}) {
        ModelConfig c = hub([&](json& j) { j["num_hash_layers"] = n_hash; });
        for (int64_t i = 0; i < c.num_layers; ++i)
            EXPECT_EQ(c.mlp_types[size_t(i)], i < n_hash ? MlpType::kHashMoe : MlpType::kMoe) << n_hash;
    }
    // Window 1, one stream, 0 Sinkhorn iterations (computes as 1), a CSA layer that selects nothing, no MTP.
    EXPECT_EQ(hub([](json& j) { j["sliding_window"] = 1; }).sliding_window, 1);
    EXPECT_EQ(hub([](json& j) { j["hc_mult"] = 1; }).hc_mult, 1);
    EXPECT_EQ(hub([](json& j) { j["hc_sinkhorn_iters"] = 0; }).hc_sinkhorn_iters, 0);
    EXPECT_EQ(hub([](json& j) { j["index_topk"] = 0; }).index_topk, 0);
    ModelConfig no_mtp = hub([](json& j) {
        j["num_nextn_predict_layers"] = 0;
        j["compress_ratios"] = {0, 4, 128, 0};
    });
    EXPECT_TRUE(no_mtp.mtp_compress_ratios.empty());
    // HCA at any ratio other than 4.
    EXPECT_EQ(hub([](json& j) {
                  j["compress_ratios"] = {1, 4, 3, 5, 0};
              }).compress_ratios,
              (std::vector<int64_t>{1, 4, 3, 5}));
    // Zero epsilons, no SwiGLU clamp, any routed scale.
    ModelConfig zeros = hub([](json& j) {
        j["hc_eps"] = 0.0;
        j["rms_norm_eps"] = 0.0;
        j["swiglu_limit"] = 0.0;
        j["routed_scaling_factor"] = 0.0;
    });
    EXPECT_EQ(zeros.swiglu_limit, 0.0);
    EXPECT_EQ(zeros.routed_scaling_factor, 0.0);
    EXPECT_EQ(hub([](json& j) { j["routed_scaling_factor"] = -1.0; }).routed_scaling_factor, -1.0);
    // Fields neither reference reads, and special tokens outside the vocabulary (transformers only warns).
    ModelConfig ignored = hub([](json& j) {
        j["num_key_value_heads"] = 8;
        j["topk_method"] = "greedy";
        j["norm_topk_prob"] = false;
        j["eos_token_id"] = 512;
        j["bos_token_id"] = -1;
    });
    EXPECT_EQ(ignored.eos_token_id, 512);
    // YaRN as transformers reads it: beta 0 is the default, original length defaults to max_position_embeddings.
    ModelConfig yarn = hub([](json& j) {
        j["rope_scaling"]["beta_fast"] = 0;
        j["rope_scaling"]["beta_slow"] = nullptr;
        j["rope_scaling"].erase("original_max_position_embeddings");
        j["rope_scaling"]["mscale"] = 1.0;  // a flat dict: transformers pins attention_factor to 1
    });
    ASSERT_TRUE(yarn.compress_rope.yarn.has_value());
    EXPECT_EQ(yarn.compress_rope.yarn->beta_fast, 32.0);
    EXPECT_EQ(yarn.compress_rope.yarn->beta_slow, 1.0);
    EXPECT_EQ(yarn.compress_rope.yarn->original_max_position_embeddings, 1048576);
}

TEST(ConfigJson, AcceptsTheTransformersEdges) {
    auto hf = [](const std::function<void(json&)>& edit) {
        json j = hf_config();
        edit(j);
        return parse(j).config;
    };
    auto set_factor = [](json& j, double f) {
        for (auto* p : {&j, &j["rope_parameters"]["main"], &j["rope_parameters"]["compress"]})
            (*p)["partial_rotary_factor"] = f;
    };
    // int(head_dim x factor) truncates, as transformers: 32 x 0.28 = 8.96 -> 8.
    EXPECT_EQ(hf([&](json& j) { set_factor(j, 0.28); }).rope_head_dim, 8);
    // Every dim rotary; the indexer (16 dims) must then be at least as wide as the rope slice.
    ModelConfig full = hf([&](json& j) {
        set_factor(j, 1.0);
        j["index_head_dim"] = 32;
    });
    EXPECT_EQ(full.rope_head_dim, 32);
    EXPECT_EQ(full.nope_head_dim(), 0);
    // The indexer with no non-rotary part (the config this reader used to refuse).
    EXPECT_EQ(hf([](json& j) { j["index_head_dim"] = 8; }).index_head_dim, 8);
    // Longer schedules: transformers keeps the first num_hidden_layers entries.
    ModelConfig longer = hf([](json& j) {
        j["layer_types"].push_back("sliding_attention");
        j["mlp_layer_types"].push_back("hash_moe");
    });
    EXPECT_EQ(longer.compress_ratios, (std::vector<int64_t>{0, 4, 16, 4}));
    EXPECT_EQ(longer.mlp_types.size(), 4u);
    // compress_rates keys transformers does not read; HCA rates 1 and 3; all layers hashed; 0 iterations.
    EXPECT_EQ(hf([](json& j) { j["compress_rates"]["sliding_attention"] = 1; }).compress_ratios[2], 16);
    for (int rate : {1, 3})
        EXPECT_EQ(hf([&](json& j) { j["compress_rates"]["heavily_compressed_attention"] = rate; }).compress_ratios[2],
                  rate);
    ModelConfig hashed = hf([](json& j) { j["mlp_layer_types"] = {"hash_moe", "hash_moe", "hash_moe", "hash_moe"}; });
    EXPECT_EQ(hashed.mlp_types, std::vector<MlpType>(4, MlpType::kHashMoe));
    // A nested yarn dict without attention_factor whose inferred factor is 1: factor <= 1, or mscale equal to
    // mscale_all_dim.
    EXPECT_TRUE(hf([](json& j) {
                    j["rope_parameters"]["compress"].erase("attention_factor");
                    j["rope_parameters"]["compress"]["factor"] = 1.0;
                }).compress_rope.yarn.has_value());
    EXPECT_TRUE(hf([](json& j) {
                    j["rope_parameters"]["compress"].erase("attention_factor");
                    j["rope_parameters"]["compress"]["mscale"] = 0.707;
                    j["rope_parameters"]["compress"]["mscale_all_dim"] = 0.707;
                }).compress_rope.yarn.has_value());
    // A nested sub-dict without rope_theta takes the top-level rope_theta (transformers' standardize_rope_params).
    EXPECT_EQ(hf([](json& j) { j["rope_parameters"]["compress"].erase("rope_theta"); }).compress_rope.theta, 10000.0);
    // rope_scaling, when set, wins over rope_parameters (`rope_scaling or rope_parameters`).
    ModelConfig scaled = hf([](json& j) {
        j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 8.0}, {"original_max_position_embeddings", 128}};
    });
    ASSERT_TRUE(scaled.compress_rope.yarn.has_value());
    EXPECT_EQ(scaled.compress_rope.yarn->factor, 8.0);
    EXPECT_FALSE(scaled.main_rope.yarn.has_value());
}

TEST(ConfigJson, RejectsNonJsonAndNonObjects) {
    expect_error([] { parse_config_json("{\"vocab_size\": 5,", "bad.json"); }, {"bad.json", "not valid JSON"});
    expect_error([] { parse_config_json("[1, 2]", "bad.json"); }, {"bad.json", "JSON object"});
    expect_error([] { read_model_config("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}

}  // namespace
}  // namespace dsv4
