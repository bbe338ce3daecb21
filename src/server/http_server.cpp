// HttpServer: see http_server.h. A generation request becomes a Generation (generation.h: one engine request per
// choice, their events landing in one channel); the connection's thread takes them from there (a plain response
// waits for the last one, a stream writes each delta as an SSE chunk). The engine thread never waits on a client.
#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <functional>
#include <random>

#include "core/error.h"
#include "server/anthropic_messages.h"
#include "server/connection_pool.h"
#include "server/generation.h"
#include "server/openai_responses.h"
#include "server/reply_builder.h"
#include "server/structured_output.h"
#include "tokenizer/prompt.h"

namespace dsv4::server {
namespace {

void send_json(httplib::Response& res, int status, const ordered_json& body) {
    res.status = status;
    res.set_content(safe_dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

std::string random_suffix() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{:016x}", rng());
}

}  // namespace

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
    created_ =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const int threads = options_.max_connections;
    http_->new_task_queue = [this, threads] { return new ConnectionPool(size_t(threads), connections_); };
    http_->set_payload_max_length(options_.max_body_bytes);
    http_->set_read_timeout(30);
    http_->set_write_timeout(30);
    http_->set_tcp_nodelay(true);
    // The listening socket: SO_REUSEADDR only (httplib's default adds SO_REUSEPORT, which lets a second server bind
    // the same port silently), and kept to raise its backlog after bind (below).
    http_->set_socket_options([this](int fd) {
        const int yes = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
        listen_fd_ = fd;
    });
    routes();
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    const int port = options_.port == 0 ? http_->bind_to_any_port(options_.host)
                                        : (http_->bind_to_port(options_.host, options_.port) ? options_.port : -1);
    DSV4_CHECK(port > 0, "cannot listen on {}:{} (in use, or not an address of this machine)", options_.host,
               options_.port);
    // cpp-httplib 0.11 listens with a backlog of 5 (built into Debian's library): a burst of clients connecting at
    // once would be reset. Listening again on the socket sets the backlog (Linux).
    DSV4_CHECK(listen_fd_ >= 0 && ::listen(listen_fd_, SOMAXCONN) == 0, "cannot set the listen backlog of port {}",
               port);
    return port;
}

void HttpServer::attach(const tok::Tokenizer& tokenizer, Engine& engine, const RequestLimits& limits) {
    tokenizer_ = &tokenizer;
    engine_ = &engine;
    token_table_ = token_table(tokenizer, engine.config().vocab_size);
    limits_ = limits;
    ready_ = true;
}

void HttpServer::serve() { http_->listen_after_bind(); }

void HttpServer::drain(std::chrono::seconds grace) {
    draining_ = true;
    if (!ready_) return;
    const Clock::time_point end = Clock::now() + grace;
    while (!engine_->idle() && Clock::now() < end) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (engine_->idle()) return;
    engine_->cancel_all();  // the grace period is over: what still runs ends now (its clients get an error event)
    while (!engine_->idle()) std::this_thread::sleep_for(std::chrono::milliseconds(20));
}

void HttpServer::stop() { http_->stop(); }

bool HttpServer::authorized(const httplib::Request& req, httplib::Response& res, bool anthropic) {
    if (options_.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) return true;
    if (req.get_header_value("x-api-key") == options_.api_key) return true;  // Anthropic's clients send this
    const ApiError e(401, "authentication_error",
                     "a valid API key is required (Authorization: Bearer KEY or x-api-key)");
    if (anthropic)
        send_json(res, 401, anthropic_error(e));
    else
        send_error(res, e);
    metrics_.rejected();
    return false;
}

void HttpServer::routes() {
    http_->Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        res.status = ready_ && !draining_ ? 200 : 503;
        res.set_content(ready_ ? (draining_ ? "draining" : "ok") : "loading", "text/plain");
    });
    http_->Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
        std::optional<Engine::Stats> stats;
        if (ready_) stats = engine_->stats();
        const ConnectionGauges connections{options_.max_connections, connections_.busy.load(),
                                           connections_.waiting.load()};
        res.set_content(metrics_.render(stats ? &*stats : nullptr, connections), "text/plain; version=0.0.4");
    });
    http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        send_json(res, 200, models_response(options_.model_name, created_, limits_.max_context));
    });
    http_->Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) { tokenize(req, res); });
    http_->Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) { detokenize(req, res); });
    http_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Api::kChat); });
    http_->Post("/v1/completions",
                [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Api::kCompletions); });
    http_->Post("/v1/messages",
                [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Api::kMessages); });
    http_->Post("/v1/messages/count_tokens",
                [this](const httplib::Request& req, httplib::Response& res) { count_message_tokens(req, res); });
    http_->Post("/v1/responses",
                [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, Api::kResponses); });
    // Statuses httplib sets by itself (404 no route, 413 body too large, 400 bad request line): OpenAI's error form.
    http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        metrics_.rejected();
        std::string message = fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
        if (res.status == 404)
            message = fmt::format(
                "no route {} {} (see /v1/models, /v1/chat/completions, "
                "/v1/completions, /v1/responses, /v1/messages, /v1/messages/count_tokens, /tokenize, /detokenize, "
                "/health, "
                "/metrics)",
                req.method, req.path);
        if (res.status == 413)
            message = fmt::format("the request body is larger than this server accepts ({} bytes)",
                                  options_.max_body_bytes);
        const ApiError e(res.status, "invalid_request_error", message);
        send_json(res, res.status, req.path.starts_with("/v1/messages") ? anthropic_error(e) : e.to_json());
    });
    http_->set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
        std::string message = "internal error";
        try {
            std::rethrow_exception(ep);
        } catch (const std::exception& e) {
            message = e.what();
        } catch (...) {
        }
        metrics_.rejected();
        send_json(res, 500, ApiError(500, "internal_error", message).to_json());
    });
}

