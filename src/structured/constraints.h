// The engine's token constraints (runtime/token_constraint.h) of structured output: a vocabulary's bytes
// (TokenTable), one JSON text of a schema (JsonConstraint; tool calls: tool_call_constraint.h). A constraint may wait
// for a text before it applies (a thinking reply's "</think>", one token or several: the reasoning is free, the answer
// is not). Tested in tests/structured/constraints_test.cpp, on DeepSeek-V4's vocabulary in
// tests/server/structured_output_test.cpp, end to end in tests/server_e2e.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/token_constraint.h"
#include "structured/schema_cursor.h"

namespace dsv4 {

// The bytes of every id of a vocabulary, and which ids are special (control tokens and markup: never part of a
// constrained text, though their bytes count where a constraint waits for a text).
class TokenTable {
  public:
    // bytes[id]: the id's decoded bytes; special[id]: a control token. Same sizes.
    TokenTable(std::vector<std::string> bytes, std::vector<bool> special);

    int64_t size() const { return int64_t(special_.size()); }
    std::string_view bytes(int32_t id) const {
        return {text_.data() + offsets_[size_t(id)], offsets_[size_t(id) + 1] - offsets_[size_t(id)]};
    }
    bool special(int32_t id) const { return special_[size_t(id)]; }
    // Whole-character string content: every byte printable ASCII but '"' and '\', or whole UTF-8 characters, so the
    // id can follow any point of a JSON string where no escape or character is under way.
    bool plain_string(int32_t id) const { return plain_string_[size_t(id)] != 0; }
    // plain_string of every id (1 or 0), and the ids that can be text but are not plain string content.
    const std::vector<char>& plain_strings() const { return plain_string_; }
    const std::vector<int32_t>& not_plain_ids() const { return not_plain_ids_; }
    // plain_string content that holds neither '<' nor a byte 0xEF (with which DeepSeek-V4's markup character '｜'
    // begins): text that can neither close a tool call's value nor spell markup in it. Flags of every id (1 or 0), and
    // the ids that can be text but are not such text.
    const std::vector<char>& plain_texts() const { return plain_text_; }
    const std::vector<int32_t>& not_plain_text_ids() const { return not_plain_text_ids_; }
    // Whole UTF-8 characters (any ASCII: '"', '\' and control characters too) holding neither '<' nor 0xEF: what a
    // tool call's raw text value may hold anywhere where nothing bounds it. Flags and the text ids without it.
    const std::vector<char>& raw_texts() const { return raw_text_; }
    const std::vector<int32_t>& not_raw_text_ids() const { return not_raw_text_ids_; }
    // The ids that can be text and hold a line feed, '<' or a byte 0xEF: where DeepSeek-V4's markup texts begin (a
    // tool-call block's opening, "｜DSML｜", "<think>", ...; ToolCallCursor::markup_start); and the special ids that
    // have bytes.
    const std::vector<int32_t>& markup_start_ids() const { return markup_start_ids_; }
    const std::vector<int32_t>& special_ids() const { return special_ids_; }

    // The ids that can be text (not special, not empty) in the order of their bytes, and how many leading bytes each
    // shares with the one before it (0 for the first): a trie walked in order, so that a mask tries a shared prefix
    // once for all the ids that begin with it.
    const std::vector<int32_t>& ids_by_bytes() const { return ids_by_bytes_; }
    const std::vector<uint32_t>& shared_prefix() const { return shared_prefix_; }
    // For each place in that order: the first place after it whose id does not share its first byte (group_end(1)) or
    // its first two bytes (group_end(2)): where a walk goes on once such a prefix fails.
    const std::vector<uint32_t>& group_end(int bytes) const { return bytes == 1 ? group_end1_ : group_end2_; }
    size_t longest() const { return longest_; }

  private:
    std::string text_;
    std::vector<size_t> offsets_;  // [size + 1]
    std::vector<bool> special_;
    std::vector<char> plain_string_, plain_text_, raw_text_;
    std::vector<int32_t> ids_by_bytes_, not_plain_ids_, not_plain_text_ids_, not_raw_text_ids_, markup_start_ids_,
        special_ids_;
    std::vector<uint32_t> shared_prefix_, group_end1_, group_end2_;
    size_t longest_ = 0;
};

// Waits for a text among the bytes drawn (a thinking reply's "</think>", however it was tokenized): reached once
// they end with it; at once for an empty text.
class StartAfter {
  public:
    explicit StartAfter(std::string text) : text_(std::move(text)), reached_(text_.empty()) {}
    bool reached() const { return reached_; }
    void feed(std::string_view bytes);

  private:
    std::string text_, tail_;  // tail_: the last bytes drawn, as many as text_ has
    bool reached_;
};

// One JSON text (json_cursor.h's language) that satisfies `schema` (schema_cursor.h), then one of `end_ids` (EOS).
// Special ids are never part of it.
class JsonConstraint final : public TokenConstraint {
  public:
    // start_after not empty: unconstrained until the drawn ids' bytes end with it ("</think>" ends a thinking
    // reply's reasoning).
    JsonConstraint(std::shared_ptr<const TokenTable> table, std::shared_ptr<const CompiledSchema> schema,
                   JsonLimits limits, std::vector<int32_t> end_ids, std::string start_after = {});

    std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<JsonConstraint>(*this); }
    bool mask(float* logits, int64_t vocab) const override;
    void advance(int32_t id) override;

    const SchemaCursor& cursor() const { return cursor_; }
    bool active() const { return start_.reached(); }

  private:
    bool allowed(int32_t id) const;

    std::shared_ptr<const TokenTable> table_;
    std::shared_ptr<const CompiledSchema> schema_;
    SchemaCursor cursor_;  // reads *schema_
    std::vector<int32_t> end_ids_;
    StartAfter start_;
};

}  // namespace dsv4
