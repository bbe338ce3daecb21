// TokenTable and JsonConstraint (structured/constraints.h) on a small vocabulary: the mask leaves exactly the ids
// whose bytes can follow (each checked against JsonCursor byte by byte, the string fast path included), special ids
// never, the end ids only on a complete document, nothing before the text it waits for; random walks over the mask
// write documents nlohmann::json parses. ChoiceConstraint: the same, walks ending in one of its choices.
#include "structured/constraints.h"

#include "structured/choice_constraint.h"

#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr int32_t kEos = 0, kThinkEnd = 1;

// Ids 0, 1: special (EOS, "</think>"); then pieces a JSON reply is made of, and some that break it.
std::shared_ptr<const TokenTable> small_table() {
    std::vector<std::string> bytes = {
        "<eos>", "</think>", "{",       "}",  "[",    "]",       "\"",  ":",     ",",      " ",   "\n  ", "{\"",
        "\":",   "\",\"",    "\"}",     "}}", "]}",   "a",       "key", "value", " words", "\\",  "\\n",  "\\u00",
        "e9",    "d83d",     "\\ude00", "é",  "\xC3", "\xA9",    "中",  "0",     "12",     "-",   ".",    "5e",
        "+3",    "true",     "fal",     "se", "null", "```json", "'",   "\x01",  "",       "x\"y"};
    std::vector<bool> special(bytes.size(), false);
    special[0] = special[1] = true;
    return std::make_shared<TokenTable>(std::move(bytes), std::move(special));
}

std::vector<float> zeros(int64_t n) {
    return std::vector<float>(size_t(n), 0.0f);
}

std::vector<int32_t> allowed_ids(const JsonConstraint& c, int64_t vocab) {
    std::vector<float> row = zeros(vocab);
    c.mask(row.data(), vocab);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < vocab; ++id)
        if (!std::isinf(row[size_t(id)])) ids.push_back(id);
    return ids;
}

TEST(TokenTable, PlainStringIdsAreWholeCharactersOfStringContent) {
    const auto table = small_table();
    auto id_of = [&](std::string_view s) {
        for (int32_t id = 0; id < table->size(); ++id)
            if (table->bytes(id) == s && !table->special(id)) return id;
        ADD_FAILURE() << "no id for " << s;
        return int32_t(0);
    };
    for (const char* yes : {"a", "key", " words", "é", "中", "{", ":", " ", "0", "```json", "'"})
        EXPECT_TRUE(table->plain_string(id_of(yes))) << yes;
    for (const char* no : {"\"", "\\", "\\n", "\n  ", "\xC3", "\xA9", "\x01", "", "x\"y", "{\"", "\\u00"})
        EXPECT_FALSE(table->plain_string(id_of(no))) << no;
    EXPECT_FALSE(table->plain_string(kEos));
}

// Every id's verdict equals JsonCursor::accepts on its bytes, at every state a random walk reaches.
TEST(JsonConstraint, MaskEqualsTheCursorOnEveryId) {
    const auto table = small_table();
    std::mt19937 rng(3);
    int states = 0;
    for (int walk = 0; walk < 300; ++walk) {
        JsonConstraint c(table, CompiledSchema::any_object(), JsonLimits{}, {kEos});
        for (int step = 0; step < 40; ++step) {
            const std::vector<int32_t> ids = allowed_ids(c, table->size());
            for (int32_t id = 0; id < table->size(); ++id) {
                const bool expect = id == kEos ? c.cursor().complete()
                                    : table->special(id) || table->bytes(id).empty()
                                        ? false
                                        : c.cursor().accepts(table->bytes(id));
                EXPECT_EQ(std::find(ids.begin(), ids.end(), id) != ids.end(), expect) << "id " << id;
            }
            ++states;
            ASSERT_FALSE(ids.empty()) << "a state with no way on";
            const int32_t id = ids[rng() % ids.size()];
            c.advance(id);
            if (id == kEos) break;
        }
    }
    EXPECT_GT(states, 3000);
}

// Random walks that prefer to close: each ends in EOS, and the bytes before it parse as one JSON object.
TEST(JsonConstraint, WalksEndInEosWithAnObject) {
    const auto table = small_table();
    std::mt19937 rng(8);
    for (int walk = 0; walk < 500; ++walk) {
        JsonConstraint c(table, CompiledSchema::any_object(), JsonLimits{}, {kEos});
        std::string text;
        for (int step = 0;; ++step) {
            ASSERT_LT(step, 2000) << text;
            std::vector<int32_t> ids = allowed_ids(c, table->size());
            ASSERT_FALSE(ids.empty()) << text;
            int32_t id = ids[rng() % ids.size()];
            if (step > 30) {  // then close whatever is open: a string first, then numbers, literals, containers
                const std::vector<int32_t> order = c.cursor().lex().mode == JsonLex::kString
                                                       ? std::vector<int32_t>{6}
                                                       : std::vector<int32_t>{kEos, 3, 5, 31, 7, 6, 29, 39, 26};
                for (const int32_t prefer : order)
                    if (std::find(ids.begin(), ids.end(), prefer) != ids.end()) {
                        id = prefer;
                        break;
                    }
            }
            c.advance(id);
            if (id == kEos) break;
            text += table->bytes(id);
        }
        ASSERT_TRUE(nlohmann::json::accept(text)) << text;
        EXPECT_TRUE(nlohmann::json::parse(text).is_object()) << text;
    }
}

