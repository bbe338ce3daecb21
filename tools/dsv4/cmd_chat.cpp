// dsv4 chat -m DIR: an interactive conversation in the terminal. Each line read is a user message; the whole
// history is rendered as DeepSeek-V4's prompt every turn, and the sequence state is kept when the new prompt
// extends the tokens it already holds (else it is prefilled again). Replies stream as they are generated, the
// reasoning shown apart from the answer. /reset clears the history, /quit or end of input exits. An error in one
// turn is reported and the conversation goes on. Tested in tests/tools/chat_test.cpp (a scripted stdin).
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <iostream>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "tokenizer/prompt.h"

namespace dsv4::cli {
namespace {

// Ctrl-C while a reply is generated stops that reply; at the input prompt it ends the program as usual.
volatile std::sig_atomic_t g_generating = 0;
volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_sigint(int) {
    if (!g_generating) {
        std::signal(SIGINT, SIG_DFL);
        std::raise(SIGINT);
        return;
    }
    g_interrupted = 1;
}

struct ChatArgs {
    ModelOptions model;
    SamplingOptions sampling;
    std::string system, effort, encoder = "0731";
    int64_t max_new = 256;
    bool thinking = false, verbose = false;
};

const char* kHelp =
    "Type a message and press Enter. Commands: /reset (forget the conversation), /quit (or Ctrl-D) to leave, "
    "/help. Ctrl-C stops a reply.\n";

class ChatSession {
  public:
    ChatSession(const ChatArgs& args, std::unique_ptr<Backend> model, tok::Tokenizer tokenizer)
        : args_(args),
          model_(std::move(model)),
          tokenizer_(std::move(tokenizer)),
          sampler_(resolve_sampling(args.sampling)),
          color_(stdout_color()) {
        options_.thinking_mode = args.thinking ? tok::ThinkingMode::kThinking : tok::ThinkingMode::kChat;
        if (!args.effort.empty()) options_.reasoning_effort = args.effort;
        options_.era = tok::parse_encoder_era(args.encoder);
        reset();
        tok::render_prompt(tok::ordered_json::array({{{"role", "user"}, {"content", "x"}}}), options_);  // checks
    }

    void reset() {
        history_ = tok::ordered_json::array();
        if (!args_.system.empty()) history_.push_back({{"role", "system"}, {"content", args_.system}});
        fed_.clear();
        state_.reset();
    }

    // One user message in, one reply out (streamed). Throws dsv4::Error; the history is then left as before.
    void turn(const std::string& user) {
        tok::ordered_json messages = history_;
        messages.push_back({{"role", "user"}, {"content", user}});
        const std::vector<int32_t> ids = tokenizer_.encode(tok::render_prompt(messages, options_));
        const ModelConfig& config = model_->config();
        DSV4_CHECK(int64_t(ids.size()) < config.max_position_embeddings,
                   "the conversation is {} tokens, which leaves no room in the model's context of {} positions: "
                   "/reset to start over",
                   ids.size(), config.max_position_embeddings);

        // Keep the state when the prompt extends what it holds; the rendered history may tokenize differently
        // from what was generated (or drop earlier reasoning), and then everything is prefilled again.
        size_t reused = 0;
        if (state_ && fed_.size() < ids.size() && std::equal(fed_.begin(), fed_.end(), ids.begin()))
            reused = fed_.size();
        else
            state_ = model_->new_sequence();
        fed_.clear();  // until the turn completes, what the state holds is not known

        ReplyPrinter printer(tokenizer_, options_.thinking_mode, color_);
        const auto start = std::chrono::steady_clock::now();
        g_interrupted = 0;
        g_generating = 1;
        DecodeResult r;
        try {
            r = decode(
                *model_, *state_, std::span(ids).subspan(reused), args_.max_new, sampler_,
                [&](int32_t id) {
                    printer.push(id);
                    if (g_interrupted) throw Interrupted{};
                },
                true, args_.sampling.adjust, ids);
        } catch (const Interrupted&) {  // the reply so far stays on screen; the state is dropped
            g_generating = 0;
            state_.reset();
            printer.finish();
            std::fprintf(stderr, "(interrupted: this exchange is forgotten)\n");
            return;
        } catch (...) {
            g_generating = 0;
            state_.reset();
            throw;
        }
        g_generating = 0;
        if (r.hit_eos) printer.push(int32_t(config.eos_token_id));
        tok::ParsedCompletion parsed = printer.finish();
        const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

        fed_ = ids;
        fed_.insert(fed_.end(), r.generated.begin(), r.generated.end() - 1);  // the last sampled id is not fed
        history_ = std::move(messages);
        history_.push_back(parsed.to_message());
        if (r.hit_context)
            std::fprintf(stderr, "(stopped: the model's context is full; /reset to start over)\n");
        else if (!r.hit_eos)
            std::fprintf(stderr, "(stopped at -n %lld tokens)\n", (long long)args_.max_new);
        if (args_.verbose) {
            const size_t computed = ids.size() - reused;
            std::fprintf(stderr,
                         "(prompt %zu tokens, %zu reused from the last turn, %zu computed in %.3f s (%.1f tokens/s); "
                         "%zu generated in %.2f s, %lld decode steps at %.1f tokens/s)\n",
                         ids.size(), reused, computed, r.prompt_seconds,
                         tokens_per_second(int64_t(computed), r.prompt_seconds), r.generated.size(), seconds,
                         (long long)r.decode_steps(), tokens_per_second(r.decode_steps(), r.decode_seconds));
        }
    }

