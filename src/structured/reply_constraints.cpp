// The constraints of a DeepSeek-V4 reply: see reply_constraints.h.
#include "structured/reply_constraints.h"

#include "core/error.h"

namespace dsv4 {
namespace {

// A thinking reply's content begins after "</think>" (one token in DeepSeek-V4's vocabulary; the completion parser
// reads it from the text, so its bytes decide, however they came).
std::string content_start(tok::ThinkingMode mode) {
    return mode == tok::ThinkingMode::kThinking ? std::string(tok::kThinkEnd) : std::string();
}

}  // namespace

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

std::shared_ptr<const TokenConstraint> json_reply(std::shared_ptr<const TokenTable> table,
                                                  std::shared_ptr<const CompiledSchema> schema, tok::ThinkingMode mode,
                                                  int32_t eos) {
    DSV4_CHECK(schema != nullptr, "a JSON reply needs its schema");
    return std::make_shared<const JsonConstraint>(std::move(table), std::move(schema), JsonLimits{},
                                                  std::vector<int32_t>{eos}, content_start(mode));
}

std::shared_ptr<const TokenConstraint> choice_reply(std::shared_ptr<const TokenTable> table,
                                                    std::shared_ptr<const ChoiceList> choices, tok::ThinkingMode mode,
                                                    int32_t eos) {
    DSV4_CHECK(choices != nullptr, "a choice reply needs its choices");
    return std::make_shared<const ChoiceConstraint>(std::move(table), std::move(choices), std::vector<int32_t>{eos},
                                                    content_start(mode));
}

std::shared_ptr<const TokenConstraint> tool_call_reply(std::shared_ptr<const TokenTable> table,
                                                       std::shared_ptr<const ToolCallGrammar> grammar,
                                                       tok::ThinkingMode mode, int32_t eos) {
    DSV4_CHECK(grammar != nullptr, "a tool-call reply needs its grammar");
    return std::make_shared<const ToolCallConstraint>(std::move(table), std::move(grammar), std::vector<int32_t>{eos},
                                                      content_start(mode));
}

}  // namespace dsv4
