// Requests of the OpenAI-compatible protocol: every field's type errors and range edges (400 naming the field),
// defaults, the thinking / reasoning_effort table of spec §3.8 (with our default of chat mode), request-level tools
// and tool_choice, list contents, completion prompt forms, the JSON body reader, the context budget, and that random
// bodies never throw anything but ApiError. Responses and StopMatcher: openai_response_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <utility>

#include "server/openai_protocol.h"
#include "tokenizer/prompt.h"

namespace dsv4::server {
namespace {

const RequestLimits kLimits{
    .max_context = 4096, .max_output = 1024, .vocab_size = 129280, .max_stop_strings = 4, .max_top_logprobs = 20};
const std::string kModel = "dsv4-test";

ordered_json parse(const std::string& text) {
    return ordered_json::parse(text);
}

ordered_json chat_body(const std::string& extra = "") {
    return parse(R"({"messages": [{"role": "user", "content": "hi"}])" + (extra.empty() ? "" : ", " + extra) + "}");
}

ChatRequest chat_json(const ordered_json& body) {
    return parse_chat_request(body, kLimits, kModel);
}
ChatRequest chat(const std::string& extra) {
    return chat_json(chat_body(extra));
}
CompletionRequest completion(const std::string& fields) {
    return parse_completion_request(parse("{" + fields + "}"), kLimits, kModel);
}

// The ApiError `run` throws; a failure when it throws nothing or anything else.
ApiError error_of(const std::function<void()>& run) {
    try {
        run();
    } catch (const ApiError& e) {
        return e;
    } catch (const std::exception& e) {
        ADD_FAILURE() << "threw a non-ApiError: " << e.what();
        return ApiError(0, "", "");
    }
    ADD_FAILURE() << "accepted";
    return ApiError(0, "", "");
}

// A 400 invalid_request_error naming `param`, with a message that names it too (so a user knows what to fix).
void expect_400(const std::function<void()>& run, const std::string& param, const std::string& what) {
    const ApiError e = error_of(run);
    EXPECT_EQ(e.status(), 400) << what;
    EXPECT_EQ(e.type(), "invalid_request_error") << what;
    EXPECT_EQ(e.param(), param) << what << ": " << e.what();
    EXPECT_NE(std::string(e.what()).find(param.substr(0, param.find('['))), std::string::npos)
        << what << ": message does not name the field: " << e.what();
}

void expect_chat_400(const std::string& extra, const std::string& param) {
    expect_400([&] { chat(extra); }, param, extra);
}

void expect_messages_400(const std::string& messages, const std::string& param) {
    expect_400([&] { chat_json(parse(R"({"messages": )" + messages + "}")); }, param, messages);
}

void expect_completion_400(const std::string& fields, const std::string& param) {
    expect_400([&] { completion(fields); }, param, fields);
}

TEST(OpenAiRequest, ChatDefaults) {
    const ChatRequest r = chat("");
    const SamplingParams& s = r.options.sampling;
    EXPECT_FALSE(s.greedy);
    EXPECT_EQ(s.temperature, 1.0f);
    EXPECT_EQ(s.top_p, 1.0f);
    EXPECT_EQ(s.top_k, 0);
    EXPECT_EQ(s.min_p, 0.0f);
    EXPECT_NE(s.seed, chat("").options.sampling.seed) << "an absent seed must be drawn afresh per request";
    EXPECT_FALSE(r.options.max_tokens);
    EXPECT_TRUE(r.options.stop.empty());
    EXPECT_FALSE(r.options.logprobs);
    EXPECT_EQ(r.options.top_logprobs, 0);
    EXPECT_FALSE(r.options.stream);
    EXPECT_FALSE(r.options.include_usage);
    EXPECT_FALSE(r.options.ignore_eos);
    EXPECT_EQ(r.render.thinking_mode, tok::ThinkingMode::kChat);
    EXPECT_FALSE(r.render.reasoning_effort);
    EXPECT_FALSE(r.has_tools);
    EXPECT_EQ(r.messages, parse(R"([{"role": "user", "content": "hi"}])"));
    EXPECT_EQ(r.model, kModel);
}

TEST(OpenAiRequest, NullIsAbsentAndUnknownFieldsAreIgnored) {
    const ChatRequest r = chat(R"("temperature": null, "top_p": null, "stop": null, "seed": 5, "max_tokens": null,
                                  "stream_options": null, "tools": null, "tool_choice": null, "user": "u1",
                                  "metadata": {"a": 1}, "parallel_tool_calls": true, "model": "dsv4-test")");
    EXPECT_EQ(r.options.sampling.temperature, 1.0f);
    EXPECT_EQ(r.options.sampling.seed, 5u);
    EXPECT_FALSE(r.options.max_tokens);
}

TEST(OpenAiRequest, SamplingValuesAndEdges) {
    EXPECT_TRUE(chat(R"("temperature": 0)").options.sampling.greedy);
    EXPECT_TRUE(chat(R"("temperature": 0.0)").options.sampling.greedy);
    const auto hot = chat(R"("temperature": 2, "top_p": 1e-9, "top_k": 50, "min_p": 1, "seed": 42)").options.sampling;
    EXPECT_FALSE(hot.greedy);
    EXPECT_EQ(hot.temperature, 2.0f);
    EXPECT_FLOAT_EQ(hot.top_p, 1e-9f);
    EXPECT_EQ(hot.top_k, 50);
    EXPECT_EQ(hot.min_p, 1.0f);
    EXPECT_EQ(hot.seed, 42u);
    EXPECT_EQ(chat(R"("top_k": -1)").options.sampling.top_k, 0);
    EXPECT_EQ(chat(R"("top_k": 0)").options.sampling.top_k, 0);
    EXPECT_EQ(chat(R"("top_k": 7.0)").options.sampling.top_k, 7) << "an integral float is an integer";
    EXPECT_EQ(chat(R"("min_p": 0)").options.sampling.min_p, 0.0f);
    EXPECT_EQ(chat(R"("seed": -1)").options.sampling.seed, UINT64_MAX);
    EXPECT_EQ(chat(R"("seed": 18446744073709551615)").options.sampling.seed, UINT64_MAX);
    EXPECT_EQ(chat(R"("n": 1)").options.n, 1);
    EXPECT_EQ(chat("").options.n, 1);
    EXPECT_EQ(chat(R"("n": 16)").options.n, 16);
    EXPECT_FALSE(chat(R"("presence_penalty": 0, "frequency_penalty": 0.0, "repetition_penalty": 1,
                         "logit_bias": {})")
                     .options.adjust.any());
    const LogitAdjustments a = chat(R"("presence_penalty": -2, "frequency_penalty": 0.5, "repetition_penalty": 1.2,
                                       "logit_bias": {"5": 10, "0": -100})")
                                   .options.adjust;
    EXPECT_EQ(a.presence_penalty, -2.0f);
    EXPECT_EQ(a.frequency_penalty, 0.5f);
    EXPECT_EQ(a.repetition_penalty, 1.2f);
    EXPECT_EQ(a.logit_bias, (std::vector<std::pair<int32_t, float>>{{5, 10.0f}, {0, -100.0f}}));
}

TEST(OpenAiRequest, SamplingTypeAndRangeErrors) {
    for (const char* v : {"\"1\"", "-0.1", "2.01", "true", "[1]"})
        expect_chat_400(fmt::format(R"("temperature": {})", v), "temperature");
    for (const char* v : {"0", "-0.5", "1.0001", "\"0.5\""}) expect_chat_400(fmt::format(R"("top_p": {})", v), "top_p");
    for (const char* v : {"-2", "1.5", "\"5\"", "{}"}) expect_chat_400(fmt::format(R"("top_k": {})", v), "top_k");
    for (const char* v : {"-0.01", "1.01", "true"}) expect_chat_400(fmt::format(R"("min_p": {})", v), "min_p");
    for (const char* v : {"1.5", "\"7\"", "[7]"}) expect_chat_400(fmt::format(R"("seed": {})", v), "seed");
    for (const char* v : {"17", "0", "-1", "\"1\"", "1.5"}) expect_chat_400(fmt::format(R"("n": {})", v), "n");
    for (const char* v : {"2.01", "-3", "\"0.5\""})
        expect_chat_400(fmt::format(R"("presence_penalty": {})", v), "presence_penalty");
    for (const char* v : {"-2.5", "\"x\""})
        expect_chat_400(fmt::format(R"("frequency_penalty": {})", v), "frequency_penalty");
    for (const char* v : {"0", "-1", "\"1\""})
        expect_chat_400(fmt::format(R"("repetition_penalty": {})", v), "repetition_penalty");
    for (const char* v : {R"({"5": 101})", R"({"x": 1})", R"({"-1": 1})", R"({"5a": 1})", R"({"5": "1"})", "[1]"})
        expect_chat_400(fmt::format(R"("logit_bias": {})", v), "logit_bias");
}

TEST(OpenAiRequest, MaxTokens) {
    EXPECT_EQ(chat(R"("max_tokens": 1)").options.max_tokens, 1);
    EXPECT_EQ(chat(R"("max_tokens": 1024)").options.max_tokens, 1024);
    EXPECT_EQ(chat(R"("max_tokens": 10, "max_completion_tokens": 20)").options.max_tokens, 20);
    EXPECT_EQ(chat(R"("max_completion_tokens": 20, "max_tokens": 10)").options.max_tokens, 20);
    for (const char* v : {"0", "-1", "1025", "\"10\"", "1.5", "true"})
        expect_chat_400(fmt::format(R"("max_tokens": {})", v), "max_tokens");
    expect_chat_400(R"("max_completion_tokens": 0)", "max_completion_tokens");
    expect_chat_400(R"("max_completion_tokens": 2000)", "max_completion_tokens");
    RequestLimits unbounded = kLimits;
    unbounded.max_output = 0;
    EXPECT_EQ(parse_chat_request(chat_body(R"("max_tokens": 1000000)"), unbounded, kModel).options.max_tokens, 1000000);
}

TEST(OpenAiRequest, StopStrings) {
    EXPECT_EQ(chat(R"("stop": "END")").options.stop, std::vector<std::string>{"END"});
    EXPECT_EQ(chat(R"("stop": ["a", "b", "c", "d"])").options.stop, (std::vector<std::string>{"a", "b", "c", "d"}));
    EXPECT_TRUE(chat(R"("stop": [])").options.stop.empty());
    for (const char* v :
         {"5", "[5]", "[\"a\", null]", "\"\"", "[\"a\", \"\"]", "[\"a\", \"b\", \"c\", \"d\", \"e\"]", "{\"a\": 1}"})
        expect_chat_400(fmt::format(R"("stop": {})", v), "stop");
}

// How the Responses and Messages APIs name the chat parser's fields in its 400s (with_fields_renamed): whole path
// parts only, in the param and in the names the message quotes; prose and the rest of a name left alone.
TEST(OpenAiRequest, FieldsRenamedInAnotherApisTerms) {
    using Renamed = std::pair<std::string, std::string>;  // param, message
    constexpr std::array<FieldName, 3> kNames = {
        {{"stop", "stop_sequences"}, {".function.parameters", ".input_schema"}, {".function.", "."}}};
    const auto renamed = [&](const std::string& param, const std::string& message) {
        const ApiError e = with_fields_renamed(ApiError(400, "invalid_request_error", message, param, "c"), kNames);
        EXPECT_EQ(e.status(), 400);
        EXPECT_EQ(e.type(), "invalid_request_error");
        EXPECT_EQ(e.code(), "c");
        return Renamed(e.param(), e.what());
    };
    EXPECT_EQ(renamed("stop", "'stop' must be a string"),
              Renamed("stop_sequences", "'stop_sequences' must be a string"));
    EXPECT_EQ(renamed("stop", "stop strings must not be empty").second, "stop strings must not be empty");
    EXPECT_EQ(renamed("stop[1]", "'stop[1]' is empty").first, "stop_sequences[1]");
    EXPECT_EQ(renamed("stop[1]", "'stop[1]' is empty").second, "'stop_sequences[1]' is empty");
    EXPECT_EQ(renamed("stop_token_ids", "'stop_token_ids' holds 9 ids").first, "stop_token_ids");
    EXPECT_EQ(renamed("stop_token_ids", "'stop_token_ids' holds 9 ids").second, "'stop_token_ids' holds 9 ids");
    EXPECT_EQ(renamed("nonstop", "'nonstop' is not a field").first, "nonstop");
    // In order: the longer name first, then what is left of the shorter one; every occurrence.
    EXPECT_EQ(renamed("tools[0].function.parameters", "'tools[0].function.parameters' uses 'minimum'"),
              Renamed("tools[0].input_schema", "'tools[0].input_schema' uses 'minimum'"));
    EXPECT_EQ(renamed("tools[2].function.name", "'tools[1].function.name' and 'tools[2].function.name' repeat").second,
              "'tools[1].name' and 'tools[2].name' repeat");
    // An unclosed quote renames nothing after it; no quote, nothing in the message.
    EXPECT_EQ(renamed("", "'stop' and 'stop").second, "'stop_sequences' and 'stop");
    EXPECT_EQ(renamed("x", "no quotes: stop").second, "no quotes: stop");
}

TEST(OpenAiRequest, ChatLogprobs) {
    const auto o = chat(R"("logprobs": true, "top_logprobs": 20)").options;
    EXPECT_TRUE(o.logprobs);
    EXPECT_EQ(o.top_logprobs, 20);
    EXPECT_TRUE(chat(R"("logprobs": true)").options.logprobs);
    EXPECT_FALSE(chat(R"("logprobs": false, "top_logprobs": 0)").options.logprobs);
    for (const char* v : {"1", "\"yes\"", "[]"}) expect_chat_400(fmt::format(R"("logprobs": {})", v), "logprobs");
    for (const char* v : {"21", "-1", "\"3\"", "2.5"})
        expect_chat_400(fmt::format(R"("logprobs": true, "top_logprobs": {})", v), "top_logprobs");
    expect_chat_400(R"("top_logprobs": 3)", "top_logprobs");  // without logprobs: true
}

TEST(OpenAiRequest, StreamingOptions) {
    const auto o = chat(R"("stream": true, "stream_options": {"include_usage": true}, "ignore_eos": true)").options;
    EXPECT_TRUE(o.stream);
    EXPECT_TRUE(o.include_usage);
    EXPECT_TRUE(o.ignore_eos);
    EXPECT_FALSE(chat(R"("stream": true, "stream_options": {})").options.include_usage);
    expect_chat_400(R"("stream": "true")", "stream");
    expect_chat_400(R"("stream": true, "stream_options": 5)", "stream_options");
    expect_chat_400(R"("stream_options": {"include_usage": true})", "stream_options");
    expect_chat_400(R"("stream": false, "stream_options": {"include_usage": true})", "stream_options");
    expect_chat_400(R"("stream": true, "stream_options": {"include_usage": "yes"})", "stream_options.include_usage");
    expect_chat_400(R"("ignore_eos": 1)", "ignore_eos");
}

TEST(OpenAiRequest, ModelAndBody) {
    EXPECT_NO_THROW(chat(R"("model": "dsv4-test")"));
    const ApiError e = error_of([] { chat(R"("model": "gpt-4o")"); });
    EXPECT_EQ(e.status(), 404);
    EXPECT_EQ(e.code(), "model_not_found");
    EXPECT_EQ(e.param(), "model");
    expect_chat_400(R"("model": 5)", "model");
    EXPECT_EQ(error_of([] { chat_json(parse("[1, 2]")); }).status(), 400);
    EXPECT_EQ(error_of([] { parse_completion_request(parse("\"x\""), kLimits, kModel); }).status(), 400);
}

TEST(OpenAiRequest, MessageShapes) {
    for (const char* m : {R"("hi")", R"({})", R"([])", R"(null)"}) expect_messages_400(m, "messages");
    expect_400([] { chat_json(parse(R"({"model": "dsv4-test"})")); }, "messages", "missing");
    expect_messages_400(R"([5])", "messages[0]");
    expect_messages_400(R"([{"content": "x"}])", "messages[0].role");
    expect_messages_400(R"([{"role": 5, "content": "x"}])", "messages[0].role");
    expect_messages_400(R"([{"role": "user", "content": 5}])", "messages[0].content");
    expect_messages_400(R"([{"role": "user", "content": {"text": "x"}}])", "messages[0].content");
    expect_messages_400(R"([{"role": "user"}])", "messages[0].content");
    expect_messages_400(R"([{"role": "system", "content": null}, {"role": "user", "content": "x"}])",
                        "messages[0].content");
    expect_messages_400(R"([{"role": "user", "content": "x", "name": 5}])", "messages[0].name");
    expect_messages_400(R"([{"role": "user", "content": ["x"]}])", "messages[0].content[0]");
    expect_messages_400(R"([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}]}])",
                        "messages[0].content[0].type");
    expect_messages_400(R"([{"role": "user", "content": [{"text": "x"}]}])", "messages[0].content[0].type");
    expect_messages_400(R"([{"role": "user", "content": [{"type": "text"}]}])", "messages[0].content[0].text");
    expect_messages_400(R"([{"role": "user", "content": [{"type": "text", "text": 5}]}])",
                        "messages[0].content[0].text");
    // Assistant turns: content may be null; tool_calls in OpenAI's form; reasoning_content a string.
    const std::string user = R"({"role": "user", "content": "q"}, )";
    expect_messages_400("[" + user + R"({"role": "assistant", "content": "a", "reasoning_content": 5}])",
                        "messages[1].reasoning_content");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": "f"}])", "messages[1].tool_calls");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": [5]}])", "messages[1].tool_calls[0]");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": [{"id": "c"}]}])",
                        "messages[1].tool_calls[0].function");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}])",
                        "messages[1].tool_calls[0].function.name");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": [{"function": {"name": "f"}}]}])",
                        "messages[1].tool_calls[0].function.arguments");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": [{"function": {"name": "f",
                        "arguments": 5}}]}])",
                        "messages[1].tool_calls[0].function.arguments");
    expect_messages_400("[" + user + R"({"role": "assistant", "tool_calls": [{"type": "code", "function":
                        {"name": "f", "arguments": "{}"}}]}])",
                        "messages[1].tool_calls[0].type");
    expect_messages_400("[" + user + R"({"role": "tool", "content": "r"}])", "messages[1].tool_call_id");
    expect_messages_400("[" + user + R"({"role": "tool", "content": "r", "tool_call_id": 3}])",
                        "messages[1].tool_call_id");
}

