// Responses of the OpenAI-compatible protocol, each compared with JSON written by hand from OpenAI's documented
// schema (keys in order, types included): chat.completion, chat.completion.chunk (first, content, reasoning, tool
// call, finish, usage; with and without the usage field), text_completion bodies and chunks, logprobs of both
// endpoints (partial UTF-8 tokens, -inf), usage, /v1/models; make_token_logprob on DeepSeek-V4's tokenizer;
// StopMatcher over every way of splitting a text.
#include <gtest/gtest.h>

#include <limits>
#include <random>

#include "server/openai_protocol.h"
#include "tokenizer/tokenizer_path.h"
#include "tokenizer/unicode.h"

namespace dsv4::server {
namespace {

// Both sides as dumped JSON, so key order and number types (1 vs 1.0) count.
void expect_json(const ordered_json& actual, const std::string& expected) {
    EXPECT_EQ(actual.dump(), ordered_json::parse(expected).dump());
}

TokenLogprob lp(const std::string& text, float logprob, std::vector<TokenLogprob> top = {}) {
    TokenLogprob t;
    t.text = text;
    t.bytes = text;
    t.logprob = logprob;
    t.top = std::move(top);
    return t;
}

const Usage kUsage{.prompt_tokens = 5, .completion_tokens = 3, .cached_tokens = 2};
const char* kUsageJson =
    R"({"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8, "prompt_tokens_details": {"cached_tokens": 2}})";

std::string with_usage(const std::string& body) {
    return body + R"(, "usage": )" + kUsageJson + "}";
}

TEST(OpenAiResponse, Usage) {
    expect_json(usage_json(kUsage), kUsageJson);
}

TEST(OpenAiResponse, ChatWithReasoning) {
    ChatResult r;
    r.parsed.reasoning_content = "Think.";
    r.parsed.content = "Hello!";
    r.finish_reason = "stop";
    r.usage = kUsage;
    expect_json(chat_response("chatcmpl-abc", 1700000000, "dsv4", r, false),
                with_usage(R"({"id": "chatcmpl-abc", "object": "chat.completion", "created": 1700000000,
                  "model": "dsv4", "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello!",
                  "reasoning_content": "Think."}, "logprobs": null, "finish_reason": "stop"}])"));
}

TEST(OpenAiResponse, ChatPlainAndEmpty) {
    ChatResult r;
    r.finish_reason = "length";
    r.usage = kUsage;
    expect_json(chat_response("chatcmpl-1", 1, "m", r, false),
                with_usage(R"({"id": "chatcmpl-1", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": ""}, "logprobs": null,
                  "finish_reason": "length"}])"));
}

TEST(OpenAiResponse, ChatToolCalls) {
    ChatResult r;
    r.parsed.tool_calls = {{"get_weather", R"({"city": "Paris"})"}, {"search", "{}"}};
    r.finish_reason = "tool_calls";
    r.usage = kUsage;
    expect_json(chat_response("chatcmpl-xyz", 2, "m", r, false),
                with_usage(R"({"id": "chatcmpl-xyz", "object": "chat.completion", "created": 2, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_xyz_0", "type": "function", "function": {"name": "get_weather",
                     "arguments": "{\"city\": \"Paris\"}"}},
                    {"id": "call_xyz_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}]},
                  "logprobs": null, "finish_reason": "tool_calls"}])"));
    // Text before the calls stays as content.
    r.parsed.content = "Let me check.";
    r.parsed.tool_calls.resize(1);
    expect_json(chat_response("chatcmpl-xyz", 2, "m", r, false)["choices"][0]["message"],
                R"({"role": "assistant", "content": "Let me check.", "tool_calls": [{"id": "call_xyz_0",
                  "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]})");
}

