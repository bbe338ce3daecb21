// TokenTable and the constraints: see constraints.h. A mask walks the vocabulary as a byte trie (ids in byte order,
// a shared prefix fed once) except in a free string, where whole string content passes on sight.
#include "structured/constraints.h"

#include <algorithm>
#include <array>
#include <limits>

#include "core/error.h"

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
        if (!special_[id] && !bytes[id].empty()) ids_by_bytes_.push_back(int32_t(id));
        if (!special_[id] && !bytes[id].empty() && !plain_string_[id]) not_plain_ids_.push_back(int32_t(id));
        longest_ = std::max(longest_, bytes[id].size());
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

bool JsonConstraint::mask(float* logits, int64_t vocab) const {
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    bool any = false;
    if (!start_.reached()) {
        for (int64_t id = 0; id < vocab; ++id) any = any || logits[id] != kNever;
        return any;
    }
    thread_local std::vector<char> keep;
    keep.assign(size_t(table_->size()), 0);
    if (cursor_.in_free_string())
        mask_by_id(keep);
    else
        mask_by_trie(keep);
    if (cursor_.complete())
        for (const int32_t id : end_ids_)
            if (id < table_->size()) keep[size_t(id)] = 1;
    for (int64_t id = 0; id < vocab; ++id) {
        if (logits[id] == kNever) continue;
        if (id < table_->size() && keep[size_t(id)])
            any = true;
        else
            logits[id] = kNever;
    }
    return any;
}

// In a free string: whole string content passes on sight (a copy of the table's flags); of the other ids, those whose
// first byte cannot come fail at once and the rest are tried whole.
void JsonConstraint::mask_by_id(std::vector<char>& keep) const {
    keep = table_->plain_strings();
    std::array<bool, 256> first{};
    for (int b = 0; b < 256; ++b) {
        const char c = char(b);
        first[size_t(b)] = cursor_.accepts(std::string_view(&c, 1));
    }
    for (const int32_t id : table_->not_plain_ids()) {
        const std::string_view bytes = table_->bytes(id);
        keep[size_t(id)] = first[uint8_t(bytes[0])] && (bytes.size() == 1 || cursor_.accepts(bytes));
    }
}

// The ids in byte order, each extending the cursor states of the prefix it shares with the one before: a prefix is
// fed once, and a prefix that fails rules out every id after it that shares it.
void JsonConstraint::mask_by_trie(std::vector<char>& keep) const {
    thread_local std::vector<SchemaCursor> states;  // states[d]: the cursor after the current id's first d bytes
    if (states.size() < table_->longest() + 1) states.resize(table_->longest() + 1, cursor_);
    states[0] = cursor_;
    const std::vector<int32_t>& ids = table_->ids_by_bytes();
    const std::vector<uint32_t>& shared = table_->shared_prefix();
    size_t valid = 0;        // states[0 .. valid] hold the previous id's prefixes
    size_t dead = SIZE_MAX;  // the previous id's first `dead` bytes cannot come
    for (size_t i = 0; i < ids.size(); ++i) {
        const std::string_view bytes = table_->bytes(ids[i]);
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
            if (dead <= 2) i = table_->group_end(int(dead))[i] - 1;  // past every id that begins the same way
        }
    }
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

PrefixConstraint::PrefixConstraint(std::shared_ptr<const TokenTable> table, std::vector<std::string> prefixes,
                                   std::string start_after, std::vector<int32_t> then_only)
    : table_(std::move(table)),
      prefixes_(std::move(prefixes)),
      start_(std::move(start_after)),
      then_only_(std::move(then_only)) {
    DSV4_CHECK(table_ != nullptr && !prefixes_.empty(), "a prefix constraint needs a token table and a prefix");
}

// Before the prefix is done: an id's bytes either run inside a prefix still possible or complete it (and go on freely,
// unless only `then_only` may follow). After it: anything, or `then_only`.
bool PrefixConstraint::allowed(int32_t id) const {
    if (int64_t(id) >= table_->size()) return false;
    if (done_) return then_only_.empty() || std::find(then_only_.begin(), then_only_.end(), id) != then_only_.end();
    const std::string_view bytes = table_->bytes(id);
    if (bytes.empty()) return false;
    for (const std::string& p : prefixes_) {
        if (p.compare(0, matched_.size(), matched_) != 0) continue;
        const std::string_view rest = std::string_view(p).substr(matched_.size());
        if (rest.starts_with(bytes) || (then_only_.empty() && bytes.starts_with(rest))) return true;
    }
    return false;
}

bool PrefixConstraint::mask(float* logits, int64_t vocab) const {
    constexpr float kNever = -std::numeric_limits<float>::infinity();
    bool any = false;
    for (int64_t id = 0; id < vocab; ++id) {
        if (logits[id] == kNever) continue;
        if (!start_.reached() || allowed(int32_t(id)))
            any = true;
        else
            logits[id] = kNever;
    }
    return any;
}

void PrefixConstraint::advance(int32_t id) {
    if (!start_.reached()) {
        if (int64_t(id) < table_->size()) start_.feed(table_->bytes(id));
        return;
    }
    DSV4_CHECK(allowed(id), "tool_choice: token {} cannot continue the forced tool call", id);
    if (done_) return;
    matched_ += table_->bytes(id);
    for (const std::string& p : prefixes_) done_ = done_ || matched_.starts_with(p);
}

AllConstraints::AllConstraints(std::vector<std::shared_ptr<const TokenConstraint>> parts) {
    for (const auto& p : parts) parts_.push_back(p->clone());
}

AllConstraints::AllConstraints(const AllConstraints& other) {
    for (const auto& p : other.parts_) parts_.push_back(p->clone());
}

bool AllConstraints::mask(float* logits, int64_t vocab) const {
    bool any = true;
    for (const auto& p : parts_) any = p->mask(logits, vocab);  // each only removes: the last says what is left
    return any;
}

void AllConstraints::advance(int32_t id) {
    for (const auto& p : parts_) p->advance(id);
}

}  // namespace dsv4
