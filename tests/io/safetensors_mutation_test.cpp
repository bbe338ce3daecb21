// Seeded random mutation of valid safetensors images and config.json texts: byte flips, truncations, length-field
// edits, JSON token edits. Every outcome must be success or dsv4::Error; a success must satisfy the reader's
// invariants. Images live in exactly-sized heap buffers so an out-of-range read trips ASan (-DDSV4_SANITIZE=ON).
// Deterministic: mutation i uses seed i. The coverage-guided counterpart is tests/fuzz/safetensors_fuzz.cpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <random>

#include "io/config_json.h"
#include "io/safetensors.h"
#include "io_test_util.h"

namespace dsv4 {
namespace {

using Rng = std::mt19937_64;

std::string base_image() {
    std::vector<uint16_t> bf(24, 0x3F80);
    std::vector<uint8_t> fp8(64, 0x38), e8m0(4, 127);
    std::vector<int64_t> ids = {0, 1, 2, 3, 1, 0};
    std::vector<float> f = {1, 2, 3};
    return serialize_safetensors({{"layers.0.attn.wq_a.weight", DType::kF8E4M3, {8, 8}, fp8.data(), fp8.size()},
                                  {"layers.0.attn.wq_a.scale", DType::kF8E8M0, {1, 4}, e8m0.data(), e8m0.size()},
                                  {"norm.weight", DType::kBF16, {4, 6}, bf.data(), bf.size() * 2},
                                  {"layers.0.ffn.gate.tid2eid", DType::kI64, {3, 2}, ids.data(), ids.size() * 8},
                                  {"hc_head_scale", DType::kF32, {3}, f.data(), f.size() * 4},
                                  {"empty", DType::kF32, {0}, nullptr, 0}},
                                 {{"format", "pt"}});
}

uint64_t header_len(const std::string& image) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(image[size_t(i)]);
    return n;
}

std::string with_header(const std::string& header, const std::string& data) {
    return test::raw_safetensors(header, data);
}

std::string random_number(Rng& rng) {
    static const char* const kNumbers[] = {"-1",
                                           "0",
                                           "1",
                                           "7",
                                           "8",
                                           "4294967296",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "18446744073709551615",
                                           "18446744073709551616",
                                           "1e400",
                                           "2.5",
                                           "-0",
                                           "1e3",
                                           "99999999999999999999999"};
    if (rng() % 2) return kNumbers[rng() % std::size(kNumbers)];
    return std::to_string(int64_t(rng() % 200) - 20);
}

// One mutation of a JSON text: replace a number, a string, delete or duplicate a span, insert a structural char.
std::string mutate_json(std::string s, Rng& rng) {
    static const char* const kStrings[] = {
        "\"F32\"",   "\"BF16\"",  "\"I64\"",          "\"F8_E4M3\"", "\"F4\"", "\"\"", "\"__metadata__\"",
        "\"dtype\"", "\"shape\"", "\"data_offsets\"", "null",        "true",   "[]",   "{}",
        "[0,8]",     "[[1]]",     "\"yarn\"",         "\"moe\""};
    static const char kStructural[] = "{}[],:\"-.0e \\";
    if (s.empty()) return s;
    size_t pos = rng() % s.size();
    switch (rng() % 6) {
        case 0: {  // replace the number under/after pos
            size_t b = s.find_first_of("-0123456789", pos);
            if (b == std::string::npos) break;
            size_t e = s.find_first_not_of("-+.eE0123456789", b);
            s.replace(b, (e == std::string::npos ? s.size() : e) - b, random_number(rng));
            break;
        }
        case 1: {  // replace the string under/after pos
            size_t b = s.find('"', pos);
            if (b == std::string::npos) break;
            size_t e = s.find('"', b + 1);
            if (e == std::string::npos) break;
            s.replace(b, e - b + 1, kStrings[rng() % std::size(kStrings)]);
            break;
        }
        case 2:
            s.erase(pos, 1 + rng() % 8);
            break;
        case 3:
            s.insert(pos, 1, kStructural[rng() % (sizeof(kStructural) - 1)]);
            break;
        case 4:
            s.insert(pos, s.substr(rng() % s.size(), 1 + rng() % 16));
            break;
        default:
            s[pos] = char(rng() % 256);
            break;
    }
    return s;
}

// One mutation of a whole image.
std::string mutate_image(const std::string& image, Rng& rng) {
    std::string s = image;
    const uint64_t hlen = header_len(image);
    const std::string header = image.substr(8, hlen), data = image.substr(8 + hlen);
    switch (rng() % 5) {
        case 0:  // flip 1-4 random bytes anywhere
            for (int k = 1 + int(rng() % 4); k > 0; --k) s[rng() % s.size()] ^= char(1 + rng() % 255);
            return s;
        case 1:  // truncate
            return s.substr(0, rng() % s.size());
        case 2: {  // edit the length field: near the truth, zero, or random
            uint64_t n =
                rng() % 3 == 0 ? rng() : (rng() % 2 ? hlen + rng() % 16 : hlen - std::min<uint64_t>(hlen, rng() % 16));
            if (rng() % 7 == 0) n = 0;
            for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xFF);
            return s;
        }
        case 3: {  // 1-3 JSON edits, length field fixed up so parsing reaches the JSON
            std::string h = header;
            for (int k = 1 + int(rng() % 3); k > 0; --k) h = mutate_json(h, rng);
            return with_header(h, rng() % 8 ? data : data.substr(0, rng() % (data.size() + 1)));
        }
        default:  // append or drop data bytes
            return rng() % 2 ? s + std::string(1 + rng() % 64, char(rng() % 256)) : s.substr(0, s.size() - rng() % 9);
    }
}

