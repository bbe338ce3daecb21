// JsonCursor (structured/json_cursor.h) against nlohmann::json's parser: valid documents are accepted byte by byte and
// complete; whatever it accepts and calls complete parses; every accepted prefix can still be completed; the limits
// and the refused corners (surrogate escapes, overlong UTF-8, trailing bytes) hold.
#include "structured/json_cursor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

namespace dsv4 {
namespace {

JsonLimits any_value() {
    return JsonLimits{.object_only = false};
}

// Feeds every byte; the number accepted before the first refusal.
size_t feed_all(JsonCursor& c, std::string_view text) {
    for (size_t i = 0; i < text.size(); ++i)
        if (!c.feed(uint8_t(text[i]))) return i;
    return text.size();
}

bool whole_document(std::string_view text, JsonLimits limits = {}) {
    JsonCursor c(limits);
    return feed_all(c, text) == text.size() && c.complete();
}

bool parses(std::string_view text) {
    return nlohmann::json::accept(text);
}

// A random value: nested objects and arrays, strings with escapes and multi-byte characters, numbers, literals.
nlohmann::json random_value(std::mt19937& rng, int depth) {
    const int kind = int(rng() % (depth > 3 ? 5 : 7));
    switch (kind) {
        case 0:
            return nullptr;
        case 1:
            return bool(rng() % 2);
        case 2:
            return rng() % 2 ? nlohmann::json(int64_t(rng()) - (1ll << 31))
                             : nlohmann::json(double(rng()) / 7.0e5 - 3e3);
        case 3:
        case 4: {
            static const std::vector<std::string> pieces = {"a",    "Zz", " ",    "\"", "\\",   "/",  "\n", "\t",
                                                            "\x01", "é",  "中文", "😀",  "\x7f", "{}", "[",  "0"};
            std::string s;
            for (int i = int(rng() % 6); i > 0; --i) s += pieces[rng() % pieces.size()];
            return s;
        }
        case 5: {
            nlohmann::json a = nlohmann::json::array();
            for (int i = int(rng() % 4); i > 0; --i) a.push_back(random_value(rng, depth + 1));
            return a;
        }
        default: {
            nlohmann::json o = nlohmann::json::object();
            for (int i = int(rng() % 4); i > 0; --i)
                o["k" + std::to_string(rng() % 100)] = random_value(rng, depth + 1);
            return o;
        }
    }
}

// Completes whatever the cursor holds with the first acceptable byte of a fixed list each time (closing strings,
// numbers, literals and containers); true when it reaches a complete document within `budget` bytes.
bool complete_from(JsonCursor c, std::string& text, int budget = 4096) {
    static const std::string kBytes = std::string("\"}]0:nulrsae\\dc{") + "\x80\x90\xA0";
    for (int i = 0; i < budget && !c.complete(); ++i) {
        bool fed = false;
        for (const char b : kBytes)
            if (c.feed(uint8_t(b))) {
                text += b;
                fed = true;
                break;
            }
        if (!fed) return false;
    }
    return c.complete();
}

TEST(JsonCursor, AcceptsValidDocuments) {
    for (const char* doc : {R"({})", R"({"a":1})", R"( { "a" : [ 1 , -2.5e+3 , true , false , null , "x" ] })",
                            R"({"k":{"n":{"m":[[],[{}]]}},"u":"\u00e9\u4e2d\uD7FF\uE000","e":"\"\\\/\b\f\n\r\t"})",
                            "{\"utf8\":\"é中😀\U0010FFFF\"}", R"({"pair":"\ud83d\ude00\uDBFF\uDFFF"})",
                            R"({"z":0,"f":0.5,"g":1E9,"h":-0e-0})"}) {
        EXPECT_TRUE(parses(doc)) << doc;
        EXPECT_TRUE(whole_document(doc)) << doc;
    }
    for (const char* doc : {"1", "-0.0", "\"s\"", "true", "[1,2]", "null"}) {
        EXPECT_TRUE(whole_document(doc, any_value())) << doc;
        EXPECT_FALSE(whole_document(doc)) << doc << ": the top level must be an object";
    }
}

TEST(JsonCursor, RandomDocumentsAsNlohmannWritesThem) {
    std::mt19937 rng(11);
    for (int trial = 0; trial < 2000; ++trial) {
        nlohmann::json o = nlohmann::json::object();
        o["v"] = random_value(rng, 0);
        for (const int indent : {-1, 2}) {
            const std::string text = o.dump(indent, ' ', /*ensure_ascii=*/trial % 2 == 0);
            JsonCursor c;
            ASSERT_EQ(feed_all(c, text), text.size()) << text;
            EXPECT_TRUE(c.complete()) << text;
        }
    }
}

