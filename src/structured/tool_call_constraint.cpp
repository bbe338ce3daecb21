// ToolCallConstraint: see tool_call_constraint.h. In content every text id passes but those that may begin or go on
// with markup (tried one by one); in free text (a value's or an other name's) the plain ids pass on sight; elsewhere
// the vocabulary is walked as a byte trie.
#include "structured/tool_call_constraint.h"

#include <algorithm>
#include <array>

#include "core/error.h"
#include "structured/token_walk.h"

namespace dsv4 {

ToolCallConstraint::ToolCallConstraint(std::shared_ptr<const TokenTable> table,
                                       std::shared_ptr<const ToolCallGrammar> grammar, std::vector<int32_t> end_ids,
                                       std::string start_after)
    : table_(std::move(table)),
      grammar_(std::move(grammar)),
      cursor_(grammar_.get()),
      end_ids_(std::move(end_ids)),
      start_(std::move(start_after)) {
    DSV4_CHECK(table_ != nullptr, "a tool-call constraint needs a token table");
    if (cursor_.in_content()) {  // a fresh cursor's content ends with part of no markup
        auto specials = std::make_shared<std::vector<int32_t>>();
        for (const int32_t id : table_->special_ids())
            if (special_allowed(id)) specials->push_back(id);
        content_specials_ = std::move(specials);
    }
}

ToolCallConstraint::ToolCallConstraint(const ToolCallConstraint& other) = default;

bool ToolCallConstraint::special_allowed(int32_t id) const {
    const std::string_view bytes = table_->bytes(id);
    if (bytes.empty()) return false;
    ToolCallCursor c = cursor_;
    for (const char b : bytes)  // markup only: a special id is never part of a name or a value
        if (!(c.in_content() || c.in_markup()) || !c.feed(uint8_t(b))) return false;
    return true;
}

bool ToolCallConstraint::allowed(int32_t id) const {
    if (int64_t(id) >= table_->size()) return false;
    if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return cursor_.complete();
    if (table_->special(id)) return special_allowed(id);
    const std::string_view bytes = table_->bytes(id);
    return !bytes.empty() && cursor_.accepts(bytes);
}

// Content's text: an id that holds no byte where markup begins, and whose first byte continues no markup the content
// ends with part of, stays content that holds none: it passes. The others are tried.
void ToolCallConstraint::keep_in_content(std::vector<char>& keep) const {
    const std::vector<int32_t>& ids = table_->ids_by_bytes();
    for (const int32_t id : ids) keep[size_t(id)] = 1;
    const auto tried = [&](int32_t id) { keep[size_t(id)] = cursor_.accepts(table_->bytes(id)); };
    for (const int32_t id : table_->markup_start_ids()) tried(id);
    const std::array<bool, 256> next = cursor_.content_markup_next();
    const auto first = [&](int32_t id) { return uint8_t(table_->bytes(id)[0]); };
    for (int b = 0; b < 256; ++b) {
        if (!next[size_t(b)] || ToolCallCursor::markup_start(uint8_t(b))) continue;  // those are tried above
        const auto lo = std::partition_point(ids.begin(), ids.end(), [&](int32_t id) { return first(id) < b; });
        const auto hi = std::partition_point(lo, ids.end(), [&](int32_t id) { return first(id) == b; });
        std::for_each(lo, hi, tried);
    }
}

bool ToolCallConstraint::mask(float* logits, int64_t vocab) const {
    if (!start_.reached()) return any_allowed(logits, vocab);
    thread_local std::vector<char> keep;
    keep.assign(size_t(table_->size()), 0);
    if (cursor_.in_content() && !cursor_.content_in_block_start()) {
        keep_in_content(keep);
    } else if (cursor_.in_free_text() && cursor_.in_raw_value()) {
        keep_by_id(cursor_, *table_, table_->raw_texts(), table_->not_raw_text_ids(), keep);
    } else if (cursor_.in_free_text()) {
        keep_by_id(cursor_, *table_, table_->plain_texts(), table_->not_plain_text_ids(), keep);
    } else {
        thread_local std::vector<ToolCallCursor> states;
        keep_by_trie(*table_, cursor_, states, keep);
    }
    if (cursor_.in_content() && !cursor_.content_in_block_start()) {
        // A special id whose first byte continues no markup the content ends with part of goes as from fresh content.
        for (const int32_t id : *content_specials_) keep[size_t(id)] = 1;
        const std::array<bool, 256> next = cursor_.content_markup_next();
        for (const int32_t id : table_->special_ids())
            if (next[uint8_t(table_->bytes(id)[0])]) keep[size_t(id)] = special_allowed(id);
    } else if (cursor_.in_content() || cursor_.in_markup()) {
        for (const int32_t id : table_->special_ids()) keep[size_t(id)] = special_allowed(id);
    }
    for (const int32_t id : end_ids_)
        if (id < table_->size()) keep[size_t(id)] = cursor_.complete();
    return apply_keep(keep, *table_, logits, vocab);
}

void ToolCallConstraint::advance(int32_t id) {
    if (!start_.reached()) {
        if (int64_t(id) < table_->size()) start_.feed(table_->bytes(id));
        return;
    }
    DSV4_CHECK(allowed(id), "tool call: token {} cannot continue the reply's tool calls", id);
    if (std::find(end_ids_.begin(), end_ids_.end(), id) == end_ids_.end()) cursor_.feed(table_->bytes(id));
}

}  // namespace dsv4
