// Replays the fuzzers' committed corpora (tests/fuzz/corpus/) through the readers in the regular test run: every
// input either parses, with each tensor view inside the input, or is rejected with dsv4::Error, never a crash.
// The libFuzzer targets themselves (tests/fuzz/, -DDSV4_FUZZ=ON) grow these corpora.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/checkpoint_contract.h"
#include "io/config_json.h"
#include "io/safetensors.h"

namespace fs = std::filesystem;

namespace {

std::vector<fs::path> corpus(const std::string& name) {
    std::vector<fs::path> files;
    fs::path dir = fs::path(DSV4_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / name;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.is_regular_file()) files.push_back(e.path());
    return files;
}

std::string read_bytes(const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(FuzzCorpus, SafetensorsInputsParseOrFailCleanly) {
    auto files = corpus("safetensors");
    ASSERT_FALSE(files.empty());
    int parsed = 0, rejected = 0;
    for (const auto& f : files) {
        std::string bytes = read_bytes(f);
        // An exactly-sized heap copy, so a sanitizer build flags any read past the end.
        std::vector<std::byte> data(bytes.size());
        std::memcpy(data.data(), bytes.data(), bytes.size());
        try {
            dsv4::SafetensorsHeader h = dsv4::parse_safetensors(data.data(), data.size(), f.filename().string());
            for (const auto& t : h.tensors) {
                ASSERT_GE(t.data, data.data()) << f;
                ASSERT_LE(t.data + t.nbytes, data.data() + data.size()) << f;
            }
            ++parsed;
        } catch (const dsv4::Error& e) {
            EXPECT_NE(std::string(e.what()).find(f.filename().string()), std::string::npos) << e.what();
            ++rejected;
        }
    }
    std::printf("safetensors corpus: %d parsed, %d rejected\n", parsed, rejected);
}

TEST(FuzzCorpus, ConfigInputsParseOrFailCleanly) {
    auto files = corpus("config_json");
    ASSERT_FALSE(files.empty());
    int parsed = 0, rejected = 0;
    for (const auto& f : files) {
        try {
            dsv4::ModelConfig c = dsv4::parse_model_config(read_bytes(f), f.filename().string());
            EXPECT_EQ(c.compress_ratios.size(), size_t(c.num_layers)) << f;
            EXPECT_EQ(c.mlp_types.size(), size_t(c.num_layers)) << f;
            EXPECT_LT(c.rope_head_dim, c.head_dim) << f;
            ++parsed;
        } catch (const dsv4::Error&) {
            ++rejected;
        }
    }
    std::printf("config corpus: %d parsed, %d rejected\n", parsed, rejected);
}

// checkpoint_fuzz's corpus: a shard header each, in a copy of the NVFP4 fixture; it opens and loads or is an Error.
TEST(FuzzCorpus, ShardHeadersLoadOrFailCleanly) {
    const auto files = corpus("checkpoint");
    ASSERT_FALSE(files.empty());
    const dsv4::fuzz::ShardHeaderCheck check(fs::temp_directory_path() / "dsv4_checkpoint_corpus_test");
    for (const auto& f : files) EXPECT_EQ(check.violation(read_bytes(f)), "") << f;
    fs::remove_all(check.dir());
}
