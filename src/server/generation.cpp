// Generation: see generation.h.
#include "server/generation.h"

#include "server/anthropic_messages.h"
#include "server/openai_responses.h"

#include <cmath>

#include "core/error.h"

namespace dsv4::server {

void Generation::submit_rest(int prompt) {
    const int n = choices_per_prompt();
    for (int c = prompt * n + 1; c < (prompt + 1) * n; ++c) {
        Choice& ch = choices[size_t(c)];
        if (ch.submitted) continue;
        ch.submitted = true;
        if (prompts[size_t(prompt)].request.max_new_tokens == 0) {  // echo of a scored prompt: the first has it all
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
            ch.engine_id = engine->submit(request_of(c));
        } catch (const Error&) {
            ch.finished = true;
            ch.reason = FinishReason::kCancelled;
        }
    }
}

ReplyBuilder::Delta Generation::take(int c, const EngineEvent& e) {
    Choice& ch = choices[size_t(c)];
    const bool failed =
        e.kind == EngineEvent::Kind::kFinished &&
        (e.reason == FinishReason::kError || (e.reason == FinishReason::kCancelled && !ch.builder->stopped()));
    PromptGroup& prompt = prompt_of(c);
    if (c % choices_per_prompt() == 0) {
        prompt.prompt_tokens = e.prompt_tokens;
        prompt.cached_tokens = e.cached_tokens;
        usage.prompt_tokens = usage.cached_tokens = 0;
        for (const PromptGroup& p : prompts)
            usage.prompt_tokens += p.prompt_tokens, usage.cached_tokens += p.cached_tokens;
        if (!failed) submit_rest(c / choices_per_prompt());
    }
    if (e.kind == EngineEvent::Kind::kPrompt) {
        std::vector<TokenLogprob> scores;
        for (size_t i = prompt.drop_first_score ? 1 : 0; i < e.prompt.size(); ++i) {
            const SampledToken& t = e.prompt[i];
            std::vector<std::pair<int32_t, float>> top;
            for (const TokenChoice& alt : t.top) top.emplace_back(alt.id, alt.logprob);
            TokenLogprob lp = make_token_logprob(t.id, t.logprob, top, *tokenizer);
            lp.scored = !std::isnan(t.logprob);
            scores.push_back(std::move(lp));
        }
        prompt.echo_logprobs = std::move(scores);
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

void Generation::cancel_all() {
    for (size_t c = 0; c < choices.size(); ++c) {
        Choice& ch = choices[c];
        if (!ch.submitted) ch.submitted = ch.finished = true, ch.reason = FinishReason::kCancelled;
        cancel(int(c));
    }
}

const Choice* Generation::failed() const {
    for (const Choice& ch : choices)
        if (ch.reason == FinishReason::kError) return &ch;
    for (const Choice& ch : choices)
        if (ch.reason == FinishReason::kCancelled && !ch.builder->stopped()) return &ch;
    return nullptr;
}

bool wait_events(Generation& g, Clock::time_point until) {
    while (!g.finished()) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
        if (left.count() <= 0) return false;
        if (auto e = g.channel->pop(left)) g.take(e->choice, e->event);
    }
    return true;
}

std::pair<int, ordered_json> whole_reply(Generation& g) {
    if (const Choice* failed = g.failed()) {
        const bool error = failed->reason == FinishReason::kError;
        g.cancel_all();
        g.report_all(error ? "error" : "cancelled");
        const ApiError e = error ? ApiError(500, "internal_error", failed->error)
                                 : ApiError(503, "service_unavailable", "the server is shutting down");
        return {e.status(), g.messages ? anthropic_error(e) : e.to_json()};
    }
    std::string stop_sequence;  // choice 0's (messages: the one choice)
    std::vector<ChatResult> chat;
    std::vector<CompletionChoice> completion;
    for (size_t c = 0; c < g.choices.size(); ++c) {
        Choice& ch = g.choices[c];
        ReplyBuilder::Final f = ch.builder->finish(ch.reason);
        const std::string reason = Generation::outcome(ch, f);
        g.report(ch, reason);
        if (&ch == &g.choices.front()) stop_sequence = f.stop_sequence;
        if (g.chat) {
            chat.push_back(ChatResult{std::move(f.parsed), reason, std::move(f.logprobs), g.usage});
        } else if (g.echo) {
            const PromptGroup& prompt = g.prompt_of(int(c));
            std::vector<TokenLogprob> logprobs = Generation::echoed_logprobs(prompt);
            logprobs.insert(logprobs.end(), f.logprobs.begin(), f.logprobs.end());
            completion.push_back(CompletionChoice{prompt.echo_text + f.parsed.content, reason, std::move(logprobs)});
        } else {
            completion.push_back(CompletionChoice{std::move(f.parsed.content), reason, std::move(f.logprobs)});
        }
    }
    if (g.messages) {
        MessageOutcome outcome{std::move(chat.front().parsed), chat.front().finish_reason, stop_sequence, g.usage};
        return {200, message_object(g.id, g.model, outcome)};
    }
    if (g.responses) {
        ResponseOutcome outcome{std::move(chat.front().parsed), chat.front().finish_reason, g.usage,
                                g.choices.front().builder->reasoning_tokens()};
        return {200, response_object(g.id, g.created, g.model, &outcome, g.response_echo)};
    }
    if (g.chat) return {200, chat_response(g.id, g.created, g.model, chat, g.usage, g.options.logprobs)};
    return {200, completion_response(g.id, g.created, g.model, completion, g.options.logprobs, g.usage)};
}

}  // namespace dsv4::server
