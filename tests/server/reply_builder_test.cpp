// ReplyBuilder (src/server/reply_builder.h) on the trained fixture's byte-level tokenizer: texts are encoded,
// their ids pushed one at a time as the engine would, and the deltas and the final reply checked: the deltas
// concatenate to the final fields; no delta ends inside a UTF-8 character; a stop string ends the reply before it
// however it is split over tokens; chat replies split into reasoning, content and DSML tool calls with no markup in
// content; EOS ends the reply unless it is an ordinary token (ignore_eos); one logprob entry per token.
#include <gtest/gtest.h>

#include "fixture_paths.h"
#include "server/reply_builder.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {
namespace {

const tok::Tokenizer& tokenizer() {
    static const tok::Tokenizer t =
        tok::Tokenizer::from_file(test_fixtures::dir("official-trained-bytes") + "/tokenizer.json");
    return t;
}

constexpr int32_t kEos = 1;  // the fixture's <｜end▁of▁sentence｜>

struct Reply {
    std::string reasoning, content;  // the deltas, concatenated
    std::vector<ReplyBuilder::Delta> deltas;
    ReplyBuilder::Final final;
};

bool valid_utf8(const std::string& s) {
    size_t i = 0;
    while (i < s.size()) {
        const unsigned char c = s[i];
        const size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
        if (n == 0 || i + n > s.size()) return false;
        for (size_t k = 1; k < n; ++k)
            if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
        i += n;
    }
    return true;
}

// A request's options with these stop strings and logprobs.
GenerationOptions options(std::vector<std::string> stop = {}, bool logprobs = false) {
    GenerationOptions o;
    o.stop = std::move(stop);
    o.logprobs = logprobs;
    return o;
}

// Pushes the ids of `text` (then EOS when `eos`) and finishes with `reason`.
Reply run(ReplyBuilder& b, const std::string& text, bool eos, FinishReason reason) {
    Reply r;
    std::vector<int32_t> ids = tokenizer().encode(text);
    if (eos) ids.push_back(kEos);
    for (int32_t id : ids) {
        SampledToken t;
        t.id = id;
        t.logprob = -0.5f;
        ReplyBuilder::Delta d = b.push(t);
        EXPECT_TRUE(valid_utf8(d.content) && valid_utf8(d.reasoning_content)) << "a delta splits a character";
        r.reasoning += d.reasoning_content;
        r.content += d.content;
        r.deltas.push_back(std::move(d));
    }
    r.final = b.finish(reason);
    r.reasoning += r.final.last.reasoning_content;
    r.content += r.final.last.content;
    return r;
}

TEST(ReplyBuilder, CompletionTextStreamsWholeCharactersAndEqualsTheDecodedIds) {
    const std::string text = "Licensed 東京 😀 café, under the Apache License.";
    ReplyBuilder b(tokenizer(), kEos, false, tok::ThinkingMode::kChat, options({}, true));
    const Reply r = run(b, text, false, FinishReason::kLength);
    EXPECT_EQ(r.content, text);
    EXPECT_EQ(r.final.parsed.content, text);
    EXPECT_EQ(r.final.finish_reason, "length");
    EXPECT_EQ(r.final.logprobs.size(), tokenizer().encode(text).size());
    EXPECT_EQ(b.tokens(), int64_t(tokenizer().encode(text).size()));
}

TEST(ReplyBuilder, StopStringEndsTheReplyWhereverTheTokensSplitIt) {
    for (const std::string stop : {"License", "é, under", "."}) {
        ReplyBuilder b(tokenizer(), kEos, false, tok::ThinkingMode::kChat, options({"never", stop}));
        const std::string text = "Licensed 東京 café, under the Apache License. More.";
        const Reply r = run(b, text, false, FinishReason::kLength);
        ASSERT_NE(text.find(stop), std::string::npos);
        const std::string want = text.substr(0, text.find(stop));
        EXPECT_EQ(r.content, want) << "stop " << stop;
        EXPECT_EQ(r.final.parsed.content, want);
        EXPECT_TRUE(b.stopped()) << "stop " << stop;
        EXPECT_EQ(r.final.finish_reason, "stop");
    }
}

TEST(ReplyBuilder, EosEndsTheReplyUnlessItIsAnOrdinaryToken) {
    ReplyBuilder b(tokenizer(), kEos, false, tok::ThinkingMode::kChat, options());
    const Reply r = run(b, "done", true, FinishReason::kEos);
    EXPECT_EQ(r.content, "done");
    EXPECT_EQ(r.final.finish_reason, "stop");
    SampledToken late;
    late.id = tokenizer().encode("x")[0];
    EXPECT_TRUE(b.push(late).empty()) << "tokens after EOS are not text";

    ReplyBuilder ignoring(tokenizer(), -1, false, tok::ThinkingMode::kChat, options());  // ignore_eos
    const Reply r2 = run(ignoring, "done", true, FinishReason::kLength);
    EXPECT_EQ(r2.content, "done" + tokenizer().token_bytes(kEos));
    EXPECT_EQ(r2.final.finish_reason, "length");
}

// vLLM's stop_token_ids end the reply as EOS does (the id's text is not in it; a chat reply parses as one that ended
// with EOS), and min_tokens counts stop strings only from its token on.
TEST(ReplyBuilder, StopIdsEndTheReplyAndMinTokensHoldsStopStringsBack) {
    const std::string text = "ab. cd. ef";
    ASSERT_EQ(tokenizer().encode(text).size(), text.size()) << "the fixture's tokens are bytes here";
    GenerationOptions o = options();
    o.stop_token_ids = {tokenizer().encode(".")[0]};
    ReplyBuilder plain(tokenizer(), kEos, false, tok::ThinkingMode::kChat, o);
    const Reply r = run(plain, text, false, FinishReason::kEos);
    EXPECT_EQ(r.content, "ab");
    EXPECT_EQ(r.final.finish_reason, "stop");
    ReplyBuilder chat(tokenizer(), kEos, true, tok::ThinkingMode::kThinking, o);
    const Reply c = run(chat, "Hm</think>ab. cd", false, FinishReason::kEos);
    EXPECT_EQ(c.reasoning, "Hm");
    EXPECT_EQ(c.content, "ab");
    EXPECT_TRUE(c.final.parsed.ok()) << c.final.parsed.error->message;

    for (const auto& [min_tokens, want] :
         {std::pair<int64_t, std::string>{0, "ab"}, {3, "ab"}, {4, "ab. cd"}, {7, "ab. cd"}, {8, "ab. cd. ef"}}) {
        GenerationOptions m = options({"."});
        m.min_tokens = min_tokens;  // the first "." is the 3rd token, the second the 7th
        ReplyBuilder b(tokenizer(), kEos, false, tok::ThinkingMode::kChat, m);
        EXPECT_EQ(run(b, text, false, FinishReason::kLength).content, want) << "min_tokens " << min_tokens;
    }
}

// vLLM's include_stop_str_in_output: the stop string that ended the reply (wherever the tokens split it) or the stop
// id's text stays in it; EOS's never does.
TEST(ReplyBuilder, IncludedStopStringsAndStopIdsStayInTheReply) {
    const std::string text = "Licensed 東京 café, under the Apache License. More.";
    for (const std::string stop : {"License", "é, under", "."}) {
        GenerationOptions o = options({"never", stop});
        o.include_stop_str = true;
        ReplyBuilder b(tokenizer(), kEos, false, tok::ThinkingMode::kChat, o);
        const Reply r = run(b, text, false, FinishReason::kLength);
        const std::string want = text.substr(0, text.find(stop) + stop.size());
        EXPECT_EQ(r.content, want) << "stop " << stop;
        EXPECT_EQ(r.final.parsed.content, want);
        EXPECT_EQ(r.final.finish_reason, "stop");
        EXPECT_EQ(r.final.stop_sequence, stop);
    }
    GenerationOptions o = options();
    o.stop_token_ids = {tokenizer().encode(".")[0]};
    o.include_stop_str = true;
    ReplyBuilder ids(tokenizer(), kEos, false, tok::ThinkingMode::kChat, o);
    EXPECT_EQ(run(ids, "ab. cd", false, FinishReason::kEos).content, "ab.");
    ReplyBuilder eos(tokenizer(), kEos, false, tok::ThinkingMode::kChat, o);
    EXPECT_EQ(run(eos, "ab", true, FinishReason::kEos).content, "ab");
}

TEST(ReplyBuilder, ChatSplitsReasoningContentAndToolCallsWithoutMarkup) {
    {
        ReplyBuilder b(tokenizer(), kEos, true, tok::ThinkingMode::kThinking, options());
        const Reply r = run(b, "Let me think.</think>The answer is 4.", true, FinishReason::kEos);
        EXPECT_EQ(r.reasoning, "Let me think.");
        EXPECT_EQ(r.content, "The answer is 4.");
        EXPECT_EQ(r.final.parsed.reasoning_content, r.reasoning);
        EXPECT_EQ(r.final.parsed.content, r.content);
        EXPECT_EQ(r.final.finish_reason, "stop");
    }
    {
        ReplyBuilder b(tokenizer(), kEos, true, tok::ThinkingMode::kChat, options());
        const std::string calls =
            "Checking.\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter "
            "name=\"city\" "
            "string=\"true\">Paris</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>";
        const Reply r = run(b, calls, true, FinishReason::kEos);
        ASSERT_TRUE(r.final.parsed.ok()) << r.final.parsed.error->message;
        ASSERT_EQ(r.final.parsed.tool_calls.size(), 1u);
        EXPECT_EQ(r.final.parsed.tool_calls[0].name, "get_weather");
        EXPECT_EQ(r.final.parsed.tool_calls[0].arguments, "{\"city\": \"Paris\"}");
        EXPECT_EQ(r.content, "Checking.");
        EXPECT_EQ(r.content.find("DSML"), std::string::npos);
        EXPECT_EQ(r.final.finish_reason, "tool_calls");
    }
}

TEST(ReplyBuilder, OneLogprobPerTokenInTheDeltaItCameWith) {
    ReplyBuilder b(tokenizer(), kEos, false, tok::ThinkingMode::kChat, options({}, true));
    const Reply r = run(b, "ab東", false, FinishReason::kLength);
    size_t n = 0;
    for (const auto& d : r.deltas) n += d.logprobs.size();
    EXPECT_EQ(n, tokenizer().encode("ab東").size());
    for (const auto& d : r.deltas) EXPECT_EQ(d.logprobs.size(), 1u);
    EXPECT_EQ(r.final.logprobs.size(), n);
}

}  // namespace
}  // namespace dsv4::server
