// compile_schema and SchemaCursor (structured/json_schema.h, schema_cursor.h) against a validator of the same subset
// written here over parsed values: documents spelled as nlohmann::json writes them are accepted whole exactly when
// they validate; random byte walks over what the cursor accepts end in documents that parse and validate; and what
// the subset does not hold is refused with its path.
#include "structured/schema_cursor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "core/error.h"
#include "structured/schema_validator.h"

namespace dsv4 {
namespace {

using nlohmann::json;

const json kSchema = json::parse(R"({
  "$defs": {
    "Address": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 8}, "zip": {"type": "integer"}},
                "required": ["city"], "additionalProperties": false},
    "Node": {"type": "object", "title": "a list",
             "properties": {"v": {"type": "integer"}, "next": {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}},
             "required": ["v"], "additionalProperties": false}
  },
  "type": "object",
  "properties": {
    "name": {"type": "string", "minLength": 1, "description": "who"},
    "age": {"type": "integer"},
    "score": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string", "enum": ["a", "bc", "b"]}, "minItems": 1, "maxItems": 3},
    "color": {"enum": ["red", "green", null, 7, true]},
    "home": {"allOf": [{"$ref": "#/$defs/Address"}], "description": "where"},
    "maybe": {"anyOf": [{"type": "string"}, {"type": "null"}]},
    "list": {"$ref": "#/$defs/Node"},
    "extra": {"type": "object", "additionalProperties": {"type": "boolean"}},
    "any": {},
    "é\"q": {"type": ["boolean", "null"]}
  },
  "required": ["name", "tags", "color"],
  "additionalProperties": false
})");

bool validates(const json& v, const json& s) {
    return testing::validates(v, s, kSchema);
}

bool accepted_whole(const CompiledSchema& schema, const std::string& text) {
    SchemaCursor c(&schema);
    return c.feed(std::string_view(text)) && c.complete();
}

// Values shaped by the schema with a slip now and then: a wrong type, a missing or unknown key, an item too many, a
// string too long, an enum miss.
json shaped(const json& s, std::mt19937& rng, int depth) {
    auto slip = [&] { return rng() % 12 == 0; };
    if (slip()) {
        const json odd[] = {json(1), json(2.5), json("x"), json(nullptr), json(true), json::object(), json::array()};
        return odd[rng() % std::size(odd)];
    }
    if (s.contains("$ref")) {
        const std::string ref = s.at("$ref");
        return shaped(kSchema.at("$defs").at(ref.substr(8)), rng, depth + 1);
    }
    if (s.contains("allOf")) return shaped(s.at("allOf")[0], rng, depth);
    if (s.contains("anyOf")) return shaped(s.at("anyOf")[rng() % s.at("anyOf").size()], rng, depth + 1);
    if (s.contains("enum")) return slip() ? json("blue") : s.at("enum")[rng() % s.at("enum").size()];
    const json type = s.contains("type")
                          ? (s.at("type").is_array() ? s.at("type")[rng() % s.at("type").size()] : s.at("type"))
                          : json("integer");
    if (type == "object") {
        json o = json::object();
        if (depth > 4) return o;
        const json properties = s.value("properties", json::object());
        for (const auto& [k, sub] : properties.items())
            if (rng() % 3 || (s.contains("required") && !slip() &&
                              std::find(s.at("required").begin(), s.at("required").end(), k) != s.at("required").end()))
                o[k] = shaped(sub, rng, depth + 1);
        if (slip() || s.value("additionalProperties", json(true)).is_object()) o["zz"] = rng() % 2 == 0;
        return o;
    }
    if (type == "array") {
        json a = json::array();
        for (int i = int(rng() % 4); i > 0; --i) a.push_back(shaped(s.value("items", json::object()), rng, depth + 1));
        return a;
    }
    if (type == "string") {
        static const char* pieces[] = {"a", "é", "中", "b"};
        std::string text;
        for (int i = int(rng() % 10); i > 0; --i) text += pieces[rng() % 4];
        return text;
    }
    if (type == "number") return double(int(rng() % 2000) - 1000) / 8.0;
    if (type == "integer") return int(rng() % 200) - 100;
    if (type == "boolean") return rng() % 2 == 0;
    return nullptr;
}

TEST(JsonSchema, DocumentsAreAcceptedExactlyWhenTheyValidate) {
    const auto schema = compile_schema(kSchema);
    std::mt19937 rng(21);
    int valid = 0, invalid = 0;
    for (int trial = 0; trial < 8000; ++trial) {
        const json v = shaped(kSchema, rng, 0);
        const std::string text = v.dump(-1, ' ', false);
        const bool want = validates(v, kSchema);
        EXPECT_EQ(accepted_whole(*schema, text), want) << text;
        (want ? valid : invalid)++;
    }
    EXPECT_GT(valid, 400);
    EXPECT_GT(invalid, 400);
    for (const char* text : {R"({"name":"x","tags":["a"],"color":"red"})",
                             R"({"color":7,"tags":["bc","b","a"],"name":"é","maybe":null,"é\"q":null})",
                             R"({"name":"x","tags":["a"],"color":null,"list":{"v":1,"next":{"v":-2,"next":null}}})"})
        EXPECT_TRUE(accepted_whole(*schema, text)) << text;
    for (const char* text :
         {R"({"name":"","tags":["a"],"color":"red"})", R"({"name":"x","tags":[],"color":"red"})",
          R"({"name":"x","tags":["a","a","a","a"],"color":"red"})", R"({"name":"x","tags":["a"],"color":"re"})",
          R"({"name":"x","tags":["a"],"color":70})", R"({"name":"x","tags":["a"],"color":"red","age":1.5})",
          R"({"name":"x","tags":["a"],"color":"red","age":1e3})",
          R"({"name":"x","name":"y","tags":["a"],"color":"red"})",
          R"({"name":"x","tags":["a"],"color":"red","home":{"city":"123456789"}})",
          R"({"name":"x","tags":["a"],"color":"red","nope":1})"})
        EXPECT_FALSE(accepted_whole(*schema, text)) << text;
}

