// The generation options of a request (request_options.cpp): every sampling field's values, type errors and range
// edges (a 400 naming the field), max_tokens, stop strings, logprobs, streaming options, vLLM's extras (honoured or
// refused, never ignored) and response_format.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <utility>

#include "request_test_helpers.h"
#include "server/openai_protocol.h"

namespace dsv4::server {
namespace {

using namespace request_test;

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

}  // namespace
}  // namespace dsv4::server