namespace {

// Parses the body as JSON, keeping key order (tool schemas are rendered in the caller's order; 400 on failure) and
// refuses work while loading or draining (503).
ordered_json request_body(const httplib::Request& req, bool ready, bool draining) {
    if (!ready) throw ApiError(503, "service_unavailable", "the model is still loading: retry shortly");
    if (draining) throw ApiError(503, "service_unavailable", "the server is shutting down");
    return parse_json_body(req.body);
}

// Plain (non-streamed) answer. Most come within a second and are sent whole, with their status. A longer one is
// sent chunked so that the wait notices a client that went away: a space every second (JSON allows leading
// whitespace; a write to a closed connection fails by the second one) and the reply last. Its status is then 200
// whatever follows: an error after that point arrives as an OpenAI error object in the body.
void answer_whole(std::shared_ptr<Generation> g, httplib::Response& res) {
    if (wait_events(*g, Clock::now() + std::chrono::seconds(1))) {
        const auto [status, body] = whole_reply(*g);
        return send_json(res, status, body);
    }
    res.set_chunked_content_provider(
        "application/json",
        [g](size_t, httplib::DataSink& sink) {
            while (!wait_events(*g, Clock::now() + std::chrono::seconds(1)))
                if (!sink.write(" ", 1)) return g->cancel_all(), false;
            const std::string body = safe_dump(whole_reply(*g).second);
            if (!sink.write(body.data(), body.size())) return false;
            sink.done();
            return true;
        },
        [g](bool) {  // whatever happened to the connection, the engine requests end
            g->cancel_all();
            g->report_all("cancelled");  // those not counted as finished already
        });
}

// Streamed answer: SSE chunks as deltas become final, each tagged with its choice (their chunks interleave as the
// tokens come); each choice's closing chunks when it finishes; usage and [DONE] once all have. Returns false (and
// cancels) when the client is gone.
void answer_stream(std::shared_ptr<Generation> g, httplib::Response& res) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [g, started](size_t, httplib::DataSink& sink) {
            auto send = [&](const ordered_json& chunk) {
                const std::string line = "data: " + safe_dump(chunk) + "\n\n";
                return sink.write(line.data(), line.size());
            };
            const bool usage_field = g->options.include_usage;
            const bool logprobs = g->options.logprobs;
            if (!*started) {
                *started = true;
                if (g->chat)
                    for (int c = 0; c < int(g->choices.size()); ++c) {
                        ChatDelta first;
                        first.role = "assistant";
                        if (!send(chat_chunk(g->id, g->created, g->model, first, std::nullopt, usage_field, false, c)))
                            return g->cancel_all(), false;
                    }
            }
            // Completions with echo: each choice's text starts with its prompt's, once that prompt's logprobs are
            // known.
            auto send_echo = [&] {
                const int n = g->choices_per_prompt();
                for (int p = 0; p < int(g->prompts.size()); ++p) {
                    PromptGroup& prompt = g->prompts[size_t(p)];
                    if (!g->echo_ready(prompt) || prompt.echo_sent) continue;
                    prompt.echo_sent = true;
                    const std::vector<TokenLogprob> scores = Generation::echoed_logprobs(prompt);
                    for (int c = p * n; c < (p + 1) * n; ++c) {
                        if (!send(completion_chunk(g->id, g->created, g->model, prompt.echo_text, std::nullopt, scores,
                                                   logprobs, usage_field, 0, c)))
                            return false;
                        g->choices[size_t(c)].text_sent += utf8_characters(prompt.echo_text);
                    }
                }
                return true;
            };
            if (!send_echo()) return g->cancel_all(), false;
            // A choice's last chunks: what its builder held back, its tool calls, its finish_reason.
            auto close_choice = [&](int c) {
                Choice& ch = g->choices[size_t(c)];
                const ReplyBuilder::Final f = ch.builder->finish(ch.reason);
                const std::string reason = Generation::outcome(ch, f);
                g->report(ch, reason);
                if (!g->chat)
                    return send(completion_chunk(g->id, g->created, g->model, f.last.content, reason, f.last.logprobs,
                                                 logprobs, usage_field, ch.text_sent, c));
                ChatDelta last;
                last.reasoning_content = f.last.reasoning_content;
                last.content = f.last.content;
                last.logprobs = f.last.logprobs;
                if ((!last.reasoning_content.empty() || !last.content.empty()) &&
                    !send(chat_chunk(g->id, g->created, g->model, last, std::nullopt, usage_field, logprobs, c)))
                    return false;
                if (!f.parsed.tool_calls.empty()) {
                    ChatDelta calls;
                    calls.tool_calls = f.parsed.tool_calls;
                    if (!send(chat_chunk(g->id, g->created, g->model, calls, std::nullopt, usage_field, false, c)))
                        return false;
                }
                return send(chat_chunk(g->id, g->created, g->model, ChatDelta{}, reason, usage_field, false, c));
            };
            // A failed choice ends the stream: the status is sent already, so an error object is the last event,
            // as OpenAI's API does.
            auto fail_stream = [&](const Choice& failed) {
                const bool error = failed.reason == FinishReason::kError;
                const std::string why = error ? failed.error : "the server is shutting down";
                g->cancel_all();
                g->report_all(error ? "error" : "cancelled");
                send(ApiError(500, "internal_error", why).to_json());
                const std::string done = "data: [DONE]\n\n";
                sink.write(done.data(), done.size());
                sink.done();
                return true;
            };
            while (!g->finished()) {
                std::optional<Channel::Tagged> e = g->channel->pop(std::chrono::milliseconds(200));
                if (!e) {
                    if (!sink.is_writable()) return g->cancel_all(), false;
                    continue;
                }
                const int c = e->choice;
                Choice& ch = g->choices[size_t(c)];
                ReplyBuilder::Delta d = g->take(c, e->event);
                if (!send_echo()) return g->cancel_all(), false;
                if (!d.empty()) {
                    bool ok;
                    if (g->chat) {
                        ChatDelta cd;
                        cd.reasoning_content = std::move(d.reasoning_content);
                        cd.content = std::move(d.content);
                        cd.logprobs = std::move(d.logprobs);
                        ok = send(chat_chunk(g->id, g->created, g->model, cd, std::nullopt, usage_field, logprobs, c));
                    } else {
                        ok = send(completion_chunk(g->id, g->created, g->model, d.content, std::nullopt, d.logprobs,
                                                   logprobs, usage_field, ch.text_sent, c));
                        ch.text_sent += utf8_characters(d.content);
                    }
                    if (!ok) return g->cancel_all(), false;
                }
                if (ch.finished) {
                    if (const Choice* failed = g->failed()) return fail_stream(*failed);
                    if (!close_choice(c)) return g->cancel_all(), false;
                }
            }
            // Choices that ended without an event of theirs (refused by the engine when submitted).
            if (const Choice* failed = g->failed()) return fail_stream(*failed);
            bool ok = true;
            if (usage_field) ok = send(usage_chunk(g->id, g->created, g->model, g->chat, g->usage));
            const std::string done = "data: [DONE]\n\n";
            if (ok) ok = sink.write(done.data(), done.size());
            if (ok) sink.done();
            return ok;
        },
        [g](bool) {  // whatever happened to the connection, the engine requests end
            g->cancel_all();
            g->report_all("cancelled");  // those not counted as finished already
        });
}