  private:
    struct Interrupted {};

    const ChatArgs& args_;
    std::unique_ptr<Backend> model_;
    tok::Tokenizer tokenizer_;
    Sampler sampler_;
    bool color_;
    tok::RenderOptions options_;
    tok::ordered_json history_;
    std::optional<SequenceState> state_;
    std::vector<int32_t> fed_;  // the ids state_ has consumed
};

void run_chat(const ChatArgs& args) {
    const bool interactive = isatty(STDIN_FILENO);
    DSV4_CHECK(args.effort.empty() || args.thinking,
               "--effort sets the reasoning effort of thinking mode: add --thinking");
    resolve_sampling(args.sampling);  // flag errors before the model is loaded
    tok::Tokenizer tokenizer = open_tokenizer(args.model.dir);
    ModelOptions model_options = args.model;
    model_options.auto_chunk = true;
    ChatSession session(args, load_model(model_options), std::move(tokenizer));
    std::signal(SIGINT, on_sigint);
    if (interactive) std::fputs(kHelp, stdout);
    std::string line;
    bool eof = false;
    while (true) {
        if (interactive) {
            std::fputs(stdout_color() ? "\033[1m>>> \033[0m" : ">>> ", stdout);
            std::fflush(stdout);
        }
        if (!std::getline(std::cin, line)) {
            eof = true;
            break;
        }
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (line.find_first_not_of(" \t") == std::string::npos) continue;
        if (line == "/quit" || line == "/exit" || line == "/bye") break;
        if (line == "/reset" || line == "/clear") {
            session.reset();
            std::fputs("(conversation cleared)\n", stdout);
            std::fflush(stdout);
            continue;
        }
        if (line == "/help" || line == "/?") {
            std::fputs(kHelp, stdout);
            continue;
        }
        if (line[0] == '/' && line.find(' ') == std::string::npos) {
            std::fprintf(stderr,
                         "dsv4: unknown command %s (/help lists them; a message cannot start with '/' "
                         "and be one word)\n",
                         line.c_str());
            continue;
        }
        try {
            session.turn(line);
        } catch (const Error& e) {
            std::fflush(stdout);
            std::fprintf(stderr, "dsv4: error: %s\n", e.what());
        }
    }
    if (interactive && eof) std::fputs("\n", stdout);  // the prompt line was left open
}

}  // namespace

void add_chat_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("chat", "Chat with a model in the terminal (/reset, /quit)");
    auto a = std::make_shared<ChatArgs>();
    add_model_options(cmd, a->model);
    add_sampling_options(cmd, a->sampling);
    cmd->add_option("-n,--max-new-tokens", a->max_new, "Most tokens per reply")->check(CLI::PositiveNumber);
    cmd->add_flag("--thinking", a->thinking, "Thinking mode: the model reasons first (shown apart from the answer)");
    cmd->add_option("--effort", a->effort, "Reasoning effort in thinking mode (low | high | max)");
    cmd->add_option("--system", a->system, "System message at the start of the conversation");
    cmd->add_option("--encoder", a->encoder, "Prompt encoder era: preview or 0731")
        ->check(CLI::IsMember({"preview", "0731"}));
    cmd->add_flag("-v,--verbose", a->verbose, "After each reply, show prompt tokens, reused tokens and timing");
    cmd->callback([a] {
        start_ranks_or_exit(a->model);  // before stdin is read
        run_chat(*a);
    });
}

}  // namespace dsv4::cli
