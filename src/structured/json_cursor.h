// A byte-at-a-time recognizer of one JSON text (RFC 8259), for structured output: feed() accepts a byte only if the
// bytes so far remain a prefix of some valid document, so a generator that only ever emits accepted bytes and stops
// where complete() holds has written valid JSON. The language is RFC 8259's with three limits that keep generation
// finite and every output parseable by strict readers: nesting depth, runs of whitespace between tokens, and UTF-16
// surrogates escaped only in pairs (\ud83d\ude00, as json.dumps writes them; a lone one is refused), and numbers
// of at most 100 integer and 100 fraction digits and a two-digit exponent (every one a finite double). Strings must be
// valid UTF-8 (no overlong forms, no surrogates, nothing above U+10FFFF). Nothing may follow the top-level value, not
// even whitespace. Tested in tests/runtime/json_cursor_test.cpp against nlohmann::json's parser.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4 {

struct JsonLimits {
    int max_depth = 32;           // objects and arrays open at once
    int max_whitespace_run = 24;  // consecutive whitespace bytes between tokens (a pretty-printed line's indent fits)
    bool object_only = true;      // the top-level value must be an object (OpenAI's json_object mode)
};

// The scanner's state apart from the stack of open containers: small and trivially copyable, so a caller can try a
// token's bytes on a copy (json_cursor.cpp's Probe).
struct JsonLex {
    enum Mode : uint8_t {
        kTop,          // before the top-level value
        kValue,        // a value must start (after ':' or an array's ',')
        kArrayFirst,   // after '[': a value or ']'
        kObjectFirst,  // after '{': a key or '}'
        kKey,          // after an object's ',': a key
        kColon,        // after a key: ':'
        kAfterValue,   // after a value in a container: ',' or its close
        kString,       // in a string (key: a key's)
        kEscape,       // after '\' in a string
        kHex,          // in \uXXXX: `left` hex digits to go
        kLowSlash,     // after a high surrogate's escape: the '\' of its low surrogate's
        kLowU,         // and its 'u'
        kUtf8,         // in a multi-byte UTF-8 character: `left` bytes to go, the next in [lo, hi]
        kMinus,        // number: after '-'
        kZero,         // number: integer part "0"
        kInt,          // number: in the integer part
        kDot,          // number: after '.'
        kFrac,         // number: in the fraction
        kExp,          // number: after 'e' / 'E'
        kExpSign,      // number: after the exponent's sign
        kExpInt,       // number: in the exponent
        kLiteral,      // in true / false / null: `literal`, `left` bytes to go
        kDone,         // the top-level value is complete
    };
    Mode mode = kTop;
    bool key = false;        // kString, kEscape, kHex, kUtf8: the string is an object key
    uint8_t left = 0;        // kHex, kUtf8, kLiteral: bytes still to come
    uint8_t lo = 0x80;       // kUtf8: the next byte's range
    uint8_t hi = 0xBF;       //
    uint8_t literal = 0;     // kLiteral: 0 true, 1 false, 2 null
    bool d_first = false;    // kHex: the first digit was d / D (a surrogate if the second is 8-F)
    bool high = false;       // kHex: the escape is a high surrogate (D800-DBFF)
    bool need_low = false;   // kHex: the escape must be a low surrogate (DC00-DFFF)
    uint8_t whitespace = 0;  // the current run of whitespace between tokens
    uint8_t digits = 0;      // number: the digits of the current part (integer, fraction or exponent)
};

class JsonCursor {
  public:
    explicit JsonCursor(JsonLimits limits = {}) : limits_(limits) {}

    // Appends `byte` if the text stays a prefix of a valid document; otherwise returns false and changes nothing.
    bool feed(uint8_t byte);
    // Whether all of `bytes` can follow the text so far (nothing is changed).
    bool accepts(std::string_view bytes) const;
    // Appends all of `bytes`, or nothing if one of them cannot follow.
    bool feed(std::string_view bytes);
    // A whole document: the top-level value is closed (a top-level number is complete wherever it may end).
    bool complete() const;
    // Nothing but a string's ordinary content can follow a byte of a token without breaking it: in a string, with no
    // escape or multi-byte character under way (the fast path of a token mask, structured/constraints.h).
    bool in_plain_string() const { return lex_.mode == JsonLex::kString; }

    const JsonLimits& limits() const { return limits_; }
    const JsonLex& lex() const { return lex_; }
    size_t depth() const { return stack_.size(); }  // containers open

  private:
    JsonLimits limits_;
    JsonLex lex_;
    std::string stack_;  // the open containers, '{' or '[', outermost first
};

}  // namespace dsv4
