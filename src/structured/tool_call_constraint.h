// The engine's token constraint (runtime/token_constraint.h) of a reply's tool calls: ids whose bytes keep the reply a
// prefix of what ToolCallCursor accepts (a DSML block the completion parser reads, each call's arguments of its tool's
// schema), then one of `end_ids` (EOS) where the reply may end. Markup tokens (DeepSeek-V4's "｜DSML｜") count by
// their bytes where markup may come; free content before a block is the model's own. Tested in
// tests/structured/tool_call_constraint_test.cpp and on DeepSeek-V4's vocabulary in
// tests/server/structured_output_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/token_constraint.h"
#include "structured/constraints.h"
#include "structured/tool_call_cursor.h"

namespace dsv4 {

class ToolCallConstraint final : public TokenConstraint {
  public:
    // start_after not empty: unconstrained until the drawn ids' bytes end with it ("</think>").
    ToolCallConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const ToolCallGrammar> grammar,
                       std::vector<int32_t> end_ids, std::string start_after = {});
    ToolCallConstraint(const ToolCallConstraint& other);

    std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<ToolCallConstraint>(*this); }
    bool mask(float* logits, int64_t vocab) const override;
    void advance(int32_t id) override;

    const ToolCallCursor& cursor() const { return cursor_; }

  private:
    bool allowed(int32_t id) const;
    bool special_allowed(int32_t id) const;
    void keep_in_content(std::vector<char>& keep) const;

    std::shared_ptr<const TokenTable> table_;
    std::shared_ptr<const ToolCallGrammar> grammar_;
    // Start::kAfterContent: the special ids fresh content may begin with; where the content ends with part of no
    // markup that an id's first byte continues, what came before does not matter to it: tried once, not every step.
    std::shared_ptr<const std::vector<int32_t>> content_specials_;
    ToolCallCursor cursor_;  // reads *grammar_
    std::vector<int32_t> end_ids_;
    StartAfter start_;
};

}  // namespace dsv4