TEST(OpenAiRequest, ListContentIsJoinedLikeThe0731Encoder) {
    const ChatRequest r = chat_json(parse(R"({"messages": [
        {"role": "system", "content": [{"type": "text", "text": "S1"}, {"type": "text", "text": "S2"}]},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "user", "content": []}]})"));
    EXPECT_EQ(r.messages[0]["content"], "S1\n\nS2");
    EXPECT_EQ(r.messages[1]["content"], "a\n\nb");
    EXPECT_EQ(r.messages[2]["content"], "");
    // The renderer of the 0731 era joins list content the same way: the prompt does not change.
    const ordered_json raw = parse(R"([{"role": "user", "content": [{"type": "text", "text": "a"},
                                                                    {"type": "text", "text": "b"}]}])");
    const ordered_json joined = chat_json(parse(R"({"messages": )" + raw.dump() + "}")).messages;
    EXPECT_EQ(tok::render_prompt(joined, {}), tok::render_prompt(raw, {}));
    tok::RenderOptions preview;
    preview.era = tok::EncoderEra::kPreview;
    EXPECT_NO_THROW(tok::render_prompt(joined, preview)) << "the preview encoder takes only string content";
}

TEST(OpenAiRequest, AssistantToolCallRoundTripRenders) {
    const ChatRequest r = chat_json(parse(R"({"messages": [
        {"role": "user", "content": "Weather in Rome?"},
        {"role": "assistant", "content": null, "reasoning": "need a tool", "tool_calls": [{"id": "call_1",
         "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Rome\"}"}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
        "thinking": true})"));
    EXPECT_EQ(r.messages.size(), 4u);  // a system message holding the tools in front
    EXPECT_EQ(r.messages[2]["reasoning_content"], "need a tool") << "vLLM's `reasoning` is read as reasoning_content";
    const std::string prompt = tok::render_prompt(r.messages, r.render);
    EXPECT_NE(prompt.find("<｜DSML｜invoke name=\"get_weather\">"), std::string::npos) << prompt;
    EXPECT_NE(prompt.find("<tool_result>sunny</tool_result>"), std::string::npos) << prompt;
}

TEST(OpenAiRequest, ThinkingAndEffortTable) {
    using tok::ThinkingMode;
    struct Row {
        const char* fields;
        ThinkingMode mode;
        std::optional<std::string> effort;
    };
    const ThinkingMode chat_mode = ThinkingMode::kChat, think = ThinkingMode::kThinking;
    const Row rows[] = {
        {"", chat_mode, std::nullopt},  // our default: chat mode, unlike vLLM's
        {R"("thinking": true)", think, std::nullopt},
        {R"("thinking": false)", chat_mode, std::nullopt},
        {R"("thinking": {"type": "enabled", "budget_tokens": 100})", think, std::nullopt},
        {R"("thinking": {"type": "disabled"})", chat_mode, std::nullopt},
        {R"("chat_template_kwargs": {"thinking": true})", think, std::nullopt},
        {R"("chat_template_kwargs": {"enable_thinking": true})", think, std::nullopt},
        {R"("chat_template_kwargs": {"thinking": false, "enable_thinking": true})", think, std::nullopt},
        {R"("chat_template_kwargs": {"thinking": false, "enable_thinking": false})", chat_mode, std::nullopt},
        {R"("chat_template_kwargs": {"thinking": null, "other": 1})", chat_mode, std::nullopt},
        // §3.8's effort mapping when thinking is on.
        {R"("thinking": true, "reasoning_effort": "max")", think, "max"},
        {R"("thinking": true, "reasoning_effort": "high")", think, "high"},
        {R"("thinking": true, "reasoning_effort": "xhigh")", think, "high"},
        {R"("thinking": true, "reasoning_effort": "")", think, "high"},
        {R"("thinking": true, "reasoning_effort": "medium")", think, "low"},
        {R"("thinking": true, "reasoning_effort": "low")", think, "low"},
        {R"("thinking": true, "reasoning_effort": "minimal")", think, "low"},
        {R"("thinking": true, "reasoning_effort": "none")", chat_mode, std::nullopt},
        {R"("thinking": true, "reasoning_effort": null)", think, std::nullopt},
        {R"("chat_template_kwargs": {"enable_thinking": true}, "reasoning_effort": "max")", think, "max"},
        // An explicit "off" wins over an effort; with no switch, an effort (other than "none") turns thinking on.
        {R"("thinking": false, "reasoning_effort": "max")", chat_mode, std::nullopt},
        {R"("chat_template_kwargs": {"thinking": false}, "reasoning_effort": "high")", chat_mode, std::nullopt},
        {R"("reasoning_effort": "high")", think, "high"},
        {R"("reasoning_effort": "low")", think, "low"},
        {R"("reasoning_effort": "none")", chat_mode, std::nullopt},
        {R"("reasoning_effort": null)", chat_mode, std::nullopt},
    };
    for (const Row& row : rows) {
        const ChatRequest r = chat(row.fields);
        EXPECT_EQ(r.render.thinking_mode, row.mode) << row.fields;
        EXPECT_EQ(r.render.reasoning_effort, row.effort) << row.fields;
    }
    expect_chat_400(R"("thinking": "yes")", "thinking");
    expect_chat_400(R"("thinking": 1)", "thinking");
    expect_chat_400(R"("thinking": {"type": "maybe"})", "thinking.type");
    expect_chat_400(R"("thinking": {})", "thinking.type");
    expect_chat_400(R"("chat_template_kwargs": 5)", "chat_template_kwargs");
    expect_chat_400(R"("chat_template_kwargs": {"thinking": "yes"})", "chat_template_kwargs.thinking");
    expect_chat_400(R"("chat_template_kwargs": {"enable_thinking": 1})", "chat_template_kwargs.enable_thinking");
    expect_chat_400(R"("reasoning_effort": 5)", "reasoning_effort");
    expect_chat_400(R"("reasoning_effort": true)", "reasoning_effort");
}

const char* kTools = R"("tools": [{"type": "function", "function": {"name": "get_weather", "description": "d",
    "parameters": {"type": "object", "properties": {"z": {"type": "string"}, "a": {"type": "integer"}}}}},
    {"type": "function", "function": {"name": "search"}}])";

