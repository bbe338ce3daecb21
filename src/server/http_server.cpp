// HttpServer: see http_server.h. A generation request becomes one engine request whose events land in a channel;
// the connection's thread takes them from there (a plain response waits for the last one, a stream writes each
// delta as an SSE chunk). The engine thread never waits on a client.
#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cmath>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <random>

#include "core/error.h"
#include "server/reply_builder.h"
#include "tokenizer/prompt.h"

namespace dsv4::server {
namespace {

using Clock = std::chrono::steady_clock;

void send_json(httplib::Response& res, int status, const ordered_json& body) {
    res.status = status;
    res.set_content(safe_dump(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& e) { send_json(res, e.status(), e.to_json()); }

// A request's events (of all its choices, each tagged with its choice), handed from the engine thread to the
// connection's thread.
struct Channel {
    struct Tagged {
        int choice = 0;
        EngineEvent event;
    };
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<Tagged> events;

    void push(int choice, const EngineEvent& e) {
        {
            std::lock_guard lock(mutex);
            events.push_back({choice, e});
        }
        cv.notify_one();
    }
    // The next event, or nullopt after `timeout` without one.
    std::optional<Tagged> pop(std::chrono::milliseconds timeout) {
        std::unique_lock lock(mutex);
        if (!cv.wait_for(lock, timeout, [&] { return !events.empty(); })) return std::nullopt;
        Tagged e = std::move(events.front());
        events.pop_front();
        return e;
    }
};

std::string random_suffix() {
    static thread_local std::mt19937_64 rng{std::random_device{}()};
    return fmt::format("{:016x}", rng());
}

}  // namespace

// One choice of a request: its engine request and its reply so far.
struct Choice {
    uint64_t engine_id = 0;
    bool submitted = false, finished = false, cancel_sent = false, reported = false;
    std::optional<ReplyBuilder> builder;
    Clock::time_point last_token;
    int64_t text_sent = 0;  // completions: characters streamed so far (the next chunk's text_offset)
    FinishReason reason = FinishReason::kEos;
    std::string error;
};

// One request in flight: its choices (n of them; choice i samples with seed + i), their shared channel, timing for
// the metrics. Choice 0 is submitted first; the others once its first event arrives, when its prompt is in the
// prefix cache with its last logits (if the cache is on), so the prompt is computed once for all n.
struct Generation {
    bool chat = false;
    std::string id, model;
    int64_t created = 0;
    GenerationOptions options;
    Engine* engine = nullptr;
    Metrics* metrics = nullptr;
    const std::atomic<bool>* draining = nullptr;  // the server's: no more choices are submitted once it is set
    std::shared_ptr<Channel> channel = std::make_shared<Channel>();
    std::vector<Choice> choices;
    EngineRequest request;  // what choice 0 was submitted with: the others copy it
    Usage usage;
    Clock::time_point arrival = Clock::now();
    bool first_token = true;
    // Completions with echo: every choice's text (and logprobs) begins with the prompt's. Its logprobs come from
    // choice 0's kPrompt event; the BOS the server put before a text prompt is not the client's, so not echoed.
    bool echo = false, drop_first_score = false, echo_sent = false;
    std::string echo_text;
    std::optional<std::vector<TokenLogprob>> echo_logprobs;
    const tok::Tokenizer* tokenizer = nullptr;

    bool echo_ready() const { return echo && (request.prompt_logprobs < 0 || echo_logprobs.has_value()); }
    std::vector<TokenLogprob> echoed_logprobs() const { return echo_logprobs.value_or(std::vector<TokenLogprob>{}); }

    bool finished() const {
        for (const Choice& c : choices)
            if (!c.finished) return false;
        return true;
    }
    // Choice c's engine request, on its own seed, its events tagged with c. Only choice 0 scores the prompt.
    EngineRequest request_of(int c) const {
        EngineRequest r = request;
        r.sampling.seed += uint64_t(c);
        if (c > 0) r.prompt_logprobs = -1;
        std::shared_ptr<Channel> ch = channel;
        r.on_event = [ch, c](const EngineEvent& e) { ch->push(c, e); };
        return r;
    }
    // The choices after the first: submitted once choice 0 has its first event. While the server drains, or when
    // the engine refuses one, they end cancelled (the request then fails with 503, as a drained one does).
    void submit_rest() {
        for (size_t c = 1; c < choices.size(); ++c) {
            Choice& ch = choices[c];
            if (ch.submitted) continue;
            ch.submitted = true;
            if (request.max_new_tokens == 0) {  // echo of a scored prompt: nothing to generate, choice 0 has it all
                ch.finished = true;
                ch.reason = FinishReason::kLength;
                continue;
            }
            if (draining && draining->load()) {
                ch.finished = true;
                ch.reason = FinishReason::kCancelled;
                continue;
            }
            try {
                ch.engine_id = engine->submit(request_of(int(c)));
            } catch (const Error&) {
                ch.finished = true;
                ch.reason = FinishReason::kCancelled;
            }
        }
    }
    // Takes one event into choice c's reply; returns the delta to stream (tokens) or nothing (kFinished).
    ReplyBuilder::Delta take(int c, const EngineEvent& e) {
        Choice& ch = choices[size_t(c)];
        const bool failed = e.kind == EngineEvent::Kind::kFinished &&
                            (e.reason == FinishReason::kError ||
                             (e.reason == FinishReason::kCancelled && !ch.builder->stopped()));
        if (c == 0) {
            usage.prompt_tokens = e.prompt_tokens;
            usage.cached_tokens = e.cached_tokens;
            if (!failed) submit_rest();
        }
        if (e.kind == EngineEvent::Kind::kPrompt) {
            std::vector<TokenLogprob> scores;
            for (size_t i = drop_first_score ? 1 : 0; i < e.prompt.size(); ++i) {
                const SampledToken& t = e.prompt[i];
                std::vector<std::pair<int32_t, float>> top;
                for (const TokenChoice& alt : t.top) top.emplace_back(alt.id, alt.logprob);
                TokenLogprob lp = make_token_logprob(t.id, t.logprob, top, *tokenizer);
                lp.scored = !std::isnan(t.logprob);
                scores.push_back(std::move(lp));
            }
            echo_logprobs = std::move(scores);
            return {};
        }
        if (e.kind == EngineEvent::Kind::kFinished) {
            ch.finished = true;
            ch.reason = e.reason;
            ch.error = e.error;
            if (failed) cancel_all();  // one failed choice fails the request: the others stop now, not at their end
            return {};
        }
        const Clock::time_point now = Clock::now();
        if (first_token)
            metrics->time_to_first_token(std::chrono::duration<double>(now - arrival).count());
        else if (ch.builder->tokens() > 0)
            metrics->inter_token_latency(std::chrono::duration<double>(now - ch.last_token).count());
        first_token = false;
        ch.last_token = now;
        ReplyBuilder::Delta d = ch.builder->push(e.token);
        usage.completion_tokens = 0;
        for (const Choice& other : choices) usage.completion_tokens += other.builder->tokens();
        if (ch.builder->stopped()) cancel(c);
        return d;
    }
    void cancel(int c) {
        Choice& ch = choices[size_t(c)];
        if (ch.cancel_sent || ch.finished || !ch.submitted) return;
        ch.cancel_sent = true;
        engine->cancel(ch.engine_id);
    }
    // Ends every choice (the client is gone, or the reply failed): the engine requests are cancelled; choices not
    // yet submitted never will be.
    void cancel_all() {
        for (size_t c = 0; c < choices.size(); ++c) {
            Choice& ch = choices[c];
            if (!ch.submitted) ch.submitted = ch.finished = true, ch.reason = FinishReason::kCancelled;
            cancel(int(c));
        }
    }
    // Counts each choice in the metrics once, by how it ended.
    void report(Choice& ch, const std::string& how) {
        if (ch.reported) return;
        ch.reported = true;
        metrics->finished(how);
    }
    void report_all(const std::string& how) {
        for (Choice& ch : choices) report(ch, how);
    }
    // The finish reason the client sees and the metrics count.
    static std::string outcome(const Choice& ch, const ReplyBuilder::Final& f) {
        if (ch.builder->stopped()) return f.finish_reason;
        if (ch.reason == FinishReason::kCancelled) return "cancelled";
        if (ch.reason == FinishReason::kError) return "error";
        return f.finish_reason;
    }
    // The first choice that failed (an error, or cancelled by the server rather than by its stop string).
    const Choice* failed() const {
        for (const Choice& ch : choices)
            if (ch.reason == FinishReason::kError) return &ch;
        for (const Choice& ch : choices)
            if (ch.reason == FinishReason::kCancelled && !ch.builder->stopped()) return &ch;
        return nullptr;
    }
};

HttpServer::HttpServer(ServerOptions options)
    : options_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
    created_ =
        std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    const int threads = options_.max_connections;
    http_->new_task_queue = [threads] { return new httplib::ThreadPool(size_t(threads)); };
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

bool HttpServer::authorized(const httplib::Request& req, httplib::Response& res) {
    if (options_.api_key.empty()) return true;
    if (req.get_header_value("Authorization") == "Bearer " + options_.api_key) return true;
    send_error(res, ApiError(401, "authentication_error", "a valid API key is required (Authorization: Bearer KEY)"));
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
        res.set_content(metrics_.render(stats ? &*stats : nullptr), "text/plain; version=0.0.4");
    });
    http_->Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
        if (!authorized(req, res)) return;
        send_json(res, 200, models_response(options_.model_name, created_, limits_.max_context));
    });
    http_->Post("/v1/chat/completions",
                [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, true); });
    http_->Post("/v1/completions",
                [this](const httplib::Request& req, httplib::Response& res) { generate(req, res, false); });
    // Statuses httplib sets by itself (404 no route, 413 body too large, 400 bad request line): OpenAI's error form.
    http_->set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        metrics_.rejected();
        std::string message = fmt::format("HTTP {} for {} {}", res.status, req.method, req.path);
        if (res.status == 404) message = fmt::format("no route {} {} (see /v1/models, /v1/chat/completions, "
                                                     "/v1/completions, /health, /metrics)", req.method, req.path);
        if (res.status == 413)
            message = fmt::format("the request body is larger than this server accepts ({} bytes)",
                                  options_.max_body_bytes);
        send_json(res, res.status, ApiError(res.status, "invalid_request_error", message).to_json());
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

