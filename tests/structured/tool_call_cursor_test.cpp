// ToolCallCursor (structured/tool_call_cursor.h) against the DeepSeek-V4 encoder and completion parser
// (tokenizer/prompt.h, completion.h) and a validator of the schema subset written over parsed values: the encoder's
// rendering of arguments is accepted whole exactly when they validate; random walks over what the cursor accepts end
// in text the parser reads into calls of declared tools whose arguments validate; what DSML cannot write is refused.
#include "structured/tool_call_cursor.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "structured/schema_validator.h"
#include "tokenizer/completion.h"
#include "tokenizer/prompt.h"

namespace dsv4 {
namespace {

using nlohmann::json;
using Start = ToolCallGrammar::Start;

const json kWeather = json::parse(R"({
  "type": "object",
  "properties": {
    "city": {"type": "string", "minLength": 1, "description": "where"},
    "days": {"type": "integer"},
    "unit": {"enum": ["c", "f"]},
    "when": {"anyOf": [{"type": "string", "maxLength": 5}, {"type": "null"}]},
    "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 2},
    "é<x": {"type": ["boolean", "number"]}
  },
  "required": ["city"],
  "additionalProperties": false
})");
const json kPing = json::parse(R"({"type": "object", "properties": {}, "additionalProperties": false})");
const json kAny = json::parse(R"({"type": "object"})");

// get_weather and ping are strict; note takes any arguments.
ToolCallGrammar grammar(Start start, bool one_call = false) {
    return ToolCallGrammar({{"get_weather", compile_schema(kWeather)},
                            {"ping", compile_schema(kPing)},
                            {"note", CompiledSchema::any_object()}},
                           start, one_call);
}

const json& schema_of(const std::string& tool) {
    return tool == "get_weather" ? kWeather : tool == "ping" ? kPing : kAny;
}

// The tool-call block as the encoder renders an assistant turn with these calls ({"name", "arguments"} each).
std::string rendered_block(const json& calls) {
    json tool_calls = json::array();
    for (const json& c : calls)
        tool_calls.push_back(
            {{"type", "function"}, {"function", {{"name", c.at("name")}, {"arguments", c.at("arguments").dump()}}}});
    const tok::ordered_json messages =
        tok::ordered_json::parse(json::array({{{"role", "user"}, {"content", "hi"}},
                                              {{"role", "assistant"}, {"content", ""}, {"tool_calls", tool_calls}}})
                                     .dump());
    const std::string prompt = tok::render_prompt(messages, tok::RenderOptions{});
    const size_t begin = prompt.find(ToolCallCursor::kBlockStart);
    const std::string close = "</｜DSML｜tool_calls>";
    const size_t end = prompt.rfind(close);
    EXPECT_NE(begin, std::string::npos) << prompt;
    return prompt.substr(begin, end + close.size() - begin);
}

bool accepted_whole(const ToolCallGrammar& g, const std::string& text) {
    ToolCallCursor c(&g);
    return c.feed(std::string_view(text)) && c.complete();
}

TEST(ToolCallCursor, TheEncodersCallsAreAcceptedWhole) {
    const ToolCallGrammar at_once = grammar(Start::kAtOnce), after = grammar(Start::kAfterContent);
    const json calls = json::parse(R"([
      {"name": "get_weather", "arguments": {"city": "Paris <b>\"x\"\n", "days": 3, "unit": "f", "when": null,
                                           "tags": ["a", "b"], "é<x": 2.5}},
      {"name": "ping", "arguments": {}},
      {"name": "note", "arguments": {"text": "a\\b", "n": [1, {"k": null}], "ok": true}},
      {"name": "get_weather", "arguments": {"when": "today", "city": "中"}}
    ])");
    const std::string block = rendered_block(calls);
    EXPECT_TRUE(accepted_whole(at_once, block)) << block;
    EXPECT_TRUE(accepted_whole(after, "Let me look.\n\nOne moment: <b>" + block)) << block;
    EXPECT_TRUE(accepted_whole(after, "No call needed.\n\n")) << "content alone may end the reply";
    ToolCallCursor c(&at_once);
    EXPECT_FALSE(c.complete()) << "the reply must be the block";
    EXPECT_FALSE(accepted_whole(grammar(Start::kAtOnce, /*one_call=*/true), block)) << "one call only";
    EXPECT_TRUE(accepted_whole(grammar(Start::kAtOnce, true), rendered_block(json::array({calls[0]}))));
}

