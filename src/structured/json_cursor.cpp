// JsonCursor: see json_cursor.h. One byte is one Step: the state after it is computed aside and committed only when
// the byte is accepted, the stack changed last, so a refused byte leaves nothing to undo.
#include "structured/json_cursor.h"

namespace dsv4 {
namespace {

constexpr std::string_view kLiterals[3] = {"true", "false", "null"};
constexpr int kNumberDigits = 100, kExponentDigits = 2;

bool is_whitespace(uint8_t b) {
    return b == ' ' || b == '\t' || b == '\n' || b == '\r';
}
bool is_digit(uint8_t b) {
    return b >= '0' && b <= '9';
}
bool is_hex(uint8_t b) {
    return is_digit(b) || (b >= 'a' && b <= 'f') || (b >= 'A' && b <= 'F');
}

// The cursor's own stack of open containers.
struct OwnStack {
    std::string& s;
    size_t size() const { return s.size(); }
    char top() const { return s.back(); }
    void push(char c) { s.push_back(c); }
    void pop() { s.pop_back(); }
};

// A probe's view of a cursor's stack: the first `kept` entries of the cursor's, then its own pushes.
struct ProbeStack {
    const std::string& base;
    size_t kept;
    std::string pushed;
    size_t size() const { return kept + pushed.size(); }
    char top() const { return pushed.empty() ? base[kept - 1] : pushed.back(); }
    void push(char c) { pushed.push_back(c); }
    void pop() {
        if (pushed.empty())
            --kept;
        else
            pushed.pop_back();
    }
};

// One byte against the state (`lex`, `stack`): true and the state advanced, or false and nothing changed. At most one
// stack operation a byte, made last, so a refusal never needs undoing.
template <class Stack>
class Step {
  public:
    Step(const JsonLimits& limits, Stack& stack) : limits_(limits), stack_(stack) {}

    bool operator()(JsonLex& lex, uint8_t b) {
        JsonLex n = lex;
        if (!advance(n, b)) return false;
        if (op_ == Op::kPush) stack_.push(pushed_);
        if (op_ == Op::kPop) stack_.pop();
        lex = n;
        return true;
    }

  private:
    enum class Op { kNone, kPush, kPop };

    // After a value: the next token of its container, or the end of the document (depth: after this byte's pop).
    static void end_value(JsonLex& n, size_t depth) {
        n.mode = depth == 0 ? JsonLex::kDone : JsonLex::kAfterValue;
        n.whitespace = 0;
    }

    bool open(JsonLex& n, char c) {
        if (int(stack_.size()) >= limits_.max_depth) return false;
        op_ = Op::kPush, pushed_ = c;
        n.mode = c == '{' ? JsonLex::kObjectFirst : JsonLex::kArrayFirst;
        return true;
    }
    bool close(JsonLex& n, char c) {
        if (stack_.size() == 0 || stack_.top() != c) return false;
        op_ = Op::kPop;
        end_value(n, stack_.size() - 1);
        return true;
    }
    bool start_string(JsonLex& n, bool key) {
        n.mode = JsonLex::kString, n.key = key;
        return true;
    }
    bool start_value(JsonLex& n, uint8_t b) {
        switch (b) {
            case '{':
                return open(n, '{');
            case '[':
                return open(n, '[');
            case '"':
                return start_string(n, false);
            case '-':
                return part(n, JsonLex::kMinus);
            case '0':
                return part(n, JsonLex::kMinus) && digit(n, JsonLex::kZero);
            case 't':
            case 'f':
            case 'n':
                n.mode = JsonLex::kLiteral;
                n.literal = b == 't' ? 0 : b == 'f' ? 1 : 2;
                n.left = uint8_t(kLiterals[n.literal].size() - 1);
                return true;
            default:
                return b >= '1' && b <= '9' && part(n, JsonLex::kMinus) && digit(n, JsonLex::kInt);
        }
    }

