// dsv4 generate with text on the tiny synthetic model: --prompt streams exactly the text of the generated ids,
// -n and EOS bound it (EOS never printed; --ignore-eos goes on past it), --prompt equals --ids-file with the
// tokenized prompt (BOS first), --chat renders the DeepSeek-V4 chat prompt and shows reasoning apart, and bad inputs
// give clear errors; the penalty flags draw as their definition says; --json and --json-schema write one JSON value
// (on the trained fixture, which finishes its replies).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <regex>

#include "fixture_paths.h"
#include "io/checkpoint.h"
#include "model/cpu_model.h"
#include "tool_test_util.h"

namespace dsv4 {
namespace {

using namespace dsv4::testing;

std::string model_flags() {
    return "-q -m " + tiny_model();
}

std::vector<int64_t> generated_ids(const std::string& args) {
    Result r = run_split("generate " + model_flags() + " " + args + " --print-ids");
    EXPECT_EQ(r.exit_code, 0) << r.output << r.errors;
    return parse_ids(r.output);
}

std::string detokenize(const std::vector<int64_t>& ids) {
    if (ids.empty()) return "";
    Result r = run_split("detokenize --ids " + quote(join_ids(ids)));
    EXPECT_EQ(r.exit_code, 0) << r.errors;
    return r.output;
}

// A copy of the tiny model whose config.json says `key` = value (the shards are linked, not copied).
std::string tiny_with(const std::string& name, const std::string& key, int64_t value) {
    const fs::path dir = temp_path(name);
    fs::create_directories(dir);
    for (const auto& e : fs::directory_iterator(tiny_model()))
        if (e.path().filename() != "config.json") fs::create_symlink(e.path(), dir / e.path().filename());
    auto config = nlohmann::json::parse(read_text(tiny_model() + "/config.json"));
    config[key] = value;
    write_text(name + "/config.json", config.dump(1));
    return dir.string();
}

TEST(Generate, PromptStreamsTheTextOfTheGeneratedIds) {
    DSV4_REQUIRE_TOKENIZER();
    const std::string prompt = quote("The quick brown fox");
    std::vector<int64_t> ids = generated_ids("--prompt " + prompt + " -n 9");
    ASSERT_EQ(ids.size(), 9u);  // the tiny model practically never says EOS in 9 tokens
    Result r = run_split("generate " + model_flags() + " --prompt " + prompt + " -n 9");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(r.output, detokenize(ids) + "\n");
    EXPECT_GT(r.output.size(), 9u);
    EXPECT_EQ(r.errors, "");  // -q: nothing on stderr

    // -n bounds the output, and sampling is seeded.
    EXPECT_EQ(generated_ids("--prompt " + prompt + " -n 3").size(), 3u);
    std::vector<int64_t> a = generated_ids("--prompt " + prompt + " -n 6 --temp 0.8 --top-p 0.9 --seed 5");
    EXPECT_EQ(a, generated_ids("--prompt " + prompt + " -n 6 --temp 0.8 --top-p 0.9 --seed 5"));
    EXPECT_NE(a, generated_ids("--prompt " + prompt + " -n 6 --temp 0.8 --top-p 0.9 --seed 6"));
}

// A dsv4 built with the cuda backend says on stderr when it runs on the CPU only because no backend was named (the
// default without --gpus); a named backend and -q print no such line, nor does a CPU-only build.
TEST(Generate, SaysWhenItRunsOnTheCpuByDefault) {
    const std::string ids = write_text("by_default.ids", "0 17 300");
    const std::string command = "generate -m " + tiny_model() + " --ids-file " + ids + " -n 1 --print-ids";
    const std::string line = "dsv4: running on the CPU, the default without --gpus (--backend cuda runs on a GPU)\n";
    const Result unnamed = run_split(command), named = run_split(command + " --backend cpu"),
                 quiet = run_split(command + " -q");
    for (const Result* r : {&unnamed, &named, &quiet}) ASSERT_EQ(r->exit_code, 0) << r->errors;
#ifdef DSV4_CLI_WITH_CUDA
    EXPECT_NE(unnamed.errors.find(line), std::string::npos) << unnamed.errors;
#else
    EXPECT_EQ(unnamed.errors.find(line), std::string::npos) << unnamed.errors;
#endif
    EXPECT_EQ(named.errors.find(line), std::string::npos) << named.errors;
    EXPECT_EQ(quiet.errors, "");
    EXPECT_EQ(parse_ids(unnamed.output), parse_ids(named.output));  // the same backend either way
}

// --timings: one line on stderr (even with -q) counting the prompt's ids and the generated tokens, each with its
// seconds and their quotient; the ids on stdout as without it.
TEST(Generate, TimingsCountThePromptAndTheGeneratedTokens) {
    const std::string ids = write_text("timed.ids", "0 17 300 42 9 1000 77");
    Result r =
        run_split("generate " + model_flags() + " --ids-file " + ids + " -n 6 --ignore-eos --print-ids --timings");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(parse_ids(r.output).size(), 6u);
    const std::regex line(
        R"(^dsv4: prompt 7 tokens in ([0-9.]+) s \(([0-9.]+) tokens/s\); generated 6 tokens, 5 decode )"
        R"(steps in ([0-9.]+) s \(([0-9.]+) tokens/s\)\n$)");
    std::smatch m;
    ASSERT_TRUE(std::regex_match(r.errors, m, line)) << r.errors;
    const double prompt_s = std::stod(m[1]), prompt_rate = std::stod(m[2]), decode_s = std::stod(m[3]),
                 decode_rate = std::stod(m[4]);
    EXPECT_GT(prompt_s, 0.0);
    EXPECT_GT(decode_s, 0.0);
    // The rates are the counts over the seconds (printed to a millisecond: a tenth of a tick's worth of slack).
    EXPECT_NEAR(prompt_rate, 7 / prompt_s, 7 / prompt_s * (0.0005 / prompt_s) + 0.1) << r.errors;
    EXPECT_NEAR(decode_rate, 5 / decode_s, 5 / decode_s * (0.0005 / decode_s) + 0.1) << r.errors;
    EXPECT_EQ(parse_ids(r.output), generated_ids("--ids-file " + ids + " -n 6 --ignore-eos"));
}

TEST(Generate, PromptEqualsIdsFileOfItsTokens) {
    DSV4_REQUIRE_TOKENIZER();
    const std::string text = "DeepSeek-V4 在 CPU 上运行。\n  Indentation and émojis 🙂 too.";
    Result tok = run_split("tokenize --text " + quote(text));
    ASSERT_EQ(tok.exit_code, 0) << tok.errors;
    std::vector<int64_t> prompt = parse_ids(tok.output);
    ASSERT_GT(prompt.size(), 10u);
    const std::string with_bos = write_text("with_bos.txt", "0 " + join_ids(prompt));
    const std::string without = write_text("without_bos.txt", join_ids(prompt));

    std::vector<int64_t> from_text = generated_ids("--prompt " + quote(text) + " -n 5");
    EXPECT_EQ(from_text.size(), 5u);
    EXPECT_EQ(from_text, generated_ids("--ids-file " + with_bos + " -n 5"));
    std::vector<int64_t> no_bos = generated_ids("--prompt " + quote(text) + " --no-bos -n 5");
    EXPECT_EQ(no_bos, generated_ids("--ids-file " + without + " -n 5"));
    EXPECT_NE(no_bos, from_text);  // BOS is really prepended by default
}

TEST(Generate, StopsAtEosWithoutPrintingIt) {
    DSV4_REQUIRE_TOKENIZER();
    const std::string prompt = quote("Once upon a time");
    std::vector<int64_t> ids = generated_ids("--prompt " + prompt + " -n 12");
    ASSERT_EQ(ids.size(), 12u);
    // Declare the 6th generated token (at its first occurrence) the model's EOS: generation must stop there.
    size_t k = 5;
    k = size_t(std::find(ids.begin(), ids.end(), ids[k]) - ids.begin());
    const std::string dir = tiny_with("tiny_eos", "eos_token_id", ids[k]);
    Result r = run_split("generate -q -m " + dir + " --prompt " + prompt + " -n 12 --print-ids");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(parse_ids(r.output), std::vector<int64_t>(ids.begin(), ids.begin() + long(k) + 1));
    r = run_split("generate -q -m " + dir + " --prompt " + prompt + " -n 12");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(r.output, detokenize({ids.begin(), ids.begin() + long(k)}) + "\n");
    // --ignore-eos: EOS is fed like any token, so the run is the model's own 12 tokens.
    r = run_split("generate -q -m " + dir + " --prompt " + prompt + " -n 12 --print-ids --ignore-eos");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_EQ(parse_ids(r.output), ids);
}

TEST(Generate, ChatRendersTheChatPromptAndShowsReasoningApart) {
    DSV4_REQUIRE_TOKENIZER();
    const std::string messages = write_text("chat.json", R"([{"role": "user", "content": "What is 2 + 2?"}])");
    for (const char* mode : {"", " --thinking"}) {
        Result rendered = run_split("render --messages " + messages + mode + " --print-ids");
        ASSERT_EQ(rendered.exit_code, 0) << rendered.errors;
        const std::string ids_file = write_text("chat_ids.txt", rendered.output);
        EXPECT_EQ(generated_ids("--chat --prompt " + quote("What is 2 + 2?") + mode + " -n 6"),
                  generated_ids("--ids-file " + ids_file + " -n 6"))
            << mode;
    }
    // Thinking mode: the tiny model never closes its reasoning in 8 tokens, so all of it is reasoning, which
    // off a terminal is printed with every line prefixed "> ". Chat mode prints the answer as it is.
    Result r = run_split("generate " + model_flags() + " --chat --thinking --prompt Hi -n 8");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    ASSERT_GT(r.output.size(), 3u);
    std::istringstream lines(r.output);
    for (std::string line; std::getline(lines, line);) EXPECT_EQ(line.rfind("> ", 0), 0u) << r.output;
    r = run_split("generate " + model_flags() + " --chat --prompt Hi -n 8");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    EXPECT_NE(r.output.rfind("> ", 0), 0u) << r.output;
    EXPECT_EQ(r.output.find("\033["), std::string::npos) << "no ANSI styling off a terminal";
}

// --repetition-penalty, --frequency-penalty and --presence-penalty: the greedy ids are those of the definition
// (runtime/logit_adjust.h) written out here on the same model: the repetition penalty once per id of the prompt or
// the output, then the output's frequency and presence penalties, each in float.
TEST(Generate, PenaltiesAsDefined) {
    const std::vector<int32_t> prompt = {0, 17, 4093, 17, 90, 7};
    const std::string ids_file = write_text("penalty_ids.txt", "0 17 4093 17 90 7");
    constexpr int kNew = 8;
    // Penalties below 0 and 1 reward what was seen, so on a random model (which rarely repeats) they change the ids.
    const float rep = 0.3f, freq = -1.0f, pres = -2.0f;
    const std::vector<int64_t> got =
        generated_ids("--ids-file " + ids_file + " -n 8 --greedy --ignore-eos --repetition-penalty 0.3 "
                      "--frequency-penalty -1 --presence-penalty -2");
    auto checkpoint = Checkpoint::open(tiny_model());
    CpuModel model(checkpoint->config(), load_model_weights(checkpoint, checkpoint->config()), Numerics::kModel, 2);
    const int64_t V = checkpoint->config().vocab_size;
    SequenceState state = model.new_sequence();
    std::vector<float> logits = model.forward(state, prompt, false);
    std::vector<int64_t> want;
    std::vector<int32_t> out;
    while (int(out.size()) < kNew) {
        std::vector<float> l = logits;
        for (int32_t id = 0; id < V; ++id) {
            const int64_t count = std::count(out.begin(), out.end(), id);
            if (count > 0 || std::count(prompt.begin(), prompt.end(), id) > 0)
                l[size_t(id)] = l[size_t(id)] > 0 ? l[size_t(id)] / rep : l[size_t(id)] * rep;
            if (count > 0) l[size_t(id)] = (l[size_t(id)] - freq * float(count)) - pres;
        }
        out.push_back(int32_t(std::max_element(l.begin(), l.end()) - l.begin()));
        want.push_back(out.back());
        logits = model.forward(state, std::span(&out.back(), 1), false);
    }
    EXPECT_EQ(got, want);
    EXPECT_NE(got, generated_ids("--ids-file " + ids_file + " -n 8 --greedy --ignore-eos"))
        << "the penalties change nothing on this prompt: the test checks nothing";
}

TEST(Generate, BadInputsGiveClearErrors) {
    DSV4_REQUIRE_TOKENIZER();
    std::string long_prompt;
    for (int i = 0; i < 5000; ++i) long_prompt += " hello";
    struct Case {
        std::string args, env, expected;
    };
    const std::vector<Case> cases = {
        {"--prompt hi", "DSV4_TOKENIZER_JSON=/nonexistent/tokenizer.json", "no tokenizer.json"},
        {"--prompt ''", "", "--prompt is empty"},
        {"-n 4", "", "give the prompt"},
        {"--prompt " + quote(long_prompt), "", "longer than the model's context of 4096"},
        {"--prompt hi -n 4095", "", "exceeds the model's context"},
        {"--prompt hi --thinking", "", "add --chat"},
        {"--prompt hi --chat --effort max", "", "add --thinking"},
        {"--prompt hi --chat --thinking --effort extreme", "", "extreme"},
        {"--prompt hi --greedy --temp 0.5", "", "contradict"},
        {"--prompt hi --temp 1 --top-p 0", "", "--top-p"},
        {"--prompt hi --presence-penalty 3", "", "presence_penalty"},
        {"--prompt hi --repetition-penalty 0", "", "repetition_penalty"},
    };
    for (const auto& c : cases) {
        Result r = run("generate -q -m " + tiny_model() + " " + c.args, c.env);
        EXPECT_EQ(r.exit_code, 1) << c.args.substr(0, 80) << "\n" << r.output;
        EXPECT_NE(r.output.find(c.expected), std::string::npos) << c.args.substr(0, 80) << "\n" << r.output;
        EXPECT_EQ(r.output.find("internal error"), std::string::npos) << r.output;
    }
}

// Structured output: the text is one JSON object (--json) or one value of the schema (--json-schema F), which the
// trained fixture finishes well within -n at these seeds; a schema outside the subset and --ignore-eos are refused.
TEST(Generate, JsonOutputIsOneValueOfItsSchema) {
    const std::string trained = "generate -q -m " + test_fixtures::dir("official-trained-bytes") + " --prompt Hi ";
    Result r = run_split(trained + "--json -n 400 --temp 1 --seed 2");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    ASSERT_TRUE(nlohmann::json::accept(r.output)) << r.output;
    EXPECT_TRUE(nlohmann::json::parse(r.output).is_object()) << r.output;

    write_text("schema.json", R"({"type": "object", "required": ["ok", "n"], "additionalProperties": false,
                                 "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}}})");
    r = run_split(trained + "--json-schema " + temp_path("schema.json") + " -n 400 --temp 1 --seed 1");
    ASSERT_EQ(r.exit_code, 0) << r.errors;
    ASSERT_TRUE(nlohmann::json::accept(r.output)) << r.output;
    const nlohmann::json v = nlohmann::json::parse(r.output);
    EXPECT_EQ(v.size(), 2u) << r.output;
    EXPECT_TRUE(v.at("ok").is_boolean() && v.at("n").is_number_integer()) << r.output;

    write_text("bad.json", R"({"type": "string", "pattern": "x"})");
    r = run_split(trained + "--json-schema " + temp_path("bad.json") + " -n 4");
    EXPECT_NE(r.exit_code, 0);
    EXPECT_NE(r.errors.find("#/pattern"), std::string::npos) << r.errors;
    r = run_split(trained + "--json --ignore-eos -n 4");
    EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace dsv4
