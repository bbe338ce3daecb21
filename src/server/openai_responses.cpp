// The Responses API over the chat machinery: see openai_responses.h.
#include "server/openai_responses.h"

#include <fmt/format.h>

#include <array>
#include <utility>

namespace dsv4::server {
namespace {

// The text of a message's or a tool output's content: a string, or text parts (input_text, output_text, text)
// joined as chat's content parts are.
std::string content_text(const ordered_json& content, const std::string& param) {
    if (content.is_string()) return content.get<std::string>();
    if (!content.is_array()) bad_request(param, fmt::format("'{}' must be a string or an array of text parts", param));
    std::string text;
    for (size_t i = 0; i < content.size(); ++i) {
        const std::string part = fmt::format("{}[{}]", param, i);
        const ordered_json& p = content[i];
        const std::string type = p.is_object() ? p.value("type", "") : "";
        if (type != "input_text" && type != "output_text" && type != "text")
            bad_request(part + ".type",
                        fmt::format("'{}.type' must be \"input_text\" or \"output_text\": only text "
                                    "is read by this model, got {}",
                                    part, p.is_object() && p.contains("type") ? p["type"].dump() : "none"));
        if (!p.contains("text") || !p["text"].is_string())
            bad_request(part + ".text", fmt::format("'{}.text' must be a string", part));
        text += (i == 0 ? "" : "\n\n") + p["text"].get<std::string>();
    }
    return text;
}

std::string required_string(const ordered_json& item, const char* key, const std::string& param) {
    if (!item.contains(key) || !item[key].is_string())
        bad_request(param + "." + key, fmt::format("'{}.{}' (a string) is required", param, key));
    return item[key].get<std::string>();
}

// A reasoning item's text: its reasoning_text contents, else its summary's texts.
std::string reasoning_text(const ordered_json& item) {
    std::string text;
    for (const char* field : {"content", "summary"}) {
        if (!item.contains(field) || !item[field].is_array()) continue;
        for (const ordered_json& part : item[field])
            if (part.is_object() && part.contains("text") && part["text"].is_string())
                text += (text.empty() ? "" : "\n\n") + part["text"].get<std::string>();
        if (!text.empty()) break;
    }
    return text;
}

// `instructions` and `input` as chat messages. Function calls join the assistant message just before them (a turn's
// text and its calls are one assistant message); a reasoning item is the next assistant message's reasoning_content.
ordered_json input_messages(const ordered_json& body) {
    ordered_json messages = ordered_json::array();
    if (const auto it = body.find("instructions"); it != body.end() && !it->is_null()) {
        if (!it->is_string()) bad_request("instructions", "'instructions' must be a string");
        messages.push_back({{"role", "system"}, {"content", *it}});
    }
    const auto input = body.find("input");
    if (input == body.end() || input->is_null())
        bad_request("input", "'input' (a string or a list of items) is required");
    if (input->is_string()) {
        messages.push_back({{"role", "user"}, {"content", *input}});
        return messages;
    }
    if (!input->is_array()) bad_request("input", "'input' must be a string or a list of items");
    std::string reasoning;  // for the next assistant message
    const auto assistant = [&](ordered_json message) {
        if (!reasoning.empty()) message["reasoning_content"] = std::exchange(reasoning, {});
        messages.push_back(std::move(message));
    };
    for (size_t i = 0; i < input->size(); ++i) {
        const ordered_json& item = (*input)[i];
        const std::string param = fmt::format("input[{}]", i);
        if (!item.is_object()) bad_request(param, fmt::format("'{}' must be an object (an input item)", param));
        const std::string type = item.contains("type") && item["type"].is_string() ? item["type"].get<std::string>()
                                 : item.contains("role")                           ? "message"
                                                                                   : "";
        if (type == "message") {
            const std::string role = required_string(item, "role", param);
            if (role != "user" && role != "system" && role != "developer" && role != "assistant")
                bad_request(param + ".role", fmt::format("'{}.role' must be user, system, developer or assistant, "
                                                         "got \"{}\"",
                                                         param, role));
            if (!item.contains("content"))
                bad_request(param + ".content", fmt::format("'{}.content' is required", param));
            ordered_json message = {{"role", role}, {"content", content_text(item["content"], param + ".content")}};
            if (role == "assistant")
                assistant(std::move(message));
            else
                messages.push_back(std::move(message));
        } else if (type == "function_call") {
            ordered_json call = {{"id", required_string(item, "call_id", param)},
                                 {"type", "function"},
                                 {"function",
                                  {{"name", required_string(item, "name", param)},
                                   {"arguments", required_string(item, "arguments", param)}}}};
            if (!messages.empty() && messages.back().value("role", "") == "assistant" && reasoning.empty()) {
                messages.back()["tool_calls"].push_back(std::move(call));
            } else {
                assistant({{"role", "assistant"}, {"content", nullptr}, {"tool_calls", ordered_json::array({call})}});
            }
        } else if (type == "function_call_output") {
            if (!item.contains("output")) bad_request(param + ".output", fmt::format("'{}.output' is required", param));
            messages.push_back({{"role", "tool"},
                                {"tool_call_id", required_string(item, "call_id", param)},
                                {"content", content_text(item["output"], param + ".output")}});
        } else if (type == "reasoning") {
            reasoning = reasoning_text(item);
        } else {
            bad_request(param + ".type", fmt::format("'{}.type' must be message, function_call, function_call_output "
                                                     "or reasoning (nothing is stored here: no item_reference), got "
                                                     "{}",
                                                     param, item.contains("type") ? item["type"].dump() : "none"));
        }
    }
    return messages;
}

// Flat function tools as chat's; strict unless they say otherwise (the Responses API's default).
ordered_json chat_tools(const ordered_json& tools) {
    if (!tools.is_array()) bad_request("tools", "'tools' must be an array of function tools");
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < tools.size(); ++i) {
        const ordered_json& t = tools[i];
        const std::string param = fmt::format("tools[{}]", i);
        if (!t.is_object() || t.value("type", "") != "function")
            bad_request(param + ".type", fmt::format("'{}.type' must be \"function\": hosted tools (web search, file "
                                                     "search, ...) are not run by this server",
                                                     param));
        ordered_json fn = {{"name", required_string(t, "name", param)}};
        for (const char* key : {"description", "parameters"})
            if (t.contains(key) && !t[key].is_null()) fn[key] = t[key];
        const auto strict = t.find("strict");
        fn["strict"] = strict == t.end() || strict->is_null() ? ordered_json(true) : *strict;
        out.push_back({{"type", "function"}, {"function", std::move(fn)}});
    }
    return out;
}

ordered_json chat_tool_choice(const ordered_json& choice) {
    if (choice.is_string()) return choice;
    if (choice.is_object() && choice.value("type", "") == "function" && choice.contains("name"))
        return {{"type", "function"}, {"function", {{"name", choice["name"]}}}};
    bad_request("tool_choice",
                "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                "\"name\": ...}");
}

ordered_json chat_response_format(const ordered_json& text) {
    if (!text.is_object()) bad_request("text", "'text' must be an object");
    if (text.contains("verbosity") && !text["verbosity"].is_null())
        bad_request("text.verbosity", "'text.verbosity' is not supported");
    const auto format = text.find("format");
    if (format == text.end() || format->is_null()) return nullptr;
    if (!format->is_object() || !format->contains("type"))
        bad_request("text.format", "'text.format' must be an object with a type");
    if ((*format)["type"] != "json_schema") return {{"type", (*format)["type"]}};
    ordered_json schema = {{"name", format->value("name", "response")}};
    for (const char* key : {"schema", "strict", "description"})
        if (format->contains(key)) schema[key] = (*format)[key];
    return {{"type", "json_schema"}, {"json_schema", std::move(schema)}};
}

// The chat body a Responses request means.
ordered_json chat_body(const ordered_json& body) {
    for (const char* stored : {"previous_response_id", "conversation", "prompt"})
        if (body.contains(stored) && !body[stored].is_null())
            bad_request(stored, fmt::format("'{}' is not supported: this server stores no responses, conversations or "
                                            "prompts (send the whole input)",
                                            stored));
    if (body.value("background", false) == true) bad_request("background", "'background' responses are not supported");
    if (body.contains("truncation") && body["truncation"].is_string() && body["truncation"] != "disabled")
        bad_request("truncation", "'truncation': nothing a client sends is truncated (only \"disabled\")");
    if (body.contains("top_logprobs") && !body["top_logprobs"].is_null())
        bad_request("top_logprobs", "'top_logprobs' is not supported on /v1/responses (see /v1/chat/completions)");
    if (const auto include = body.find("include"); include != body.end() && !include->is_null()) {
        if (!include->is_array()) bad_request("include", "'include' must be an array of strings");
        for (const ordered_json& what : *include)  // reasoning comes back as plain text: nothing to encrypt
            if (what != "reasoning.encrypted_content")
                bad_request("include", fmt::format("'include' value {} is not supported", what.dump()));
    }
    ordered_json chat = {{"messages", input_messages(body)}};
    for (const char* same : {"model", "temperature", "top_p", "parallel_tool_calls", "stream", "seed",
                             "chat_template_kwargs", "thinking", "user"})
        if (body.contains(same)) chat[same] = body[same];
    if (body.contains("max_output_tokens")) chat["max_completion_tokens"] = body["max_output_tokens"];
    if (const auto tools = body.find("tools"); tools != body.end() && !tools->is_null())
        chat["tools"] = chat_tools(*tools);
    if (const auto c = body.find("tool_choice"); c != body.end() && !c->is_null())
        chat["tool_choice"] = chat_tool_choice(*c);
    if (const auto text = body.find("text"); text != body.end() && !text->is_null())
        if (ordered_json rf = chat_response_format(*text); !rf.is_null()) chat["response_format"] = std::move(rf);
    if (const auto r = body.find("reasoning"); r != body.end() && !r->is_null()) {
        if (!r->is_object()) bad_request("reasoning", "'reasoning' must be an object");
        if (r->contains("effort") && !(*r)["effort"].is_null()) chat["reasoning_effort"] = (*r)["effort"];
    }
    return chat;
}

// The chat parser's names of the fields a Responses body is written into (chat_body), as the Responses API names them.
constexpr std::array<FieldName, 6> kResponsesFieldNames = {{
    {"max_completion_tokens", "max_output_tokens"},
    {"response_format.json_schema.schema", "text.format.schema"},
    {"response_format", "text.format"},
    {"reasoning_effort", "reasoning.effort"},
    {"messages", "input"},
    {".function.", "."},
}};

ordered_json echo_fields(const ordered_json& body) {
    const auto field = [&](const char* key, ordered_json fallback) {
        const auto it = body.find(key);
        return it == body.end() || it->is_null() ? fallback : *it;
    };
    return {{"instructions", field("instructions", nullptr)},
            {"max_output_tokens", field("max_output_tokens", nullptr)},
            {"parallel_tool_calls", field("parallel_tool_calls", true)},
            {"reasoning", field("reasoning", {{"effort", nullptr}, {"summary", nullptr}})},
            {"temperature", field("temperature", 1.0)},
            {"text", field("text", {{"format", {{"type", "text"}}}})},
            {"tool_choice", field("tool_choice", "auto")},
            {"tools", field("tools", ordered_json::array())},
            {"top_p", field("top_p", 1.0)},
            {"metadata", field("metadata", ordered_json::object())}};
}

std::string unique_part(const std::string& id) {
    return id.starts_with("resp_") ? id.substr(5) : id;
}

ordered_json reasoning_item(const std::string& id, const std::string& text) {
    return {{"type", "reasoning"},
            {"id", "rs_" + unique_part(id)},
            {"summary", ordered_json::array()},
            {"content", ordered_json::array({{{"type", "reasoning_text"}, {"text", text}}})}};
}

ordered_json text_part(const std::string& text) {
    return {{"type", "output_text"},
            {"text", text},
            {"annotations", ordered_json::array()},
            {"logprobs", ordered_json::array()}};
}

ordered_json message_item(const std::string& id, const std::string& text, bool done) {
    return {{"type", "message"},
            {"id", "msg_" + unique_part(id)},
            {"status", done ? "completed" : "in_progress"},
            {"role", "assistant"},
            {"content", done ? ordered_json::array({text_part(text)}) : ordered_json::array()}};
}

ordered_json call_item(const std::string& id, size_t i, const tok::ToolCall& call, bool done) {
    return {{"type", "function_call"},
            {"id", fmt::format("fc_{}_{}", unique_part(id), i)},
            {"call_id", fmt::format("call_{}_{}", unique_part(id), i)},
            {"name", call.name},
            {"arguments", done ? call.arguments : ""},
            {"status", done ? "completed" : "in_progress"}};
}

// A reply's output items: its reasoning (if any), its message (if it has text, or nothing else), its calls.
ordered_json output_items(const std::string& id, const tok::ParsedCompletion& p) {
    ordered_json items = ordered_json::array();
    if (!p.reasoning_content.empty()) items.push_back(reasoning_item(id, p.reasoning_content));
    if (!p.content.empty() || p.tool_calls.empty()) items.push_back(message_item(id, p.content, true));
    for (size_t i = 0; i < p.tool_calls.size(); ++i) items.push_back(call_item(id, i, p.tool_calls[i], true));
    return items;
}

}  // namespace