// A streamed answer of the event-shaped APIs (/v1/responses: ResponseEvents; /v1/messages: MessageEvents) as SSE
// "event: TYPE / data: JSON" records: `start` first, the deltas as they become final, then `finish` of the reply
// (what was held back already sent as a delta), or `fail` of a sentence when it failed. One choice (neither API has n).
struct EventStream {
    std::function<std::vector<ordered_json>()> start;
    std::function<std::vector<ordered_json>(const std::string& reasoning, const std::string& content)> delta;
    std::function<std::vector<ordered_json>(ReplyBuilder::Final& f, const std::string& reason)> finish;
    std::function<std::vector<ordered_json>(const Choice& failed)> fail;
};

void answer_event_stream(std::shared_ptr<Generation> g, httplib::Response& res, std::shared_ptr<EventStream> events) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    auto started = std::make_shared<bool>(false);
    res.set_chunked_content_provider(
        "text/event-stream",
        [g, events, started](size_t, httplib::DataSink& sink) {
            const auto send = [&](const std::vector<ordered_json>& list) {
                for (const ordered_json& e : list) {
                    const std::string record =
                        "event: " + e["type"].get<std::string>() + "\ndata: " + safe_dump(e) + "\n\n";
                    if (!sink.write(record.data(), record.size())) return false;
                }
                return true;
            };
            if (!*started) {
                *started = true;
                if (!send(events->start())) return g->cancel_all(), false;
            }
            while (!g->finished()) {
                std::optional<Channel::Tagged> e = g->channel->pop(std::chrono::milliseconds(200));
                if (!e) {
                    if (!sink.is_writable()) return g->cancel_all(), false;
                    continue;
                }
                const ReplyBuilder::Delta d = g->take(e->choice, e->event);
                if (!send(events->delta(d.reasoning_content, d.content))) return g->cancel_all(), false;
            }
            if (const Choice* failed = g->failed()) {
                g->cancel_all();
                g->report_all(failed->reason == FinishReason::kError ? "error" : "cancelled");
                send(events->fail(*failed));
                sink.done();
                return true;
            }
            Choice& ch = g->choices.front();
            ReplyBuilder::Final f = ch.builder->finish(ch.reason);
            const std::string reason = Generation::outcome(ch, f);
            g->report(ch, reason);
            if (!send(events->delta(f.last.reasoning_content, f.last.content))) return g->cancel_all(), false;
            if (!send(events->finish(f, reason))) return false;
            sink.done();
            return true;
        },
        [g](bool) {  // whatever happened to the connection, the engine requests end
            g->cancel_all();
            g->report_all("cancelled");
        });
}

