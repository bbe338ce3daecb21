// The three Split regexes of DeepSeek's tokenizer.json, as scanners over decoded characters. Each follows
// Oniguruma's leftmost-first, backtracking semantics for its pattern (derivations in the comments); a
// piece's end is the end of the subject string for the next split, which matters for `\s+(?!\S)`.
#include "tokenizer/pretokenizer.h"

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace dsv4::tok {
namespace {

constexpr std::string_view kSplitNumbers = R"(\p{N}{1,3})";
constexpr std::string_view kSplitCjk = "[一-龥぀-ゟ゠-ヿ]+";
constexpr std::string_view kSplitMain =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^)"
    "\r\n"
    R"(\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[)"
    "\r\n"
    R"(]*|\s*[)"
    "\r\n"
    R"(]+|\s+(?!\S)|\s+)";

// The text decoded once: code point, class and byte offset per character (offset has one extra entry).
struct Chars {
    std::vector<uint32_t> cp;
    std::vector<uint8_t> cls;
    std::vector<uint32_t> offset;
};

bool is_letter_or_mark(uint8_t c) { return c == kLetter || c == kMark; }
bool is_punct_or_symbol(uint8_t c) { return c == kPunct || c == kSymbol; }
bool is_cr_lf(uint32_t cp) { return cp == '\r' || cp == '\n'; }
bool is_ascii_letter(uint32_t cp) { return (cp | 0x20) >= 'a' && (cp | 0x20) <= 'z'; }
bool is_ascii_punct(uint32_t cp) {
    return (cp >= '!' && cp <= '/') || (cp >= ':' && cp <= '@') || (cp >= '[' && cp <= '`') || (cp >= '{' && cp <= '~');
}
bool is_cjk(uint32_t cp) { return (cp >= 0x4E00 && cp <= 0x9FA5) || (cp >= 0x3040 && cp <= 0x30FF); }

// End of the match of the main pattern at p within [p, e), or p if no alternative matches.
size_t match_main(const Chars& t, size_t p, size_t e) {
    const uint32_t c = t.cp[p];
    const uint8_t k = t.cls[p];
    // [ascii punct][A-Za-z]+
    if (c < 128 && is_ascii_punct(c) && p + 1 < e && is_ascii_letter(t.cp[p + 1])) {
        size_t q = p + 1;
        while (q < e && is_ascii_letter(t.cp[q])) ++q;
        return q;
    }
    // [^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+ : the optional char is tried first, then dropped on failure.
    const bool optional_ok = !is_cr_lf(c) && k != kLetter && !is_punct_or_symbol(k);
    if ((optional_ok && p + 1 < e && is_letter_or_mark(t.cls[p + 1])) || is_letter_or_mark(k)) {
        size_t q = p + 1;
        while (q < e && is_letter_or_mark(t.cls[q])) ++q;
        return q;
    }
    // ' '?[\p{P}\p{S}]+[\r\n]*
    if (is_punct_or_symbol(k) || (c == ' ' && p + 1 < e && is_punct_or_symbol(t.cls[p + 1]))) {
        size_t q = p + 1;
        while (q < e && is_punct_or_symbol(t.cls[q])) ++q;
        while (q < e && is_cr_lf(t.cp[q])) ++q;
        return q;
    }
    if (k != kSpace) return p;
    size_t r = p;  // end of the maximal whitespace run
    while (r < e && t.cls[r] == kSpace) ++r;
    // \s*[\r\n]+ : greedy \s* backs off to the last CR/LF of the run.
    for (size_t q = r; q > p; --q)
        if (is_cr_lf(t.cp[q - 1])) return q;
    // \s+(?!\S) : the whole run at the end of the subject, else all but its last char (needs two chars).
    if (r == e || r - p >= 2) return r == e ? r : r - 1;
    return r;  // \s+
}

template <typename Sink>
void split_main(const Chars& t, size_t b, size_t e, Sink&& emit) {
    size_t gap = b, p = b;
    while (p < e) {
        const size_t q = match_main(t, p, e);
        if (q == p) {
            ++p;
            continue;
        }
        if (gap < p) emit(gap, p);
        emit(p, q);
        p = gap = q;
    }
    if (gap < e) emit(gap, e);
}

// Isolated split on maximal runs of a predicate; `max_run` > 0 cuts runs into chunks (\p{N}{1,3}).
template <typename Pred, typename Sink>
void split_runs(size_t b, size_t e, Pred&& in_run, size_t max_run, Sink&& emit) {
    size_t gap = b, p = b;
    while (p < e) {
        if (!in_run(p)) {
            ++p;
            continue;
        }
        if (gap < p) emit(gap, p);
        size_t q = p + 1;
        while (q < e && in_run(q) && (max_run == 0 || q - p < max_run)) ++q;
        emit(p, q);
        p = gap = q;
    }
    if (gap < e) emit(gap, e);
}

const nlohmann::json& field(const nlohmann::json& j, const char* key) {
    static const nlohmann::json kNull;
    return j.is_object() && j.contains(key) ? j.at(key) : kNull;
}

bool is_split(const nlohmann::json& p, std::string_view regex) {
    return field(p, "type") == "Split" && field(field(p, "pattern"), "Regex") == regex &&
           field(p, "behavior") == "Isolated" && field(p, "invert") == false;
}

}  // namespace

void check_supported_pre_tokenizer(const nlohmann::json& pre) {
    const nlohmann::json& list = field(pre, "pretokenizers");
    const bool ok = field(pre, "type") == "Sequence" && list.is_array() && list.size() == 4 &&
                    is_split(list[0], kSplitNumbers) && is_split(list[1], kSplitCjk) &&
                    is_split(list[2], kSplitMain) && field(list[3], "type") == "ByteLevel" &&
                    field(list[3], "add_prefix_space") == false && field(list[3], "use_regex") == false;
    DSV4_CHECK(ok,
               "tokenizer.json: unsupported pre_tokenizer (dsv4 implements DeepSeek's chain: Split \\p{{N}}{{1,3}}, "
               "CJK runs, the main split regex, ByteLevel without regex); found {}",
               pre.dump().substr(0, 300));
}

void pretokenize(std::string_view text, std::vector<Piece>& out) {
    out.clear();
    Chars t;
    t.cp.reserve(text.size());
    t.cls.reserve(text.size());
    t.offset.reserve(text.size() + 1);
    for (size_t i = 0; i < text.size();) {
        uint32_t cp;
        const auto b = static_cast<unsigned char>(text[i]);
        const int n = b < 0x80 ? (cp = b, 1) : decode_utf8(text, i, cp);
        t.cp.push_back(cp);
        t.cls.push_back(cp == kInvalidCodePoint ? kOther : char_class(cp));
        t.offset.push_back(static_cast<uint32_t>(i));
        i += n;
    }
    t.offset.push_back(static_cast<uint32_t>(text.size()));
    const size_t n = t.cp.size();
    auto emit_piece = [&](size_t b, size_t e) { out.push_back({t.offset[b], t.offset[e]}); };
    auto after_cjk = [&](size_t b, size_t e) { split_main(t, b, e, emit_piece); };
    auto after_numbers = [&](size_t b, size_t e) {
        split_runs(b, e, [&](size_t i) { return is_cjk(t.cp[i]); }, 0, after_cjk);
    };
    split_runs(0, n, [&](size_t i) { return t.cls[i] == kNumber; }, 3, after_numbers);
}

}  // namespace dsv4::tok