ResponsesRequest parse_responses_request(const ordered_json& body, const RequestLimits& limits,
                                         const std::string& served_model) {
    if (!body.is_object()) bad_request("", "the request body must be a JSON object");
    ResponsesRequest r;
    try {
        r.chat = parse_chat_request(chat_body(body), limits, served_model);
    } catch (const ApiError& e) {
        throw with_fields_renamed(e, kResponsesFieldNames);
    } catch (const ordered_json::exception& e) {
        bad_request("", fmt::format("invalid request: {}", e.what()));
    }
    r.echo = echo_fields(body);
    return r;
}

ordered_json response_object(const std::string& id, int64_t created, const std::string& model,
                             const ResponseOutcome* outcome, const ordered_json& echo) {
    const bool cut = outcome && outcome->finish_reason == "length";
    ordered_json r = {
        {"id", id},
        {"object", "response"},
        {"created_at", created},
        {"status", !outcome ? "in_progress"
                   : cut    ? "incomplete"
                            : "completed"},
        {"error", nullptr},
        {"incomplete_details", cut ? ordered_json{{"reason", "max_output_tokens"}} : ordered_json(nullptr)},
        {"model", model},
        {"output", outcome ? output_items(id, outcome->parsed) : ordered_json::array()},
        {"previous_response_id", nullptr},
        {"store", false},
        {"truncation", "disabled"}};
    for (const auto& [key, value] : echo.items()) r[key] = value;
    if (!outcome) {
        r["usage"] = nullptr;
        return r;
    }
    const Usage& u = outcome->usage;
    r["usage"] = {{"input_tokens", u.prompt_tokens},
                  {"input_tokens_details", {{"cached_tokens", u.cached_tokens}}},
                  {"output_tokens", u.completion_tokens},
                  {"output_tokens_details", {{"reasoning_tokens", outcome->reasoning_tokens}}},
                  {"total_tokens", u.prompt_tokens + u.completion_tokens}};
    return r;
}

