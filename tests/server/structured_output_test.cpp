// Structured output on DeepSeek-V4's tokenizer (server/structured_output.h): the token table leaves the chat markup
// out of the text, "json_object" waits for "</think>" in a thinking reply, random walks over the masked vocabulary
// end in EOS with one JSON object, and under tool-call rules in calls the completion parser reads (the mask's cost:
// bench/structured_bench.cpp).
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <set>

#include "structured/tool_call_constraint.h"
#include "tokenizer/completion.h"
#include "tokenizer/tokenizer_path.h"

namespace dsv4::server {
namespace {

constexpr int64_t kVocab = 129280;  // DeepSeek-V4's

const tok::Tokenizer& tokenizer() {
    static const tok::Tokenizer t = [] {
        const auto path = tok::installed_tokenizer_json();
        if (!path) throw std::runtime_error("no installed tokenizer.json (scripts/setup.sh installs it)");
        return tok::Tokenizer::from_file(*path);
    }();
    return t;
}

int32_t id_of(const std::string& text) {
    const std::vector<int32_t> ids = tokenizer().encode(text);
    EXPECT_EQ(ids.size(), 1u) << text;
    return ids.at(0);
}

GenerationOptions text_format() {
    return GenerationOptions{};
}
GenerationOptions json_object_format() {
    GenerationOptions o;
    o.response_format = ResponseFormat::kJsonObject;
    return o;
}

int32_t eos() {
    return *tokenizer().added_token_id("<｜end▁of▁sentence｜>");
}

std::vector<int32_t> allowed_ids(const TokenConstraint& c) {
    std::vector<float> row(size_t(kVocab), 0.0f);
    c.mask(row.data(), kVocab);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < kVocab; ++id)
        if (!std::isinf(row[size_t(id)])) ids.push_back(id);
    return ids;
}

TEST(StructuredOutput, TokenTableKeepsTheMarkupOut) {
    const auto table = token_table(tokenizer(), kVocab);
    ASSERT_EQ(table->size(), kVocab);
    for (const char* markup : {"</think>", "<think>", "<｜end▁of▁sentence｜>", "<｜Assistant｜>", "<｜User｜>"}) {
        const auto id = tokenizer().added_token_id(markup);
        ASSERT_TRUE(id.has_value()) << markup;
        EXPECT_TRUE(table->special(*id)) << markup;
    }
    EXPECT_TRUE(table->plain_string(id_of("hello")));
    EXPECT_FALSE(table->plain_string(id_of("\"")));
    EXPECT_EQ(table->bytes(id_of(" world")), " world");
}

TEST(StructuredOutput, TextIsFreeAndJsonWaitsForTheEndOfThinking) {
    const auto table = token_table(tokenizer(), kVocab);
    EXPECT_EQ(response_constraint(text_format(), tok::ThinkingMode::kChat, table, eos()), nullptr);
    const auto chat = response_constraint(json_object_format(), tok::ThinkingMode::kChat, table, eos());
    const auto ids = allowed_ids(*chat);
    EXPECT_NE(std::find(ids.begin(), ids.end(), id_of("{")), ids.end());
    EXPECT_EQ(std::find(ids.begin(), ids.end(), id_of("hello")), ids.end());
    EXPECT_EQ(std::find(ids.begin(), ids.end(), eos()), ids.end());
    auto thinking = response_constraint(json_object_format(), tok::ThinkingMode::kThinking, table, eos())->clone();
    EXPECT_EQ(allowed_ids(*thinking).size(), size_t(kVocab)) << "the reasoning is free";
    thinking->advance(id_of("hello"));
    thinking->advance(*tokenizer().added_token_id("</think>"));
    EXPECT_EQ(allowed_ids(*thinking), ids) << "after </think> as a chat reply";
}

// A random walk over what constraint `c` allows, until EOS: from step 12 on, the first id of `order()` that is
// allowed (closing what is open); every `check_every` steps (0: never) the mask compared with each id tried alone
// against the cursor. The text before EOS, or nullopt after a failure.
std::optional<std::string> walk(TokenConstraint& c, const TokenTable& table, std::mt19937& rng,
                                const std::function<std::vector<int32_t>()>& order, int check_every) {
    std::string text;
    for (int step = 0;; ++step) {
        if (step >= 400) {
            ADD_FAILURE() << "no EOS after " << text;
            return std::nullopt;
        }
        const std::vector<int32_t> ids = allowed_ids(c);
        if (ids.empty()) {
            ADD_FAILURE() << "no way on after " << text;
            return std::nullopt;
        }
        if (check_every > 0 && step % check_every == 0) {  // the mask's trie walk equals each id tried alone
            const SchemaCursor& cursor = static_cast<const JsonConstraint&>(c).cursor();
            std::vector<int32_t> alone;
            for (int32_t i = 0; i < kVocab; ++i)
                if (i == eos() ? cursor.complete()
                               : !table.special(i) && !table.bytes(i).empty() && cursor.accepts(table.bytes(i)))
                    alone.push_back(i);
            if (ids != alone) {
                ADD_FAILURE() << "the mask differs after " << text;
                return std::nullopt;
            }
        }
        int32_t id = ids[rng() % ids.size()];
        if (step > 12)
            for (const int32_t prefer : order())
                if (std::binary_search(ids.begin(), ids.end(), prefer)) {
                    id = prefer;
                    break;
                }
        c.advance(id);
        if (id == eos()) return text;
        text += table.bytes(id);
    }
}

// Random walks over the whole vocabulary (closing what is open after a while): each ends in EOS, and its text is
// one JSON object.
TEST(StructuredOutput, RandomWalksOverTheVocabularyWriteOneObject) {
    const auto table = token_table(tokenizer(), kVocab);
    const auto proto = response_constraint(json_object_format(), tok::ThinkingMode::kChat, table, eos());
    std::mt19937 rng(1);
    std::vector<int32_t> closing;
    for (const char* s : {"}", "]", "0", ":", "\"", "r", "u", "e", "l", "s", "a", "1"}) closing.push_back(id_of(s));
    for (int walk_i = 0; walk_i < 6; ++walk_i) {
        auto c = proto->clone();
        const auto& json = static_cast<const JsonConstraint&>(*c);
        const auto order = [&] {  // in a string its close first
            std::vector<int32_t> o = {eos()};
            if (json.cursor().lex().mode == JsonLex::kString) o.push_back(id_of("\""));
            o.insert(o.end(), closing.begin(), closing.end());
            return o;
        };
        const std::optional<std::string> text = walk(*c, *table, rng, order, 0);
        ASSERT_TRUE(text.has_value());
        ASSERT_TRUE(nlohmann::json::accept(*text)) << *text;
        EXPECT_TRUE(nlohmann::json::parse(*text).is_object()) << *text;
    }
}

// The same walks under a schema (response_format "json_schema"): required keys spelled token by token, an integer,
// a boolean, enum items; the text parses and has exactly the schema's shape; every 8th mask equals each id tried
// alone against the cursor.
TEST(StructuredOutput, RandomWalksUnderASchema) {
    const auto table = token_table(tokenizer(), kVocab);
    GenerationOptions o;
    o.response_format = ResponseFormat::kJsonSchema;
    o.schema = compile_schema(nlohmann::json::parse(R"({"type": "object", "additionalProperties": false,
        "required": ["name", "n", "ok", "tags"],
        "properties": {"name": {"type": "string", "maxLength": 12}, "n": {"type": "integer"}, "ok": {"type": "boolean"},
                       "tags": {"type": "array", "items": {"enum": ["x", "yz"]}, "maxItems": 3}}})"));
    const auto proto = response_constraint(o, tok::ThinkingMode::kChat, table, eos());
    std::mt19937 rng(2);
    std::vector<int32_t> order = {eos()};
    for (const char* s : {"\"", "}", "]", "0", ":", ",", "t", "r", "u", "e"}) order.push_back(id_of(s));
    for (int walk_i = 0; walk_i < 6; ++walk_i) {
        auto c = proto->clone();
        const std::optional<std::string> text = walk(
            *c, *table, rng, [&] { return order; }, 8);
        ASSERT_TRUE(text.has_value());
        ASSERT_TRUE(nlohmann::json::accept(*text)) << *text;
        const nlohmann::json v = nlohmann::json::parse(*text);
        EXPECT_EQ(v.size(), 4u) << *text;
        EXPECT_TRUE(v.at("name").is_string() && v.at("n").is_number_integer() && v.at("ok").is_boolean()) << *text;
        for (const auto& t : v.at("tags")) EXPECT_TRUE(t == "x" || t == "yz") << *text;
    }
}

// A chat request's options with these fields (tools, tool_choice, ...).
GenerationOptions chat_options(const std::string& fields) {
    const RequestLimits limits{.max_context = 4096, .vocab_size = kVocab};
    return parse_chat_request(parse_json_body(R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}"),
                              limits, "m")
        .options;
}

const char* const kStrictWeather = R"("tools": [
    {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
     "properties": {"city": {"type": "string", "maxLength": 12}, "days": {"type": "integer"},
                    "unit": {"enum": ["c", "f"]}}, "required": ["city", "unit"], "additionalProperties": false}}},
    {"type": "function", "function": {"name": "get_time"}}])";

