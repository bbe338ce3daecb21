// Responses of the OpenAI-compatible protocol (see openai_protocol.h): bodies, streamed chunks, logprobs and usage
// as ordered_json, keys in the order of OpenAI's schema; every string put into them is valid UTF-8 (token texts that
// hold part of a character are escaped); and StopMatcher. Tested by tests/server/openai_protocol_test.cpp.
#include "server/openai_protocol.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "tokenizer/unicode.h"

namespace dsv4::server {
namespace {

// A float logprob as the double with the same shortest decimal form (-0.31f is written -0.31, not
// -0.3100000023841858). -inf and anything below OpenAI's floor become -9999.0, which JSON can carry.
double json_logprob(float logprob) {
    if (!(logprob >= -9999.0f)) return -9999.0;
    return std::stod(fmt::format("{}", logprob));
}

// OpenAI's text for a token whose bytes are not valid UTF-8: "bytes:" then valid characters as they are and each
// byte of an invalid sequence as \xNN.
std::string token_text(const std::string& bytes) {
    if (tok::is_valid_utf8(bytes)) return bytes;
    std::string text = "bytes:";
    for (size_t i = 0; i < bytes.size();) {
        uint32_t cp = 0;
        const int n = tok::decode_utf8(bytes, i, cp);
        if (cp == tok::kInvalidCodePoint) {
            for (int k = 0; k < n; ++k) text += fmt::format("\\x{:02x}", uint8_t(bytes[i + k]));
        } else {
            text.append(bytes, i, size_t(n));
        }
        i += size_t(n);
    }
    return text;
}

ordered_json byte_list(const std::string& bytes) {
    ordered_json list = ordered_json::array();
    for (char c : bytes) list.push_back(int(uint8_t(c)));
    return list;
}

ordered_json chat_logprobs(const std::vector<TokenLogprob>& tokens) {
    ordered_json content = ordered_json::array();
    for (const TokenLogprob& t : tokens) {
        ordered_json top = ordered_json::array();
        for (const TokenLogprob& alt : t.top)
            top.push_back(
                {{"token", alt.text}, {"logprob", json_logprob(alt.logprob)}, {"bytes", byte_list(alt.bytes)}});
        content.push_back({{"token", t.text},
                           {"logprob", json_logprob(t.logprob)},
                           {"bytes", byte_list(t.bytes)},
                           {"top_logprobs", std::move(top)}});
    }
    return {{"content", std::move(content)}};
}

ordered_json completion_logprobs(const std::vector<TokenLogprob>& tokens, int64_t text_offset) {
    ordered_json texts = ordered_json::array(), logprobs = ordered_json::array(), tops = ordered_json::array(),
                 offsets = ordered_json::array();
    for (const TokenLogprob& t : tokens) {
        texts.push_back(t.text);
        logprobs.push_back(t.scored ? ordered_json(json_logprob(t.logprob)) : ordered_json(nullptr));
        ordered_json top = ordered_json::object();
        for (const TokenLogprob& alt : t.top) top[alt.text] = json_logprob(alt.logprob);
        tops.push_back(t.scored ? std::move(top) : ordered_json(nullptr));
        offsets.push_back(text_offset);
        text_offset += utf8_characters(t.bytes);
    }
    return {{"tokens", std::move(texts)},
            {"token_logprobs", std::move(logprobs)},
            {"top_logprobs", std::move(tops)},
            {"text_offset", std::move(offsets)}};
}

// [{"index"?, "id", "type": "function", "function": {"name", "arguments"}}]: "index" only in stream deltas.
ordered_json tool_calls_json(const std::string& response_id, const std::vector<tok::ToolCall>& calls, bool indexed,
                            int choice) {
    ordered_json list = ordered_json::array();
    for (size_t i = 0; i < calls.size(); ++i) {
        ordered_json call = ordered_json::object();
        if (indexed) call["index"] = i;
        call["id"] = tool_call_id(response_id, i, choice);
        call["type"] = "function";
        call["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
        list.push_back(std::move(call));
    }
    return list;
}

ordered_json envelope(const std::string& id, const char* object, int64_t created, const std::string& model,
                      ordered_json choices) {
    if (choices.is_null()) choices = ordered_json::array();
    if (!choices.is_array()) choices = ordered_json::array({std::move(choices)});
    return {{"id", id}, {"object", object}, {"created", created}, {"model", model}, {"choices", std::move(choices)}};
}

ordered_json finish_json(const std::optional<std::string>& finish_reason) {
    return finish_reason ? ordered_json(*finish_reason) : ordered_json(nullptr);
}

}  // namespace

int64_t utf8_characters(std::string_view bytes) {
    int64_t n = 0;
    for (char c : bytes) n += (uint8_t(c) & 0xC0) != 0x80;
    return n;
}

TokenLogprob make_token_logprob(int32_t id, float logprob, const std::vector<std::pair<int32_t, float>>& top,
                                const tok::Tokenizer& tokenizer) {
    TokenLogprob t;
    t.id = id;
    t.bytes = tokenizer.token_bytes(id);
    t.text = token_text(t.bytes);
    t.logprob = logprob;
    for (const auto& [alt_id, alt_logprob] : top) {
        TokenLogprob alt;
        alt.id = alt_id;
        alt.bytes = tokenizer.token_bytes(alt_id);
        alt.text = token_text(alt.bytes);
        alt.logprob = alt_logprob;
        t.top.push_back(std::move(alt));
    }
    return t;
}

std::string tool_call_id(const std::string& response_id, size_t index, int choice) {
    std::string_view unique = response_id;
    for (std::string_view prefix : {"chatcmpl-", "cmpl-"})
        if (unique.starts_with(prefix)) unique.remove_prefix(prefix.size());
    if (choice == 0) return fmt::format("call_{}_{}", unique, index);
    return fmt::format("call_{}_{}_{}", unique, choice, index);
}

ordered_json usage_json(const Usage& u) {
    return {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
}

ordered_json chat_response(const std::string& id, int64_t created, const std::string& model,
                           const std::vector<ChatResult>& choices, const Usage& usage, bool logprobs) {
    ordered_json list = ordered_json::array();
    for (size_t c = 0; c < choices.size(); ++c) {
        const ChatResult& r = choices[c];
        const tok::ParsedCompletion& p = r.parsed;
        ordered_json message = {{"role", "assistant"}};
        const bool only_tool_calls = p.content.empty() && !p.tool_calls.empty();
        message["content"] = only_tool_calls ? ordered_json(nullptr) : ordered_json(p.content);
        if (!p.reasoning_content.empty()) message["reasoning_content"] = p.reasoning_content;
        if (!p.tool_calls.empty())
            message["tool_calls"] = tool_calls_json(id, p.tool_calls, /*indexed=*/false, int(c));
        list.push_back({{"index", c},
                        {"message", std::move(message)},
                        {"logprobs", logprobs ? chat_logprobs(r.logprobs) : ordered_json(nullptr)},
                        {"finish_reason", r.finish_reason}});
    }
    ordered_json body = envelope(id, "chat.completion", created, model, std::move(list));
    body["usage"] = usage_json(usage);
    return body;
}

ordered_json chat_response(const std::string& id, int64_t created, const std::string& model, const ChatResult& r,
                           bool logprobs) {
    return chat_response(id, created, model, std::vector<ChatResult>{r}, r.usage, logprobs);
}

ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                 const std::vector<CompletionChoice>& choices, bool want_logprobs, const Usage& usage) {
    ordered_json list = ordered_json::array();
    for (size_t c = 0; c < choices.size(); ++c)
        list.push_back(
            {{"index", c},
             {"text", choices[c].text},
             {"logprobs", want_logprobs ? completion_logprobs(choices[c].logprobs, 0) : ordered_json(nullptr)},
             {"finish_reason", choices[c].finish_reason}});
    ordered_json body = envelope(id, "text_completion", created, model, std::move(list));
    body["usage"] = usage_json(usage);
    return body;
}

ordered_json completion_response(const std::string& id, int64_t created, const std::string& model,
                                 const std::string& text, const std::string& finish_reason,
                                 const std::vector<TokenLogprob>& logprobs, bool want_logprobs, const Usage& usage) {
    return completion_response(id, created, model, {CompletionChoice{text, finish_reason, logprobs}}, want_logprobs,
                               usage);
}

ordered_json chat_chunk(const std::string& id, int64_t created, const std::string& model, const ChatDelta& delta,
                        const std::optional<std::string>& finish_reason, bool include_usage_field, bool logprobs,
                        int choice) {
    ordered_json d = ordered_json::object();
    if (!delta.role.empty()) d["role"] = delta.role;
    if (!delta.role.empty() || !delta.content.empty()) d["content"] = delta.content;
    if (!delta.reasoning_content.empty()) d["reasoning_content"] = delta.reasoning_content;
    if (!delta.tool_calls.empty()) d["tool_calls"] = tool_calls_json(id, delta.tool_calls, /*indexed=*/true, choice);
    const bool with_logprobs = logprobs && !delta.logprobs.empty();
    ordered_json c = {{"index", choice},
                      {"delta", std::move(d)},
                      {"logprobs", with_logprobs ? chat_logprobs(delta.logprobs) : ordered_json(nullptr)},
                      {"finish_reason", finish_json(finish_reason)}};
    ordered_json chunk = envelope(id, "chat.completion.chunk", created, model, std::move(c));
    if (include_usage_field) chunk["usage"] = nullptr;
    return chunk;
}

ordered_json completion_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                              const std::optional<std::string>& finish_reason,
                              const std::vector<TokenLogprob>& logprobs, bool want_logprobs, bool include_usage_field,
                              int64_t text_offset, int choice) {
    const bool with_logprobs = want_logprobs && !logprobs.empty();
    ordered_json c = {{"index", choice},
                      {"text", text},
                      {"logprobs", with_logprobs ? completion_logprobs(logprobs, text_offset) : ordered_json(nullptr)},
                      {"finish_reason", finish_json(finish_reason)}};
    ordered_json chunk = envelope(id, "text_completion", created, model, std::move(c));
    if (include_usage_field) chunk["usage"] = nullptr;
    return chunk;
}

ordered_json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                         const Usage& usage) {
    ordered_json chunk = envelope(id, chat ? "chat.completion.chunk" : "text_completion", created, model, nullptr);
    chunk["usage"] = usage_json(usage);
    return chunk;
}

