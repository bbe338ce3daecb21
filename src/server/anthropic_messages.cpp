// The Messages API over the chat machinery: see anthropic_messages.h.
#include "server/anthropic_messages.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace dsv4::server {
namespace {

std::string required_string(const ordered_json& o, const char* key, const std::string& param) {
    if (!o.contains(key) || !o[key].is_string())
        bad_request(param + "." + key, fmt::format("'{}.{}' (a string) is required", param, key));
    return o[key].get<std::string>();
}

// Text blocks (a string, or [{"type": "text", "text": ...}]) joined as chat's content parts are.
std::string text_of(const ordered_json& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) bad_request(param, fmt::format("'{}' must be a string or an array of text blocks", param));
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string block = fmt::format("{}[{}]", param, i);
        if (!content[i].is_object() || content[i].value("type", "") != "text")
            bad_request(block + ".type", fmt::format("'{}.type' must be \"text\"", block));
        text += (i == 0 ? "" : "\n\n") + required_string(content[i], "text", block);
    }
    return text;
}

// One Messages API message as chat messages: an assistant's text, thinking and tool_use blocks are one assistant
// message; a user's tool_result blocks are tool messages (before its text, as Anthropic places them first).
void add_message(const ordered_json& m, const std::string& param, ordered_json& out) {
    if (!m.is_object()) bad_request(param, fmt::format("'{}' must be an object", param));
    const std::string role = required_string(m, "role", param);
    if (role != "user" && role != "assistant")
        bad_request(param + ".role", fmt::format("'{}.role' must be \"user\" or \"assistant\"", param));
    if (!m.contains("content")) bad_request(param + ".content", fmt::format("'{}.content' is required", param));
    const ordered_json& content = m["content"];
    if (content.is_string()) {
        out.push_back({{"role", role}, {"content", content}});
        return;
    }
    if (!content.is_array())
        bad_request(param + ".content", fmt::format("'{}.content' must be a string or an array of blocks", param));
    std::string text, thinking;
    ordered_json calls = ordered_json::array();
    for (size_t i = 0; i < content.size(); ++i) {
        const ordered_json& b = content[i];
        const std::string block = fmt::format("{}.content[{}]", param, i);
        const std::string type = b.is_object() ? b.value("type", "") : "";
        if (type == "text") {
            text += (text.empty() ? "" : "\n\n") + required_string(b, "text", block);
        } else if (type == "thinking" && role == "assistant") {
            thinking += required_string(b, "thinking", block);
        } else if (type == "redacted_thinking" && role == "assistant") {
            // encrypted by another provider: nothing this model can read
        } else if (type == "tool_use" && role == "assistant") {
            if (!b.contains("input") || !b["input"].is_object())
                bad_request(block + ".input", fmt::format("'{}.input' must be an object", block));
            calls.push_back(
                {{"id", required_string(b, "id", block)},
                 {"type", "function"},
                 {"function", {{"name", required_string(b, "name", block)}, {"arguments", b["input"].dump()}}}});
        } else if (type == "tool_result" && role == "user") {
            std::string result = b.contains("content") ? text_of(b["content"], block + ".content") : "";
            if (b.value("is_error", false) == true) result = "Error: " + result;
            out.push_back(
                {{"role", "tool"}, {"tool_call_id", required_string(b, "tool_use_id", block)}, {"content", result}});
        } else {
            bad_request(block + ".type",
                        fmt::format("'{}.type' {} is not supported in a{} message (text, "
                                    "tool_use, tool_result and thinking are)",
                                    block, b.is_object() && b.contains("type") ? b["type"].dump() : "none",
                                    role == "user" ? " user" : "n assistant"));
        }
    }
    if (role == "user") {
        if (!text.empty() || out.empty() || out.back().value("role", "") != "tool")
            out.push_back({{"role", "user"}, {"content", text}});
        return;
    }
    ordered_json message = {{"role", "assistant"}, {"content", text}};
    if (!thinking.empty()) message["reasoning_content"] = thinking;
    if (!calls.empty()) message["tool_calls"] = std::move(calls);
    out.push_back(std::move(message));
}