// Parses `image` from an exactly-sized buffer; returns true on success (after checking the result's invariants).
bool parse_checked(const std::string& image) {
    std::unique_ptr<std::byte[]> buf(new std::byte[image.size() + (image.empty() ? 1 : 0)]);
    std::memcpy(buf.get(), image.data(), image.size());
    try {
        SafetensorsHeader h = parse_safetensors(buf.get(), image.size(), "mutant");
        const std::byte* end = buf.get() + image.size();
        std::vector<std::pair<const std::byte*, const std::byte*>> spans;
        for (const auto& t : h.tensors) {
            EXPECT_GE(t.data, buf.get() + h.data_begin) << t.name;
            EXPECT_LE(t.data + t.nbytes, end) << t.name;
            EXPECT_EQ(uint64_t(t.numel()) * dtype_size(t.dtype), t.nbytes) << t.name;
            if (t.nbytes) spans.emplace_back(t.data, t.data + t.nbytes);
            // Touch every byte: under ASan this proves the view lies inside the buffer.
            uint8_t acc = 0;
            for (size_t i = 0; i < t.nbytes; ++i) acc ^= std::to_integer<uint8_t>(t.data[i]);
            volatile uint8_t sink = acc;
            (void)sink;
        }
        std::sort(spans.begin(), spans.end());
        for (size_t i = 1; i < spans.size(); ++i) EXPECT_LE(spans[i - 1].second, spans[i].first);
        return true;
    } catch (const Error&) {
        return false;
    }
}

TEST(SafetensorsMutation, EveryMutantParsesOrFailsCleanly) {
    const std::string image = base_image();
    ASSERT_TRUE(parse_checked(image));
    int ok = 0, rejected = 0;
    for (uint64_t seed = 0; seed < 6000; ++seed) {
        Rng rng(seed);
        std::string mutant = mutate_image(image, rng);
        // A non-dsv4 exception escaping here fails the test with the seed in the gtest output.
        SCOPED_TRACE("seed " + std::to_string(seed));
        (parse_checked(mutant) ? ok : rejected)++;
    }
    // Both outcomes must occur, or the mutator is not exercising the reader.
    EXPECT_GT(ok, 50);
    EXPECT_GT(rejected, 3000);
}

TEST(SafetensorsMutation, HeaderOnlyMutantsParseOrFailCleanly) {
    // Headers alone (data region kept), many JSON edits each: probes the entry validation paths hardest.
    const std::string image = base_image();
    const uint64_t hlen = header_len(image);
    const std::string header = image.substr(8, hlen), data = image.substr(8 + hlen);
    int ok = 0;
    for (uint64_t seed = 0; seed < 3000; ++seed) {
        Rng rng(1'000'000 + seed);
        std::string h = header;
        for (int k = 1 + int(rng() % 6); k > 0; --k) h = mutate_json(h, rng);
        SCOPED_TRACE("seed " + std::to_string(1'000'000 + seed));
        ok += parse_checked(with_header(h, data));
    }
    EXPECT_GT(ok, 0);
}

TEST(SafetensorsMutation, FileReaderAgreesWithMemoryParser) {
    test::TempDir dir;
    const std::string image = base_image();
    for (uint64_t seed = 0; seed < 200; ++seed) {
        Rng rng(2'000'000 + seed);
        std::string mutant = mutate_image(image, rng);
        bool mem_ok = parse_checked(mutant);
        std::string path = dir.write("m.safetensors", mutant);
        bool file_ok = true;
        try {
            SafetensorsFile::open(path);
        } catch (const Error&) {
            file_ok = false;
        }
        EXPECT_EQ(mem_ok, file_ok) << "seed " << 2'000'000 + seed;
    }
}

const char* const kConfig = R"({
 "model_type": "deepseek_v4", "vocab_size": 512, "hidden_size": 256, "num_hidden_layers": 4,
 "num_attention_heads": 4, "num_key_value_heads": 1, "head_dim": 128, "qk_rope_head_dim": 64, "q_lora_rank": 128,
 "o_groups": 2, "o_lora_rank": 64, "sliding_window": 32, "compress_ratios": [0, 4, 128, 0, 0],
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
                         "activation_scheme": "dynamic"}
})";

TEST(ConfigMutation, EveryMutantParsesOrFailsCleanly) {
    ASSERT_NO_THROW(parse_config_json(kConfig, "config.json"));
    int ok = 0;
    for (uint64_t seed = 0; seed < 3000; ++seed) {
        Rng rng(3'000'000 + seed);
        std::string text = kConfig;
        for (int k = 1 + int(rng() % 3); k > 0; --k) text = mutate_json(text, rng);
        SCOPED_TRACE("seed " + std::to_string(3'000'000 + seed));
        try {
            ModelConfig c = parse_config_json(text, "config.json").config;
            ++ok;
            // Whatever got through must be internally consistent.
            EXPECT_EQ(int64_t(c.compress_ratios.size()), c.num_layers);
            EXPECT_EQ(int64_t(c.mlp_types.size()), c.num_layers);
            EXPECT_EQ(int64_t(c.mtp_compress_ratios.size()), c.num_mtp_layers);
            EXPECT_GT(c.head_dim, c.rope_head_dim);
            EXPECT_EQ(c.rope_head_dim % 2, 0);
            EXPECT_LE(c.num_experts_per_tok, c.n_routed_experts);
        } catch (const Error&) {
        }
    }
    EXPECT_GT(ok, 100);
}

}  // namespace
}  // namespace dsv4
