// Replays completion_fuzz's, tokenizer_fuzz's and tokenizer_json_fuzz's committed corpora (tests/fuzz/corpus/)
// through their contracts (tests/fuzz/text_contracts.h) in the regular test run. The libFuzzer targets
// (tests/fuzz/, -DDSV4_FUZZ=ON) explore beyond these inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz/text_contracts.h"
#include "test_util.h"

namespace fs = std::filesystem;

namespace {

std::vector<std::pair<fs::path, std::string>> corpus(const std::string& name) {
    std::vector<std::pair<fs::path, std::string>> inputs;
    for (const auto& e : fs::directory_iterator(fs::path(DSV4_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / name)) {
        std::ifstream in(e.path(), std::ios::binary);
        inputs.emplace_back(e.path(),
                            std::string{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()});
    }
    return inputs;
}

}  // namespace

TEST(FuzzCorpus, CompletionsStreamAsTheyParseWhole) {
    const auto inputs = corpus("completion");
    ASSERT_FALSE(inputs.empty());
    for (const auto& [path, bytes] : inputs) EXPECT_EQ(dsv4::fuzz::completion_violation(bytes), "") << path;
}

TEST(FuzzCorpus, TokenizerRoundTripsItsInputs) {
    const auto inputs = corpus("tokenizer");
    ASSERT_FALSE(inputs.empty());
    for (const auto& [path, bytes] : inputs)
        EXPECT_EQ(dsv4::fuzz::tokenizer_violation(dsv4::tok::test::v4_tokenizer(), bytes), "") << path;
}

TEST(FuzzCorpus, TokenizerJsonLoadsOrIsRefused) {
    const auto inputs = corpus("tokenizer_json");
    ASSERT_FALSE(inputs.empty());
    for (const auto& [path, bytes] : inputs) EXPECT_EQ(dsv4::fuzz::tokenizer_json_violation(bytes), "") << path;
}