ordered_json chat_body(const ordered_json& body, MessagesUse use) {
    ordered_json chat = {{"messages", ordered_json::array()}};
    if (const auto s = body.find("system"); s != body.end() && !s->is_null())
        chat["messages"].push_back({{"role", "system"}, {"content", text_of(*s, "system")}});
    const auto messages = body.find("messages");
    if (messages == body.end() || !messages->is_array() || messages->empty())
        bad_request("messages", "'messages' must be a non-empty array of messages");
    for (size_t i = 0; i < messages->size(); ++i)
        add_message((*messages)[i], fmt::format("messages[{}]", i), chat["messages"]);
    if (body.contains("max_tokens"))
        chat["max_tokens"] = body["max_tokens"];
    else if (use == MessagesUse::kGenerate)  // count_tokens renders the prompt only
        bad_request("max_tokens", "'max_tokens' is required");
    if (const auto model = body.find("model"); model != body.end()) {  // claude-* names are this server's model
        if (!(model->is_string() && model->get<std::string>().starts_with("claude"))) chat["model"] = *model;
    }
    // Anthropic's sampling fields, and the chat endpoint's extensions a client may add (seed, min_p, ignore_eos).
    for (const char* same : {"temperature", "top_p", "top_k", "stream", "seed", "min_p", "ignore_eos"})
        if (body.contains(same)) chat[same] = body[same];
    if (body.contains("stop_sequences")) chat["stop"] = body["stop_sequences"];
    if (const auto tools = body.find("tools"); tools != body.end() && !tools->is_null()) {
        if (!tools->is_array()) bad_request("tools", "'tools' must be an array");
        ordered_json out = ordered_json::array();
        for (size_t i = 0; i < tools->size(); ++i) {
            const ordered_json& t = (*tools)[i];
            const std::string param = fmt::format("tools[{}]", i);
            if (!t.is_object() || (t.contains("type") && t["type"] != "custom"))
                bad_request(param + ".type", fmt::format("'{}': only custom tools ({{name, description, "
                                                         "input_schema}}) are supported; server tools run on "
                                                         "Anthropic's side",
                                                         param));
            ordered_json fn = {{"name", required_string(t, "name", param)}};
            if (t.contains("description")) fn["description"] = t["description"];
            if (t.contains("input_schema")) fn["parameters"] = t["input_schema"];
            if (t.contains("strict")) fn["strict"] = t["strict"];
            out.push_back({{"type", "function"}, {"function", std::move(fn)}});
        }
        chat["tools"] = std::move(out);
    }
    if (const auto c = body.find("tool_choice"); c != body.end() && !c->is_null()) {
        const std::string type = c->is_object() ? c->value("type", "") : "";
        if (type == "auto" || type == "none")
            chat["tool_choice"] = type;
        else if (type == "any")
            chat["tool_choice"] = "required";
        else if (type == "tool")
            chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", (*c)["name"]}}}};
        else
            bad_request("tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"tool\" | \"none\"}");
        if (c->value("disable_parallel_tool_use", false) == true) chat["parallel_tool_calls"] = false;
    }
    if (const auto t = body.find("thinking"); t != body.end() && !t->is_null()) {
        const std::string type = t->is_object() ? t->value("type", "") : "";
        if (type != "enabled" && type != "disabled")
            bad_request("thinking.type", "'thinking.type' must be \"enabled\" or \"disabled\"");
        chat["thinking"] = type == "enabled";
    }
    return chat;
}

// The chat parser's names of the fields a Messages body is written into (chat_body), as the Messages API names them.
constexpr std::array<FieldName, 3> kMessagesFieldNames = {{
    {"stop", "stop_sequences"},
    {".function.parameters", ".input_schema"},
    {".function.", "."},
}};

std::string unique_part(const std::string& id) {
    return id.starts_with("msg_") ? id.substr(4) : id;
}

ordered_json tool_use_block(const std::string& id, size_t i, const tok::ToolCall& call) {
    ordered_json input = ordered_json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (!input.is_object()) input = call.arguments;  // what the model wrote, not an object: given as it is
    return {{"type", "tool_use"},
            {"id", fmt::format("toolu_{}_{}", unique_part(id), i)},
            {"name", call.name},
            {"input", std::move(input)}};
}

std::string stop_reason(const MessageOutcome& o) {
    if (o.finish_reason == "length") return "max_tokens";
    if (o.finish_reason == "tool_calls") return "tool_use";
    return o.stop_sequence.empty() ? "end_turn" : "stop_sequence";
}

ordered_json message_usage(const Usage& u) {
    return {{"input_tokens", u.prompt_tokens},
            {"output_tokens", u.completion_tokens},
            {"cache_creation_input_tokens", 0},
            {"cache_read_input_tokens", u.cached_tokens}};
}

}  // namespace

ChatRequest parse_messages_request(const ordered_json& body, const RequestLimits& limits,
                                   const std::string& served_model, MessagesUse use) {
    if (!body.is_object()) bad_request("", "the request body must be a JSON object");
    try {
        return parse_chat_request(chat_body(body, use), limits, served_model);
    } catch (const ApiError& e) {
        throw with_fields_renamed(e, kMessagesFieldNames);
    } catch (const ordered_json::exception& e) {
        bad_request("", fmt::format("invalid request: {}", e.what()));
    }
}

