// UTF-8 decoding, the character classes of the pre-tokenizer (generated tables, Unicode 16.0) and lossy UTF-8
// repair (invalid bytes become U+FFFD, one per maximal invalid subpart, as Rust's String::from_utf8_lossy),
// whole-string and streaming. Tested by tests/tokenizer/unicode_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace dsv4::tok {

enum CharClass : uint8_t { kOther = 0, kLetter = 1, kMark = 2, kNumber = 3, kPunct = 4, kSymbol = 5, kSpace = 8 };

inline constexpr uint32_t kInvalidCodePoint = 0xFFFFFFFFu;

// Class of a code point (kOther for kInvalidCodePoint and unassigned code points).
CharClass char_class(uint32_t cp);

// Decodes one code point at s[i]; returns its byte length (>= 1). An ill-formed sequence yields
// kInvalidCodePoint and the length of its maximal invalid subpart (at least 1 byte).
int decode_utf8(std::string_view s, size_t i, uint32_t& cp);

void append_utf8(std::string& out, uint32_t cp);

bool is_valid_utf8(std::string_view s);

// Whole-string repair: valid UTF-8 is returned unchanged.
std::string utf8_lossy(std::string_view bytes);

// Streaming repair: feed() returns the longest decided prefix (complete characters and U+FFFD for invalid
// subparts); a trailing sequence that may still complete is held back until the next feed() or finish().
// Concatenating all outputs equals utf8_lossy() of all input.
class Utf8Stream {
public:
    std::string feed(std::string_view bytes);
    std::string finish();

private:
    std::string pending_;
};

}  // namespace dsv4::tok