TEST(OpenAiResponse, ChatLogprobs) {
    ChatResult r;
    r.parsed.content = "Hi";
    r.finish_reason = "stop";
    r.logprobs = {lp("Hi", -0.25f, {lp("Hi", -0.25f), lp("Hello", -1.5f)})};
    r.usage = kUsage;
    expect_json(chat_response("chatcmpl-1", 1, "m", r, true)["choices"][0]["logprobs"],
                R"({"content": [{"token": "Hi", "logprob": -0.25, "bytes": [72, 105], "top_logprobs": [
                    {"token": "Hi", "logprob": -0.25, "bytes": [72, 105]},
                    {"token": "Hello", "logprob": -1.5, "bytes": [72, 101, 108, 108, 111]}]}]})");
    // Without alternatives top_logprobs is an empty list; -inf is OpenAI's -9999.0; floats keep their short form.
    r.logprobs = {lp("a", -std::numeric_limits<float>::infinity()), lp("b", -0.31f)};
    expect_json(chat_response("chatcmpl-1", 1, "m", r, true)["choices"][0]["logprobs"],
                R"({"content": [{"token": "a", "logprob": -9999.0, "bytes": [97], "top_logprobs": []},
                                {"token": "b", "logprob": -0.31, "bytes": [98], "top_logprobs": []}]})");
}

TEST(OpenAiResponse, Completion) {
    expect_json(completion_response("cmpl-7", 3, "m", "Once upon", "length", {}, false, kUsage),
                with_usage(R"({"id": "cmpl-7", "object": "text_completion", "created": 3, "model": "m",
                  "choices": [{"index": 0, "text": "Once upon", "logprobs": null, "finish_reason": "length"}])"));
}

TEST(OpenAiResponse, CompletionLogprobsAndOffsets) {
    // "é" is 2 bytes and 1 character: offsets count characters. Alternatives map token -> logprob.
    const std::vector<TokenLogprob> tokens = {lp("a", -0.5f, {lp("a", -0.5f), lp("b", -1.0f)}), lp("é", -1.0f),
                                              lp("b", -2.0f)};
    expect_json(completion_response("cmpl-7", 3, "m", "aéb", "stop", tokens, true, kUsage),
                with_usage(R"({"id": "cmpl-7", "object": "text_completion", "created": 3, "model": "m",
                  "choices": [{"index": 0, "text": "aéb", "logprobs": {"tokens": ["a", "é", "b"],
                    "token_logprobs": [-0.5, -1.0, -2.0], "top_logprobs": [{"a": -0.5, "b": -1.0}, {}, {}],
                    "text_offset": [0, 1, 2]}, "finish_reason": "stop"}])"));
    // Asked but nothing generated: empty lists, not null.
    expect_json(completion_response("cmpl-7", 3, "m", "", "stop", {}, true, kUsage)["choices"][0]["logprobs"],
                R"({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []})");
}

TEST(OpenAiResponse, ChatChunks) {
    ChatDelta first;
    first.role = "assistant";
    expect_json(chat_chunk("chatcmpl-s", 9, "m", first, std::nullopt, false, false),
                R"({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 9, "model": "m", "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
                     "finish_reason": null}]})");
    expect_json(chat_chunk("chatcmpl-s", 9, "m", first, std::nullopt, true, false),
                R"({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 9, "model": "m", "choices": [
                    {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": null,
                     "finish_reason": null}], "usage": null})");
    ChatDelta reasoning;
    reasoning.reasoning_content = "Hmm";
    expect_json(chat_chunk("chatcmpl-s", 9, "m", reasoning, std::nullopt, false, false)["choices"][0]["delta"],
                R"({"reasoning_content": "Hmm"})");
    ChatDelta content;
    content.content = "Hel";
    content.logprobs = {lp("Hel", -0.5f)};
    expect_json(chat_chunk("chatcmpl-s", 9, "m", content, std::nullopt, true, true),
                R"({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 9, "model": "m", "choices": [
                    {"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": [{"token": "Hel",
                     "logprob": -0.5, "bytes": [72, 101, 108], "top_logprobs": []}]}, "finish_reason": null}],
                    "usage": null})");
    ChatDelta calls;
    calls.tool_calls = {{"f", R"({"x": 1})"}, {"g", "{}"}};
    expect_json(chat_chunk("chatcmpl-s", 9, "m", calls, std::nullopt, false, false)["choices"][0]["delta"],
                R"({"tool_calls": [
                    {"index": 0, "id": "call_s_0", "type": "function", "function": {"name": "f",
                     "arguments": "{\"x\": 1}"}},
                    {"index": 1, "id": "call_s_1", "type": "function", "function": {"name": "g", "arguments": "{}"}}]})");
    expect_json(chat_chunk("chatcmpl-s", 9, "m", {}, "tool_calls", false, true),
                R"({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 9, "model": "m", "choices": [
                    {"index": 0, "delta": {}, "logprobs": null, "finish_reason": "tool_calls"}]})");
}

