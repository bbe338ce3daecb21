// ChoiceConstraint: see choice_constraint.h.
#include "structured/choice_constraint.h"

#include <algorithm>

#include "core/error.h"
#include "structured/token_walk.h"

namespace dsv4 {

ChoiceList::ChoiceList(std::vector<std::string> choices) : choices_(std::move(choices)) {
    DSV4_CHECK(!choices_.empty(), "a choice constraint needs a choice");
    std::sort(choices_.begin(), choices_.end());
    choices_.erase(std::unique(choices_.begin(), choices_.end()), choices_.end());
}

ChoiceConstraint::ChoiceConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const ChoiceList> choices,
                                   std::vector<int32_t> end_ids, std::string start_after)
    : table_(std::move(table)),
      choices_(std::move(choices)),
      cursor_(choices_.get()),
      end_ids_(std::move(end_ids)),
      start_(std::move(start_after)) {
    DSV4_CHECK(table_ != nullptr, "a choice constraint needs a token table");
}

bool ChoiceConstraint::allowed(int32_t id) const {
    if (int64_t(id) >= table_->size()) return false;
    if (std::find(end_ids_.begin(), end_ids_.end(), id) != end_ids_.end()) return cursor_.complete();
    const std::string_view bytes = table_->bytes(id);
    return !table_->special(id) && !bytes.empty() && cursor_.accepts(bytes);
}

bool ChoiceConstraint::mask(float* logits, int64_t vocab) const {
    if (!start_.reached()) return any_allowed(logits, vocab);
    thread_local std::vector<char> keep;
    thread_local std::vector<ChoiceCursor> states;
    keep.assign(size_t(table_->size()), 0);
    keep_by_trie(*table_, cursor_, states, keep);
    for (const int32_t id : end_ids_)
        if (id < table_->size()) keep[size_t(id)] = cursor_.complete();
    return apply_keep(keep, *table_, logits, vocab);
}

void ChoiceConstraint::advance(int32_t id) {
    if (!start_.reached()) {
        if (int64_t(id) < table_->size()) start_.feed(table_->bytes(id));
        return;
    }
    DSV4_CHECK(allowed(id), "guided_choice: token {} cannot continue one of the choices", id);
    if (std::find(end_ids_.begin(), end_ids_.end(), id) == end_ids_.end()) cursor_.feed(table_->bytes(id));
}

}  // namespace dsv4
