// The constraints of a DeepSeek-V4 reply, on its tokenizer's vocabulary: one JSON value of a schema as its content,
// one of a list of strings, or tool calls a grammar describes. Each begins after "</think>" in a thinking reply (the
// reasoning is free). Used by `dsv4 serve` (server/structured_output.h) and `dsv4 generate --json`. Tested in
// tests/server/structured_output_test.cpp on DeepSeek-V4's tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/choice_constraint.h"
#include "structured/constraints.h"
#include "structured/tool_call_constraint.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// Ids [0, vocab): the tokenizer's bytes; ids it lacks and its added tokens are special (never constrained text).
std::shared_ptr<const TokenTable> token_table(const tok::Tokenizer& tokenizer, int64_t vocab);

// One JSON value of `schema`, then `eos`.
std::shared_ptr<const TokenConstraint> json_reply(std::shared_ptr<const TokenTable> table,
                                                  std::shared_ptr<const CompiledSchema> schema, tok::ThinkingMode mode,
                                                  int32_t eos);

// One of `choices` exactly (vLLM's guided_choice), then `eos`.
std::shared_ptr<const TokenConstraint> choice_reply(std::shared_ptr<const TokenTable> table,
                                                    std::shared_ptr<const ChoiceList> choices, tok::ThinkingMode mode,
                                                    int32_t eos);

// The reply's tool calls as `grammar` has them (the block at once, or after free content; each call's arguments of
// its tool's schema), then `eos`.
std::shared_ptr<const TokenConstraint> tool_call_reply(std::shared_ptr<const TokenTable> table,
                                                       std::shared_ptr<const ToolCallGrammar> grammar,
                                                       tok::ThinkingMode mode, int32_t eos);

}  // namespace dsv4
