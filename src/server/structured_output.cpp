#include "server/structured_output.h"

#include <string>
#include <vector>

#include "core/error.h"

namespace dsv4::server {

std::shared_ptr<const TokenTable> token_table(const tok::Tokenizer& tokenizer, int64_t vocab) {
    std::vector<std::string> bytes(static_cast<size_t>(vocab));
    std::vector<bool> special(static_cast<size_t>(vocab), true);
    for (int32_t id = 0; id < vocab && id < tokenizer.vocab_size(); ++id) {
        if (tokenizer.is_added(id) || tokenizer.is_special(id)) continue;
        try {
            bytes[size_t(id)] = tokenizer.token_bytes(id);
            special[size_t(id)] = false;
        } catch (const Error&) {  // an id the tokenizer does not have
        }
    }
    return std::make_shared<const TokenTable>(std::move(bytes), std::move(special));
}

std::shared_ptr<const TokenConstraint> response_constraint(ResponseFormat format, tok::ThinkingMode mode,
                                                           const tok::Tokenizer& tokenizer,
                                                           std::shared_ptr<const TokenTable> table, int32_t eos) {
    if (format == ResponseFormat::kText) return nullptr;
    int32_t start_after = -1;
    if (mode == tok::ThinkingMode::kThinking) {
        const std::optional<int32_t> think_end = tokenizer.added_token_id(tok::kThinkEnd);
        DSV4_CHECK(think_end.has_value(),
                   "the tokenizer has no {} token, which a thinking reply ends its reasoning with", tok::kThinkEnd);
        start_after = *think_end;
    }
    return std::make_shared<const JsonConstraint>(std::move(table), JsonLimits{}, std::vector<int32_t>{eos},
                                                  start_after);
}

}  // namespace dsv4::server