TEST(OpenAiRequest, ToolsAttachAsVllmDoes) {
    const ordered_json tools = parse(std::string("{") + kTools + "}")["tools"];
    // messages[0] is a user turn: a contentless system message holding the tools goes in front.
    ChatRequest r = chat(kTools);
    EXPECT_TRUE(r.has_tools);
    ASSERT_EQ(r.messages.size(), 2u);
    EXPECT_EQ(r.messages[0].dump(), ordered_json({{"role", "system"}, {"tools", tools}}).dump());
    EXPECT_EQ(r.messages[1], parse(R"({"role": "user", "content": "hi"})"));
    EXPECT_EQ(r.messages[0]["tools"][0]["function"]["parameters"]["properties"].begin().key(), "z")
        << "keys keep the client's order (they reach the prompt)";
    // messages[0] is system or developer: the tools replace any it carries.
    for (const char* role : {"system", "developer"}) {
        r = chat_json(parse(fmt::format(R"({{"messages": [{{"role": "{}", "content": "S", "tools": [1]}},
                                       {{"role": "user", "content": "hi"}}], {}}})",
                                        role, kTools)));
        ASSERT_EQ(r.messages.size(), 2u) << role;
        EXPECT_EQ(r.messages[0]["role"], role);
        EXPECT_EQ(r.messages[0]["content"], "S");
        EXPECT_EQ(r.messages[0]["tools"], tools) << role;
    }
    // No tools, or an empty list: nothing attached.
    EXPECT_FALSE(chat(R"("tools": [])").has_tools);
    EXPECT_EQ(chat(R"("tools": [])").messages.size(), 1u);
}

