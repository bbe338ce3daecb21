// Token order: see token_order.h. Each logit becomes a 32-bit key that sorts as the logit descends; with the id in
// the low 32 bits, one 64-bit integer per token orders exactly as the stable sort by logit does. The whole
// vocabulary is put in that order by a radix sort; the first few ids by a histogram cut and a small sort.
#include "runtime/token_order.h"

#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <utility>

#include "core/error.h"

namespace dsv4 {
namespace {

// A float's place in descending order as an unsigned integer (larger values, smaller keys); -0.0 is +0.0.
uint32_t descending_key(float x) {
    uint32_t bits = std::bit_cast<uint32_t>(x);
    if (bits == 0x80000000u) bits = 0;
    const uint32_t ascending = (bits & 0x80000000u) ? ~bits : (bits | 0x80000000u);
    return ~ascending;
}

uint64_t packed(float x, int64_t id) { return (uint64_t(descending_key(x)) << 32) | uint32_t(id); }

constexpr int kDigitBits = 11;
constexpr int kBuckets = 1 << kDigitBits;
constexpr uint32_t kDigitMask = kBuckets - 1;

// Stable LSD radix sort by the upper 32 bits, 11 bits a pass (3 passes). Entries arrive in ascending id order, so
// equal keys keep it. A pass whose digit is the same for every entry moves nothing and is skipped.
void radix_sort_by_key(std::vector<uint64_t>& keys, std::vector<uint64_t>& swap) {
    constexpr int kPasses = 3;
    constexpr std::array<int, kPasses> shifts = {32, 32 + kDigitBits, 32 + 2 * kDigitBits};
    std::array<std::array<uint32_t, kBuckets>, kPasses> counts{};
    for (uint64_t k : keys)
        for (int p = 0; p < kPasses; ++p) ++counts[size_t(p)][(k >> shifts[size_t(p)]) & kDigitMask];
    swap.resize(keys.size());
    for (int p = 0; p < kPasses; ++p) {
        auto& count = counts[size_t(p)];
        if (std::find(count.begin(), count.end(), uint32_t(keys.size())) != count.end()) continue;
        uint32_t offset = 0;
        for (uint32_t& c : count) offset += std::exchange(c, offset);  // exclusive prefix sums: each bucket's start
        const int shift = shifts[size_t(p)];
        for (uint64_t k : keys) swap[count[(k >> shift) & kDigitMask]++] = k;
        keys.swap(swap);
    }
}

}  // namespace

LogitScan scan_logits(const float* logits, int64_t vocab) {
    DSV4_CHECK(vocab >= 1, "an empty row of logits");
    // Blocks of plain max / NaN reductions (they vectorize), then the first index of the best block's maximum: the
    // first index of the row's maximum, as a scan with `>` finds it (-0.0 and +0.0 are equal to both).
    constexpr int64_t kBlock = 2048;
    LogitScan scan;
    float best = -std::numeric_limits<float>::infinity();
    bool found = false;
    for (int64_t begin = 0; begin < vocab; begin += kBlock) {
        const int64_t end = std::min(vocab, begin + kBlock);
        float m = logits[begin];
        bool nan = false;
        for (int64_t i = begin; i < end; ++i) {
            const float x = logits[i];
            m = x > m ? x : m;
            nan |= x != x;
        }
        if (nan) return {true, 0};
        if (!found || m > best) {
            best = m;
            found = true;
            scan.argmax = std::find(logits + begin, logits + end, m) - logits;
        }
    }
    return scan;
}

void most_likely(const float* logits, int64_t vocab, int64_t count, std::vector<int32_t>& ids,
                 TokenOrderScratch& scratch) {
    DSV4_CHECK(count >= 1 && count <= vocab && vocab <= int64_t(std::numeric_limits<int32_t>::max()),
               "most_likely: {} of {} ids", count, vocab);
    std::vector<uint64_t>& keys = scratch.keys;
    keys.clear();
    if (count * 16 <= vocab) {
        // A few ids: the histogram of the keys' top 11 bits says which buckets hold the `count` best; only their
        // entries are kept, and only the first `count` of those sorted.
        constexpr int kTopShift = 32 - kDigitBits;
        std::array<uint32_t, kBuckets> hist{};
        for (int64_t i = 0; i < vocab; ++i) ++hist[descending_key(logits[i]) >> kTopShift];
        uint32_t last = 0;
        for (int64_t seen = 0; (seen += hist[last]) < count;) ++last;
        for (int64_t i = 0; i < vocab; ++i)
            if ((descending_key(logits[i]) >> kTopShift) <= last) keys.push_back(packed(logits[i], i));
        std::nth_element(keys.begin(), keys.begin() + (count - 1), keys.end());
        std::sort(keys.begin(), keys.begin() + count);
    } else {
        keys.resize(size_t(vocab));
        for (int64_t i = 0; i < vocab; ++i) keys[size_t(i)] = packed(logits[i], i);
        radix_sort_by_key(keys, scratch.swap);
    }
    ids.resize(size_t(count));
    for (int64_t i = 0; i < count; ++i) ids[size_t(i)] = int32_t(keys[size_t(i)] & 0xFFFFFFFFu);
}

}  // namespace dsv4
