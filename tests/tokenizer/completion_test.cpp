// Completion parsing against every parsing vector of spec/dsv4-encoding.md §5.3, whole and streamed (one byte
// per chunk, and every split into two chunks); robustness on malformed and random text: never throws, never
// loses text, streamed deltas always a prefix of the final fields.
#include <gtest/gtest.h>

#include <random>

#include "test_util.h"
#include "tokenizer/completion.h"

namespace dsv4::tok {
namespace {

ThinkingMode mode_of(const ordered_json& v) {
    return v.at("thinking_mode") == "thinking" ? ThinkingMode::kThinking : ThinkingMode::kChat;
}

void expect_same(const ParsedCompletion& a, const ParsedCompletion& b, const std::string& what) {
    EXPECT_EQ(a.to_message().dump(), b.to_message().dump()) << what;
    EXPECT_EQ(a.ok(), b.ok()) << what;
    if (!a.ok() && !b.ok()) {
        EXPECT_EQ(a.error->message, b.error->message) << what;
    }
}

// Streams `text` in the given chunks; checks every delta is whole UTF-8 and the deltas add up.
ParsedCompletion stream(std::string_view text, ThinkingMode mode, const std::vector<size_t>& cuts) {
    CompletionStream s(mode);
    std::string reasoning, content;
    size_t prev = 0;
    for (size_t cut : cuts) {
        const auto d = s.feed(text.substr(prev, cut - prev));
        EXPECT_TRUE(is_valid_utf8(d.reasoning_content) && is_valid_utf8(d.content)) << "partial character emitted";
        reasoning += d.reasoning_content;
        content += d.content;
        prev = cut;
    }
    CompletionStream::Delta last;
    const ParsedCompletion r = s.finish(&last);
    EXPECT_EQ(reasoning + last.reasoning_content, r.reasoning_content);
    EXPECT_EQ(content + last.content, r.content);
    return r;
}

// Nothing of the text is lost: it is reasoning + [</think>] + content + [EOS] (lenient errors), or the
// fields are the strict split.
void expect_no_text_lost(std::string_view text, const ParsedCompletion& r, ThinkingMode mode) {
    if (r.ok() || r.error->message.starts_with("Unexpected special token")) return;
    EXPECT_TRUE(r.tool_calls.empty());
    std::string joined = r.reasoning_content;
    if (mode == ThinkingMode::kThinking && text.find(kThinkEnd) != std::string_view::npos) joined += kThinkEnd;
    joined += r.content;
    if (joined != text) joined += kEosToken;
    EXPECT_EQ(joined, text);
}

TEST(Completion, EverySpecParsingVector) {
    const auto vectors = ordered_json::parse(test::read_file(test::data_path("encoding_vectors.json"))).at("parsing");
    ASSERT_GE(vectors.size(), 29u);
    size_t ok = 0, errors = 0;
    for (const ordered_json& v : vectors) {
        const std::string name = v.at("name").get<std::string>();
        const std::string text = v.at("completion_text").get<std::string>();
        const ThinkingMode mode = mode_of(v);
        const ParsedCompletion r = parse_completion(text, mode);
        const ordered_json& want = v.at("expected");
        if (want.contains("error")) {
            ASSERT_FALSE(r.ok()) << name;
            EXPECT_EQ(r.error->type, want.at("error").at("type").get<std::string>()) << name;
            EXPECT_EQ(r.error->message, want.at("error").at("message").get<std::string>()) << name;
            expect_no_text_lost(text, r, mode);
            ++errors;
        } else {
            EXPECT_TRUE(r.ok()) << name << ": " << (r.ok() ? "" : r.error->message);
            EXPECT_EQ(r.to_message().dump(), want.dump()) << name;
            ++ok;
        }
        std::vector<size_t> bytes;
        for (size_t i = 1; i <= text.size(); ++i) bytes.push_back(i);
        expect_same(stream(text, mode, bytes), r, name + " (byte by byte)");
        for (size_t cut = 0; cut <= text.size(); ++cut)
            expect_same(stream(text, mode, {cut, text.size()}), r, name + " (split at " + std::to_string(cut) + ")");
    }
    std::printf("spec parsing vectors: %zu parsed exactly, %zu errors reported; each streamed at every byte boundary\n",
                ok, errors);
}

TEST(Completion, TruncatedOrMalformedKeepsText) {
    const ParsedCompletion a = parse_completion("still thinking about it", ThinkingMode::kThinking);
    EXPECT_FALSE(a.ok());
    EXPECT_EQ(a.reasoning_content, "still thinking about it");
    const ParsedCompletion b = parse_completion("r</think>half an answ", ThinkingMode::kThinking);
    EXPECT_EQ(b.error->message, "Invalid format: missing EOS token");
    EXPECT_EQ(b.reasoning_content, "r");
    EXPECT_EQ(b.content, "half an answ");
    const std::string dsml = "r</think>Calling.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜par";
    const ParsedCompletion c = parse_completion(dsml + std::string(kEosToken), ThinkingMode::kThinking);
    EXPECT_FALSE(c.ok());
    EXPECT_EQ(c.content, dsml.substr(9));
    EXPECT_TRUE(c.tool_calls.empty());
}

TEST(Completion, RandomTextNeverThrowsAndStreamsConsistently) {
    const std::vector<std::string> pieces = {"a", " ", "\n", "\n\n", "é", "東", "😀", "</think>", "<think>",
                                             std::string(kEosToken), "<｜DSML｜tool_calls>", "\n\n<｜DSML｜tool_calls",
                                             ">\n", "<｜DSML｜invoke name=\"f\">\n", "</｜DSML｜invoke>\n",
                                             "<｜DSML｜parameter name=\"x\" string=\"true\">", "</｜DSML｜parameter>\n",
                                             "</｜DSML｜tool_calls>", "<", "｜", "\""};
    std::mt19937 rng(7);
    for (int trial = 0; trial < 3000; ++trial) {
        std::string text;
        const int n = 1 + rng() % 12;
        for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
        const ThinkingMode mode = trial % 2 ? ThinkingMode::kThinking : ThinkingMode::kChat;
        const ParsedCompletion whole = parse_completion(text, mode);
        expect_no_text_lost(text, whole, mode);
        std::vector<size_t> cuts;
        for (size_t p = 0; p < text.size();) {
            p = std::min(text.size(), p + 1 + rng() % 5);
            cuts.push_back(p);
        }
        expect_same(stream(text, mode, cuts), whole, "random text " + std::to_string(trial));
    }
}

TEST(Completion, StreamEmitsReasoningAndContentAsTheyBecomeFinal) {
    CompletionStream s(ThinkingMode::kThinking);
    EXPECT_EQ(s.feed("Let me think</th").reasoning_content, "Let me think");
    const auto d = s.feed("ink>The answer is 4.<｜end▁of");
    EXPECT_EQ(d.reasoning_content, "");
    EXPECT_EQ(d.content, "The answer is 4.");
    EXPECT_EQ(s.feed("▁sentence｜>").content, "");
    const ParsedCompletion r = s.finish();
    EXPECT_TRUE(r.ok());
    EXPECT_EQ(r.content, "The answer is 4.");
    CompletionStream t(ThinkingMode::kChat);
    EXPECT_EQ(t.feed("ok\n\n").content, "ok");
    EXPECT_EQ(t.feed("<｜DSML｜tool_calls>\n").content, "");
    EXPECT_TRUE(t.in_tool_calls());
}

}  // namespace
}  // namespace dsv4::tok
