// What a request's `response_format` and `tool_choice` ask of its reply, as an engine constraint
// (structured/reply_constraints.h): for "json_object" one JSON object,
// for "json_schema" one value of the schema, then EOS, from the start of the content (after "</think>" in a thinking
// reply); for tool_choice "required" or a named function, a reply that begins with a call to one of them. Tested in
// tests/server/structured_output_test.cpp on DeepSeek-V4's tokenizer and end to end in tests/server_e2e.
#pragma once

#include <cstdint>
#include <memory>

#include "server/openai_protocol.h"
#include "structured/reply_constraints.h"
#include "tokenizer/prompt.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::server {

// The constraint of a reply with `options`' tool_choice or response_format (null when neither constrains it); `eos`
// ends a JSON reply.
// What constrains such a reply, for /metrics: "tool_call", "json_schema", "json_object", or null for none.
const char* constraint_kind(const GenerationOptions& options);

std::shared_ptr<const TokenConstraint> response_constraint(const GenerationOptions& options, tok::ThinkingMode mode,
                                                           std::shared_ptr<const TokenTable> table, int32_t eos);

}  // namespace dsv4::server
