// The DeepSeek-V4 encoder: preprocessing (0731 list/image contents, tool-message merging, tool-result
// ordering, drop-thinking filter) then per-message rendering with its transition suffix. Section numbers
// refer to spec/dsv4-encoding.md; the fixed texts are its §2 data.
#include "tokenizer/prompt.h"

#include <algorithm>
#include <map>
#include <vector>

#include "core/error.h"
#include "tokenizer/py_json.h"

namespace dsv4::tok {
namespace {

constexpr std::string_view kUserToken = "<｜User｜>";
constexpr std::string_view kAssistantToken = "<｜Assistant｜>";
constexpr std::string_view kLatestReminderToken = "<｜latest_reminder｜>";
constexpr std::string_view kImagePlaceholder = "<｜deepseek_image｜>";

// §2.1 (TOOLS_HEAD, TOOLS_TAIL), §2.2, §2.3.
constexpr std::string_view kToolsHead =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<｜DSML｜tool_calls>\" block like the following:\n\n<｜DSML｜tool_calls>\n<｜DSML｜invoke "
    "name=\"$TOOL_NAME\">\n<｜DSML｜parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</｜DSML｜parameter>\n...\n</｜DSML｜invoke>\n<｜DSML｜invoke "
    "name=\"$TOOL_NAME2\">\n...\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>\n\nString parameters should be specified "
    "as is and set `string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value in "
    "JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by <think>), you MUST output "
    "your complete reasoning inside <think>...</think> BEFORE any tool calls or final response.\n\nOtherwise, "
    "output directly after </think> with tool calls or final response.\n\n### Available Tool Schemas\n\n";
constexpr std::string_view kToolsTail =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
constexpr std::string_view kResponseFormatHead =
    "## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";
constexpr std::string_view kEffortAbsolute =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\nYou MUST be very thorough in your thinking "
    "and comprehensively decompose the problem to resolve the root cause, rigorously stress-testing your logic "
    "against all potential paths, edge cases, and adversarial scenarios.\nExplicitly write out your entire "
    "deliberation process, documenting every intermediate step, considered alternative, and rejected hypothesis "
    "to ensure absolutely no assumption is left unchecked.\n\n";
constexpr std::string_view kEffortBeyond =
    "Reasoning Effort: Beyond maximum — exhaustive, relentless, and uncompromising.\nYou MUST reason with the "
    "utmost depth and rigor, leaving absolutely nothing to chance: exhaustively decompose the problem into its "
    "most fundamental components, trace every causal chain to its root, and resolve the underlying cause rather "
    "than any surface symptom.\nDo not stop reasoning until you have independently verified the solution from "
    "multiple angles and are certain that no assumption remains unchecked and no error remains undiscovered.\n\n";

const std::map<std::string, std::string_view>& task_tokens() {
    static const std::map<std::string, std::string_view> m = {
        {"action", "<｜action｜>"}, {"query", "<｜query｜>"}, {"authority", "<｜authority｜>"},
        {"domain", "<｜domain｜>"}, {"title", "<｜title｜>"}, {"read_url", "<｜read_url｜>"}};
    return m;
}

using Messages = std::vector<ordered_json>;

// Python truthiness of a JSON value; a missing key counts as None.
bool truthy(const ordered_json& v) {
    switch (v.type()) {
        case ordered_json::value_t::null: return false;
        case ordered_json::value_t::boolean: return v.get<bool>();
        case ordered_json::value_t::number_integer: return v.get<int64_t>() != 0;
        case ordered_json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
        case ordered_json::value_t::number_float: return v.get<double>() != 0.0;
        case ordered_json::value_t::string: return !v.get_ref<const std::string&>().empty();
        case ordered_json::value_t::array:
        case ordered_json::value_t::object: return !v.empty();
        default: return false;
    }
}

const ordered_json& get(const ordered_json& m, const char* key) {
    static const ordered_json kNone;
    return m.is_object() && m.contains(key) ? m.at(key) : kNone;
}

bool has_value(const ordered_json& m, const char* key) { return !get(m, key).is_null(); }

std::string role_of(const ordered_json& m) { return get(m, "role").is_string() ? get(m, "role").get<std::string>() : ""; }

// "{x}".format(x=v or ""): falsy -> "", else str(v).
std::string text_or_empty(const ordered_json& v, const char* what) { return truthy(v) ? py_str(v, what) : ""; }

bool contains(const std::string& s, std::string_view needle) { return s.find(needle) != std::string::npos; }

// --- 0731 era: list contents become blocks, images become placeholders (process_image_messages) ---

void check_image_source(const ordered_json& block) {
    bool ok = false;
    if (get(block, "type") == "image_url") {
        const ordered_json& u = get(block, "image_url");
        ok = u.is_string() ? !u.get<std::string>().empty() : truthy(get(u, "url"));
    } else {
        ok = truthy(get(block, "source")) || truthy(get(block, "url")) || truthy(get(block, "data"));
    }
    DSV4_CHECK(ok, "Image block does not contain a valid source");
}

ordered_json process_image_blocks(const ordered_json& blocks) {
    ordered_json out = ordered_json::array();
    for (const ordered_json& b : blocks) {
        const ordered_json& type = get(b, "type");
        if (!b.is_object()) {
            out.push_back(b);
        } else if (type == "image" || type == "image_url") {
            check_image_source(b);
            out.push_back({{"type", "text"}, {"text", std::string(kImagePlaceholder)}});
        } else if (type == "tool_result" && get(b, "content").is_array()) {
            ordered_json copy = b;
            copy["content"] = process_image_blocks(b.at("content"));
            out.push_back(std::move(copy));
        } else {
            if (type == "text" && get(b, "text").is_string())
                DSV4_CHECK(!contains(b.at("text").get<std::string>(), kImagePlaceholder),
                           "Text block contains image placeholder '{}': images should be separate content blocks",
                           kImagePlaceholder);
            out.push_back(b);
        }
    }
    return out;
}

Messages process_image_messages(const Messages& in) {
    Messages out;
    for (ordered_json m : in) {
        for (const char* key : {"content", "reasoning_content"})
            if (get(m, key).is_string())
                DSV4_CHECK(!contains(m.at(key).get<std::string>(), kImagePlaceholder),
                           "message {} contains the image token '{}'; images must be content blocks", key,
                           kImagePlaceholder);
        if (get(m, "content").is_array() && !m.contains("content_blocks")) {
            m["content_blocks"] = m.at("content");
            m.erase("content");
        }
        if (truthy(get(m, "content_blocks"))) {
            m["content_blocks"] = process_image_blocks(m.at("content_blocks"));
            if (!get(m, "content").is_string()) {
                std::string joined;
                bool first = true;
                for (const ordered_json& b : m.at("content_blocks")) {
                    if (!(b.is_object() && get(b, "type") == "text")) continue;
                    const ordered_json& t = b.contains("text") ? b.at("text") : ordered_json("");
                    DSV4_CHECK(t.is_string(), "a text content block needs a string \"text\"");
                    joined += (first ? "" : "\n\n") + t.get<std::string>();
                    first = false;
                }
                m["content"] = joined;
            }
        }
        out.push_back(std::move(m));
    }
    return out;
}

// --- §3.2 step 1: tool messages into user turns ---

bool is_open_user_turn(const Messages& merged) {
    return !merged.empty() && role_of(merged.back()) == "user" && merged.back().contains("content_blocks");
}

Messages merge_tool_messages(const Messages& in, EncoderEra era) {
    Messages merged;
    for (const ordered_json& m : in) {
        const std::string role = role_of(m);
        if (role == "tool") {
            ordered_json block = {{"type", "tool_result"},
                                  {"tool_use_id", m.contains("tool_call_id") ? m.at("tool_call_id") : ordered_json("")},
                                  {"content", m.contains("content") ? m.at("content") : ordered_json("")}};
            if (is_open_user_turn(merged))
                merged.back()["content_blocks"].push_back(std::move(block));
            else
                merged.push_back({{"role", "user"}, {"content_blocks", ordered_json::array({std::move(block)})}});
        } else if (role == "user") {
            ordered_json blocks;
            if (era == EncoderEra::k0731 && m.contains("content_blocks") && !m.at("content_blocks").is_null())
                blocks = m.at("content_blocks");
            else
                blocks = ordered_json::array(
                    {{{"type", "text"}, {"text", m.contains("content") ? m.at("content") : ordered_json("")}}});
            if (is_open_user_turn(merged) && !has_value(merged.back(), "task")) {
                DSV4_CHECK(blocks.is_array(), "content_blocks must be a list");
                for (const auto& b : blocks) merged.back()["content_blocks"].push_back(b);
            } else if (era == EncoderEra::k0731) {
                ordered_json msg = m;  // the 0731 encoder keeps every key of the message
                msg["content_blocks"] = blocks;
                merged.push_back(std::move(msg));
            } else {
                ordered_json msg = {{"role", "user"}, {"content", get(m, "content")}, {"content_blocks", blocks}};
                for (const char* key : {"task", "wo_eos", "mask"})
                    if (m.contains(key)) msg[key] = m.at(key);
                merged.push_back(std::move(msg));
            }
        } else {
            merged.push_back(m);
        }
    }
    return merged;
}

// --- §3.2 step 2: tool results in the order of the calls ---

void sort_tool_results(Messages& msgs) {
    std::map<std::string, int> order;
    for (ordered_json& m : msgs) {
        const std::string role = role_of(m);
        if (role == "assistant" && truthy(get(m, "tool_calls"))) {
            order.clear();
            int idx = 0;
            for (const ordered_json& tc : m.at("tool_calls")) {
                ordered_json id = get(tc, "id");
                if (!truthy(id)) id = get(get(tc, "function"), "id");
                if (truthy(id) && id.is_string()) order[id.get<std::string>()] = idx;  // a repeated id: last wins
                ++idx;
            }
        } else if (role == "user" && truthy(get(m, "content_blocks"))) {
            auto& blocks = m.at("content_blocks");
            std::vector<ordered_json> results;
            for (const auto& b : blocks)
                if (get(b, "type") == "tool_result") results.push_back(b);
            if (results.size() <= 1 || order.empty()) continue;
            auto position = [&](const ordered_json& b) {
                const ordered_json& id = get(b, "tool_use_id");
                if (!id.is_string()) return 0;
                auto it = order.find(id.get<std::string>());
                return it == order.end() ? 0 : it->second;
            };
            std::stable_sort(results.begin(), results.end(),
                             [&](const ordered_json& a, const ordered_json& b) { return position(a) < position(b); });
            size_t k = 0;
            for (auto& b : blocks)
                if (get(b, "type") == "tool_result") b = results[k++];
        }
    }
}

// --- §3.2 step 4 ---

int last_user_index(const Messages& msgs) {
    for (int i = static_cast<int>(msgs.size()) - 1; i >= 0; --i) {
        const std::string r = role_of(msgs[i]);
        if (r == "user" || r == "developer") return i;
    }
    return -1;
}

Messages drop_thinking_messages(const Messages& msgs) {
    const int last = last_user_index(msgs);
    Messages out;
    for (int i = 0; i < static_cast<int>(msgs.size()); ++i) {
        const std::string r = role_of(msgs[i]);
        if (r == "user" || r == "system" || r == "tool" || r == "latest_reminder" || r == "direct_search_results" ||
            i >= last) {
            out.push_back(msgs[i]);
        } else if (r == "assistant") {
            ordered_json m = msgs[i];
            m.erase("reasoning_content");
            out.push_back(std::move(m));
        }
    }
    return out;
}

// --- §3.4 pieces ---

std::string render_tools(const ordered_json& tools) {
    std::string out(kToolsHead);
    bool first = true;
    for (const ordered_json& t : tools) {
        DSV4_CHECK(t.is_object() && t.contains("function"),
                   "each tool must be {{\"type\": \"function\", \"function\": {{...}}}} (got {})", t.dump());
        if (!first) out += "\n";
        first = false;
        out += to_json(t.at("function"));
    }
    return out + std::string(kToolsTail);
}

std::string render_extras(const ordered_json& m) {
    std::string out;
    if (truthy(get(m, "tools"))) out += "\n\n" + render_tools(m.at("tools"));
    if (truthy(get(m, "response_format")))
        out += "\n\n" + std::string(kResponseFormatHead) + to_json(m.at("response_format"));
    return out;
}

// §2.6: one DSML parameter per argument.
std::string render_arguments(const ordered_json& arguments) {
    ordered_json args;
    bool parsed = false;
    if (arguments.is_string()) {
        try {
            args = ordered_json::parse(arguments.get<std::string>());
            parsed = true;
        } catch (const ordered_json::parse_error&) {
        } catch (const ordered_json::out_of_range& e) {
            // A number past a double's range: Python's json.loads reads it as inf, which json.dumps writes as
            // Infinity (not JSON). Refused, as the other deviations are (found by openai_request_fuzz).
            fail("tool call arguments hold a number outside a double's range ({})", e.what());
        }
    }
    if (!parsed) args = ordered_json{{"arguments", arguments}};
    DSV4_CHECK(args.is_object(), "tool call arguments must be a JSON object (got {})", args.type_name());
    std::string out;
    bool first = true;
    for (const auto& [k, v] : args.items()) {
        if (!first) out += "\n";
        first = false;
        out += "<｜DSML｜parameter name=\"" + k + "\" string=\"" + (v.is_string() ? "true" : "false") + "\">";
        out += v.is_string() ? v.get<std::string>() : to_json(v);
        out += "</｜DSML｜parameter>";
    }
    return out;
}

constexpr std::string_view kToolCallsOpen = "\n\n<｜DSML｜tool_calls>\n";
std::string invoke_open(std::string_view name) {
    return "<｜DSML｜invoke name=\"" + std::string(name) + "\">\n";
}

std::string render_tool_calls(const ordered_json& calls) {
    std::string out(kToolCallsOpen);
    bool first = true;
    for (const ordered_json& tc : calls) {
        const ordered_json& fn = get(tc, "function");
        DSV4_CHECK(fn.is_object() && fn.contains("name") && fn.contains("arguments"),
                   "each tool call needs function.name and function.arguments (got {})", tc.dump());
        if (!first) out += "\n";
        first = false;
        out += invoke_open(py_str(fn.at("name"), "tool call name")) + render_arguments(fn.at("arguments")) + "\n" +
               std::string(kInvokeClose);
    }
    return out + std::string(kToolCallsClose);
}

std::string render_tool_result_content(const ordered_json& c) {
    if (!c.is_array()) return py_str(c, "tool result content");
    std::string out;
    bool first = true;
    for (const ordered_json& b : c) {
        if (!first) out += "\n\n";
        first = false;
        const ordered_json& type = get(b, "type");
        out += type == "text" ? py_str(b.contains("text") ? b.at("text") : ordered_json(""), "text block")
                              : "[Unsupported " + py_str(type, "block type") + "]";
    }
    return out;
}

std::string render_user_blocks(const ordered_json& blocks, EncoderEra era) {
    std::string out;
    bool first = true;
    for (const ordered_json& b : blocks) {
        DSV4_CHECK(b.is_object(), "content blocks must be objects (got {})", b.dump());
        if (!first) out += "\n\n";
        first = false;
        const ordered_json& type = get(b, "type");
        if (type == "text") {
            const ordered_json& t = b.contains("text") ? b.at("text") : ordered_json("");
            DSV4_CHECK(t.is_string(), "user content must be a string (got {})", t.type_name());
            out += t.get<std::string>();
        } else if (era == EncoderEra::k0731 && (type == "image" || type == "image_url")) {
            out += kImagePlaceholder;
        } else if (type == "tool_result") {
            out += "<tool_result>" + render_tool_result_content(b.contains("content") ? b.at("content") : ordered_json("")) +
                   "</tool_result>";
        } else {
            out += "[Unsupported " + py_str(type, "block type") + "]";
        }
    }
    return out;
}

std::string_view effort_prefix(const std::optional<std::string>& effort, EncoderEra era) {
    if (era == EncoderEra::kPreview) {
        DSV4_CHECK(!effort || *effort == "max" || *effort == "high", "Invalid reasoning effort: {}", *effort);
        return effort && *effort == "max" ? kEffortAbsolute : std::string_view();
    }
    const std::string e = effort && !effort->empty() ? *effort : "low";
    DSV4_CHECK(e == "low" || e == "high" || e == "max",
               "Invalid reasoning effort: {}, expected one of ['low', 'high', 'max']", e);
    return e == "high" ? kEffortAbsolute : e == "max" ? kEffortBeyond : std::string_view();
}

std::string render_message(int index, const Messages& msgs, const RenderOptions& opt, bool drop) {
    const ordered_json& m = msgs[index];
    const bool think = opt.thinking_mode == ThinkingMode::kThinking;
    const int last_user = last_user_index(msgs);
    const std::string role = role_of(m);
    std::string out;
    const std::string_view prefix = effort_prefix(opt.reasoning_effort, opt.era);  // validated for every message
    if (index == 0 && think) out += prefix;

    if (role == "system") {
        out += text_or_empty(get(m, "content"), "system content") + render_extras(m);
    } else if (role == "developer") {
        DSV4_CHECK(truthy(get(m, "content")) && get(m, "content").is_string(),
                   "Invalid message for role `developer`: content must be a non-empty string");
        out += std::string(kUserToken) + m.at("content").get<std::string>() + render_extras(m);
    } else if (role == "user") {
        out += kUserToken;
        if (truthy(get(m, "content_blocks")))
            out += render_user_blocks(m.at("content_blocks"), opt.era);
        else
            out += text_or_empty(get(m, "content"), "user content");
    } else if (role == "latest_reminder") {
        out += std::string(kLatestReminderToken) + py_str(get(m, "content"), "latest_reminder content");
    } else if (role == "assistant") {
        const bool prev_has_task = index > 0 && has_value(msgs[index - 1], "task");
        if (think && !prev_has_task && (!drop || index > last_user))
            out += text_or_empty(get(m, "reasoning_content"), "reasoning_content") + std::string(kThinkEnd);
        out += text_or_empty(get(m, "content"), "assistant content");
        if (truthy(get(m, "tool_calls"))) out += render_tool_calls(m.at("tool_calls"));
        if (!truthy(get(m, "wo_eos"))) out += kEosToken;
    } else if (role == "tool") {
        fail("internal: tool message left after merging");
    } else {
        fail("Unknown role: {}", role.empty() ? get(m, "role").dump() : role);
    }

    // §3.5 transition.
    if (index + 1 < static_cast<int>(msgs.size())) {
        const std::string next = role_of(msgs[index + 1]);
        if (next != "assistant" && next != "latest_reminder") return out;
    }
    if (has_value(m, "task")) {
        const ordered_json& task = m.at("task");
        const auto it = task.is_string() ? task_tokens().find(task.get<std::string>()) : task_tokens().end();
        DSV4_CHECK(it != task_tokens().end(),
                   "Invalid task: {}. Valid tasks are: action, query, authority, domain, title, read_url", task.dump());
        if (it->first != "action") {
            out += it->second;
        } else {
            out += std::string(kAssistantToken) + std::string(think ? kThinkStart : kThinkEnd) + std::string(it->second);
        }
    } else if (role == "user" || role == "developer") {
        out += kAssistantToken;
        out += think && (!drop || index >= last_user) ? kThinkStart : kThinkEnd;
    }
    return out;
}

Messages as_list(const ordered_json& j, const char* what) {
    DSV4_CHECK(j.is_array(), "{} must be a JSON array of message objects", what);
    Messages out;
    for (const auto& m : j) {
        DSV4_CHECK(m.is_object(), "{}: every message must be a JSON object (got {})", what, m.dump());
        out.push_back(m);
    }
    return out;
}

}  // namespace

std::string render_prompt(const ordered_json& messages_json, const RenderOptions& opt, const ordered_json& context_json) {
    Messages messages = as_list(messages_json, "messages");
    Messages context = as_list(context_json, "context");
    if (opt.era == EncoderEra::k0731) {
        context = process_image_messages(context);
        messages = process_image_messages(messages);
    }
    // The reference sorts the unmerged context together with the merged messages, then merges the context.
    messages = merge_tool_messages(messages, opt.era);
    Messages joined = context;
    joined.insert(joined.end(), messages.begin(), messages.end());
    sort_tool_results(joined);
    messages.assign(joined.begin() + static_cast<long>(context.size()), joined.end());
    if (!context.empty()) {
        context = merge_tool_messages(context, opt.era);
        sort_tool_results(context);
    }
    Messages full = context;
    full.insert(full.end(), messages.begin(), messages.end());

    std::string prompt = opt.add_default_bos_token && context.empty() ? std::string(kBosToken) : std::string();
    bool drop = opt.drop_thinking;
    for (const auto& m : full)
        if (truthy(get(m, "tools"))) drop = false;
    size_t to_render = messages.size(), context_len = context.size();
    if (opt.thinking_mode == ThinkingMode::kThinking && drop) {
        full = drop_thinking_messages(full);
        to_render = full.size() - drop_thinking_messages(context).size();
        context_len = full.size() - to_render;
    }
    for (size_t i = 0; i < to_render; ++i) prompt += render_message(static_cast<int>(context_len + i), full, opt, drop);
    return prompt;
}

std::string tool_call_opening(std::string_view name) {
    return std::string(kToolCallsOpen) + invoke_open(name);
}

EncoderEra parse_encoder_era(std::string_view name) {
    if (name == "preview") return EncoderEra::kPreview;
    if (name == "0731") return EncoderEra::k0731;
    fail("unknown encoder '{}': use preview or 0731", name);
}

}  // namespace dsv4::tok