TEST(OpenAiRequest, ToolChoice) {
    const ChatRequest none = chat(std::string(kTools) + R"(, "tool_choice": "none")");
    EXPECT_FALSE(none.has_tools);
    EXPECT_EQ(none.messages, parse(R"([{"role": "user", "content": "hi"}])")) << "tool_choice none renders no tools";
    EXPECT_TRUE(chat(std::string(kTools) + R"(, "tool_choice": "auto")").has_tools);
    EXPECT_TRUE(chat(std::string(kTools) + R"(, "tool_choice": "required")").has_tools);
    EXPECT_TRUE(chat(std::string(kTools) + R"(, "tool_choice": {"type": "function", "function": {"name": "search"}})")
                    .has_tools);
    EXPECT_FALSE(chat(R"("tool_choice": "auto")").has_tools);
    EXPECT_FALSE(chat(R"("tool_choice": "none")").has_tools);
    const std::string t = std::string(kTools) + ", ";
    expect_chat_400(t + R"("tool_choice": {"type": "function", "function": {"name": "missing"}})", "tool_choice");
    expect_chat_400(R"("tool_choice": {"type": "function", "function": {"name": "search"}})", "tool_choice");
    expect_chat_400(t + R"("tool_choice": {"type": "function", "function": {}})", "tool_choice.function.name");
    expect_chat_400(t + R"("tool_choice": {"type": "function"})", "tool_choice.function.name");
    expect_chat_400(t + R"("tool_choice": {"type": "function", "function": 5})", "tool_choice.function");
    expect_chat_400(t + R"("tool_choice": {"function": {"name": "search"}})", "tool_choice.type");
    expect_chat_400(t + R"("tool_choice": "any")", "tool_choice");
    expect_chat_400(t + R"("tool_choice": 5)", "tool_choice");
    expect_chat_400(R"("tool_choice": "required")", "tool_choice");  // required without tools
}

TEST(OpenAiRequest, ToolTypeErrors) {
    expect_chat_400(R"("tools": {})", "tools");
    expect_chat_400(R"("tools": [5])", "tools[0]");
    expect_chat_400(R"("tools": [{"type": "function"}])", "tools[0].function");
    expect_chat_400(R"("tools": [{"type": "function", "function": "f"}])", "tools[0].function");
    expect_chat_400(R"("tools": [{"type": "retrieval", "function": {"name": "f"}}])", "tools[0].type");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": ""}}])", "tools[0].function.name");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": 5}}])", "tools[0].function.name");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": "f", "parameters": "x"}}])",
                    "tools[0].function.parameters");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": "f", "description": 1}}])",
                    "tools[0].function.description");
}

