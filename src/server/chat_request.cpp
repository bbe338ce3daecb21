// The chat request (openai_protocol.h's parse_chat_request): the messages and their content parts, tools, tool_choice
// and the calls' grammar, an assistant message to continue, thinking; the generation options from
// request_options.cpp. Tested by tests/server/openai_protocol_test.cpp.
#include <fmt/format.h>

#include <algorithm>
#include <memory>

#include "core/error.h"
#include "server/openai_protocol.h"
#include "server/request_fields.h"
#include "server/request_options.h"

namespace dsv4::server {
namespace {

// OpenAI's list content [{"type":"text","text":...}] as one string, joined as the 0731 encoder joins text blocks
// (spec §3.7: "\n\n"); done here so that both encoder eras accept it. Other part types (images, audio) are refused:
// the model reads text only.
std::string join_text_parts(const ordered_json& parts, const std::string& param) {
    std::string text;
    for (size_t i = 0; i < parts.size(); ++i) {
        const std::string part = fmt::format("{}[{}]", param, i);
        if (!parts[i].is_object())
            bad_request(part, fmt::format("'{}' must be an object {{\"type\": \"text\", \"text\": ...}}", part));
        const Fields f(parts[i], part + ".");
        const auto type = f.string("type");
        if (type != "text")
            bad_request(part + ".type", fmt::format("'{}.type' must be \"text\": only text content parts are "
                                                    "supported, got {}",
                                                    part, type ? "'" + *type + "'" : "none"));
        const auto t = f.string("text");
        if (!t) bad_request(part + ".text", fmt::format("'{}.text' is required", part));
        text += (i == 0 ? "" : "\n\n") + *t;
    }
    return text;
}

void check_tool_calls(const ordered_json& calls, const std::string& param) {
    for (size_t i = 0; i < calls.size(); ++i) {
        const std::string call = fmt::format("{}[{}]", param, i);
        if (!calls[i].is_object()) bad_request(call, fmt::format("'{}' must be an object", call));
        const Fields f(calls[i], call + ".");
        f.string("id");  // type check only (here and below): the renderer reads them as given
        if (const auto type = f.string("type"); type && *type != "function")
            bad_request(call + ".type", fmt::format("'{}.type' must be \"function\"", call));
        const ordered_json* fn = f.object("function");
        if (!fn) bad_request(call + ".function", fmt::format("'{}.function' is required", call));
        const Fields ff(*fn, call + ".function.");
        if (!ff.string("name")) bad_request(ff.param("name"), fmt::format("'{}' is required", ff.param("name")));
        const ordered_json* args = ff.get("arguments");
        if (!args || !(args->is_string() || args->is_object()))
            bad_request(ff.param("arguments"),
                        fmt::format("'{}' must be a JSON string (or an object)", ff.param("arguments")));
    }
}

// Messages checked for the types the renderer relies on, list contents joined; the rest (roles it does not know,
// an empty developer message, arguments that are not a JSON object) is the renderer's to refuse.
ordered_json parse_messages(const Fields& body) {
    const ordered_json* messages = body.array("messages");
    if (!messages || messages->empty())
        bad_request("messages", "'messages' must be a non-empty array of message objects");
    ordered_json out = ordered_json::array();
    for (size_t i = 0; i < messages->size(); ++i) {
        const ordered_json& m = (*messages)[i];
        const std::string param = fmt::format("messages[{}]", i);
        if (!m.is_object()) bad_request(param, fmt::format("'{}' must be an object, got {}", param, describe(m)));
        const Fields f(m, param + ".");
        const auto role = f.string("role");
        if (!role) bad_request(f.param("role"), fmt::format("'{}' is required", f.param("role")));
        f.string("name");  // type check only: the encoder does not render names
        ordered_json message = m;
        const ordered_json* content = f.get("content");
        if (content && content->is_array()) {
            message["content"] = join_text_parts(*content, f.param("content"));
        } else if (content && !content->is_string()) {
            f.wrong("content", "a string or an array of text parts");
        } else if (!content && (role == "system" || role == "developer" || role == "user" || role == "tool")) {
            bad_request(f.param("content"), fmt::format("'{}' is required in a {} message: a string or an array "
                                                        "of text parts",
                                                        f.param("content"), *role));
        }
        if (*role == "assistant") {
            // vLLM's copy of the encoder calls it `reasoning`; both spellings are read.
            const auto reasoning = f.string("reasoning_content");
            if (const auto alias = f.string("reasoning"); alias && !reasoning) message["reasoning_content"] = *alias;
            if (const ordered_json* calls = f.array("tool_calls")) check_tool_calls(*calls, f.param("tool_calls"));
        }
        if (*role == "tool" && !f.string("tool_call_id"))
            bad_request(f.param("tool_call_id"), fmt::format("a tool message needs '{}'", f.param("tool_call_id")));
        out.push_back(std::move(message));
    }
    return out;
}

ordered_json parse_tools(const Fields& body) {
    const ordered_json* tools = body.array("tools");
    if (!tools) return ordered_json::array();
    for (size_t i = 0; i < tools->size(); ++i) {
        const std::string param = fmt::format("tools[{}]", i);
        const char* shape = R"(must be {"type": "function", "function": {"name": ..., "parameters": {...}}})";
        if (!(*tools)[i].is_object()) bad_request(param, fmt::format("'{}' {}", param, shape));
        const Fields f((*tools)[i], param + ".");
        if (f.string("type").value_or("function") != "function")
            bad_request(f.param("type"), fmt::format("'{}' must be \"function\"", f.param("type")));
        const ordered_json* fn = f.object("function");
        if (!fn) bad_request(f.param("function"), fmt::format("'{}' {}", param, shape));
        const Fields ff(*fn, param + ".function.");
        if (ff.string("name").value_or("").empty())
            bad_request(ff.param("name"), fmt::format("'{}' must be a non-empty string", ff.param("name")));
        ff.string("description");
        ff.object("parameters");
        ff.boolean("strict");
    }
    return *tools;
}

// The tool calls a reply must make, or null where the model's are left as they are: with tool_choice "required" or a
// named function the reply is the block (of every tool, or of that one); with parallel_tool_calls false or a strict
// tool the block may follow free content. A strict tool's calls satisfy its parameters schema (the subset of
// structured/json_schema.h: anything outside it is a 400, never ignored); another tool's have any arguments.
bool strict_tool(const ordered_json& function) {
    const auto it = function.find("strict");
    return it != function.end() && it->is_boolean() && it->get<bool>();
}

std::shared_ptr<const ToolCallGrammar> tool_call_grammar(const ordered_json& tools, const std::string& tool_choice,
                                                         bool parallel_calls) {
    if (tools.empty() || tool_choice == "none") return nullptr;
    const bool forced = tool_choice != "auto";
    bool strict = false;
    for (const ordered_json& t : tools) strict = strict || strict_tool(t.at("function"));
    if (!forced && parallel_calls && !strict) return nullptr;
    std::vector<ToolSpec> specs;
    for (size_t i = 0; i < tools.size(); ++i) {
        const ordered_json& fn = tools[i].at("function");
        const std::string name = fn.at("name");
        if (tool_choice != "auto" && tool_choice != "required" && name != tool_choice) continue;
        ToolSpec spec{.name = name, .parameters = CompiledSchema::any_object()};
        if (strict_tool(fn)) {
            const std::string param = fmt::format("tools[{}].function.parameters", i);
            const nlohmann::json schema = fn.contains("parameters") && !fn.at("parameters").is_null()
                                              ? nlohmann::json(fn.at("parameters"))
                                              : nlohmann::json{{"type", "object"}, {"additionalProperties", false}};
            try {
                spec.parameters = compile_schema(schema);
            } catch (const Error& e) {
                bad_request(param, fmt::format("'{}' (a strict tool's, enforced) {}; with \"strict\": false the "
                                               "arguments are left to the model",
                                               param, e.what()));
            }
        }
        specs.push_back(std::move(spec));
    }
    try {
        return std::make_shared<const ToolCallGrammar>(
            std::move(specs), forced ? ToolCallGrammar::Start::kAtOnce : ToolCallGrammar::Start::kAfterContent,
            !parallel_calls);
    } catch (const Error& e) {
        bad_request("tools", fmt::format("'tools': {}", e.what()));
    }
}

// Whether the reply continues the last message, an assistant's partial content: DeepSeek's "prefix": true on it,
// vLLM's "continue_final_message": true, or the encoder's own "wo_eos". That message is then rendered without its
// EOS (spec/dsv4-encoding.md §3.4, "wo_eos"). A conversation that ends with an assistant message otherwise has no
// cue for a reply (the encoder writes "<｜Assistant｜>" only after a user turn): refused, as is a "prefix" anywhere
// but on the last message.
bool continues_final_message(const Fields& body, ordered_json& messages) {
    const size_t last = messages.size() - 1;
    bool prefix = false;
    for (size_t i = 0; i < messages.size(); ++i) {
        const Fields m(messages[i], fmt::format("messages[{}].", i));
        if (!m.boolean("prefix").value_or(false)) continue;
        if (i != last || messages[i].value("role", "") != "assistant")
            bad_request(m.param("prefix"), fmt::format("'{}': only the last message, an assistant's, may be a prefix "
                                                       "to continue",
                                                       m.param("prefix")));
        prefix = true;
    }
    const bool continue_final = body.boolean("continue_final_message").value_or(false);
    ordered_json& final = messages[last];
    const std::string param = fmt::format("messages[{}]", last);
    const bool assistant = final.value("role", "") == "assistant";
    if (continue_final && !assistant)
        bad_request("continue_final_message",
                    "'continue_final_message': the last message must be an assistant's (the text to continue)");
    const auto wo_eos = final.find("wo_eos");
    const bool continues = prefix || continue_final || (assistant && wo_eos != final.end() && *wo_eos == true);
    if (body.boolean("add_generation_prompt") == false && !continues)
        bad_request("add_generation_prompt",
                    "'add_generation_prompt': false is supported only to continue the last (assistant) message");
    if (!continues) {
        if (assistant && !final.contains("task"))
            bad_request(param, fmt::format("'{}': the conversation ends with an assistant message, which leaves no "
                                           "turn to reply in: set \"prefix\": true on it (or "
                                           "'continue_final_message') to continue its content, or end with a user "
                                           "or tool message",
                                           param));
        return false;
    }
    if (final.contains("tool_calls") && !final.at("tool_calls").is_null() && !final.at("tool_calls").empty())
        bad_request(param + ".tool_calls",
                    fmt::format("'{}.tool_calls': an assistant message to continue may hold content only", param));
    final.erase("prefix");
    final["wo_eos"] = true;
    return true;
}

// "none", "auto", "required" or the name of a tool. The prompt is the same for all but "none" (which drops the
// tools); tool_call_grammar enforces what "required" and a named one ask of the reply.
std::string parse_tool_choice(const Fields& body, const ordered_json& tools) {
    const ordered_json* v = body.get("tool_choice");
    if (!v) return "auto";
    if (v->is_string()) {
        const std::string choice = v->get<std::string>();
        if (choice != "none" && choice != "auto" && choice != "required")
            bad_request("tool_choice", fmt::format("'tool_choice' must be \"none\", \"auto\", \"required\" or "
                                                   "{{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got "
                                                   "\"{}\"",
                                                   choice));
        if (choice == "required" && tools.empty())
            bad_request("tool_choice", "'tool_choice': \"required\" needs 'tools'");
        return choice;
    }
    if (!v->is_object()) body.wrong("tool_choice", "a string or an object");
    const Fields f(*v, "tool_choice.");
    if (f.string("type") != "function") bad_request("tool_choice.type", "'tool_choice.type' must be \"function\"");
    const ordered_json* fn = f.object("function");
    const auto name = fn ? Fields(*fn, "tool_choice.function.").string("name") : std::nullopt;
    if (!name) bad_request("tool_choice.function.name", "'tool_choice.function.name' is required");
    for (const ordered_json& t : tools)
        if (t.at("function").at("name") == *name) return *name;
    bad_request("tool_choice", fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", *name));
}

// §3.8: request-level tools go to messages[0] when it is a system or developer message, else into a new,
// contentless system message in front.
void attach_tools(ordered_json& messages, const ordered_json& tools) {
    const std::string role = messages[0].value("role", "");
    if (role == "system" || role == "developer") {
        messages[0]["tools"] = tools;
    } else {
        messages.insert(messages.begin(), ordered_json{{"role", "system"}, {"tools", tools}});
    }
}

tok::RenderOptions parse_thinking(const Fields& body) {
    std::optional<bool> thinking;  // set when the request says it; on when any of its switches says on
    auto turn = [&](bool on) { thinking = thinking.value_or(false) || on; };
    if (const ordered_json* kwargs = body.object("chat_template_kwargs")) {
        const Fields k(*kwargs, "chat_template_kwargs.");
        if (const auto on = k.boolean("thinking")) turn(*on);
        if (const auto on = k.boolean("enable_thinking")) turn(*on);
    }
    if (const ordered_json* t = body.get("thinking")) {
        if (t->is_boolean()) {
            turn(t->get<bool>());
        } else if (t->is_object()) {
            const auto type = Fields(*t, "thinking.").string("type");
            if (type != "enabled" && type != "disabled")
                bad_request("thinking.type", "'thinking.type' must be \"enabled\" or \"disabled\"");
            turn(type == "enabled");
        } else {
            body.wrong("thinking", R"(a boolean or {"type": "enabled" | "disabled"})");
        }
    }
    const ordered_json* e = body.get("reasoning_effort");
    if (e && !e->is_string()) body.wrong("reasoning_effort", "a string or null");
    const std::optional<std::string> effort = e ? std::optional(e->get<std::string>()) : std::nullopt;

    tok::RenderOptions render;
    bool on = thinking.value_or(effort && *effort != "none");
    if (on && effort == "none") on = false;
    if (on) {
        render.thinking_mode = tok::ThinkingMode::kThinking;
        if (effort == "max") {
            render.reasoning_effort = "max";
        } else if (effort == "low" || effort == "minimal" || effort == "medium") {
            render.reasoning_effort = "low";
        } else if (effort) {
            render.reasoning_effort = "high";
        }
    }
    return render;
}

}  // namespace

ChatRequest parse_chat_request(const ordered_json& body, const RequestLimits& limits, const std::string& served_model) {
    return guarded([&] {
        if (!body.is_object()) bad_request("", "the request body must be a JSON object");
        const Fields f(body);
        check_model(f, served_model);
        ChatRequest r;
        r.model = served_model;
        r.messages = parse_messages(f);
        r.continues_final = continues_final_message(f, r.messages);
        const ordered_json tools = parse_tools(f);
        const std::string tool_choice = parse_tool_choice(f, tools);
        r.has_tools = !tools.empty() && tool_choice != "none";
        if (r.has_tools) attach_tools(r.messages, tools);
        r.render = parse_thinking(f);
        r.options = parse_options(f, limits, /*chat=*/true);
        r.options.tool_calls = tool_call_grammar(tools, tool_choice, f.boolean("parallel_tool_calls").value_or(true));
        if (r.options.tool_calls && !r.options.adjust.allowed_ids.empty())
            bad_request("allowed_token_ids",
                        "'allowed_token_ids' with enforced tool calls: the calls' grammar decides which ids may come");
        if (r.options.tool_calls && r.options.ignore_eos)
            bad_request("ignore_eos",
                        "'ignore_eos' with enforced tool calls (tool_choice \"required\" or a named function, "
                        "'parallel_tool_calls': false, a strict tool): the reply ends after its tool calls");
        if (const ordered_json* m = f.array("modalities"))
            for (const ordered_json& x : *m)
                if (x != "text")
                    bad_request("modalities", fmt::format("'modalities' may only hold \"text\" (this model writes "
                                                          "text), got {}",
                                                          x.dump()));
        if (f.get("audio")) bad_request("audio", "'audio' output is not supported: this model writes text");
        if (r.continues_final && (r.options.tool_calls || r.options.response_format != ResponseFormat::kText))
            bad_request(r.options.tool_calls ? "tool_choice" : "response_format",
                        "continuing an assistant message ('prefix') beside enforced tool calls or a "
                        "'response_format' is not supported: the constraint would begin inside the given text");
        if (r.has_tools && r.options.response_format != ResponseFormat::kText)
            bad_request(
                "response_format",
                "'response_format' json_object with 'tools' is not supported: a reply cannot be both tool calls "
                "and one JSON object (leave one out, or set 'tool_choice' to \"none\")");
        return r;
    });
}

}  // namespace dsv4::server
