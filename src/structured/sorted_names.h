// Reading one of a list of names byte by byte: among names sorted in byte order, those that begin with the bytes read
// so far are a range, and those of them with a given byte next a range of that (a name that ends there sorts first).
// Used for a tool call's tool names (tool_call_cursor.h) and vLLM's guided_choice (choice_constraint.h).
#pragma once

#include <cstdint>
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
        const int first = first_where(lo, hi, [&](int i) { return next_byte(i) >= b; });
        const int end = first_where(first, hi, [&](int i) { return next_byte(i) > b; });
        if (first == end) return false;
        lo = first;
        hi = end;
        ++read;
        return true;
    }
    // The first i in [begin, end) where `holds` does (it holds from there on), else end: a binary search.
    template <class Pred>
    static int first_where(int begin, int end, Pred holds) {
        while (begin < end) {
            const int mid = begin + (end - begin) / 2;
            if (holds(mid))
                end = mid;
            else
                begin = mid + 1;
        }
        return begin;
    }

    // Whether the bytes read are a whole name: then it is the range's first.
    template <class NameOf>
    bool whole(NameOf name) const {
        return lo < hi && std::string_view(name(lo)).size() == size_t(read);
    }
};

}  // namespace dsv4
