// The HTTP side of `dsv4 serve` (cpp-httplib): routes, API key, body limits, JSON errors, server-sent events.
// Each request is validated (openai_protocol.h), rendered and tokenized on its connection's thread, handed to the
// engine, and answered from the engine's events as they come (ReplyBuilder turns tokens into OpenAI deltas); a
// streaming client that goes away is cancelled at once. The server listens before the model is loaded: /health
// says 503 until attach(). drain() refuses new work with 503 while what runs finishes. Tested end to end by
// tests/server_e2e (the openai client and curl against `dsv4 serve` on the CPU backend).
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "structured/constraints.h"
#include "tokenizer/tokenizer.h"

namespace httplib {
class Server;
class Request;
class Response;
}  // namespace httplib

namespace dsv4::server {

struct ServerOptions {
    std::string host = "127.0.0.1";
    int port = 8000;  // 0: any free port
    std::string api_key;  // empty: no authentication
    std::string model_name;
    size_t max_body_bytes = size_t(32) << 20;
    int max_connections = 128;  // served at once, a thread each; more wait for a thread (serve: --max-running + 64)
    tok::EncoderEra era = tok::EncoderEra::k0731;
};

struct Generation;

class HttpServer {
  public:
    explicit HttpServer(ServerOptions options);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Binds the listening socket (throws dsv4::Error if it cannot); returns the port.
    int bind();
    // The model is ready: requests are served from now on. All three must outlive the server's serving.
    void attach(const tok::Tokenizer& tokenizer, Engine& engine, const RequestLimits& limits);
    // Serves until stop(); call after bind(), from one thread.
    void serve();
    // New generation requests get 503; returns once the engine is idle or `grace` has passed (then what still runs
    // is cancelled).
    void drain(std::chrono::seconds grace);
    void stop();

  private:
    void routes();
    bool authorized(const httplib::Request& req, httplib::Response& res, bool anthropic = false);
    // POST /v1/chat/completions (chat) and /v1/completions: validate, tokenize, submit, answer (whole or streamed).
    enum class Api { kChat, kCompletions, kResponses, kMessages };
    void generate(const httplib::Request& req, httplib::Response& res, Api api);
    // vLLM's /tokenize and /detokenize (openai_protocol.h).
    void tokenize(const httplib::Request& req, httplib::Response& res);
    void detokenize(const httplib::Request& req, httplib::Response& res);
    // Anthropic's /v1/messages/count_tokens: the prompt tokens a /v1/messages body would run ({"input_tokens"}).
    void count_message_tokens(const httplib::Request& req, httplib::Response& res);
    // Checks each prompt against the context, sets max_tokens, hands the requests to the engine (ApiError on refusal).
    void submit(Generation& g);
    int32_t eos_id(const GenerationOptions& o) const;  // the id that ends a reply (-1: none, ignore_eos)

    ServerOptions options_;
    std::unique_ptr<httplib::Server> http_;
    std::atomic<bool> ready_{false}, draining_{false};
    const tok::Tokenizer* tokenizer_ = nullptr;
    std::shared_ptr<const TokenTable> token_table_;  // the vocabulary's bytes, for structured output
    Engine* engine_ = nullptr;
    RequestLimits limits_;
    Metrics metrics_;
    ConnectionCounts connections_;  // the connection threads' counts (connection_pool.h), for /metrics
    int64_t created_ = 0;
    std::atomic<uint64_t> next_id_{1};
    int listen_fd_ = -1;  // the listening socket (httplib's), to set its backlog
};

}  // namespace dsv4::server