// Why a choice failed, as a sentence for the client.
ApiError failure(const Choice& failed) {
    return failed.reason == FinishReason::kError ? ApiError(500, "internal_error", failed.error)
                                                 : ApiError(503, "service_unavailable", "the server is shutting down");
}

std::shared_ptr<EventStream> response_events(const Generation& g) {
    auto ev = std::make_shared<ResponseEvents>(g.id, g.created, g.model, g.response_echo);
    const Generation* gen = &g;
    return std::make_shared<EventStream>(EventStream{
        [ev] { return ev->start(); }, [ev](const std::string& r, const std::string& c) { return ev->delta(r, c); },
        [ev, gen](ReplyBuilder::Final& f, const std::string& reason) {
            const Choice& ch = gen->choices.front();
            return ev->finish(ResponseOutcome{std::move(f.parsed), reason, gen->usage, ch.builder->reasoning_tokens()});
        },
        [ev](const Choice& failed) { return ev->failed(failure(failed).what()); }});
}

std::shared_ptr<EventStream> message_events(const Generation& g) {
    auto ev = std::make_shared<MessageEvents>(g.id, g.model, int64_t(g.prompts.front().request.prompt.size()));
    const Generation* gen = &g;
    return std::make_shared<EventStream>(EventStream{
        [ev] { return ev->start(); }, [ev](const std::string& r, const std::string& c) { return ev->delta(r, c); },
        [ev, gen](ReplyBuilder::Final& f, const std::string& reason) {
            return ev->finish(MessageOutcome{std::move(f.parsed), reason, f.stop_sequence, gen->usage});
        },
        [](const Choice& failed) { return std::vector<ordered_json>{anthropic_error(failure(failed))}; }});
}

}  // namespace