// Random walks over DeepSeek-V4's vocabulary under a request's tool-call rules, each until EOS: random ids at first,
// then the first allowed of `closing` (EOS, then the markup that closes); every 8th mask compared with each id tried
// alone. The text the completion parser reads (in `mode`), or nullopt after a failure.
std::optional<tok::ParsedCompletion> tool_walk(const TokenConstraint& proto, tok::ThinkingMode mode,
                                               std::mt19937& rng) {
    const auto table = token_table(tokenizer(), kVocab);
    std::vector<int32_t> closing = {eos()};
    for (const std::string& markup :
         {std::string("</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"),
          tok::tool_call_opening("get_weather") +
              "<｜DSML｜parameter name=\"unit\" string=\"false\">\"c\"</｜DSML｜parameter>\n<｜DSML｜parameter "
              "name=\"city\" string=\"true\">Rome"})
        for (const int32_t id : tokenizer().encode(markup)) closing.push_back(id);
    auto c = proto.clone();
    const auto& tools = static_cast<const ToolCallConstraint&>(*c);
    std::string text;
    if (mode == tok::ThinkingMode::kThinking) {
        for (const int32_t id : tokenizer().encode("Let me think.</think>")) c->advance(id);
        text = "Let me think.</think>";
    }
    for (int step = 0;; ++step) {
        if (step >= 300) {
            ADD_FAILURE() << "no EOS after " << text;
            return std::nullopt;
        }
        const std::vector<int32_t> ids = allowed_ids(*c);
        if (ids.empty()) {
            ADD_FAILURE() << "no way on after " << text;
            return std::nullopt;
        }
        if (step % 8 == 0) {
            std::vector<int32_t> alone;
            for (int32_t i = 0; i < kVocab; ++i) {
                bool ok = false;
                if (i == eos()) {
                    ok = tools.cursor().complete();
                } else if (!table->bytes(i).empty() && !table->special(i)) {
                    ok = tools.cursor().accepts(table->bytes(i));
                } else if (!table->bytes(i).empty()) {
                    ToolCallCursor cursor = tools.cursor();
                    ok = true;
                    for (const char b : table->bytes(i))
                        ok = ok && (cursor.in_content() || cursor.in_markup()) && cursor.feed(uint8_t(b));
                }
                if (ok) alone.push_back(i);
            }
            if (ids != alone) {
                ADD_FAILURE() << "the mask differs after " << text;
                return std::nullopt;
            }
        }
        int32_t id = ids[rng() % ids.size()];
        if (step > 10)
            for (const int32_t prefer : closing)
                if (std::binary_search(ids.begin(), ids.end(), prefer)) {
                    id = prefer;
                    break;
                }
        c->advance(id);
        if (id == eos()) break;
        text += table->bytes(id);
    }
    return tok::parse_completion(text + std::string(tok::kEosToken), mode);
}