ordered_json anthropic_error(const ApiError& e) {
    const int s = e.status();
    const char* type = s == 401   ? "authentication_error"
                       : s == 403 ? "permission_error"
                       : s == 404 ? "not_found_error"
                       : s == 413 ? "request_too_large"
                       : s == 429 ? "rate_limit_error"
                       : s == 503 ? "overloaded_error"
                       : s >= 500 ? "api_error"
                                  : "invalid_request_error";
    return {{"type", "error"}, {"error", {{"type", type}, {"message", e.to_json()["error"]["message"]}}}};
}

ordered_json message_object(const std::string& id, const std::string& model, const MessageOutcome& o) {
    ordered_json content = ordered_json::array();
    const tok::ParsedCompletion& p = o.parsed;
    if (!p.reasoning_content.empty())
        content.push_back({{"type", "thinking"}, {"thinking", p.reasoning_content}, {"signature", ""}});
    if (!p.content.empty() || p.tool_calls.empty()) content.push_back({{"type", "text"}, {"text", p.content}});
    for (size_t i = 0; i < p.tool_calls.size(); ++i) content.push_back(tool_use_block(id, i, p.tool_calls[i]));
    return {{"id", id},
            {"type", "message"},
            {"role", "assistant"},
            {"model", model},
            {"content", std::move(content)},
            {"stop_reason", stop_reason(o)},
            {"stop_sequence", o.stop_sequence.empty() ? ordered_json(nullptr) : ordered_json(o.stop_sequence)},
            {"usage", message_usage(o.usage)}};
}

MessageEvents::MessageEvents(std::string id, std::string model, int64_t input_tokens)
    : id_(std::move(id)), model_(std::move(model)), input_tokens_(input_tokens) {}

std::vector<ordered_json> MessageEvents::start() {
    ordered_json message = {{"id", id_},
                            {"type", "message"},
                            {"role", "assistant"},
                            {"model", model_},
                            {"content", ordered_json::array()},
                            {"stop_reason", nullptr},
                            {"stop_sequence", nullptr},
                            {"usage", {{"input_tokens", input_tokens_}, {"output_tokens", 0}}}};
    return {{{"type", "message_start"}, {"message", std::move(message)}}};
}

void MessageEvents::open_block(std::vector<ordered_json>& out, ordered_json block, char kind) {
    close_block(out);
    ++index_;
    open_ = kind;
    out.push_back({{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(block)}});
}

void MessageEvents::close_block(std::vector<ordered_json>& out) {
    if (!open_) return;
    if (open_ == 't')  // a thinking block ends with its signature (none here: nothing is signed)
        out.push_back({{"type", "content_block_delta"},
                       {"index", index_},
                       {"delta", {{"type", "signature_delta"}, {"signature", ""}}}});
    out.push_back({{"type", "content_block_stop"}, {"index", index_}});
    open_ = 0;
}

std::vector<ordered_json> MessageEvents::delta(const std::string& thinking, const std::string& text) {
    std::vector<ordered_json> out;
    if (!thinking.empty()) {
        if (open_ != 't') open_block(out, {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, 't');
        out.push_back({{"type", "content_block_delta"},
                       {"index", index_},
                       {"delta", {{"type", "thinking_delta"}, {"thinking", thinking}}}});
    }
    if (!text.empty()) {
        if (open_ != 'x') open_block(out, {{"type", "text"}, {"text", ""}}, 'x');
        text_sent_ = true;
        out.push_back(
            {{"type", "content_block_delta"}, {"index", index_}, {"delta", {{"type", "text_delta"}, {"text", text}}}});
    }
    return out;
}

std::vector<ordered_json> MessageEvents::finish(const MessageOutcome& o) {
    std::vector<ordered_json> out;
    const tok::ParsedCompletion& p = o.parsed;
    if (!text_sent_ && p.tool_calls.empty()) open_block(out, {{"type", "text"}, {"text", ""}}, 'x');
    close_block(out);
    for (size_t i = 0; i < p.tool_calls.size(); ++i) {
        const ordered_json block = tool_use_block(id_, i, p.tool_calls[i]);
        ordered_json empty = block;
        empty["input"] = ordered_json::object();
        open_block(out, std::move(empty), 'u');
        out.push_back({{"type", "content_block_delta"},
                       {"index", index_},
                       {"delta", {{"type", "input_json_delta"}, {"partial_json", block["input"].dump()}}}});
        out.push_back({{"type", "content_block_stop"}, {"index", index_}});
        open_ = 0;
    }
    out.push_back(
        {{"type", "message_delta"},
         {"delta",
          {{"stop_reason", stop_reason(o)},
           {"stop_sequence", o.stop_sequence.empty() ? ordered_json(nullptr) : ordered_json(o.stop_sequence)}}},
         {"usage", message_usage(o.usage)}});
    out.push_back({{"type", "message_stop"}});
    return out;
}

}  // namespace dsv4::server