TEST(OpenAiResponse, CompletionChunksAndUsageChunks) {
    expect_json(completion_chunk("cmpl-s", 9, "m", "lo", std::nullopt, {}, false, false),
                R"({"id": "cmpl-s", "object": "text_completion", "created": 9, "model": "m", "choices": [
                    {"index": 0, "text": "lo", "logprobs": null, "finish_reason": null}]})");
    // Offsets go on from the characters streamed before.
    expect_json(
        completion_chunk("cmpl-s", 9, "m", "lo!", std::nullopt, {lp("lo", -0.5f), lp("!", -0.25f)}, true, true, 10),
        R"({"id": "cmpl-s", "object": "text_completion", "created": 9, "model": "m", "choices": [
                    {"index": 0, "text": "lo!", "logprobs": {"tokens": ["lo", "!"], "token_logprobs": [-0.5, -0.25],
                     "top_logprobs": [{}, {}], "text_offset": [10, 12]}, "finish_reason": null}], "usage": null})");
    expect_json(completion_chunk("cmpl-s", 9, "m", "", "length", {}, true, true),
                R"({"id": "cmpl-s", "object": "text_completion", "created": 9, "model": "m", "choices": [
                    {"index": 0, "text": "", "logprobs": null, "finish_reason": "length"}], "usage": null})");
    expect_json(usage_chunk("chatcmpl-s", 9, "m", true, kUsage),
                with_usage(R"({"id": "chatcmpl-s", "object": "chat.completion.chunk", "created": 9, "model": "m",
                               "choices": [])"));
    expect_json(usage_chunk("cmpl-s", 9, "m", false, kUsage),
                with_usage(R"({"id": "cmpl-s", "object": "text_completion", "created": 9, "model": "m",
                               "choices": [])"));
}

TEST(OpenAiResponse, Models) {
    expect_json(models_response("deepseek-v4", 1700000000, 65536),
                R"({"object": "list", "data": [{"id": "deepseek-v4", "object": "model", "created": 1700000000,
                    "owned_by": "dsv4", "max_model_len": 65536}]})");
}

TEST(OpenAiResponse, ToolCallIds) {
    EXPECT_EQ(tool_call_id("chatcmpl-a1b2", 0), "call_a1b2_0");
    EXPECT_EQ(tool_call_id("chatcmpl-a1b2", 3), "call_a1b2_3");
    EXPECT_EQ(tool_call_id("xyz", 1), "call_xyz_1");
}

