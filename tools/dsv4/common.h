// What the dsv4 subcommands share: the model flags (-m, --numerics, --backend, --threads), loading a model
// for them, reading token-id files, the sampling flags, the decode loop and the streamed printing of a reply
// (generate and chat). Errors are dsv4::Error with a sentence the user can act on.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "model/backend.h"
#include "ranks.h"
#include "runtime/logit_adjust.h"
#include "runtime/parallel/parallel_options.h"
#include "runtime/sampler.h"
#include "runtime/token_constraint.h"
#include "tokenizer/completion.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::cli {

struct ModelOptions {
    std::string dir;
    // Instead of a checkpoint (-m): a model of random weights in a synthetic preset's exact shapes and formats
    // (model/bench_weights.h; on the GPU its routed experts are generated there, as dsv4 bench does), so the server
    // and the other commands can be measured at any layer count without writing a checkpoint.
    std::string random_weights;  // tiny | flash | pro; empty: -m
    int64_t random_layers = 0;   // 0: the preset's
    uint64_t random_seed = 0;
    std::string numerics = "auto";  // auto: model numerics for quantized checkpoints, reference for float ones
    std::string backend;            // cpu | cuda; empty: cuda with --gpus, else cpu
    int threads = 0;
    bool quiet = false;
    // Runtime shape for backends with a state pool (CUDA; 0: the backend's default): sequences held at once,
    // positions per sequence, tokens per forward piece.
    int64_t max_sequences = 0, max_context = 0, max_chunk_tokens = 0;
    // With max_chunk_tokens 0: the largest piece the free memory allows (runtime/auto_chunk.h; over ranks the
    // smallest rank's choice) instead of the backend's default; the commands that prefill one user's long prompts set
    // it (generate, chat, logits), the server does not (its pieces are as long as its longest step, and its memory
    // goes to the sequences).
    bool auto_chunk = false;
    // --gpus and the multi-node flags (ranks.h); set by start_ranks_or_exit: this process's rank (in a run over
    // several GPUs) and its GPU.
    ParallelFlags parallel;
    std::optional<parallel::RankInfo> rank;
    int device = 0;
};

void add_model_options(CLI::App* command, ModelOptions& options);

// First thing in every command that runs a model, before it reads stdin or binds a port: in the process the user
// started for a run over several GPUs, starts one process per GPU with this command line and ends with their exit
// code; otherwise notes this process's rank and GPU in `options` and returns.
void start_ranks_or_exit(ModelOptions& options);

// Opens the checkpoint, loads and validates every weight, and builds the backend (--backend cpu, or cuda when
// built with CUDA; --gpus implies cuda). Says on stderr which numerics it runs (unless quiet). In a run over several
// GPUs: on rank 0 the backend the command drives (every call mirrored to the other ranks); on any other rank it
// does not return (the rank follows rank 0 until it ends, then the process ends).
std::unique_ptr<Backend> load_model(const ModelOptions& options);

// Whitespace-separated non-negative token ids; a clear error for anything else or for an empty file.
std::vector<int32_t> read_ids_file(const std::string& path);

// The value of `word` if all of it is a decimal integer (optional sign), else nullopt.
std::optional<int64_t> parse_integer(const std::string& word);

// --greedy | --temp T --top-p P --top-k K --seed S. Greedy unless --temp is given.
struct SamplingOptions {
    SamplingParams params;
    LogitAdjustments adjust;  // --repetition-penalty, --frequency-penalty, --presence-penalty
    bool greedy = false;
    CLI::Option* temp = nullptr;
};
void add_sampling_options(CLI::App* command, SamplingOptions& options);
SamplingParams resolve_sampling(const SamplingOptions& options);  // validated, as are the adjustments

// DIR/tokenizer.json, else the installed one (scripts/setup.sh); an empty dir means the installed one.
tok::Tokenizer open_tokenizer(const std::string& model_dir);

struct DecodeResult {
    std::vector<int32_t> generated;  // sampled ids, EOS included when hit; the last one is never fed
    bool hit_eos = false;
    bool hit_context = false;  // stopped because the model's context is full
    // Wall clock: the prompt's forward (to its logits on the host), then from its first draw to the last draw (the
    // forwards of generated.size() - 1 fed-back tokens and every draw).
    double prompt_seconds = 0.0, decode_seconds = 0.0;
    // The fed-back tokens decode_seconds covers (every generated one but the last).
    int64_t decode_steps() const { return generated.empty() ? 0 : int64_t(generated.size()) - 1; }
};

// tokens / seconds, 0 for no tokens (a rate the timings lines print).
double tokens_per_second(int64_t tokens, double seconds);

// The timings of a decode() on stderr: the prompt's tokens/s and the generated tokens' (llama.cpp's perf line).
void print_timings(const DecodeResult& r, int64_t prompt_tokens);

// Feeds `ids` at state.position (must be non-empty), then samples up to `max_new` tokens, feeding each but the
// last. Stops after sampling EOS (unless !stop_at_eos: then EOS is an ordinary token), at max_new, or when the next
// token would not fit the context. `on_token` sees every generated id but a final EOS, as it comes. Afterwards
// state.position = before + ids.size() + generated.size() - 1. With `adjust`, each draw is from the adjusted logits
// (runtime/logit_adjust.h), the repetition penalty counting the ids of `prompt` (the whole conversation; empty: ids).
// With `constraint`, each draw is from what it leaves (structured/: a JSON reply) and it advances past each id.
DecodeResult decode(Backend& model, SequenceState& state, std::span<const int32_t> ids, int64_t max_new,
                    Sampler& sampler, const std::function<void(int32_t)>& on_token, bool stop_at_eos = true,
                    const LogitAdjustments& adjust = {}, std::span<const int32_t> prompt = {},
                    TokenConstraint* constraint = nullptr);

// Streams a chat reply to stdout as text arrives: parsed with CompletionStream, the reasoning shown apart from
// the answer (dim on a terminal, else every reasoning line prefixed "> "), tool calls listed at the end.
class ReplyPrinter {
  public:
    ReplyPrinter(const tok::Tokenizer& tokenizer, tok::ThinkingMode mode, bool color);
    void push(int32_t id);           // a generated token (EOS included: it ends the completion text, never printed)
    tok::ParsedCompletion finish();  // prints what is left and a final newline

  private:
    void print(const tok::CompletionStream::Delta& d);
    tok::IncrementalDecoder decoder_;
    tok::CompletionStream stream_;
    bool color_;
    bool in_reasoning_ = false, any_reasoning_ = false, any_content_ = false, line_start_ = true;
};

// Whether stdout gets ANSI styling: a terminal, and NO_COLOR unset.
bool stdout_color();

}  // namespace dsv4::cli
