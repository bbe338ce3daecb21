// Reading one of a list of names byte by byte: among names sorted in byte order, those that begin with the bytes read
// so far are a range, and those of them with a given byte next a range of that (a name that ends there sorts first).
// Used for a tool call's tool names (tool_call_cursor.h) and vLLM's guided_choice (choice_constraint.h).
#pragma once

#include <cstdint>
#include <ranges>
#include <string_view>

namespace dsv4 {

struct SortedNameRange {
    int lo = 0, hi = 0;  // the names [lo, hi) begin with the `read` bytes read
    int read = 0;

    // `name(i)`: the i-th name (a std::string_view or what converts to one). Narrows to the names with `b` next;
    // false (and nothing changed) when none has.
    template <class NameOf>
    bool feed(uint8_t b, NameOf name) {
        const auto next_byte = [&](int i) {
            const std::string_view n = name(i);
            return size_t(read) < n.size() ? int(uint8_t(n[size_t(read)])) : -1;
        };
        const auto range = std::views::iota(lo, hi);
        const int first =
            lo + int(std::ranges::partition_point(range, [&](int i) { return next_byte(i) < b; }) - range.begin());
        const int end =
            lo + int(std::ranges::partition_point(range, [&](int i) { return next_byte(i) <= b; }) - range.begin());
        if (first == end) return false;
        lo = first;
        hi = end;
        ++read;
        return true;
    }
    // Whether the bytes read are a whole name: then it is the range's first.
    template <class NameOf>
    bool whole(NameOf name) const {
        return lo < hi && std::string_view(name(lo)).size() == size_t(read);
    }
};

}  // namespace dsv4
