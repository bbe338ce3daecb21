// The Responses API's translation and answers (server/openai_responses.h): a request means the chat request written
// out here (instructions first, items merged into turns, tools strict by default, text.format, reasoning.effort,
// max_output_tokens); 400s name the Responses fields; the response object's items, status and usage; the stream's
// events in order, adding up to the same items.
#include "server/openai_responses.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

const RequestLimits kLimits{.max_context = 4096, .vocab_size = 1000};

ResponsesRequest request(const std::string& body) {
    return parse_responses_request(parse_json_body(body), kLimits, "m");
}

std::string param_of_400(const std::string& body) {
    try {
        request(body);
    } catch (const ApiError& e) {
        EXPECT_EQ(e.status(), 400) << body;
        EXPECT_NE(std::string(e.what()).find(e.param().substr(0, e.param().find('['))), std::string::npos) << e.what();
        return e.param();
    }
    ADD_FAILURE() << "accepted: " << body;
    return "";
}

TEST(ResponsesRequest, InputItemsBecomeTheChatTurnsTheyMean) {
    const ResponsesRequest r = request(R"({"instructions": "Be brief.", "input": [
        {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Let me look."}]},
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "f", "arguments": "{\"x\": 1}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "two"}]}],
      "tools": [{"type": "function", "name": "f", "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}}}],
      "max_output_tokens": 9, "reasoning": {"effort": "high", "summary": "auto"}})");
    const ordered_json& m = r.chat.messages;
    ASSERT_EQ(m.size(), 5u) << m.dump();
    EXPECT_EQ(m[0]["role"], "system");
    EXPECT_EQ(m[0]["content"], "Be brief.");
    EXPECT_TRUE(m[0].contains("tools")) << "the request's tools reach the system message";
    EXPECT_EQ(m[1]["content"], "a\n\nb");
    EXPECT_EQ(m[2]["role"], "assistant");
    EXPECT_EQ(m[2]["content"], "Let me look.");
    EXPECT_EQ(m[2]["reasoning_content"], "think");
    ASSERT_EQ(m[2]["tool_calls"].size(), 2u) << "a turn's text and its calls are one message";
    EXPECT_EQ(m[2]["tool_calls"][1]["id"], "c2");
    EXPECT_EQ(m[3]["role"], "tool");
    EXPECT_EQ(m[4]["content"], "two");
    EXPECT_EQ(r.chat.options.max_tokens, 9);
    EXPECT_EQ(r.chat.render.thinking_mode, tok::ThinkingMode::kThinking);
    ASSERT_NE(r.chat.options.tool_calls, nullptr) << "function tools are strict unless they say otherwise";
    EXPECT_EQ(r.chat.options.tool_calls->parameters(0).keys, std::vector<std::string>{"x"});
    EXPECT_EQ(r.echo["max_output_tokens"], 9);
    EXPECT_EQ(r.echo["tool_choice"], "auto");

    const ResponsesRequest loose =
        request(R"({"input": "hi", "tools": [{"type": "function", "name": "f", "strict": false}]})");
    EXPECT_EQ(loose.chat.messages.size(), 2u) << "a contentless system message carries the tools";
    EXPECT_EQ(loose.chat.options.tool_calls, nullptr) << "strict false, auto: the model's own calls";
    EXPECT_EQ(request(R"({"input": "hi", "text": {"format": {"type": "json_schema", "name": "s",
                                                              "schema": {"type": "object"}}}})")
                  .chat.options.response_format,
              ResponseFormat::kJsonSchema);
    EXPECT_EQ(request(R"({"input": "hi", "tool_choice": {"type": "function", "name": "f"},
                          "tools": [{"type": "function", "name": "f", "strict": false}]})")
                  .chat.options.tool_calls->tools()[0]
                  .name,
              "f");
}

TEST(ResponsesRequest, RefusalsNameTheResponsesFields) {
    EXPECT_EQ(param_of_400(R"({})"), "input");
    EXPECT_EQ(param_of_400(R"({"input": 5})"), "input");
    EXPECT_EQ(param_of_400(R"({"input": "x", "previous_response_id": "resp_1"})"), "previous_response_id");
    EXPECT_EQ(param_of_400(R"({"input": "x", "background": true})"), "background");
    EXPECT_EQ(param_of_400(R"({"input": "x", "truncation": "auto"})"), "truncation");
    EXPECT_EQ(param_of_400(R"({"input": "x", "include": ["message.output_text.logprobs"]})"), "include");
    EXPECT_EQ(param_of_400(R"({"input": [{"type": "item_reference", "id": "i"}]})"), "input[0].type");
    EXPECT_EQ(param_of_400(R"({"input": [{"role": "tool", "content": "x"}]})"), "input[0].role");
    EXPECT_EQ(param_of_400(R"({"input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})"),
              "input[0].call_id");
    EXPECT_EQ(param_of_400(R"({"input": [{"role": "user", "content": [{"type": "input_file"}]}]})"),
              "input[0].content[0].type");
    EXPECT_EQ(param_of_400(R"({"input": "x", "tools": [{"type": "file_search"}]})"), "tools[0].type");
    EXPECT_EQ(param_of_400(R"({"input": "x", "max_output_tokens": 0})"), "max_output_tokens");
    EXPECT_EQ(param_of_400(R"({"input": "x", "text": {"format": {"type": "yaml"}}})"), "text.format.type");
    EXPECT_EQ(param_of_400(R"({"input": "x", "text": {"verbosity": "low"}})"), "text.verbosity");
    EXPECT_EQ(param_of_400(R"({"input": "x", "reasoning": {"effort": 5}})"), "reasoning.effort");
    EXPECT_EQ(param_of_400(R"({"input": "x", "tools": [{"type": "function", "name": "f", "parameters":
        {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0}}}}]})"),
              "tools[0].parameters");
    EXPECT_NO_THROW(request(R"({"input": "x", "include": ["reasoning.encrypted_content"], "store": true,
                                "reasoning": {"summary": "auto"}, "metadata": {"k": "v"}})"));
}