// tool_choice "required" (a strict tool and a free one), a named strict tool in a thinking reply, and one call after
// free content ("auto", parallel_tool_calls false): every walk's text parses into calls of the declared tools, the
// strict one's arguments of its schema.
TEST(StructuredOutput, ToolCallWalksOverTheVocabularyParseAndKeepToTheSchema) {
    const auto table = token_table(tokenizer(), kVocab);
    std::mt19937 rng(7);
    struct Case {
        std::string fields;
        tok::ThinkingMode mode;
        bool must_call;
        size_t most_calls;
    };
    const Case cases[] = {
        {std::string(kStrictWeather) + R"(, "tool_choice": "required")", tok::ThinkingMode::kChat, true, 99},
        {std::string(kStrictWeather) + R"(, "tool_choice": {"type": "function", "function": {"name": "get_weather"}})",
         tok::ThinkingMode::kThinking, true, 99},
        {std::string(kStrictWeather) + R"(, "parallel_tool_calls": false)", tok::ThinkingMode::kChat, false, 1},
    };
    int calls = 0;
    for (const Case& k : cases) {
        const GenerationOptions o = chat_options(k.fields);
        ASSERT_NE(o.tool_calls, nullptr) << k.fields;
        EXPECT_STREQ(constraint_kind(o), "tool_call");
        const auto proto = response_constraint(o, k.mode, table, eos());
        for (int walk_i = 0; walk_i < 3; ++walk_i) {
            const std::optional<tok::ParsedCompletion> parsed = tool_walk(*proto, k.mode, rng);
            ASSERT_TRUE(parsed.has_value());
            ASSERT_TRUE(parsed->ok()) << parsed->error->message;
            if (k.must_call) {
                EXPECT_FALSE(parsed->tool_calls.empty());
            }
            EXPECT_LE(parsed->tool_calls.size(), k.most_calls);
            for (const tok::ToolCall& call : parsed->tool_calls) {
                ++calls;
                const nlohmann::json args = nlohmann::json::parse(call.arguments, nullptr, false);
                ASSERT_TRUE(args.is_object()) << call.arguments;
                if (call.name == "get_time") continue;
                ASSERT_EQ(call.name, "get_weather");
                EXPECT_TRUE(args.at("city").is_string() && args.at("city").get<std::string>().size() <= 36)
                    << call.arguments;
                EXPECT_TRUE(args.at("unit") == "c" || args.at("unit") == "f") << call.arguments;
                if (args.contains("days")) {
                    EXPECT_TRUE(args.at("days").is_number_integer()) << call.arguments;
                }
                for (const auto& [key, v] : args.items())
                    EXPECT_TRUE(key == "city" || key == "days" || key == "unit") << call.arguments;
            }
        }
    }
    EXPECT_GE(calls, 6);
}

