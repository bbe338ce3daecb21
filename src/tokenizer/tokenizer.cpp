// Tokenizer: loading tokenizer.json, the added-token split (a byte trie, leftmost-longest), and the
// pre-tokenize + BPE pipeline on the gaps between added tokens; decoding by per-id byte strings.
#include "tokenizer/tokenizer.h"

#include <fstream>
#include <mutex>
#include <sstream>
#include <unordered_map>

#include "core/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"

namespace dsv4::tok {

// Leftmost-longest matching of a set of strings over bytes (what HF's Aho-Corasick with LeftmostLongest does).
class AddedTokenMatcher {
public:
    void add(std::string_view s, int32_t id) {
        int32_t node = 0;
        for (unsigned char c : s) {
            const uint64_t key = (static_cast<uint64_t>(node) << 8) | c;
            auto it = edges_.find(key);
            if (it == edges_.end()) {
                it = edges_.emplace(key, static_cast<int32_t>(terminal_.size())).first;
                terminal_.push_back(-1);
            }
            node = it->second;
        }
        if (!s.empty()) {
            terminal_[node] = id;
            first_byte_[static_cast<unsigned char>(s[0])] = true;
        }
    }

    // Calls gap(begin, end) for text between matches and token(id) for each match, in order.
    template <typename Gap, typename Token>
    void split(std::string_view text, Gap&& gap, Token&& token) const {
        size_t start = 0, i = 0;
        while (i < text.size()) {
            size_t match_len = 0;
            int32_t match_id = -1;
            if (first_byte_[static_cast<unsigned char>(text[i])]) {
                int32_t node = 0;
                for (size_t j = i; j < text.size(); ++j) {
                    auto it = edges_.find((static_cast<uint64_t>(node) << 8) | static_cast<unsigned char>(text[j]));
                    if (it == edges_.end()) break;
                    node = it->second;
                    if (terminal_[node] >= 0) {
                        match_len = j + 1 - i;
                        match_id = terminal_[node];
                    }
                }
            }
            if (match_id < 0) {
                ++i;
                continue;
            }
            if (start < i) gap(start, i);
            token(match_id);
            i += match_len;
            start = i;
        }
        if (start < text.size()) gap(start, text.size());
    }

private:
    std::unordered_map<uint64_t, int32_t> edges_;  // node << 8 | byte -> child
    std::vector<int32_t> terminal_{-1};            // node -> token id or -1
    bool first_byte_[256] = {};
};

// BPE results of pieces long enough that merging costs more than a hash lookup (whitespace runs, long
// words). Shared by all encode() calls of a tokenizer; a call that cannot take the lock encodes uncached.
struct PieceCache {
    static constexpr size_t kMinBytes = 8, kMaxEntries = 1 << 16;
    std::mutex mutex;
    std::unordered_map<std::string, std::vector<int32_t>> map;
};

Tokenizer::Tokenizer() : cache_(std::make_unique<PieceCache>()) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::from_file(const std::filesystem::path& path) {
    std::ifstream in(path, std::ios::binary);
    DSV4_CHECK(in.good(), "cannot open tokenizer file {}", path.string());
    std::stringstream buf;
    buf << in.rdbuf();
    nlohmann::json j;
    try {
        j = nlohmann::json::parse(buf.str());
    } catch (const nlohmann::json::exception& e) {
        fail("{} is not valid JSON: {}", path.string(), e.what());
    }
    try {
        return from_json(j);
    } catch (const Error& e) {
        fail("{}: {}", path.string(), e.what());
    } catch (const nlohmann::json::exception& e) {
        fail("{}: unexpected tokenizer.json structure: {}", path.string(), e.what());
    }
}

Tokenizer Tokenizer::from_json(const nlohmann::json& j) {
    Tokenizer t;
    const nlohmann::json null_json;
    const auto& norm = j.contains("normalizer") ? j.at("normalizer") : null_json;
    DSV4_CHECK(norm.is_null() || (norm.value("type", "") == "Sequence" && norm.at("normalizers").empty()),
               "tokenizer.json: normalizers are not supported (found {})", norm.dump());
    check_supported_pre_tokenizer(j.at("pre_tokenizer"));
    const auto& dec = j.at("decoder");
    DSV4_CHECK(dec.value("type", "") == "ByteLevel", "tokenizer.json: decoder must be ByteLevel (found {})", dec.dump());
    t.bpe_ = std::make_unique<BpeModel>(j.at("model"));
    t.plain_added_ = std::make_unique<AddedTokenMatcher>();
    t.normalized_added_ = std::make_unique<AddedTokenMatcher>();
    int32_t max_id = t.bpe_->max_id();
    for (const auto& a : j.at("added_tokens")) {
        AddedToken tok{token_id(a.at("id"), "an added token"), a.at("content").get<std::string>(),
                       a.value("special", false), a.value("normalized", false)};
        DSV4_CHECK(!tok.content.empty(), "tokenizer.json: bad added token {}", a.dump());
        DSV4_CHECK(!a.value("lstrip", false) && !a.value("rstrip", false) && !a.value("single_word", false),
                   "tokenizer.json: added token '{}' uses lstrip/rstrip/single_word, which dsv4 does not implement",
                   tok.content);
        (tok.normalized ? *t.normalized_added_ : *t.plain_added_).add(tok.content, tok.id);
        max_id = std::max(max_id, tok.id);
        t.added_.push_back(std::move(tok));
    }
    t.vocab_size_ = max_id + 1;
    t.id_bytes_.resize(t.vocab_size_);
    t.id_flags_.assign(t.vocab_size_, 0);
    for (int32_t id = 0; id <= t.bpe_->max_id(); ++id)
        if (const std::string* b = t.bpe_->token_bytes(id)) {
            t.id_bytes_[id] = *b;
            t.id_flags_[id] = 1;
        }
    std::string bytes;
    for (const AddedToken& a : t.added_) {
        // HF ByteLevel decoding: a token whose characters are all in the byte alphabet stands for those
        // bytes; otherwise for its own UTF-8.
        t.id_bytes_[a.id] = byte_level_to_bytes(a.content, bytes) ? bytes : a.content;
        t.id_flags_[a.id] = static_cast<uint8_t>(1 | 2 | (a.special ? 4 : 0));
    }
    return t;
}

void Tokenizer::encode_append(std::string_view text, std::vector<int32_t>& out) const {
    std::vector<Piece> pieces;
    std::unique_lock<std::mutex> lock(cache_->mutex, std::try_to_lock);
    auto encode_piece = [&](std::string_view piece) {
        if (!lock.owns_lock() || piece.size() < PieceCache::kMinBytes) return bpe_->encode_piece(piece, out);
        auto& map = cache_->map;
        if (auto it = map.find(std::string(piece)); it != map.end()) {
            out.insert(out.end(), it->second.begin(), it->second.end());
            return;
        }
        const size_t start = out.size();
        bpe_->encode_piece(piece, out);
        if (map.size() >= PieceCache::kMaxEntries) map.clear();
        map.emplace(std::string(piece), std::vector<int32_t>(out.begin() + static_cast<long>(start), out.end()));
    };
    auto encode_gap = [&](size_t b, size_t e) {
        const std::string_view gap = text.substr(b, e - b);
        pretokenize(gap, pieces);
        for (const Piece& p : pieces) encode_piece(gap.substr(p.begin, p.end - p.begin));
    };
    auto push_token = [&](int32_t id) { out.push_back(id); };
    plain_added_->split(
        text,
        [&](size_t b, size_t e) {
            const std::string_view part = text.substr(b, e - b);
            normalized_added_->split(part, [&](size_t pb, size_t pe) { encode_gap(b + pb, b + pe); }, push_token);
        },
        push_token);
}

void Tokenizer::clear_cache() const {
    std::lock_guard<std::mutex> lock(cache_->mutex);
    cache_->map.clear();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
    std::vector<int32_t> ids;
    ids.reserve(text.size() / 3 + 8);
    encode_append(text, ids);
    return ids;
}

const std::string& Tokenizer::token_bytes(int32_t id) const {
    DSV4_CHECK(id >= 0 && id < vocab_size_ && (id_flags_[id] & 1), "token id {} is not in the vocabulary (size {})",
               id, vocab_size_);
    return id_bytes_[id];
}

bool Tokenizer::is_special(int32_t id) const { return id >= 0 && id < vocab_size_ && (id_flags_[id] & 4); }
bool Tokenizer::is_added(int32_t id) const { return id >= 0 && id < vocab_size_ && (id_flags_[id] & 2); }

std::optional<int32_t> Tokenizer::added_token_id(std::string_view content) const {
    for (const AddedToken& a : added_)
        if (a.content == content) return a.id;
    return std::nullopt;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
    std::string bytes;
    for (int32_t id : ids) {
        const std::string& b = token_bytes(id);
        if (!(skip_special_tokens && is_special(id))) bytes += b;
    }
    return utf8_lossy(bytes);
}

std::string IncrementalDecoder::push(int32_t id) {
    const std::string& b = tokenizer_->token_bytes(id);
    if (skip_special_ && tokenizer_->is_special(id)) return {};
    return utf8_.feed(b);
}

}  // namespace dsv4::tok