// Spec vector tools_on_contentless_system, reached from an OpenAI request: the request-level tools, thinking on
// and effort "high" give the encoder's prompt byte for byte (the tool schema keeps its key order).
TEST(OpenAiRequest, ToolsOnContentlessSystemSpecVector) {
    std::ifstream in(std::string(DSV4_SOURCE_DIR) + "/tests/tokenizer/data/encoding_vectors.json");
    ASSERT_TRUE(in.good());
    std::stringstream text;
    text << in.rdbuf();
    const ordered_json vectors = ordered_json::parse(text.str());
    const ordered_json* vector = nullptr;
    for (const ordered_json& v : vectors["encoding"])
        if (v["name"] == "tools_on_contentless_system") vector = &v;
    ASSERT_NE(vector, nullptr);
    const std::string body = R"({"messages": [{"role": "user", "content": "Weather in Rome?"}], "tools": )" +
                             (*vector)["tools"].dump() + R"(, "thinking": true, "reasoning_effort": "high"})";
    const ChatRequest r = parse_chat_request(parse_json_body(body), kLimits, kModel);
    EXPECT_EQ(tok::render_prompt(r.messages, r.render), (*vector)["expected_prompt"].get<std::string>());
}

// A reply may continue the last message, an assistant's partial content: DeepSeek's "prefix", vLLM's
// "continue_final_message", the encoder's "wo_eos". The prompt ends with that content (its reasoning closed in
// thinking mode); a conversation ending with an assistant message without one of these is refused.
// vLLM's extras: stop_token_ids, min_tokens, guided_json and guided_choice (or structured_outputs) are honoured; the
// ones this server does not honour are 400s when they ask for anything, never silently ignored.
TEST(OpenAiRequest, VllmExtrasAreHonouredOrRefused) {
    const ChatRequest r = chat(R"("stop_token_ids": [5, 7], "min_tokens": 3, "max_tokens": 8)");
    EXPECT_EQ(r.options.stop_token_ids, (std::vector<int32_t>{5, 7}));
    EXPECT_EQ(r.options.min_tokens, 3);
    EXPECT_EQ(completion(R"("prompt": "x", "min_tokens": 2)").options.min_tokens, 2);
    expect_chat_400(R"("stop_token_ids": [-1])", "stop_token_ids");
    expect_chat_400(R"("stop_token_ids": [1000000])", "stop_token_ids");
    expect_chat_400(R"("stop_token_ids": ["a"])", "stop_token_ids");
    expect_chat_400(R"("stop_token_ids": 5)", "stop_token_ids");
    expect_chat_400(R"("min_tokens": -1)", "min_tokens");
    expect_chat_400(R"("min_tokens": 9, "max_tokens": 8)", "min_tokens");
    EXPECT_TRUE(chat(R"("include_stop_str_in_output": true)").options.include_stop_str);
    EXPECT_FALSE(chat("").options.include_stop_str);
    expect_chat_400(R"("include_stop_str_in_output": "yes")", "include_stop_str_in_output");
    EXPECT_EQ(chat(R"("truncate_prompt_tokens": 7)").options.truncate_prompt_tokens, 7);
    EXPECT_EQ(chat(R"("truncate_prompt_tokens": -1)").options.truncate_prompt_tokens, -1);
    EXPECT_EQ(chat("").options.truncate_prompt_tokens, 0);
    for (const char* t : {"0", "-2", "1.5", "\"5\""})
        expect_chat_400(fmt::format(R"("truncate_prompt_tokens": {})", t), "truncate_prompt_tokens");
    expect_completion_400(R"("prompt": "x", "echo": true, "truncate_prompt_tokens": 3)", "truncate_prompt_tokens");
    EXPECT_EQ(chat(R"("bad_words": ["foo", " bar baz"])").options.bad_words,
              (std::vector<std::string>{"foo", " bar baz"}));
    for (const char* words : {"[\"\"]", "[\"  \"]", "[1]", "\"foo\"", "[null]"})
        expect_chat_400(fmt::format(R"("bad_words": {})", words), "bad_words");
    EXPECT_EQ(chat(R"("allowed_token_ids": [9, 3, 9, 0])").options.adjust.allowed_ids, (std::vector<int32_t>{0, 3, 9}))
        << "sorted, once each";
    for (const char* ids : {"[]", "[-1]", "[129280]", "[1.5]", "5", "[\"1\"]", "[18446744073709551615]"})
        expect_chat_400(fmt::format(R"("allowed_token_ids": {})", ids), "allowed_token_ids");
    expect_chat_400(R"("allowed_token_ids": [1], "response_format": {"type": "json_object"})", "allowed_token_ids");
    expect_chat_400(R"("allowed_token_ids": [1], "tools": [{"type": "function", "function": {"name": "f"}}],
                       "tool_choice": "required")",
                    "allowed_token_ids");

    const std::string schema = R"({"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]})";
    for (const std::string& fields : {R"("guided_json": )" + schema, R"("guided_json": )" + ordered_json(schema).dump(),
                                      R"("structured_outputs": {"json": )" + schema + "}"}) {
        const ChatRequest g = chat(fields);
        EXPECT_EQ(g.options.response_format, ResponseFormat::kJsonSchema) << fields;
        ASSERT_NE(g.options.schema, nullptr);
        EXPECT_EQ(g.options.schema->nodes[size_t(g.options.schema->root)].keys, std::vector<std::string>{"x"});
    }
    expect_chat_400(R"("guided_json": {"type": "string", "pattern": "a"})", "guided_json");
    expect_chat_400(R"("guided_json": "{not json")", "guided_json");
    expect_chat_400(R"("guided_json": {}, "response_format": {"type": "json_object"})", "guided_json");
    expect_chat_400(R"("structured_outputs": {"regex": "a+"})", "structured_outputs.regex");
    for (const std::string& fields : {std::string(R"("guided_choice": ["yes", "no", "yes"])"),
                                      std::string(R"("structured_outputs": {"choice": ["yes", "no"]})")}) {
        const ChatRequest c = chat(fields);
        EXPECT_EQ(c.options.response_format, ResponseFormat::kChoice) << fields;
        ASSERT_NE(c.options.choices, nullptr);
        EXPECT_EQ(c.options.choices->choices(), (std::vector<std::string>{"no", "yes"})) << "sorted, once each";
    }
    expect_chat_400(R"("guided_choice": [])", "guided_choice");
    expect_chat_400(R"("guided_choice": ["a", 1])", "guided_choice");
    expect_chat_400(R"("guided_choice": "a")", "guided_choice");
    expect_chat_400(R"("guided_choice": ["a"], "guided_json": {})", "guided_json");
    expect_chat_400(R"("guided_choice": ["a"], "ignore_eos": true)", "ignore_eos");
    for (const char* refused : {R"("guided_regex": "a+")", R"("guided_grammar": "g")", R"("prompt_logprobs": 1)",
                                R"("use_beam_search": true)", R"("logits_processors": ["p"])"}) {
        const std::string field = std::string(refused).substr(1, std::string(refused).find('"', 1) - 1);
        expect_chat_400(refused, field);
    }
    EXPECT_NO_THROW(chat(R"("include_stop_str_in_output": false, "use_beam_search": false, "bad_words": [],
                            "guided_regex": null)"))
        << "their defaults ask for nothing";
}

// vLLM's /tokenize: a text prompt (BOS unless add_special_tokens is false) or a chat body, validated as
// /v1/chat/completions validates it; /detokenize: ids in the vocabulary.
TEST(OpenAiRequest, TokenizeAndDetokenize) {
    const TokenizeRequest text = parse_tokenize_request(parse(R"({"prompt": "hi"})"), kLimits, kModel);
    EXPECT_EQ(text.prompt_text, "hi");
    EXPECT_TRUE(text.add_bos);
    EXPECT_FALSE(text.chat.has_value());
    EXPECT_FALSE(
        parse_tokenize_request(parse(R"({"prompt": "hi", "add_special_tokens": false})"), kLimits, kModel).add_bos);
    const TokenizeRequest chat = parse_tokenize_request(
        parse(R"({"messages": [{"role": "user", "content": "q"}], "thinking": true})"), kLimits, kModel);
    ASSERT_TRUE(chat.chat.has_value());
    EXPECT_EQ(chat.chat->render.thinking_mode, tok::ThinkingMode::kThinking);
    expect_400([&] { parse_tokenize_request(parse("{}"), kLimits, kModel); }, "prompt", "neither prompt nor messages");
    expect_400([&] { parse_tokenize_request(parse(R"({"prompt": 5})"), kLimits, kModel); }, "prompt", "a number");
    expect_400([&] { parse_tokenize_request(parse(R"({"messages": []})"), kLimits, kModel); }, "messages", "empty");
    EXPECT_EQ(error_of([&] {
                  parse_tokenize_request(parse(R"({"prompt": "x", "model": "other"})"), kLimits, kModel);
              }).status(),
              404);
    EXPECT_EQ(parse_detokenize_request(parse(R"({"tokens": [1, 2]})"), kLimits, kModel), (std::vector<int32_t>{1, 2}));
    expect_400([&] { parse_detokenize_request(parse(R"({"tokens": [-1]})"), kLimits, kModel); }, "tokens", "negative");
    expect_400([&] { parse_detokenize_request(parse("{}"), kLimits, kModel); }, "tokens", "missing");
    EXPECT_EQ(tokenize_response({3, 4}, 64).dump(),
              R"({"count":2,"max_model_len":64,"tokens":[3,4],"token_strs":null})");
    EXPECT_EQ(detokenize_response("ab").dump(), R"({"prompt":"ab"})");
}

TEST(OpenAiRequest, APrefixAssistantMessageIsContinued) {
    const std::string turns =
        R"({"role": "user", "content": "Write code"}, {"role": "assistant", "content": "```py\n")";
    for (const std::string& body :
         {R"({"messages": [)" + turns + R"(, "prefix": true}]})",
          R"({"messages": [)" + turns + R"(}], "continue_final_message": true, "add_generation_prompt": false})",
          R"({"messages": [)" + turns + R"(, "wo_eos": true}]})"}) {
        const ChatRequest r = chat_json(parse(body));
        EXPECT_TRUE(r.continues_final) << body;
        const std::string prompt = tok::render_prompt(r.messages, r.render);
        EXPECT_TRUE(prompt.ends_with("<｜User｜>Write code<｜Assistant｜></think>```py\n")) << prompt;
    }
    const ChatRequest thinking = chat_json(
        parse(R"({"messages": [)" + turns + R"(, "reasoning_content": "Plan.", "prefix": true}], "thinking": true})"));
    EXPECT_TRUE(
        tok::render_prompt(thinking.messages, thinking.render).ends_with("<｜Assistant｜><think>Plan.</think>```py\n"));
    EXPECT_FALSE(chat("").continues_final);
    expect_messages_400("[" + turns + "}]", "messages[1]");
    expect_messages_400("[" + turns + R"(, "prefix": "yes"}])", "messages[1].prefix");
    expect_messages_400(R"([{"role": "user", "content": "q", "prefix": true}])", "messages[0].prefix");
    expect_messages_400("[" + turns + R"(, "prefix": true}, {"role": "user", "content": "x"}])", "messages[1].prefix");
    expect_messages_400("[" + turns + R"(, "prefix": true, "tool_calls": [{"type": "function", "function":
        {"name": "f", "arguments": "{}"}}]}])",
                        "messages[1].tool_calls");
    expect_400(
        [&] {
            chat_json(parse(R"({"messages": [{"role": "user", "content": "q"}], "continue_final_message": true})"));
        },
        "continue_final_message", "continue_final_message after a user message");
    expect_400(
        [&] {
            chat_json(parse(R"({"messages": [{"role": "user", "content": "q"}], "add_generation_prompt": false})"));
        },
        "add_generation_prompt", "no cue");
    expect_400(
        [&] {
            chat_json(parse(R"({"messages": [)" + turns +
                            R"(, "prefix": true}], "response_format": {"type": "json_object"}})"));
        },
        "response_format", "a prefix and a response_format");
}

