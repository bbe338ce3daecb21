// Byte-level BPE model of a tokenizer.json ("model": {"type": "BPE"}): vocabulary and ranked merges over raw
// bytes (the GPT-2 byte-to-character mapping is undone at load). Merging follows HF tokenizers: repeatedly
// the lowest-ranked adjacent pair, leftmost first. Tested through tests/tokenizer/tokenizer_test.cpp and the
// corpus golden.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace dsv4::tok {

// GPT-2's byte-level alphabet: the character (code point) standing for each byte in vocab strings.
const std::array<uint32_t, 256>& byte_level_chars();

// Maps a byte-level vocab string back to bytes; false if a character is outside the alphabet.
bool byte_level_to_bytes(std::string_view token, std::string& bytes);

// The largest token id a tokenizer.json may use: tables are sized by the largest id (the V4 vocabulary ends at
// 129,279), so an id in the billions would ask for gigabytes before anything else could refuse it.
inline constexpr int32_t kMaxTokenId = (1 << 24) - 1;

// A token id of tokenizer.json (`what` names where it stands, for the message): a JSON integer in
// [0, kMaxTokenId]; anything else (a fraction, a string, a number out of range) throws dsv4::Error.
int32_t token_id(const nlohmann::json& id, std::string_view what);

class BpeModel {
public:
    // Reads model.vocab and model.merges (either "a b" strings or [a, b] pairs). Throws dsv4::Error.
    explicit BpeModel(const nlohmann::json& model);

    // Appends the ids of one pre-tokenized piece.
    void encode_piece(std::string_view bytes, std::vector<int32_t>& out) const;

    // vocab id -> raw bytes; ids not in the model vocabulary map to nullptr.
    const std::string* token_bytes(int32_t id) const;
    const std::unordered_map<std::string, int32_t>& vocab() const { return vocab_; }
    int32_t max_id() const { return max_id_; }

private:
    struct Merge {
        uint64_t key = kEmpty;  // left id << 32 | right id
        int32_t rank = 0;
        int32_t id = 0;
    };
    static constexpr uint64_t kEmpty = ~0ull;

    const Merge* find_merge(int32_t left, int32_t right) const;
    void insert_merge(int32_t left, int32_t right, int32_t rank, int32_t id);
    static constexpr size_t kSmallPiece = 48;  // longer pieces use the heap merge
    size_t merge_small(int32_t* sym, size_t n) const;  // in place; returns the new length
    void merge_large(std::vector<int32_t>& sym) const;

    std::unordered_map<std::string, int32_t> vocab_;  // raw bytes -> id
    std::vector<std::string> id_bytes_;               // id -> raw bytes
    std::vector<bool> has_id_;
    std::array<int32_t, 256> byte_id_{};
    std::vector<Merge> merges_;  // open addressing, power-of-two size
    uint64_t mask_ = 0;
    int32_t max_id_ = -1;
};

}  // namespace dsv4::tok