ResponseEvents::ResponseEvents(std::string id, int64_t created, std::string model, ordered_json echo)
    : id_(std::move(id)), model_(std::move(model)), created_(created), echo_(std::move(echo)) {}

ordered_json ResponseEvents::event(const char* type, ordered_json fields) {
    ordered_json e = {{"type", type}, {"sequence_number", sequence_++}};
    for (auto& [key, value] : fields.items()) e[key] = std::move(value);
    return e;
}

std::vector<ordered_json> ResponseEvents::start() {
    const ordered_json r = response_object(id_, created_, model_, nullptr, echo_);
    return {event("response.created", {{"response", r}}), event("response.in_progress", {{"response", r}})};
}

void ResponseEvents::open_reasoning(std::vector<ordered_json>& out) {
    reasoning_index_ = next_index_++;
    ordered_json item = reasoning_item(id_, "");
    item["content"] = ordered_json::array();
    out.push_back(event("response.output_item.added", {{"output_index", reasoning_index_}, {"item", item}}));
    out.push_back(event("response.content_part.added", {{"item_id", item["id"]},
                                                        {"output_index", reasoning_index_},
                                                        {"content_index", 0},
                                                        {"part", {{"type", "reasoning_text"}, {"text", ""}}}}));
}

void ResponseEvents::close_reasoning(std::vector<ordered_json>& out) {
    if (reasoning_index_ < 0 || reasoning_closed_) return;
    reasoning_closed_ = true;
    const ordered_json item = reasoning_item(id_, reasoning_);
    out.push_back(event(
        "response.reasoning_text.done",
        {{"item_id", item["id"]}, {"output_index", reasoning_index_}, {"content_index", 0}, {"text", reasoning_}}));
    out.push_back(event("response.content_part.done", {{"item_id", item["id"]},
                                                       {"output_index", reasoning_index_},
                                                       {"content_index", 0},
                                                       {"part", item["content"][0]}}));
    out.push_back(event("response.output_item.done", {{"output_index", reasoning_index_}, {"item", item}}));
}