// Arguments shaped by get_weather's schema with a slip now and then, rendered by the encoder: accepted whole exactly
// when they validate (and no text holds "｜DSML｜", which DSML cannot carry).
json shaped_arguments(std::mt19937& rng) {
    auto slip = [&] { return rng() % 10 == 0; };
    auto pick = [&](std::initializer_list<json> xs) { return *(xs.begin() + rng() % xs.size()); };
    json a = json::object();
    if (!slip()) a["city"] = pick({"Paris", "", "a\tb<c>", "</x", "｜DSML｜", "Zürich \"q\"", "<｜DSML｜", "\\"});
    if (rng() % 2) a["days"] = pick({3, -1, 2.5, "3", nullptr});
    if (rng() % 2) a["unit"] = pick({"c", "f", "k", 1});
    if (rng() % 2) a["when"] = pick({nullptr, "today", "tomorrow", 5});
    if (rng() % 2)
        a["tags"] = pick({json::array(), json::array({"a"}), json::array({"a", "b", "c"}), json::array({1})});
    if (rng() % 3 == 0) a["é<x"] = pick({true, 1.5, "x", nullptr});
    if (slip()) a["other"] = 1;
    return a;
}

bool holds_marker(const json& v) {
    if (v.is_string()) return v.get<std::string>().find("｜DSML｜") != std::string::npos;
    if (v.is_structured())
        for (const auto& [k, x] : v.items())
            if (k.find("｜DSML｜") != std::string::npos || holds_marker(x)) return true;
    return false;
}

TEST(ToolCallCursor, RenderedArgumentsAreAcceptedExactlyWhenTheyValidate) {
    const ToolCallGrammar g = grammar(Start::kAtOnce);
    std::mt19937 rng(11);
    int accepted = 0, refused = 0;
    for (int i = 0; i < 3000; ++i) {
        const json args = shaped_arguments(rng);
        const bool want = testing::validates(args, kWeather, kWeather) && !holds_marker(args);
        const std::string block = rendered_block(json::array({{{"name", "get_weather"}, {"arguments", args}}}));
        EXPECT_EQ(accepted_whole(g, block), want) << block;
        (want ? accepted : refused) += 1;
    }
    EXPECT_GT(accepted, 300);
    EXPECT_GT(refused, 300);
}

// The text a walk writes: at each step one of the chunks the cursor accepts (markup, names, values), else one of the
// bytes it accepts; until it may end.
std::string random_walk(const ToolCallGrammar& g, std::mt19937& rng, int max_steps) {
    static const std::vector<std::string> kChunks = {"\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"",
                                                     "get_weather",
                                                     "ping",
                                                     "note",
                                                     "\">\n",
                                                     "<｜DSML｜parameter name=\"",
                                                     "city",
                                                     "days",
                                                     "unit",
                                                     "when",
                                                     "tags",
                                                     "é<x",
                                                     "text",
                                                     "\" string=\"",
                                                     "true\">",
                                                     "false\">",
                                                     "Paris",
                                                     "</｜DSML｜parameter>\n",
                                                     "</｜DSML｜invoke>",
                                                     "\n</｜DSML｜invoke>",
                                                     "\n<｜DSML｜invoke name=\"",
                                                     "\n</｜DSML｜tool_calls>",
                                                     "3",
                                                     "-1.5e3",
                                                     "null",
                                                     "true",
                                                     "[\"a\"]",
                                                     "{\"k\": [1]}",
                                                     "\"c\"",
                                                     "\"f\"",
                                                     "c",
                                                     "f",
                                                     "<",
                                                     "</",
                                                     "｜DSML｜",
                                                     "\"",
                                                     "\\",
                                                     " ",
                                                     "\n",
                                                     "Hi.",
                                                     "\n\n"};
    ToolCallCursor c(&g);
    std::string text;
    for (int step = 0; step < max_steps; ++step) {
        if (c.complete() && (rng() % 4 == 0 || !c.in_content())) return text;
        std::vector<std::string> options;
        for (const std::string& chunk : kChunks)
            if (c.accepts(chunk)) options.push_back(chunk);
        if (options.empty() || rng() % 5 == 0) {
            options.clear();
            for (int b = 1; b < 256; ++b) {
                const std::string one(1, char(b));
                if (c.accepts(one)) options.push_back(one);
            }
        }
        if (options.empty()) {
            ADD_FAILURE() << "no way on after " << text;
            return text;
        }
        const std::string& next = options[rng() % options.size()];
        EXPECT_TRUE(c.feed(std::string_view(next)));
        text += next;
    }
    return {};  // did not end
}

