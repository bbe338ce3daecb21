// Byte strings fed to a byte recognizer all or none (token_walk.h's Cursor): what SchemaCursor, ToolCallCursor and
// ChoiceCursor share. `Derived` has `bool step(uint8_t)`, which may leave it half-changed when it refuses a byte,
// so the bytes are stepped on a copy that is kept only when every one was taken.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>

namespace dsv4 {

template <class Derived>
class WholeFeeds {
  public:
    // Whether all of `bytes` can follow; nothing is changed.
    bool accepts(std::string_view bytes) const {
        Derived next = static_cast<const Derived&>(*this);
        return steps(next, bytes);
    }
    // Appends all of `bytes`, or (false) none.
    bool feed(std::string_view bytes) {
        Derived next = static_cast<const Derived&>(*this);
        if (!steps(next, bytes)) return false;
        static_cast<Derived&>(*this) = std::move(next);
        return true;
    }

  private:
    static bool steps(Derived& next, std::string_view bytes) {
        for (const char c : bytes)
            if (!next.step(uint8_t(c))) return false;
        return true;
    }
};

}  // namespace dsv4