// guided_choice over DeepSeek-V4's vocabulary: random walks over the mask (in a thinking reply after "</think>") end
// in EOS with exactly one of the choices, however its tokens spell it.
TEST(StructuredOutput, GuidedChoiceWalksEndInOneChoice) {
    const auto table = token_table(tokenizer(), kVocab);
    const GenerationOptions o =
        chat_options(R"("guided_choice": ["positive", "negative", "neutral", "mixed feelings", "不知道", "pos"])");
    ASSERT_EQ(o.response_format, ResponseFormat::kChoice);
    EXPECT_STREQ(constraint_kind(o), "choice");
    std::mt19937 rng(3);
    std::set<std::string> seen;
    for (const auto mode : {tok::ThinkingMode::kChat, tok::ThinkingMode::kThinking}) {
        const auto proto = response_constraint(o, mode, table, eos());
        for (int walk = 0; walk < 12; ++walk) {
            auto c = proto->clone();
            if (mode == tok::ThinkingMode::kThinking)
                for (const int32_t id : tokenizer().encode("Hmm.</think>")) c->advance(id);
            std::string text;
            for (int step = 0;; ++step) {
                ASSERT_LT(step, 40) << text;
                const std::vector<int32_t> ids = allowed_ids(*c);
                ASSERT_FALSE(ids.empty()) << text;
                const int32_t id = ids[rng() % ids.size()];
                c->advance(id);
                if (id == eos()) break;
                text += table->bytes(id);
            }
            EXPECT_NE(std::find(o.choices->choices().begin(), o.choices->choices().end(), text),
                      o.choices->choices().end())
                << text;
            seen.insert(text);
        }
    }
    EXPECT_GE(seen.size(), 3u);
}

}  // namespace
}  // namespace dsv4::server
