// The claim through the binary itself: on every transformers fixture, `dsv4 logits --numerics reference`
// (one chunk and the recorded mixed chunk schedule) is within 1e-4 x max|logit| of transformers, and
// `dsv4 generate --greedy --print-ids` prints transformers' greedy tokens.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "../model/golden_io.h"
#include "fixture_paths.h"

using namespace dsv4::testing;
namespace fs = std::filesystem;

namespace {

const std::string kBinary = std::string(DSV4_BINARY_DIR) + "/tools/dsv4/dsv4";

std::pair<int, std::string> run(const std::string& args) {
    std::string output;
    FILE* pipe = popen((kBinary + " " + args + " 2>&1").c_str(), "r");
    if (!pipe) return {-1, ""};
    std::array<char, 4096> buffer;
    while (fgets(buffer.data(), int(buffer.size()), pipe)) output += buffer.data();
    int status = pclose(pipe);
    return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string join(const std::vector<int64_t>& v, const char* sep) {
    std::ostringstream s;
    for (size_t i = 0; i < v.size(); ++i) s << (i ? sep : "") << v[i];
    return s.str();
}

}  // namespace

TEST(CliFixtures, LogitsAndGreedyMatchTransformers) {
    const fs::path tmp = fs::temp_directory_path() / ("dsv4_cli_fixtures_" + std::to_string(::getpid()));
    fs::create_directories(tmp);
    auto names = dsv4::test_fixtures::transformers_fixtures();
    ASSERT_GE(names.size(), 4u);
    for (const auto& name : names) {
        SCOPED_TRACE(name);
        const std::string dir = dsv4::test_fixtures::dir(name);
        Golden golden(dir + "/golden.safetensors");
        const std::vector<int64_t> ids = golden.ints("input_ids");
        const std::string ids_file = (tmp / (name + ".ids")).string();
        std::ofstream(ids_file) << join(ids, " ");
        const std::vector<float> ref = golden.floats("prefill_logits");

        for (const std::string& chunks : {std::string(), join(golden.ints("chunk_sizes"), ",")}) {
            const std::string out = (tmp / (name + ".safetensors")).string();
            auto [code, text] = run("logits -q --numerics reference -m " + dir + " --ids-file " + ids_file +
                                    (chunks.empty() ? "" : " --chunks " + chunks) + " --out " + out);
            ASSERT_EQ(code, 0) << text;
            std::vector<float> got = Golden(out).floats("logits");
            ASSERT_EQ(got.size(), ref.size());
            const size_t vocab = ref.size() / ids.size();
            double worst = 0;
            for (size_t r = 0; r < ids.size(); ++r)
                worst = std::max(worst, compare(got.data() + r * vocab, ref.data() + r * vocab, vocab).relative());
            EXPECT_LE(worst, 1e-4) << (chunks.empty() ? "one chunk" : "chunks " + chunks);
        }

        const size_t prompt_len = size_t(golden.ints("greedy_prompt_len").at(0));
        const std::string prompt_file = (tmp / (name + ".prompt")).string();
        std::ofstream(prompt_file) << join({ids.begin(), ids.begin() + long(prompt_len)}, " ");
        const std::vector<int64_t> greedy = golden.ints("greedy_tokens");
        auto [code, text] = run("generate -q --numerics reference -m " + dir + " --ids-file " + prompt_file +
                                " --greedy --print-ids -n " + std::to_string(greedy.size()));
        ASSERT_EQ(code, 0) << text;
        EXPECT_EQ(text, join(greedy, " ") + "\n");
    }
    fs::remove_all(tmp);
}