int32_t HttpServer::eos_id(const GenerationOptions& o) const {
    return o.ignore_eos ? -1 : int32_t(engine_->config().eos_token_id);  // with ignore_eos, EOS is a token like others
}

namespace {

// One prompt of a validated request: its ids and, for completions, what an echo of it shows.
struct PreparedPrompt {
    std::vector<int32_t> ids;
    bool bos_added = false;  // completions: the server put BOS before its text
    std::string echo_text;   // with echo: the prompt as the client sent it (its ids decoded)
};

// A validated request, ready for the engine: its prompts (several only for completions), options, and how its reply
// is read.
struct Prepared {
    std::vector<PreparedPrompt> prompts;
    GenerationOptions options;
    tok::ThinkingMode mode = tok::ThinkingMode::kChat;
    bool echo = false;  // completions: each choice's reply begins with its prompt
};

// The ids a chat request's prompt is: its messages rendered by the DeepSeek-V4 encoder, tokenized.
std::vector<int32_t> chat_prompt(ChatRequest& r, const ServerOptions& server, const tok::Tokenizer& tokenizer) {
    r.render.era = server.era;
    try {
        return tokenizer.encode(tok::render_prompt(r.messages, r.render));
    } catch (const Error& e) {  // what the DeepSeek-V4 encoder refuses (spec/dsv4-encoding.md §3.9)
        throw ApiError(400, "invalid_request_error", e.what(), "messages");
    }
}

// A parsed chat request (of any of the chat-shaped APIs) ready for the engine.
Prepared prepared_chat(ChatRequest& r, const ServerOptions& server, const tok::Tokenizer& tokenizer) {
    Prepared p;
    p.options = r.options;
    // A continued assistant message has its reasoning closed in the prompt: the reply is content, read as chat's.
    p.mode = r.continues_final ? tok::ThinkingMode::kChat : r.render.thinking_mode;
    p.prompts.emplace_back().ids = chat_prompt(r, server, tokenizer);
    return p;
}

Prepared prepare_completion(const ordered_json& body, const RequestLimits& limits, const ServerOptions& server,
                            const tok::Tokenizer& tokenizer, int32_t bos_id) {
    CompletionRequest r = parse_completion_request(body, limits, server.model_name);
    Prepared p;
    p.options = r.options;
    p.echo = r.echo;
    for (const CompletionPrompt& prompt : r.prompts) {
        PreparedPrompt& pp = p.prompts.emplace_back();
        pp.ids = prompt.ids;
        if (prompt.text) {  // as `dsv4 generate --prompt`: BOS, then the text's tokens
            pp.ids = {bos_id};
            tokenizer.encode_append(*prompt.text, pp.ids);
        }
        pp.bos_added = prompt.text.has_value();
        if (r.echo) pp.echo_text = prompt.text ? *prompt.text : tokenizer.decode(prompt.ids);
    }
    return p;
}

}  // namespace