// Takes the generation's events until every choice finished (true) or `until` passed (false).
bool wait_events(Generation& g, Clock::time_point until) {
    while (!g.finished()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        if (left.count() <= 0) return false;
        if (auto e = g.channel->pop(left)) g.take(e->choice, e->event);
    }
    return true;
}

// The status and body of a finished plain reply. A choice that failed fails the request.
std::pair<int, ordered_json> whole_reply(Generation& g) {
    if (const Choice* failed = g.failed()) {
        const bool error = failed->reason == FinishReason::kError;
        g.cancel_all();
        g.report_all(error ? "error" : "cancelled");
        if (error) return {500, ApiError(500, "internal_error", failed->error).to_json()};
        return {503, ApiError(503, "service_unavailable", "the server is shutting down").to_json()};
    }
    std::vector<ChatResult> chat;
    std::vector<CompletionChoice> completion;
    for (Choice& ch : g.choices) {
        ReplyBuilder::Final f = ch.builder->finish(ch.reason);
        const std::string reason = Generation::outcome(ch, f);
        g.report(ch, reason);
        if (g.chat) {
            chat.push_back(ChatResult{std::move(f.parsed), reason, std::move(f.logprobs), g.usage});
        } else if (g.echo) {
            std::vector<TokenLogprob> logprobs = g.echoed_logprobs();
            logprobs.insert(logprobs.end(), f.logprobs.begin(), f.logprobs.end());
            completion.push_back(CompletionChoice{g.echo_text + f.parsed.content, reason, std::move(logprobs)});
        } else {
            completion.push_back(CompletionChoice{std::move(f.parsed.content), reason, std::move(f.logprobs)});
        }
    }
    if (g.chat) return {200, chat_response(g.id, g.created, g.model, chat, g.usage, g.options.logprobs)};
    return {200, completion_response(g.id, g.created, g.model, completion, g.options.logprobs, g.usage)};
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
            // Completions with echo: each choice's text starts with the prompt's, once its logprobs are known.
            auto send_echo = [&] {
                if (!g->echo_ready() || g->echo_sent) return true;
                g->echo_sent = true;
                const std::vector<TokenLogprob> scores = g->echoed_logprobs();
                for (int c = 0; c < int(g->choices.size()); ++c) {
                    if (!send(completion_chunk(g->id, g->created, g->model, g->echo_text, std::nullopt, scores,
                                               logprobs, usage_field, 0, c)))
                        return false;
                    for (unsigned char b : g->echo_text) g->choices[size_t(c)].text_sent += (b & 0xC0) != 0x80;
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
                        for (unsigned char b : d.content) ch.text_sent += (b & 0xC0) != 0x80;  // characters
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

}  // namespace

int32_t HttpServer::eos_id(const GenerationOptions& o) const {
    return o.ignore_eos ? -1 : int32_t(engine_->config().eos_token_id);  // with ignore_eos, EOS is a token like others
}

namespace {

// A validated request, ready for the engine: its prompt ids, options, and how its reply is read.
struct Prepared {
    std::vector<int32_t> prompt;
    GenerationOptions options;
    tok::ThinkingMode mode = tok::ThinkingMode::kChat;
    bool echo = false, bos_added = false;  // completions: echo the prompt; the server put BOS before its text
    std::string echo_text;                 // the prompt as the client sent it (its ids decoded)
};

Prepared prepare_chat(const ordered_json& body, const RequestLimits& limits, const ServerOptions& server,
                      const tok::Tokenizer& tokenizer) {
    ChatRequest r = parse_chat_request(body, limits, server.model_name);
    r.render.era = server.era;
    Prepared p{{}, r.options, r.render.thinking_mode};
    try {
        p.prompt = tokenizer.encode(tok::render_prompt(r.messages, r.render));
    } catch (const Error& e) {  // what the DeepSeek-V4 encoder refuses (spec/dsv4-encoding.md §3.9)
        throw ApiError(400, "invalid_request_error", e.what(), "messages");
    }
    return p;
}

Prepared prepare_completion(const ordered_json& body, const RequestLimits& limits, const ServerOptions& server,
                            const tok::Tokenizer& tokenizer, int32_t bos_id) {
    CompletionRequest r = parse_completion_request(body, limits, server.model_name);
    Prepared p{r.prompt_ids, r.options, tok::ThinkingMode::kChat};
    if (r.prompt_text) {  // as `dsv4 generate --prompt`: BOS, then the text's tokens
        p.prompt = {bos_id};
        tokenizer.encode_append(*r.prompt_text, p.prompt);
    }
    p.echo = r.echo;
    p.bos_added = r.prompt_text.has_value();
    if (r.echo) p.echo_text = r.prompt_text ? *r.prompt_text : tokenizer.decode(r.prompt_ids);
    return p;
}

}  // namespace

void HttpServer::generate(const httplib::Request& req, httplib::Response& res, bool chat) {
    if (!authorized(req, res)) return;
    auto g = std::make_shared<Generation>();
    try {
        const ordered_json body = request_body(req, ready_, draining_);
        Prepared p = chat ? prepare_chat(body, limits_, options_, *tokenizer_)
                          : prepare_completion(body, limits_, options_, *tokenizer_,
                                               int32_t(engine_->config().bos_token_id));
        g->chat = chat;
        g->id = (chat ? "chatcmpl-" : "cmpl-") + random_suffix();
        g->model = options_.model_name;
        g->created = created_;
        g->options = p.options;
        g->engine = engine_;
        g->metrics = &metrics_;
        g->draining = &draining_;
        g->tokenizer = tokenizer_;
        g->echo = p.echo;
        g->drop_first_score = p.bos_added;
        g->echo_text = std::move(p.echo_text);
        g->choices.resize(size_t(p.options.n));
        for (Choice& c : g->choices)
            c.builder.emplace(*tokenizer_, eos_id(p.options), chat, p.mode, p.options.stop, p.options.logprobs);
        submit(*g, std::move(p.prompt));
    } catch (const ApiError& e) {
        metrics_.rejected();
        return send_error(res, e);
    }
    if (g->options.stream)
        answer_stream(g, res);
    else
        answer_whole(g, res);
}

void HttpServer::submit(Generation& g, std::vector<int32_t> prompt) {
    const int64_t max_new =
        resolve_max_tokens(int64_t(prompt.size()), g.options, limits_, g.chat ? "messages" : "prompt");
    g.request.prompt = std::move(prompt);
    g.request.max_new_tokens = max_new;
    g.request.sampling = g.options.sampling;
    g.request.stop_at_eos = !g.options.ignore_eos;
    g.request.logprobs = g.options.logprobs ? g.options.top_logprobs : -1;
    // An echo with logprobs scores the prompt; so does one that asks for no tokens (the engine runs the prompt).
    if (g.echo && (g.options.logprobs || max_new == 0)) g.request.prompt_logprobs = g.options.top_logprobs;
    Choice& first = g.choices.front();
    try {
        first.engine_id = engine_->submit(g.request_of(0));
        first.submitted = true;
    } catch (const Error& e) {
        throw ApiError(400, "invalid_request_error", e.what());
    }
}

}  // namespace dsv4::server