TEST(ToolCallCursor, RandomWalksWriteCallsTheParserReadsAndTheirSchemasHold) {
    std::mt19937 rng(5);
    int ended = 0, calls = 0;
    for (const Start start : {Start::kAtOnce, Start::kAfterContent})
        for (const bool one_call : {false, true}) {
            const ToolCallGrammar g = grammar(start, one_call);
            for (int walk = 0; walk < 150; ++walk) {
                const std::string text = random_walk(g, rng, 600);
                if (text.empty()) continue;
                ++ended;
                const tok::ParsedCompletion parsed =
                    tok::parse_completion(text + std::string(tok::kEosToken), tok::ThinkingMode::kChat);
                ASSERT_TRUE(parsed.ok()) << parsed.error->message << "\n" << text;
                if (start == Start::kAtOnce) {
                    EXPECT_FALSE(parsed.tool_calls.empty()) << text;
                }
                if (one_call) {
                    EXPECT_LE(parsed.tool_calls.size(), 1u) << text;
                }
                for (const tok::ToolCall& call : parsed.tool_calls) {
                    ++calls;
                    ASSERT_TRUE(call.name == "get_weather" || call.name == "ping" || call.name == "note") << text;
                    const json args = json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
                    ASSERT_FALSE(args.is_discarded()) << call.arguments << "\n" << text;
                    EXPECT_TRUE(testing::validates(args, schema_of(call.name), schema_of(call.name)))
                        << call.arguments << "\n"
                        << text;
                }
            }
        }
    EXPECT_GT(ended, 400);
    EXPECT_GT(calls, 300);
}

TEST(ToolCallCursor, RefusesWhatTheParserOrTheSchemaWouldNot) {
    const ToolCallGrammar g = grammar(Start::kAtOnce);
    const std::string open = std::string(ToolCallCursor::kOpening);
    const auto accepts = [&](const std::string& text) {
        ToolCallCursor c(&g);
        return c.accepts(text);
    };
    const std::string weather = open + "get_weather\">\n";
    const auto param = [](const std::string& name, const std::string& flag, const std::string& value) {
        return "<｜DSML｜parameter name=\"" + name + "\" string=\"" + flag + "\">" + value + "</｜DSML｜parameter>\n";
    };
    EXPECT_TRUE(accepts(weather + param("city", "true", "Paris") + "</｜DSML｜invoke>"));
    EXPECT_FALSE(accepts(open + "get_time")) << "not a declared tool";
    EXPECT_FALSE(accepts(weather + "\n</｜DSML｜invoke>")) << "city is required";
    EXPECT_FALSE(accepts(weather + param("days", "true", "3") + "</｜DSML｜invoke>")) << "city is required";
    EXPECT_FALSE(accepts(weather + param("city", "true", "a") + param("city", "true", "b"))) << "twice";
    EXPECT_FALSE(accepts(weather + param("town", "true", "a"))) << "no other names";
    EXPECT_FALSE(accepts(weather + param("days", "true", "3"))) << "an integer is not raw text";
    EXPECT_TRUE(accepts(weather + param("days", "false", "3")));
    EXPECT_FALSE(accepts(weather + param("days", "false", "3.5"))) << "not an integer";
    EXPECT_FALSE(accepts(weather + param("unit", "true", "k"))) << "not in the enum";
    EXPECT_TRUE(accepts(weather + param("unit", "false", "\"c\"")));
    EXPECT_FALSE(accepts(weather + param("city", "true", ""))) << "minLength 1";
    EXPECT_FALSE(accepts(weather + param("when", "true", "Friday"))) << "maxLength 5";
    EXPECT_TRUE(accepts(weather + param("when", "false", "null")));
    EXPECT_FALSE(accepts(weather + param("city", "true", "a｜DSML｜b"))) << "the marker in a value";
    EXPECT_FALSE(accepts(weather + param("tags", "false", "[\"｜DSML｜\"]"))) << "the marker in a JSON value";
    EXPECT_TRUE(accepts(weather + param("city", "true", "a</｜DSM</b><<"))) << "a close's start is text";
    EXPECT_FALSE(accepts(weather + param("city", "true", "\xC3"))) << "half a UTF-8 character";
    EXPECT_FALSE(accepts(weather + "<｜DSML｜parameter name=\"city\" string=\"yes\">"));
    EXPECT_FALSE(accepts(weather + param("city", "true", "P") + "</｜DSML｜invoke>\n</｜DSML｜tool_calls>x"))
        << "nothing after the block";
    EXPECT_FALSE(accepts(open + "ping\">\n<｜DSML｜parameter")) << "ping takes no parameters";
    EXPECT_TRUE(accepts(open + "ping\">\n\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"));
    const std::string note = open + "note\">\n";
    EXPECT_TRUE(accepts(note + param("any name", "false", "{\"k\": [1]}") + param("b", "true", "x")));
    EXPECT_FALSE(accepts(note + param("a", "true", "1") + param("a", "false", "1"))) << "an other name twice";
    EXPECT_FALSE(accepts(note + param("", "true", "1"))) << "an empty name";
    EXPECT_FALSE(accepts(note + param("a\\b", "true", "1")));
    EXPECT_FALSE(accepts(note + param("a\nb", "true", "1")));
    EXPECT_FALSE(accepts(note + param("a｜DSML｜", "true", "1")));
    for (const char* bad : {"\xC3", "\xC3(", "\xC0\x80", "\xE0\x80\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80", "\xFF"})
        EXPECT_FALSE(accepts(note + param(std::string("a") + bad, "true", "1"))) << "not whole UTF-8 in a name";
    EXPECT_TRUE(accepts(note + param("é中😀\x7F", "true", "1")));
    EXPECT_FALSE(accepts(note + param("a", "false", "") + "</｜DSML｜invoke>")) << "an empty JSON value";
    const ToolCallGrammar after = grammar(Start::kAfterContent);
    ToolCallCursor c(&after);
    EXPECT_TRUE(c.feed(std::string_view("text\n\n<｜DSML｜tool_call")));
    EXPECT_FALSE(c.accepts("x")) << "past the block's opening only its markup";
    EXPECT_TRUE(c.accepts("s>\n<｜DSML｜invoke name=\"note\">\n"));
    EXPECT_FALSE(c.complete()) << "content holding the marker";
    for (const char* refused :
         {"a｜DSML｜", "<think>", "x</think>", "<｜end▁of▁sentence｜>", "\n<｜DSML｜tool_calls"}) {
        ToolCallCursor content(&after);
        EXPECT_FALSE(content.accepts(refused)) << refused;
    }
    EXPECT_TRUE(ToolCallCursor(&after).accepts("<thin>k </think ｜DSM L｜ <｜end"));
}

