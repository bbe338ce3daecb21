// How a constraint finds every id whose bytes may come next (constraints.h): over the vocabulary as a byte trie, or id
// by id inside free text, where most ids pass on sight. `Cursor` is a byte recognizer: copyable, with
// `bool feed(uint8_t)` that appends a byte or changes nothing, and `bool accepts(std::string_view) const`.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

#include "structured/constraints.h"

namespace dsv4 {

// Whether any of the row's ids is still allowed (not -inf): what a constraint that does not apply yet answers.
bool any_allowed(const float* logits, int64_t vocab);
// Sets every id the constraint does not keep (keep[id] == 0, or past the table) to -inf; whether any id is left.
bool apply_keep(const std::vector<char>& keep, const TokenTable& table, float* logits, int64_t vocab);

// The ids in byte order, each extending the cursor states of the prefix it shares with the one before: a prefix is
// fed once, and a prefix that fails rules out every id after it that shares it. `states` is scratch (kept between
// calls so that its cursors' buffers are reused). Sets keep[id] = 1 for each text id that may follow.
template <class Cursor>
void keep_by_trie(const TokenTable& table, const Cursor& start, std::vector<Cursor>& states, std::vector<char>& keep) {
    if (states.size() < table.longest() + 1) states.resize(table.longest() + 1, start);
    states[0] = start;  // states[d]: the cursor after the current id's first d bytes
    const std::vector<int32_t>& ids = table.ids_by_bytes();
    const std::vector<uint32_t>& shared = table.shared_prefix();
    size_t valid = 0;        // states[0 .. valid] hold the previous id's prefixes
    size_t dead = SIZE_MAX;  // the previous id's first `dead` bytes cannot come
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string_view bytes = table.bytes(ids[i]);
        if (shared[i] >= dead) continue;  // begins with the prefix that failed
        dead = SIZE_MAX;
        size_t d = std::min<size_t>(shared[i], valid);
        for (; d < bytes.size(); ++d) {
            states[d + 1] = states[d];
            if (!states[d + 1].feed(uint8_t(bytes[d]))) break;
        }
        valid = d;
        if (d == bytes.size()) {
            keep[size_t(ids[i])] = 1;
        } else {
            dead = d + 1;
            if (dead <= 2) i = table.group_end(int(dead))[i] - 1;  // past every id that begins the same way
        }
    }
}

// Inside free text: the ids flagged in `plain` pass on sight (a copy of the flags); of the `others`, those whose first
// byte cannot come fail at once and the rest are tried whole.
template <class Cursor>
void keep_by_id(const Cursor& cursor, const TokenTable& table, const std::vector<char>& plain,
                const std::vector<int32_t>& others, std::vector<char>& keep) {
    keep = plain;
    std::array<bool, 256> first{};
    for (int b = 0; b < 256; ++b) {
        const char c = char(b);
        first[size_t(b)] = cursor.accepts(std::string_view(&c, 1));
    }
    for (const int32_t id : others) {
        const std::string_view bytes = table.bytes(id);
        keep[size_t(id)] = first[uint8_t(bytes[0])] && (bytes.size() == 1 || cursor.accepts(bytes));
    }
}

}  // namespace dsv4
