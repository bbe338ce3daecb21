// One request of `dsv4 serve` in flight, between the engine and the HTTP connection that answers it: its choices
// (n > 1: one engine request each, choice i on seed + i), the channel their events arrive on (tagged with the
// choice), each choice's reply so far (ReplyBuilder), usage, echo, metrics. Everything here but the Channel belongs
// to the connection's thread; the engine thread only pushes events. http_server.cpp streams or sends what it holds.
// Tested end to end by tests/server_e2e (several choices, echo, cancellation, errors).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/engine.h"
#include "server/metrics.h"
#include "server/openai_protocol.h"
#include "server/reply_builder.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

using Clock = std::chrono::steady_clock;

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

// One prompt of a request and what its n choices share. A completion request may send several prompts: choice
// p * n + j is prompt p's j-th (on seed + j, as in a request of that prompt alone).
struct PromptGroup {
    EngineRequest request;  // what the group's first choice was submitted with: the others copy it
    int64_t prompt_tokens = 0, cached_tokens = 0;  // from its first choice's events
    // Completions with echo: every choice's text (and logprobs) begins with the prompt's. Its logprobs come from the
    // first choice's kPrompt event; the BOS the server put before a text prompt is not the client's, so not echoed.
    bool drop_first_score = false, echo_sent = false;
    std::string echo_text;
    std::optional<std::vector<TokenLogprob>> echo_logprobs;
};

// One request in flight: its prompts (one, or several for completions), their choices (n each; choice j of a prompt
// samples with seed + j), the shared channel, timing for the metrics. A prompt's first choice is submitted first;
// its others once that one's first event arrives, when the prompt is in the prefix cache with its last logits (if
// the cache is on), so the prompt is computed once for all n.
struct Generation {
    bool chat = false;           // the reply is a chat reply (chat completions, responses)
    bool responses = false;      // /v1/responses: answered as a response object or its events
    bool messages = false;       // /v1/messages (Anthropic's API): answered as a message or its events
    ordered_json response_echo;  // responses: the request fields its response repeats
    std::string id, model;
    int64_t created = 0;
    GenerationOptions options;
    Engine* engine = nullptr;
    Metrics* metrics = nullptr;
    const std::atomic<bool>* draining = nullptr;  // the server's: no more choices are submitted once it is set
    std::shared_ptr<Channel> channel = std::make_shared<Channel>();
    std::vector<PromptGroup> prompts;
    std::vector<Choice> choices;  // prompts.size() * n
    Usage usage;
    Clock::time_point arrival = Clock::now();
    bool first_token = true;
    bool echo = false;  // completions: each choice's reply begins with its prompt (PromptGroup's echo)
    const tok::Tokenizer* tokenizer = nullptr;

    int choices_per_prompt() const { return int(choices.size() / prompts.size()); }
    PromptGroup& prompt_of(int c) { return prompts[size_t(c / choices_per_prompt())]; }
    const PromptGroup& prompt_of(int c) const { return prompts[size_t(c / choices_per_prompt())]; }
    bool echo_ready(const PromptGroup& p) const {
        return echo && (p.request.prompt_logprobs < 0 || p.echo_logprobs.has_value());
    }
    static std::vector<TokenLogprob> echoed_logprobs(const PromptGroup& p) {
        return p.echo_logprobs.value_or(std::vector<TokenLogprob>{});
    }

    // A prompt's choices after its first: submitted once the first has its first event. While the server drains,
    // or when the engine refuses one, they end cancelled (the request then fails with 503, as a drained one does).
    void submit_rest(int prompt);
    // Takes one event into choice c's reply; returns the delta to stream (tokens) or nothing (kFinished, kPrompt).
    ReplyBuilder::Delta take(int c, const EngineEvent& e);
    // Ends every choice (the client is gone, or the reply failed): the engine requests are cancelled; choices not
    // yet submitted never will be.
    void cancel_all();
    // The first choice that failed (an error, or cancelled by the server rather than by its stop string).
    const Choice* failed() const;
    bool finished() const {
        for (const Choice& c : choices)
            if (!c.finished) return false;
        return true;
    }
    // Choice c's engine request, on its own seed (its prompt's seed + j for its j-th choice), its events tagged
    // with c. Only a prompt's first choice scores the prompt.
    EngineRequest request_of(int c) const {
        EngineRequest r = prompt_of(c).request;
        const int j = c % choices_per_prompt();
        r.sampling.seed += uint64_t(j);
        if (j > 0) r.prompt_logprobs = -1;
        std::shared_ptr<Channel> ch = channel;
        r.on_event = [ch, c](const EngineEvent& e) { ch->push(c, e); };
        return r;
    }
    void cancel(int c) {
        Choice& ch = choices[size_t(c)];
        if (ch.cancel_sent || ch.finished || !ch.submitted) return;
        ch.cancel_sent = true;
        engine->cancel(ch.engine_id);
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
};

// Takes the generation's events until every choice finished (true) or `until` passed (false).
bool wait_events(Generation& g, Clock::time_point until);

// The status and body of a finished plain reply. A choice that failed fails the request.
std::pair<int, ordered_json> whole_reply(Generation& g);

}  // namespace dsv4::server
