// The official completion parser (spec/dsv4-encoding.md §4) reproduced step by step, with its failures
// turned into a reported error and a lenient split of the text; and the streaming front end that emits
// only text no later byte can move to another field.
#include "tokenizer/completion.h"

#include <algorithm>

#include "core/error.h"
#include "tokenizer/py_json.h"
#include "tokenizer/unicode.h"

namespace dsv4::tok {
namespace {

constexpr std::string_view kToolCallsStart = "\n\n<｜DSML｜tool_calls";
constexpr std::string_view kToolCallsEnd = "</｜DSML｜tool_calls>";
constexpr std::string_view kInvokeOpen = "<｜DSML｜invoke";
constexpr std::string_view kInvokeClose = "</｜DSML｜invoke";
constexpr std::string_view kParamOpen = "<｜DSML｜parameter";
constexpr std::string_view kParamClose = "/｜DSML｜parameter";

struct Failure {
    std::string type, message;
    bool special_token = false;
};

struct Stop {
    size_t index;             // just past the stop string (or the end)
    std::string_view before;  // text from the start index up to the stop
    int which;                // index into the stop list, -1 if none was found
};

// Earliest occurrence of any stop string; on equal positions the first listed wins.
Stop read_until(std::string_view text, size_t from, std::initializer_list<std::string_view> stops) {
    size_t best = text.size();
    int which = -1, k = 0;
    for (std::string_view s : stops) {
        const size_t pos = text.find(s, from);
        if (pos != std::string_view::npos && pos < best) {
            best = pos;
            which = k;
        }
        ++k;
    }
    if (which < 0) return {text.size(), text.substr(from), -1};
    return {best + std::data(stops)[which].size(), text.substr(from, best - from), which};
}

// Python's str.isspace() (what `\s` of a str pattern matches).
bool py_isspace(uint32_t cp) {
    return (cp >= 0x9 && cp <= 0xD) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

// re.findall(r'^\s*name="(.*?)">\n$', seg, re.DOTALL) has exactly one match.
bool match_name(std::string_view seg, std::string& name) {
    size_t i = 0;
    while (i < seg.size()) {
        uint32_t cp;
        const int n = decode_utf8(seg, i, cp);
        if (!py_isspace(cp)) break;
        i += n;
    }
    if (seg.substr(i, 6) != "name=\"") return false;
    const size_t j = i + 6;
    // `$` also matches before a final LF, so the tail is `">\n` or `">\n\n`; the lazy name takes the shorter.
    for (std::string_view tail : {std::string_view("\">\n\n"), std::string_view("\">\n")}) {
        if (seg.size() >= j + tail.size() && seg.ends_with(tail)) {
            name = seg.substr(j, seg.size() - tail.size() - j);
            return true;
        }
    }
    return false;
}

// re.findall(r'^ name="(.*?)" string="(true|false)">(.*?)<$', seg, re.DOTALL) has exactly one match.
bool match_param(std::string_view seg, std::string& name, bool& is_string, std::string& value) {
    if (!seg.starts_with(" name=\"")) return false;
    size_t value_end;
    if (seg.ends_with("<"))
        value_end = seg.size() - 1;
    else if (seg.ends_with("<\n"))
        value_end = seg.size() - 2;
    else
        return false;
    for (size_t k = 7; k < seg.size(); ++k) {
        for (std::string_view attr : {std::string_view("\" string=\"true\">"), std::string_view("\" string=\"false\">")}) {
            if (seg.substr(k, attr.size()) == attr && k + attr.size() <= value_end) {
                name = seg.substr(7, k - 7);
                is_string = attr.size() == 16;
                value = seg.substr(k + attr.size(), value_end - k - attr.size());
                return true;
            }
        }
    }
    return false;
}

std::string quote(std::string_view s) { return "'" + std::string(s) + "'"; }

// parse_tool_calls of the reference: returns the index after the block and the last stop's kind.
size_t parse_tool_calls(std::string_view text, size_t index, std::vector<ToolCall>& calls) {
    while (index < text.size()) {
        Stop s = read_until(text, index, {kInvokeOpen, kToolCallsEnd});
        index = s.index;
        if (s.before != ">\n")
            throw Failure{"ValueError", "Tool call format error: expected '>\\n' but got " + quote(s.before)};
        if (s.which == 1) break;
        if (s.which < 0) throw Failure{"ValueError", "Missing special token in tool calls"};

        s = read_until(text, index, {kParamOpen, kInvokeClose});
        index = s.index;
        ToolCall call;
        if (!match_name(s.before, call.name)) throw Failure{"ValueError", "Tool name format error: " + quote(s.before)};
        std::vector<std::string> names;
        std::string args = "{";
        while (s.which == 0) {
            s = read_until(text, index, {kParamClose});
            index = s.index;
            std::string pname, value;
            bool is_string = false;
            if (!match_param(s.before, pname, is_string, value))
                throw Failure{"ValueError", "Parameter format error: " + quote(s.before)};
            if (std::find(names.begin(), names.end(), pname) != names.end())
                throw Failure{"ValueError", "Duplicate parameter name: " + quote(pname)};
            if (!names.empty()) args += ", ";
            names.push_back(pname);
            append_json_string(args, pname);
            args += ": ";
            if (is_string)
                append_json_string(args, value);
            else
                args += value;
            s = read_until(text, index, {kParamOpen, kInvokeClose});
            index = s.index;
            if (s.before != ">\n")
                throw Failure{"ValueError", "Parameter format error: expected '>\\n' but got " + quote(s.before)};
        }
        call.arguments = args + "}";
        calls.push_back(std::move(call));
    }
    return index;
}

ParsedCompletion parse_strict(std::string_view text, ThinkingMode mode) {
    ParsedCompletion r;
    size_t index = 0;
    if (mode == ThinkingMode::kThinking) {
        const Stop s = read_until(text, 0, {kThinkEnd, kToolCallsStart});
        r.reasoning_content = s.before;
        index = s.index;
        if (s.which != 0) throw Failure{"AssertionError", "Invalid thinking format: missing </think>"};
    }
    Stop s = read_until(text, index, {kEosToken, kToolCallsStart});
    r.content = s.before;
    index = s.index;
    if (s.which == 1) {
        index = parse_tool_calls(text, index, r.tool_calls);
        s = read_until(text, index, {kEosToken});
        index = s.index;
        if (!s.before.empty()) throw Failure{"AssertionError", "Unexpected content after tool calls"};
    } else if (s.which != 0) {
        throw Failure{"AssertionError", "Invalid format: missing EOS token"};
    }
    if (index != text.size()) throw Failure{"AssertionError", "Unexpected content at end"};
    for (std::string_view tok : {kBosToken, kEosToken, kThinkStart, kThinkEnd, kDsmlToken}) {
        if (r.content.find(tok) != std::string::npos || r.reasoning_content.find(tok) != std::string::npos) {
            r.error = CompletionError{"AssertionError", "Unexpected special token '" + std::string(tok) + "' in content"};
            return r;
        }
    }
    return r;
}

ParsedCompletion parse_lenient(std::string_view text, ThinkingMode mode) {
    ParsedCompletion r;
    if (text.ends_with(kEosToken)) text.remove_suffix(kEosToken.size());
    if (mode == ThinkingMode::kThinking) {
        const size_t i = text.find(kThinkEnd);
        r.reasoning_content = text.substr(0, i);
        if (i != std::string_view::npos) r.content = text.substr(i + kThinkEnd.size());
    } else {
        r.content = text;
    }
    return r;
}

// Longest suffix of `text` (starting at or after `from`) that is a prefix of `marker`, the whole marker
// included only when `whole` is set.
size_t marker_tail(std::string_view text, size_t from, std::string_view marker, bool whole) {
    const size_t max_k = std::min(text.size() - from, whole ? marker.size() : marker.size() - 1);
    for (size_t k = max_k; k > 0; --k)
        if (text.substr(text.size() - k) == marker.substr(0, k)) return k;
    return 0;
}

// Bytes at the end of text that begin a UTF-8 character not yet complete.
size_t incomplete_utf8_tail(std::string_view text) {
    for (size_t k = 1; k <= 3 && k <= text.size(); ++k) {
        const auto b = static_cast<unsigned char>(text[text.size() - k]);
        if ((b & 0xC0) == 0x80) continue;  // continuation byte: look further back
        const size_t need = b >= 0xF0 ? 4 : b >= 0xE0 ? 3 : b >= 0xC0 ? 2 : 1;
        return need > k ? k : 0;
    }
    return 0;
}

}  // namespace

ParsedCompletion parse_completion(std::string_view text, ThinkingMode mode) {
    try {
        return parse_strict(text, mode);
    } catch (const Failure& f) {
        ParsedCompletion r = parse_lenient(text, mode);
        r.error = CompletionError{f.type, f.message};
        return r;
    }
}

ordered_json ParsedCompletion::to_message() const {
    ordered_json calls = ordered_json::array();
    for (const ToolCall& c : tool_calls)
        calls.push_back({{"type", "function"}, {"function", {{"name", c.name}, {"arguments", c.arguments}}}});
    return {{"role", "assistant"}, {"content", content}, {"reasoning_content", reasoning_content}, {"tool_calls", calls}};
}

CompletionStream::CompletionStream(ThinkingMode mode)
    : mode_(mode), state_(mode == ThinkingMode::kThinking ? State::kReasoning : State::kContent) {}

CompletionStream::Delta CompletionStream::feed(std::string_view chunk) {
    text_.append(chunk);
    const std::string_view t = text_;
    Delta d;
    if (state_ == State::kReasoning) {
        const size_t end = t.find(kThinkEnd, reasoning_sent_);
        if (end != std::string_view::npos) {
            d.reasoning_content = t.substr(reasoning_sent_, end - reasoning_sent_);
            reasoning_sent_ = end;
            content_begin_ = end + kThinkEnd.size();
            state_ = State::kContent;
        } else {
            // A trailing EOS may be the final one, which is not reasoning text.
            size_t hold = std::max(marker_tail(t, reasoning_sent_, kThinkEnd, false),
                                   marker_tail(t, reasoning_sent_, kEosToken, true));
            if (hold == 0) hold = incomplete_utf8_tail(t.substr(reasoning_sent_));
            const size_t safe = t.size() - hold;
            d.reasoning_content = t.substr(reasoning_sent_, safe - reasoning_sent_);
            reasoning_sent_ = safe;
        }
    }
    if (state_ == State::kContent) {
        const size_t from = content_begin_ + content_sent_;
        const Stop s = read_until(t, from, {kEosToken, kToolCallsStart});
        if (s.which >= 0) {
            d.content = s.before;
            content_sent_ += s.before.size();
            state_ = s.which == 0 ? State::kAfterEos : State::kToolCalls;
        } else {
            size_t hold = std::max(marker_tail(t, from, kEosToken, false), marker_tail(t, from, kToolCallsStart, false));
            if (hold == 0) hold = incomplete_utf8_tail(t.substr(from));
            const size_t safe = t.size() - hold;
            d.content = t.substr(from, safe - from);
            content_sent_ = safe - content_begin_;
        }
    }
    return d;
}

ParsedCompletion CompletionStream::finish(Delta* last) {
    ParsedCompletion r = parse_completion(text_, mode_);
    const std::string_view sent_reasoning = std::string_view(text_).substr(0, reasoning_sent_);
    const std::string_view sent_content = std::string_view(text_).substr(content_begin_, content_sent_);
    DSV4_ASSERT(std::string_view(r.reasoning_content).starts_with(sent_reasoning) &&
                    std::string_view(r.content).starts_with(sent_content),
                "streamed text is not a prefix of the parsed completion");
    if (last) {
        last->reasoning_content = r.reasoning_content.substr(sent_reasoning.size());
        last->content = r.content.substr(sent_content.size());
    }
    return r;
}

}  // namespace dsv4::tok
