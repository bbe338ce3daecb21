// vLLM's guided_choice as an engine token constraint (runtime/token_constraint.h): the text is exactly one of a list
// of strings, then one of `end_ids` (EOS). Ids count by their bytes (never special ids); the choices are read as
// sorted names (sorted_names.h), so a mask walks the vocabulary's byte trie and most ids fail at their first byte.
// Tested in tests/structured/constraints_test.cpp and on DeepSeek-V4's vocabulary in
// tests/server/structured_output_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/token_constraint.h"
#include "structured/constraints.h"
#include "structured/sorted_names.h"
#include "structured/whole_feeds.h"

namespace dsv4 {

// The choices, sorted and without repeats; at least one.
class ChoiceList {
  public:
    explicit ChoiceList(std::vector<std::string> choices);
    const std::vector<std::string>& choices() const { return choices_; }

  private:
    std::vector<std::string> choices_;
};

// A byte recognizer of the choices (token_walk.h's Cursor).
class ChoiceCursor : public WholeFeeds<ChoiceCursor> {
  public:
    explicit ChoiceCursor(const ChoiceList* list) : list_(list), range_{.lo = 0, .hi = int(list->choices().size())} {}
    bool feed(uint8_t b) { return step(b); }
    using WholeFeeds::feed;  // all or none
    bool complete() const { return range_.whole(Name{list_}); }

  private:
    friend class WholeFeeds;
    bool step(uint8_t b) { return range_.feed(b, Name{list_}); }  // refused: nothing changed
    struct Name {
        const ChoiceList* list;
        std::string_view operator()(int i) const { return list->choices()[size_t(i)]; }
    };
    const ChoiceList* list_;
    SortedNameRange range_;
};

class ChoiceConstraint final : public TokenConstraint {
  public:
    // start_after not empty: unconstrained until the drawn ids' bytes end with it ("</think>").
    ChoiceConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const ChoiceList> choices,
                     std::vector<int32_t> end_ids, std::string start_after = {});
    ChoiceConstraint(const ChoiceConstraint& other) = default;

    std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<ChoiceConstraint>(*this); }
    bool mask(float* logits, int64_t vocab) const override;
    void advance(int32_t id) override;

    const ChoiceCursor& cursor() const { return cursor_; }

  private:
    bool allowed(int32_t id) const;

    std::shared_ptr<const TokenTable> table_;
    std::shared_ptr<const ChoiceList> choices_;
    ChoiceCursor cursor_;  // reads *choices_
    std::vector<int32_t> end_ids_;
    StartAfter start_;
};

}  // namespace dsv4