TEST(OpenAiResponse, SeveralChoices) {
    // n = 2: one entry per choice with its index, one usage for both; a tool call's id names its choice (choice 0
    // keeps the one-choice form).
    ChatResult a, b;
    a.parsed.content = "A";
    a.finish_reason = "stop";
    b.parsed.tool_calls = {{"f", "{}"}};
    b.finish_reason = "tool_calls";
    expect_json(chat_response("chatcmpl-x", 1, "m", std::vector<ChatResult>{a, b}, kUsage, false),
                with_usage(R"({"id": "chatcmpl-x", "object": "chat.completion", "created": 1, "model": "m",
                  "choices": [{"index": 0, "message": {"role": "assistant", "content": "A"}, "logprobs": null,
                  "finish_reason": "stop"}, {"index": 1, "message": {"role": "assistant", "content": null,
                  "tool_calls": [{"id": "call_x_1_0", "type": "function", "function": {"name": "f",
                  "arguments": "{}"}}]}, "logprobs": null, "finish_reason": "tool_calls"}])"));
    expect_json(completion_response("cmpl-y", 1, "m", {CompletionChoice{"one", "stop", {}},
                                                       CompletionChoice{"two", "length", {}}},
                                    false, kUsage),
                with_usage(R"({"id": "cmpl-y", "object": "text_completion", "created": 1, "model": "m", "choices":
                  [{"index": 0, "text": "one", "logprobs": null, "finish_reason": "stop"},
                   {"index": 1, "text": "two", "logprobs": null, "finish_reason": "length"}])"));
    ChatDelta d;
    d.content = "hi";
    expect_json(chat_chunk("chatcmpl-x", 1, "m", d, std::nullopt, false, false, 3),
                R"({"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": "m",
                  "choices": [{"index": 3, "delta": {"content": "hi"}, "logprobs": null, "finish_reason": null}]})");
    expect_json(completion_chunk("cmpl-y", 1, "m", "t", "stop", {}, false, false, 0, 2),
                R"({"id": "cmpl-y", "object": "text_completion", "created": 1, "model": "m",
                  "choices": [{"index": 2, "text": "t", "logprobs": null, "finish_reason": "stop"}]})");
    EXPECT_EQ(tool_call_id("chatcmpl-x", 4, 2), "call_x_2_4");
}

TEST(OpenAiResponse, TokenLogprobsOnTheV4Tokenizer) {
    const auto path = tok::installed_tokenizer_json();
    ASSERT_TRUE(path) << "run scripts/setup.sh";
    const tok::Tokenizer tokenizer = tok::Tokenizer::from_file(*path);
    const int32_t hello = tokenizer.encode("Hello")[0];
    const int32_t lead = tokenizer.encode("\xE6")[0];  // a token holding one lead byte of a 3-byte character
    const int32_t cont = tokenizer.encode("\x97")[0];  // and one holding a continuation byte
    const TokenLogprob t = make_token_logprob(lead, -0.5f, {{lead, -0.5f}, {hello, -2.0f}, {cont, -3.0f}}, tokenizer);
    EXPECT_EQ(t.id, lead);
    EXPECT_EQ(t.bytes, "\xE6");
    EXPECT_EQ(t.text, "bytes:\\xe6");
    ASSERT_EQ(t.top.size(), 3u);
    EXPECT_EQ(t.top[1].text, tokenizer.token_bytes(hello));
    EXPECT_EQ(t.top[2].text, "bytes:\\x97");
    ChatResult r;
    r.logprobs = {t};
    const ordered_json body = chat_response("chatcmpl-1", 1, "m", r, true);
    EXPECT_NO_THROW(body.dump()) << "token texts must be valid UTF-8";
    EXPECT_EQ(body["choices"][0]["logprobs"]["content"][0]["bytes"], ordered_json::parse("[230]"));
    EXPECT_EQ(make_token_logprob(tokenizer.encode("a")[0], 0.0f, {}, tokenizer).text, "a");
}

TEST(OpenAiResponse, SafeDumpReplacesInvalidUtf8) {
    const ordered_json j = {{"content", std::string("ok\xff")}};
    EXPECT_ANY_THROW(j.dump());
    EXPECT_EQ(safe_dump(j), "{\"content\":\"ok\xEF\xBF\xBD\"}");
}

// --- StopMatcher ---

// The text StopMatcher must produce: everything before the first stop string to complete (the earliest end; of
// two ending together, the longer), or the whole text.
// Armed after `armed_at` bytes (min_tokens): a stop string counts only if it ends past them.
std::string reference_stop(const std::string& text, const std::vector<std::string>& stops, bool* stopped,
                           size_t armed_at = 0) {
    for (size_t end = armed_at + 1; end <= text.size(); ++end) {
        size_t best = std::string::npos;
        for (const std::string& s : stops)
            if (!s.empty() && s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0)
                best = std::min(best, end - s.size());
        if (best != std::string::npos) {
            *stopped = true;
            return text.substr(0, best);
        }
    }
    *stopped = false;
    return text;
}