ResponseOutcome outcome(std::string reasoning, std::string content, std::vector<tok::ToolCall> calls,
                        std::string reason) {
    ResponseOutcome o;
    o.parsed.reasoning_content = std::move(reasoning);
    o.parsed.content = std::move(content);
    o.parsed.tool_calls = std::move(calls);
    o.finish_reason = std::move(reason);
    o.usage = Usage{.prompt_tokens = 10, .completion_tokens = 6, .cached_tokens = 4};
    o.reasoning_tokens = 3;
    return o;
}

TEST(ResponseObject, ItemsStatusAndUsage) {
    const ordered_json echo = request(R"({"input": "x", "instructions": "I"})").echo;
    const ResponseOutcome full = outcome("why", "Hello", {{"f", "{\"a\": 1}"}}, "tool_calls");
    const ordered_json r = response_object("resp_ab", 7, "m", &full, echo);
    EXPECT_EQ(r["status"], "completed");
    EXPECT_EQ(r["instructions"], "I");
    ASSERT_EQ(r["output"].size(), 3u);
    EXPECT_EQ(r["output"][0]["type"], "reasoning");
    EXPECT_EQ(r["output"][0]["content"][0]["text"], "why");
    EXPECT_EQ(r["output"][1]["content"][0]["text"], "Hello");
    EXPECT_EQ(r["output"][2]["call_id"], "call_ab_0");
    EXPECT_EQ(r["output"][2]["arguments"], "{\"a\": 1}");
    EXPECT_EQ(r["usage"]["input_tokens_details"]["cached_tokens"], 4);
    EXPECT_EQ(r["usage"]["output_tokens_details"]["reasoning_tokens"], 3);
    EXPECT_EQ(r["usage"]["total_tokens"], 16);
    const ResponseOutcome cut = outcome("", "He", {}, "length");
    const ordered_json c = response_object("resp_ab", 7, "m", &cut, echo);
    EXPECT_EQ(c["status"], "incomplete");
    EXPECT_EQ(c["incomplete_details"]["reason"], "max_output_tokens");
    EXPECT_EQ(c["output"].size(), 1u);
    const ResponseOutcome calls_only = outcome("", "", {{"f", "{}"}}, "tool_calls");
    EXPECT_EQ(response_object("resp_ab", 7, "m", &calls_only, echo)["output"][0]["type"], "function_call");
}

// The events of a stream, their sequence numbers, and their items: the same as the final object's output.
TEST(ResponseEvents, AddUpToTheResponse) {
    const ordered_json echo = request(R"({"input": "x"})").echo;
    for (const bool with_calls : {false, true}) {
        ResponseEvents ev("resp_ab", 7, "m", echo);
        std::vector<ordered_json> all = ev.start();
        for (const auto& [r, c] : {std::pair<std::string, std::string>{"wh", ""}, {"y", "He"}, {"", "llo"}}) {
            auto more = ev.delta(r, c);
            all.insert(all.end(), more.begin(), more.end());
        }
        const ResponseOutcome o =
            outcome("why", "Hello",
                    with_calls ? std::vector<tok::ToolCall>{{"f", "{}"}, {"g", "[1]"}} : std::vector<tok::ToolCall>{},
                    with_calls ? "tool_calls" : "stop");
        auto end = ev.finish(o);
        all.insert(all.end(), end.begin(), end.end());
        for (size_t i = 0; i < all.size(); ++i) EXPECT_EQ(all[i]["sequence_number"], int64_t(i));
        EXPECT_EQ(all.front()["type"], "response.created");
        EXPECT_EQ(all.back()["type"], "response.completed");
        std::string reasoning, text;
        ordered_json done = ordered_json::array();
        for (const ordered_json& e : all) {
            if (e["type"] == "response.reasoning_text.delta") reasoning += e["delta"].get<std::string>();
            if (e["type"] == "response.output_text.delta") text += e["delta"].get<std::string>();
            if (e["type"] == "response.output_item.done") done.push_back(e["item"]);
        }
        EXPECT_EQ(reasoning, "why");
        EXPECT_EQ(text, "Hello");
        EXPECT_EQ(done, all.back()["response"]["output"]) << "the items closed are the response's output";
        EXPECT_EQ(done.size(), with_calls ? 4u : 2u);
    }
    ResponseEvents ev("resp_ab", 7, "m", echo);
    const auto f = ev.failed("boom");
    EXPECT_EQ(f[0]["type"], "response.failed");
    EXPECT_EQ(f[0]["response"]["error"]["message"], "boom");
}

}  // namespace
}  // namespace dsv4::server