void HttpServer::generate(const httplib::Request& req, httplib::Response& res, Api api) {
    if (!authorized(req, res, api == Api::kMessages)) return;
    auto g = std::make_shared<Generation>();
    const bool chat = api != Api::kCompletions;
    try {
        const ordered_json body = request_body(req, ready_, draining_);
        Prepared p;
        switch (api) {
            case Api::kChat: {
                ChatRequest r = parse_chat_request(body, limits_, options_.model_name);
                p = prepared_chat(r, options_, *tokenizer_);
                break;
            }
            case Api::kResponses: {
                ResponsesRequest r = parse_responses_request(body, limits_, options_.model_name);
                g->response_echo = std::move(r.echo);
                p = prepared_chat(r.chat, options_, *tokenizer_);
                break;
            }
            case Api::kMessages: {
                ChatRequest r = parse_messages_request(body, limits_, options_.model_name);
                p = prepared_chat(r, options_, *tokenizer_);
                break;
            }
            case Api::kCompletions:
                p = prepare_completion(body, limits_, options_, *tokenizer_, int32_t(engine_->config().bos_token_id));
                break;
        }
        p.options.adjust.bad_words = tokenize_bad_words(p.options.bad_words, *tokenizer_);
        g->chat = chat;
        g->responses = api == Api::kResponses;
        g->messages = api == Api::kMessages;
        g->id = (api == Api::kChat        ? "chatcmpl-"
                 : api == Api::kResponses ? "resp_"
                 : api == Api::kMessages  ? "msg_"
                                          : "cmpl-") +
                random_suffix();
        g->model = options_.model_name;
        g->created = created_;
        g->options = p.options;
        g->engine = engine_;
        g->metrics = &metrics_;
        g->draining = &draining_;
        g->tokenizer = tokenizer_;
        g->echo = p.echo;
        g->choices.resize(p.prompts.size() * size_t(p.options.n));
        for (Choice& c : g->choices) c.builder.emplace(*tokenizer_, eos_id(p.options), chat, p.mode, p.options);
        const auto constraint =
            response_constraint(p.options, p.mode, token_table_, int32_t(engine_->config().eos_token_id));
        for (PreparedPrompt& prompt : p.prompts) {
            PromptGroup& group = g->prompts.emplace_back();
            group.drop_first_score = prompt.bos_added;
            group.echo_text = std::move(prompt.echo_text);
            group.request.prompt = std::move(prompt.ids);
            group.request.constraint = constraint;
        }
        if (const char* kind = constraint_kind(p.options)) metrics_.constrained(kind);
        submit(*g);
    } catch (const ApiError& e) {
        metrics_.rejected();
        if (api == Api::kMessages) return send_json(res, e.status(), anthropic_error(e));
        return send_error(res, e);
    }
    if (g->options.stream && g->messages)
        answer_event_stream(g, res, message_events(*g));
    else if (g->options.stream && g->responses)
        answer_event_stream(g, res, response_events(*g));
    else if (g->options.stream)
        answer_stream(g, res);
    else
        answer_whole(g, res);
}