// Pushes `pieces` and returns everything StopMatcher let out, finish() included.
std::string run_stop(const std::vector<std::string>& stops, const std::vector<std::string>& pieces, bool* stopped) {
    StopMatcher m(stops);
    std::string out;
    for (const std::string& p : pieces) out += m.push(p);
    *stopped = m.stopped();
    return out + m.finish();
}

TEST(StopMatcher, NoStopsPassesEverything) {
    StopMatcher m({});
    EXPECT_EQ(m.push("abc"), "abc");
    EXPECT_EQ(m.push(""), "");
    EXPECT_EQ(m.finish(), "");
    EXPECT_FALSE(m.stopped());
    StopMatcher empty({""});  // an empty stop string would end every output at once: it is ignored
    EXPECT_EQ(empty.push("abc"), "abc");
}

TEST(StopMatcher, HoldsAPossibleStartAndCutsAtTheStop) {
    StopMatcher m({"END"});
    EXPECT_EQ(m.push("abcEN"), "abc");
    EXPECT_FALSE(m.stopped());
    EXPECT_EQ(m.push("D and more"), "");
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(m.push("later"), "");
    EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, FinishReturnsWhatWasHeld) {
    StopMatcher m({"END"});
    EXPECT_EQ(m.push("abcEN"), "abc");
    EXPECT_EQ(m.finish(), "EN");
    EXPECT_FALSE(m.stopped());
}

TEST(StopMatcher, FalseStartsAreReleased) {
    StopMatcher m({"abc"});
    EXPECT_EQ(m.push("ab"), "");
    EXPECT_EQ(m.push("ab"), "ab");  // "abab": only the last "ab" can still start "abc"
    EXPECT_EQ(m.push("x"), "abx");
    EXPECT_EQ(m.finish(), "");
}

TEST(StopMatcher, StopSplitAcrossManyPushes) {
    StopMatcher m({"<|stop|>"});
    std::string out;
    for (char c : std::string("hello <|stop|> world")) out += m.push(std::string(1, c));
    EXPECT_TRUE(m.stopped());
    EXPECT_EQ(out + m.finish(), "hello ");
}

TEST(StopMatcher, StopAtTheStart) {
    StopMatcher m({"STOP"});
    EXPECT_EQ(m.push("STOP"), "");
    EXPECT_TRUE(m.stopped());
    StopMatcher n({"\n"});
    EXPECT_EQ(n.push("\nabc"), "");
    EXPECT_TRUE(n.stopped());
}

TEST(StopMatcher, OverlappingStops) {
    bool stopped = false;
    // "bc" completes before "abcd" would: the output ends before "bc", however the text arrives.
    EXPECT_EQ(run_stop({"abcd", "bc"}, {"abcd"}, &stopped), "a");
    EXPECT_EQ(run_stop({"abcd", "bc"}, {"a", "b", "c", "d"}, &stopped), "a");
    // Two stops ending together: the longer one cuts.
    EXPECT_EQ(run_stop({"bc", "abc"}, {"xabc"}, &stopped), "x");
    EXPECT_EQ(run_stop({"bc", "abc"}, {"x", "a", "b", "c"}, &stopped), "x");
    // One stop inside another's prefix.
    EXPECT_EQ(run_stop({"aab"}, {"a", "a", "a", "b"}, &stopped), "a");
    EXPECT_TRUE(stopped);
}

TEST(StopMatcher, MultiByteCharacters) {
    bool stopped = false;
    const std::vector<std::string> chars = {"你", "好", "好", "。", "再", "见"};
    EXPECT_EQ(run_stop({"好。"}, chars, &stopped), "你好");
    EXPECT_TRUE(stopped);
    EXPECT_EQ(run_stop({"。"}, chars, &stopped), "你好好");
    // A stop that shares its first bytes with a character of the text ("é" is C3 A9, "è" C3 A8).
    EXPECT_EQ(run_stop({"é!"}, {"è", "é", "è", "é", "!"}, &stopped), "èéè");
}

