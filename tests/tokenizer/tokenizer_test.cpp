// The tokenizer on DeepSeek-V4's tokenizer.json: the special tokens and ids of spec dsv4-model.md §13.1, the
// spec's tokenization vector, raw (invalid UTF-8) bytes, streaming decode, bad ids and bad files.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/bpe.h"

namespace dsv4::tok {
namespace {

TEST(Tokenizer, SpecialTokensOfSpec13_1) {
    const Tokenizer& tok = test::v4_tokenizer();
    const std::pair<const char*, int32_t> specials[] = {
        {"<｜begin▁of▁sentence｜>", 0}, {"<｜end▁of▁sentence｜>", 1}, {"<｜▁pad▁｜>", 2},
        {"<｜User｜>", 128803},          {"<｜Assistant｜>", 128804},     {"<think>", 128821},
        {"</think>", 128822},            {"｜DSML｜", 128825},           {"<｜latest_reminder｜>", 128828},
        {"<｜action｜>", 128829},        {"<｜query｜>", 128830},        {"<｜authority｜>", 128831},
        {"<｜domain｜>", 128832},        {"<｜title｜>", 128836},        {"<｜read_url｜>", 128845}};
    for (const auto& [text, id] : specials) {
        EXPECT_EQ(tok.added_token_id(text), id) << text;
        EXPECT_EQ(tok.encode(text), std::vector<int32_t>{id}) << text;
        EXPECT_EQ(tok.decode(std::vector<int32_t>{id}), text);
    }
    EXPECT_EQ(tok.vocab_size(), 129280);
    EXPECT_TRUE(tok.is_special(1));
    EXPECT_FALSE(tok.is_special(128803));  // <｜User｜> is an added, non-special token in this file
}

TEST(Tokenizer, SpecTestVector) {
    const Tokenizer& tok = test::v4_tokenizer();
    const std::string text = "<｜User｜>你好<｜Assistant｜><think>推理</think>答案<｜end▁of▁sentence｜>";
    const std::vector<int32_t> want = {128803, 30594, 128804, 128821, 36101, 128822, 7624, 1};
    EXPECT_EQ(tok.encode(text), want);
    EXPECT_EQ(tok.decode(want), text);
    EXPECT_EQ(tok.decode(want, /*skip_special_tokens=*/true), "<｜User｜>你好<｜Assistant｜><think>推理</think>答案");
}

TEST(Tokenizer, DsmlMarkerSplitsOutOfTags) {
    const Tokenizer& tok = test::v4_tokenizer();
    const auto ids = tok.encode("<｜DSML｜invoke name=\"f\">");
    ASSERT_GE(ids.size(), 3u);
    EXPECT_EQ(ids[1], 128825);
    EXPECT_EQ(tok.decode(ids), "<｜DSML｜invoke name=\"f\">");
}

TEST(Tokenizer, RawBytesRoundTripExactly) {
    const Tokenizer& tok = test::v4_tokenizer();
    std::mt19937 rng(1234);
    for (int trial = 0; trial < 300; ++trial) {
        std::string bytes(1 + rng() % 300, '\0');
        for (char& c : bytes) c = static_cast<char>(trial % 3 == 0 ? 0x80 + rng() % 0x80 : rng() % 256);
        const auto ids = tok.encode(bytes);
        std::string joined;
        for (int32_t id : ids) joined += tok.token_bytes(id);
        ASSERT_EQ(joined, bytes) << "trial " << trial;
        const std::string text = tok.decode(ids);
        EXPECT_EQ(text, utf8_lossy(bytes));
        EXPECT_TRUE(is_valid_utf8(text));
    }
}

TEST(Tokenizer, IncrementalDecoderNeverSplitsCharacters) {
    const Tokenizer& tok = test::v4_tokenizer();
    // Emoji and CJK split over byte-level tokens, then an invalid byte sequence produced "by the model".
    const std::string text = "家族👨‍👩‍👧 ok 🫠 東京";
    auto ids = tok.encode(text);
    ids.push_back(tok.encode("\xE6")[0]);  // a lone lead byte: U+FFFD at the end
    IncrementalDecoder dec(tok);
    std::string out;
    for (int32_t id : ids) {
        const std::string piece = dec.push(id);
        EXPECT_TRUE(is_valid_utf8(piece)) << "partial character emitted";
        out += piece;
    }
    out += dec.finish();
    EXPECT_EQ(out, text + "\xEF\xBF\xBD");
    EXPECT_EQ(out, tok.decode(ids));
}

TEST(Tokenizer, BadIdsAndFilesAreErrors) {
    const Tokenizer& tok = test::v4_tokenizer();
    EXPECT_THROW(tok.decode(std::vector<int32_t>{129280}), Error);
    EXPECT_THROW(tok.decode(std::vector<int32_t>{-1}), Error);
    EXPECT_THROW(Tokenizer::from_file("/nonexistent/tokenizer.json"), Error);
    const auto dir = std::filesystem::temp_directory_path() / "dsv4_tok_bad";
    std::filesystem::create_directories(dir);
    const auto bad = dir / "tokenizer.json";
    std::FILE* f = std::fopen(bad.c_str(), "w");
    std::fputs("{\"model\": {\"type\": \"BPE\"", f);
    std::fclose(f);
    EXPECT_THROW(Tokenizer::from_file(bad), Error);
    nlohmann::json j = {{"pre_tokenizer", {{"type", "Whitespace"}}}, {"decoder", {{"type", "ByteLevel"}}}};
    try {
        Tokenizer::from_json(j);
        ADD_FAILURE() << "unsupported pre-tokenizer accepted";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("pre_tokenizer"), std::string::npos) << e.what();
    }
}

// Token ids are integers in 0 .. kMaxTokenId, in the vocabulary and in added_tokens: a fraction, a string or a number
// out of range is a clear error, never a conversion (undefined for a double out of int range: found by
// tokenizer_json_fuzz) or a table sized by an id in the billions.
TEST(Tokenizer, IdsMustBeSmallIntegers) {
    const auto fixture =
        std::filesystem::path(DSV4_SOURCE_DIR) / "tests/fixtures/official-trained-bytes/tokenizer.json";
    std::FILE* f = std::fopen(fixture.c_str(), "rb");
    ASSERT_NE(f, nullptr);
    std::string text;
    for (int c; (c = std::fgetc(f)) != EOF;) text += char(c);
    std::fclose(f);
    const nlohmann::json good = nlohmann::json::parse(text);
    EXPECT_NO_THROW(Tokenizer::from_json(good));
    const std::string vocab_token = good.at("model").at("vocab").begin().key();
    for (const nlohmann::json& id :
         {nlohmann::json(1.5), nlohmann::json(5.4e21), nlohmann::json("7"), nlohmann::json(-1),
          nlohmann::json(int64_t(1) << 31), nlohmann::json(uint64_t(kMaxTokenId) + 1), nlohmann::json(nullptr)}) {
        nlohmann::json in_vocab = good, added = good;
        in_vocab["model"]["vocab"][vocab_token] = id;
        added["added_tokens"][0]["id"] = id;
        for (const nlohmann::json* j : {&in_vocab, &added}) {
            try {
                Tokenizer::from_json(*j);
                ADD_FAILURE() << "id " << id.dump() << " accepted";
            } catch (const Error& e) {
                EXPECT_NE(std::string(e.what()).find(id.dump()), std::string::npos) << e.what();
            }
        }
    }
}

TEST(TokenizerPath, ModelDirFirstThenInstalled) {
    const auto dir = std::filesystem::temp_directory_path() / "dsv4_tok_path";
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto installed = installed_tokenizer_json();
    ASSERT_TRUE(installed) << "run scripts/setup.sh";
    EXPECT_EQ(find_tokenizer_json(dir), *installed);
    std::FILE* f = std::fopen((dir / "tokenizer.json").c_str(), "w");
    std::fclose(f);
    EXPECT_EQ(find_tokenizer_json(dir), dir / "tokenizer.json");
    EXPECT_THROW(find_tokenizer_json(dir / "missing"), Error);
}

}  // namespace
}  // namespace dsv4::tok
