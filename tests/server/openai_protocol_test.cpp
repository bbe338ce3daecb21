// Requests of the OpenAI-compatible protocol (openai_protocol.cpp): null fields and unknown ones, the names other
// APIs give the chat parser's fields, the model and the JSON body reader, /tokenize and /detokenize, completion prompt
// forms and fields, the context budget, the error object, and that random bodies never throw anything but ApiError.
// The chat request: chat_request_test.cpp; the generation options: request_options_test.cpp; responses and
// StopMatcher: openai_response_test.cpp.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <array>
#include <random>
#include <utility>

#include "request_test_helpers.h"
#include "server/openai_protocol.h"
#include "tokenizer/prompt.h"

namespace dsv4::server {
namespace {

using namespace request_test;

TEST(OpenAiRequest, NullIsAbsentAndUnknownFieldsAreIgnored) {
    const ChatRequest r = chat(R"("temperature": null, "top_p": null, "stop": null, "seed": 5, "max_tokens": null,
                                  "stream_options": null, "tools": null, "tool_choice": null, "user": "u1",
                                  "metadata": {"a": 1}, "parallel_tool_calls": true, "model": "dsv4-test")");
    EXPECT_EQ(r.options.sampling.temperature, 1.0f);
    EXPECT_EQ(r.options.sampling.seed, 5u);
    EXPECT_FALSE(r.options.max_tokens);
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
