// Shared pieces of the dsv4 subcommands: see common.h.
#include "common.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>

#include <fmt/format.h>

#include "core/error.h"
#include "core/thread_pool.h"
#include "io/checkpoint.h"
#include "model/bench_weights.h"
#include "model/cpu_model.h"
#include "model/expert_range.h"
#include "model/synthetic_checkpoint.h"
#ifdef DSV4_WITH_CUDA
#include "runtime/cuda/cuda_model.h"
#endif
#include "tokenizer/tokenizer_path.h"

namespace dsv4::cli {

void add_model_options(CLI::App* command, ModelOptions& o) {
    command->add_option("-m,--model", o.dir, "Model directory (config.json + *.safetensors)");
    command->add_option("--random-weights", o.random_weights,
                        "Instead of -m: random weights in a synthetic preset's shapes and formats (tiny, flash, pro), "
                        "for measurements without a checkpoint")
        ->check(CLI::IsMember({"tiny", "flash", "pro"}));
    command->add_option("--random-layers", o.random_layers, "Layers of the --random-weights model (0: the preset's)")
        ->check(CLI::NonNegativeNumber);
    command->add_option("--random-seed", o.random_seed, "Seed of the --random-weights model");
    command
        ->add_option("--numerics", o.numerics,
                     "reference (f32, as transformers) | model (official DeepSeek-V4 numerics) | auto "
                     "(model for quantized checkpoints, else reference)")
        ->check(CLI::IsMember({"auto", "reference", "model"}));
    command->add_option("--backend", o.backend, "cpu | cuda (default: cuda with --gpus, else cpu)")
        ->check(CLI::IsMember({"cpu", "cuda"}));
    command->add_option("--threads", o.threads, "CPU threads (0: all cores)")->check(CLI::NonNegativeNumber);
    command->add_flag("-q,--quiet", o.quiet, "No progress or notes on stderr");
    command
        ->add_option("--max-chunk-tokens", o.max_chunk_tokens,
                     "GPU: tokens per forward piece (the same results at any size; larger pieces prefill faster and "
                     "take more memory). 0: generate, chat and logits take the largest of 8192, 4096, ..., 256 that "
                     "the free memory allows (over several GPUs: that of the fullest); serve the longer of "
                     "--step-tokens and --prefill-step-tokens (a step is one piece); otherwise 256; at most 65535")
        ->check(CLI::Range(int64_t{0}, kMaxChunkTokens));
    add_parallel_options(command, o.parallel);
}

void start_ranks_or_exit(ModelOptions& o) {
    DSV4_CHECK(o.dir.empty() != o.random_weights.empty(),
               "give the model: -m DIR (a checkpoint), or --random-weights PRESET (random weights), not both");
    DSV4_CHECK(o.random_weights.size() || (o.random_layers == 0 && o.random_seed == 0),
               "--random-layers and --random-seed go with --random-weights");
    const bool gpus = (o.parallel.gpus_option && o.parallel.gpus_option->count() > 0) || o.parallel.options.nnodes > 1;
    DSV4_CHECK(!(gpus && o.backend == "cpu"), "--gpus runs the model on GPUs: drop --backend cpu");
    if (o.backend.empty()) {
        o.backend = gpus ? "cuda" : "cpu";
#ifdef DSV4_WITH_CUDA
        // A build that runs on GPUs, on the CPU only because no backend was named: said once, since a large model
        // runs minutes there before its first token where a GPU takes seconds.
        if (!o.quiet && !gpus)
            std::fprintf(stderr,
                         "dsv4: running on the CPU, the default without --gpus (--backend cuda runs on a GPU)\n");
#endif
    }
    if (std::optional<int> code = start_ranks(o.parallel, o.rank, o.device)) {
        std::fflush(stdout);
        std::fflush(stderr);
        std::exit(*code);
    }
}

namespace {

// The fingerprints the ranks of a run compare (ranks.h): the checkpoint (its config and tensor index) and the
// options that shape the computation.
RunIdentity run_identity(const ModelConfig& c, const std::string& source, const ModelOptions& o, Numerics numerics) {
    RunIdentity id;
    id.model = fmt::format("layers {} experts {} hidden {} vocab {}, {}", c.num_layers, c.n_routed_experts,
                           c.hidden_size, c.vocab_size, source);
    id.options = fmt::format("numerics {}, sequences {}, context {}, chunk {}", numerics_name(numerics),
                             o.max_sequences, o.max_context, o.max_chunk_tokens);
    return id;
}

// --random-weights: the preset's config (without MTP layers, which the forward does not run) and its weights, the
// routed experts of this rank only, generated on the host (CPU) or left for the GPU to generate (CUDA).
struct RandomModel {
    ModelConfig config;
    ModelWeights weights;
};
RandomModel random_model(const ModelOptions& o, ExpertBytes where) {
    RandomModel r;
    r.config = synthetic_preset(o.random_weights, o.random_layers);
    r.config.num_mtp_layers = 0;
    r.config.mtp_compress_ratios.clear();
    struct Generated {  // the bytes the weights point into, and the pool that made them
        ThreadPool pool;
        BenchWeights bench;
        Generated(int threads, uint64_t seed) : pool(threads), bench(seed, pool) {}
    };
    auto generated = std::make_shared<Generated>(o.threads, o.random_seed);
    const ExpertRange held =
        expert_range(r.config.n_routed_experts, o.rank ? o.rank->rank : 0, o.rank ? o.rank->world : 1);
    r.weights = generated->bench.build(r.config, held, where);
    r.weights.storage = generated;
    return r;
}

}  // namespace

std::unique_ptr<Backend> load_model(const ModelOptions& o) {
    DSV4_CHECK(!o.backend.empty(), "load_model before start_ranks_or_exit");
#ifndef DSV4_WITH_CUDA
    DSV4_CHECK(o.backend == "cpu", "--backend {}: this dsv4 was built without CUDA; use --backend cpu", o.backend);
#endif
    const auto t0 = std::chrono::steady_clock::now();
    auto loaded = [&](const char* what) {
        if (!o.quiet)
            std::fprintf(stderr, "dsv4: %s loaded in %.1f s\n", what,
                         std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    };
    OpenOptions open_options;
    open_options.show_progress = !o.quiet && isatty(STDERR_FILENO) && (!o.rank || o.rank->local_rank == 0);
    const bool random = !o.random_weights.empty();
    std::shared_ptr<const Checkpoint> checkpoint = random ? nullptr : Checkpoint::open(o.dir, open_options);
    std::optional<RandomModel> generated;
    if (random) generated = random_model(o, o.backend == "cuda" ? ExpertBytes::kDevice : ExpertBytes::kHost);
    const ModelConfig& config = random ? generated->config : checkpoint->config();
    Numerics numerics = o.numerics == "auto" ? (config.fp8_quantized ? Numerics::kModel : Numerics::kReference)
                                             : parse_numerics(o.numerics);
    if (!o.quiet && o.numerics == "auto" && (!o.rank || o.rank->leader()))
        std::fprintf(stderr, "dsv4: numerics %s (%s %s; choose with --numerics)\n", numerics_name(numerics),
                     config.fp8_quantized ? "quantized" : "floating-point", random ? "random weights" : "checkpoint");
    ModelWeights weights = random ? std::move(generated->weights) : load_model_weights(checkpoint, config);
    const std::string source =
        random ? fmt::format("random weights {} seed {}", o.random_weights, o.random_seed)
               : fmt::format("{} tensors, {} bytes", checkpoint->tensors().size(), checkpoint->total_bytes());
#ifdef DSV4_WITH_CUDA
    if (o.backend == "cuda") {
        CudaOptions cuda_options;
        cuda_options.device = o.device;
        cuda_options.print_plan = !o.quiet;
        cuda_options.show_progress = open_options.show_progress;  // one line per host: its first rank's
        if (o.max_sequences > 0) cuda_options.max_sequences = o.max_sequences;
        if (o.max_context > 0) cuda_options.max_context = o.max_context;
        if (o.max_chunk_tokens > 0) cuda_options.max_chunk_tokens = o.max_chunk_tokens;
        if (random) cuda_options.random_experts_seed = o.random_seed;  // each GPU makes the experts it holds
        if (o.max_chunk_tokens == 0 && o.auto_chunk) cuda_options.max_chunk_tokens = 0;
        if (!o.rank) {
            auto model = std::make_unique<CudaModel>(config, std::move(weights), numerics, cuda_options);
            loaded("model");
            return model;
        }
        const std::string rank_model =
            fmt::format("rank {} of {}: its share of the model", o.rank->rank, o.rank->world);
        std::unique_ptr<Backend> model = model_on_ranks(
            *o.rank, o.parallel.options, run_identity(config, source, o, numerics),
            [&](const ExpertParallel& ep) -> std::unique_ptr<Backend> {
                cuda_options.expert_parallel = ep;
                auto local = std::make_unique<CudaModel>(config, std::move(weights), numerics, cuda_options);
                loaded(rank_model.c_str());
                return local;
            });
        if (!model) {  // a rank other than 0, done: rank 0 has ended the command
            std::fflush(stdout);
            std::exit(0);
        }
        return model;
    }
#endif
    return std::make_unique<CpuModel>(config, std::move(weights), numerics, o.threads);
}

std::vector<int32_t> read_ids_file(const std::string& path) {
    std::ifstream in(path);
    DSV4_CHECK(in.good(), "cannot read the ids file '{}'", path);
    std::vector<int32_t> ids;
    std::string word;
    while (in >> word) {
        std::optional<int64_t> value = parse_integer(word);
        DSV4_CHECK(value && *value >= 0 && *value <= INT32_MAX,
                   "'{}' in the ids file '{}' is not a token id (a non-negative integer)", word, path);
        ids.push_back(int32_t(*value));
    }
    DSV4_CHECK(!ids.empty(), "the ids file '{}' holds no token ids", path);
    return ids;
}

std::optional<int64_t> parse_integer(const std::string& word) {
    size_t used = 0;
    long long value = 0;
    try {
        value = std::stoll(word, &used);
    } catch (const std::exception&) {
        return std::nullopt;
    }
    if (used != word.size()) return std::nullopt;
    return int64_t(value);
}

void add_sampling_options(CLI::App* command, SamplingOptions& o) {
    command->add_flag("--greedy", o.greedy, "Argmax decoding (the default unless --temp is given)");
    o.temp = command->add_option("--temp", o.params.temperature, "Sampling temperature");
    command->add_option("--top-p", o.params.top_p, "Nucleus sampling mass");
    command->add_option("--top-k", o.params.top_k, "Keep only the k most likely tokens (0: all)");
    command->add_option("--seed", o.params.seed, "Random seed for sampling");
    command->add_option("--min-p", o.params.min_p,
                        "Drop tokens less likely than this fraction of the most likely (0: off)");
    command->add_option("--repetition-penalty", o.adjust.repetition_penalty,
                        "Penalize every token of the prompt or the output: positive logits divided, negative ones "
                        "multiplied (1: off)");
    command->add_option("--frequency-penalty", o.adjust.frequency_penalty,
                        "Subtract this times a token's count in the output from its logit (0: off)");
    command->add_option("--presence-penalty", o.adjust.presence_penalty,
                        "Subtract this from the logit of every token in the output (0: off)");
}

SamplingParams resolve_sampling(const SamplingOptions& o) {
    const bool temp_given = o.temp != nullptr && o.temp->count() > 0;
    DSV4_CHECK(!(o.greedy && temp_given), "--greedy and --temp contradict each other: give one");
    SamplingParams params = o.params;
    params.greedy = o.greedy || !temp_given;
    validate_sampling(params);
    validate_adjustments(o.adjust, INT64_MAX);  // the CLI sets no logit bias
    return params;
}

tok::Tokenizer open_tokenizer(const std::string& model_dir) {
    return tok::Tokenizer::from_file(tok::find_tokenizer_json(model_dir));
}

DecodeResult decode(Backend& model, SequenceState& state, std::span<const int32_t> ids, int64_t max_new,
                    Sampler& sampler, const std::function<void(int32_t)>& on_token, bool stop_at_eos,
                    const LogitAdjustments& adjust, std::span<const int32_t> prompt, TokenConstraint* constraint) {
    const ModelConfig& config = model.config();
    DSV4_CHECK(!ids.empty(), "nothing to feed the model");
    DSV4_CHECK(state.position + int64_t(ids.size()) <= config.max_position_embeddings,
               "the prompt needs {} positions, more than the model's context of {}: shorten it (nothing is truncated)",
               state.position + int64_t(ids.size()), config.max_position_embeddings);
    DecodeResult result;
    TokenHistory history(adjust, prompt.empty() ? ids : prompt);
    std::vector<float> adjusted;
    using Clock = std::chrono::steady_clock;
    const Clock::time_point start = Clock::now();
    std::vector<float> logits = model.forward(state, ids, false);
    const Clock::time_point prompt_done = Clock::now();
    result.prompt_seconds = std::chrono::duration<double>(prompt_done - start).count();
    for (int64_t i = 0; i < max_new; ++i) {
        const float* row = history.row_for_draw(adjust, logits.data(), config.vocab_size, adjusted);
        if (constraint) row = masked_row(*constraint, row, config.vocab_size, adjusted);
        const int32_t next = sampler.sample(row, config.vocab_size);
        if (constraint) constraint->advance(next);
        history.add_output(next);
        result.generated.push_back(next);
        if (next == config.eos_token_id && stop_at_eos) {
            result.hit_eos = true;
            break;
        }
        on_token(next);
        if (i + 1 == max_new) break;
        if (state.position >= config.max_position_embeddings) {
            result.hit_context = true;
            break;
        }
        logits = model.forward(state, std::span(&next, 1), false);
    }
    result.decode_seconds = std::chrono::duration<double>(Clock::now() - prompt_done).count();
    return result;
}

double tokens_per_second(int64_t tokens, double seconds) {
    return tokens ? double(tokens) / std::max(seconds, 1e-9) : 0.0;
}

void print_timings(const DecodeResult& r, int64_t prompt_tokens) {
    std::fflush(stdout);  // after the output, where both go to one terminal or file
    std::fprintf(stderr,
                 "dsv4: prompt %lld tokens in %.3f s (%.1f tokens/s); generated %lld tokens, %lld decode steps "
                 "in %.3f s (%.1f tokens/s)\n",
                 (long long)prompt_tokens, r.prompt_seconds, tokens_per_second(prompt_tokens, r.prompt_seconds),
                 (long long)r.generated.size(), (long long)r.decode_steps(), r.decode_seconds,
                 tokens_per_second(r.decode_steps(), r.decode_seconds));
}

bool stdout_color() {
    const char* no_color = std::getenv("NO_COLOR");
    return isatty(STDOUT_FILENO) && !(no_color && *no_color);
}

ReplyPrinter::ReplyPrinter(const tok::Tokenizer& tokenizer, tok::ThinkingMode mode, bool color)
    : decoder_(tokenizer), stream_(mode), color_(color) {}

void ReplyPrinter::push(int32_t id) {
    print(stream_.feed(decoder_.push(id)));
}

tok::ParsedCompletion ReplyPrinter::finish() {
    tok::CompletionStream::Delta last;
    print(stream_.feed(decoder_.finish()));
    tok::ParsedCompletion parsed = stream_.finish(&last);
    print(last);
    if (in_reasoning_ && color_) std::fputs("\033[0m", stdout);
    for (const auto& call : parsed.tool_calls)
        std::printf("%s[tool call] %s %s", any_content_ || any_reasoning_ ? "\n" : "", call.name.c_str(),
                    call.arguments.c_str());
    std::fputs("\n", stdout);
    std::fflush(stdout);
    return parsed;
}

void ReplyPrinter::print(const tok::CompletionStream::Delta& d) {
    if (!d.reasoning_content.empty()) {
        if (!in_reasoning_ && color_) std::fputs("\033[2m", stdout);
        in_reasoning_ = any_reasoning_ = true;
        for (char ch : d.reasoning_content) {
            if (line_start_ && !color_) std::fputs("> ", stdout);
            std::fputc(ch, stdout);
            line_start_ = ch == '\n';
        }
    }
    if (!d.content.empty()) {
        if (in_reasoning_) {  // the answer starts: end the reasoning block with a blank line
            if (color_) std::fputs("\033[0m", stdout);
            std::fputs(line_start_ ? "\n" : "\n\n", stdout);
            in_reasoning_ = false;
        }
        any_content_ = true;
        std::fwrite(d.content.data(), 1, d.content.size(), stdout);
    }
    std::fflush(stdout);
}

}  // namespace dsv4::cli