// Any text split any way gives the reference's output, and pieces of whole characters come out as whole characters.
TEST(StopMatcher, SplitIndependentAndUtf8Safe) {
    const std::vector<std::string> alphabet = {"a", "b", "é", "你", "。"};
    std::mt19937 rng(2024);
    auto word = [&](size_t max_chars) {
        std::string w;
        for (size_t n = 1 + rng() % max_chars; n > 0; --n) w += alphabet[rng() % alphabet.size()];
        return w;
    };
    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<std::string> stops;
        for (size_t n = 1 + rng() % 3; n > 0; --n) stops.push_back(word(3));
        std::vector<std::string> pieces;
        std::string text;
        for (size_t n = rng() % 12; n > 0; --n) {
            pieces.push_back(word(3));
            text += pieces.back();
        }
        bool want_stopped = false, stopped = false;
        const std::string want = reference_stop(text, stops, &want_stopped);
        StopMatcher m(stops);
        std::string out;
        for (const std::string& p : pieces) {
            const std::string piece = m.push(p);
            ASSERT_TRUE(tok::is_valid_utf8(piece)) << "trial " << trial;
            out += piece;
        }
        stopped = m.stopped();
        out += m.finish();
        ASSERT_EQ(out, want) << "trial " << trial << ": " << text;
        ASSERT_EQ(stopped, want_stopped) << "trial " << trial;
        ASSERT_EQ(run_stop(stops, {text}, &stopped), want) << "trial " << trial << " in one push";
    }
}

// Not armed until some pieces were pushed (vLLM's min_tokens): a stop string counts only if it ends after the
// arming, though it may begin before; what came before is passed on, every way of splitting.
TEST(StopMatcher, ArmedLateCountsOnlyStopsThatEndAfter) {
    const std::vector<std::string> alphabet = {"a", "b", "é", "ab"};
    std::mt19937 rng(7);
    auto word = [&](size_t max_chars) {
        std::string w;
        for (size_t n = 1 + rng() % max_chars; n > 0; --n) w += alphabet[rng() % alphabet.size()];
        return w;
    };
    int stopped_before_arming_would = 0;
    for (int trial = 0; trial < 3000; ++trial) {
        std::vector<std::string> stops;
        for (size_t n = 1 + rng() % 3; n > 0; --n) stops.push_back(word(3));
        std::vector<std::string> pieces;
        for (size_t n = rng() % 10; n > 0; --n) pieces.push_back(word(3));
        const size_t arm_before = pieces.empty() ? 0 : rng() % (pieces.size() + 1);  // pieces pushed unarmed
        std::string text;
        size_t armed_at = 0;
        for (size_t i = 0; i < pieces.size(); ++i) {
            if (i == arm_before) armed_at = text.size();
            text += pieces[i];
        }
        if (arm_before == pieces.size()) armed_at = text.size();
        bool want_stopped = false, early = false;
        const std::string want = reference_stop(text, stops, &want_stopped, armed_at);
        reference_stop(text.substr(0, armed_at), stops, &early);
        stopped_before_arming_would += early;
        StopMatcher m(stops, /*armed=*/arm_before == 0);
        std::string out;
        for (size_t i = 0; i < pieces.size(); ++i) {
            if (i == arm_before) m.arm();
            out += m.push(pieces[i]);
        }
        m.arm();
        const bool stopped = m.stopped();
        out += m.finish();
        ASSERT_EQ(out, want) << "trial " << trial << ": " << text << " armed at " << armed_at;
        ASSERT_EQ(stopped, want_stopped) << "trial " << trial;
    }
    EXPECT_GT(stopped_before_arming_would, 100) << "stops that arming held back";
}

}  // namespace
}  // namespace dsv4::server
