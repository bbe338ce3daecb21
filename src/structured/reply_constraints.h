// The constraints of a DeepSeek-V4 reply, on its tokenizer's vocabulary: one JSON value of a schema as its content,
// the opening of a tool call, at most one call. Each begins after "</think>" in a thinking reply (the reasoning is
// free). Used by `dsv4 serve` (server/structured_output.h) and `dsv4 generate --json`. Tested in
// tests/server/structured_output_test.cpp on DeepSeek-V4's tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "structured/constraints.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

namespace dsv4 {

// Ids [0, vocab): the tokenizer's bytes; ids it lacks and its added tokens are special (never constrained text).
std::shared_ptr<const TokenTable> token_table(const tok::Tokenizer& tokenizer, int64_t vocab);

// One JSON value of `schema`, then `eos`.
std::shared_ptr<const TokenConstraint> json_reply(std::shared_ptr<const TokenTable> table,
                                                  std::shared_ptr<const CompiledSchema> schema, tok::ThinkingMode mode,
                                                  int32_t eos);

// A reply that begins with a call of one of `tools` (tool_choice "required" or a named function; empty: any reply),
// and, with `one_call`, ends after that call's invoke: the block's close, then `eos`. Null when neither applies.
std::shared_ptr<const TokenConstraint> tool_call_reply(std::shared_ptr<const TokenTable> table,
                                                       const std::vector<std::string>& tools, bool one_call,
                                                       tok::ThinkingMode mode, int32_t eos);

}  // namespace dsv4