// Many tools (names found by binary search in the sorted list): each declared name is accepted whole, and no other.
TEST(ToolCallCursor, ManyToolsEachNameAndNoOther) {
    std::vector<ToolSpec> tools;
    for (int i = 0; i < 3000; ++i)
        tools.push_back({"tool_" + std::to_string(i * 7 % 3001), CompiledSchema::any_object()});
    const ToolCallGrammar g(tools, Start::kAtOnce, false);
    const std::string open(ToolCallCursor::kOpening);
    for (const ToolSpec& t : tools) {
        ToolCallCursor c(&g);
        ASSERT_TRUE(c.feed(std::string_view(open + t.name + "\">\n\n</｜DSML｜invoke>"))) << t.name;
    }
    for (const char* absent : {"tool_3001", "tool_", "tool_30000", "tool", "tool_01"}) {
        ToolCallCursor c(&g);
        EXPECT_FALSE(c.accepts(open + absent + "\"")) << absent;
    }
}

TEST(ToolCallGrammar, RefusesWhatDsmlCannotWrite) {
    const auto any = CompiledSchema::any_object();
    EXPECT_THROW(ToolCallGrammar({{"a\"b", any}}, Start::kAtOnce, false), Error);
    EXPECT_THROW(ToolCallGrammar({{"", any}}, Start::kAtOnce, false), Error);
    EXPECT_THROW(ToolCallGrammar({{"a", any}, {"a", any}}, Start::kAtOnce, false), Error);
    EXPECT_THROW(ToolCallGrammar({{"a｜DSML｜", any}}, Start::kAtOnce, false), Error);
    for (const char* schema :
         {R"({"type": "object", "properties": {"a\"b": {}}})", R"({"type": "object", "properties": {"a\\b": {}}})",
          R"({"type": "object", "properties": {"a\nb": {}}})", R"({"type": "string"})",
          R"({"anyOf": [{"type": "object"}, {"type": "null"}]})"})
        EXPECT_THROW(ToolCallGrammar({{"f", compile_schema(json::parse(schema))}}, Start::kAtOnce, false), Error)
            << schema;
    EXPECT_NO_THROW(
        ToolCallGrammar({{"f", compile_schema(json::parse(R"({"properties": {"é x": {}}})"))}}, Start::kAtOnce, false));
}

}  // namespace
}  // namespace dsv4