TEST(OpenAiRequest, ToolChoiceStrictToolsAndOneCallMakeTheToolCallsEnforced) {
    const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}},
                                           {"type": "function", "function": {"name": "g"}}])";
    const auto grammar = [](const std::string& extra) { return chat(extra).options.tool_calls; };
    using Start = ToolCallGrammar::Start;
    EXPECT_EQ(grammar(tools), nullptr) << "auto: the model's own calls";
    EXPECT_EQ(grammar(tools + R"(, "tool_choice": "none")"), nullptr);
    const auto required = grammar(tools + R"(, "tool_choice": "required")");
    ASSERT_NE(required, nullptr);
    EXPECT_EQ(required->start(), Start::kAtOnce);
    ASSERT_EQ(required->tools().size(), 2u);
    EXPECT_EQ(required->tools()[1].name, "g");
    EXPECT_EQ(required->parameters(1).additional, 0) << "not strict: any arguments";
    const auto named = grammar(tools + R"(, "tool_choice": {"type": "function", "function": {"name": "g"}})");
    ASSERT_NE(named, nullptr);
    ASSERT_EQ(named->tools().size(), 1u);
    EXPECT_EQ(named->tools()[0].name, "g");
    EXPECT_FALSE(named->one_call());
    const auto one = grammar(tools + R"(, "parallel_tool_calls": false)");
    ASSERT_NE(one, nullptr);
    EXPECT_TRUE(one->one_call());
    EXPECT_EQ(one->start(), Start::kAfterContent);
    EXPECT_EQ(grammar(R"("parallel_tool_calls": false)"), nullptr) << "no tools, no calls";
    expect_chat_400(R"("parallel_tool_calls": "no")", "parallel_tool_calls");
    expect_chat_400(tools + R"(, "parallel_tool_calls": false, "ignore_eos": true)", "ignore_eos");
    expect_chat_400(tools + R"(, "tool_choice": "required", "ignore_eos": true)", "ignore_eos");

    // A strict tool's parameters are enforced from its schema, under "auto" too (once a block begins).
    const std::string strict = R"("tools": [{"type": "function", "function": {"name": "w", "strict": true,
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                       "additionalProperties": false}}}, {"type": "function", "function": {"name": "f"}}])";
    const auto s = grammar(strict);
    ASSERT_NE(s, nullptr);
    EXPECT_EQ(s->start(), Start::kAfterContent);
    ASSERT_EQ(s->tools()[1].name, "w");
    EXPECT_EQ(s->parameters(1).keys, std::vector<std::string>{"city"});
    EXPECT_EQ(s->parameters(1).additional, SchemaNode::kNone);
    EXPECT_EQ(grammar(strict + R"(, "tool_choice": "none")"), nullptr);
    const auto no_parameters = grammar(R"("tools": [{"type": "function", "function": {"name": "p", "strict": true}}])");
    ASSERT_NE(no_parameters, nullptr);
    EXPECT_TRUE(no_parameters->parameters(0).keys.empty());
    EXPECT_EQ(no_parameters->parameters(0).additional, SchemaNode::kNone) << "strict without parameters: none";
    EXPECT_EQ(grammar(R"("tools": [{"type": "function", "function": {"name": "p", "strict": null}}])"), nullptr);
    // What a strict schema holds outside the subset, and names DSML cannot write, are refused, not ignored.
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": "w", "strict": true,
        "parameters": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}}}}])",
                    "tools[0].function.parameters");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": "w", "strict": true,
        "parameters": {"type": "array"}}}])",
                    "tools");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": "a\"b"}}], "tool_choice": "required")",
                    "tools");
    expect_chat_400(R"("tools": [{"type": "function", "function": {"name": "w", "strict": "yes"}}])",
                    "tools[0].function.strict");
    EXPECT_EQ(grammar(R"("tools": [{"type": "function", "function": {"name": "a\"b"}}])"), nullptr)
        << "auto without strict tools: nothing to write";
    // Output we cannot make is refused, not ignored.
    EXPECT_NO_THROW(chat(R"("modalities": ["text"])"));
    expect_chat_400(R"("modalities": ["text", "audio"])", "modalities");
    expect_chat_400(R"("audio": {"voice": "alloy", "format": "wav"})", "audio");
}

