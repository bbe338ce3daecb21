#include "server/structured_output.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace dsv4::server {

std::shared_ptr<const TokenTable> token_table(const tok::Tokenizer& tokenizer, int64_t vocab) {
    std::vector<std::string> bytes(static_cast<size_t>(vocab));
    std::vector<bool> special(static_cast<size_t>(vocab), true);
    for (int32_t id = 0; id < vocab && id < tokenizer.vocab_size(); ++id) {
        try {
            bytes[size_t(id)] = tokenizer.token_bytes(id);
            special[size_t(id)] = tokenizer.is_added(id) || tokenizer.is_special(id);
        } catch (const Error&) {  // an id the tokenizer does not have
        }
    }
    return std::make_shared<const TokenTable>(std::move(bytes), std::move(special));
}

std::shared_ptr<const TokenConstraint> response_constraint(const GenerationOptions& options, tok::ThinkingMode mode,
                                                           std::shared_ptr<const TokenTable> table, int32_t eos) {
    // A thinking reply's content begins after "</think>" (one token in DeepSeek-V4's vocabulary; the completion
    // parser reads it from the text, so its bytes decide, however they came).
    const std::string start_after = mode == tok::ThinkingMode::kThinking ? std::string(tok::kThinkEnd) : "";
    std::vector<std::shared_ptr<const TokenConstraint>> tool_rules;
    if (!options.forced_tools.empty()) {
        std::vector<std::string> openings;
        for (const std::string& name : options.forced_tools) openings.push_back(tok::tool_call_opening(name));
        tool_rules.push_back(std::make_shared<const PrefixConstraint>(table, std::move(openings), start_after));
    }
    if (options.one_tool_call)  // after the first invoke the block closes, and EOS ends the reply
        tool_rules.push_back(
            std::make_shared<const PrefixConstraint>(table, std::vector<std::string>{std::string(tok::kToolCallsClose)},
                                                     std::string(tok::kInvokeClose), std::vector<int32_t>{eos}));
    if (tool_rules.size() == 1) return tool_rules[0];
    if (tool_rules.size() > 1) return std::make_shared<const AllConstraints>(std::move(tool_rules));
    if (options.response_format == ResponseFormat::kText) return nullptr;
    std::shared_ptr<const CompiledSchema> schema =
        options.response_format == ResponseFormat::kJsonSchema ? options.schema : CompiledSchema::any_object();
    DSV4_CHECK(schema != nullptr, "response_format json_schema without its compiled schema");
    return std::make_shared<const JsonConstraint>(std::move(table), std::move(schema), JsonLimits{},
                                                  std::vector<int32_t>{eos}, start_after);
}

}  // namespace dsv4::server
