// ToolCallCursor: see tool_call_cursor.h. The markup between names and values is a choice among fixed literals (no
// literal of a choice is a prefix of another, so the one that completes is the one taken); names narrow a sorted list;
// values go through a SchemaCursor of their property's node (a raw value JSON-escaped, inside a string).
#include "structured/tool_call_cursor.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "tokenizer/prompt.h"

namespace dsv4 {
namespace {

constexpr std::string_view kMarker = "｜DSML｜";
constexpr std::string_view kRawEnd = "</｜DSML｜";  // a raw value ends where its text holds this
// What the completion parser refuses in content (spec/dsv4-encoding.md §4.1: step 6, and EOS ends the content).
constexpr std::array<std::string_view, 5> kNotInContent = {kMarker, tok::kThinkStart, tok::kThinkEnd, tok::kBosToken,
                                                           tok::kEosToken};

// The markup, by what comes after it.
enum Literal : int {
    kOpenAll,      // the reply's start: the block's opening and the first invoke's, up to the tool's name
    kOpenRest,     // the same after the content's "\n\n<｜DSML｜tool_calls"
    kNameEnd,      // after the tool name's closing quote
    kNoParams,     // a call without parameters closes
    kParamOpen,    // a parameter, up to its name
    kStringAttr,   // after the parameter name's closing quote
    kRawFlag,      // the value is raw text
    kJsonFlag,     // the value is JSON
    kRawClose,     // after the "</｜DSML｜" that ended a raw value
    kJsonClose,    // after the '<' that ended a JSON value
    kInvokeClose,  // the call closes
    kNextInvoke,   // another call, up to its tool's name
    kBlockClose,   // the block closes
    kLiterals,
};
constexpr std::array<std::string_view, kLiterals> kLiteralText = {
    ToolCallCursor::kOpening,
    ">\n<｜DSML｜invoke name=\"",
    ">\n",
    "\n</｜DSML｜invoke>",
    "<｜DSML｜parameter name=\"",
    " string=\"",
    "true\">",
    "false\">",
    "parameter>\n",
    "/｜DSML｜parameter>\n",
    "</｜DSML｜invoke>",
    "\n<｜DSML｜invoke name=\"",
    "\n</｜DSML｜tool_calls>",
};

constexpr uint32_t bit(int literal) {
    return uint32_t(1) << literal;
}

uint64_t first_bits(size_t n) {
    return n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1;
}

// How many bytes of `pattern` the text ends with after `b` follows a text that ended with `matched` of them.
int match_step(std::string_view pattern, int matched, uint8_t b) {
    if (uint8_t(pattern[size_t(matched)]) == b) return matched + 1;
    for (int k = matched; k > 0; --k)  // the longest prefix of length k: pattern[matched-k+1, matched) then b
        if (uint8_t(pattern[size_t(k - 1)]) == b &&
            pattern.substr(size_t(matched - k + 1), size_t(k - 1)) == pattern.substr(0, size_t(k - 1)))
            return k;
    return 0;
}

// Raw text as the inside of a JSON string, escaped as a compact JSON writer (and Python's json.dumps, which the
// parser uses) escapes it: enum values are matched in that spelling.
struct Escaped {
    std::array<char, 6 * kRawEnd.size()> text;
    size_t size = 0;

