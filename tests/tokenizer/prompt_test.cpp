// Prompt rendering against every encoding vector of spec/dsv4-encoding.md §5.1-5.2 (copied verbatim into
// tests/tokenizer/data/encoding_vectors.json by tools/tokenizer/extract_spec_vectors.py): byte-exact prompts,
// and errors where the reference raises. The rendered prompts also round-trip through the tokenizer.
#include <gtest/gtest.h>

#include "core/error.h"
#include "test_util.h"
#include "tokenizer/prompt.h"

namespace dsv4::tok {
namespace {

ordered_json load_vectors() { return ordered_json::parse(test::read_file(test::data_path("encoding_vectors.json"))); }

struct Case {
    ordered_json messages, context;
    RenderOptions options;
};

Case make_case(const ordered_json& v) {
    Case c;
    c.messages = v.at("messages");
    if (v.contains("tools")) {
        const size_t at = v.contains("tools_on_message_index") ? v.at("tools_on_message_index").get<size_t>() : 0;
        c.messages[at]["tools"] = v.at("tools");
    }
    c.options.thinking_mode = v.at("thinking_mode") == "thinking" ? ThinkingMode::kThinking : ThinkingMode::kChat;
    if (!v.at("reasoning_effort").is_null()) c.options.reasoning_effort = v.at("reasoning_effort").get<std::string>();
    c.options.era = parse_encoder_era(v.at("encoder").get<std::string>());
    if (v.contains("drop_thinking")) c.options.drop_thinking = v.at("drop_thinking").get<bool>();
    if (v.contains("add_default_bos_token")) c.options.add_default_bos_token = v.at("add_default_bos_token").get<bool>();
    c.context = v.contains("context") ? v.at("context") : ordered_json::array();
    return c;
}

TEST(Prompt, EverySpecEncodingVector) {
    const ordered_json vectors = load_vectors().at("encoding");
    ASSERT_GE(vectors.size(), 70u);
    size_t prompts = 0, errors = 0;
    for (const ordered_json& v : vectors) {
        const std::string name = v.at("name").get<std::string>();
        const Case c = make_case(v);
        if (v.contains("expected_prompt")) {
            std::string got;
            try {
                got = render_prompt(c.messages, c.options, c.context);
            } catch (const Error& e) {
                ADD_FAILURE() << name << ": unexpected error " << e.what();
                continue;
            }
            EXPECT_EQ(got, v.at("expected_prompt").get<std::string>()) << name;
            ++prompts;
        } else {
            const std::string want = v.at("expected_error").at("message").get<std::string>();
            try {
                render_prompt(c.messages, c.options, c.context);
                ADD_FAILURE() << name << ": no error, expected " << want;
            } catch (const Error& e) {
                // Messages are reproduced where they carry no Python repr of the input.
                if (want.starts_with("Invalid reasoning effort") || want.starts_with("Unknown role")) {
                    EXPECT_EQ(std::string(e.what()), want) << name;
                }
                ++errors;
            }
        }
    }
    std::printf("spec encoding vectors: %zu prompts byte-exact, %zu errors raised\n", prompts, errors);
}

TEST(Prompt, RenderedPromptsRoundTripThroughTokenizer) {
    const Tokenizer& tok = test::v4_tokenizer();
    const ordered_json vectors =
        load_vectors();  // held: a range-for over load_vectors().at(...) read a freed temporary
    for (const ordered_json& v : vectors.at("encoding")) {
        if (!v.contains("expected_prompt")) continue;
        const std::string prompt = v.at("expected_prompt").get<std::string>();
        const auto ids = tok.encode(prompt);
        EXPECT_EQ(tok.decode(ids), prompt) << v.at("name");
        if (prompt.starts_with(kBosToken)) {
            EXPECT_EQ(ids.at(0), 0) << v.at("name");
        }
    }
}

TEST(Prompt, ErasDifferOnlyInEffort) {
    const auto messages = ordered_json::parse(R"([{"role": "user", "content": "Hi"}])");
    RenderOptions o;
    o.thinking_mode = ThinkingMode::kThinking;
    o.reasoning_effort = "max";
    const std::string n = render_prompt(messages, o);
    o.era = EncoderEra::kPreview;
    const std::string p = render_prompt(messages, o);
    EXPECT_NE(n.find("Beyond maximum"), std::string::npos);
    EXPECT_NE(p.find("Absolute maximum"), std::string::npos);
    EXPECT_TRUE(n.ends_with("<｜User｜>Hi<｜Assistant｜><think>"));
    EXPECT_THROW(parse_encoder_era("v3"), Error);
}

TEST(Prompt, BadInputIsAnError) {
    RenderOptions o;
    EXPECT_THROW(render_prompt(ordered_json::object(), o), Error);
    EXPECT_THROW(render_prompt(ordered_json::parse(R"([1])"), o), Error);
    EXPECT_THROW(render_prompt(ordered_json::parse(R"([{"role": "user", "content": "x", "task": "nope"}])"), o), Error);
    EXPECT_THROW(render_prompt(ordered_json::parse(R"([{"role": "assistant", "tool_calls": [{"id": "a"}]}])"), o),
                 Error);
    // Tool call arguments with a number past a double's range (Python reads inf, writes Infinity): an error, not a
    // JSON library exception that a caller expecting dsv4::Error lets through (found by openai_request_fuzz).
    const ordered_json overflow = ordered_json::parse(
        R"([{"role": "user", "content": "x"}, {"role": "assistant", "content": "", "tool_calls": [{"type": "function",
            "function": {"name": "f", "arguments": "{\"city\": 4e4999}"}}]}])");
    try {
        render_prompt(overflow, o);
        ADD_FAILURE() << "an argument out of a double's range rendered";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("outside a double's range"), std::string::npos) << e.what();
    }
    // The preview era would insert a Python repr of a list content: dsv4 refuses instead.
    o.era = EncoderEra::kPreview;
    EXPECT_THROW(render_prompt(ordered_json::parse(R"([{"role": "system", "content": [{"type": "text"}]}])"), o),
                 Error);
}

}  // namespace
}  // namespace dsv4::tok
