// TokenTable and the constraints: see constraints.h. A mask walks the vocabulary as a byte trie (ids in byte order,
// a shared prefix fed once) except in a free string, where whole string content passes on sight.
#include "structured/constraints.h"

#include <algorithm>
#include <array>
#include <limits>

#include "core/error.h"
#include "structured/token_walk.h"

namespace dsv4 {
namespace {

// Whether `bytes` are whole characters of ordinary JSON string content (constraints.h, plain_string).
bool plain_string_content(std::string_view bytes) {
    JsonCursor c(JsonLimits{.object_only = false});
    if (!c.feed(uint8_t('"'))) return false;
    for (const char ch : bytes)
        if (ch == '"' || ch == '\\' || !c.feed(uint8_t(ch))) return false;
    return c.in_plain_string();
}

// Whether `bytes` are whole UTF-8 characters (JsonCursor's check of string content, with the ASCII a JSON string
// escapes read as a plain letter).
bool whole_characters(std::string_view bytes) {
    JsonCursor c(JsonLimits{.object_only = false});
    if (!c.feed(uint8_t('"'))) return false;
    for (const char ch : bytes) {
        const uint8_t b = uint8_t(ch);
        if (!c.feed(b < 0x20 || b == '"' || b == '\\' ? uint8_t('a') : b)) return false;
    }
    return c.in_plain_string();
}

}  // namespace

TokenTable::TokenTable(std::vector<std::string> bytes, std::vector<bool> special) : special_(std::move(special)) {
    DSV4_CHECK(bytes.size() == special_.size(), "token table: {} byte strings for {} ids", bytes.size(),
               special_.size());
    offsets_.reserve(bytes.size() + 1);
    offsets_.push_back(0);
    plain_string_.resize(bytes.size());
    plain_text_.resize(bytes.size());
    raw_text_.resize(bytes.size());
    for (size_t id = 0; id < bytes.size(); ++id) {
        const std::string& b = bytes[id];
        text_ += b;
        offsets_.push_back(text_.size());
        const bool text = !special_[id] && !b.empty();
        plain_string_[id] = text && plain_string_content(b);
        const bool markup_free = b.find('<') == std::string::npos && b.find('\xEF') == std::string::npos;
        plain_text_[id] = plain_string_[id] && markup_free;
        raw_text_[id] = text && markup_free && whole_characters(b);
        if (text) ids_by_bytes_.push_back(int32_t(id));
        if (text && !plain_string_[id]) not_plain_ids_.push_back(int32_t(id));
        if (text && !plain_text_[id]) not_plain_text_ids_.push_back(int32_t(id));
        if (text && !raw_text_[id]) not_raw_text_ids_.push_back(int32_t(id));
        if (text && b.find_first_of("\n<\xEF") != std::string::npos) markup_start_ids_.push_back(int32_t(id));
        if (special_[id] && !b.empty()) special_ids_.push_back(int32_t(id));
        longest_ = std::max(longest_, b.size());
    }
    std::sort(ids_by_bytes_.begin(), ids_by_bytes_.end(),
              [&](int32_t a, int32_t b) { return this->bytes(a) < this->bytes(b); });
    shared_prefix_.resize(ids_by_bytes_.size());
    for (size_t i = 1; i < ids_by_bytes_.size(); ++i) {
        const std::string_view a = this->bytes(ids_by_bytes_[i - 1]), b = this->bytes(ids_by_bytes_[i]);
        size_t n = 0;
        while (n < a.size() && n < b.size() && a[n] == b[n]) ++n;
        shared_prefix_[i] = uint32_t(n);
    }
    const size_t n = ids_by_bytes_.size();
    group_end1_.resize(n);
    group_end2_.resize(n);
    for (size_t i = n; i-- > 0;) {
        const bool next_shares1 = i + 1 < n && shared_prefix_[i + 1] >= 1;
        const bool next_shares2 = i + 1 < n && shared_prefix_[i + 1] >= 2;
        group_end1_[i] = next_shares1 ? group_end1_[i + 1] : uint32_t(i + 1);
        group_end2_[i] = next_shares2 ? group_end2_[i + 1] : uint32_t(i + 1);
    }
}

JsonConstraint::JsonConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const CompiledSchema> schema,
                               JsonLimits limits, std::vector<int32_t> end_ids, std::string start_after)
    : table_(std::move(table)),
      schema_(std::move(schema)),
      cursor_(schema_.get(), limits),
      end_ids_(std::move(end_ids)),
      start_(std::move(start_after)) {
    DSV4_CHECK(table_ != nullptr && schema_ != nullptr, "a JSON constraint needs a token table and a schema");
}

// One id alone (advance's check; mask does the same for every id at once).
bool JsonConstraint::allowed(int32_t id) const {
    if (int64_t(id) >= table_->size()) return false;
    if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return cursor_.complete();
    if (table_->special(id)) return false;
    const std::string_view bytes = table_->bytes(id);
    if (bytes.empty()) return false;
    if (cursor_.in_free_string() && table_->plain_string(id)) return true;
    return cursor_.accepts(bytes);
}

bool any_allowed(const float* logits, int64_t vocab) {
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    for (int64_t id = 0; id < vocab; ++id)
        if (logits[id] != kNever) return true;
    return false;
}

bool apply_keep(const std::vector<char>& keep, const TokenTable& table, float* logits, int64_t vocab) {
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (int64_t id = 0; id < vocab; ++id) {
        if (logits[id] == kNever) continue;
        if (id < table.size() && keep[size_t(id)])
            any = true;
        else
            logits[id] = kNever;
    }
    return any;
}

bool JsonConstraint::mask(float* logits, int64_t vocab) const {
    if (!start_.reached()) return any_allowed(logits, vocab);
    thread_local std::vector<char> keep;
    keep.assign(size_t(table_->size()), 0);
    if (cursor_.in_free_string()) {
        keep_by_id(cursor_, *table_, table_->plain_strings(), table_->not_plain_ids(), keep);
    } else {
        thread_local std::vector<SchemaCursor> states;
        keep_by_trie(*table_, cursor_, states, keep);
    }
    if (cursor_.complete())
        for (const int32_t id : end_ids_)
            if (id < table_->size()) keep[size_t(id)] = 1;
    return apply_keep(keep, *table_, logits, vocab);
}

void StartAfter::feed(std::string_view bytes) {
    if (reached_) return;
    tail_ += bytes;
    if (tail_.size() > text_.size()) tail_.erase(0, tail_.size() - text_.size());
    reached_ = tail_ == text_;
}

void JsonConstraint::advance(int32_t id) {
    if (!start_.reached()) {
        if (int64_t(id) < table_->size()) start_.feed(table_->bytes(id));
        return;
    }
    DSV4_CHECK(allowed(id), "structured output: token {} cannot continue the JSON reply", id);
    if (std::find(end_ids_.begin(), end_ids_.end(), id) == end_ids_.end()) cursor_.feed(table_->bytes(id));
}

}  // namespace dsv4
