// The chat request (chat_request.cpp): its defaults, message shapes and list contents, an assistant's tool calls sent
// back, the thinking / reasoning_effort table of spec §3.8 (with our default of chat mode), request-level tools and
// tool_choice as vLLM attaches them, spec vector tools_on_contentless_system, continuing an assistant message, and
// which requests get enforced tool calls.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "request_test_helpers.h"
#include "server/openai_protocol.h"
#include "tokenizer/prompt.h"

namespace dsv4::server {
namespace {

using namespace request_test;

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

}  // namespace
}  // namespace dsv4::server