TEST(OpenAiRequest, ResponseFormat) {
    EXPECT_EQ(chat("").options.response_format, ResponseFormat::kText);
    EXPECT_EQ(chat(R"("response_format": null)").options.response_format, ResponseFormat::kText);
    EXPECT_EQ(chat(R"("response_format": {"type": "text"})").options.response_format, ResponseFormat::kText);
    EXPECT_EQ(chat(R"("response_format": {"type": "json_object"})").options.response_format,
              ResponseFormat::kJsonObject);
    EXPECT_EQ(completion(R"("prompt": "x", "response_format": {"type": "json_object"})").options.response_format,
              ResponseFormat::kJsonObject);
    const ChatRequest schema = chat(
        R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "strict": true, "schema": {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"], "additionalProperties": false}}})");
    EXPECT_EQ(schema.options.response_format, ResponseFormat::kJsonSchema);
    ASSERT_NE(schema.options.schema, nullptr);
    EXPECT_EQ(schema.options.schema->nodes[size_t(schema.options.schema->root)].keys, std::vector<std::string>{"x"});
    // What the subset does not hold is refused rather than ignored (it would not be enforced).
    expect_chat_400(
        R"("response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "string", "pattern": "a+"}}})",
        "response_format.json_schema.schema");
    expect_chat_400(R"("response_format": {"type": "json_schema"})", "response_format.json_schema");
    expect_chat_400(R"("response_format": {"type": "json_schema", "json_schema": {"name": "a"}})",
                    "response_format.json_schema.schema");
    expect_chat_400(R"("response_format": {"type": "json_schema", "json_schema": {"name": 5, "schema": {}}})",
                    "response_format.json_schema.name");
    expect_chat_400(R"("response_format": {"type": "yaml"})", "response_format.type");
    expect_chat_400(R"("response_format": {"type": 1})", "response_format.type");
    expect_chat_400(R"("response_format": {})", "response_format.type");
    expect_chat_400(R"("response_format": "json_object")", "response_format");
    expect_chat_400(R"("response_format": {"type": "json_object"}, "ignore_eos": true)", "ignore_eos");
    // With tools the reply could be tool calls: refused unless tool_choice is "none".
    const std::string tools = R"("tools": [{"type": "function", "function": {"name": "f"}}])";
    expect_chat_400(tools + R"(, "response_format": {"type": "json_object"})", "response_format");
    EXPECT_EQ(
        chat(tools + R"(, "tool_choice": "none", "response_format": {"type": "json_object"})").options.response_format,
        ResponseFormat::kJsonObject);
}

TEST(OpenAiRequest, CompletionPromptForms) {
    auto one = [](const std::string& fields) {
        const CompletionRequest r = completion(fields);
        EXPECT_EQ(r.prompts.size(), 1u) << fields;
        return r.prompts.at(0);
    };
    EXPECT_EQ(one(R"("prompt": "Once")").text, "Once");
    EXPECT_EQ(one(R"("prompt": ["Once"])").text, "Once");
    EXPECT_EQ(one(R"("prompt": [0, 5, 129279])").ids, (std::vector<int32_t>{0, 5, 129279}));
    EXPECT_FALSE(one(R"("prompt": [7])").text);
    EXPECT_EQ(one(R"("prompt": [[3, 4]])").ids, (std::vector<int32_t>{3, 4}));
    EXPECT_TRUE(one(R"("prompt": "x")").ids.empty());
    // Several prompts, in order: strings and id arrays, mixed as OpenAI's and vLLM's servers take them.
    const CompletionRequest several = completion(R"("prompt": ["a", [1, 2], "b c"])");
    ASSERT_EQ(several.prompts.size(), 3u);
    EXPECT_EQ(several.prompts[0].text, "a");
    EXPECT_EQ(several.prompts[1].ids, (std::vector<int32_t>{1, 2}));
    EXPECT_FALSE(several.prompts[1].text);
    EXPECT_EQ(several.prompts[2].text, "b c");
    EXPECT_EQ(completion(R"("prompt": [[1], [2]])").prompts.size(), 2u);
    for (const char* p : {"\"\"", "[]", "[\"\"]", "[1, \"a\"]", "[1.5]", "[-1]", "[129280]", "[18446744073709551615]",
                          "5", "{\"a\": 1}", "true", "[[]]", "[null]"})
        expect_completion_400(fmt::format(R"("prompt": {})", p), "prompt");
    // An element of several that is wrong is named by its index.
    for (const char* p :
         {"[\"a\", \"\"]", "[\"a\", []]", "[\"a\", 5]", "[[1], [[2]]]", "[\"a\", [129280]]", "[\"a\", null]"})
        expect_completion_400(fmt::format(R"("prompt": {})", p), "prompt[1]");
    std::string many = "[";
    for (int i = 0; i <= kLimits.max_prompts; ++i) many += i ? ", \"x\"" : "\"x\"";
    expect_completion_400(R"("prompt": )" + many + "]", "prompt");
    EXPECT_EQ(completion(R"("prompt": )" + many.substr(0, many.size() - 5) + "]").prompts.size(),
              size_t(kLimits.max_prompts));
    expect_completion_400(R"("max_tokens": 5)", "prompt");  // missing
}

