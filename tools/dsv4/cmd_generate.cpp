// dsv4 generate: prefill a prompt, then decode up to -n tokens (stopping at EOS) with greedy or seeded sampling.
// The prompt is text (--prompt: raw, BOS prepended; with --chat: one user message rendered as DeepSeek-V4's chat
// prompt) or token ids (--ids-file). Output: the text streamed as it is generated (EOS never printed, reasoning
// shown apart in chat mode), or with --print-ids the generated ids on one line. --json / --json-schema F: the output
// (after the reasoning) is one JSON object / one value of the schema, enforced token by token. --timings: the
// prompt's and the generation's tokens/s on stderr. Tested in tests/tools/.
#include <cstdio>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "io/config_json.h"
#include "structured/reply_constraints.h"
#include "tokenizer/prompt.h"

namespace dsv4::cli {

void add_generate_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("generate", "Generate text (or tokens) after a prompt");
    struct Args {
        ModelOptions model;
        SamplingOptions sampling;
        std::string prompt, ids_file, system, effort, json_schema;
        int64_t max_new = 32;
        bool print_ids = false, no_bos = false, chat = false, thinking = false, ignore_eos = false, json = false;
        bool timings = false;
    };
    auto a = std::make_shared<Args>();
    add_model_options(cmd, a->model);
    auto* prompt = cmd->add_option("-p,--prompt", a->prompt, "Prompt text (BOS is prepended unless --no-bos)");
    auto* ids = cmd->add_option("--ids-file", a->ids_file, "Prompt as a file of whitespace-separated token ids");
    prompt->excludes(ids);
    cmd->add_option("-n,--max-new-tokens", a->max_new, "Most tokens to generate")->check(CLI::PositiveNumber);
    add_sampling_options(cmd, a->sampling);
    cmd->add_flag("--print-ids", a->print_ids, "Print the generated ids, space-separated, on one line");
    cmd->add_flag("--timings", a->timings,
                  "Print the prompt's and the generation's tokens/s on stderr once done (wall clock, the load not "
                  "counted)");
    cmd->add_flag("--no-bos", a->no_bos, "Do not prepend the BOS token to --prompt");
    auto* ignore_eos = cmd->add_flag("--ignore-eos", a->ignore_eos,
                                     "Keep generating after EOS, as after any other token, up to -n (benchmarks)");
    auto* chat = cmd->add_flag("--chat", a->chat,
                               "Wrap --prompt as one user message in DeepSeek-V4's chat format and show the "
                               "reply's reasoning apart from its answer");
    cmd->add_flag("--thinking", a->thinking, "With --chat: thinking mode (the model reasons first)");
    cmd->add_option("--effort", a->effort, "With --chat --thinking: reasoning effort (low | high | max)");
    cmd->add_option("--system", a->system, "With --chat: a system message before the prompt");
    auto* json = cmd->add_flag("--json", a->json,
                               "The output (a chat reply's answer) is one JSON object, enforced token by token");
    auto* schema = cmd->add_option("--json-schema", a->json_schema,
                                   "The output is one JSON value of the JSON Schema in this file (docs/serving.md, "
                                   "\"Structured output\": the subset)")
                       ->check(CLI::ExistingFile);
    json->excludes(schema);
    json->excludes(ignore_eos);
    schema->excludes(ignore_eos);
    chat->excludes(ids);
    chat->excludes(ignore_eos);
    cmd->callback([a, prompt, ids] {
        start_ranks_or_exit(a->model);
        DSV4_CHECK(prompt->count() > 0 || ids->count() > 0, "give the prompt: --prompt TEXT or --ids-file F");
        DSV4_CHECK(prompt->count() == 0 || !a->prompt.empty(),
                   "--prompt is empty: give the text to continue (or token ids with --ids-file F)");
        DSV4_CHECK(a->chat || (!a->thinking && a->effort.empty() && a->system.empty()),
                   "--thinking, --effort and --system shape a chat prompt: add --chat");
        DSV4_CHECK(a->effort.empty() || a->thinking,
                   "--effort sets the reasoning effort of thinking mode: add --thinking");
        SamplingParams params = resolve_sampling(a->sampling);
        const bool text_mode = prompt->count() > 0;
        const tok::ThinkingMode mode = a->thinking ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;

        // The schema and the tokenizer first: a bad schema or a missing tokenizer is found out before the model loads.
        const bool structured = a->json || !a->json_schema.empty();
        std::shared_ptr<const CompiledSchema> schema_of_output;
        if (!a->json_schema.empty()) {
            nlohmann::json parsed;
            try {
                parsed = nlohmann::json::parse(read_text_file(a->json_schema));
            } catch (const nlohmann::json::exception& e) {
                fail("--json-schema {}: not JSON: {}", a->json_schema, e.what());
            }
            try {
                schema_of_output = compile_schema(parsed);
            } catch (const Error& e) {
                fail("--json-schema {}: {}", a->json_schema, e.what());
            }
        } else if (a->json) {
            schema_of_output = CompiledSchema::any_object();
        }
        std::optional<tok::Tokenizer> tokenizer;
        if (text_mode || !a->print_ids || structured) tokenizer.emplace(open_tokenizer(a->model.dir));
        std::vector<int32_t> prompt_ids;
        if (!text_mode) {
            prompt_ids = read_ids_file(a->ids_file);
        } else if (a->chat) {
            tok::ordered_json messages = tok::ordered_json::array();
            if (!a->system.empty()) messages.push_back({{"role", "system"}, {"content", a->system}});
            messages.push_back({{"role", "user"}, {"content", a->prompt}});
            tok::RenderOptions options;
            options.thinking_mode = mode;
            if (!a->effort.empty()) options.reasoning_effort = a->effort;
            options.add_default_bos_token = !a->no_bos;
            prompt_ids = tokenizer->encode(tok::render_prompt(messages, options));
        } else {
            prompt_ids = tokenizer->encode(a->prompt);
        }

        a->model.auto_chunk = true;
        auto model = load_model(a->model);
        const ModelConfig& config = model->config();
        if (text_mode && !a->chat && !a->no_bos) prompt_ids.insert(prompt_ids.begin(), int32_t(config.bos_token_id));
        DSV4_CHECK(!prompt_ids.empty(), "the prompt has no tokens: give some text, or drop --no-bos");
        DSV4_CHECK(int64_t(prompt_ids.size()) <= config.max_position_embeddings,
                   "the prompt is {} tokens, longer than the model's context of {} positions: shorten it (nothing "
                   "is truncated)",
                   prompt_ids.size(), config.max_position_embeddings);
        DSV4_CHECK(int64_t(prompt_ids.size()) + a->max_new <= config.max_position_embeddings,
                   "prompt ({} ids) plus -n {} exceeds the model's context of {} positions: lower -n or shorten the "
                   "prompt",
                   prompt_ids.size(), a->max_new, config.max_position_embeddings);

        Sampler sampler(params);
        SequenceState state = model->new_sequence();
        std::unique_ptr<TokenConstraint> constraint;
        if (structured)
            constraint = json_reply(token_table(*tokenizer, config.vocab_size), schema_of_output,
                                    a->chat ? mode : tok::ThinkingMode::kChat, int32_t(config.eos_token_id))
                             ->clone();
        const auto timings = [&](const DecodeResult& r) {
            if (a->timings) print_timings(r, int64_t(prompt_ids.size()));
        };
        if (a->print_ids) {
            DecodeResult r = decode(
                *model, state, prompt_ids, a->max_new, sampler, [](int32_t) {}, !a->ignore_eos, a->sampling.adjust, {},
                constraint.get());
            std::string line;
            for (size_t i = 0; i < r.generated.size(); ++i) line += (i ? " " : "") + std::to_string(r.generated[i]);
            std::printf("%s\n", line.c_str());
            timings(r);
            return;
        }
        if (a->chat) {
            ReplyPrinter printer(*tokenizer, mode, stdout_color());
            DecodeResult r = decode(
                *model, state, prompt_ids, a->max_new, sampler, [&](int32_t id) { printer.push(id); }, true,
                a->sampling.adjust, {}, constraint.get());
            if (r.hit_eos) printer.push(int32_t(config.eos_token_id));  // ends the completion text; not printed
            printer.finish();
            timings(r);
            return;
        }
        tok::IncrementalDecoder decoder(*tokenizer);
        const DecodeResult r = decode(
            *model, state, prompt_ids, a->max_new, sampler,
            [&](int32_t id) {
                const std::string piece = decoder.push(id);
                std::fwrite(piece.data(), 1, piece.size(), stdout);
                std::fflush(stdout);
            },
            !a->ignore_eos, a->sampling.adjust, {}, constraint.get());
        std::printf("%s\n", decoder.finish().c_str());
        timings(r);
    });
}

}  // namespace dsv4::cli
