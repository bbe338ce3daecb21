// The tokenizer of a DeepSeek-V4 model, read from a Hub tokenizer.json: added/special tokens are split out
// first (leftmost-longest, non-normalized tokens before normalized ones, as HF), the rest is pre-tokenized
// and byte-level BPE encoded. Decoding follows HF's ByteLevel decoder; invalid UTF-8 becomes U+FFFD, and
// IncrementalDecoder streams text without ever splitting a character. Tested by tests/tokenizer/*.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/unicode.h"

namespace dsv4::tok {

class BpeModel;
class AddedTokenMatcher;
struct PieceCache;

struct AddedToken {
    int32_t id = 0;
    std::string content;
    bool special = false;
    bool normalized = false;
};

class Tokenizer {
public:
    // Throw dsv4::Error with a message naming the file and the problem.
    static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
    static Tokenizer from_json(const nlohmann::json& tokenizer_json);

    Tokenizer(Tokenizer&&) noexcept;
    Tokenizer& operator=(Tokenizer&&) noexcept;
    ~Tokenizer();

    // Token ids of `text` (any bytes; HF parity is for valid UTF-8). Special-token strings in the text become
    // their ids; no BOS is added (the DeepSeek-V4 prompt already starts with it).
    std::vector<int32_t> encode(std::string_view text) const;
    void encode_append(std::string_view text, std::vector<int32_t>& out) const;

    // Text of `ids` (lossy UTF-8). Throws dsv4::Error for an id outside the vocabulary.
    std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

    // The raw bytes a token stands for (may be part of a UTF-8 character). Throws for an unknown id.
    const std::string& token_bytes(int32_t id) const;
    bool is_special(int32_t id) const;
    bool is_added(int32_t id) const;
    // Id of an added token by its content, e.g. "<｜User｜>".
    std::optional<int32_t> added_token_id(std::string_view content) const;
    const std::vector<AddedToken>& added_tokens() const { return added_; }
    int32_t vocab_size() const { return vocab_size_; }  // largest id + 1
    // Forgets the cached BPE results of long pieces (they only speed up encode; results never change).
    void clear_cache() const;

private:
    Tokenizer();

    std::unique_ptr<BpeModel> bpe_;
    std::unique_ptr<AddedTokenMatcher> plain_added_;       // normalized == false: matched first
    std::unique_ptr<AddedTokenMatcher> normalized_added_;  // matched in what remains
    std::vector<AddedToken> added_;
    std::vector<std::string> id_bytes_;  // decode bytes per id (HF ByteLevel rule for added tokens)
    std::vector<uint8_t> id_flags_;      // bit 0: exists, bit 1: added, bit 2: special
    int32_t vocab_size_ = 0;
    std::unique_ptr<PieceCache> cache_;  // ids of long pieces seen before; an encode() that finds it busy skips it
};

// Streaming detokenization for generation: push() returns the text that is complete so far; bytes of a
// character split across tokens are held until it completes. All pieces plus finish() == decode(all ids).
class IncrementalDecoder {
public:
    explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false)
        : tokenizer_(&tokenizer), skip_special_(skip_special_tokens) {}

    std::string push(int32_t id);
    std::string finish() { return utf8_.finish(); }

private:
    const Tokenizer* tokenizer_;
    bool skip_special_;
    Utf8Stream utf8_;
};

}  // namespace dsv4::tok