TEST(OpenAiRequest, CompletionFields) {
    const auto r = completion(R"("prompt": "x", "logprobs": 5, "echo": false, "suffix": "", "best_of": 1,
                                 "max_tokens": 16, "stop": ["\n"], "temperature": 0)");
    EXPECT_TRUE(r.options.logprobs);
    EXPECT_EQ(r.options.top_logprobs, 5);
    EXPECT_EQ(r.options.max_tokens, 16);
    EXPECT_EQ(r.options.stop, std::vector<std::string>{"\n"});
    EXPECT_TRUE(r.options.sampling.greedy);
    EXPECT_FALSE(r.echo);
    const auto zero = completion(R"("prompt": "x", "logprobs": 0)").options;
    EXPECT_TRUE(zero.logprobs);
    EXPECT_EQ(zero.top_logprobs, 0);
    EXPECT_EQ(completion(R"("prompt": "x", "logprobs": 20)").options.top_logprobs, 20);
    EXPECT_FALSE(completion(R"("prompt": "x", "logprobs": null)").options.logprobs);
    for (const char* v : {"21", "-1", "true", "\"2\""})
        expect_completion_400(fmt::format(R"("prompt": "x", "logprobs": {})", v), "logprobs");
    EXPECT_TRUE(completion(R"("prompt": "x", "echo": true)").echo);
    EXPECT_EQ(completion(R"("prompt": "x", "echo": true, "max_tokens": 0)").options.max_tokens, 0)
        << "an echo may only score its prompt";
    expect_completion_400(R"("prompt": "x", "echo": false, "max_tokens": 0)", "max_tokens");
    expect_completion_400(R"("prompt": "x", "echo": "no")", "echo");
    expect_completion_400(R"("prompt": "x", "suffix": "end")", "suffix");
    expect_completion_400(R"("prompt": "x", "suffix": 5)", "suffix");
    expect_completion_400(R"("prompt": "x", "best_of": 2)", "best_of");  // best of more choices than n
    EXPECT_EQ(completion(R"("prompt": "x", "n": 3, "best_of": 3)").options.n, 3);
    expect_completion_400(R"("prompt": "x", "n": 3, "best_of": 4)", "best_of");
    expect_completion_400(R"("prompt": "x", "n": 17)", "n");
    expect_completion_400(R"("prompt": "x", "max_tokens": 0)", "max_tokens");
    expect_completion_400(R"("prompt": "x", "stream_options": {"include_usage": true})", "stream_options");
    EXPECT_EQ(error_of([] { completion(R"("prompt": "x", "model": "other")"); }).status(), 404);
}

TEST(OpenAiRequest, JsonBody) {
    const ordered_json body = parse_json_body(R"({"z": 1, "a": {"y": 2, "b": 3}})");
    EXPECT_EQ(body.begin().key(), "z") << "the client's key order is kept";
    EXPECT_EQ(body["a"].begin().key(), "y");
    for (const char* text : {"", "{", "{\"a\": }", "[1]", "\"x\"", "null", "{\"a\": \"\xff\"}", "\xff\xfe"}) {
        const ApiError e = error_of([&] { parse_json_body(text); });
        EXPECT_EQ(e.status(), 400) << text;
        EXPECT_NO_THROW(e.to_json().dump()) << "the error must be valid UTF-8 JSON for: " << text;
    }
    std::string deep = R"({"a": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
    EXPECT_EQ(error_of([&] { parse_json_body(deep); }).status(), 400);
    const std::string ok = R"({"a": )" + std::string(100, '[') + std::string(100, ']') + "}";
    EXPECT_NO_THROW(parse_json_body(ok));
}

TEST(OpenAiRequest, ContextBudget) {
    GenerationOptions o;
    EXPECT_EQ(resolve_max_tokens(10, o, kLimits, "messages"), 1024);  // max_output bounds it
    EXPECT_EQ(resolve_max_tokens(4000, o, kLimits, "messages"), 96);  // the context does
    EXPECT_EQ(resolve_max_tokens(4095, o, kLimits, "messages"), 1);
    ApiError e = error_of([&] { resolve_max_tokens(4096, o, kLimits, "prompt"); });
    EXPECT_EQ(e.status(), 400);
    EXPECT_EQ(e.param(), "prompt");
    EXPECT_EQ(e.code(), "context_length_exceeded");
    o.max_tokens = 96;
    EXPECT_EQ(resolve_max_tokens(4000, o, kLimits, "messages"), 96);
    o.max_tokens = 97;
    e = error_of([&] { resolve_max_tokens(4000, o, kLimits, "messages"); });
    EXPECT_EQ(e.param(), "max_tokens");
    EXPECT_EQ(e.code(), "context_length_exceeded");
    EXPECT_NE(std::string(e.what()).find("4096"), std::string::npos) << e.what();
}

TEST(OpenAiRequest, ApiErrorJson) {
    EXPECT_EQ(ApiError(400, "invalid_request_error", "bad", "temperature").to_json().dump(),
              parse(R"({"error": {"message": "bad", "type": "invalid_request_error", "param": "temperature",
                                  "code": null}})")
                  .dump());
    EXPECT_EQ(ApiError(404, "invalid_request_error", "no", "model", "model_not_found").to_json().dump(),
              parse(R"({"error": {"message": "no", "type": "invalid_request_error", "param": "model",
                                  "code": "model_not_found"}})")
                  .dump());
    EXPECT_EQ(ApiError(503, "service_unavailable", "busy").to_json().dump(),
              parse(R"({"error": {"message": "busy", "type": "service_unavailable", "param": null,
                                  "code": null}})")
                  .dump());
    EXPECT_NO_THROW(ApiError(400, "x", "bad byte \xff", "p\xfe").to_json().dump());
}

// Any value in any field: parse_* answers with a request or an ApiError, never with another exception.
TEST(OpenAiRequest, RandomBodiesThrowOnlyApiError) {
    const std::vector<std::string> values = {"null",
                                             "true",
                                             "false",
                                             "0",
                                             "-1",
                                             "1",
                                             "2",
                                             "0.5",
                                             "-3.5",
                                             "1e300",
                                             "18446744073709551615",
                                             "-9223372036854775808",
                                             "\"\"",
                                             "\"x\"",
                                             "\"none\"",
                                             "\"auto\"",
                                             "[]",
                                             "[1]",
                                             "[\"a\"]",
                                             "[[1]]",
                                             "{}",
                                             "{\"type\": \"function\"}",
                                             "{\"include_usage\": 1}",
                                             "[{\"role\": \"user\", \"content\": [1]}]",
                                             "[{\"role\": \"assistant\", \"tool_calls\": [{\"function\": 1}]}]",
                                             "{\"thinking\": [1]}",
                                             "[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]",
                                             "{\"function\": {\"name\": 1}}",
                                             "{\"type\": \"json_object\"}"};
    const std::vector<std::string> fields = {"model",
                                             "messages",
                                             "temperature",
                                             "top_p",
                                             "top_k",
                                             "min_p",
                                             "seed",
                                             "n",
                                             "max_tokens",
                                             "max_completion_tokens",
                                             "stop",
                                             "logprobs",
                                             "top_logprobs",
                                             "stream",
                                             "stream_options",
                                             "ignore_eos",
                                             "tools",
                                             "tool_choice",
                                             "thinking",
                                             "chat_template_kwargs",
                                             "reasoning_effort",
                                             "prompt",
                                             "echo",
                                             "suffix",
                                             "best_of",
                                             "presence_penalty",
                                             "logit_bias",
                                             "response_format"};
    std::mt19937 rng(7);
    int accepted = 0;
    for (int trial = 0; trial < 4000; ++trial) {
        ordered_json body = trial % 2 ? chat_body() : parse(R"({"prompt": "x"})");
        for (int k = 0; k < 1 + int(rng() % 3); ++k)
            body[fields[rng() % fields.size()]] = parse(values[rng() % values.size()]);
        try {
            if (trial % 2)
                chat_json(body);
            else
                parse_completion_request(body, kLimits, kModel);
            ++accepted;
        } catch (const ApiError& e) {
            EXPECT_TRUE(e.status() == 400 || e.status() == 404) << body.dump() << ": " << e.what();
            EXPECT_NO_THROW(e.to_json().dump());
        } catch (const std::exception& e) {
            ADD_FAILURE() << body.dump() << " threw a non-ApiError: " << e.what();
        }
    }
    EXPECT_GT(accepted, 100);
}

}  // namespace
}  // namespace dsv4::server
