// Anthropic's Messages API over the chat machinery (server/anthropic_messages.h): a request means the chat request
// written out here (system first; blocks into turns: thinking as reasoning_content, tool_use as tool calls, tool_result
// as tool messages; tools, tool_choice, stop_sequences, thinking); 400s name its fields; claude-* model names are the
// served model; the message object and the stream's events, which add up to the same blocks; errors in its shape.
#include "server/anthropic_messages.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

const RequestLimits kLimits{.max_context = 4096, .vocab_size = 1000};

ChatRequest request(const std::string& body) {
    return parse_messages_request(parse_json_body(body), kLimits, "m");
}

std::string param_of_400(const std::string& body) {
    try {
        request(body);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << body;
        return e.param();
    }
    ADD_FAILURE() << "accepted: " << body;
    return "";
}

TEST(MessagesRequest, BlocksBecomeTheChatTurnsTheyMean) {
    const ChatRequest r =
        request(R"({"model": "claude-sonnet-4-5", "max_tokens": 9, "system": [{"type": "text", "text": "S"}],
      "thinking": {"type": "enabled", "budget_tokens": 512}, "stop_sequences": ["END"],
      "tools": [{"name": "f", "input_schema": {"type": "object", "properties": {"x": {"type": "integer"}}}}],
      "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
      "messages": [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                          {"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "t1", "name": "f", "input": {"x": 1}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "one"},
                                     {"type": "text", "text": "and?"}]}]})");
    const ordered_json& m = r.messages;
    ASSERT_EQ(m.size(), 5u) << m.dump();
    EXPECT_EQ(m[0]["content"], "S");
    EXPECT_EQ(m[2]["reasoning_content"], "hm");
    EXPECT_EQ(m[2]["content"], "Looking.");
    EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], R"({"x":1})");
    EXPECT_EQ(m[3]["role"], "tool");
    EXPECT_EQ(m[3]["tool_call_id"], "t1");
    EXPECT_EQ(m[4]["content"], "and?");
    EXPECT_EQ(r.options.max_tokens, 9);
    EXPECT_EQ(r.options.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(r.render.thinking_mode, tok::ThinkingMode::kThinking);
    ASSERT_NE(r.options.tool_calls, nullptr) << "tool_choice any: a call is required";
    EXPECT_TRUE(r.options.tool_calls->one_call());
    EXPECT_EQ(request(R"({"max_tokens": 1, "tool_choice": {"type": "tool", "name": "f"}, "tools": [{"name": "f"}],
                          "messages": [{"role": "user", "content": "q"}]})")
                  .options.tool_calls->tools()[0]
                  .name,
              "f");
}

TEST(MessagesRequest, RefusalsNameItsFields) {
    EXPECT_EQ(param_of_400(R"({"messages": [{"role": "user", "content": "x"}]})"), "max_tokens");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "messages": []})"), "messages");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]})"),
              "messages[0].role");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image"}]}]})"),
              "messages[0].content[0].type");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "tool_use"}]}]})"),
              "messages[0].content[0].type");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "tools": [{"type": "bash_20250124", "name": "b"}],
                               "messages": [{"role": "user", "content": "x"}]})"),
              "tools[0].type");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "tool_choice": {"type": "sometimes"},
                               "messages": [{"role": "user", "content": "x"}]})"),
              "tool_choice");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "thinking": {"type": "maybe"},
                               "messages": [{"role": "user", "content": "x"}]})"),
              "thinking.type");
    EXPECT_EQ(
        param_of_400(R"({"max_tokens": 1, "stop_sequences": [""], "messages": [{"role": "user", "content": "x"}]})"),
        "stop_sequences");
    EXPECT_EQ(param_of_400(R"({"max_tokens": 1, "tools": [{"name": "f", "strict": true, "input_schema":
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}],
        "messages": [{"role": "user", "content": "x"}]})"),
              "tools[0].input_schema");
    try {
        request(R"({"model": "gpt-4", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]})");
        ADD_FAILURE() << "another model";
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 404);
        EXPECT_EQ(anthropic_error(e)["error"]["type"], "not_found_error");
        EXPECT_EQ(anthropic_error(e)["type"], "error");
    }
}

