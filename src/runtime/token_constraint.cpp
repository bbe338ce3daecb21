#include "runtime/token_constraint.h"

#include <algorithm>
#include <array>
#include <limits>

#include "core/error.h"

namespace dsv4 {
namespace {

// Whether `bytes` are whole characters of ordinary JSON string content (token_constraint.h, plain_string).
bool plain_string_content(std::string_view bytes) {
    JsonCursor c(JsonLimits{.object_only = false});
    if (!c.feed(uint8_t('"'))) return false;
    for (const char ch : bytes)
        if (ch == '"' || ch == '\\' || !c.feed(uint8_t(ch))) return false;
    return c.in_plain_string();
}

}  // namespace

TokenTable::TokenTable(std::vector<std::string> bytes, std::vector<bool> special) : special_(std::move(special)) {
    DSV4_CHECK(bytes.size() == special_.size(), "token table: {} byte strings for {} ids", bytes.size(),
               special_.size());
    offsets_.reserve(bytes.size() + 1);
    offsets_.push_back(0);
    plain_string_.resize(bytes.size());
    for (size_t id = 0; id < bytes.size(); ++id) {
        text_ += bytes[id];
        offsets_.push_back(text_.size());
        plain_string_[id] = !special_[id] && !bytes[id].empty() && plain_string_content(bytes[id]);
    }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const CompiledSchema> schema,
                               JsonLimits limits, std::vector<int32_t> end_ids, std::string start_after)
    : table_(std::move(table)),
      schema_(std::move(schema)),
      cursor_(schema_.get(), limits),
      end_ids_(std::move(end_ids)),
      start_after_(std::move(start_after)),
      active_(start_after_.empty()) {
    DSV4_CHECK(table_ != nullptr && schema_ != nullptr, "a JSON constraint needs a token table and a schema");
}

bool JsonConstraint::allowed(int32_t id) const {
    if (int64_t(id) >= table_->size()) return false;
    if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return cursor_.complete();
    if (table_->special(id)) return false;
    const std::string_view bytes = table_->bytes(id);
    if (bytes.empty()) return false;
    if (cursor_.in_free_string() && table_->plain_string(id)) return true;
    return cursor_.accepts(bytes);
}

// allowed() for every id, with what does not depend on the id done once: the bytes that may come first (most ids
// fail there; only the others are tried whole) and whether any whole string content may follow.
bool JsonConstraint::mask(float* logits, int64_t vocab) const {
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    bool any = false;
    if (!active_) {
        for (int64_t id = 0; id < vocab; ++id) any = any || logits[id] != kNever;
        return any;
    }
    std::array<bool, 256> first{};
    for (int b = 0; b < 256; ++b) {
        const char c = char(b);
        first[size_t(b)] = cursor_.accepts(std::string_view(&c, 1));
    }
    const bool free_string = cursor_.in_free_string(), complete = cursor_.complete();
    auto ok = [&](int32_t id) {
        if (id >= table_->size()) return false;
        if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return complete;
        if (table_->special(id)) return false;
        const std::string_view bytes = table_->bytes(id);
        if (bytes.empty() || !first[uint8_t(bytes[0])]) return false;
        if (bytes.size() == 1 || (free_string && table_->plain_string(id))) return true;
        return cursor_.accepts(bytes);
    };
    for (int64_t id = 0; id < vocab; ++id) {
        if (logits[id] == kNever) continue;
        if (ok(int32_t(id)))
            any = true;
        else
            logits[id] = kNever;
    }
    return any;
}

void JsonConstraint::advance(int32_t id) {
    if (!active_) {
        if (int64_t(id) < table_->size()) tail_ += table_->bytes(id);
        if (tail_.size() > start_after_.size()) tail_.erase(0, tail_.size() - start_after_.size());
        active_ = tail_ == start_after_;
        return;
    }
    DSV4_CHECK(allowed(id), "structured output: token {} cannot continue the JSON reply", id);
    if (std::find(end_ids_.begin(), end_ids_.end(), id) == end_ids_.end()) cursor_.feed(table_->bytes(id));
}

}  // namespace dsv4
