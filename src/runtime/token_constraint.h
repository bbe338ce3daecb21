// A constraint on which tokens a request may draw next (structured output, forced tool calls): the engine masks the
// logits a draw reads (the disallowed ids to -inf; logprobs stay the model's own, as with penalties) and tells the
// constraint which id was drawn. The constraints themselves (JSON, JSON Schema, forced prefixes) are in
// src/structured/constraints.h; the engine knows only this interface. Tested through the engine in
// tests/runtime/engine_test.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

namespace dsv4 {

class TokenConstraint {
  public:
    virtual ~TokenConstraint() = default;
    // A fresh copy in the same state (each choice of a request advances its own).
    virtual std::unique_ptr<TokenConstraint> clone() const = 0;
    // Sets logits[id] = -inf for every id in [0, vocab) that may not come next; leaves the others. Returns whether
    // an id with a logit above -inf is left.
    virtual bool mask(float* logits, int64_t vocab) const = 0;
    // The id drawn (one that mask left).
    virtual void advance(int32_t id) = 0;
};

// The row a draw reads under `constraint`: `row` (the logits, or their adjusted copy in `scratch`) masked in
// `scratch`. Throws dsv4::Error when the constraint leaves no id. The engine's and the CLI's draws both go through it.
const float* masked_row(const TokenConstraint& constraint, const float* row, int64_t vocab,
                        std::vector<float>& scratch);

}  // namespace dsv4
