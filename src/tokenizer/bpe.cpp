// BPE merging over token ids: an open-addressing table maps an adjacent id pair to (rank, merged id). Short
// pieces use a rank array rescanned per merge; long ones (whitespace runs, long words) a heap with lazy
// invalidation, as HF's word merge does. Both pick the lowest rank, then the leftmost position.
#include "tokenizer/bpe.h"

#include <queue>

#include "core/error.h"
#include "tokenizer/unicode.h"

namespace dsv4::tok {
namespace {

constexpr int32_t kNoRank = INT32_MAX;

uint64_t hash_key(uint64_t k) {
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdull;
    k ^= k >> 33;
    return k;
}

}  // namespace

const std::array<uint32_t, 256>& byte_level_chars() {
    static const std::array<uint32_t, 256> table = [] {
        std::array<uint32_t, 256> t{};
        uint32_t next = 256;
        for (uint32_t b = 0; b < 256; ++b) {
            const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
            t[b] = printable ? b : next++;
        }
        return t;
    }();
    return table;
}

bool byte_level_to_bytes(std::string_view token, std::string& bytes) {
    static const std::array<int16_t, 512> inverse = [] {
        std::array<int16_t, 512> inv;
        inv.fill(-1);
        const auto& chars = byte_level_chars();
        for (int b = 0; b < 256; ++b) inv[chars[b]] = static_cast<int16_t>(b);
        return inv;
    }();
    bytes.clear();
    for (size_t i = 0; i < token.size();) {
        uint32_t cp;
        i += decode_utf8(token, i, cp);
        if (cp >= inverse.size() || inverse[cp] < 0) return false;
        bytes.push_back(static_cast<char>(inverse[cp]));
    }
    return true;
}

int32_t token_id(const nlohmann::json& id, std::string_view what) {
    // get<int32_t>() would convert a fraction or a value out of range (undefined behaviour for a double).
    DSV4_CHECK(id.is_number_integer(), "tokenizer.json: {} has id {}, not an integer", what, id.dump());
    const bool in_range = id.is_number_unsigned() ? id.get<uint64_t>() <= uint64_t(kMaxTokenId)
                                                  : id.get<int64_t>() >= 0 && id.get<int64_t>() <= kMaxTokenId;
    DSV4_CHECK(in_range, "tokenizer.json: {} has id {}, outside 0 .. {}", what, id.dump(), kMaxTokenId);
    return int32_t(id.get<int64_t>());
}

BpeModel::BpeModel(const nlohmann::json& model) {
    DSV4_CHECK(model.is_object() && model.value("type", "") == "BPE", "tokenizer.json: model.type must be \"BPE\"");
    DSV4_CHECK(!model.value("byte_fallback", false) && model.value("continuing_subword_prefix", nlohmann::json()).is_null() &&
                   model.value("end_of_word_suffix", nlohmann::json()).is_null() &&
                   !model.value("ignore_merges", false),
               "tokenizer.json: BPE options other than plain byte-level BPE are not supported");
    const auto& vocab = model.at("vocab");
    DSV4_CHECK(vocab.is_object(), "tokenizer.json: model.vocab must be an object");
    std::string bytes;
    for (const auto& [token, id_json] : vocab.items()) {
        const int32_t id = token_id(id_json, "vocab entry '" + token + "'");
        if (id > max_id_) max_id_ = id;
        // Entries outside the byte-level alphabet (DeepSeek's BOS/EOS/pad duplicates) can never come out of
        // merges; they decode to their own UTF-8, as in HF.
        if (byte_level_to_bytes(token, bytes))
            vocab_.emplace(bytes, id);
        else
            bytes = token;
        if (static_cast<size_t>(id) >= id_bytes_.size()) {
            id_bytes_.resize(id + 1);
            has_id_.resize(id + 1);
        }
        id_bytes_[id] = bytes;
        has_id_[id] = true;
    }
    for (int b = 0; b < 256; ++b) {
        auto it = vocab_.find(std::string(1, static_cast<char>(b)));
        DSV4_CHECK(it != vocab_.end(), "tokenizer.json: byte-level vocab lacks byte 0x{:02X}", b);
        byte_id_[b] = it->second;
    }
    const auto& merges = model.at("merges");
    size_t cap = 1;
    while (cap < merges.size() * 2 + 2) cap <<= 1;
    merges_.assign(cap, Merge{});
    mask_ = cap - 1;
    std::string left, right;
    for (size_t rank = 0; rank < merges.size(); ++rank) {
        const auto& m = merges[rank];
        std::string a, b;
        if (m.is_string()) {
            const std::string s = m.get<std::string>();
            const size_t sp = s.find(' ');
            DSV4_CHECK(sp != std::string::npos && s.find(' ', sp + 1) == std::string::npos,
                       "tokenizer.json: bad merge '{}'", s);
            a = s.substr(0, sp);
            b = s.substr(sp + 1);
        } else {
            DSV4_CHECK(m.is_array() && m.size() == 2, "tokenizer.json: bad merge entry {}", m.dump());
            a = m[0].get<std::string>();
            b = m[1].get<std::string>();
        }
        DSV4_CHECK(byte_level_to_bytes(a, left) && byte_level_to_bytes(b, right),
                   "tokenizer.json: merge '{} {}' is not byte-level", a, b);
        auto ia = vocab_.find(left), ib = vocab_.find(right), im = vocab_.find(left + right);
        DSV4_CHECK(ia != vocab_.end() && ib != vocab_.end() && im != vocab_.end(),
                   "tokenizer.json: merge '{} {}' uses a token missing from the vocabulary", a, b);
        insert_merge(ia->second, ib->second, static_cast<int32_t>(rank), im->second);  // a repeated pair: last wins, as HF
    }
}

const BpeModel::Merge* BpeModel::find_merge(int32_t left, int32_t right) const {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    for (uint64_t h = hash_key(key) & mask_;; h = (h + 1) & mask_) {
        const Merge& m = merges_[h];
        if (m.key == key) return &m;
        if (m.key == kEmpty) return nullptr;
    }
}

void BpeModel::insert_merge(int32_t left, int32_t right, int32_t rank, int32_t id) {
    const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
    uint64_t h = hash_key(key) & mask_;
    while (merges_[h].key != kEmpty && merges_[h].key != key) h = (h + 1) & mask_;
    merges_[h] = Merge{key, rank, id};
}

const std::string* BpeModel::token_bytes(int32_t id) const {
    if (id < 0 || static_cast<size_t>(id) >= id_bytes_.size() || !has_id_[id]) return nullptr;
    return &id_bytes_[id];
}

void BpeModel::encode_piece(std::string_view bytes, std::vector<int32_t>& out) const {
    if (bytes.size() == 1) {
        out.push_back(byte_id_[static_cast<unsigned char>(bytes[0])]);
        return;
    }
    if (bytes.size() > kSmallPiece) {
        std::vector<int32_t> sym(bytes.size());
        for (size_t i = 0; i < bytes.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
        merge_large(sym);
        out.insert(out.end(), sym.begin(), sym.end());
        return;
    }
    int32_t sym[kSmallPiece];
    for (size_t i = 0; i < bytes.size(); ++i) sym[i] = byte_id_[static_cast<unsigned char>(bytes[i])];
    const size_t n = merge_small(sym, bytes.size());
    out.insert(out.end(), sym, sym + n);
}

size_t BpeModel::merge_small(int32_t* sym, size_t n) const {
    // rank[i] / merged[i]: the merge of the pair (sym[i], sym[i+1]).
    int32_t rank[kSmallPiece], merged[kSmallPiece];
    auto look = [&](size_t i) {
        const Merge* m = find_merge(sym[i], sym[i + 1]);
        rank[i] = m ? m->rank : kNoRank;
        merged[i] = m ? m->id : -1;
    };
    for (size_t i = 0; i + 1 < n; ++i) look(i);
    while (n > 1) {
        size_t best = 0;
        for (size_t i = 1; i + 1 < n; ++i)
            if (rank[i] < rank[best]) best = i;
        if (rank[best] == kNoRank) break;
        sym[best] = merged[best];
        for (size_t i = best + 1; i + 1 < n; ++i) {
            sym[i] = sym[i + 1];
            rank[i] = rank[i + 1];
            merged[i] = merged[i + 1];
        }
        --n;
        if (best > 0) look(best - 1);
        if (best + 1 < n) look(best);
    }
    return n;
}

void BpeModel::merge_large(std::vector<int32_t>& sym) const {
    struct Node {
        int32_t id;
        int32_t prev, next;  // -1 at the ends
        bool alive;
    };
    struct Cand {
        int32_t rank, pos, id;
        bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
    };
    const int32_t n = static_cast<int32_t>(sym.size());
    std::vector<Node> nodes(n);
    for (int32_t i = 0; i < n; ++i) nodes[i] = {sym[i], i - 1, i + 1 < n ? i + 1 : -1, true};
    std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> heap;
    auto push = [&](int32_t pos) {
        if (pos < 0 || nodes[pos].next < 0) return;
        if (const Merge* m = find_merge(nodes[pos].id, nodes[nodes[pos].next].id)) heap.push({m->rank, pos, m->id});
    };
    for (int32_t i = 0; i + 1 < n; ++i) push(i);
    while (!heap.empty()) {
        const Cand c = heap.top();
        heap.pop();
        Node& left = nodes[c.pos];
        if (!left.alive || left.next < 0) continue;
        const Merge* m = find_merge(left.id, nodes[left.next].id);
        if (!m || m->id != c.id || m->rank != c.rank) continue;  // stale entry
        Node& right = nodes[left.next];
        left.id = c.id;
        right.alive = false;
        left.next = right.next;
        if (right.next >= 0) nodes[right.next].prev = c.pos;
        push(left.prev);
        push(c.pos);
    }
    sym.clear();
    for (int32_t i = 0; i >= 0 && i < n; i = nodes[i].next) sym.push_back(nodes[i].id);
}

}  // namespace dsv4::tok
