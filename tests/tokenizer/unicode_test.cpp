// UTF-8 decoding, lossy repair (maximal-subpart U+FFFD rule, same as Python's errors="replace") whole and
// streamed at every split point, and spot checks of the generated character classes (Unicode 16.0).
#include <gtest/gtest.h>

#include "tokenizer/unicode.h"

namespace dsv4::tok {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Unicode, CharClasses) {
    EXPECT_EQ(char_class('a'), kLetter);
    EXPECT_EQ(char_class(0x4E2D), kLetter);   // 中
    EXPECT_EQ(char_class(0x0301), kMark);     // combining acute
    EXPECT_EQ(char_class(0xFE0F), kMark);     // variation selector-16
    EXPECT_EQ(char_class(0x0663), kNumber);   // Arabic-Indic three
    EXPECT_EQ(char_class(0x216B), kNumber);   // Roman numeral twelve (Nl)
    EXPECT_EQ(char_class(0x30FB), kPunct);    // katakana middle dot
    EXPECT_EQ(char_class(0x1F600), kSymbol);  // emoji
    EXPECT_EQ(char_class(0x309B), kSymbol);   // katakana-hiragana voiced sound mark (Sk)
    EXPECT_EQ(char_class(0x3000), kSpace);
    EXPECT_EQ(char_class(0x0085), kSpace);
    EXPECT_EQ(char_class(0x200D), kOther);   // ZWJ (Cf)
    EXPECT_EQ(char_class(0x1C89), kLetter);  // new in Unicode 16.0
    EXPECT_EQ(char_class(0x10940), kOther);  // assigned only in Unicode 17.0
    EXPECT_EQ(char_class(kInvalidCodePoint), kOther);
}

TEST(Unicode, LossyRepairFollowsMaximalSubparts) {
    // Cases of Unicode §3.9 / the W3C encoding standard (what Python's decode(errors="replace") gives).
    const std::pair<std::string, std::string> cases[] = {
        {"abc", "abc"},
        {"\xC3\xA9", "é"},
        {"\xE6\x97", kFffd},                                    // truncated 3-byte sequence: one U+FFFD
        {"\xE6\x97" "a", kFffd + "a"},
        {"\xF0\x9F\x98", kFffd},                                // truncated emoji
        {"\xC0\xAF", kFffd + kFffd},                            // overlong lead: two
        {"\xED\xA0\x80", kFffd + kFffd + kFffd},                // surrogate: three
        {"\xF4\x90\x80\x80", kFffd + kFffd + kFffd + kFffd},    // above U+10FFFF
        {"\x80\xBF", kFffd + kFffd},
        {"\xE0\xA0", kFffd},
        {"\xE0\x80", kFffd + kFffd},
        {"\xF0\x9F\x98\x80\xFF", "😀" + kFffd},
    };
    for (const auto& [in, want] : cases) {
        EXPECT_EQ(utf8_lossy(in), want) << "input bytes " << in.size();
        EXPECT_EQ(is_valid_utf8(in), in == want);
        for (size_t cut = 0; cut <= in.size(); ++cut) {
            Utf8Stream s;
            std::string got = s.feed(in.substr(0, cut));
            got += s.feed(in.substr(cut));
            got += s.finish();
            EXPECT_EQ(got, want) << "split at " << cut;
        }
    }
}

TEST(Unicode, DecodeAndAppendAreInverse) {
    for (uint32_t cp : {0x0u, 0x7Fu, 0x80u, 0x7FFu, 0x800u, 0xFFFDu, 0x10000u, 0x10FFFFu}) {
        std::string s;
        append_utf8(s, cp);
        uint32_t back = 0;
        EXPECT_EQ(decode_utf8(s, 0, back), static_cast<int>(s.size()));
        EXPECT_EQ(back, cp);
    }
}

}  // namespace
}  // namespace dsv4::tok