TEST(JsonConstraint, EosOnlyWhenCompleteAndSpecialsNever) {
    const auto table = small_table();
    JsonConstraint c(table, CompiledSchema::any_object(), JsonLimits{}, {kEos});
    auto ids = allowed_ids(c, table->size());
    EXPECT_EQ(std::count(ids.begin(), ids.end(), kEos), 0);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), kThinkEnd), 0);
    EXPECT_EQ(std::count(ids.begin(), ids.end(), 41), 0) << "```json";
    c.advance(2);  // {
    c.advance(3);  // }
    ids = allowed_ids(c, table->size());
    EXPECT_EQ(ids, std::vector<int32_t>{kEos}) << "after the document only EOS";
    EXPECT_THROW(c.advance(9), Error) << "an id the mask removed";
}

TEST(JsonConstraint, WaitsForItsStartId) {
    const auto table = small_table();
    JsonConstraint c(table, CompiledSchema::any_object(), JsonLimits{}, {kEos}, "</think>");
    EXPECT_FALSE(c.active());
    EXPECT_EQ(allowed_ids(c, table->size()).size(), size_t(table->size())) << "the reasoning is free";
    c.advance(17);
    c.advance(41);
    EXPECT_FALSE(c.active());
    c.advance(kThinkEnd);
    EXPECT_TRUE(c.active());
    const auto ids = allowed_ids(c, table->size());
    EXPECT_NE(std::find(ids.begin(), ids.end(), 2), ids.end());
    EXPECT_EQ(std::find(ids.begin(), ids.end(), 17), ids.end());
}

TEST(JsonConstraint, ClonesAdvanceApartAndIdsPastTheTableAreNeverAllowed) {
    const auto table = small_table();
    JsonConstraint a(table, CompiledSchema::any_object(), JsonLimits{}, {kEos});
    a.advance(2);  // {
    const std::unique_ptr<TokenConstraint> b = a.clone();
    a.advance(3);  // }
    std::vector<float> row = zeros(table->size() + 5);
    b->mask(row.data(), int64_t(row.size()));
    EXPECT_TRUE(std::isinf(row[kEos])) << "the clone's object is still open";
    EXPECT_FALSE(std::isinf(row[3]));
    for (size_t id = size_t(table->size()); id < row.size(); ++id) EXPECT_TRUE(std::isinf(row[id]));
}

// ChoiceConstraint (choice_constraint.h): the mask leaves exactly the ids whose bytes keep the text a prefix of a
// choice (special ids never), EOS only on a whole choice; random walks end in exactly one of the choices.
TEST(ChoiceConstraint, MaskEqualsEachIdAloneAndWalksEndInAChoice) {
    const auto table = small_table();
    const auto choices = std::make_shared<const ChoiceList>(
        std::vector<std::string>{"true", "fal", "false", "akey", "\"}", "é中", "", "12"});  // each spelled by the ids
    std::mt19937 rng(4);
    int ended = 0;
    for (int walk = 0; walk < 300; ++walk) {
        ChoiceConstraint c(table, choices, {kEos});
        std::string text;
        for (int step = 0; step < 20; ++step) {
            std::vector<float> row(size_t(table->size()), 0.0f);
            ASSERT_TRUE(c.mask(row.data(), table->size())) << text;
            std::vector<int32_t> ids;
            for (int32_t id = 0; id < table->size(); ++id) {
                const bool want = id == kEos ? c.cursor().complete()
                                  : table->special(id) || table->bytes(id).empty()
                                      ? false
                                      : c.cursor().accepts(table->bytes(id));
                EXPECT_EQ(!std::isinf(row[size_t(id)]), want) << "id " << id << " after '" << text << "'";
                if (want) ids.push_back(id);
            }
            const int32_t id = ids[rng() % ids.size()];
            c.advance(id);
            if (id == kEos) break;
            text += table->bytes(id);
        }
        ASSERT_TRUE(c.cursor().complete()) << text;
        EXPECT_NE(std::find(choices->choices().begin(), choices->choices().end(), text), choices->choices().end())
            << text;
        ++ended;
    }
    EXPECT_EQ(ended, 300);
    ChoiceConstraint c(table, choices, {kEos});
    EXPECT_THROW(c.advance(kThinkEnd), Error) << "a special id is never a choice's text";
}

}  // namespace
}  // namespace dsv4
