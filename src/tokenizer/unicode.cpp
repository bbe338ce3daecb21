// Character classes from the generated range table, looked up through a two-level table built once; UTF-8
// decoding and lossy repair by the "maximal subpart" rule of Unicode §3.9 (what Rust's from_utf8_lossy does).
#include "tokenizer/unicode.h"

#include <array>
#include <map>
#include <vector>

#include "tokenizer/unicode_tables.h"

namespace dsv4::tok {
namespace {

// Stage 1 indexes 256-code-point blocks; identical blocks share one stage-2 row.
struct ClassTable {
    std::array<uint16_t, 0x110000 / 256> block{};
    std::vector<std::array<uint8_t, 256>> rows;

    ClassTable() {
        std::vector<uint8_t> full(0x110000, kOther);
        for (const CharRange& r : kCharRanges)
            for (uint32_t cp = r.first; cp <= r.last; ++cp) full[cp] = r.cls;
        std::map<std::array<uint8_t, 256>, uint16_t> index;
        for (size_t b = 0; b < block.size(); ++b) {
            std::array<uint8_t, 256> row;
            for (size_t k = 0; k < 256; ++k) row[k] = full[b * 256 + k];
            auto [it, inserted] = index.emplace(row, static_cast<uint16_t>(rows.size()));
            if (inserted) rows.push_back(row);
            block[b] = it->second;
        }
    }
};

const ClassTable& class_table() {
    static const ClassTable table;
    return table;
}

// Length of a sequence by lead byte and the valid range of its second byte (Unicode Table 3-7).
struct Lead {
    int len;
    uint8_t lo, hi;
};

Lead lead_info(uint8_t b) {
    if (b < 0x80) return {1, 0, 0};
    if (b < 0xC2) return {0, 0, 0};
    if (b < 0xE0) return {2, 0x80, 0xBF};
    if (b == 0xE0) return {3, 0xA0, 0xBF};
    if (b == 0xED) return {3, 0x80, 0x9F};
    if (b < 0xF0) return {3, 0x80, 0xBF};
    if (b == 0xF0) return {4, 0x90, 0xBF};
    if (b < 0xF4) return {4, 0x80, 0xBF};
    if (b == 0xF4) return {4, 0x80, 0x8F};
    return {0, 0, 0};
}

// Bytes of s[i..] that belong to the (possibly incomplete) sequence starting at i; sets *complete.
int scan_sequence(std::string_view s, size_t i, bool* complete, uint32_t* cp) {
    const auto b0 = static_cast<uint8_t>(s[i]);
    const Lead lead = lead_info(b0);
    if (lead.len == 1) {
        *complete = true;
        *cp = b0;
        return 1;
    }
    if (lead.len == 0) {
        *complete = false;
        return 1;
    }
    uint32_t v = b0 & (0xFF >> (lead.len + 1));
    int n = 1;
    for (; n < lead.len && i + n < s.size(); ++n) {
        const auto b = static_cast<uint8_t>(s[i + n]);
        const bool ok = n == 1 ? (b >= lead.lo && b <= lead.hi) : (b >= 0x80 && b <= 0xBF);
        if (!ok) break;
        v = (v << 6) | (b & 0x3F);
    }
    *complete = n == lead.len;
    *cp = v;
    return n;
}

}  // namespace

CharClass char_class(uint32_t cp) {
    if (cp >= 0x110000) return kOther;
    const ClassTable& t = class_table();
    return static_cast<CharClass>(t.rows[t.block[cp >> 8]][cp & 0xFF]);
}

int decode_utf8(std::string_view s, size_t i, uint32_t& cp) {
    bool complete = false;
    const int n = scan_sequence(s, i, &complete, &cp);
    if (!complete) cp = kInvalidCodePoint;
    return n;
}

void append_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
        out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
        out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
        out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
        out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
        out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
}

bool is_valid_utf8(std::string_view s) {
    for (size_t i = 0; i < s.size();) {
        uint32_t cp;
        const int n = decode_utf8(s, i, cp);
        if (cp == kInvalidCodePoint) return false;
        i += n;
    }
    return true;
}

std::string utf8_lossy(std::string_view bytes) {
    Utf8Stream stream;
    std::string out = stream.feed(bytes);
    out += stream.finish();
    return out;
}

std::string Utf8Stream::feed(std::string_view bytes) {
    pending_.append(bytes);
    std::string out;
    out.reserve(pending_.size());
    size_t i = 0;
    while (i < pending_.size()) {
        bool complete = false;
        uint32_t cp = 0;
        const int n = scan_sequence(pending_, i, &complete, &cp);
        if (complete) {
            out.append(pending_, i, n);
        } else if (i + n == pending_.size() && lead_info(static_cast<uint8_t>(pending_[i])).len > 1) {
            break;  // a valid prefix that the next bytes may complete
        } else {
            out += "\xEF\xBF\xBD";
        }
        i += n;
    }
    pending_.erase(0, i);
    return out;
}

std::string Utf8Stream::finish() {
    std::string out = pending_.empty() ? "" : "\xEF\xBF\xBD";
    pending_.clear();
    return out;
}

}  // namespace dsv4::tok