TEST(JsonCursor, RefusesWhatIsNotJson) {
    for (const char* bad : {"{\"a\":01}",
                            "{\"a\":1,}",
                            "[1,]",
                            "{a:1}",
                            "{'a':1}",
                            "{\"a\" 1}",
                            "{\"a\":.5}",
                            "{\"a\":1.}",
                            "{\"a\":1e}",
                            "{\"a\":+1}",
                            "{\"a\":tru}",
                            "{\"a\":True}",
                            "{\"a\":\"\x01\"}",
                            "{\"a\":\"\\x\"}",
                            "{\"a\":\"\\u12g4\"}",
                            "{\"a\":\"\\ud800\"}",
                            "{\"a\":\"\\uDFFF\"}",
                            "{\"a\":\"\xC0\x80\"}",
                            "{\"a\":\"\xE0\x80\x80\"}",
                            "{\"a\":\"\xED\xA0\x80\"}",
                            "{\"a\":\"\xF4\x90\x80\x80\"}",
                            "{\"a\":\"\xF5\x80\x80\x80\"}",
                            "{\"a\":\"\x80\"}",
                            "{} ",
                            "{}{}",
                            "{}x",
                            "{\"a\":1}}",
                            "{\"a\":[1}",
                            "{\"a\":{1}}",
                            "[}",
                            "{]"}) {
        EXPECT_FALSE(whole_document(bad)) << bad;
        EXPECT_FALSE(whole_document(bad, any_value())) << bad;
    }
    // The last refused byte leaves the cursor as it was.
    JsonCursor c;
    ASSERT_EQ(feed_all(c, "{\"a\":"), 5u);
    EXPECT_FALSE(c.feed(uint8_t('}')));
    EXPECT_TRUE(c.feed(std::string_view("[1]}")));
    EXPECT_TRUE(c.complete());
}

TEST(JsonCursor, LimitsDepthAndWhitespaceRuns) {
    JsonLimits limits;
    limits.max_depth = 3;
    EXPECT_TRUE(whole_document("{\"a\":[{}]}", limits));
    EXPECT_FALSE(whole_document("{\"a\":[[{}]]}", limits));
    limits.max_whitespace_run = 4;
    EXPECT_TRUE(whole_document("{    \"a\":1}", limits));
    EXPECT_FALSE(whole_document("{     \"a\":1}", limits));
    EXPECT_TRUE(whole_document("{\"a\":\"         \"}", limits)) << "whitespace inside strings is content";
    // Numbers: at most 100 integer and 100 fraction digits, two exponent digits (a finite double).
    const std::string hundred(100, '7');
    EXPECT_TRUE(whole_document("{\"n\":-" + hundred + "." + hundred + "e+99}"));
    EXPECT_FALSE(whole_document("{\"n\":" + hundred + "7}"));
    EXPECT_FALSE(whole_document("{\"n\":0." + hundred + "7}"));
    EXPECT_FALSE(whole_document("{\"n\":1e100}"));
    EXPECT_TRUE(whole_document("{\"n\":1E-09}"));
}

// Soundness on random byte soup and mutated documents: whatever is accepted whole and complete parses, and whatever
// prefix is accepted can still be completed into a document that parses.
TEST(JsonCursor, AcceptedPrefixesCompleteAndParse) {
    std::mt19937 rng(5);
    const std::string alphabet =
        std::string("{}[]\":,\\ \n-+.0123456789eEtrufalsn/bu") + "\x01\x7f\xC3\xA9\xE4\xB8\xAD\xF0\x9F";
    int completed = 0;
    for (int trial = 0; trial < 20000; ++trial) {
        std::string text;
        if (trial % 2) {
            nlohmann::json o = nlohmann::json::object();
            o["v"] = random_value(rng, 0);
            text = o.dump();
            for (int m = 0; m < 3; ++m) text[rng() % text.size()] = alphabet[rng() % alphabet.size()];
        } else {
            text = "{";
            for (int i = int(rng() % 40); i > 0; --i) text += alphabet[rng() % alphabet.size()];
        }
        for (const JsonLimits limits : {JsonLimits{}, any_value()}) {
            JsonCursor c(limits);
            const size_t fed = feed_all(c, text);
            if (fed == text.size() && c.complete()) {
                EXPECT_TRUE(parses(text)) << text;
            }
            std::string done = text.substr(0, fed);
            ASSERT_TRUE(complete_from(c, done)) << "prefix " << text.substr(0, fed);
            EXPECT_TRUE(parses(done)) << done;
            if (limits.object_only) {
                EXPECT_TRUE(nlohmann::json::parse(done).is_object()) << done;
            }
            ++completed;
        }
    }
    EXPECT_EQ(completed, 40000);
}

TEST(JsonCursor, AcceptsEqualsFeedingOneByOne) {
    std::mt19937 rng(9);
    const std::string alphabet = "{}[]\":,\\ 0.e-tn\x80\xC3";
    for (int trial = 0; trial < 5000; ++trial) {
        JsonCursor c;
        std::string prefix = "{\"k\":[";
        feed_all(c, prefix.substr(0, rng() % prefix.size()));
        std::string bytes;
        for (int i = 1 + int(rng() % 6); i > 0; --i) bytes += alphabet[rng() % alphabet.size()];
        JsonCursor one = c;
        const bool each = feed_all(one, bytes) == bytes.size();
        EXPECT_EQ(c.accepts(bytes), each) << bytes;
        JsonCursor whole = c;
        EXPECT_EQ(whole.feed(std::string_view(bytes)), each);
    }
}

}  // namespace
}  // namespace dsv4