// count_tokens parses the same body for its prompt only: max_tokens may be left out, and changes nothing if given.
TEST(MessagesRequest, CountingTokensNeedsNoMaxTokens) {
    const ordered_json body = parse_json_body(R"({"system": "s", "messages": [{"role": "user", "content": "x"}]})");
    EXPECT_EQ(param_of_400(body.dump()), "max_tokens");
    const ChatRequest counted = parse_messages_request(body, kLimits, "m", MessagesUse::kCountTokens);
    ordered_json with_max = body;
    with_max["max_tokens"] = 7;
    const ChatRequest generated = request(with_max.dump());
    EXPECT_EQ(counted.messages.size(), 2u);
    EXPECT_EQ(counted.messages, generated.messages);
    EXPECT_EQ(counted.render.thinking_mode, generated.render.thinking_mode);
    EXPECT_FALSE(body.contains("max_tokens"));  // the client's body is not written to
    EXPECT_EQ(param_of_400(R"({"max_tokens": 0, "messages": [{"role": "user", "content": "x"}]})"), "max_tokens");
}

MessageOutcome outcome(std::string thinking, std::string text, std::vector<tok::ToolCall> calls, std::string reason,
                       std::string stop = {}) {
    MessageOutcome o;
    o.parsed.reasoning_content = std::move(thinking);
    o.parsed.content = std::move(text);
    o.parsed.tool_calls = std::move(calls);
    o.finish_reason = std::move(reason);
    o.stop_sequence = std::move(stop);
    o.usage = Usage{.prompt_tokens = 10, .completion_tokens = 5, .cached_tokens = 2};
    return o;
}

TEST(MessageObject, BlocksStopReasonsAndUsage) {
    const ordered_json m = message_object("msg_ab", "m", outcome("hm", "Hi", {{"f", R"({"x": 1})"}}, "tool_calls"));
    ASSERT_EQ(m["content"].size(), 3u);
    EXPECT_EQ(m["content"][0]["thinking"], "hm");
    EXPECT_EQ(m["content"][2]["input"]["x"], 1);
    EXPECT_EQ(m["content"][2]["id"], "toolu_ab_0");
    EXPECT_EQ(m["stop_reason"], "tool_use");
    EXPECT_EQ(m["usage"]["cache_read_input_tokens"], 2);
    EXPECT_EQ(message_object("msg_ab", "m", outcome("", "Hi", {}, "length"))["stop_reason"], "max_tokens");
    EXPECT_EQ(message_object("msg_ab", "m", outcome("", "Hi", {}, "stop"))["stop_reason"], "end_turn");
    const ordered_json s = message_object("msg_ab", "m", outcome("", "Hi", {}, "stop", "END"));
    EXPECT_EQ(s["stop_reason"], "stop_sequence");
    EXPECT_EQ(s["stop_sequence"], "END");
    EXPECT_EQ(message_object("msg_ab", "m", outcome("", "", {{"f", "not json"}}, "tool_calls"))["content"][0]["input"],
              "not json")
        << "arguments that are not an object are given as written";
}

TEST(MessageEvents, AddUpToTheMessage) {
    for (const bool with_calls : {false, true}) {
        const MessageOutcome o =
            outcome("hm", "Hello", with_calls ? std::vector<tok::ToolCall>{{"f", "{}"}} : std::vector<tok::ToolCall>{},
                    with_calls ? "tool_calls" : "stop");
        MessageEvents ev("msg_ab", "m", 10);
        std::vector<ordered_json> all = ev.start();
        for (const auto& [t, x] : {std::pair<std::string, std::string>{"h", ""}, {"m", "He"}, {"", "llo"}}) {
            auto more = ev.delta(t, x);
            all.insert(all.end(), more.begin(), more.end());
        }
        auto end = ev.finish(o);
        all.insert(all.end(), end.begin(), end.end());
        ordered_json blocks = ordered_json::array();
        for (const ordered_json& e : all) {
            if (e["type"] == "content_block_start") blocks.push_back(e["content_block"]);
            if (e["type"] != "content_block_delta") continue;
            ordered_json& b = blocks[size_t(e["index"].get<int>())];
            const ordered_json& d = e["delta"];
            if (d["type"] == "thinking_delta")
                b["thinking"] = b["thinking"].get<std::string>() + d["thinking"].get<std::string>();
            if (d["type"] == "text_delta") b["text"] = b["text"].get<std::string>() + d["text"].get<std::string>();
            if (d["type"] == "input_json_delta") b["input"] = ordered_json::parse(d["partial_json"].get<std::string>());
        }
        EXPECT_EQ(blocks, message_object("msg_ab", "m", o)["content"]);
        EXPECT_EQ(all.front()["type"], "message_start");
        EXPECT_EQ(all[all.size() - 2]["delta"]["stop_reason"], with_calls ? "tool_use" : "end_turn");
        EXPECT_EQ(all.back()["type"], "message_stop");
    }
}

}  // namespace
}  // namespace dsv4::server
