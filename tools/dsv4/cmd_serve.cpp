// dsv4 serve -m DIR: the OpenAI-compatible server (src/server/). Listens first (GET /health says 503 while the
// model loads), then loads the model, starts the engine and serves. SIGTERM or SIGINT drains: new requests get
// 503, running ones finish (or --drain-seconds pass), then the process exits 0. Tested end to end by
// tests/server_e2e (the openai client and curl against this command on the CPU backend).
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <thread>

#include <pthread.h>

#include "commands.h"
#include "common.h"
#include "core/error.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/engine.h"
#include "server/http_server.h"
#include "tokenizer/prompt.h"

namespace dsv4::cli {
namespace {

struct ServeArgs {
    ModelOptions model;
    server::ServerOptions server;
    std::string encoder = "0731";
    int64_t max_running = 16, step_tokens = 256, prefix_cache = 32, snapshot_interval = 256, max_output = 0;
    int64_t prefill_step_tokens = 2048;
    int64_t max_context = 0;
    int drain_seconds = 30;
    bool host_sampling = false;
};

void run_serve(ServeArgs& a) {
    if (a.server.model_name.empty() && !a.model.random_weights.empty())
        a.server.model_name = "random-" + a.model.random_weights + "-" +
                              (a.model.random_layers ? std::to_string(a.model.random_layers) + "-layers" : "all");
    if (a.server.model_name.empty())
        a.server.model_name = std::filesystem::path(a.model.dir).lexically_normal().filename().string();
    if (a.server.model_name.empty())  // DIR ended with a slash
        a.server.model_name = std::filesystem::path(a.model.dir).lexically_normal().parent_path().filename().string();
    a.server.era = tok::parse_encoder_era(a.encoder);
    DSV4_CHECK(a.step_tokens > a.max_running, "--step-tokens ({}) must exceed --max-running ({})", a.step_tokens,
               a.max_running);
    // A request holds its connection's thread from arrival to its last token: with fewer threads than --max-running
    // the running slots cannot fill (256 slots behind 128 threads ran ~100 requests at once, and the rest waited
    // outside the engine: docs/perf.md, "The whole V4-Flash on two H200s ... served"). 64 more serve /health,
    // /metrics and the requests that wait for a slot.
    if (a.server.max_connections == 0)
        a.server.max_connections = int(std::max<int64_t>(128, a.max_running + 64));

    a.model.max_sequences = a.max_running + a.prefix_cache + 1;  // + 1: a cache entry's copy while it is made
    // A step is one forward_batch; on the GPU its tokens run in pieces of --max-chunk-tokens, each a pass over every
    // layer's weights (all the routed experts at large batches). Pieces as long as a step make a step one pass: a
    // 512-token step in pieces of 256 took two (docs/perf.md, "The whole V4-Flash on two H200s ... served").
    a.prefill_step_tokens = std::max(a.prefill_step_tokens, a.step_tokens);
    if (a.model.max_chunk_tokens == 0) a.model.max_chunk_tokens = a.prefill_step_tokens;
    a.model.max_context = a.max_context;
    start_ranks_or_exit(a.model);
    // A rank other than 0 serves nothing itself: it mirrors rank 0's engine and ends with it (load_model does not
    // return there).
    if (a.model.rank && !a.model.rank->leader()) load_model(a.model);

    // Signals go to one thread (sigwait below), whatever thread httplib or the engine runs; a closed socket is an
    // error return, not SIGPIPE.
    std::signal(SIGPIPE, SIG_IGN);
    sigset_t stop_signals;
    sigemptyset(&stop_signals);
    sigaddset(&stop_signals, SIGTERM);
    sigaddset(&stop_signals, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

    server::HttpServer http(a.server);
    const int port = http.bind();
    std::fprintf(stderr, "dsv4 serve: listening on http://%s:%d\n", a.server.host.c_str(), port);
    std::thread serving([&] { http.serve(); });

    // Loading can fail (bad checkpoint, no GPU memory): stop serving and report it like any other command.
    std::unique_ptr<Backend> backend;
    std::optional<tok::Tokenizer> tokenizer;
    try {
        tokenizer.emplace(open_tokenizer(a.model.dir));
        backend = load_model(a.model);
    } catch (...) {
        http.stop();
        serving.join();
        throw;
    }
    const ModelConfig& config = backend->config();
    EngineOptions engine_options;
    engine_options.max_running = a.max_running;
    engine_options.step_tokens = a.step_tokens;
    engine_options.prefill_step_tokens = a.prefill_step_tokens;
    engine_options.max_context =
        a.max_context > 0 ? a.max_context : std::min<int64_t>(config.max_position_embeddings, 16384);
    engine_options.prefix_cache_entries = a.prefix_cache;
    engine_options.snapshot_interval = a.snapshot_interval;
    engine_options.backend_draws = !a.host_sampling;
    Engine engine(*backend, engine_options);
    server::RequestLimits limits;
    limits.max_context = engine_options.max_context;
    limits.max_output = a.max_output;
    limits.vocab_size = config.vocab_size;
    http.attach(*tokenizer, engine, limits);
    if (!a.model.quiet)
        std::fprintf(stderr, "dsv4 serve: ready: model '%s', context %lld, %lld requests at once\n",
                     a.server.model_name.c_str(), (long long)engine_options.max_context, (long long)a.max_running);

    int signal = 0;
    sigwait(&stop_signals, &signal);
    if (!a.model.quiet)
        std::fprintf(stderr, "dsv4 serve: %s: draining (up to %d s)\n", signal == SIGTERM ? "SIGTERM" : "SIGINT",
                     a.drain_seconds);
    http.drain(std::chrono::seconds(a.drain_seconds));
    http.stop();
    serving.join();
}

}  // namespace

void add_serve_command(CLI::App& app) {
    auto* cmd = app.add_subcommand("serve", "OpenAI-compatible HTTP server (chat and text completions, streaming)");
    auto a = std::make_shared<ServeArgs>();
    a->server.max_connections = 0;  // chosen from --max-running in run_serve
    // Over several GPUs a server's batches are many users' sequences: each GPU computes the attention of its own
    // (docs/parallel.md, "The layout decision"). --attention replicated overrides it.
    a->model.parallel.options.attention = "data-parallel";
    add_model_options(cmd, a->model);
    cmd->add_option("--host", a->server.host, "Address to listen on (127.0.0.1: this machine only)");
    cmd->add_option("--port", a->server.port, "Port (0: any free one; printed on stderr)")->check(CLI::Range(0, 65535));
    cmd->add_option("--api-key", a->server.api_key, "Require 'Authorization: Bearer KEY' on the /v1 endpoints");
    cmd->add_option("--served-model-name", a->server.model_name, "The model's name in the API (default: DIR's name, or random-PRESET-...)");
    cmd->add_option("--max-running", a->max_running, "Requests computed at once (continuous batching)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--step-tokens", a->step_tokens,
                    "Tokens per engine step: decodes, then prompt chunks (at most 65535: a step is one GPU piece)")
        ->check(CLI::Range(int64_t{1}, kMaxChunkTokens));
    cmd->add_option("--prefill-step-tokens", a->prefill_step_tokens,
                    "Tokens per step while no request decodes (prompts only): longer steps prefill faster and keep no "
                    "token waiting (at least --step-tokens; the GPU workspace is sized for it)")
        ->check(CLI::Range(int64_t{1}, kMaxChunkTokens));
    cmd->add_option("--prefix-cache", a->prefix_cache, "Computed prefixes kept for reuse (0: no prefix cache)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--prefix-snapshot", a->snapshot_interval,
                    "Also cache prompts every this many tokens (shared system prompts; 0: only whole prompts)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_flag("--host-sampling", a->host_sampling,
                  "Draw every token on the host from copied logits (default: greedy, temperature and min-p draws "
                  "are made on the GPU, the same ids)");
    cmd->add_option("--max-context", a->max_context,
                    "Positions per request, prompt + output (0: the model's, at most 16384)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-output", a->max_output, "Most tokens one request may generate (0: the context bounds it)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-connections", a->server.max_connections,
                    "Connections served at once, each on a thread of its own while its request runs (0: --max-running "
                    "+ 64, at least 128, so that every running slot can be filled)")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--max-body-bytes", a->server.max_body_bytes, "Largest request body (413 beyond)")
        ->check(CLI::PositiveNumber);
    cmd->add_option("--drain-seconds", a->drain_seconds, "On SIGTERM, how long running requests may finish")
        ->check(CLI::NonNegativeNumber);
    cmd->add_option("--encoder", a->encoder, "Prompt encoder era: preview or 0731")
        ->check(CLI::IsMember({"preview", "0731"}));
    cmd->callback([a] { run_serve(*a); });
}

}  // namespace dsv4::cli
