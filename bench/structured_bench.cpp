// Host time of one structured-output mask (structured/constraints.h) over DeepSeek-V4's 129,280 ids, at the states a
// JSON reply passes through: before the object, at a key, in a free string value, in a key a schema spells, at a
// value's start, in a number; and in tool calls (content before a block, the block's opening, a parameter's name, a
// raw and a JSON value, a name the schema leaves free). The engine computes one mask per constrained request
// per step (in parallel over requests), so at batch B this is paid B times over the step's cores. Baseline, `alone`:
// each id's bytes tried on the cursor one id at a time (what the trie walk replaced). Each case first checks that the
// mask leaves exactly the ids that are allowed alone (counter `same_mask`: must be 1).
// Usage: dsv4_bench_structured [benchmark flags]
#include <benchmark/benchmark.h>

#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "structured/reply_constraints.h"
#include "tokenizer/tokenizer_path.h"

namespace {

using namespace dsv4;

constexpr int64_t kVocab = 129280;

const tok::Tokenizer& tokenizer() {
    static const tok::Tokenizer t = [] {
        const auto path = tok::installed_tokenizer_json();
        if (!path) throw std::runtime_error("no installed tokenizer.json: run scripts/setup.sh");
        return tok::Tokenizer::from_file(*path);
    }();
    return t;
}

const std::shared_ptr<const TokenTable>& table() {
    static const std::shared_ptr<const TokenTable> t = token_table(tokenizer(), kVocab);
    return t;
}

int32_t eos() {
    return *tokenizer().added_token_id("<｜end▁of▁sentence｜>");
}

const std::shared_ptr<const CompiledSchema>& person_schema() {
    static const std::shared_ptr<const CompiledSchema> s = compile_schema(nlohmann::json::parse(R"({
        "type": "object", "additionalProperties": false, "required": ["name", "age", "email", "tags"],
        "properties": {"name": {"type": "string"}, "age": {"type": "integer"}, "email": {"type": "string"},
                       "nickname": {"type": "string"}, "tags": {"type": "array", "items": {"type": "string"}}}})"));
    return s;
}

struct Case {
    const char* name;
    bool schema;       // the person schema, else any object
    const char* text;  // what the reply holds so far
};
const Case kCases[] = {
    {"object_start", false, ""},
    {"key_start", false, "{"},
    {"free_string", false, "{\"note\": \"The weather is"},
    {"schema_key", true, "{\"na"},
    {"value_start", true, "{\"name\":"},
    {"number", true, "{\"name\": \"Ada\", \"age\": 3"},
};

// The constraint of a case, advanced over its text's ids.
std::unique_ptr<TokenConstraint> at(const Case& c) {
    auto k =
        json_reply(table(), c.schema ? person_schema() : CompiledSchema::any_object(), tok::ThinkingMode::kChat, eos())
            ->clone();
    for (const int32_t id : tokenizer().encode(c.text)) k->advance(id);
    return k;
}

std::vector<int32_t> left(const TokenConstraint& k) {
    std::vector<float> row(size_t(kVocab), 0.0f);
    k.mask(row.data(), kVocab);
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < kVocab; ++id)
        if (!std::isinf(row[size_t(id)])) ids.push_back(id);
    return ids;
}

std::vector<int32_t> alone(const JsonConstraint& k) {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < kVocab; ++id) {
        const bool ok = id == eos() ? k.cursor().complete()
                                    : !table()->special(id) && !table()->bytes(id).empty() &&
                                          k.cursor().accepts(table()->bytes(id));
        if (ok) ids.push_back(id);
    }
    return ids;
}

void BM_Mask(benchmark::State& state, const Case& c) {
    const auto k = at(c);
    const auto& json = static_cast<const JsonConstraint&>(*k);
    const std::vector<int32_t> ids = left(*k);
    state.counters["same_mask"] = ids == alone(json) ? 1 : 0;
    state.counters["ids_left"] = double(ids.size());
    std::vector<float> row(size_t(kVocab), 0.0f);
    for (auto _ : state) {
        k->mask(row.data(), kVocab);
        benchmark::DoNotOptimize(row.data());
    }
}