    explicit Escaped(std::string_view raw) {
        for (const char c : raw) {
            const uint8_t b = uint8_t(c);
            if (b == '"' || b == '\\') {
                put('\\');
                put(c);
            } else if (b < 0x20) {
                put('\\');
                switch (b) {
                    case '\b':
                        put('b');
                        break;
                    case '\f':
                        put('f');
                        break;
                    case '\n':
                        put('n');
                        break;
                    case '\r':
                        put('r');
                        break;
                    case '\t':
                        put('t');
                        break;
                    default:
                        put('u');
                        put('0');
                        put('0');
                        put("0123456789abcdef"[b >> 4]);
                        put("0123456789abcdef"[b & 15]);
                }
            } else {
                put(c);
            }
        }
    }
    void put(char c) { text[size++] = c; }
    std::string_view view() const { return {text.data(), size}; }
};

// A value read so far may end here: its string closes into a whole value of its node.
bool closable(const SchemaCursor& value) {
    SchemaCursor end = value;
    return end.feed(uint8_t('"')) && end.complete();
}

bool writable_name(std::string_view name) {
    return name.find('"') == std::string_view::npos && name.find(kMarker) == std::string_view::npos &&
           std::none_of(name.begin(), name.end(), [](char c) { return uint8_t(c) < 0x20; });
}

}  // namespace

bool Utf8Check::feed(uint8_t b) {
    if (left > 0) {
        if (b < lo || b > hi) return false;
        --left;
        lo = 0x80, hi = 0xBF;
        return true;
    }
    if (b < 0x80) return true;
    if (b >= 0xC2 && b <= 0xDF) return left = 1, true;
    if (b >= 0xE0 && b <= 0xEF) {  // no overlong forms (E0: A0..), no surrogates (ED: ..9F)
        left = 2;
        lo = b == 0xE0 ? 0xA0 : 0x80;
        hi = b == 0xED ? 0x9F : 0xBF;
        return true;
    }
    if (b >= 0xF0 && b <= 0xF4) {  // no overlong forms (F0: 90..), nothing past U+10FFFF (F4: ..8F)
        left = 3;
        lo = b == 0xF0 ? 0x90 : 0x80;
        hi = b == 0xF4 ? 0x8F : 0xBF;
        return true;
    }
    return false;
}

ToolCallGrammar::ToolCallGrammar(std::vector<ToolSpec> tools, Start start, bool one_call)
    : tools_(std::move(tools)), start_(start), one_call_(one_call) {
    DSV4_CHECK(!tools_.empty(), "a tool-call grammar needs a tool");
    std::sort(tools_.begin(), tools_.end(), [](const ToolSpec& a, const ToolSpec& b) { return a.name < b.name; });
    for (size_t i = 0; i < tools_.size(); ++i) {
        const ToolSpec& t = tools_[i];
        if (i > 0 && tools_[i - 1].name == t.name) fail("two tools are named '{}'", t.name);
        if (t.name.empty() || !writable_name(t.name))
            fail(
                "the tool name '{}' cannot be written in a DSML call (it is empty or holds '\"', a control "
                "character or \"｜DSML｜\")",
                t.name);
        DSV4_CHECK(t.parameters != nullptr, "tool '{}' has no parameter schema", t.name);
        const SchemaNode& root = parameters(int(i));
        if (!root.branches.empty() || !root.literals.empty() || !(root.types & kSchemaObject))
            fail("tool '{}': its parameters must be an object schema (a call's arguments are an object)", t.name);
        for (const std::string& key : root.keys)  // the body of a JSON string: a '\' is an escape
            if (key.find('\\') != std::string::npos || !writable_name(key))
                fail(
                    "tool '{}': the parameter name \"{}\" cannot be written in a DSML call (it holds '\"', '\\', a "
                    "control character or \"｜DSML｜\")",
                    t.name, key);
    }
}

const SchemaNode& ToolCallGrammar::parameters(int i) const {
    const CompiledSchema& s = *tools_[size_t(i)].parameters;
    return s.nodes[size_t(s.root)];
}

ToolCallCursor::ToolCallCursor(const ToolCallGrammar* grammar)
    : grammar_(grammar),
      phase_(grammar->start() == ToolCallGrammar::Start::kAtOnce ? Phase::kMarkup : Phase::kContent),
      literals_(phase_ == Phase::kMarkup ? bit(kOpenAll) : 0),
      value_(grammar->tools()[0].parameters.get()) {}

bool ToolCallCursor::feed(uint8_t byte) {
    return step(byte);  // each phase checks a byte whole before it changes anything
}

bool ToolCallCursor::in_free_text() const {
    switch (phase_) {
        case Phase::kRawValue:
            return pending_ == 0 && watch_ == 0 && value_.in_free_string();
        case Phase::kJsonValue:
            return watch_ == 0 && value_.in_free_string();
        case Phase::kParamName:
            return params().additional != SchemaNode::kNone && watch_ == 0 && name_utf8_.whole();
        default:
            return false;
    }
}

bool ToolCallCursor::step(uint8_t b) {
    switch (phase_) {
        case Phase::kContent:
            return content_byte(b);
        case Phase::kMarkup:
            return markup_byte(b);
        case Phase::kToolName:
            return tool_name_byte(b);
        case Phase::kParamName:
            return param_name_byte(b);
        case Phase::kRawValue:
            return raw_value_byte(b);
        case Phase::kJsonValue:
            return json_value_byte(b);
        case Phase::kDone:
            return false;
    }
    return false;
}

// Content's byte: free, but for the texts the parser refuses in content. "｜DSML｜" may come only as a block's opening
// begins, which must then go on to its end (content holding the marker is refused).
bool ToolCallCursor::content_byte(uint8_t b) {
    const int watch = match_step(kBlockStart, watch_, b);
    if (watch_ >= kMarkerInBlockStart && watch != watch_ + 1) return false;
    if (watch == int(kBlockStart.size())) {
        expect(bit(kOpenRest));
        return true;
    }
    std::array<char, kTail> tail = tail_;
    size_t size = tail_size_;
    if (size == kTail) std::copy(tail.begin() + 1, tail.end(), tail.begin());
    tail[std::min(size, kTail - 1)] = char(b);
    size = std::min(size + 1, kTail);
    if (b == '>' || b == 0x9C) {  // the last byte of every text refused ('｜' is EF BD 9C)
        const std::string_view text(tail.data(), size);
        for (const std::string_view refused : kNotInContent)
            if (text.ends_with(refused) && !(refused == kMarker && watch == kMarkerInBlockStart)) return false;
    }
    tail_ = tail;
    tail_size_ = uint8_t(size);
    watch_ = watch;
    return true;
}

std::array<bool, 256> ToolCallCursor::content_markup_next() const {
    std::array<bool, 256> next{};
    const std::string_view text(tail_.data(), tail_size_);
    const auto add = [&](std::string_view markup) {
        for (size_t k = 1; k < markup.size(); ++k)
            if (text.ends_with(markup.substr(0, k))) next[uint8_t(markup[k])] = true;
    };
    add(kBlockStart);
    for (const std::string_view refused : kNotInContent) add(refused);
    return next;
}

void ToolCallCursor::expect(uint32_t literals) {
    phase_ = Phase::kMarkup;
    literals_ = literals;
    offset_ = 0;
}

bool ToolCallCursor::markup_byte(uint8_t b) {
    uint32_t left = 0;
    for (uint32_t l = literals_; l; l &= l - 1) {
        const int i = __builtin_ctz(l);
        const std::string_view text = kLiteralText[size_t(i)];
        if (size_t(offset_) < text.size() && uint8_t(text[size_t(offset_)]) == b) left |= bit(i);
    }
    if (!left) return false;
    literals_ = left;
    ++offset_;
    for (uint32_t l = left; l; l &= l - 1)
        if (kLiteralText[size_t(__builtin_ctz(l))].size() == size_t(offset_)) {
            markup_done(__builtin_ctz(l));
            break;
        }
    return true;
}

// What comes after each literal.
void ToolCallCursor::markup_done(int literal) {
    const SchemaNode& p = params();  // the call's tool (a valid one before the first name too)
    const auto more_parameters = [&] {
        return (first_bits(p.keys.size()) & ~used_) != 0 || p.additional != SchemaNode::kNone;
    };
    switch (literal) {
        case kOpenAll:
        case kOpenRest:
        case kNextInvoke:
            phase_ = Phase::kToolName;
            tool_name_ = SortedNameRange{.lo = 0, .hi = int(grammar_->tools().size())};
            return;
        case kNameEnd:
            used_ = 0;
            other_names_.clear();
            expect((p.required == 0 ? bit(kNoParams) : 0) | (more_parameters() ? bit(kParamOpen) : 0));
            return;
        case kParamOpen:
            phase_ = Phase::kParamName;
            keys_ = first_bits(p.keys.size());
            offset_ = 0;
            watch_ = 0;
            name_.clear();
            name_utf8_ = Utf8Check{};
            return;
        case kStringAttr:
            expect((string_allowed(value_node_) ? bit(kRawFlag) : 0) | bit(kJsonFlag));
            return;
        case kRawFlag:
            phase_ = Phase::kRawValue;
            value_ = SchemaCursor(tool().parameters.get(), JsonLimits{}, value_node_);
            value_.feed(uint8_t('"'));
            pending_ = 0;
            watch_ = 0;
            return;
        case kJsonFlag:
            phase_ = Phase::kJsonValue;
            value_ = SchemaCursor(tool().parameters.get(), JsonLimits{}, value_node_);
            watch_ = 0;
            return;
        case kRawClose:
        case kJsonClose:
            expect((more_parameters() ? bit(kParamOpen) : 0) | ((p.required & ~used_) == 0 ? bit(kInvokeClose) : 0));
            return;
        case kNoParams:
        case kInvokeClose:
            expect((grammar_->one_call() ? 0 : bit(kNextInvoke)) | bit(kBlockClose));
            return;
        case kBlockClose:
            phase_ = Phase::kDone;
            return;
        default:
            return;
    }
}

bool ToolCallCursor::string_allowed(int node) const {
    SchemaCursor c(tool().parameters.get(), JsonLimits{}, node);
    return c.feed(uint8_t('"'));
}

// The tools are sorted by name (sorted_names.h).
bool ToolCallCursor::tool_name_byte(uint8_t b) {
    const std::vector<ToolSpec>& tools = grammar_->tools();
    const auto name = [&](int i) -> std::string_view { return tools[size_t(i)].name; };
    if (b == '"') {  // the name ends
        if (!tool_name_.whole(name)) return false;
        tool_ = tool_name_.lo;
        expect(bit(kNameEnd));
        return true;
    }
    return tool_name_.feed(b, name);
}

bool ToolCallCursor::param_name_byte(uint8_t b) {
    if (b == '"') return close_param_name();
    const SchemaNode& p = params();
    uint64_t left = 0;
    for (uint64_t c = keys_; c; c &= c - 1) {
        const int i = __builtin_ctzll(c);
        const std::string& key = p.keys[size_t(i)];
        if (size_t(offset_) < key.size() && uint8_t(key[size_t(offset_)]) == b) left |= uint64_t(1) << i;
    }
    if (p.additional == SchemaNode::kNone) {
        if (!(left & ~used_)) return false;
    } else {  // an other name: whole UTF-8 characters, no control character, no '\' (an escape), no "｜DSML｜"
        const int watch = match_step(kMarker, watch_, b);
        Utf8Check utf8 = name_utf8_;
        if (watch == int(kMarker.size()) || b == '\\' || b < 0x20 || !utf8.feed(b)) return false;
        name_utf8_ = utf8;
        watch_ = watch;
        name_ += char(b);
    }
    keys_ = left;
    ++offset_;
    return true;
}

// The name read whole: a property not written yet (its node is the value's), or, where the schema allows them, an
// other name not written yet.
bool ToolCallCursor::close_param_name() {
    const SchemaNode& p = params();
    int exact = -1;
    for (uint64_t c = keys_; c; c &= c - 1) {
        const int i = __builtin_ctzll(c);
        if (p.keys[size_t(i)].size() == size_t(offset_)) exact = i;
    }
    if (exact >= 0) {
        if (used_ & (uint64_t(1) << exact)) return false;
        used_ |= uint64_t(1) << exact;
        value_node_ = p.key_nodes[size_t(exact)];
    } else {
        if (p.additional == SchemaNode::kNone || name_.empty() || !name_utf8_.whole()) return false;
        for (size_t at = 0; at < other_names_.size();) {
            const size_t end = other_names_.find('\0', at);
            if (std::string_view(other_names_).substr(at, end - at) == name_) return false;
            at = end + 1;
        }
        other_names_ += name_;
        other_names_ += '\0';
        value_node_ = p.additional;
    }
    expect(bit(kStringAttr));
    return true;
}

// A raw value's bytes that may be the start of its close ("</｜DSML｜") are held back; once they cannot be, they are
// text. The close may come only where the text is a whole value; the held bytes only where either may follow.
bool ToolCallCursor::raw_value_byte(uint8_t b) {
    if (uint8_t(kRawEnd[size_t(pending_)]) == b) {
        if (pending_ + 1 == int(kRawEnd.size())) {
            if (!closable(value_)) return false;
            expect(bit(kRawClose));
            return true;
        }
        if (!closable(value_) && !value_.accepts(Escaped(kRawEnd.substr(0, size_t(pending_ + 1))).view())) return false;
        ++pending_;
        return true;
    }
    if (pending_ == 0 && b != '<') {  // the common case: one byte of text
        const int watch = match_step(kMarker, watch_, b);
        const char c = char(b);
        if (watch == int(kMarker.size()) || !value_.feed(Escaped(std::string_view(&c, 1)).view())) return false;
        watch_ = watch;
        return true;
    }
    const bool hold = b == '<';  // held bytes that are text, and `b`; or `b` begins a close of its own
    std::array<char, kRawEnd.size()> text;
    size_t n = size_t(pending_);
    std::copy_n(kRawEnd.begin(), n, text.begin());
    if (!hold) text[n++] = char(b);
    int watch = watch_;
    for (size_t i = 0; i < n; ++i) {
        watch = match_step(kMarker, watch, uint8_t(text[i]));
        if (watch == int(kMarker.size())) return false;
    }
    SchemaCursor next = value_;
    if (!next.feed(Escaped(std::string_view(text.data(), n)).view())) return false;
    if (hold && !closable(next) && !next.accepts("<")) return false;
    value_ = next;
    watch_ = watch;
    pending_ = hold ? 1 : 0;
    return true;
}

// A JSON value ends at the '<' after a whole value (no JSON text goes on with '<' outside a string).
bool ToolCallCursor::json_value_byte(uint8_t b) {
    if (b == '<' && value_.complete()) {
        expect(bit(kJsonClose));
        return true;
    }
    const int watch = match_step(kMarker, watch_, b);
    if (watch == int(kMarker.size()) || !value_.feed(b)) return false;
    watch_ = watch;
    return true;
}

}  // namespace dsv4