void ResponseEvents::open_message(std::vector<ordered_json>& out) {
    message_index_ = next_index_++;
    const ordered_json item = message_item(id_, "", false);
    out.push_back(event("response.output_item.added", {{"output_index", message_index_}, {"item", item}}));
    out.push_back(event(
        "response.content_part.added",
        {{"item_id", item["id"]}, {"output_index", message_index_}, {"content_index", 0}, {"part", text_part("")}}));
}

void ResponseEvents::close_message(std::vector<ordered_json>& out) {
    if (message_index_ < 0 || message_closed_) return;
    message_closed_ = true;
    const ordered_json item = message_item(id_, content_, true);
    out.push_back(event("response.output_text.done", {{"item_id", item["id"]},
                                                      {"output_index", message_index_},
                                                      {"content_index", 0},
                                                      {"text", content_},
                                                      {"logprobs", ordered_json::array()}}));
    out.push_back(event("response.content_part.done", {{"item_id", item["id"]},
                                                       {"output_index", message_index_},
                                                       {"content_index", 0},
                                                       {"part", text_part(content_)}}));
    out.push_back(event("response.output_item.done", {{"output_index", message_index_}, {"item", item}}));
}

std::vector<ordered_json> ResponseEvents::delta(const std::string& reasoning, const std::string& content) {
    std::vector<ordered_json> out;
    if (!reasoning.empty()) {
        if (reasoning_index_ < 0) open_reasoning(out);
        reasoning_ += reasoning;
        out.push_back(event("response.reasoning_text.delta", {{"item_id", "rs_" + unique_part(id_)},
                                                              {"output_index", reasoning_index_},
                                                              {"content_index", 0},
                                                              {"delta", reasoning}}));
    }
    if (!content.empty()) {
        close_reasoning(out);
        if (message_index_ < 0) open_message(out);
        content_ += content;
        out.push_back(event("response.output_text.delta", {{"item_id", "msg_" + unique_part(id_)},
                                                           {"output_index", message_index_},
                                                           {"content_index", 0},
                                                           {"delta", content},
                                                           {"logprobs", ordered_json::array()}}));
    }
    return out;
}