    // The modes between tokens, where whitespace may come.
    bool between_tokens(JsonLex& n, uint8_t b) {
        if (is_whitespace(b)) {
            if (n.whitespace >= limits_.max_whitespace_run) return false;
            ++n.whitespace;
            return true;
        }
        n.whitespace = 0;
        switch (n.mode) {
            case JsonLex::kTop:
                return limits_.object_only ? b == '{' && open(n, '{') : start_value(n, b);
            case JsonLex::kValue:
                return start_value(n, b);
            case JsonLex::kArrayFirst:
                return b == ']' ? close(n, '[') : start_value(n, b);
            case JsonLex::kObjectFirst:
                return b == '}' ? close(n, '{') : b == '"' && start_string(n, true);
            case JsonLex::kKey:
                return b == '"' && start_string(n, true);
            case JsonLex::kColon:
                if (b != ':') return false;
                n.mode = JsonLex::kValue;
                return true;
            case JsonLex::kAfterValue:
                if (b == ',') {
                    n.mode = stack_.top() == '{' ? JsonLex::kKey : JsonLex::kValue;
                    return true;
                }
                return (b == '}' && close(n, '{')) || (b == ']' && close(n, '['));
            default:
                return false;
        }
    }

    bool in_string(JsonLex& n, uint8_t b) {
        if (b == '"') {
            if (n.key) {
                n.mode = JsonLex::kColon;
                n.whitespace = 0;
            } else {
                end_value(n, stack_.size());
            }
            return true;
        }
        if (b == '\\') {
            n.mode = JsonLex::kEscape;
            return true;
        }
        if (b < 0x20) return false;  // control characters must be escaped
        if (b < 0x80) return true;
        // The first byte of a multi-byte character fixes its length and the second byte's range (RFC 3629 table).
        n.mode = JsonLex::kUtf8, n.lo = 0x80, n.hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) {
            n.left = 1;
        } else if (b >= 0xE0 && b <= 0xEF) {
            n.left = 2;
            if (b == 0xE0) n.lo = 0xA0;  // no overlong forms
            if (b == 0xED) n.hi = 0x9F;  // no surrogates
        } else if (b >= 0xF0 && b <= 0xF4) {
            n.left = 3;
            if (b == 0xF0) n.lo = 0x90;  // no overlong forms
            if (b == 0xF4) n.hi = 0x8F;  // nothing above U+10FFFF
        } else {
            return false;
        }
        return true;
    }

    // A digit of \uXXXX. Surrogates (D800-DFFF: a first digit d / D, a second 8-F) come in pairs: a high one
    // (second digit 8-B) must be followed by an escaped low one (C-F), which may come only there.
    bool hex_digit(JsonLex& n, uint8_t b) {
        if (!is_hex(b)) return false;
        if (n.left == 4) {
            n.d_first = b == 'd' || b == 'D';
            n.high = false;
            if (n.need_low && !n.d_first) return false;
        } else if (n.left == 3 && n.d_first) {
            const int v = is_digit(b) ? b - '0' : (b | 0x20) - 'a' + 10;
            if (n.need_low ? v < 0xC : v >= 0xC) return false;
            n.high = !n.need_low && v >= 0x8;
        } else if (n.left == 3 && n.need_low) {
            return false;
        }
        if (--n.left == 0) n.mode = n.high ? JsonLex::kLowSlash : JsonLex::kString;
        return true;
    }

    // A number's part (integer, fraction, exponent) begins; the digits of each are counted.
    static bool part(JsonLex& n, JsonLex::Mode mode) {
        n.mode = mode, n.digits = 0;
        return true;
    }
    // A digit of a number's part, within kNumberDigits (integer and fraction) or kExponentDigits: every number a
    // finite, normal double (at most 1e100 x 1e99; at least 1e-100 x 1e-99), which strict readers parse.
    static bool digit(JsonLex& n, JsonLex::Mode mode) {
        const bool exponent = mode == JsonLex::kExpInt;
        if (n.mode != mode) n.digits = 0;
        if (n.digits >= (exponent ? kExponentDigits : kNumberDigits)) return false;
        n.mode = mode, ++n.digits;
        return true;
    }

