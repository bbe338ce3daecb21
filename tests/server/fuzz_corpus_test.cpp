// Replays openai_request_fuzz's committed corpus (tests/fuzz/corpus/openai_request) through its contract
// (tests/fuzz/request_contract.h) in the regular test run: every body parses or is an ApiError, every parsed chat
// renders or is a dsv4::Error. The libFuzzer target (tests/fuzz/, -DDSV4_FUZZ=ON) explores beyond these inputs.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "fuzz/request_contract.h"

namespace fs = std::filesystem;

TEST(FuzzCorpus, RequestBodiesParseOrAreRefused) {
    const fs::path dir = fs::path(DSV4_SOURCE_DIR) / "tests" / "fuzz" / "corpus" / "openai_request";
    int inputs = 0;
    for (const auto& e : fs::directory_iterator(dir)) {
        std::ifstream in(e.path(), std::ios::binary);
        const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
        EXPECT_EQ(dsv4::fuzz::openai_request_violation(bytes), "") << e.path();
        ++inputs;
    }
    EXPECT_GT(inputs, 0);
}