void HttpServer::tokenize(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    try {
        const ordered_json body = request_body(req, ready_, draining_);
        TokenizeRequest t = parse_tokenize_request(body, limits_, options_.model_name);
        std::vector<int32_t> ids;
        if (t.chat) {
            ids = chat_prompt(*t.chat, options_, *tokenizer_);
        } else {  // as /v1/completions runs a text prompt
            if (t.add_bos) ids.push_back(int32_t(engine_->config().bos_token_id));
            tokenizer_->encode_append(*t.prompt_text, ids);
        }
        send_json(res, 200, tokenize_response(ids, limits_.max_context));
    } catch (const ApiError& e) {
        metrics_.rejected();
        send_error(res, e);
    }
}

void HttpServer::count_message_tokens(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res, /*anthropic=*/true)) return;
    try {
        const ordered_json body = request_body(req, ready_, draining_);
        ChatRequest r = parse_messages_request(body, limits_, options_.model_name, MessagesUse::kCountTokens);
        send_json(res, 200, {{"input_tokens", chat_prompt(r, options_, *tokenizer_).size()}});
    } catch (const ApiError& e) {
        metrics_.rejected();
        send_json(res, e.status(), anthropic_error(e));
    }
}

void HttpServer::detokenize(const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    try {
        const ordered_json body = request_body(req, ready_, draining_);
        send_json(
            res, 200,
            detokenize_response(tokenizer_->decode(parse_detokenize_request(body, limits_, options_.model_name))));
    } catch (const ApiError& e) {
        metrics_.rejected();
        send_error(res, e);
    }
}

// Every prompt's engine request, checked against the context before any is submitted; then each prompt's first
// choice (its others follow its first event: Generation::submit_rest). A refusal after some were submitted cancels
// those.
void HttpServer::submit(Generation& g) {
    for (size_t i = 0; i < g.prompts.size(); ++i) {
        EngineRequest& r = g.prompts[i].request;
        if (const int64_t t = g.options.truncate_prompt_tokens) {  // vLLM's: the prompt's last tokens, as asked
            const int64_t keep = t > 0 ? t : limits_.max_context;
            if (keep > 0 && int64_t(r.prompt.size()) > keep) r.prompt.erase(r.prompt.begin(), r.prompt.end() - keep);
        }
        const std::string param = g.chat ? "messages" : g.prompts.size() > 1 ? fmt::format("prompt[{}]", i) : "prompt";
        const int64_t max_new = resolve_max_tokens(int64_t(r.prompt.size()), g.options, limits_, param);
        r.max_new_tokens = max_new;
        r.sampling = g.options.sampling;
        r.adjust = g.options.adjust;
        r.stop_at_eos = !g.options.ignore_eos;
        r.stop_ids = g.options.stop_token_ids;
        r.min_new_tokens = std::min(g.options.min_tokens, max_new);
        r.logprobs = g.options.logprobs ? g.options.top_logprobs : -1;
        // An echo with logprobs scores the prompt; so does one that asks for no tokens (the engine runs the prompt).
        if (g.echo && (g.options.logprobs || max_new == 0)) r.prompt_logprobs = g.options.top_logprobs;
    }
    const int n = g.choices_per_prompt();
    for (int p = 0; p < int(g.prompts.size()); ++p) {
        Choice& first = g.choices[size_t(p * n)];
        try {
            first.engine_id = engine_->submit(g.request_of(p * n));
            first.submitted = true;
        } catch (const Error& e) {
            g.cancel_all();
            throw ApiError(400, "invalid_request_error", e.what());
        }
    }
}

}  // namespace dsv4::server