void BM_Alone(benchmark::State& state, const Case& c) {
    const auto k = at(c);
    const auto& json = static_cast<const JsonConstraint&>(*k);
    for (auto _ : state) benchmark::DoNotOptimize(alone(json));
}

// Tool calls: get_weather is strict (its schema), note takes any arguments. `at_once`: tool_choice "required" (the
// reply is the block); else the block may follow content ("auto" with a strict tool).
struct ToolCase {
    const char* name;
    bool at_once;
    const char* text;
};
const ToolCase kToolCases[] = {
    {"tool/content", false, "Sure, here is the forecast you asked for"},
    {"tool/content_line_feed", false, "Sure.\n"},
    {"tool/opening", true, ""},
    {"tool/param_name", true,
     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\""},
    {"tool/raw_value", true,
     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"city\" "
     "string=\"true\">New Yo"},
    {"tool/json_value", true,
     "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"get_weather\">\n<｜DSML｜parameter name=\"days\" "
     "string=\"false\">1"},
    {"tool/other_name", true, "\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"note\">\n<｜DSML｜parameter name=\"ti"},
};

std::unique_ptr<TokenConstraint> at(const ToolCase& c) {
    static const auto weather = compile_schema(nlohmann::json::parse(R"({"type": "object", "properties": {
        "city": {"type": "string"}, "days": {"type": "integer"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"], "additionalProperties": false})"));
    auto grammar = std::make_shared<const ToolCallGrammar>(
        std::vector<ToolSpec>{{"get_weather", weather}, {"note", CompiledSchema::any_object()}},
        c.at_once ? ToolCallGrammar::Start::kAtOnce : ToolCallGrammar::Start::kAfterContent, false);
    auto k = tool_call_reply(table(), std::move(grammar), tok::ThinkingMode::kChat, eos())->clone();
    for (const int32_t id : tokenizer().encode(c.text)) k->advance(id);
    return k;
}

std::vector<int32_t> alone(const ToolCallConstraint& k) {
    std::vector<int32_t> ids;
    for (int32_t id = 0; id < kVocab; ++id) {
        const std::string_view bytes = table()->bytes(id);
        bool ok = false;
        if (id == eos()) {
            ok = k.cursor().complete();
        } else if (!bytes.empty() && !table()->special(id)) {
            ok = k.cursor().accepts(bytes);
        } else if (!bytes.empty()) {  // a special id: markup (or content) only
            ToolCallCursor c = k.cursor();
            ok = true;
            for (const char b : bytes) ok = ok && (c.in_content() || c.in_markup()) && c.feed(uint8_t(b));
        }
        if (ok) ids.push_back(id);
    }
    return ids;
}

void BM_ToolMask(benchmark::State& state, const ToolCase& c) {
    const auto k = at(c);
    const std::vector<int32_t> ids = left(*k);
    state.counters["same_mask"] = ids == alone(static_cast<const ToolCallConstraint&>(*k)) ? 1 : 0;
    state.counters["ids_left"] = double(ids.size());
    std::vector<float> row(size_t(kVocab), 0.0f);
    for (auto _ : state) {
        k->mask(row.data(), kVocab);
        benchmark::DoNotOptimize(row.data());
    }
}

void BM_ToolAlone(benchmark::State& state, const ToolCase& c) {
    const auto k = at(c);
    for (auto _ : state) benchmark::DoNotOptimize(alone(static_cast<const ToolCallConstraint&>(*k)));
}

const bool registered = [] {
    for (const Case& c : kCases) {
        benchmark::RegisterBenchmark((std::string("mask/") + c.name).c_str(), BM_Mask, c)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((std::string("alone/") + c.name).c_str(), BM_Alone, c)
            ->Unit(benchmark::kMicrosecond);
    }
    for (const ToolCase& c : kToolCases) {
        benchmark::RegisterBenchmark((std::string("mask/") + c.name).c_str(), BM_ToolMask, c)
            ->Unit(benchmark::kMicrosecond);
        benchmark::RegisterBenchmark((std::string("alone/") + c.name).c_str(), BM_ToolAlone, c)
            ->Unit(benchmark::kMicrosecond);
    }
    return true;
}();

}  // namespace

BENCHMARK_MAIN();