    // A number ended at byte b, which is not part of it: b is the next token's (a top-level number ends the document).
    bool end_number(JsonLex& n, uint8_t b) {
        if (stack_.size() == 0) return false;
        end_value(n, stack_.size());
        return between_tokens(n, b);
    }

    bool advance(JsonLex& n, uint8_t b) {
        switch (n.mode) {
            case JsonLex::kString:
                return in_string(n, b);
            case JsonLex::kUtf8:
                if (b < n.lo || b > n.hi) return false;
                n.lo = 0x80, n.hi = 0xBF;
                if (--n.left == 0) n.mode = JsonLex::kString;
                return true;
            case JsonLex::kEscape:
                if (b == 'u') {
                    n.mode = JsonLex::kHex, n.left = 4, n.need_low = false;
                    return true;
                }
                if (b != '"' && b != '\\' && b != '/' && b != 'b' && b != 'f' && b != 'n' && b != 'r' && b != 't')
                    return false;
                n.mode = JsonLex::kString;
                return true;
            case JsonLex::kHex:
                return hex_digit(n, b);
            case JsonLex::kLowSlash:
                if (b != '\\') return false;
                n.mode = JsonLex::kLowU;
                return true;
            case JsonLex::kLowU:
                if (b != 'u') return false;
                n.mode = JsonLex::kHex, n.left = 4, n.need_low = true;
                return true;
            case JsonLex::kMinus:
                return b == '0' ? digit(n, JsonLex::kZero) : b >= '1' && b <= '9' && digit(n, JsonLex::kInt);
            case JsonLex::kZero:
            case JsonLex::kInt:
                if (n.mode == JsonLex::kInt && is_digit(b)) return digit(n, JsonLex::kInt);
                if (b == '.') return part(n, JsonLex::kDot);
                if (b == 'e' || b == 'E') return part(n, JsonLex::kExp);
                return end_number(n, b);
            case JsonLex::kDot:
                return is_digit(b) && digit(n, JsonLex::kFrac);
            case JsonLex::kFrac:
                if (is_digit(b)) return digit(n, JsonLex::kFrac);
                if (b == 'e' || b == 'E') return part(n, JsonLex::kExp);
                return end_number(n, b);
            case JsonLex::kExp:
                if (b == '+' || b == '-') return part(n, JsonLex::kExpSign);
                return is_digit(b) && digit(n, JsonLex::kExpInt);
            case JsonLex::kExpSign:
                return is_digit(b) && digit(n, JsonLex::kExpInt);
            case JsonLex::kExpInt:
                return is_digit(b) ? digit(n, JsonLex::kExpInt) : end_number(n, b);
            case JsonLex::kLiteral: {
                const std::string_view word = kLiterals[n.literal];
                if (b != uint8_t(word[word.size() - n.left])) return false;
                if (--n.left == 0) end_value(n, stack_.size());
                return true;
            }
            case JsonLex::kDone:
                return false;
            default:
                return between_tokens(n, b);
        }
    }

    const JsonLimits& limits_;
    Stack& stack_;
    Op op_ = Op::kNone;
    char pushed_ = 0;
};

}  // namespace

bool JsonCursor::feed(uint8_t byte) {
    OwnStack stack{stack_};
    return Step<OwnStack>(limits_, stack)(lex_, byte);
}

bool JsonCursor::accepts(std::string_view bytes) const {
    JsonLex lex = lex_;
    ProbeStack stack{stack_, stack_.size(), {}};
    for (const char c : bytes)
        if (!Step<ProbeStack>(limits_, stack)(lex, uint8_t(c))) return false;
    return true;
}

bool JsonCursor::feed(std::string_view bytes) {
    if (!accepts(bytes)) return false;
    for (const char c : bytes) feed(uint8_t(c));
    return true;
}

bool JsonCursor::complete() const {
    if (lex_.mode == JsonLex::kDone) return true;
    const bool number_may_end = lex_.mode == JsonLex::kZero || lex_.mode == JsonLex::kInt ||
                                lex_.mode == JsonLex::kFrac || lex_.mode == JsonLex::kExpInt;
    return stack_.empty() && number_may_end;
}

}  // namespace dsv4