ordered_json models_response(const std::string& model, int64_t created, int64_t max_model_len) {
    ordered_json entry = {{"id", model},
                          {"object", "model"},
                          {"created", created},
                          {"owned_by", "dsv4"},
                          {"max_model_len", max_model_len}};
    ordered_json data = ordered_json::array();
    data.push_back(std::move(entry));
    return {{"object", "list"}, {"data", std::move(data)}};
}

StopMatcher::StopMatcher(std::vector<std::string> stops, bool armed, bool include)
    : stops_(std::move(stops)), armed_(armed), include_(include) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });  // would match before any text
}

std::string StopMatcher::push(std::string_view text) {
    if (stopped_) return {};
    held_.append(text);
    if (!armed_) min_end_ = held_.size();  // nothing pushed before arming may end a stop string
    // Text already sent never starts a stop string (it was not a prefix of one), so every occurrence lies in held_;
    // one that counts ends after min_end_.
    size_t stop_begin = std::string::npos, stop_end = std::string::npos;
    for (const std::string& s : stops_) {
        const size_t at = held_.find(s, min_end_ >= s.size() ? min_end_ - s.size() + 1 : 0);
        if (at == std::string::npos) continue;
        if (at + s.size() < stop_end || (at + s.size() == stop_end && at < stop_begin)) {
            stop_begin = at;
            stop_end = at + s.size();
        }
    }
    if (stop_end != std::string::npos) {
        stopped_ = true;
        matched_ = held_.substr(stop_begin, stop_end - stop_begin);
        std::string out = held_.substr(0, include_ ? stop_end : stop_begin);
        held_.clear();
        return out;
    }
    // Hold the longest suffix that a stop string starts with.
    size_t hold = 0;
    const std::string_view held = held_;
    for (const std::string& s : stops_)
        for (size_t k = std::min(s.size() - 1, held.size()); k > hold; --k)
            if (held.ends_with(std::string_view(s).substr(0, k))) {
                hold = k;
                break;
            }
    std::string out = held_.substr(0, held_.size() - hold);
    held_.erase(0, held_.size() - hold);
    min_end_ -= std::min(min_end_, out.size());
    return out;
}

std::string StopMatcher::finish() {
    if (stopped_) return {};
    return std::exchange(held_, {});
}

}  // namespace dsv4::server
