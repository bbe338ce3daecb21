// The pre-tokenizer of DeepSeek's tokenizer.json, hand-written: three regex Splits (behaviour "Isolated"),
// each applied to every piece the previous one produced, followed by the byte-level mapping (done by the
// BPE stage). Exactness against HF tokenizers is tested on a 1 MB corpus (tests/tokenizer/corpus_golden_test.cpp).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string_view>
#include <vector>

namespace dsv4::tok {

struct Piece {
    uint32_t begin, end;  // byte offsets into the text given to pretokenize()
};

// Throws dsv4::Error unless `pre_tokenizer` (the tokenizer.json field) is the chain implemented here.
void check_supported_pre_tokenizer(const nlohmann::json& pre_tokenizer);

// Splits text (which holds no added tokens) into the pieces BPE encodes one by one. Invalid UTF-8 bytes are
// kept, one "other" character each. `out` is cleared first.
void pretokenize(std::string_view text, std::vector<Piece>& out);

}  // namespace dsv4::tok