std::vector<ordered_json> ResponseEvents::finish(const ResponseOutcome& outcome) {
    std::vector<ordered_json> out;
    close_reasoning(out);
    const tok::ParsedCompletion& p = outcome.parsed;
    if (message_index_ < 0 && p.tool_calls.empty()) open_message(out);  // an empty reply is an empty message
    close_message(out);
    for (size_t i = 0; i < p.tool_calls.size(); ++i) {
        const int index = next_index_++;
        const ordered_json item = call_item(id_, i, p.tool_calls[i], true);
        out.push_back(event("response.output_item.added",
                            {{"output_index", index}, {"item", call_item(id_, i, p.tool_calls[i], false)}}));
        out.push_back(event("response.function_call_arguments.delta",
                            {{"item_id", item["id"]}, {"output_index", index}, {"delta", p.tool_calls[i].arguments}}));
        out.push_back(event("response.function_call_arguments.done", {{"item_id", item["id"]},
                                                                      {"output_index", index},
                                                                      {"name", p.tool_calls[i].name},
                                                                      {"arguments", p.tool_calls[i].arguments}}));
        out.push_back(event("response.output_item.done", {{"output_index", index}, {"item", item}}));
    }
    const ordered_json r = response_object(id_, created_, model_, &outcome, echo_);
    out.push_back(event(r["status"] == "completed" ? "response.completed" : "response.incomplete", {{"response", r}}));
    return out;
}

std::vector<ordered_json> ResponseEvents::failed(const std::string& message) {
    ordered_json r = response_object(id_, created_, model_, nullptr, echo_);
    r["status"] = "failed";
    r["error"] = {{"code", "server_error"}, {"message", message}};
    return {event("response.failed", {{"response", std::move(r)}})};
}

}  // namespace dsv4::server