// Random byte walks: every byte the cursor takes, until it is complete (closing what is open after a while); each
// walk's text parses and validates.
TEST(JsonSchema, WalksWriteDocumentsThatValidate) {
    const auto schema = compile_schema(kSchema);
    std::mt19937 rng(4);
    std::string alphabet;
    for (int b = 0x20; b < 0x7F; ++b) alphabet += char(b);
    alphabet += "\xC3\xA9\n";
    const std::string closing = "\"}],0:truefalsn";
    for (int walk = 0; walk < 300; ++walk) {
        SchemaCursor c(schema.get());
        std::string text;
        for (int step = 0; !c.complete(); ++step) {
            ASSERT_LT(step, 5000) << text;
            std::string ok;
            for (const char b : alphabet)
                if (c.accepts(std::string_view(&b, 1))) ok += b;
            ASSERT_FALSE(ok.empty()) << "no way on after " << text;
            char b = ok[rng() % ok.size()];
            if (step > 40 && rng() % 4)
                for (const char p : closing)
                    if (ok.find(p) != std::string::npos) {
                        b = p;
                        break;
                    }
            ASSERT_TRUE(c.feed(uint8_t(b)));
            text += b;
        }
        ASSERT_TRUE(json::accept(text)) << text;
        EXPECT_TRUE(validates(json::parse(text), kSchema)) << text;
    }
}

TEST(JsonSchema, AnyObjectIsJsonObjectMode) {
    const auto any = CompiledSchema::any_object();
    EXPECT_TRUE(accepted_whole(*any, R"({"a":[1,{"b":null}],"c":"d"})"));
    EXPECT_FALSE(accepted_whole(*any, "[1]"));
    EXPECT_FALSE(accepted_whole(*any, "\"s\""));
}

TEST(JsonSchema, RefusesWhatTheSubsetDoesNotHold) {
    auto refused = [](const char* schema, const char* where) {
        try {
            compile_schema(json::parse(schema));
            ADD_FAILURE() << schema << " was accepted";
        } catch (const Error& e) {
            EXPECT_NE(std::string(e.what()).find(where), std::string::npos) << e.what();
        }
    };
    refused(R"({"type": "string", "pattern": "a+"})", "#/pattern");
    refused(R"({"properties": {"n": {"type": "number", "minimum": 0}}})", "#/properties/n/minimum");
    refused(R"({"allOf": [{"type": "string"}, {"maxLength": 3}]})", "#/allOf");
    refused(R"({"allOf": [{"type": "string"}], "maxLength": 3})", "#/allOf");
    refused(R"({"type": "strin"})", "#/type");
    refused(R"({"enum": []})", "#/enum");
    refused(R"({"enum": [{"a": 1}]})", "#/enum");
    refused(R"({"required": ["x"], "properties": {}})", "required");
    refused(R"({"$ref": "#/$defs/Missing"})", "#/$defs/Missing");
    refused(R"({"anyOf": [{"type": "object"}, {"type": "object", "properties": {"a": {}}}]})",
            "two branches allow a object");
    refused(R"({"type": "array", "items": [{"type": "string"}]})", "#/items");
    refused(R"({"minItems": 3, "maxItems": 2})", "minimum above its maximum");
    refused("false", "#");
    refused(R"({"nullable": 1})", "#/nullable");
    std::string deep;
    for (int i = 0; i < 5000; ++i) deep += "{\"items\":";
    deep += "{}" + std::string(5000, '}');
    refused(deep.c_str(), "nested deeper than 64");
    // Annotations are accepted and not enforced.
    EXPECT_NO_THROW(compile_schema(json::parse(
        R"({"title": "t", "description": "d", "type": "string", "format": "date-time", "default": "x", "examples": ["y"]})")));
}

TEST(JsonSchema, TopLevelScalarsAndIntegers) {
    const auto integer = compile_schema(json::parse(R"({"type": "integer"})"));
    EXPECT_TRUE(accepted_whole(*integer, "-12"));
    EXPECT_FALSE(accepted_whole(*integer, "1.5"));
    EXPECT_FALSE(accepted_whole(*integer, "\"1\""));
    const auto numbers = compile_schema(json::parse(R"({"enum": [1, 10, 2.5]})"));
    EXPECT_TRUE(accepted_whole(*numbers, "1"));
    EXPECT_TRUE(accepted_whole(*numbers, "10"));
    EXPECT_TRUE(accepted_whole(*numbers, "2.5"));
    EXPECT_FALSE(accepted_whole(*numbers, "2"));
    SchemaCursor c(numbers.get());
    EXPECT_TRUE(c.feed(uint8_t('1')));
    EXPECT_TRUE(c.complete()) << "1 may end here";
    EXPECT_FALSE(c.accepts("5")) << "15 is no value";
}

}  // namespace
}  // namespace dsv4
