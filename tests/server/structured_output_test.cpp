// Structured output on DeepSeek-V4's tokenizer (server/structured_output.h): the token table leaves the chat markup
// out of the text, "json_object" waits for "</think>" in a thinking reply, and random walks over the masked
// vocabulary end in EOS with one JSON object (the mask's cost: bench/structured_bench.cpp).
#include "server/structured_output.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

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

// tool_choice: a reply of random allowed ids begins with the call's opening (DeepSeek-V4's "｜DSML｜" token one way
// to spell it), after the reasoning of a thinking reply; the text is free after it.
TEST(StructuredOutput, ToolChoiceForcesTheCallsOpening) {
    const auto table = token_table(tokenizer(), kVocab);
    GenerationOptions o;
    o.forced_tools = {"get_weather", "get_time"};
    std::mt19937 rng(7);
    for (const auto mode : {tok::ThinkingMode::kChat, tok::ThinkingMode::kThinking}) {
        const auto proto = response_constraint(o, mode, table, eos());
        for (int walk = 0; walk < 4; ++walk) {
            auto c = proto->clone();
            std::vector<int32_t> drawn;
            if (mode == tok::ThinkingMode::kThinking) {
                c->advance(id_of("hello"));
                c->advance(*tokenizer().added_token_id("</think>"));
            }
            const int32_t dsml = *tokenizer().added_token_id(tok::kDsmlToken);
            bool dsml_allowed = false;
            const auto& prefix = static_cast<const PrefixConstraint&>(*c);
            for (int step = 0; !prefix.done(); ++step) {
                ASSERT_LT(step, 200);
                const std::vector<int32_t> ids = allowed_ids(*c);
                ASSERT_FALSE(ids.empty());
                dsml_allowed = dsml_allowed || std::binary_search(ids.begin(), ids.end(), dsml);
                drawn.push_back(ids[rng() % ids.size()]);
                c->advance(drawn.back());
            }
            EXPECT_EQ(allowed_ids(*c).size(), size_t(kVocab)) << "free after the opening";
            std::string text;
            for (const int32_t id : drawn) text += table->bytes(id);
            EXPECT_TRUE(text.starts_with(tok::tool_call_opening("get_weather")) ||
                        text.starts_with(tok::tool_call_opening("get_time")))
                << text;
            EXPECT_TRUE(dsml_allowed) << "the markup token itself may spell the opening";
        }
    }
}

// parallel_tool_calls false: once an invoke closes, the block closes and EOS (the id) ends the reply; with a forced
// call, both rules at once.
TEST(StructuredOutput, OneToolCallClosesTheBlockAfterItsInvoke) {
    const auto table = token_table(tokenizer(), kVocab);
    GenerationOptions o;
    o.one_tool_call = true;
    o.forced_tools = {"f"};
    auto c = response_constraint(o, tok::ThinkingMode::kChat, table, eos())->clone();
    const std::string model_text = tok::tool_call_opening("f") +
                                   "<｜DSML｜parameter name=\"x\" string=\"true\">1</｜DSML｜parameter>\n" +
                                   std::string(tok::kInvokeClose);
    std::string drawn_text;
    for (const int32_t id : tokenizer().encode(model_text)) {  // the model's own call, allowed id by id
        const auto ids = allowed_ids(*c);
        ASSERT_TRUE(std::binary_search(ids.begin(), ids.end(), id))
            << "refused " << table->bytes(id) << " after " << drawn_text;
        c->advance(id);
        drawn_text += table->bytes(id);
    }
    std::mt19937 rng(3);
    std::string forced;
    for (int step = 0;; ++step) {
        ASSERT_LT(step, 40) << forced;
        const auto ids = allowed_ids(*c);
        ASSERT_FALSE(ids.empty());
        const int32_t id = ids[rng() % ids.size()];
        c->advance(id);
        if (id == eos()) break;
        forced += table->bytes(id);
    }
    EXPECT_EQ(forced, tok::kToolCallsClose) << "then EOS, the id itself";
}

}  // namespace
}  // namespace dsv4::server
