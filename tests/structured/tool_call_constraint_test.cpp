// ToolCallConstraint (structured/tool_call_constraint.h) on a small vocabulary of DSML pieces: at every state random
// walks reach, the mask leaves exactly the ids allowed alone (a text id: its bytes accepted by the cursor; a special
// id: its bytes all markup or content; EOS: where the reply may end), through each of its ways (content, free text,
// the trie); nothing is constrained before "</think>"; walks that end at EOS are read by the completion parser.
#include "structured/tool_call_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "tokenizer/completion.h"
#include "tokenizer/prompt.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using Start = ToolCallGrammar::Start;

constexpr int32_t kEos = 0, kThinkEnd = 1, kDsml = 2, kThinkStart = 3;

std::shared_ptr<const TokenTable> small_table() {
    std::vector<std::string> bytes = {std::string(tok::kEosToken),
                                      "</think>",
                                      "｜DSML｜",
                                      "<think>",
                                      "\n",
                                      "\n\n",
                                      "<",
                                      "</",
                                      "｜",
                                      "DSML",
                                      "tool_calls",
                                      "tool",
                                      "_calls",
                                      ">\n",
                                      ">",
                                      "invoke",
                                      " name=\"",
                                      "parameter",
                                      "\"",
                                      " string=\"",
                                      "true",
                                      "false",
                                      "\">",
                                      "get_weather",
                                      "note",
                                      "city",
                                      "days",
                                      "3",
                                      "12",
                                      "[",
                                      "]",
                                      "null",
                                      "Paris",
                                      " ",
                                      "a b",
                                      "\\",
                                      "é",
                                      "\xC3",
                                      "x<",
                                      "/",
                                      "<｜DSML｜",
                                      "\n</",
                                      "Hi",
                                      "\t",
                                      "{\"k\":",
                                      "1}",
                                      "<b>",
                                      "thin",
                                      "k>",
                                      "\n\n<",
                                      "\n<｜DSML｜parameter name=\"",
                                      "",
                                      "name=\""};
    for (int b = 0; b < 256; ++b) bytes.push_back(std::string(1, char(b)));  // as in a byte-level vocabulary
    std::vector<bool> special(bytes.size(), false);
    special[kEos] = special[kThinkEnd] = special[kDsml] = special[kThinkStart] = true;
    return std::make_shared<TokenTable>(std::move(bytes), std::move(special));
}

std::shared_ptr<const ToolCallGrammar> grammar(Start start, bool one_call) {
    const json weather = json::parse(R"({"type": "object", "properties": {"city": {"type": "string", "maxLength": 6},
        "days": {"type": "integer"}}, "required": ["city"], "additionalProperties": false})");
    return std::make_shared<const ToolCallGrammar>(
        std::vector<ToolSpec>{{"get_weather", compile_schema(weather)}, {"note", CompiledSchema::any_object()}}, start,
        one_call);
}

std::vector<int32_t> allowed_ids(const TokenConstraint& c, int64_t vocab) {
    std::vector<float> row(size_t(vocab), 0.0f);
    c.mask(row.data(), vocab);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab; ++id)
        if (!std::isinf(row[size_t(id)])) ids.push_back(id);
    return ids;
}

// The rule for one id alone, as tool_call_constraint.h states it.
bool allowed_alone(const ToolCallCursor& cursor, const TokenTable& table, int32_t id) {
    if (id == kEos) return cursor.complete();
    const std::string_view bytes = table.bytes(id);
    if (bytes.empty()) return false;
    if (!table.special(id)) return cursor.accepts(bytes);
    ToolCallCursor c = cursor;
    for (const char b : bytes)
        if (!(c.in_content() || c.in_markup()) || !c.feed(uint8_t(b))) return false;
    return true;
}

TEST(ToolCallConstraint, MaskEqualsEachIdAloneAndWalksEndInCallsTheParserReads) {
    const auto table = small_table();
    std::mt19937 rng(9);
    int states = 0, ended = 0, in_content = 0, free_text = 0, markup = 0;
    for (const Start start : {Start::kAtOnce, Start::kAfterContent})
        for (const bool one_call : {false, true})
            for (int walk = 0; walk < 60; ++walk) {
                ToolCallConstraint c(table, grammar(start, one_call), {kEos});
                std::string text;
                for (int step = 0; step < 300; ++step) {
                    const std::vector<int32_t> ids = allowed_ids(c, table->size());
                    for (int32_t id = 0; id < table->size(); ++id)
                        ASSERT_EQ(std::binary_search(ids.begin(), ids.end(), id), allowed_alone(c.cursor(), *table, id))
                            << "id " << id << " '" << table->bytes(id) << "' after '" << text << "'";
                    ++states;
                    in_content += c.cursor().in_content();
                    free_text += c.cursor().in_free_text();
                    markup += c.cursor().in_markup();
                    ASSERT_FALSE(ids.empty()) << "no way on after " << text;
                    // Mostly the longer pieces; toward the end EOS where it may come.
                    std::vector<int32_t> longer;
                    for (const int32_t id : ids)
                        if (table->bytes(id).size() > 1) longer.push_back(id);
                    const std::vector<int32_t>& from = longer.empty() || rng() % 4 == 0 ? ids : longer;
                    int32_t id = from[rng() % from.size()];
                    if (step > 100 && std::binary_search(ids.begin(), ids.end(), kEos)) id = kEos;
                    c.advance(id);
                    if (id == kEos) break;
                    text += table->bytes(id);
                }
                if (!c.cursor().complete()) continue;
                ++ended;
                const tok::ParsedCompletion parsed =
                    tok::parse_completion(text + std::string(tok::kEosToken), tok::ThinkingMode::kChat);
                ASSERT_TRUE(parsed.ok()) << parsed.error->message << "\n" << text;
                for (const tok::ToolCall& call : parsed.tool_calls)
                    EXPECT_FALSE(json::parse(call.arguments, nullptr, false).is_discarded()) << call.arguments;
            }
    EXPECT_GT(states, 10000);
    EXPECT_GT(ended, 60);
    EXPECT_GT(in_content, 1000);
    EXPECT_GT(free_text, 500);
    EXPECT_GT(markup, 1000);
}

TEST(ToolCallConstraint, WaitsForTheEndOfThinkingAndAClonesCursorIsItsOwn) {
    const auto table = small_table();
    ToolCallConstraint c(table, grammar(Start::kAtOnce, false), {kEos}, "</think>");
    EXPECT_EQ(allowed_ids(c, table->size()).size(), size_t(table->size())) << "the reasoning is free";
    c.advance(kThinkStart);
    c.advance(kThinkEnd);
    const std::vector<int32_t> ids = allowed_ids(c, table->size());
    for (const int32_t id : ids) EXPECT_TRUE(ToolCallCursor::kOpening.starts_with(table->bytes(id))) << id;
    EXPECT_FALSE(std::binary_search(ids.begin(), ids.end(), kEos));
    auto copy = c.clone();
    c.advance(5);  // "\n\n"
    EXPECT_THROW(c.advance(5), Error) << "not the opening";
    std::vector<float> row(size_t(table->size()) + 3, 0.0f);
    copy->mask(row.data(), int64_t(row.size()));
    EXPECT_FALSE(std::isinf(row[5])) << "the clone is still at the start";
    for (size_t id = size_t(table->size()); id < row.size(); ++id) EXPECT_TRUE(std::isinf(row[id]));
}

}  // namespace
}  // namespace dsv4
