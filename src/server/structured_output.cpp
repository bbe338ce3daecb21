// response_constraint: see structured_output.h.
#include "server/structured_output.h"

namespace dsv4::server {

const char* constraint_kind(const GenerationOptions& options) {
    if (options.tool_calls) return "tool_call";
    switch (options.response_format) {
        case ResponseFormat::kJsonObject:
            return "json_object";
        case ResponseFormat::kJsonSchema:
            return "json_schema";
        case ResponseFormat::kChoice:
            return "choice";
        case ResponseFormat::kText:
            break;
    }
    return nullptr;
}

std::shared_ptr<const TokenConstraint> response_constraint(const GenerationOptions& options, tok::ThinkingMode mode,
                                                           std::shared_ptr<const TokenTable> table, int32_t eos) {
    if (options.tool_calls) return tool_call_reply(std::move(table), options.tool_calls, mode, eos);
    switch (options.response_format) {
        case ResponseFormat::kText:
            return nullptr;
        case ResponseFormat::kJsonObject:
            return json_reply(std::move(table), CompiledSchema::any_object(), mode, eos);
        case ResponseFormat::kJsonSchema:
            return json_reply(std::move(table), options.schema, mode, eos);
        case ResponseFormat::kChoice:
            return choice_reply(std::move(table), options.choices, mode, eos);
    }
    return nullptr;
}

}  // namespace dsv4::server
